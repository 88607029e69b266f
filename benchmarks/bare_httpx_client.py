"""The baseline of `bench_delivery_cpu.py`, run as its own process: bare instrumented httpx.

    python bare_httpx_client.py URL TRACE_FILE

An `httpx.Client` instrumented with opentelemetry-instrumentation-httpx
(`HTTPXClientInstrumentor.instrument_client`) on an SDK tracer provider whose spans go through
a batch processor to the local trace file, as `run` exports them. Nothing of the package runs
but its trace-file exporter, so the cost of writing spans is on both sides alike.

Commands, one per line on stdin:

- `run FIRST COUNT RATE`: POST the webhook's body to `URL/bare/<n>` for n from FIRST, COUNT
  times at RATE per second on one kept-alive connection, flush the spans, then print
  `done <spans written>`.

End of stdin closes the client and exits.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_lifecycle_hooks.telemetry.tracefile import TraceFileExporter

BODY = b'{"tool": "%d", "session": "bench-session"}'


def main() -> None:
    url, trace_file = sys.argv[1], Path(sys.argv[2])
    provider = TracerProvider(resource=Resource({"service.name": "bare-httpx"}))
    provider.add_span_processor(BatchSpanProcessor(TraceFileExporter(trace_file)))
    client = httpx.Client(headers={"Content-Type": "application/json"})
    HTTPXClientInstrumentor.instrument_client(client, tracer_provider=provider)
    for line in sys.stdin:
        command, *arguments = line.split()
        if command != "run":
            continue
        first, count, rate = int(arguments[0]), int(arguments[1]), float(arguments[2])
        started = time.perf_counter()
        for i in range(count):
            wait = started + i / rate - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            n = first + i
            response = client.post(f"{url}/bare/{n}", content=BODY % n)
            response.read()
            if response.status_code != 200:
                raise SystemExit(f"the loopback server answered {response.status_code}")
        provider.force_flush()
        # Spans, not lines: a line is a batch (OTLP JSON), each span with one `"kind":` key.
        written = trace_file.read_bytes().count(b'"kind":') if trace_file.exists() else 0
        print(f"done {written}", flush=True)
    client.close()
    provider.shutdown()


if __name__ == "__main__":
    main()
