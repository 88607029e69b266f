"""The `opentelemetry_post_instrument` hook: adds the processor to the provider in place."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

from otel_lifecycle_hooks import autoload


class _Processor(SpanProcessor):
    def __init__(self, template: str) -> None:
        self.template = template
        self.started: list[str] = []

    def on_start(self, span, parent_context=None) -> None:  # type: ignore[no-untyped-def]
        self.started.append(span.name)


@pytest.fixture
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> list[_Processor]:
    created: list[_Processor] = []

    class LifecycleHookProcessor:
        @staticmethod
        def from_template(path: str) -> _Processor:
            if "broken" in path:
                raise ValueError("bad template")
            created.append(_Processor(path))
            return created[-1]

    module = types.ModuleType("otel_lifecycle_hooks.engine.processor")
    module.LifecycleHookProcessor = LifecycleHookProcessor  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "otel_lifecycle_hooks.engine.processor", module)
    return created


def test_the_processor_is_added_to_the_existing_provider(
    monkeypatch: pytest.MonkeyPatch, fake_engine: list[_Processor], tmp_path: Path
) -> None:
    provider = TracerProvider()
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    monkeypatch.setenv(autoload.TEMPLATE_ENV, str(tmp_path / "scion-agent.yaml"))
    autoload.instrument()
    (processor,) = fake_engine
    assert processor.template == str(tmp_path / "scion-agent.yaml")
    provider.get_tracer("t").start_span("invoke_agent a").end()
    assert processor.started == ["invoke_agent a"]


def test_nothing_happens_without_the_variable(
    monkeypatch: pytest.MonkeyPatch, fake_engine: list[_Processor]
) -> None:
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: TracerProvider())
    monkeypatch.delenv(autoload.TEMPLATE_ENV, raising=False)
    autoload.instrument()
    assert fake_engine == []


def test_nothing_happens_without_an_sdk_provider(
    monkeypatch: pytest.MonkeyPatch, fake_engine: list[_Processor]
) -> None:
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: trace.NoOpTracerProvider())
    monkeypatch.setenv(autoload.TEMPLATE_ENV, "scion-agent.yaml")
    autoload.instrument()
    assert fake_engine == []


def test_a_broken_template_never_raises_into_start_up(
    monkeypatch: pytest.MonkeyPatch, fake_engine: list[_Processor]
) -> None:
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: TracerProvider())
    monkeypatch.setenv(autoload.TEMPLATE_ENV, "broken.yaml")
    autoload.instrument()
    assert fake_engine == []


def test_the_template_variable_is_read_by_its_name_and_by_the_older_one(
    monkeypatch: pytest.MonkeyPatch, fake_engine: list[_Processor]
) -> None:
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: TracerProvider())
    monkeypatch.setenv("LIFECYCLE_HOOKS_TEMPLATE", "new.yaml")
    monkeypatch.setenv("OTEL_LIFECYCLE_HOOKS_TEMPLATE", "old.yaml")
    autoload.instrument()
    monkeypatch.delenv("LIFECYCLE_HOOKS_TEMPLATE")
    autoload.instrument()
    assert [processor.template for processor in fake_engine] == ["new.yaml", "old.yaml"]
