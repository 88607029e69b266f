"""What a loaded template holds: immutable values, built only by the loader after validation.

Field names follow seed 000's `LifecycleHookSpec` and `HookAction`; durations are seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

if TYPE_CHECKING:
    # Only for annotations: templates without a `condition:` never import the parser.
    from .condition import Condition

ActionType = Literal["http", "webhook", "script", "python", "jsonrpc"]
ErrorPolicy = Literal["log", "fail", "retry"]
AuthType = Literal["none", "gcp-default", "gcp-service-account", "bearer-token", "api-key-header"]

ACTION_TYPES: tuple[str, ...] = ("http", "webhook", "script")
# Built only by the readers of the other seeds' hook systems (otel_lifecycle_hooks/systems/):
# in-process Python executors and remote JSON-RPC executors; `lifecycle_hooks:` cannot name them.
SYSTEM_ACTION_TYPES: tuple[str, ...] = ("python", "jsonrpc")
# Script wire protocols: ours (None), core-agent's envelope (seed 001), the host-agnostic one (003).
SCRIPT_PROTOCOLS: tuple[str, ...] = ("core-agent", "host-v1")
# script `run_as:`: "agent" (the default: the agent's user, when the supervisor has one) or
# "root" (the supervisor's own user, confined: see actions/script.py).
RUN_AS: tuple[str, ...] = ("agent", "root")
ERROR_POLICIES: tuple[str, ...] = ("log", "fail", "retry")
AUTH_TYPES: tuple[str, ...] = (
    "none",
    "gcp-default",
    "gcp-service-account",
    "bearer-token",
    "api-key-header",
)

DEFAULT_HTTP_TIMEOUT = 10.0
DEFAULT_SCRIPT_TIMEOUT = 30.0
MAX_TIMEOUT = 120.0
# The longest `retry: {horizon: ...}` an owed hook may ask for: a week.
MAX_RETRY_HORIZON = 7 * 24 * 3600.0
# The events whose hooks a killed session still owes (journal/rows.py's OWED_EVENTS): the
# only ones a retry horizon applies to.
RETRIED_EVENTS: tuple[str, ...] = ("pre-stop", "session-end")
DEFAULT_API_KEY_HEADER = "X-API-Key"

_EMPTY: Mapping[str, str] = MappingProxyType({})
_EMPTY_POINTS: Mapping[str, tuple[str, ...]] = MappingProxyType({})


class Position(NamedTuple):
    """Where a value stands in a template file (1-based line and column)."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


_NO_POSITIONS: Mapping[str, Position] = MappingProxyType({})


# `rate_limit` units: "10/min" is ten per minute.
RATE_PERIODS: Mapping[str, float] = MappingProxyType(
    {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0,
     "h": 3600.0, "hour": 3600.0}
)  # fmt: skip


class RateLimit(NamedTuple):
    """`executions` per `period` seconds (`10/min`): a burst of up to `executions`, then one
    every `period / executions` seconds (a token bucket)."""

    executions: int
    period: float
    text: str = ""

    @classmethod
    def parse(cls, text: str) -> RateLimit:
        """`"10/min"`, `"5/s"`, `"100/h"` -> RateLimit; ValueError says what would be valid."""
        count_text, slash, unit = text.strip().partition("/")
        period = RATE_PERIODS.get(unit.strip().lower())
        digits = count_text.strip()
        count = int(digits) if digits.isascii() and digits.isdigit() else 0
        if not slash or period is None or count < 1:
            raise ValueError(
                f'got "{text.strip()}"; write a count per unit, e.g. 10/min, 5/s or 100/h '
                f"(units: {', '.join(RATE_PERIODS)})"
            )
        return cls(count, period, text.strip())


class AuthSpec(NamedTuple):
    """How an action authenticates.

    `auth: bearer-token` (a string) is the short form; the mapping form names where the
    secret comes from: `{type: bearer-token, token_env: MONITORING_TOKEN}`.
    """

    type: AuthType = "none"
    token_env: str | None = None  # bearer-token, api-key-header: the variable's NAME
    header: str = DEFAULT_API_KEY_HEADER  # api-key-header
    credentials_file: str | None = None  # gcp-service-account; else GOOGLE_APPLICATION_CREDENTIALS
    scopes: tuple[str, ...] = ("https://www.googleapis.com/auth/cloud-platform",)


class HookAction(NamedTuple):
    """What a hook does (seed 000's `HookAction`)."""

    type: ActionType
    method: str = "POST"  # http; webhook is always POST
    url: str | None = None
    headers: Mapping[str, str] = _EMPTY
    body: str | None = None
    auth: AuthSpec = AuthSpec()
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = _EMPTY
    # Standard Webhooks signing (opt-in): the NAME of the variable holding `whsec_...`.
    signing_secret_env: str | None = None
    # script: the wire protocol its stdin/argv/stdout follow (SCRIPT_PROTOCOLS); None is ours.
    protocol: str | None = None
    # script: who runs it (RUN_AS); "root" must be written, the agent's user is the default.
    run_as: str = "agent"
    # script: agent-chosen values may stand in plain data arguments of `command` (never the
    # program, program text or an option: template/trust.py); otherwise env and stdin only.
    agent_values_in_args: bool = False
    # python: where the executor lives (exactly one of module / path), which attribute names it,
    # and the keyword arguments it is constructed with.
    module: str | None = None
    path: str | None = None
    executor: str | None = None
    with_args: Mapping[str, Any] = _EMPTY
    # python, jsonrpc: for each of our events, the names the hook system calls it (the methods
    # called, or the JSON-RPC methods sent), in order.
    points: Mapping[str, tuple[str, ...]] = _EMPTY_POINTS

    @property
    def is_http(self) -> bool:
        return self.type in ("http", "webhook")


class HookSpec(NamedTuple):
    """One entry of `lifecycle_hooks:` (seed 000's `LifecycleHookSpec`), validated."""

    name: str
    on: tuple[str, ...]
    action: HookAction
    on_error: ErrorPolicy = "log"
    timeout: float = DEFAULT_HTTP_TIMEOUT
    blocking: bool = False
    debounce: float | None = None
    condition: Condition | None = None  # parsed at load time
    enabled: bool = True
    position: Position | None = None
    # With on_error: fail, the events at which a failure refuses the transition; None: all.
    # (the-loop's `required` refuses only at the points that carry `proceed`.)
    refuse_on: frozenset[str] | None = None
    # At most this many executions per window; excess runtime events are coalesced.
    rate_limit: RateLimit | None = None
    # `retry: {horizon: 1h}` (pre-stop and session-end hooks only): seconds after its event
    # began during which a failed delivery stays owed, retried by the next run or `reconcile`
    # through the journal; None: given up after RECOVERY_PASSES failed recovery passes.
    retry_horizon: float | None = None
    # Where each field of the entry is written ("action.url", "action.command[0]", ...), and
    # the entry's index in its file's `lifecycle_hooks`: checks made after loading (trust
    # rules, warnings) point at the field itself.
    field_positions: Mapping[str, Position] = _NO_POSITIONS
    entry_index: int | None = None

    def position_of(self, field_path: str) -> Position | None:
        """Where `field_path` (or the nearest field holding it) is written; else the hook's
        position."""
        path = field_path
        while path:
            found = self.field_positions.get(path)
            if found is not None:
                return found
            cut = max(path.rfind("."), path.rfind("["))
            path = path[:cut] if cut > 0 else ""
        return self.position


class Template(NamedTuple):
    """The merged result of one or more template files."""

    hooks: tuple[HookSpec, ...] = ()
    env: Mapping[str, str] = _EMPTY
    # Names of variables declared under `secrets:`; their values are redacted everywhere.
    secrets: frozenset[str] = frozenset()
    # Agent metadata the template states (harness, image, template name ...), keyed by variable.
    metadata: Mapping[str, str] = _EMPTY
    files: tuple[str, ...] = ()
    # `limits:` of scion-agent.yaml (max_turns, max_model_calls, max_duration), as written.
    limits: Mapping[str, str] = _EMPTY
    # `user:` of scion-agent.yaml: the agent's (and its script hooks') user, when set.
    user: str | None = None
    # `hook_rate_limit:` of scion-agent.yaml: one limit shared by all HTTP hooks of the agent.
    hook_rate_limit: RateLimit | None = None
    # `share_with_agent:`: credentials its hooks name that the agent's environment keeps
    # anyway (by default the supervisor withholds them: agent_env.py).
    share_with_agent: frozenset[str] = frozenset()

    def hooks_for(self, event: str) -> tuple[HookSpec, ...]:
        """The enabled hooks for `event`, in declaration order."""
        return tuple(h for h in self.hooks if h.enabled and event in h.on)
