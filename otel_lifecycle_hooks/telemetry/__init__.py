"""Telemetry: providers from OTEL_* (`setup`), the metric instruments (`metrics`), the local
trace file (`tracefile`) and the `opentelemetry-instrument` hook (`autoload`).

Nothing is imported here, so that importing one part never pays for the others.
"""
