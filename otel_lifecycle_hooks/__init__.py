"""otel-lifecycle-hooks: declarative lifecycle hooks for AI agents, visible in OpenTelemetry."""
