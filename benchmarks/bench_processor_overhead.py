"""Processor overhead on the host application: starting and ending spans that are not agent
sessions, on a provider with `LifecycleHookProcessor` versus the same provider without it.

Both providers carry what a host application has anyway, a BatchSpanProcessor (its exporter
drops the spans); the bare case, a provider with no other processor at all, is shown too. The
floor of any processor is shown beside it: the same provider with a SpanProcessor that does
nothing (its on_start and on_end are still called for every span). Blocks of spans alternate
between the providers in one process. Target: at most 1.05x the cost per span. The same
spans while an agent session span of the provider stays open are shown too (no target): the
processor then looks each ending span's id up among the live sessions. The main comparison's
blocks are also shown by the CPU time of the thread that makes the spans, which a busy
machine's preemption does not move (no target).

The cost on an agent's own session is shown too (no target): a session span
(`gen_ai.operation.name: invoke_agent`) with two lifecycle span events, and one lifecycle
span event added to a session that stays open. On a session the processor wraps the span's
event method, so each event is also handed to the hook engine; the events here are of a kind
the seed's template has no hook for, so the figures are the processor's and the engine's
dispatch, not a hook's delivery.
"""

from __future__ import annotations

import gc
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from _common import (
    Figure,
    Samples,
    bench_arguments,
    interleave,
    paired_ratio,
    report,
    seed_template,
)
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from otel_lifecycle_hooks import HookEngine, LifecycleHookProcessor, load_templates

SCRIPT = "bench_processor_overhead.py"
TARGET_RATIO = 1.05
# What an instrumented web handler's span typically carries.
ATTRIBUTES = {
    "http.request.method": "GET",
    "url.path": "/api/orders",
    "http.route": "/api/orders",
    "server.address": "orders.internal",
    "http.response.status_code": 200,
}


SESSION_ATTRIBUTES = {
    "gen_ai.operation.name": "invoke_agent",
    "gen_ai.agent.name": "reviewer",
    "gen_ai.agent.id": "agent-1",
}
# A lifecycle event the seed's template has no hook for: dispatched, no delivery.
TOOL_EVENT = "agent.lifecycle.tool_start"
TOOL_ATTRIBUTES = {"agent.lifecycle.tool_name": "Bash"}


class _DroppingExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class NoOpProcessor(SpanProcessor):
    """Any processor's floor: the provider calls it for every span, and it does nothing."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        pass


def span_loop(
    provider: TracerProvider,
    spans: int,
    session_live: bool = False,
    thread_cpu: Samples | None = None,
) -> Callable[[], float]:
    """Start and end `spans` ordinary spans (a parent and its child); microseconds per span.
    With `session_live`, an agent session span of the same provider is open meanwhile (started
    before the timing, ended after it), as in a host that runs an agent while it serves. The
    same block's CPU time on the calling thread goes to `thread_cpu`, when given."""
    tracer = provider.get_tracer("host.app")

    def run() -> float:
        session = (
            provider.get_tracer("host.agent").start_span(
                "invoke_agent reviewer", attributes=SESSION_ATTRIBUTES
            )
            if session_live
            else None
        )
        gc.collect()
        started, started_cpu = time.perf_counter(), time.thread_time()
        for _ in range(spans // 2):
            with (
                tracer.start_as_current_span("GET /api/orders", attributes=ATTRIBUTES),
                tracer.start_as_current_span("SELECT orders") as child,
            ):
                child.set_attribute("db.system", "postgresql")
        elapsed = time.perf_counter() - started
        if thread_cpu is not None:
            thread_cpu.values.append((time.thread_time() - started_cpu) * 1e6 / spans)
        if session is not None:
            session.end()
        # The exporter thread's work on these spans must not land in the next block.
        provider.force_flush()
        return elapsed * 1e6 / spans

    return run


def session_loop(provider: TracerProvider, sessions: int) -> Callable[[], float]:
    """`sessions` session spans, each with two lifecycle span events; microseconds each."""
    tracer = provider.get_tracer("host.agent")

    def run() -> float:
        gc.collect()
        started = time.perf_counter()
        for _ in range(sessions):
            with tracer.start_as_current_span(
                "invoke_agent reviewer", attributes=SESSION_ATTRIBUTES
            ) as span:
                span.add_event(TOOL_EVENT, TOOL_ATTRIBUTES)
                span.add_event(TOOL_EVENT, TOOL_ATTRIBUTES)
        elapsed = time.perf_counter() - started
        provider.force_flush()
        return elapsed * 1e6 / sessions

    return run


def live_event_loop(provider: TracerProvider, events: int) -> Callable[[], float]:
    """`events` lifecycle span events added to an open session; microseconds each. Each run
    opens a session of its own (a span keeps at most 128 events, the SDK's default: later
    ones would be dropped before the processor saw them) and ends it after the timing."""
    tracer = provider.get_tracer("host.agent")

    def run() -> float:
        session = tracer.start_span("invoke_agent reviewer", attributes=SESSION_ATTRIBUTES)
        gc.collect()
        started = time.perf_counter()
        for _ in range(events):
            session.add_event(TOOL_EVENT, TOOL_ATTRIBUTES)
        elapsed = time.perf_counter() - started
        session.end()
        provider.force_flush()
        return elapsed * 1e6 / events

    return run


def main() -> int:
    args = bench_arguments(__doc__.splitlines()[0])
    block, rounds = (200, 3) if args.quick else (2000, 30)
    with tempfile.TemporaryDirectory(prefix="bench-processor-") as tmp:
        template = load_templates([seed_template(Path(tmp), "http://127.0.0.1:9")])
        engine = HookEngine(template, journal=False, hook_log=False)
        processor = LifecycleHookProcessor(engine)
        providers: dict[str, TracerProvider] = {}
        for name in ("batch", "batch + lifecycle", "batch + no-op", "bare", "bare + lifecycle"):
            provider = TracerProvider()
            if name.startswith("batch"):
                provider.add_span_processor(
                    BatchSpanProcessor(_DroppingExporter(), max_queue_size=1 << 20)
                )
            if name.endswith("lifecycle"):
                provider.add_span_processor(processor)
            if name.endswith("no-op"):
                provider.add_span_processor(NoOpProcessor())
            providers[name] = provider
        # CPU time of the thread that makes the spans, from the same blocks: a busy machine's
        # preemption does not move it, so it shows what the wall-clock figure means there.
        thread_cpu = {name: Samples() for name in ("batch", "batch + lifecycle", "batch + no-op")}
        subjects = {
            name: span_loop(provider, block, thread_cpu=thread_cpu.get(name))
            for name, provider in providers.items()
        }
        for name in ("batch", "batch + lifecycle"):
            subjects[f"{name}, session live"] = span_loop(providers[name], block, True)
        # The processor's own two calls, timed alone in blocks of their own, interleaved with
        # the spans' blocks like every other subject (the figure is the median of the rounds).
        calls = 10 * block
        subjects["processor alone"] = processor_calls(processor, providers["bare"], calls, False)
        subjects["processor alone, session live"] = processor_calls(
            processor, providers["bare + lifecycle"], calls, True
        )
        interleave(2, subjects)  # warm up
        for warm_up in thread_cpu.values():
            warm_up.values.clear()
        samples = interleave(rounds, subjects)
        direct = samples["processor alone"].median
        direct_live = samples["processor alone, session live"].median
        session_block = block // 10
        sessions = {
            f"session {name}": session_loop(providers[name], session_block)
            for name in ("batch", "batch + lifecycle")
        }
        live = {
            f"live {name}": live_event_loop(providers[name], 100)
            for name in ("batch", "batch + lifecycle")
        }
        interleave(2, {**sessions, **live})
        samples.update(interleave(rounds, {**sessions, **live}))
        for provider in providers.values():
            provider.shutdown()
        engine.shutdown(1.0)

    figures = []
    floor = samples["batch + no-op"]
    for setup, target in (("batch", TARGET_RATIO), ("bare", None)):
        with_it, without = samples[f"{setup} + lifecycle"], samples[setup]
        figures.append(
            Figure(
                benchmark="processor overhead",
                name=f"per-span cost with the processor ({setup} provider), median",
                value=with_it.median,
                unit="us",
                baseline=without.median,
                baseline_name=f"{setup} provider without it",
                target=target,
                paired_ratio=paired_ratio(with_it, without),
                detail=(
                    f"ratio: median of {rounds} interleaved pairs of blocks of {block} spans "
                    f"(ratio of the medians {with_it.median / without.median:.2f}x)"
                ),
            )
        )
    cpu_with, cpu_without = thread_cpu["batch + lifecycle"], thread_cpu["batch"]
    figures.append(
        Figure(
            benchmark="processor overhead",
            name="per-span CPU time of the calling thread with the processor (batch provider), "
            "median",
            value=cpu_with.median,
            unit="us",
            baseline=cpu_without.median,
            baseline_name="batch provider without it",
            paired_ratio=paired_ratio(cpu_with, cpu_without),
            detail=(
                f"the first line's blocks, timed by time.thread_time; no-op SpanProcessor "
                f"{paired_ratio(thread_cpu['batch + no-op'], cpu_without):.2f}x"
            ),
        )
    )
    with_it, without = samples["batch + lifecycle, session live"], samples["batch, session live"]
    figures.append(
        Figure(
            benchmark="processor overhead",
            name="per-span cost with the processor while a session is live (batch provider), "
            "median",
            value=with_it.median,
            unit="us",
            baseline=without.median,
            baseline_name="batch provider without it, the same session live",
            paired_ratio=paired_ratio(with_it, without),
            detail=(
                f"a host's spans while an agent session span stays open; ratio: median of "
                f"{rounds} interleaved pairs of blocks of {block} spans; timed alone (median), "
                f"on_start + on_end {direct_live:.2f} us with the session live, {direct:.2f} us "
                "without"
            ),
        )
    )
    figures.append(
        Figure(
            benchmark="processor overhead",
            name="floor: per-span cost with a no-op SpanProcessor (batch provider), median",
            value=floor.median,
            unit="us",
            baseline=samples["batch"].median,
            baseline_name="batch provider without it",
            paired_ratio=paired_ratio(floor, samples["batch"]),
            detail="what any processor costs: the provider calling on_start and on_end",
        )
    )
    bare = samples["bare"].median
    figures.append(
        Figure(
            benchmark="processor overhead",
            name="on_start + on_end of a span that is no session, timed alone",
            value=bare + direct,
            unit="us",
            baseline=bare,
            baseline_name="bare provider span without it",
            detail=f"the processor's own {direct:.2f} us (median of {rounds} interleaved blocks "
            f"of {calls} calls) added to a bare span; steadier than the difference of two noisy "
            "loops",
        )
    )
    for kind, name, what in (
        ("session", "a session span with two lifecycle span events, median", "session span"),
        ("live", "one lifecycle span event on an open session, median", "span event"),
    ):
        with_it, without = samples[f"{kind} batch + lifecycle"], samples[f"{kind} batch"]
        figures.append(
            Figure(
                benchmark="processor overhead",
                name=name,
                value=with_it.median,
                unit="us",
                baseline=without.median,
                baseline_name=f"the same {what} without the processor",
                paired_ratio=paired_ratio(with_it, without),
                detail="batch provider; each event handed to the hook engine, which has no "
                "hook for it",
            )
        )
    return report(SCRIPT, figures, args)


def processor_calls(
    processor: LifecycleHookProcessor, provider: TracerProvider, calls: int, session_live: bool
) -> Callable[[], float]:
    """Microseconds the processor spends on one ordinary span, on_start then on_end, over
    `calls` calls; with `session_live`, while a session span of the provider (which carries
    the processor) is open."""
    span = provider.get_tracer("host.app").start_span("GET /api/orders", attributes=ATTRIBUTES)
    span.end()

    def run() -> float:
        session = (
            provider.get_tracer("host.agent").start_span(
                "invoke_agent reviewer", attributes=SESSION_ATTRIBUTES
            )
            if session_live
            else None
        )
        gc.collect()
        started = time.perf_counter()
        for _ in range(calls):
            processor.on_start(span)
            processor.on_end(span)
        elapsed = time.perf_counter() - started
        if session is not None:
            session.end()
        return elapsed * 1e6 / calls

    return run


if __name__ == "__main__":
    sys.exit(main())
