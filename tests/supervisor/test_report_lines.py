"""`run`'s report as lines: what each outcome says, the summary, held lines, escaping."""

from __future__ import annotations

import io

import pytest

from otel_lifecycle_hooks.actions.base import AttemptResult
from otel_lifecycle_hooks.engine.model import Execution, LifecycleEvent
from otel_lifecycle_hooks.supervisor.report import HELD_LINES_LIMIT, QUIET, VERBOSE, RunReport
from otel_lifecycle_hooks.template.model import HookAction, HookSpec

EVENT = LifecycleEvent("session-end")


def _execution(name: str, outcome: str, **values: object) -> Execution:
    hook = HookSpec(name=name, on=("session-end",), action=HookAction(type="webhook"))
    fields: dict[str, object] = {
        "hook": hook,
        "event": EVENT,
        "session_id": "s",
        "outcome": outcome,
        "attempts": 1,
        "duration": 0.25,
        "started_at": 0.0,
        "idempotency_key": "k",
    }
    fields.update(values)
    return Execution(**fields)  # type: ignore[arg-type]


def test_the_summary_counts_every_delivery_and_names_each_failure() -> None:
    report = RunReport(stream=io.StringIO(), hold=False)
    for name in ("a", "b", "c", "d"):
        report.recorded(_execution(name, "success", status_code=200), None)
    report.recorded(
        _execution("notify-slack", "failed", status_code=503, attempts=4, message="HTTP 503"), 42
    )
    assert report.summary() == (
        "5 deliveries: 4 ok, 1 failed: notify-slack 503 after 4 attempts, history 42"
    )


@pytest.mark.parametrize(
    "message",
    ["run interrupted during attempt 1", "interrupted: still running at the shutdown deadline"],
    ids=["its run recorded it", "the shutdown recorded it"],
)
def test_an_interrupted_delivery_has_a_line_and_its_own_count_whoever_recorded_it(
    message: str,
) -> None:
    stream = io.StringIO()
    report = RunReport(stream=stream, hold=False)
    report.recorded(_execution("bad", "failed", exit_code=3), 8)
    report.recorded(
        _execution("notify", "interrupted", error_type="interrupted", message=message), 9
    )
    assert stream.getvalue().splitlines()[1] == (
        f"otel-lifecycle-hooks: hook notify (session-end) interrupted in 250ms (history 9): "
        f"{message}"
    )
    assert report.summary() == (
        "2 deliveries: 0 ok, 1 failed, 1 interrupted: bad exit 3, history 8; "
        "notify interrupted, history 9"
    )


def test_quiet_writes_nothing_and_verbose_writes_successes() -> None:
    quiet, loud = io.StringIO(), io.StringIO()
    for stream, level in ((quiet, QUIET), (loud, VERBOSE)):
        report = RunReport(level, stream=stream, hold=False)
        report.recorded(_execution("ok", "success", status_code=204), 7)
        report.recorded(_execution("bad", "failed", exit_code=3), 8)
        report.finish()
    assert quiet.getvalue() == ""
    lines = loud.getvalue().splitlines()
    assert lines == [
        "otel-lifecycle-hooks: hook ok (session-end) success in 250ms (history 7): 204",
        "otel-lifecycle-hooks: hook bad (session-end) failed in 250ms (history 8): exit 3",
        "otel-lifecycle-hooks: 2 deliveries: 1 ok, 1 failed: bad exit 3, history 8",
    ]


def test_a_retry_line_says_which_attempt_of_how_many_and_the_wait() -> None:
    stream = io.StringIO()
    report = RunReport(stream=stream, hold=False)
    hook = HookSpec(name="n", on=("session-end",), action=HookAction(type="webhook"))
    result = AttemptResult(
        "transient", 0.1, status_code=503, message="HTTP 503 Service Unavailable"
    )
    report.retrying(hook, EVENT, 2, 4, 2.0, result)
    assert stream.getvalue() == (
        "otel-lifecycle-hooks: hook n (session-end) attempt 2 of 4 failed: "
        "HTTP 503 Service Unavailable; retrying in 2s\n"
    )


def test_held_lines_come_out_at_the_end_bounded() -> None:
    stream = io.StringIO()
    report = RunReport(stream=stream, hold=True)
    for index in range(HELD_LINES_LIMIT + 5):
        report.recorded(_execution(f"h{index}", "failed", exit_code=1), index)
    assert stream.getvalue() == ""  # nothing while the agent owns the terminal
    report.finish()
    lines = stream.getvalue().splitlines()
    assert len(lines) == HELD_LINES_LIMIT + 2
    assert lines[-2] == "otel-lifecycle-hooks: ... 5 more lines in the hook log"
    assert lines[-1].startswith(f"otel-lifecycle-hooks: {HELD_LINES_LIMIT + 5} deliveries: 0 ok")
    assert "and 200 more (see `history --failed`)" in lines[-1]


def test_what_an_endpoint_wrote_is_escaped_in_a_line() -> None:
    stream = io.StringIO()
    report = RunReport(stream=stream, hold=False)
    report.recorded(
        _execution("n", "failed", error_type="http.500", status_code=500, message="\x1b]0;x\x07"),
        None,
    )
    assert "\x1b" not in stream.getvalue() and "\\x1b]0;x\\x07" in stream.getvalue()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_a_failure_is_red_a_retry_yellow_and_no_color_turns_both_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    terminal = _Terminal()
    report = RunReport(stream=terminal, hold=False)
    hook = HookSpec(name="h", on=("session-end",), action=HookAction(type="webhook"))
    result = AttemptResult("transient", 0.1, status_code=503, message="HTTP 503")
    report.retrying(hook, EVENT, 1, 4, 1.0, result)
    report.recorded(_execution("bad", "failed", exit_code=3), None)
    retry, failure = terminal.getvalue().splitlines()
    assert retry.startswith("\x1b[33motel-lifecycle-hooks: hook h (session-end) attempt 1 of 4")
    assert retry.endswith("; retrying in 1s\x1b[0m")
    assert failure == (
        "\x1b[31motel-lifecycle-hooks: hook bad (session-end) failed in 250ms: exit 3\x1b[0m"
    )

    monkeypatch.setenv("NO_COLOR", "1")
    plain = _Terminal()
    report = RunReport(stream=plain, hold=False)
    report.recorded(_execution("bad", "failed", exit_code=3), None)
    assert plain.getvalue() == (
        "otel-lifecycle-hooks: hook bad (session-end) failed in 250ms: exit 3\n"
    )
