import sys

from otel_lifecycle_hooks.cli.main import main

sys.exit(main())
