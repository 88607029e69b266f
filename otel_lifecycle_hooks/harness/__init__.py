"""Harness ingestion: raw harness hook payloads in, normalized events and activity out.

`dialects/` turns each harness's payload into `normalized.NormalizedEvent`s (one module, or one
`dialect.yaml`, per harness); `activity.ActivityTracker` derives the agent's activity from them;
`socket_client` hands them to the supervisor, and `without_supervisor` with `state` fires hooks
in-process when there is none. Everything on the way to the socket is standard library only.
"""
