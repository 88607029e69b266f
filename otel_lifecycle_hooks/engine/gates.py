"""Gates: blocking hooks whose answer decides whether the agent may go on (docs/gates.md).

A gate is a blocking hook on an event a harness lets a hook refuse (`GATE_EVENTS`). Its
decision comes from what its action answered, and from nothing else: the body of its HTTP
response or the stdout of its script, holding `{"decision": "allow"|"deny"|"ask",
"reason": "..."}` (unknown keys ignored), or a system's own answer (a host-protocol script's
`deny`, the-loop's `required` refusal) that its runner hands over as `AttemptResult.decision`.
When the gate fails (endpoint down, timeout, a bad answer), `on_error: fail` makes it deny
(fail-closed); any other `on_error` lets the agent go on (fail-open, the default, as before).

The decisions of several gates on one event merge in declaration order: deny wins, then ask,
then allow; the reasons of the winning verdict are joined. Everything here is pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Literal, NamedTuple

from ..actions.base import AttemptResult
from ..template.model import HookSpec
from .policies import fails_transition

Verdict = Literal["allow", "deny", "ask"]
VERDICTS: tuple[Verdict, ...] = ("allow", "deny", "ask")
_VERDICTS: dict[str, Verdict] = {verdict: verdict for verdict in VERDICTS}
# Which verdict wins a merge: the higher rank.
_RANK: dict[str, int] = {"allow": 0, "ask": 1, "deny": 2}

# The events whose hooks may decide: a tool call, a prompt, a permission request (a
# notification of type permission_prompt) and the end of a turn, where a harness can refuse.
GATE_EVENTS: frozenset[str] = frozenset(
    {"tool-start", "prompt-submit", "notification", "agent-end"}
)

# A decision body longer than this is not read as one: a gate's answer is a few words.
MAX_DECISION_BYTES = 64 * 1024
# A reason reaches the harness, its terminal and the model: kept short and plain.
MAX_REASON_CHARS = 1000
# ANSI escape sequences (CSI, OSC and two-byte ones) and every other control character.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?")
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


class BadDecision(ValueError):
    """A gate answered with a `decision` this package cannot read: the gate's failure."""


# A NamedTuple, not a dataclass: made before run's spawn, 0.07 ms vs 0.5 ms (bench_startup.py)
class GateDecision(NamedTuple):
    """What the gates of one event decided: the verdict, why, and the gate that decided."""

    verdict: Verdict
    reason: str = ""
    gate: str = ""

    @property
    def refuses(self) -> bool:
        return self.verdict == "deny"

    def to_wire(self) -> dict[str, str]:
        """The decision as the supervisor answers it to `hook` (one JSON object)."""
        return {"decision": self.verdict, "reason": self.reason, "gate": self.gate}


ALLOW = GateDecision("allow")


def is_gate(hook: HookSpec, event: str) -> bool:
    """Whether `hook` decides at `event`: blocking, on an event a harness can refuse."""
    return hook.blocking and event in GATE_EVENTS


def sanitise_reason(text: object) -> str:
    """A reason safe to hand to a harness and a terminal: escape sequences and control
    characters removed (a newline becomes a space), at most `MAX_REASON_CHARS` characters."""
    if not isinstance(text, str):
        return ""
    plain = _CONTROLS.sub(" ", _ESCAPES.sub("", text))
    plain = " ".join(plain.split())
    if len(plain) > MAX_REASON_CHARS:
        plain = plain[: MAX_REASON_CHARS - 1] + "…"
    return plain


def parse_decision(body: bytes | str | None) -> tuple[Verdict, str] | None:
    """The (verdict, reason) a gate's answer carries; None when it carries none (no body,
    not a JSON object, no `decision` key: an ordinary hook's answer). Raises `BadDecision`
    when it has a `decision` that is not one of `VERDICTS`, a `reason` that is not a string,
    or is `MAX_DECISION_BYTES` long or longer."""
    if body is None:
        return None
    raw = body.encode("utf-8", "replace") if isinstance(body, str) else body
    if not raw.strip():
        return None
    # At the bound, not only past it: the HTTP action reads no more than this many bytes, so
    # an answer of exactly that length may be a longer one cut (a deny read as no decision).
    if len(raw) >= MAX_DECISION_BYTES:
        raise BadDecision(f"answer {MAX_DECISION_BYTES} bytes long or longer (it may be cut)")
    try:
        value = json.loads(raw.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        # A script's stdout may hold other lines before its decision: the last JSON line.
        value = _last_json_line(raw)
    if not isinstance(value, dict) or "decision" not in value:
        return None
    verdict = value["decision"]
    if verdict not in VERDICTS:
        raise BadDecision("`decision` is not one of allow, deny, ask")
    reason = value.get("reason", "")
    if reason is not None and not isinstance(reason, str):
        raise BadDecision("`reason` is not a string")
    return verdict, sanitise_reason(reason or "")


def _last_json_line(raw: bytes) -> object:
    for line in reversed(raw.decode("utf-8", "replace").splitlines()):
        if line.strip().startswith("{"):
            try:
                return json.loads(line)
            except (ValueError, RecursionError):
                return None
    return None


def answer_of(hook: HookSpec, result: AttemptResult) -> tuple[str, str] | None:
    """The (verdict, reason) a successful attempt of gate `hook` answered: what its runner
    read (a script's stdout, a system's own answer), else its HTTP response's body. Raises
    `BadDecision` for an answer that cannot be read."""
    if result.decision is not None:
        return result.decision
    if hook.action.is_http:
        return parse_decision(result.response_body)
    return None


def decide(
    hook: HookSpec,
    outcome: str,
    answered: tuple[str, str] | None,
    failure: str = "",
    event: str = "",
) -> GateDecision | None:
    """What gate `hook` decided, from its execution's `outcome` and the (verdict, reason) its
    action `answered`; None when it decided nothing (the agent goes on). `failure`: how it
    failed (its error type: the reason reaches the agent, so never the endpoint's address),
    for the reason of a fail-closed deny; `event`: where (a hook that names the events
    it may refuse at, `refuse_on`, is fail-closed only there)."""
    if outcome == "skipped":
        return None  # its condition was false, or it did not run: it had nothing to decide
    if outcome == "success" and answered is not None:
        verdict = _VERDICTS.get(answered[0])
        if verdict is not None:
            return GateDecision(verdict, sanitise_reason(answered[1]), hook.name)
    if outcome != "success" and fails_transition(hook, outcome, event or None):
        why = sanitise_reason(failure) or outcome
        return GateDecision("deny", f"gate {hook.name} failed ({why}): fail-closed", hook.name)
    return None


def merge(decisions: Iterable[GateDecision | None]) -> GateDecision:
    """The decision of an event's gates, in declaration order: the strongest verdict (deny,
    then ask, then allow) wins, with the reasons of every gate that gave it."""
    winner: GateDecision | None = None
    reasons: list[str] = []
    for decision in decisions:
        if decision is None:
            continue
        if winner is None or _RANK[decision.verdict] > _RANK[winner.verdict]:
            winner, reasons = decision, []
        if decision.verdict == winner.verdict and decision.reason:
            reasons.append(decision.reason)
    if winner is None:
        return ALLOW
    reason = sanitise_reason("; ".join(reasons))
    return GateDecision(winner.verdict, reason, winner.gate)


# Span attributes of a gate's hook span, and the session span's event for a decision.
ATTR_DECISION = "agent.lifecycle_hook.decision"
ATTR_DECISION_REASON = "agent.lifecycle_hook.decision.reason"
DECISION_EVENT = "agent.lifecycle.gate_decision"
