"""`HookEngine`: a loaded template with its executor, dispatcher and recorders, ready to fire."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

from opentelemetry import metrics as metrics_api
from opentelemetry import trace

from ..hooklog import HookLog, default_hook_log_path
from ..template.loader import load_templates
from ..template.model import Template
from ..template.secrets import secret_names_for
from ..variables import Variables
from .clock import SYSTEM_CLOCK, Clock
from .dispatch import DEFAULT_QUEUE_LIMIT, Dispatcher, DispatchResult
from .executor import HookExecutor
from .model import LifecycleEvent, SessionInfo
from .recording import Recorders, build_recorders
from .runners import RUNNERS, ActionRegistry
from .workers import workers_from

if TYPE_CHECKING:
    from ..actions.http import HttpClient
    from ..auth.credentials import Credentials
    from ..journal.base import Journal as JournalBackend

# Where a journal or hook log is: a path (None: the environment's or the default location).
Location: TypeAlias = str | os.PathLike[str] | None

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
        journal: JournalBackend | Location | Literal[False] = None,
        hook_log: HookLog | Location | Literal[False] = None,
        credentials: Credentials | None = None,
        http_client: HttpClient | None = None,
        queue_limit: int = DEFAULT_QUEUE_LIMIT,
        script_user: str | None = None,
        workers: int | None = None,
        runners: ActionRegistry = RUNNERS,
    ) -> None:
        """`journal` and `hook_log`: an open one, a path, None for the default location, or
        False for none; one opened here is closed by `shutdown`. `runners`: the action types
        this engine can run (engine/runners/)."""
        self.template = template
        self.clock = clock
        env = os.environ if environ is None else environ
        # Those opened here, closed at shutdown.
        self._owned: list[_Closeable] = []
        opened_hook_log = self._open_hook_log(hook_log, env)
        self.recorders: Recorders = build_recorders(
            meter_provider=meter_provider,
            journal=self._open_journal(journal, env),
            hook_log=opened_hook_log,
        )
        self.executor = HookExecutor(
            template,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            environ=environ,
            clock=clock,
            observers=self.recorders.observers,
            credentials=credentials,
            http_client=http_client,
            script_user=script_user,
            runners=runners,
        )
        # The worker threads every hook shares ($LIFECYCLE_HOOKS_WORKERS, default 8).
        workers = workers_from(env) if workers is None else workers
        # No origin can have more requests in flight than there are workers: as many idle
        # connections per origin are kept, so a burst never closes one it will want again.
        self.executor.http_keep_alive = workers
        self.dispatcher = Dispatcher(
            template, self.executor, self.recorders.listener, queue_limit, workers
        )
        self.recorders.metrics.observe_queues(self.dispatcher.queue_depths)
        self._shut = False
        self._secret_names = secret_names_for(template)

    def _open_journal(
        self, journal: JournalBackend | Location | Literal[False], environ: Mapping[str, str]
    ) -> JournalBackend | None:
        if journal is False:
            return None
        if journal is not None and not isinstance(journal, (str, os.PathLike)):
            return journal
        # Imported here, not above: SQLite and the journal's modules (about 6 ms, -X importtime)
        # come after the agent's start, which `run` reaches with a journal opened later
        # (supervisor/deferred.py).
        from ..journal import journal_location, open_journal

        opened: JournalBackend = open_journal(
            journal_location(os.fspath(journal) if journal else None, environ)
        )
        self._owned.append(opened)
        return opened

    def _open_hook_log(
        self, hook_log: HookLog | Location | Literal[False], environ: Mapping[str, str]
    ) -> HookLog | None:
        if hook_log is False:
            return None
        if hook_log is not None and not isinstance(hook_log, (str, os.PathLike)):
            return hook_log
        opened = HookLog(hook_log or default_hook_log_path(environ))
        self._owned.append(opened)
        return opened

    @classmethod
    def from_template(cls, *paths: str | os.PathLike[str], **options: Any) -> HookEngine:
        """Load and validate template files (parent first), then build an engine."""
        return cls(load_templates([Path(p) for p in paths]), **options)

    def fire(
        self,
        event: str | LifecycleEvent,
        session: SessionInfo,
        fields: Mapping[str, object] | None = None,
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
        for owned in self._owned:
            try:
                owned.close()
            except Exception:
                log.debug("closing %r failed", owned, exc_info=True)

    def hooks_for(self, event: str) -> Sequence[str]:
        return [h.name for h in self.template.hooks_for(event)]


class _Closeable(Protocol):
    def close(self) -> None: ...


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
