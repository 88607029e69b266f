"""Processor overhead on the host application: starting and ending spans that are not agent
sessions, on a provider with `LifecycleHookProcessor` versus the same provider without it.

Both providers carry what a host application has anyway, a BatchSpanProcessor (its exporter
drops the spans); the bare case, a provider with no other processor at all, is shown too.
Blocks of spans alternate between the providers in one process. Target: at most 1.10x the
cost per span.
"""

from __future__ import annotations

import gc
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from _common import Figure, bench_arguments, interleave, paired_ratio, report, seed_template
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from otel_lifecycle_hooks import HookEngine, LifecycleHookProcessor, load_templates

SCRIPT = "bench_processor_overhead.py"
TARGET_RATIO = 1.10
# What an instrumented web handler's span typically carries.
ATTRIBUTES = {
    "http.request.method": "GET",
    "url.path": "/api/orders",
    "http.route": "/api/orders",
    "server.address": "orders.internal",
    "http.response.status_code": 200,
}


class _DroppingExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def span_loop(provider: TracerProvider, spans: int) -> Callable[[], float]:
    """Start and end `spans` ordinary spans (a parent and its child); microseconds per span."""
    tracer = provider.get_tracer("host.app")

    def run() -> float:
        gc.collect()
        started = time.perf_counter()
        for _ in range(spans // 2):
            with (
                tracer.start_as_current_span("GET /api/orders", attributes=ATTRIBUTES),
                tracer.start_as_current_span("SELECT orders") as child,
            ):
                child.set_attribute("db.system", "postgresql")
        elapsed = time.perf_counter() - started
        # The exporter thread's work on these spans must not land in the next block.
        provider.force_flush()
        return elapsed * 1e6 / spans

    return run


def main() -> int:
    args = bench_arguments(__doc__.splitlines()[0])
    block, rounds = (200, 3) if args.quick else (2000, 30)
    with tempfile.TemporaryDirectory(prefix="bench-processor-") as tmp:
        template = load_templates([seed_template(Path(tmp), "http://127.0.0.1:9")])
        engine = HookEngine(template, journal=False, hook_log=False)
        processor = LifecycleHookProcessor(engine)
        providers: dict[str, TracerProvider] = {}
        for name in ("batch", "batch + lifecycle", "bare", "bare + lifecycle"):
            provider = TracerProvider()
            if name.startswith("batch"):
                provider.add_span_processor(
                    BatchSpanProcessor(_DroppingExporter(), max_queue_size=1 << 20)
                )
            if name.endswith("lifecycle"):
                provider.add_span_processor(processor)
            providers[name] = provider
        subjects = {name: span_loop(provider, block) for name, provider in providers.items()}
        interleave(2, subjects)  # warm up
        samples = interleave(rounds, subjects)
        direct = processor_calls(processor, providers["bare"], 2_000 if args.quick else 200_000)
        for provider in providers.values():
            provider.shutdown()
        engine.shutdown(1.0)

    figures = []
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
    bare = samples["bare"].median
    figures.append(
        Figure(
            benchmark="processor overhead",
            name="on_start + on_end of a span that is no session, timed alone",
            value=bare + direct,
            unit="us",
            baseline=bare,
            baseline_name="bare provider span without it",
            detail=f"the processor's own {direct:.2f} us added to a bare span; steadier than "
            "the difference of two noisy loops",
        )
    )
    return report(SCRIPT, figures, args)


def processor_calls(
    processor: LifecycleHookProcessor, provider: TracerProvider, calls: int
) -> float:
    """Microseconds the processor spends on one ordinary span: on_start then on_end."""
    span = provider.get_tracer("host.app").start_span("GET /api/orders", attributes=ATTRIBUTES)
    span.end()
    started = time.perf_counter()
    for _ in range(calls):
        processor.on_start(span)
        processor.on_end(span)
    return (time.perf_counter() - started) * 1e6 / calls


if __name__ == "__main__":
    sys.exit(main())
