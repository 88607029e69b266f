"""Gates with the real harnesses: Claude Code, Gemini CLI, Codex and opencode, each installed
by `harness install` and run under `run` against the fake model APIs.

Turn 1 asks for a shell command that would create a file; turn 2 answers in text. A gate on
tool-start (an HTTP policy endpoint, or a seed-003 script's `before_tool` deny) decides: when
it refuses, the file is never created and the model is told the reason in the tool's result.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.harnesses.fake_models import Step
from tests.harnesses.real import HARNESS_CLASSES, Claude, RealHarness, Session, harness_binary
from tests.harnesses.scenarios import RUN_TOOLS
from tests.harnesses.session import SessionResult
from tests.support.target_server import Reply

REASON = "GATE-7 shell commands need a ticket"
DOWN = "http://127.0.0.1:9"  # the discard port: nothing listens there


def gate(url: str, on_error: str = "log") -> str:
    """A template entry: an HTTP policy endpoint on every tool call."""
    return textwrap.indent(
        textwrap.dedent(
            f"""\
          - name: shell-policy
            on: [tool-start]
            action:
              type: http
              method: POST
              url: "{url}/gate"
              body: '{{"tool": "${{TOOL_NAME}}"}}'
            blocking: true
            on_error: {on_error}
            timeout: 3s
        """
        ),
        "  ",
    )


GUARD_SCRIPT = f"""\
#!{sys.executable}
import json, sys
stage = sys.argv[1]
json.load(sys.stdin)
if stage == "before_tool":
    print(json.dumps({{"deny": {{"reason": "{REASON}"}}}}))
"""


@pytest.fixture(params=sorted(HARNESS_CLASSES))
def harness(request: pytest.FixtureRequest) -> RealHarness:
    name = request.param
    return HARNESS_CLASSES[name](harness_binary(name))


def run_gated(
    harness: RealHarness,
    root: Path,
    template_extra: str,
    answer: Reply | None = None,
    over_http: bool = False,
) -> tuple[SessionResult, Path]:
    """One session whose turn 1 would create `gated.txt`. `over_http`: Claude Code with no
    command hook installed, only the settings the supervisor writes (its HTTP route)."""
    marker = root / "project" / "gated.txt"
    script = [Step.shell(f"touch {marker} && echo created"), Step.reply("Done.")]

    def policy(session: Session) -> None:
        if over_http:
            (session.home / ".claude" / "settings.json").unlink()
        if answer is not None:
            session.receiver.on("/gate", answer)

    after: Callable[[Session], None] = policy
    result = harness.run(
        root,
        script,
        extra=RUN_TOOLS[harness.name],
        after_install=after,
        template_extra=template_extra,
        program=["/bin/false"] if over_http else None,
    )
    return result, marker


def told_the_model(result: SessionResult, text: str) -> bool:
    """Whether a request to the fake model API (the tool's result, in turn 2) holds `text`."""
    return any(text in json.dumps(r.body) for r in result.extra["model_requests"])


def test_a_gate_that_denies_keeps_the_tool_from_running_and_the_model_sees_why(
    harness: RealHarness, tmp_path: Path
) -> None:
    deny = Reply.json(200, json.dumps({"decision": "deny", "reason": REASON}))
    result, marker = run_gated(harness, tmp_path, gate("{receiver}"), deny)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [r for r in result.requests() if r.path == "/gate"], result.hook_log()[-3000:]
    assert not marker.exists(), "the refused tool ran"
    assert told_the_model(result, REASON), result.extra["model_requests"][-1]


def test_a_gate_that_allows_lets_the_tool_run(harness: RealHarness, tmp_path: Path) -> None:
    allow = Reply.json(200, json.dumps({"decision": "allow"}))
    result, marker = run_gated(harness, tmp_path, gate("{receiver}"), allow)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [r for r in result.requests() if r.path == "/gate"]
    assert marker.exists(), result.hook_log()[-3000:]


def test_an_endpoint_down_fails_open_by_default(harness: RealHarness, tmp_path: Path) -> None:
    result, marker = run_gated(harness, tmp_path, gate(DOWN))
    assert result.returncode == 0, result.stderr[-3000:]
    assert marker.exists(), result.hook_log()[-3000:]


def test_an_endpoint_down_fails_closed_under_on_error_fail(
    harness: RealHarness, tmp_path: Path
) -> None:
    result, marker = run_gated(harness, tmp_path, gate(DOWN, on_error="fail"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert not marker.exists(), "the tool ran past a fail-closed gate"
    assert told_the_model(result, "fail-closed")


def test_a_seed_003_scripts_before_tool_deny_is_applied(
    harness: RealHarness, tmp_path: Path
) -> None:
    guard = tmp_path / "guard.py"
    guard.write_text(GUARD_SCRIPT)
    guard.chmod(0o755)
    result, marker = run_gated(harness, tmp_path, f"hook_scripts:\n  - {guard}\n")
    assert result.returncode == 0, result.stderr[-3000:]
    assert not marker.exists(), "the refused tool ran"
    assert told_the_model(result, REASON)


# -- Claude Code's HTTP route: the same gates, answered in the http hook's response -----------


class ClaudeOverHttp(Claude):
    """Claude Code launched with the settings file the supervisor wrote: every hook but
    SessionStart posts to the session's HTTP route, which answers the gates' decision."""

    def command(self, prompt: str, extra: Any) -> list[str]:
        claude = " ".join([str(self.binary), "-p", json.dumps(prompt), *extra])
        return ["sh", "-c", f'exec {claude} --settings "$LIFECYCLE_HOOKS_CLAUDE_SETTINGS"']


@pytest.fixture
def claude_over_http() -> RealHarness:
    return ClaudeOverHttp(harness_binary("claude"))


def gate_posts(result: SessionResult) -> bool:
    """Whether the policy was asked, and by no hook process (the route asked it)."""
    return bool([r for r in result.requests() if r.path == "/gate"])


def test_http_route_a_gate_that_denies_keeps_the_tool_from_running_and_the_model_sees_why(
    claude_over_http: RealHarness, tmp_path: Path
) -> None:
    deny = Reply.json(200, json.dumps({"decision": "deny", "reason": REASON}))
    result, marker = run_gated(claude_over_http, tmp_path, gate("{receiver}"), deny, True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert gate_posts(result), result.hook_log()[-3000:]
    assert not marker.exists(), "the refused tool ran"
    assert told_the_model(result, REASON), result.extra["model_requests"][-1]
    assert "[hook]" not in result.hook_log()  # no command hook answered it


def test_http_route_a_gate_that_allows_lets_the_tool_run(
    claude_over_http: RealHarness, tmp_path: Path
) -> None:
    allow = Reply.json(200, json.dumps({"decision": "allow"}))
    result, marker = run_gated(claude_over_http, tmp_path, gate("{receiver}"), allow, True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert gate_posts(result)
    assert marker.exists(), result.hook_log()[-3000:]


def test_http_route_an_endpoint_down_fails_open_by_default(
    claude_over_http: RealHarness, tmp_path: Path
) -> None:
    result, marker = run_gated(claude_over_http, tmp_path, gate(DOWN), over_http=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert marker.exists(), result.hook_log()[-3000:]


def test_http_route_an_endpoint_down_fails_closed_under_on_error_fail(
    claude_over_http: RealHarness, tmp_path: Path
) -> None:
    result, marker = run_gated(
        claude_over_http, tmp_path, gate(DOWN, on_error="fail"), over_http=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert not marker.exists(), "the tool ran past a fail-closed gate"
    assert told_the_model(result, "fail-closed")


def test_http_route_a_prompt_gate_that_denies_blocks_the_prompt_before_the_model(
    claude_over_http: RealHarness, tmp_path: Path
) -> None:
    """UserPromptSubmit answered `{"decision": "block"}` by the route: Claude Code never sends
    the prompt to the model, and shows the reason."""
    prompt_gate = gate("{receiver}").replace("on: [tool-start]", "on: [prompt-submit]")
    deny = Reply.json(200, json.dumps({"decision": "deny", "reason": REASON}))
    result, marker = run_gated(claude_over_http, tmp_path, prompt_gate, deny, True)
    assert gate_posts(result), result.hook_log()[-3000:]
    assert not marker.exists(), "the blocked prompt's tool ran"
    assert not told_the_model(result, "Run the command"), result.extra["model_requests"]
    assert REASON in result.stdout + result.stderr, (result.stdout, result.stderr[-2000:])
