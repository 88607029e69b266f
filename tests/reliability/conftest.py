"""Fixtures for the reliability tests: one hook run through a real HookEngine, with its span in
an InMemorySpanExporter and its row in a real SQLite journal; retry waits on a fake clock."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_lifecycle_hooks import events as ev
from otel_lifecycle_hooks.engine import AgentSession, HookEngine
from otel_lifecycle_hooks.engine.clock import FakeClock
from otel_lifecycle_hooks.engine.dispatch import DispatchResult
from otel_lifecycle_hooks.journal import ExecutionRow, Journal
from otel_lifecycle_hooks.template.loader import load_template_text


@dataclass
class HookRun:
    """What one fired event left behind: the dispatch result, the hook span, the journal row,
    the retry waits the fake clock saw, and how long the call took in real time."""

    result: DispatchResult
    span: ReadableSpan
    row: ExecutionRow
    sleeps: list[float]
    elapsed: float

    @property
    def outcome(self) -> str:
        return self.result.executions[0].outcome

    @property
    def span_attributes(self) -> dict[str, Any]:
        return dict(self.span.attributes or {})

    @property
    def retry_events(self) -> int:
        return sum(1 for event in self.span.events if event.name == ev.HOOK_RETRY_EVENT)


class EngineRunner:
    """Fires one event at a template of blocking hooks and collects what it left behind."""

    def __init__(self, tmp_path: Path) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.journal_path = tmp_path / "journal.sqlite3"

    def fire(
        self, hooks_yaml: str, event: str = "post-start", environ: dict[str, str] | None = None
    ) -> HookRun:
        template = load_template_text(
            "lifecycle_hooks:\n" + textwrap.indent(textwrap.dedent(hooks_yaml), "  ")
        )
        clock = FakeClock()
        self.exporter.clear()
        engine = HookEngine(
            template,
            tracer_provider=self.provider,
            clock=clock,
            journal=self.journal_path,
            hook_log=False,
            environ=environ or {},
        )
        session = AgentSession(engine, agent_name="agent-1", tracer_provider=self.provider)
        started = time.monotonic()
        result = session.record(event, {})
        elapsed = time.monotonic() - started
        session.end()
        engine.shutdown(5)
        spans = [
            s
            for s in self.exporter.get_finished_spans()
            if s.name.startswith(ev.HOOK_SPAN_NAME + " ")
        ]
        assert len(spans) == 1, [s.name for s in self.exporter.get_finished_spans()]
        journal = Journal(self.journal_path)
        try:
            row = journal.recent(limit=1)[0]
        finally:
            journal.close()
        return HookRun(result, spans[0], row, list(clock.sleeps), elapsed)

    def close(self) -> None:
        self.provider.shutdown()


@pytest.fixture
def engine_runner(tmp_path: Path) -> Iterator[EngineRunner]:
    runner = EngineRunner(tmp_path)
    yield runner
    runner.close()
