"""The vocabulary: lifecycle events, phases, activities and the OpenTelemetry names.

This module imports nothing beyond the standard library, so that the harness hook
command and the loader can use it without paying for the OpenTelemetry SDK.
"""

from __future__ import annotations

# Template events of seed 000: what a template's `on:` may name.
PRE_START = "pre-start"
POST_START = "post-start"
PRE_STOP = "pre-stop"
SESSION_END = "session-end"
PHASE_CHANGE = "phase-change"
ACTIVITY_CHANGE = "activity-change"
TASK_COMPLETED = "task-completed"
LIMITS_EXCEEDED = "limits-exceeded"
# LIMIT_NAME of a limit the agent reported itself (`status limits_exceeded`).
REPORTED_LIMIT = "reported"
ERROR = "error"

TEMPLATE_EVENTS: tuple[str, ...] = (
    PRE_START,
    POST_START,
    PRE_STOP,
    SESSION_END,
    PHASE_CHANGE,
    ACTIVITY_CHANGE,
    TASK_COMPLETED,
    LIMITS_EXCEEDED,
    ERROR,
)

# Scion's normalized harness vocabulary: runtime events a hook may also name.
RUNTIME_EVENTS: tuple[str, ...] = (
    "session-start",
    "prompt-submit",
    "agent-start",
    "agent-end",
    "model-start",
    "model-end",
    "tool-start",
    "tool-end",
    "notification",
    "response-complete",
    "subagent-end",
    "pre-compact",
    "post-compact",
)

ALL_EVENTS: frozenset[str] = frozenset(TEMPLATE_EVENTS + RUNTIME_EVENTS)

# Events that are never dropped under load, whatever the queue's state.
LIFECYCLE_EVENTS: frozenset[str] = frozenset({PRE_START, POST_START, PRE_STOP, SESSION_END, ERROR})

# The only events whose hooks may be debounced (seed 000, validation rule 7).
DEBOUNCEABLE_EVENTS: frozenset[str] = frozenset({ACTIVITY_CHANGE, PHASE_CHANGE})
# The transitions a blocking `on_error: fail` hook can abort (the agent is not started, or is
# stopped in phase error). At any other event the stop, or the work, goes on all the same, so
# the hooks after a failed one still run.
ABORTABLE_EVENTS: frozenset[str] = frozenset({PRE_START, POST_START})

PHASES: tuple[str, ...] = (
    "created",
    "provisioning",
    "starting",
    "running",
    "stopping",
    "stopped",
    "error",
)

ACTIVITIES: tuple[str, ...] = (
    "idle",
    "thinking",
    "executing",
    "waiting_for_input",
    "blocked",
    "completed",
    "limits_exceeded",
    "stalled",
    "offline",
)

# Activities that hold until new work arrives (prompt-submit, agent-start, session-start).
STICKY_ACTIVITIES: frozenset[str] = frozenset(
    {"waiting_for_input", "blocked", "completed", "limits_exceeded"}
)

# --- OpenTelemetry names (SPEC section 4) -----------------------------------------------

SPAN_EVENT_PREFIX = "agent.lifecycle."
# A hook span is named `{HOOK_SPAN_NAME} {hook name}` (the GenAI conventions' `{operation}
# {target}`), so that a trace UI's list tells hooks apart; the hook name is also an attribute,
# which is what queries should match. Low cardinality: hook names come from templates and
# host configurations, checked against a name pattern when loaded, never from the agent.
HOOK_SPAN_NAME = "agent.lifecycle_hook"
_HOOK_SPAN_NAME_PREFIX = HOOK_SPAN_NAME + " "
HOOK_RETRY_EVENT = "agent.lifecycle_hook.retry"


def hook_span_name(hook_name: str) -> str:
    """The name of a span of `hook_name`'s executions: `agent.lifecycle_hook register-agent`."""
    return _HOOK_SPAN_NAME_PREFIX + hook_name


def is_hook_span_name(name: object) -> bool:
    """Whether `name` is a hook span's: `agent.lifecycle_hook {hook name}`, or the bare
    `agent.lifecycle_hook` that earlier versions wrote (their trace files are still read)."""
    return isinstance(name, str) and (
        name == HOOK_SPAN_NAME or name.startswith(_HOOK_SPAN_NAME_PREFIX)
    )


ATTR_EVENT = "agent.lifecycle.event"
# Set by the package's own API on the span events it records, so that the span-event
# observer can tell an event it has already dispatched from one added by plain code.
ATTR_EVENT_ID = "agent.lifecycle.event_id"

ATTR_OPERATION_NAME = "gen_ai.operation.name"
OPERATION_INVOKE_AGENT = "invoke_agent"
_SESSION_SPAN_NAME_PREFIX = OPERATION_INVOKE_AGENT + " "

ATTR_AGENT_NAME = "gen_ai.agent.name"
ATTR_AGENT_ID = "gen_ai.agent.id"
ATTR_CONVERSATION_ID = "gen_ai.conversation.id"
# The harness's own session id (Claude Code's session_id, ...), beside the supervisor's.
ATTR_HARNESS_SESSION_ID = "scion.harness.session_id"

# Span event attributes, keyed by the variable that carries the same value.
EVENT_ATTRIBUTES: dict[str, str] = {
    "PHASE": "agent.phase",
    "PREVIOUS_PHASE": "agent.phase.previous",
    "ACTIVITY": "agent.activity",
    "PREVIOUS_ACTIVITY": "agent.activity.previous",
    "TOOL_NAME": "gen_ai.tool.name",
    "EXIT_CODE": "process.exit.code",
    "ERROR_TYPE": "error.type",
    "ERROR_MESSAGE": "agent.error.message",
    "TASK_SUMMARY": "agent.task.summary",
    "ASSISTANT_TEXT": "agent.assistant_text",
    "LIMIT_NAME": "agent.limit.name",
    "LIMIT_COUNT": "agent.limit.count",
    "HARNESS_SESSION_ID": ATTR_HARNESS_SESSION_ID,
}

# Agent metadata, as resource or session span attributes, keyed by variable.
METADATA_ATTRIBUTES: dict[str, str] = {
    "AGENT_NAME": "gen_ai.agent.name",
    "AGENT_ID": "gen_ai.agent.id",
    "AGENT_SLUG": "scion.agent.slug",
    "TEMPLATE_NAME": "scion.template.name",
    "HARNESS_NAME": "scion.harness.name",
    "HARNESS_CONFIG": "scion.harness.config",
    "GROVE_NAME": "scion.grove.name",
    "GROVE_ID": "scion.grove.id",
    "GROVE_PATH": "scion.grove.path",
    "CONTAINER_ID": "container.id",
    "IMAGE": "container.image.name",
    "SESSION_ID": "gen_ai.conversation.id",
}

# Hook span attributes.
HOOK_ATTR_NAME = "agent.lifecycle_hook.name"
HOOK_ATTR_EVENT = "agent.lifecycle_hook.event"
HOOK_ATTR_ACTION = "agent.lifecycle_hook.action"
HOOK_ATTR_BLOCKING = "agent.lifecycle_hook.blocking"
HOOK_ATTR_ON_ERROR = "agent.lifecycle_hook.on_error"
HOOK_ATTR_ATTEMPTS = "agent.lifecycle_hook.attempts"
HOOK_ATTR_OUTCOME = "agent.lifecycle_hook.outcome"
# Marks every span the engine makes, so that they never trigger hooks themselves.
HOOK_ATTR_INTERNAL = "agent.lifecycle_hook.internal"
# On a replay's hook span: the journal id of the execution it re-sends.
HOOK_ATTR_REPLAYED_FROM = "agent.lifecycle_hook.replayed_from"

OUTCOMES: tuple[str, ...] = ("success", "failed", "timeout", "skipped", "refused")


def span_event_name(event: str) -> str:
    """`pre-stop` -> `agent.lifecycle.pre_stop`."""
    return SPAN_EVENT_PREFIX + event.replace("-", "_")


def event_from_span_event_name(name: str) -> str | None:
    """`agent.lifecycle.pre_stop` -> `pre-stop`; None when the name is not one of ours."""
    if not name.startswith(SPAN_EVENT_PREFIX):
        return None
    event = name[len(SPAN_EVENT_PREFIX) :].replace("_", "-")
    return event if event in ALL_EVENTS else None


def names_a_session(span_name: str) -> bool:
    """Whether a span's name is a session span's: `invoke_agent`, or `invoke_agent {agent
    name}`, as the GenAI conventions name the span whose `gen_ai.operation.name` is
    `invoke_agent`. A session has both."""
    return span_name.startswith(_SESSION_SPAN_NAME_PREFIX) or span_name == OPERATION_INVOKE_AGENT
