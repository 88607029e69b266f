"""Telemetry: providers from OTEL_* (`setup`), the sampler that keeps agent sessions visible
(`sampling`), the metric instruments (`metrics`) and the local trace file (`tracefile`, in
the OTLP JSON encoding of `otlp_json`).

Nothing is imported here, so that importing one part never pays for the others.
"""
