"""`HookEngine`: a loaded template with its executor, dispatcher and recorders, ready to fire."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from opentelemetry import metrics as metrics_api
from opentelemetry import trace

from ..template.model import Template
from ..template.secrets import secret_names_for
from ..variables import Variables
from .clock import SYSTEM_CLOCK, Clock
from .dispatch import DEFAULT_QUEUE_LIMIT, Dispatcher, DispatchResult
from .executor import HookExecutor
from .model import LifecycleEvent, SessionInfo
from .recording import Recorders, build_recorders
from .workers import workers_from

log = logging.getLogger("otel_lifecycle_hooks.engine")

# How long shutdown() waits for pending and in-flight hooks by default.
DEFAULT_SHUTDOWN_TIMEOUT = 10.0


class HookEngine:
    """Fires a template's hooks for lifecycle events and records every execution.

    Hooks are business logic, not telemetry: nothing here depends on a span being sampled or
    on the SDK being enabled; the tracer provider only receives the hook spans.
    """

    def __init__(
        self,
        template: Template,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics_api.MeterProvider | None = None,
        environ: Mapping[str, str] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        journal: Any = None,
        hook_log: Any = None,
        credentials: Any = None,
        http_client: Any = None,
        queue_limit: int = DEFAULT_QUEUE_LIMIT,
        script_user: str | None = None,
        workers: int | None = None,
    ) -> None:
        self.template = template
        self.clock = clock
        env = os.environ if environ is None else environ
        self.executor = HookExecutor(
            template,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            environ=environ,
            clock=clock,
            credentials=credentials,
            http_client=http_client,
            script_user=script_user,
        )
        self.recorders: Recorders = build_recorders(
            self.executor,
            meter_provider=meter_provider,
            journal=journal,
            hook_log=hook_log,
            environ=env,
        )
        # The worker threads every hook shares ($LIFECYCLE_HOOKS_WORKERS, default 8).
        workers = workers_from(env) if workers is None else workers
        # No origin can have more requests in flight than there are workers: as many idle
        # connections per origin are kept, so a burst never closes one it will want again.
        self.executor.http_keep_alive = workers
        self.dispatcher = Dispatcher(
            template, self.executor, self.recorders.listener, queue_limit, workers
        )
        if self.recorders.metrics is not None:
            self.recorders.metrics.observe_queues(self.dispatcher.queue_depths)
        self._shut = False
        self._secret_names = secret_names_for(template)

    @classmethod
    def from_template(cls, *paths: str | os.PathLike[str], **options: Any) -> HookEngine:
        """Load and validate template files (parent first), then build an engine."""
        from ..template.loader import load_templates

        return cls(load_templates([Path(p) for p in paths]), **options)

    def fire(
        self,
        event: str | LifecycleEvent,
        session: SessionInfo,
        fields: Mapping[str, Any] | None = None,
        *,
        deadline: float | None = None,
    ) -> DispatchResult:
        """Fire the hooks of one event. Returns after the blocking hooks finished (or
        `deadline`, monotonic, passed); non-blocking hooks run on the shared workers."""
        if isinstance(event, str):
            event = LifecycleEvent(
                name=event,
                fields={k: _text(v) for k, v in (fields or {}).items() if v is not None},
                timestamp=session.next_moment(self.clock.wall()),
            )
        self.recorders.event_recorded(event)
        return self.dispatcher.dispatch(event, session, deadline)

    def redact_reported(self, values: Mapping[str, str]) -> dict[str, str]:
        """Event values as a span event or log record may hold them: the agent reports them,
        and may echo a secret it saw (a token in ASSISTANT_TEXT), so every secret the hooks
        know (secret-named variables of `env:` and the environment, tokens handed out) is
        taken out first."""
        if not values:
            return {}
        # With no secret-named variable there are no values to look up (tokens handed out
        # are still the executor's to add): no resolver is built for every event.
        variables = (
            Variables(
                template_env=self.template.env,
                environ=self.executor.environ,
                secret_names=self._secret_names,
            )
            if self._secret_names
            else None
        )
        redactor = self.executor.redactor(variables)
        return {name: redactor.redact_text(value) for name, value in values.items()}

    def force_flush(self, timeout: float = DEFAULT_SHUTDOWN_TIMEOUT) -> bool:
        return self.dispatcher.wait_idle(timeout)

    def shutdown(self, timeout: float = DEFAULT_SHUTDOWN_TIMEOUT) -> None:
        """Deliver pending debounced events, drain queued and in-flight hooks within
        `timeout` seconds, then release the HTTP client, credentials and recorders."""
        if self._shut:
            return
        self._shut = True
        self.dispatcher.shutdown(timeout)
        self.executor.close()
        self.recorders.close()

    def hooks_for(self, event: str) -> Sequence[str]:
        return [h.name for h in self.template.hooks_for(event)]


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
