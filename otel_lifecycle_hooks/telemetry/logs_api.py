"""The OpenTelemetry Logs API and SDK names the package uses, wherever this release keeps them.

Up to at least 1.45 the Python packages ship logs under underscore names
(`opentelemetry._logs`, `opentelemetry.sdk._logs`); the public names are looked up first so
that the package keeps working when they are renamed.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING


def _first(*names: str) -> ModuleType:
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(f"none of {', '.join(names)} is installed")


_api = _first("opentelemetry.logs", "opentelemetry._logs")

__all__ = ["LogRecord", "SeverityNumber", "get_logger_provider", "sdk_logs"]

if TYPE_CHECKING:
    # The names as 1.45 keeps them; at run time they come from whichever module is installed.
    from opentelemetry._logs import LogRecord, SeverityNumber, get_logger_provider
else:
    LogRecord = _api.LogRecord
    SeverityNumber = _api.SeverityNumber
    get_logger_provider = _api.get_logger_provider


def sdk_logs() -> ModuleType:
    """The SDK's logs module (LoggerProvider, LogRecordProcessor, ...)."""
    return _first("opentelemetry.sdk.logs", "opentelemetry.sdk._logs")
