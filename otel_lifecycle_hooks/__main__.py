import os
import sys

# `python -m` puts the working directory first on sys.path, and a supervisor's working
# directory may be its agent's workspace: every module imported later (the journal's sqlite3
# is imported once the agent runs) would be looked up there first, a file the agent left
# there run with the supervisor's rights. The package itself is imported already.
if sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from otel_lifecycle_hooks.cli.main import main  # after sys.path is made safe

sys.exit(main())
