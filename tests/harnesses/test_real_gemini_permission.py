"""The real Gemini CLI's permission prompt, under `run` with hooks from `harness install`.

Gemini CLI asks permission only interactively, so it runs on a pseudo-terminal
(tests/harnesses/record_gemini_payloads.py drives it); nobody answers the dialog: the test
ends the run once the prompt's `notification` event has reached the template's script hook.
"""

from __future__ import annotations

import signal
from pathlib import Path

from tests.harnesses import record_gemini_payloads as recording
from tests.harnesses.fake_models import FakeModelServer, Step
from tests.harnesses.real import Gemini, Session, harness_binary, install_with_cli
from tests.harnesses.session import PACKAGE_CLI, SessionResult, base_env, write_template
from tests.support.target_server import TargetServer


def test_gemini_permission_prompt_names_the_shell_tool(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    work.mkdir()
    gemini = Gemini(harness_binary("gemini"))
    script = [Step.shell(recording.COMMAND), Step.reply("Done.")]
    with FakeModelServer(script) as fake, TargetServer() as receiver:
        env = base_env(home) | recording.INTERACTIVE_ENV
        gemini.prepare(Session(tmp_path, home, work, env, fake, receiver))
        install_with_cli("gemini", env)
        runtime_log = tmp_path / "runtime.jsonl"
        template = write_template(tmp_path / "scion-agent.yaml", receiver, runtime_log, "gemini")
        result = SessionResult(0, "", "", receiver, runtime_log, home)

        def notified() -> bool:
            return any(e["hook_event_name"] == "notification" for e in result.runtime_events())

        argv = [str(PACKAGE_CLI), "run", "--template", str(template), "--grace-period", "5s"]
        argv += ["--", str(gemini.binary), "--prompt-interactive", recording.PROMPT]
        recording.drive(argv, env, work, notified, timeout=90.0, stop=signal.SIGTERM)
    [prompt] = [e for e in result.runtime_events() if e["hook_event_name"] == "notification"]
    assert prompt["context"]["TOOL_NAME"] == "run_shell_command"
    assert prompt["context"]["MESSAGE"] == "Tool Confirm Shell Command requires execution"
    assert "waiting_for_input" in result.activities()
    assert not (work / "answered.txt").exists()  # nobody allowed it
