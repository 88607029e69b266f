"""What a loaded template holds: immutable values, built only by the loader after validation.

Field names follow seed 000's `LifecycleHookSpec` and `HookAction`; durations are seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, Mapping

from .condition import Condition

ActionType = Literal["http", "webhook", "script"]
ErrorPolicy = Literal["log", "fail", "retry"]
AuthType = Literal["none", "gcp-default", "gcp-service-account", "bearer-token", "api-key-header"]

ACTION_TYPES: tuple[str, ...] = ("http", "webhook", "script")
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
DEFAULT_API_KEY_HEADER = "X-API-Key"

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class Position:
    """Where a value stands in a template file (1-based line and column)."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class AuthSpec:
    """How an action authenticates.

    `auth: bearer-token` (a string) is the short form; the mapping form names where the
    secret comes from: `{type: bearer-token, token_env: MONITORING_TOKEN}`.
    """

    type: AuthType = "none"
    token_env: str | None = None  # bearer-token, api-key-header: the variable's NAME
    header: str = DEFAULT_API_KEY_HEADER  # api-key-header
    credentials_file: str | None = None  # gcp-service-account; else GOOGLE_APPLICATION_CREDENTIALS
    scopes: tuple[str, ...] = ("https://www.googleapis.com/auth/cloud-platform",)


@dataclass(frozen=True)
class HookAction:
    """What a hook does (seed 000's `HookAction`)."""

    type: ActionType
    method: str = "POST"  # http; webhook is always POST
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    body: str | None = None
    auth: AuthSpec = field(default_factory=AuthSpec)
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    # Standard Webhooks signing (opt-in): the NAME of the variable holding `whsec_...`.
    signing_secret_env: str | None = None

    @property
    def is_http(self) -> bool:
        return self.type in ("http", "webhook")


@dataclass(frozen=True)
class HookSpec:
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

    def handles(self, event: str) -> bool:
        return event in self.on


@dataclass(frozen=True)
class Template:
    """The merged result of one or more template files."""

    hooks: tuple[HookSpec, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    # Names of variables declared under `secrets:`; their values are redacted everywhere.
    secrets: frozenset[str] = frozenset()
    # Agent metadata the template states (harness, image, template name ...), keyed by variable.
    metadata: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    files: tuple[str, ...] = ()
    # `limits:` of scion-agent.yaml (max_turns, max_model_calls, max_duration), as written.
    limits: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    # `user:` of scion-agent.yaml: the agent's (and its script hooks') user, when set.
    user: str | None = None

    def hooks_for(self, event: str) -> tuple[HookSpec, ...]:
        """The enabled hooks for `event`, in declaration order."""
        return tuple(h for h in self.hooks if h.enabled and event in h.on)
