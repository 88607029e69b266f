"""`harness doctor` is right on every documented route, checked from inside the real harnesses'
shell tools: Claude Code on the session's HTTP route (`--settings`, nothing installed) is
well set up, and Codex's sandbox, which refuses the socket, is named with its setting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.harnesses.fake_models import Step
from tests.harnesses.real import Claude, Codex, harness_binary
from tests.harnesses.session import PACKAGE_CLI


def _doctor_step(harness: str, report: Path) -> Step:
    return Step.shell(
        f"{PACKAGE_CLI} harness doctor {harness} --json > {report}; echo $? >> {report}.rc"
    )


def _checks(report: Path) -> dict[str, Any]:
    return {check["name"]: check for check in json.loads(report.read_text())["checks"]}


def test_doctor_on_claude_codes_http_route_is_well_without_an_install(tmp_path: Path) -> None:
    class ClaudeOverHttp(Claude):
        def command(self, prompt: str, extra: Any) -> list[str]:
            claude = " ".join([str(self.binary), "-p", json.dumps(prompt), *extra])
            return ["sh", "-c", f'exec {claude} --settings "$LIFECYCLE_HOOKS_CLAUDE_SETTINGS"']

    report = tmp_path / "project" / "doctor.json"
    result = ClaudeOverHttp(harness_binary("claude")).run(
        tmp_path,
        [_doctor_step("claude", report), Step.reply("Checked.")],
        extra=["--allowedTools", "Bash"],
        program=["/bin/false"],
        after_install=lambda session: (session.home / ".claude" / "settings.json").unlink(),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    checks = _checks(report)
    assert Path(f"{report}.rc").read_text().strip() == "0", checks
    config = checks["claude config"]
    assert config["ok"], config
    assert "--settings" in config["detail"]  # the route it found, not "run harness install"
    assert "harness install" not in config["detail"]


def test_doctor_in_codexs_default_sandbox_names_the_network_access_setting(
    tmp_path: Path,
) -> None:
    report = tmp_path / "project" / "doctor.json"  # the workspace: the sandbox may write there
    result = Codex(harness_binary("codex")).run(
        tmp_path,
        [_doctor_step("codex", report), Step.reply("Checked.")],
        extra=["--sandbox", "workspace-write"],  # network (so the socket) not allowed
    )
    assert result.returncode == 0, result.stderr[-3000:]
    socket = _checks(report)["socket"]
    assert not socket["ok"]
    assert "sandbox_workspace_write.network_access=true" in socket["detail"], socket
