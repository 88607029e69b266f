"""The real harness CLIs, each configured by `harness install` in a fresh HOME and run under
`otel-lifecycle-hooks run` against the fake model APIs.

`RealHarness.run(...)` is one scenario: a script of model turns, a prompt, extra CLI flags. It
returns a `SessionResult` (tests/harnesses/session.py) with what every hook received.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from otel_lifecycle_hooks.harness.install import Scope, plan
from tests.harnesses.fake_models import FakeModelServer, Step
from tests.harnesses.npm_cache import HARNESSES, HarnessUnavailable, ensure_harness
from tests.harnesses.opencode_setup import prepare_opencode
from tests.harnesses.session import (
    PACKAGE_CLI,
    SessionResult,
    alive,
    base_env,
    finish,
    start_run,
    write_template,
)
from tests.support.target_server import TargetServer

RUN_TIMEOUT = 120.0  # seconds: a hang check, far above a session's few seconds
PROMPT = "Run the command, then say what it printed."


def harness_binary(name: str) -> Path:
    """The cached CLI; without it (and without a reachable registry) a clear failure under CI,
    a skip elsewhere."""
    try:
        return ensure_harness(name)
    except HarnessUnavailable as exc:
        message = f"{HARNESSES[name].package}@{HARNESSES[name].version}: {exc}"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)


@dataclass
class Session:
    """One scenario's folders and fakes, before the harness starts."""

    root: Path
    home: Path
    work: Path
    env: dict[str, str]
    fake: FakeModelServer
    receiver: TargetServer


def install_with_cli(harness: str, env: dict[str, str]) -> None:
    result = subprocess.run(
        [str(PACKAGE_CLI), "harness", "install", harness],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


class RealHarness:
    """What differs between harnesses: their configuration, environment and command line."""

    name = ""

    def __init__(self, binary: Path) -> None:
        self.binary = binary

    def prepare(self, session: Session) -> None:
        """Write the harness's own settings (model API, auth) before `harness install`."""

    def command(self, prompt: str, extra: Sequence[str]) -> list[str]:
        raise NotImplementedError

    def run(
        self,
        root: Path,
        script: Sequence[Step],
        prompt: str = PROMPT,
        extra: Sequence[str] = (),
        during: Callable[[subprocess.Popen[str], Session], None] | None = None,
        program: list[str] | None = None,
        env_extra: dict[str, str] | None = None,
        after_install: Callable[[Session], None] | None = None,
        template_extra: str = "",
        grace_period: str = "5s",
    ) -> SessionResult:
        """One session; `during(run_process, session)` runs while it does (to signal it);
        `program`: install with this hook program instead of through the CLI;
        `after_install(session)`: add the user's own configuration after ours;
        `template_extra`: more of the template (tests/harnesses/session.py write_template);
        `grace_period`: `run --grace-period`, which also bounds the deliveries at the end."""
        home, work = root / "home", root / "project"
        home.mkdir(parents=True)
        work.mkdir()
        with FakeModelServer(script) as fake, TargetServer() as receiver:
            env = base_env(home) | (env_extra or {})
            session = Session(root, home, work, env, fake, receiver)
            self.prepare(session)
            if program is None:
                install_with_cli(self.name, env)
            else:
                plan("install", self.name, Scope(home, environ=env), program).apply()
            if after_install is not None:
                after_install(session)
            template = write_template(
                root / "scion-agent.yaml",
                receiver,
                root / "runtime.jsonl",
                self.name,
                template_extra,
            )
            process = start_run(
                self.command(prompt, extra), env, template, work, grace_period=grace_period
            )
            try:
                if during is not None:
                    during(process, session)
                code, out, err = finish(process, RUN_TIMEOUT)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
            # Non-blocking hooks are all delivered before `run` exits; the receiver has them.
            return SessionResult(
                code,
                out,
                err,
                receiver,
                root / "runtime.jsonl",
                home,
                supervisor_pid=process.pid,
                extra={"model_requests": list(fake.requests)},
            )


class Claude(RealHarness):
    name = "claude"

    def prepare(self, session: Session) -> None:
        session.env.update(
            ANTHROPIC_BASE_URL=session.fake.url,
            ANTHROPIC_API_KEY="sk-ant-test-not-a-key",
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            DISABLE_AUTOUPDATER="1",
        )

    def command(self, prompt: str, extra: Sequence[str]) -> list[str]:
        return [str(self.binary), "-p", prompt, "--output-format", "json", *extra]


class Gemini(RealHarness):
    name = "gemini"

    def prepare(self, session: Session) -> None:
        session.env.update(
            GOOGLE_GEMINI_BASE_URL=session.fake.url,
            GEMINI_API_KEY="gemini-test-not-a-key",
            GEMINI_CLI_TRUST_WORKSPACE="true",
        )
        settings = session.home / ".gemini" / "settings.json"
        settings.parent.mkdir(parents=True)
        # Offline: no update check, usage statistics or telemetry to try to send.
        settings.write_text(
            json.dumps(
                {
                    "security": {"auth": {"selectedType": "gemini-api-key"}},
                    "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
                    "privacy": {"usageStatisticsEnabled": False},
                    "telemetry": {"enabled": False},
                }
            )
        )

    def command(self, prompt: str, extra: Sequence[str]) -> list[str]:
        return [str(self.binary), "-p", prompt, *(extra or ["--approval-mode", "yolo"])]


class Codex(RealHarness):
    name = "codex"

    def prepare(self, session: Session) -> None:
        codex_home = session.home / ".codex"
        codex_home.mkdir(parents=True)
        session.env.update(CODEX_HOME=str(codex_home), FAKE_OPENAI_KEY="sk-test-not-a-key")
        (codex_home / "config.toml").write_text(
            'model = "gpt-5"\n'
            'model_provider = "fake"\n'
            "check_for_update_on_startup = false\n\n"
            "[model_providers.fake]\n"
            'name = "fake"\n'
            f'base_url = "{session.fake.url}/v1"\n'
            'wire_api = "responses"\n'
            'env_key = "FAKE_OPENAI_KEY"\n'
        )

    def command(self, prompt: str, extra: Sequence[str]) -> list[str]:
        return [str(self.binary), "exec", "--skip-git-repo-check", *extra, prompt]


class Opencode(RealHarness):
    """opencode with an OpenAI-compatible provider at the fake API (`POST /v1/chat/completions`).

    `prepare_opencode` (tests/harnesses/opencode_setup.py) also gives the config folder the
    `@opencode-ai/plugin` package that opencode otherwise installs from npm at every start
    when a plugin is present: offline, that stalls each run for over a minute.
    """

    name = "opencode"

    def prepare(self, session: Session) -> None:
        prepare_opencode(session.home, session.env, session.fake.url)

    def command(self, prompt: str, extra: Sequence[str]) -> list[str]:
        return [str(self.binary), "run", *extra, prompt]


# A user's own hook that answers a permission prompt with "allow" (Claude Code and Codex read
# the same answer on stdout).
ALLOW_PERMISSION = {
    "type": "command",
    "command": 'echo \'{"hookSpecificOutput": {"hookEventName": "PermissionRequest", '
    '"decision": {"behavior": "allow"}}}\'',
}


def add_users_permission_hook(settings_file: Path, matcher: str | None) -> None:
    settings = json.loads(settings_file.read_text())
    group: dict[str, object] = {} if matcher is None else {"matcher": matcher}
    group["hooks"] = [ALLOW_PERMISSION]
    settings["hooks"].setdefault("PermissionRequest", []).append(group)
    settings_file.write_text(json.dumps(settings, indent=2))


HARNESS_CLASSES: dict[str, type[RealHarness]] = {
    "claude": Claude,
    "gemini": Gemini,
    "codex": Codex,
    "opencode": Opencode,
}


def wait_for_pid_file(path: Path, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            text = ""
        if text.isdigit():
            return int(text)
        time.sleep(0.05)
    raise AssertionError(f"the tool never wrote {path}")


def wait_until_gone(pid: int, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return not alive(pid)


def kill_if_alive(pid: int) -> None:
    """Test clean-up by process id: a process the supervisor should have ended."""
    import signal

    if alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
