"""What `run` tells the operator: one line per hook that fails, is refused, is interrupted,
retries or is dropped (every execution with `-v`, nothing with `-q`), and a summary when the
run ends. The
package's logged warnings come the same way (`-q`: only its errors).

Where the lines go is decided once, at start: an agent that owns the terminal (its stdin and
stdout are a terminal, and so is our stderr) draws its own screen, and a line written into it
would corrupt it. Then the lines are held (bounded) and printed after the agent exited, just
before the summary. Otherwise (stderr redirected, or an agent that is not interactive) each
line goes to stderr as it happens. The hook log has every line either way.
"""

from __future__ import annotations

import sys
import threading
from typing import IO, TYPE_CHECKING

from ..engine.observers import ExecutionWatcher
from ..terminal import RED, YELLOW, escape_control, paint, wants_colour

if TYPE_CHECKING:
    from ..actions.base import AttemptResult
    from ..engine.model import Execution, LifecycleEvent
    from ..template.model import HookSpec

PREFIX = "otel-lifecycle-hooks: "
QUIET, NORMAL, VERBOSE = 0, 1, 2
# Lines held while an interactive agent owns the terminal; the rest are counted.
HELD_LINES_LIMIT = 200
# Failures named one by one in the summary.
SUMMARY_FAILURES_LIMIT = 5
# A message (which may quote a response) is cut to this in a line.
MESSAGE_LIMIT = 160
# An interrupted delivery (`run`'s second signal, or the shutdown's deadline) may not have
# arrived: a line as for a failure, its own count in the summary.
INTERRUPTED = "interrupted"
PROBLEM_OUTCOMES = ("failed", "timeout", "refused", INTERRUPTED)
# How a line is painted: a problem red, a warning (a retry, a drop) yellow.
PROBLEM, WARNING = "problem", "warning"
# Drops come by the thousand under a flood: one line for a hook's first drop of a reason, then
# one per this many (the summary counts every one, as the dropped metric does).
DROP_LINE_EVERY = 1000
# The engine logs its own queue overflows at that pace (engine/dispatch.py): no second line.
ENGINE_LOGGED_DROPS = frozenset({"queue_full"})


def agent_owns_terminal(
    stdin: IO[str] | None = None, stdout: IO[str] | None = None, stderr: IO[str] | None = None
) -> bool:
    """True when a line written to our stderr would land in an interactive agent's screen."""
    streams = (stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr)
    try:
        return all(stream is not None and stream.isatty() for stream in streams)
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


class RunReport(ExecutionWatcher):
    """Counts every delivery of a run and writes the lines the operator should see."""

    def __init__(
        self,
        verbosity: int = NORMAL,
        stream: IO[str] | None = None,
        hold: bool | None = None,  # None: hold while the agent owns the terminal
    ) -> None:
        self.verbosity = verbosity
        self._stream = stream if stream is not None else sys.stderr
        self._hold = agent_owns_terminal() if hold is None else hold
        self._colour: bool | None = None  # decided at the first line painted
        self._lock = threading.Lock()
        self._held: list[str] = []
        self._held_over = 0
        self.counts: dict[str, int] = {}
        self.dropped_count = 0
        self._drops: dict[tuple[str, str], int] = {}  # (hook, reason) -> dropped so far
        self.failures: list[str] = []  # "notify-slack 503 after 4 attempts, history 42"

    # -- ExecutionWatcher --

    def recorded(self, execution: Execution, history_id: int | None) -> None:
        outcome = execution.outcome
        with self._lock:
            self.counts[outcome] = self.counts.get(outcome, 0) + 1
            if outcome in PROBLEM_OUTCOMES:
                self.failures.append(_failure_summary(execution, history_id))
        if outcome in PROBLEM_OUTCOMES:
            self._line(_execution_line(execution, history_id), PROBLEM)
        elif self.verbosity >= VERBOSE:
            self._line(_execution_line(execution, history_id), None)

    def retrying(
        self,
        hook: HookSpec,
        event: LifecycleEvent,
        attempt: int,
        max_attempts: int,
        delay: float,
        result: AttemptResult,
    ) -> None:
        self._line(
            f"{_who(hook.name, event.name)} attempt {attempt} of {max_attempts} failed: "
            f"{_reason(result.status_code, result.exit_code, result.error_type, result.message)}"
            f"; retrying in {_seconds(delay)}",
            WARNING,
        )

    def dropped(self, hook: HookSpec, event: LifecycleEvent, reason: str) -> None:
        """Counts every drop; a line for a hook's first drop of `reason` and then one per
        `DROP_LINE_EVERY`, saying how many so far (none for the drops the engine logs)."""
        with self._lock:
            self.dropped_count += 1
            key = (hook.name, reason)
            so_far = self._drops[key] = self._drops.get(key, 0) + 1
        if reason in ENGINE_LOGGED_DROPS or (so_far > 1 and so_far % DROP_LINE_EVERY):
            return
        text = f"{_who(hook.name, event.name)} dropped: {reason}"
        if so_far > 1:
            text += f" ({so_far} dropped so far; one line per {DROP_LINE_EVERY:,})"
        self._line(text, WARNING)

    def diagnostic(self, text: str, is_error: bool) -> None:
        """A warning or error the package logged (an unresolved variable, a journal that
        cannot be written): a line like the others, held while the agent owns the terminal.
        `-q` keeps only the errors."""
        self._line(_escaped(text), PROBLEM if is_error else WARNING, always=is_error)

    # -- the end --

    def finish(self) -> None:
        """Print what was held, then the summary (with `-q`, only the errors held)."""
        with self._lock:
            held, self._held, self._hold = self._held, [], False
            over, self._held_over = self._held_over, 0
        for text in held:
            self._write(text)
        if over:
            self._write(f"{PREFIX}... {over} more lines in the hook log")
        if self.verbosity <= QUIET:
            return
        summary = self.summary()
        if summary:
            line = PREFIX + summary
            self._write(self._painted(line, PROBLEM) if self.failures else line)

    def summary(self) -> str:
        """ "5 deliveries: 4 ok, 1 failed: notify-slack 503 after 4 attempts, history 42"."""
        with self._lock:
            counts = dict(self.counts)
            failures = list(self.failures)
            dropped = self.dropped_count
        total = sum(count for outcome, count in counts.items() if outcome != "skipped")
        if not total and not dropped and not counts:
            return ""
        parts = [f"{counts.get('success', 0)} ok"]
        interrupted = counts.get(INTERRUPTED, 0)
        failed = sum(counts.get(outcome, 0) for outcome in PROBLEM_OUTCOMES) - interrupted
        if failed:
            parts.append(f"{failed} failed")
        if interrupted:
            parts.append(f"{interrupted} interrupted")
        if counts.get("skipped"):
            parts.append(f"{counts['skipped']} skipped")
        if dropped:
            parts.append(f"{dropped} dropped")
        text = f"{total} {'delivery' if total == 1 else 'deliveries'}: " + ", ".join(parts)
        if failures:
            named = failures[:SUMMARY_FAILURES_LIMIT]
            text += ": " + "; ".join(named)
            if len(failures) > len(named):
                text += f"; and {len(failures) - len(named)} more (see `history --failed`)"
        return text

    # -- output --

    def _line(self, text: str, kind: str | None, always: bool = False) -> None:
        if self.verbosity <= QUIET and not always:
            return
        line = PREFIX + text
        if kind is not None:
            line = self._painted(line, kind)
        with self._lock:
            if self._hold:
                if len(self._held) < HELD_LINES_LIMIT:
                    self._held.append(line)
                else:
                    self._held_over += 1
                return
        self._write(line)

    def _painted(self, line: str, kind: str) -> str:
        if self._colour is None:
            self._colour = wants_colour(self._stream)
        return paint(line, RED if kind == PROBLEM else YELLOW, self._colour)

    def _write(self, line: str) -> None:
        try:
            self._stream.write(line + "\n")
            self._stream.flush()
        except (OSError, ValueError):  # a closed stderr must not stop a hook
            pass


def _escaped(text: object) -> str:
    """`text` with its control characters escaped (the agent controls it)."""
    return escape_control(text)


def _who(hook: str, event: str) -> str:
    return f"hook {_escaped(hook)} ({event})"


def _execution_line(execution: Execution, history_id: int | None) -> str:
    """`hook NAME (EVENT) OUTCOME [after N attempts] in D [(history ID)]: REASON`"""
    outcome = execution.outcome
    text = f"{_who(execution.hook.name, execution.event.name)} {outcome}"
    if execution.attempts > 1:
        text += f" after {execution.attempts} attempts"
    text += f" in {_seconds(execution.duration)}"
    if history_id is not None:
        text += f" (history {history_id})"
    if outcome == "success":
        if execution.status_code is not None:
            text += f": {execution.status_code}"
    elif outcome == "skipped":
        text += f": {_escaped(_cut(execution.message))}" if execution.message else ""
    else:
        text += ": " + _reason(
            execution.status_code, execution.exit_code, execution.error_type, execution.message
        )
    return text


def _failure_summary(execution: Execution, history_id: int | None) -> str:
    if execution.status_code is not None:
        reason = str(execution.status_code)
    elif execution.exit_code is not None:
        reason = f"exit {execution.exit_code}"
    else:
        reason = _escaped(execution.error_type or execution.outcome)
    text = f"{_escaped(execution.hook.name)} {reason}"
    if execution.attempts > 1:
        text += f" after {execution.attempts} attempts"
    if history_id is not None:
        text += f", history {history_id}"
    return text


def _reason(
    status_code: int | None, exit_code: int | None, error_type: str | None, message: str
) -> str:
    """The status or exit code, then the error type and message: what went wrong, in a line."""
    parts = []
    if status_code is not None:
        if str(status_code) not in message:
            parts.append(str(status_code))
    elif exit_code is not None:
        parts.append(f"exit {exit_code}")
    redundant = (f"http.{status_code}", f"exit.{exit_code}")
    if error_type and error_type not in redundant and error_type not in message:
        parts.append(error_type)
    if message and message != f"exited with code {exit_code}":
        parts.append(_cut(message))
    return _escaped(" ".join(parts) or "failed")


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


def _seconds(value: float) -> str:
    if value < 1:
        return f"{value * 1000:.0f}ms"
    return f"{value:.1f}s".replace(".0s", "s")
