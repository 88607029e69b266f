"""The seam between the executor and the action types: one `ActionRunner` per type makes one
attempt; the executor around it keeps the condition, the variables, the span and the retries.

Runners are found in an `ActionRegistry`, keyed by the action's type and, for scripts, its
wire protocol. This package registers http, webhook and script (engine/runners/__init__.py);
the other seeds' hook systems register theirs (systems/runners.py), so the engine never
names them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple, Protocol

from ...actions.base import AttemptResult
from ...redact import Redactor
from ...render import RenderedCommand, RenderedRequest
from ...template.model import HookAction, HookSpec, Template
from ...variables import Variables
from ..clock import Clock
from ..model import LifecycleEvent, SessionInfo

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from ...actions.http import HttpClient
    from ...auth.credentials import Credentials

OutputListener = Callable[[str, str], None]


class Refusal(Exception):
    """The execution is refused before any attempt: nothing is sent."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(error_type, message)
        self.error_type = error_type
        self.message = message


# A NamedTuple, not a dataclass: made before run's spawn, 0.07 ms vs 0.5 ms (bench_startup.py)
class Attempt(NamedTuple):
    """What one attempt of one hook is made from."""

    hook: HookSpec
    event: LifecycleEvent
    session: SessionInfo
    rendered: RenderedRequest | RenderedCommand | None  # None: the runner renders nothing
    hook_id: str  # the idempotency key, sent as X-Scion-Hook-ID
    span: Span  # the hook's span, the parent of what the attempt traces
    timeout: float  # seconds this attempt may take
    variables: Variables


class ActionServices(Protocol):
    """What the executor lends a runner: the shared clients and the execution's secrets."""

    @property
    def clock(self) -> Clock: ...

    @property
    def template(self) -> Template: ...

    @property
    def environ(self) -> Mapping[str, str]: ...

    def http_client(self) -> HttpClient:
        """The HTTP client every attempt shares, made at its first use."""

    def credentials(self) -> Credentials:
        """The token cache every attempt shares, made at its first use."""

    def redactor(self, variables: Variables | None) -> Redactor:
        """A redactor for every secret known now: the variables' and the tokens handed out."""

    def output_listener(
        self, hook: HookSpec, redactor: Redactor | None = None
    ) -> OutputListener | None:
        """Where `hook`'s script output lines go (None: nobody reads them)."""

    def script_identity(self, hook: HookSpec) -> tuple[str | None, bool]:
        """Who runs `hook`'s script (None: this process's user) and whether it is confined."""

    def inherited_env(self, user: str | None) -> dict[str, str] | None:
        """What a script run as `user` inherits (None: this process's whole environment)."""


class ActionRunner(Protocol):
    """Makes one attempt of one hook's action and says how it went; never retries."""

    # Whether the action is rendered (a request or a command) before its attempts.
    @property
    def renders(self) -> bool: ...

    def attempt(self, services: ActionServices, attempt: Attempt) -> AttemptResult:
        """One attempt; raises `Refusal` when nothing may be sent at all."""


class ActionRegistry:
    """The runner of each action type (and script protocol) an executor can run."""

    def __init__(self) -> None:
        self._runners: dict[tuple[str, str | None], ActionRunner] = {}

    def register(self, action_type: str, runner: ActionRunner, protocol: str | None = None) -> None:
        """Run actions of `action_type` (scripts: of wire `protocol`) with `runner`."""
        self._runners[(action_type, protocol)] = runner

    def runner_for(self, action: HookAction) -> ActionRunner:
        """The runner of `action`; raises `Refusal` when none is registered."""
        runner = self._runners.get((action.type, action.protocol))
        if runner is None:
            kind = action.type if action.protocol is None else f"{action.type}/{action.protocol}"
            raise Refusal("UnknownAction", f"no runner is registered for {kind} actions")
        return runner

    def copy(self) -> ActionRegistry:
        """A registry with the same runners, to add to without changing this one."""
        copied = ActionRegistry()
        copied._runners.update(self._runners)
        return copied
