"""The OpenTelemetry Logs API and SDK names the package uses, wherever this release keeps them.

Up to at least 1.45 the Python packages ship logs under underscore names
(`opentelemetry._logs`, `opentelemetry.sdk._logs`); the public names are looked up first so
that the package keeps working when they are renamed.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


def _first(*names: str) -> ModuleType:
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(f"none of {', '.join(names)} is installed")


_api = _first("opentelemetry.logs", "opentelemetry._logs")

LogRecord: Any = _api.LogRecord
SeverityNumber: Any = _api.SeverityNumber
get_logger_provider: Any = _api.get_logger_provider


def sdk_logs() -> ModuleType:
    """The SDK's logs module (LoggerProvider, LogRecordProcessor, ...)."""
    return _first("opentelemetry.sdk.logs", "opentelemetry.sdk._logs")
