"""the-loop's `hooks:` (seed 002): in-process executors (module, path) and remote JSON-RPC ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otel_lifecycle_hooks.engine import AgentSession, HookEngine
from otel_lifecycle_hooks.engine.model import Execution
from otel_lifecycle_hooks.engine.observers import ExecutionCallback
from otel_lifecycle_hooks.systems import the_loop
from otel_lifecycle_hooks.template.loader import TemplateError, load_templates
from otel_lifecycle_hooks.template.model import Template

SUBPROCESS_TIMEOUT = 60  # a hang check only
HANG_BOUND = 30.0

POLICY = """
import json, os, time

MARK = os.path.join(os.path.dirname(__file__), "policy-imported")
open(MARK, "w").close()


class HousePolicy:
    def __init__(self):
        self.calls = []

    def _answer(self, point, context):
        self.calls.append((point, context))
        mode = os.environ.get("POLICY_MODE", "pass")
        if mode == "refuse":
            return {"proceed": False, "reason": "change freeze"}
        if mode == "raise":
            raise RuntimeError("policy store unreachable")
        if mode == "hang":
            time.sleep(3)
        if mode == "garbage":
            return "yes please"
        return None

    def work_item_start(self, context):
        return self._answer("work_item_start", context)

    def session_spawn(self, context):
        return self._answer("session_spawn", context)
"""

TELEMETRY = """
import os

open(os.path.join(os.path.dirname(__file__), "telemetry-imported"), "w").close()


class Telemetry:
    def __init__(self, team):
        self.team = team
        self.calls = []

    def session_spawned(self, context):
        self.calls.append(("session_spawned", context["context"].get("phase")))

    def work_item_complete(self, context):
        self.calls.append(("work_item_complete", context["context"].get("task_summary")))
        return {"note": "filed under " + self.team}
"""

SEED_EXAMPLE = """
hooks:
  - name: house-policy
    path: hooks/policy.py                  # a LifecycleHooks subclass, beside this file
    on: [work_item_start, session_spawn]   # optional: default = the methods it overrides
    required: true                         # its failure at a `proceed` point refuses
  - name: telemetry
    module: acme_loop_hooks.telemetry      # or an installed dotted module
    with: {{team: platform}}
  - name: compliance
    url: {url}
    tokenEnv: ACME_HOOKS_TOKEN             # the variable's NAME, never its value
    timeoutSeconds: 10
"""


@pytest.fixture
def loop_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """hooks/policy.py beside the config, acme_loop_hooks.telemetry on sys.path."""
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "policy.py").write_text(POLICY, encoding="utf-8")
    package = tmp_path / "site" / "acme_loop_hooks"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "telemetry.py").write_text(TELEMETRY, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for name in ("acme_loop_hooks", "acme_loop_hooks.telemetry"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setenv("ACME_HOOKS_TOKEN", "tok-s3cret")
    monkeypatch.delenv("POLICY_MODE", raising=False)
    the_loop.forget_executors()
    yield tmp_path
    the_loop.forget_executors()


def write_config(directory: Path, text: str) -> Path:
    config = directory / "the-loop.yaml"
    config.write_text(textwrap.dedent(text), encoding="utf-8")
    return config


class Run:
    """An engine and session over a template; every execution collected."""

    def __init__(self, template: Template) -> None:
        self.executions: list[Execution] = []
        self.engine = HookEngine(template, journal=False, hook_log=False)
        self.engine.executor.observers.add(ExecutionCallback(self.executions.append))
        self.session = AgentSession(self.engine, agent_name="loop-agent", session_id="s-1")

    def record(self, event: str, **fields: str) -> Any:
        return self.session.record(event, fields)

    def finish(self) -> list[Execution]:
        self.engine.force_flush(10)
        self.session.end()
        self.engine.shutdown(5)
        return self.executions


def test_listing_and_validating_the_seed_example_imports_and_contacts_nothing(
    loop_dir: Path, jsonrpc_server: Any
) -> None:
    config = write_config(loop_dir, SEED_EXAMPLE.format(url=jsonrpc_server.url))
    env = {**os.environ, "HOME": str(loop_dir), "PYTHONPATH": str(loop_dir / "site")}
    for command in (["list", "--json", str(config)], ["validate", str(config)]):
        done = subprocess.run(
            [sys.executable, "-m", "otel_lifecycle_hooks", *command],
            capture_output=True,
            text=True,
            env=env,
            timeout=SUBPROCESS_TIMEOUT,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        if command[0] == "list":
            hooks = {hook["name"]: hook for hook in json.loads(done.stdout)["hooks"]}
            assert set(hooks) >= {"house-policy", "telemetry", "compliance"}
            # Listing names what each executor is, without importing or calling it.
            assert any(
                h["action"] == "python" and h["module"] == "acme_loop_hooks.telemetry"
                for h in hooks.values()
            )
            assert any(
                h["action"] == "python" and (h["path"] or "").endswith("policy.py")
                for h in hooks.values()
            )
    assert not (loop_dir / "hooks" / "policy-imported").exists()
    assert not (loop_dir / "site" / "acme_loop_hooks" / "telemetry-imported").exists()
    assert jsonrpc_server.calls == []


def test_the_seed_example_runs_each_executor_at_the_points_it_handles(
    loop_dir: Path, jsonrpc_server: Any
) -> None:
    config = write_config(loop_dir, SEED_EXAMPLE.format(url=jsonrpc_server.url))
    template = load_templates([config])
    run = Run(template)

    assert run.record("pre-start", PHASE="provisioning").ok
    run.record("post-start", PHASE="running")
    run.record("phase-change", PHASE="running", PREVIOUS_PHASE="starting")
    run.record("activity-change", ACTIVITY="thinking")  # not a point: nobody is told
    run.record("activity-change", ACTIVITY="waiting_for_input")
    run.record("task-completed", TASK_SUMMARY="fixed the bug")
    executions = run.finish()

    policy = the_loop.load_executor(template.hooks[0].action)
    assert [point for point, _ in policy.calls] == ["work_item_start", "session_spawn"]
    assert policy.calls[0][1]["session_id"] == "s-1" and policy.calls[0][1]["event"] == "pre-start"
    telemetry = sys.modules["acme_loop_hooks.telemetry"]
    [instance] = [
        v for k, v in vars(the_loop)["_instances"].items() if k[0] == "acme_loop_hooks.telemetry"
    ]
    assert isinstance(instance, telemetry.Telemetry) and instance.team == "platform"
    assert instance.calls == [
        ("session_spawned", "running"),
        ("work_item_complete", "fixed the bug"),
    ]
    # A remote executor handles every point: one JSON-RPC request per point, method = the point.
    assert jsonrpc_server.methods() == [
        "work_item_start",
        "session_spawn",
        "session_spawned",
        "phase_changed",
        "waiting_for_input",
        "work_item_complete",
    ]
    _, params, headers = jsonrpc_server.calls[-1]
    assert (
        params["point"] == "work_item_complete"
        and params["context"]["task_summary"] == "fixed the bug"
    )
    assert headers["Authorization"] == "Bearer tok-s3cret"
    by_hook = {(e.hook.name, e.event.name): e.outcome for e in executions}
    assert by_hook[("telemetry", "phase-change")] == "skipped"  # its class has no phase_changed
    assert all(outcome in ("success", "skipped") for outcome in by_hook.values()), by_hook
    assert not any("tok-s3cret" in json.dumps(e.request or {}) + e.message for e in executions)


def test_a_required_hook_that_refuses_at_a_proceed_point_refuses_the_start_and_is_named(
    loop_dir: Path, jsonrpc_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POLICY_MODE", "refuse")
    config = write_config(loop_dir, SEED_EXAMPLE.format(url=jsonrpc_server.url))
    run = Run(load_templates([config]))

    result = run.record("pre-start")
    run.finish()

    assert result.failed is not None and result.failed.hook.name == "house-policy"
    assert "change freeze" in result.failed.message


def test_the_supervisor_never_starts_an_agent_whose_start_a_required_hook_refuses(
    loop_dir: Path,
) -> None:
    config = write_config(
        loop_dir,
        """
        hooks:
          - name: house-policy
            path: hooks/policy.py
            required: true
        """,
    )
    started = loop_dir / "agent-started"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SCION_"))},
        "HOME": str(loop_dir),
        "POLICY_MODE": "refuse",
        "SCION_HOOKS_DIR": str(loop_dir / "none"),
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "otel_lifecycle_hooks",
            "run",
            "--template",
            str(config),
            "--",
            sys.executable,
            "-c",
            f"open({str(started)!r}, 'w').close()",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=SUBPROCESS_TIMEOUT,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "'house-policy'" in done.stderr and "change freeze" in done.stderr
    assert not started.exists()


@pytest.mark.parametrize("mode", ["raise", "hang", "garbage"])
@pytest.mark.parametrize("required", [False, True])
def test_a_local_executor_that_raises_hangs_or_answers_garbage_stops_nothing_unless_required(
    loop_dir: Path, monkeypatch: pytest.MonkeyPatch, mode: str, required: bool
) -> None:
    monkeypatch.setenv("POLICY_MODE", mode)
    config = write_config(
        loop_dir,
        f"""
        hooks:
          - name: house-policy
            path: hooks/policy.py
            required: {str(required).lower()}
        """,
    )
    # A local executor is unbounded in the-loop; here it gets the hook timeout (shortened).
    [hook] = load_templates([config]).hooks
    run = Run(Template(hooks=(hook._replace(timeout=0.5),)))
    started = time.monotonic()

    result = run.record("pre-start")
    after = run.record("post-start")
    executions = run.finish()

    assert time.monotonic() - started < HANG_BOUND
    assert after.ok
    first = executions[0]
    assert first.outcome == ("timeout" if mode == "hang" else "failed")
    assert (
        first.error_type
        == {"raise": "RuntimeError", "hang": "timeout", "garbage": "BadAnswer"}[mode]
    )
    if required:
        assert result.failed is not None and result.failed.hook.name == "house-policy"
    else:
        assert result.ok


@pytest.mark.parametrize("answer", ["error", "hang", "html", "wrong-id", "list"])
@pytest.mark.parametrize("required", [False, True])
def test_a_remote_executor_that_fails_hangs_or_answers_garbage_stops_nothing_unless_required(
    tmp_path: Path, jsonrpc_server: Any, answer: str, required: bool
) -> None:
    def respond(method: str, params: dict[str, Any]) -> Any:
        return {
            "error": b'{"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "boom"}}',
            "hang": jsonrpc_server.HANG,
            "html": b"<html>502 Bad Gateway</html>",
            "wrong-id": b'{"jsonrpc": "2.0", "id": 99, "result": null}',
            "list": ["not", "decisions"],
        }[answer]

    jsonrpc_server.answer = respond
    config = write_config(
        tmp_path,
        f"""
        hooks:
          - name: compliance
            url: {jsonrpc_server.url}
            on: [session_spawn, session_spawned]
            timeoutSeconds: 3  # room for a loaded machine to answer; the hang is cut
            required: {str(required).lower()}
        """,
    )
    run = Run(load_templates([config]))
    started = time.monotonic()

    result = run.record("pre-start")
    after = run.record("post-start")
    executions = run.finish()

    assert time.monotonic() - started < HANG_BOUND
    assert after.ok  # post-start carries no proceed: even a required failure is only recorded
    assert [e.outcome for e in executions] == ["timeout" if answer == "hang" else "failed"] * 2
    assert (result.failed is not None and result.failed.hook.name == "compliance") == required


def test_an_unset_token_is_the_hooks_failure_and_nothing_is_sent(
    tmp_path: Path, jsonrpc_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ACME_HOOKS_TOKEN", raising=False)
    config = write_config(
        tmp_path,
        f"""
        hooks:
          - name: compliance
            url: {jsonrpc_server.url}
            tokenEnv: ACME_HOOKS_TOKEN
            required: true
        """,
    )
    run = Run(load_templates([config]))
    result = run.record("pre-start")
    run.finish()
    assert result.failed is not None and result.failed.outcome == "refused"
    assert jsonrpc_server.calls == []


def test_every_mistake_of_a_declaration_is_reported_at_once(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        """
        hooks:
          - name: House_Policy
            path: hooks/policy.py
          - name: two-kinds
            module: acme.hooks
            url: https://hooks.example/x
          - name: bad-remote
            url: http://hooks.example/x
            tokenEnv: ACME_HOOKS_TOKEN
            headers: {Authorization: Bearer abc}
            with: {team: platform}
          - name: bad-points
            module: acme.hooks
            on: [work_item_start, tool_call]
            timeoutSeconds: 5
          - name: bad-points
            module: acme.other
            on: [session_spawn]
            "on": [session_spawn]
        """,
    )
    with pytest.raises(TemplateError) as caught:
        load_templates([config])
    messages = [str(p) for p in caught.value.problems]
    text = "\n".join(messages)
    assert "matches ^[a-z][a-z0-9-]*$" in text
    assert "names module and url; each entry names exactly one of module, path or url" in text
    assert "a bearer token never travels in clear" in text
    assert "an Authorization header is refused here" in text
    assert '"hooks[2].with": applies to local (module, path) entries only' in text
    assert '"tool_call", not a hook point' in text
    assert '"hooks[3].timeoutSeconds": applies to remote (url) entries only' in text
    assert "duplicate" in text and 'bare (on:) and quoted ("on":)' in text
    assert "Bearer abc" not in text
    assert all(p.position.line > 1 for p in caught.value.problems)
