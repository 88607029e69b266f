"""In-process hooks (seed 004): `name` + `on_event(event)`, isolated, discovered by entry point."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otel_lifecycle_hooks.engine import AgentSession, HookEngine
from otel_lifecycle_hooks.systems.inprocess import (
    AgentLifecycleEvent,
    HookRegistrationError,
    LifecycleEventType,
    LifecycleHookError,
    LifecycleHookRegistry,
)
from otel_lifecycle_hooks.template.model import Template

HANG_BOUND = 30.0  # a hang guard, not a timing claim: the hanging hook never returns


class AuditStore:
    def __init__(self) -> None:
        self.records: list[tuple[str | None, int, Any]] = []

    def record(self, session_id: str | None, step: int, payload: Any) -> None:
        self.records.append((session_id, step, payload))


audit_store = AuditStore()


class AuditHook:
    """Seed 004's AuditHook, in Python."""

    def name(self) -> str:
        return "audit.tool-call"

    def on_event(self, event: AgentLifecycleEvent) -> None:
        if event.type == LifecycleEventType.AFTER_TOOL_CALL:
            # Observe only, do not block; record to the external audit store
            audit_store.record(event.session_id, event.step, event.payload)


class Recorder:
    def __init__(self, name: str = "recorder") -> None:
        self.name = name
        self.events: list[AgentLifecycleEvent] = []

    def on_event(self, event: AgentLifecycleEvent) -> None:
        self.events.append(event)


class Raises:
    name = "broken.hook"

    def on_event(self, event: AgentLifecycleEvent) -> None:
        raise RuntimeError(f"cannot handle {event.type.value}")


class Hangs:
    name = "slow-hook"

    def __init__(self) -> None:
        self.release = threading.Event()

    def on_event(self, event: AgentLifecycleEvent) -> None:
        self.release.wait(10)


@pytest.fixture
def engine(spans: Any) -> Iterator[HookEngine]:
    provider, _ = spans
    engine = HookEngine(Template(), tracer_provider=provider, journal=False, hook_log=False)
    yield engine
    engine.shutdown(5)


def session_for(engine: HookEngine, spans: Any, hooks: Any) -> AgentSession:
    provider, _ = spans
    return AgentSession(
        engine,
        agent_name="agent",
        session_id="sess-1",
        tracer_provider=provider,
        metadata={"HARNESS_NAME": "react"},
        in_process_hooks=hooks,
    )


A_SESSION = [
    ("post-start", {}),
    ("prompt-submit", {"PROMPT": "fix it"}),
    ("agent-start", {}),  # the same turn as prompt-submit
    ("model-start", {}),
    ("model-end", {}),
    ("tool-start", {"TOOL_NAME": "bash"}),
    ("tool-end", {"TOOL_NAME": "bash"}),
    ("pre-compact", {}),
    ("post-compact", {}),
    ("agent-end", {"ASSISTANT_TEXT": "done"}),
    ("phase-change", {"PHASE": "stopping"}),  # not one of the ten points
    ("session-end", {"EXIT_CODE": "0"}),
]


def test_seed_004s_audit_hook_records_each_tool_call(engine: HookEngine, spans: Any) -> None:
    registry = LifecycleHookRegistry()
    registry.register(AuditHook())
    audit_store.records.clear()
    session = session_for(engine, spans, registry)
    for event, fields in A_SESSION:
        session.record(event, fields)
    session.end()
    assert audit_store.records == [("sess-1", 1, {"TOOL_NAME": "bash"})]


def test_hooks_see_the_ten_points_in_order_with_every_field(engine: HookEngine, spans: Any) -> None:
    recorder = Recorder()
    session = session_for(engine, spans, [recorder])
    for event, fields in A_SESSION:
        session.record(event, fields)
    session.end()

    assert [e.type for e in recorder.events] == [
        LifecycleEventType.SESSION_START,
        LifecycleEventType.BEFORE_TURN,
        LifecycleEventType.BEFORE_MODEL_REQUEST,
        LifecycleEventType.AFTER_MODEL_RESPONSE,
        LifecycleEventType.BEFORE_TOOL_CALL,
        LifecycleEventType.AFTER_TOOL_CALL,
        LifecycleEventType.BEFORE_COMPACT,
        LifecycleEventType.ON_COMPACT,
        LifecycleEventType.AFTER_TURN,
        LifecycleEventType.SESSION_END,
    ]
    assert {e.type for e in recorder.events} == set(LifecycleEventType)
    turn = recorder.events[1]
    assert (turn.runtime, turn.session_id, turn.step, turn.message) == (
        "react",
        "sess-1",
        1,
        "fix it",
    )
    assert recorder.events[0].step == 0 and recorder.events[-1].step == 1
    assert turn.attributes["agent.lifecycle.event"] == "prompt-submit"
    with pytest.raises(TypeError):
        turn.attributes["added"] = "no"  # type: ignore[index]
    assert AgentLifecycleEvent(LifecycleEventType.ON_COMPACT).attributes == {}


def test_a_raising_hook_becomes_an_error_event_and_interrupts_nothing(
    engine: HookEngine, spans: Any
) -> None:
    _, exporter = spans
    errors: list[LifecycleHookError] = []
    registry = LifecycleHookRegistry()
    registry.register(Raises())
    recorder = Recorder()
    registry.register(recorder)
    registry.add_error_listener(errors.append)
    registry.add_error_listener(lambda error: 1 / 0)  # a broken listener is skipped too
    session = session_for(engine, spans, registry)

    for event, fields in A_SESSION:
        assert session.record(event, fields).ok
    session.end()

    assert len(recorder.events) == 10  # the other hook saw every point
    assert len(errors) == 10
    assert errors[0].hook_name == "broken.hook"
    assert errors[0].event.type is LifecycleEventType.SESSION_START
    assert isinstance(errors[0].exception, RuntimeError)
    [session_span] = [s for s in exporter.get_finished_spans() if s.name == "invoke_agent agent"]
    recorded = [e for e in session_span.events if e.name == "agent.lifecycle.error"]
    assert len(recorded) == 10
    assert recorded[0].attributes["error.type"] == "LifecycleHookError"
    assert (
        "'broken.hook' failed on SESSION_START: RuntimeError"
        in recorded[0].attributes["agent.error.message"]
    )


def test_a_hanging_hook_delays_neither_the_agent_nor_the_other_hooks(
    engine: HookEngine, spans: Any
) -> None:
    hangs, recorder = Hangs(), Recorder()
    session = session_for(engine, spans, [hangs, recorder])
    started = time.monotonic()
    try:
        for event, fields in A_SESSION:
            session.record(event, fields)
        assert session.in_process.flush(0.1) is False  # the hanging hook is still busy
        assert time.monotonic() - started < HANG_BOUND
        deadline = time.monotonic() + HANG_BOUND
        while len(recorder.events) < 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(recorder.events) == 10
    finally:
        hangs.release.set()
        session.end()


def test_names_are_checked_and_duplicates_refused_at_registration_which_calls_nothing() -> None:
    registry = LifecycleHookRegistry()
    recorder = Recorder("audit.tool-call")
    registry.register(recorder)
    assert recorder.events == []  # registering has no side effects
    with pytest.raises(
        HookRegistrationError, match="duplicate lifecycle hook id 'audit.tool-call'"
    ):
        registry.register(AuditHook())
    for bad in ("", "-lead", "has space", "naïve"):
        with pytest.raises(HookRegistrationError, match="start with a letter or digit"):
            registry.register(Recorder(bad))
    with pytest.raises(HookRegistrationError, match="no on_event"):
        registry.register(type("NoEvent", (), {"name": "x"})())  # type: ignore[arg-type]
    assert [h.name for h in registry.hooks()] == ["audit.tool-call"]  # type: ignore[attr-defined]


PLUGIN = """
import os

open(os.path.join(os.path.dirname(__file__), "{name}-imported"), "w").close()


class Hook:
    name = "{name}.hook"

    def on_event(self, event):
        pass


def apply(context):
    context.register(Hook())
"""


def test_plugins_are_discovered_from_entry_points_and_only_enabled_ones_load_and_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    dist = site / "audit_pack-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: audit-pack\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[otel_lifecycle_hooks.hooks]\n"
        "audit-pack = audit_pack:apply\nother-pack = other_pack:Hook\n"
    )
    for name in ("audit_pack", "other_pack"):
        (site / f"{name}.py").write_text(PLUGIN.format(name=name))
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(site))

    registry = LifecycleHookRegistry.discover()
    assert {"audit-pack", "other-pack"} <= set(registry.plugins)
    assert not list(site.glob("*-imported"))  # discovering imports nothing
    assert registry.hooks() == ()

    registry.enable("audit-pack")
    assert [h.name for h in registry.hooks()] == ["audit_pack.hook"]  # type: ignore[attr-defined]
    assert [p.name for p in site.glob("*-imported")] == ["audit_pack-imported"]
    with pytest.raises(ValueError, match="unknown lifecycle hook plugin"):
        registry.enable("no-such-pack")
