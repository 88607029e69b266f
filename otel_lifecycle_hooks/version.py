"""The package's version (pyproject.toml's), for the HTTP User-Agent, the host protocol's
handshake and `--version`: here rather than in the package's `__init__`, which re-exports the
engine, so that the layers below it can read it."""

__version__ = "0.1.0"
