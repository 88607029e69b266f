"""What the agent reports, from the wire to the hooks: the event socket, the session's channel
(its variables, the pointer file, Claude Code's loopback HTTP route), admission with its
counts, and each admitted message turned into activity events and limits.

Everything here comes from the agent and is untrusted: a message is admitted or refused and
counted (admission.py), and nothing it makes a handler do may end the session.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import events as ev
from ..engine.gates import ALLOW, is_gate
from ..engine.policies import fails_transition
from ..harness.normalized import HARNESS_SESSION_ID
from .admission import Admission, Admitted, IngressCounts
from .agent_tree import agent_user_ids
from .channel import SessionChannel, wants_http_route
from .inbox import Inbox
from .limits import Limits
from .phases import Phases
from .server import STOPPING, EventServer, Reply

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider

    from ..harness.activity import ActivityTracker, Derived
    from ..harness.normalized import NormalizedEvent

log = logging.getLogger("otel_lifecycle_hooks.supervisor")

# The status by which the agent reports a limit of its own.
REPORTED_LIMIT_STATUS = "limits_exceeded"

# How long the agent's exit waits for its last events still unread in the event socket.
LAST_MESSAGES_BOUND = 1.0  # seconds
# How often a `hook` the agent left running is looked for again while its event is awaited.
SENDER_WAIT = 0.05  # seconds


class AgentEvents:
    """The routes the agent's events take to the main loop, and what the loop makes of them."""

    def __init__(
        self,
        inbox: Inbox,
        phases: Phases,
        limits: Limits,
        environ: Mapping[str, str],
        template_env: Mapping[str, str],
    ) -> None:
        self._inbox = inbox
        self._phases = phases
        self._limits = limits
        self._environ = environ
        self._template_env = template_env
        # Every message from the agent passes here, whatever route it came by (admission.py).
        self.ingress = IngressCounts()
        self._admission = Admission(self.ingress)
        self._channel: SessionChannel | None = None
        self._server: EventServer | None = None
        self._tracker: ActivityTracker | None = None
        self._harness_session_id = ""

    def count_with(self, meter_provider: MeterProvider) -> None:
        """Count refusals with the run's meter provider from now on."""
        self.ingress.count_with(meter_provider)

    def open(self, command: Sequence[str], metadata: Mapping[str, str], user: str | None) -> None:
        """Open the session's channel and the event socket (owned by the agent's user),
        listening; `serve` starts reading it."""
        http = wants_http_route(command, metadata, self._environ)
        owner = agent_user_ids(user)
        self._channel = SessionChannel(
            self._deliver,
            owner,
            http,
            refuse=self.ingress.refuse,
            ask=self._ask,
            fail_closed=self._fail_closed,
        )
        self._server = EventServer(
            self._channel.deliver,
            owner=owner,
            refuse=self.ingress.refuse,
            undelivered=self.ingress.sender_losses,
            ask=self._channel.ask,
        )

    def serve(self) -> None:
        """Start reading the event socket and the HTTP route. Called once the agent is
        started: no one writes to them before, and what the agent sends first waits in the
        listen backlog. Starting the readers' threads (and waiting for each to run) before
        the spawn would hold the agent's start (bench_startup)."""
        if self._server is not None:
            self._server.start()
        if self._channel is not None:
            self._channel.serve()

    def agent_variables(self, env: Mapping[str, str]) -> dict[str, str]:
        """What the agent's environment `env` needs to reach the socket (and the HTTP route);
        writes the pointer file, in the agent's HOME."""
        if self._server is None or self._channel is None:
            return {}
        return self._channel.open(self._server.path, env)

    def _deliver(self, message: dict[str, Any]) -> None:
        """Take one message from the agent (any route): refused and counted unless admitted."""
        admitted = self._admission.admit(message)
        if admitted is not None:
            self._inbox.put_message(admitted)  # may wait: backpressure on the senders

    def _ask(self, message: dict[str, Any], reply: Reply) -> None:
        """A message whose sender waits for the decision of its event's gates on `reply`:
        answered at once when the event has none, else once its hooks ran (`_handle`)."""
        admitted = self._admission.admit(message)
        if admitted is None:
            reply.close()  # nothing was judged: the sender's own policy answers
            return
        if admitted.event is not None and self._gated(admitted.event.event):
            admitted = admitted._replace(reply=reply)
        else:
            reply.send(ALLOW.to_wire())
        self._inbox.put_message(admitted)  # may wait: backpressure on the senders

    def _gated(self, event: str) -> bool:
        """Whether the template has a gate on `event` (a blocking hook it can refuse at)."""
        session = self._phases.session
        if session is None:
            return False
        return any(is_gate(hook, event) for hook in session.engine.template.hooks_for(event))

    def _fail_closed(self, event: str) -> bool:
        """Whether the template has a fail-closed gate at `event` (`on_error: fail`, at the
        events of its `refuse_on`): a decision that comes too late denies there. Called from
        the HTTP route's thread; the template is read only."""
        session = self._phases.session
        if session is None:
            return False
        return any(
            is_gate(hook, event) and fails_transition(hook, "failure", event)
            for hook in session.engine.template.hooks_for(event)
        )

    # -- acting on messages --

    def act_on(self, message: Admitted, *, stopping: bool) -> None:
        """Handle one admitted message; while the session stops, refuse it (counted)."""
        try:
            if stopping:
                self.ingress.refuse(STOPPING)  # the session is ending: not acted on, counted
                return
            self._handle(message)
        except Exception:  # nothing the agent sends may end the session
            log.exception("handling an agent message failed")
            self.ingress.refuse("handler_failed")
        finally:
            if message.reply is not None:
                message.reply.close()  # not judged (stopping, a failure): the sender's policy

    def _handle(self, message: Admitted) -> None:
        if self._tracker is None:
            # Made with the first message: an agent that never reports its activity (no
            # harness hooks) does not pay for the tracker's rules (about 1.2 ms, -X importtime)
            # before its start.
            from ..harness.activity import ActivityTracker, turn_end_completes_task

            self._tracker = ActivityTracker(
                turn_end_completes_task=turn_end_completes_task(self._environ, self._template_env)
            )
        if message.kind == "status" and message.status == REPORTED_LIMIT_STATUS:
            # A limit the agent (or its wrapper) reached: a limit as the supervisor's own are,
            # named "reported", and it stops the agent.
            self._tracker.signal(message.status, message.message)
            self._phases.limit_exceeded(ev.REPORTED_LIMIT, None, message.message)
            return
        if message.kind == "status":
            derived = self._tracker.signal(message.status, message.message)
        elif message.event is not None:
            derived = self._tracker.observe(message.event)
            if not derived and message.reply is not None:
                derived = [self._asked_again(message.event)]
            self._note_harness_session(message.event.session_id)
        else:
            return
        for item in derived:
            fields = dict(item.fields)
            if item.event == ev.ACTIVITY_CHANGE:
                self._phases.activity = fields.get("ACTIVITY", self._phases.activity)
            result = self._phases.record(item.event, fields)
            # The event itself comes first: its gates' decision is what the sender waits for
            # (None: nothing fired, so nothing refused).
            if message.reply is not None and item.event == message.kind_event and result:
                message.reply.send(result.decision.to_wire())
        if message.reply is not None:
            message.reply.send(ALLOW.to_wire())  # answered above unless the loop failed
        hit = self._limits.exceeded(self._tracker.turns, self._tracker.model_calls)
        if hit is not None:
            self._phases.limit_exceeded(*hit)

    def _asked_again(self, event: NormalizedEvent) -> Derived:
        """An event the tracker took for a repeat (a permission prompt, a turn's end told
        twice) whose harness waits on it: dispatched all the same, so that its gates decide.
        Answering it without them would let a line the agent wrote to the socket first,
        the same event forged, stand for the harness's own and skip every gate."""
        # The tracker's module, loaded with the tracker (see `_handle`: 1.2 ms otherwise).
        from ..harness.activity import Derived

        assert self._tracker is not None
        fields = {**event.fields, "ACTIVITY": self._tracker.activity}
        if event.session_id:
            fields[HARNESS_SESSION_ID] = event.session_id
        return Derived(event.event, fields)

    def _note_harness_session(self, harness_session_id: str) -> None:
        """The harness's own id for this session, kept on the session span: SESSION_ID (and
        `gen_ai.conversation.id`) stay the supervisor's, one for every hook of the run."""
        if harness_session_id and harness_session_id != self._harness_session_id:
            self._harness_session_id = harness_session_id
            if self._phases.session is not None:
                self._phases.session.set_attribute(ev.ATTR_HARNESS_SESSION_ID, harness_session_id)

    # -- the end --

    def take_last(
        self,
        *,
        stopping: bool,
        senders_running: Callable[[], bool] = lambda: False,
        until: float = 0.0,
    ) -> None:
        """The agent's last events (a `status` just before it exits) may still be unread in
        the socket when its exit is seen: read them and handle them before the session ends,
        within a short bound (a descendant still sending cannot hold the exit). While a
        `hook` the agent started still runs (`senders_running`: a harness that exits without
        waiting for its last hook, as opencode does on a busy machine), its event is waited
        for too, until `until` (the grace deadline: an agent that names its processes so
        holds only its own session's end, and no longer than its grace period)."""
        if self._server is None:
            return
        deadline = time.monotonic() + LAST_MESSAGES_BOUND
        while True:
            settled = self._server.settle(timeout=max(0.0, deadline - time.monotonic()))
            handled = False
            while (item := self._inbox.get_nowait()) is not None:
                if isinstance(item, Admitted):
                    handled = True
                    self.act_on(item, stopping=stopping)
                # Anything else (a signal) changes nothing: the agent has exited and the
                # session ends next.
            now = time.monotonic()
            if now < until and senders_running():
                deadline = max(deadline, min(until, now + SENDER_WAIT))
                if settled and not handled:
                    time.sleep(SENDER_WAIT)  # the sender is starting or connecting
                continue
            if (settled and not handled) or now >= deadline:
                return

    def close(self) -> None:
        """Close the channel and the socket; count what was admitted but never acted on
        (reason `session_stopping`), so that no loss goes unseen; log the input's summary."""
        if self._channel is not None:
            self._channel.close()
        if self._server is not None:
            self._server.close()
        for item in self._inbox.drain():
            if isinstance(item, Admitted):
                self.ingress.refuse(STOPPING)
        if self.ingress.total:
            log.warning("agent input: %s", self.ingress.summary())
