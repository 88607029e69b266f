"""What a run's session is made of besides its phases: telemetry from the `OTEL_*` settings,
the hook engine and the session span.

`run` makes them when first needed (supervisor/phases.py): at the first event that fires a
hook, or right after its agent's spawn when nothing before needed them. This module is
imported then, so that an agent whose template fires nothing before its start does not wait
for the OTel SDK and the engine.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Literal, NamedTuple, cast

from .. import events as ev
from ..engine.engine import HookEngine
from ..engine.session import AgentSession
from ..telemetry.metrics import JournalLosses
from ..telemetry.otel_env import in_a_callers_span
from ..telemetry.setup import Telemetry, configure_telemetry
from .deferred import DeferredJournal

if TYPE_CHECKING:
    from ..journal.base import Journal
    from ..tracecontext import SpanIds
    from .options import JournalOption, SupervisorOptions


class SessionParts(NamedTuple):
    """Telemetry, the engine and the session span of one run."""

    telemetry: Telemetry
    engine: HookEngine
    session: AgentSession


def make_session_parts(
    options: SupervisorOptions,
    metadata: Mapping[str, str],
    ids: SpanIds,
    started: int,
    journal_losses: Callable[[], dict[str, int]],
) -> SessionParts:
    """The parts of the session `options` describe: its span starts at `started` (unix
    nanoseconds) with `ids`, which the agent may already have been given; `journal_losses`
    reports what the journal lost, as a metric."""
    # Under a library caller's span the session span is its child: no ids chosen before.
    first_ids = None if in_a_callers_span() else ids
    resource = {
        attr: metadata[name] for name, attr in ev.METADATA_ATTRIBUTES.items() if metadata.get(name)
    }
    telemetry = configure_telemetry(
        options.template.env,
        options.environ,
        resource_attributes=resource,
        session_id=metadata["AGENT_SLUG"],
        metrics_later=True,  # made once the agent has started (start_metrics)
        first_span_ids=first_ids,
    )
    telemetry.quiet_session_export_failures()
    engine = HookEngine(
        options.template,
        tracer_provider=telemetry.tracer_provider,
        meter_provider=telemetry.meter_provider,
        environ=options.environ,
        journal=engine_journal(options.journal, options.environ),
        hook_log=options.hook_log,
        script_user=options.user,
    )
    for watcher in options.watchers:
        engine.recorders.watch(watcher)
    JournalLosses(journal_losses, telemetry.meter_provider)
    session = AgentSession(
        engine,
        agent_name=metadata["AGENT_NAME"],
        metadata=metadata,
        tracer_provider=telemetry.tracer_provider,
        start_time=started,
    )
    context = session.span.get_span_context()
    if first_ids and context.is_valid and (context.trace_id, context.span_id) != first_ids:
        raise RuntimeError("the session span did not get the ids its agent is given")
    # The log records of the events before the agent's start wait for it (their timestamps
    # kept).
    session.hold_event_records()
    return SessionParts(telemetry, engine, session)


def engine_journal(journal: JournalOption, environ: Mapping[str, str]) -> Journal | Literal[False]:
    """The journal for the engine: a path or None is opened at its first use (deferred.py),
    not before the agent starts; an instance or False as it is."""
    if journal is None or isinstance(journal, (str, bytes, os.PathLike)):
        # A stand-in whose every attribute is the journal it opens: typed as that journal.
        return cast("Journal", DeferredJournal(journal, environ))
    return journal
