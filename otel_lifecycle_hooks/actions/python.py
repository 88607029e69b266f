"""One attempt of an in-process Python call: bounded in time, isolated in its failures.

Python code cannot be killed from outside, so the call runs on a daemon thread of its own and
the attempt waits for it at most `timeout` seconds. A call that overruns is reported as a
timeout and left to finish (or not) on its thread; the hook's worker, and the agent, move on.

error_type values: the exception's class name (`RuntimeError`, `ImportError` ...), `timeout`.
Messages hold the exception's text, clipped; what a hook raises is its author's to keep clean.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .base import AttemptResult

MESSAGE_LIMIT = 300  # characters of an exception's text kept in the result


@dataclass(frozen=True)
class CallOutcome:
    """The attempt's result and, when the call returned, what it returned."""

    result: AttemptResult
    value: Any = None
    exception: BaseException | None = None


def call_bounded(function: Callable[[], Any], timeout: float, *, name: str = "call") -> CallOutcome:
    """Run `function()` on its own thread and wait at most `timeout` seconds. Never raises."""
    started = time.monotonic()
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = function()
        except BaseException as exc:  # noqa: BLE001 - every failure of a hook is its outcome
            box["exception"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name=f"python-hook:{name}", daemon=True).start()
    finished = done.wait(max(0.0, timeout))
    duration = time.monotonic() - started
    if not finished:
        message = f"{name} still running after {timeout:g}s; left behind on its thread"
        return CallOutcome(
            AttemptResult("timeout", duration, error_type="timeout", message=message)
        )
    exception = box.get("exception")
    if exception is not None:
        return CallOutcome(exception_result(exception, duration, name), exception=exception)
    return CallOutcome(AttemptResult("ok", duration), value=box.get("value"))


def exception_result(exception: BaseException, duration: float, name: str) -> AttemptResult:
    """A permanent failure naming the exception's class, with its text clipped."""
    text = str(exception)
    if len(text) > MESSAGE_LIMIT:
        text = text[:MESSAGE_LIMIT] + "..."
    kind = type(exception).__name__
    message = f"{name} raised {kind}: {text}" if text else f"{name} raised {kind}"
    return AttemptResult("permanent", duration, error_type=kind, message=message)
