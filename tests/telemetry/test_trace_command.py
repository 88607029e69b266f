"""`otel-lifecycle-hooks trace`: a waterfall of a trace file written by the real SDK."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from opentelemetry.trace import SpanKind, Status, StatusCode

from otel_lifecycle_hooks.cli.trace import render_waterfall
from otel_lifecycle_hooks.telemetry.setup import configure_telemetry
from otel_lifecycle_hooks.telemetry.tracefile import read_trace_file


def _record_session(trace_file: Path) -> None:
    """A session as SPEC section 4 names it: lifecycle span events and hook child spans."""
    telemetry = configure_telemetry({}, {"HOME": str(trace_file.parent)}, trace_file=trace_file)
    tracer = telemetry.tracer_provider.get_tracer("test")
    session_attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "reviewer"}
    with tracer.start_as_current_span("invoke_agent reviewer", attributes=session_attributes) as s:
        s.add_event("agent.lifecycle.pre_start", {"agent.lifecycle.event": "pre-start"})
        s.add_event("agent.lifecycle.post_start", {"agent.lifecycle.event": "post-start"})
        hook: dict[str, str | int] = {
            "agent.lifecycle_hook.name": "register-agent",
            "agent.lifecycle_hook.event": "post-start",
            "agent.lifecycle_hook.outcome": "success",
            "agent.lifecycle_hook.attempts": 1,
        }
        client = {"http.response.status_code": 201}
        with (
            tracer.start_as_current_span("agent.lifecycle_hook register-agent", attributes=hook),
            tracer.start_as_current_span("POST", kind=SpanKind.CLIENT, attributes=client),
        ):
            time.sleep(0.002)
        s.add_event("agent.lifecycle.pre_stop", {"agent.lifecycle.event": "pre-stop"})
        failed: dict[str, str | int] = {
            "agent.lifecycle_hook.name": "cleanup",
            "agent.lifecycle_hook.event": "pre-stop",
            "agent.lifecycle_hook.outcome": "timeout",
            "agent.lifecycle_hook.attempts": 2,
        }
        with tracer.start_as_current_span(
            "agent.lifecycle_hook cleanup", attributes=failed
        ) as span:
            span.add_event("agent.lifecycle_hook.retry", {"agent.lifecycle_hook.retry.attempt": 2})
            span.set_status(Status(StatusCode.ERROR, "deadline passed after 10s"))
    telemetry.shutdown()


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    path = tmp_path / "traces" / "session.jsonl"
    _record_session(path)
    return path


def _run_cli(
    *args: str, env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "trace", *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_the_waterfall_shows_session_events_and_hooks_in_time_order(trace_file: Path) -> None:
    result = _run_cli(str(trace_file))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("invoke_agent reviewer")
    assert "\x1b[" not in result.stdout  # not a TTY: no colour
    assert max(len(line) for line in lines) <= 100

    def index(fragment: str) -> int:
        return next(i for i, line in enumerate(lines) if fragment in line)

    assert index("◆ pre_start") < index("◆ post_start")
    assert index("◆ post_start") < index("✓ register-agent")
    assert index("✓ register-agent") < index("POST 201") < index("◆ pre_stop")
    assert index("◆ pre_stop") < index("⏱ cleanup")
    register = lines[index("✓ register-agent")]
    assert "post-start" in register and "×1" in register and "█" in register
    assert register.rstrip().endswith("ms")
    client = lines[index("POST 201")]
    assert client.index("POST") > register.index("register")  # nested: indented further
    assert "+0.0" in lines[index("◆ post_start")]
    assert "✗ deadline passed after 10s" in lines[index("⏱ cleanup") + 1]
    assert "↻ retry" in lines[index("⏱ cleanup") + 2]


def test_without_a_file_the_newest_in_the_trace_dir_is_shown(trace_file: Path) -> None:
    older = trace_file.parent / "older.jsonl"
    older.write_text(json.dumps({"span_id": "01", "trace_id": "aa", "name": "old session"}) + "\n")
    os.utime(older, (1, 1))
    result = _run_cli(env_extra={"OTEL_LIFECYCLE_HOOKS_TRACE_DIR": str(trace_file.parent)})
    assert result.returncode == 0, result.stderr
    assert "invoke_agent reviewer" in result.stdout and "old session" not in result.stdout


def test_json_output_carries_every_span(trace_file: Path) -> None:
    result = _run_cli(str(trace_file), "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    names = sorted(span["name"] for span in document["spans"])
    assert names == [
        "POST",
        "agent.lifecycle_hook cleanup",
        "agent.lifecycle_hook register-agent",
        "invoke_agent reviewer",
    ]


def test_a_missing_trace_dir_is_an_error_with_a_message(tmp_path: Path) -> None:
    result = _run_cli(env_extra={"OTEL_LIFECYCLE_HOOKS_TRACE_DIR": str(tmp_path / "none")})
    assert result.returncode == 1
    assert "no trace files" in result.stderr


def test_render_with_colour_marks_outcomes(trace_file: Path) -> None:
    text = render_waterfall(read_trace_file(trace_file), width=100, color=True)
    assert "\x1b[32m✓\x1b[0m" in text and "\x1b[33m⏱\x1b[0m" in text


def test_lifecycle_event_rows_say_where_the_agent_went() -> None:
    from otel_lifecycle_hooks.cli.trace import _event_detail

    assert (
        _event_detail(
            {
                "agent.lifecycle.event": "phase-change",
                "agent.phase": "running",
                "agent.phase.previous": "starting",
                "agent.activity": "idle",  # the activity is not news on a phase change
            }
        )
        == "starting → running"
    )
    assert (
        _event_detail(
            {
                "agent.lifecycle.event": "activity-change",
                "agent.activity": "executing",
                "agent.activity.previous": "thinking",
                "gen_ai.tool.name": "Bash",
            }
        )
        == "thinking → executing tool Bash"
    )
    assert (
        _event_detail({"agent.lifecycle.event": "session-end", "process.exit.code": 143})
        == "exit 143"
    )


def _record_sessions(trace_file: Path, names: list[str], failure: str = "") -> None:
    """One session per name, one after the other, each with one hook (failing with `failure`)."""
    telemetry = configure_telemetry({}, {"HOME": str(trace_file.parent)}, trace_file=trace_file)
    tracer = telemetry.tracer_provider.get_tracer("test")
    for name in names:
        attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}
        with tracer.start_as_current_span(f"invoke_agent {name}", attributes=attributes) as s:
            s.add_event(
                "agent.lifecycle.activity_change",
                {
                    "agent.lifecycle.event": "activity-change",
                    "agent.activity": "executing",
                    "agent.activity.previous": "thinking",
                    "gen_ai.tool.name": "Bash\x1b]0;owned\x07\x1b[2J",
                },
            )
            hook = {
                "agent.lifecycle_hook.name": "notify-a-rather-long-hook-name",
                "agent.lifecycle_hook.event": "activity-change",
                "agent.lifecycle_hook.outcome": "failed" if failure else "success",
                "agent.lifecycle_hook.attempts": 4,
            }
            name = "agent.lifecycle_hook notify-a-rather-long-hook-name"
            with tracer.start_as_current_span(name, attributes=hook) as span:
                if failure:
                    span.set_status(Status(StatusCode.ERROR, failure))
        time.sleep(0.002)  # distinct start times
    telemetry.shutdown()


def test_at_80_columns_every_label_reads_whole_and_a_failure_shows_its_message(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.jsonl"
    _record_sessions(path, ["reviewer"], failure="HTTP 503 Service Unavailable from 127.0.0.1")
    result = _run_cli(str(path), "--width", "80")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    hook = next(line for line in lines if "notify-a-rather-long-hook-name" in line)
    assert "activity-change" in hook and "×4" in hook and "failed" in hook
    assert any("✗ HTTP 503 Service Unavailable from 127.0.0.1" in line for line in lines)
    assert any("thinking → executing" in line for line in lines)


def test_agent_controlled_escape_sequences_are_shown_escaped(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    _record_sessions(path, ["reviewer"], failure="bad \x1b[31mred\x1b[0m \x9b6n")
    result = _run_cli(str(path), "--width", "200")
    assert result.returncode == 0, result.stderr
    assert (
        "\x1b" not in result.stdout and "\x07" not in result.stdout and "\x9b" not in result.stdout
    )
    assert "Bash\\x1b]0;owned\\x07\\x1b[2J" in result.stdout
    assert "bad \\x1b[31mred\\x1b[0m \\x9b6n" in result.stdout


def test_the_newest_session_is_shown_with_its_start_time_and_last_n_shows_more(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.jsonl"
    _record_sessions(path, ["first", "second", "third"])
    newest = _run_cli(str(path))
    assert newest.returncode == 0, newest.stderr
    titles = [line for line in newest.stdout.splitlines() if line.startswith("invoke_agent")]
    assert [t.split()[1] for t in titles if "trace" in t] == ["third"]
    assert re.search(
        r"invoke_agent third  \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ  trace [0-9a-f]{8} ", titles[0]
    )
    two = _run_cli(str(path), "--last", "2")
    names = [line.split()[1] for line in two.stdout.splitlines() if " trace " in line]
    assert names == ["second", "third"]
    every = _run_cli(str(path), "--all")
    assert [line.split()[1] for line in every.stdout.splitlines() if " trace " in line] == [
        "first",
        "second",
        "third",
    ]


def test_the_short_id_a_title_shows_finds_its_trace(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    _record_sessions(path, ["first", "second"])
    every = _run_cli(str(path), "--all").stdout
    first_title = next(line for line in every.splitlines() if line.startswith("invoke_agent first"))
    short_id = re.search(r"trace ([0-9a-f]{8})", first_title).group(1)  # type: ignore[union-attr]
    found = _run_cli(str(path), "--trace-id", short_id)
    assert found.returncode == 0, found.stderr
    assert "invoke_agent first" in found.stdout and "invoke_agent second" not in found.stdout


def test_an_unknown_trace_id_says_which_traces_the_file_holds(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    _record_sessions(path, ["first"])
    missing = _run_cli(str(path), "--trace-id", "deadbeef")
    assert missing.returncode == 1
    assert "no trace 'deadbeef'" in missing.stderr and "(invoke_agent first)" in missing.stderr
    assert "no spans" not in missing.stderr


def test_an_unknown_trace_id_lists_the_newest_traces_newest_first(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    _record_sessions(path, ["first", "second"])
    missing = _run_cli(str(path), "--trace-id", "deadbeef").stderr
    newest = missing.split("the newest there: ")[1]
    assert newest.index("(invoke_agent second)") < newest.index("(invoke_agent first)")


def test_columns_sets_the_width_when_the_output_is_not_a_terminal(tmp_path: Path) -> None:
    """`COLUMNS=80 trace | less` is 80 columns wide, as on an 80-column terminal."""
    path = tmp_path / "s.jsonl"
    _record_sessions(path, ["reviewer"], failure="HTTP 503 Service Unavailable from 127.0.0.1")
    lines = _run_cli(str(path), env_extra={"COLUMNS": "80"}).stdout.splitlines()
    assert lines[1] == "─" * 80
    assert max(len(line) for line in lines) <= 80
    unset = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    default = subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", "trace", str(path)],
        capture_output=True,
        text=True,
        env=unset,
        timeout=60,
        check=True,
    )
    assert default.stdout.splitlines()[1] == "─" * 100  # piped, no COLUMNS: the default


def test_colour_only_on_a_terminal_and_never_with_no_color(trace_file: Path) -> None:
    from otel_lifecycle_hooks.cli.console import wants_colour

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert wants_colour(Terminal(), {}) is True
    assert wants_colour(Terminal(), {"NO_COLOR": "1"}) is False
    assert wants_colour(io.StringIO(), {}) is False


def test_json_gives_every_session_unless_last_narrows_it(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    _record_sessions(path, ["first", "second"])
    every = json.loads(_run_cli(str(path), "--json").stdout)["spans"]
    assert {span["name"] for span in every} >= {"invoke_agent first", "invoke_agent second"}
    newest = json.loads(_run_cli(str(path), "--json", "--last", "1").stdout)["spans"]
    assert "invoke_agent first" not in {span["name"] for span in newest}


def test_a_short_id_is_found_in_any_trace_file_of_the_default_directory(tmp_path: Path) -> None:
    """Each agent name has its own file; `trace --trace-id` finds a session of an agent that
    did not run last, instead of looking in the newest file only."""
    directory = tmp_path / "traces"
    _record_sessions(directory / "reviewer.jsonl", ["reviewer"])
    _record_sessions(directory / "worker.jsonl", ["worker"])  # written last: the newest file
    every = _run_cli(str(directory / "reviewer.jsonl"), "--all").stdout
    short_id = re.search(r"trace ([0-9a-f]{8})", every).group(1)  # type: ignore[union-attr]
    found = _run_cli(
        "--trace-id", short_id, env_extra={"LIFECYCLE_HOOKS_TRACE_DIR": str(directory)}
    )
    assert found.returncode == 0, found.stderr
    assert "invoke_agent reviewer" in found.stdout and "worker" not in found.stdout
    missing = _run_cli(
        "--trace-id", "deadbeef", env_extra={"LIFECYCLE_HOOKS_TRACE_DIR": str(directory)}
    )
    assert missing.returncode == 1 and "no trace 'deadbeef'" in missing.stderr
    assert "worker.jsonl" in missing.stderr  # the hint names the newest file's sessions


def test_a_long_failure_message_wraps_between_words_at_80_columns(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    words = "the receiver at 127.0.0.1 answered 503 Service Unavailable before the hook runs " * 2
    _record_sessions(path, ["reviewer"], failure=words.strip())
    lines = _run_cli(str(path), "--width", "80").stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    first = next(i for i, line in enumerate(lines) if "✗ the receiver" in line)
    message = lines[first : first + 3]
    assert " ".join(line.strip() for line in message).startswith("✗ " + words.strip())
    # Every line ends at a word's end: the next starts a new word.
    assert all(part.endswith(tuple("abcdefghijklmnopqrstuvwxyz0123456789.")) for part in message)
    assert {word for line in message for word in line.split()} <= {"✗", *words.split()}


def test_a_trace_file_of_an_earlier_version_is_drawn_as_before(tmp_path: Path) -> None:
    """Earlier versions wrote one flat span a line and named hook spans `agent.lifecycle_hook`
    alone: a user who upgrades still sees those files' hooks, outcomes and messages."""
    path = tmp_path / "old.jsonl"
    trace_id, start = "5b8e0c1f" * 4, 1767000000000000000
    session = {
        "trace_id": trace_id, "span_id": "00000000000000a1", "parent_span_id": None,
        "name": "invoke_agent reviewer", "kind": "INTERNAL", "start_time_unix_nano": start,
        "end_time_unix_nano": start + 2_000_000_000, "status": {"code": "UNSET", "message": ""},
        "attributes": {}, "events": [],
    }  # fmt: skip
    hook = {
        **session, "span_id": "00000000000000b2", "parent_span_id": "00000000000000a1",
        "name": "agent.lifecycle_hook", "start_time_unix_nano": start + 1_000_000,
        "end_time_unix_nano": start + 11_000_000,
        "status": {"code": "ERROR", "message": "HTTP 503 from the registry"},
        "attributes": {"agent.lifecycle_hook.name": "register-agent",
                       "agent.lifecycle_hook.event": "post-start",
                       "agent.lifecycle_hook.outcome": "failed",
                       "agent.lifecycle_hook.attempts": 3},
    }  # fmt: skip
    path.write_text(json.dumps(hook) + "\n" + json.dumps(session) + "\n")
    result = _run_cli(str(path), "--width", "100")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("invoke_agent reviewer  2025-12-29 09:20:00Z  trace 5b8e0c1f")
    [row] = [line for line in lines if "register-agent" in line]
    assert row.startswith("✗ register-agent  post-start  ×3  failed")
    assert "    ✗ HTTP 503 from the registry" in lines


def test_a_recorded_trace_file_of_the_flat_format_is_drawn_whole() -> None:
    """tests/data/trace-file-flat-spans.jsonl: a real `run` session (a failing webhook and a
    script hook) recorded by the version before the OTLP JSON file, its stack-trace paths
    made neutral. A user upgrading keeps such files: `trace` draws them as that version did."""
    recorded = Path(__file__).parents[1] / "data" / "trace-file-flat-spans.jsonl"
    result = _run_cli(str(recorded), "--width", "100")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("invoke_agent reviewer  2026-12-02 05:53:42Z  trace d60460ed")
    assert any(line.startswith("✗ register-agent  post-start  ×1  failed") for line in lines)
    assert "    ✗ ConnectError talking to 127.0.0.1:9: Connection refused" in lines
    assert any(line.startswith("✓ say-goodbye  session-end  ×1") for line in lines)
    assert any("running → stopping" in line for line in lines)
