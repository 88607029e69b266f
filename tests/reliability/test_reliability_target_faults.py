"""Faults at a hook's target, through the whole engine: every fault under every `on_error`
policy ends in the outcome the policy defines, within its time budget, and shows in the hook
span (outcome, attempts, error.type, one retry event per retry) and in the journal row.

The attempts are real (a loopback server, a closed port, a plain server spoken to in TLS, a
`.invalid` name); only the waits between retries run on a fake clock. The per-attempt
classification of each fault is pinned in tests/actions/test_http.py.
"""

from __future__ import annotations

import resource
import socket
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tests.reliability.conftest import EngineRunner
from tests.support.target_server import Reply, TargetServer

HUNDRED_MB = 100 * 1024 * 1024
# A hang guard beyond the time budget, not a timing claim: far above a loaded machine's
# scheduling delay, far below the minute a reply slower than the timeout would take.
SLACK = 10.0


@dataclass(frozen=True)
class Fault:
    """How to provoke one fault, and how a single attempt against it ends."""

    prepare: Callable[[TargetServer], str]  # returns the hook's URL
    kind: str  # transient | permanent | timeout | ok
    error_types: tuple[str, ...] = ()
    # Generous where the fault is not a timeout: a loaded machine may take over a second to
    # connect, resolve or handshake, and that must not turn the fault into a timeout.
    timeout: str = "10s"
    retry_after: float | None = None


def closed_port_url(_: TargetServer) -> str:
    with socket.socket() as placeholder:  # bind a port, then free it: nothing listens there
        placeholder.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{placeholder.getsockname()[1]}/hook"


def answering(reply: Reply) -> Callable[[TargetServer], str]:
    def prepare(server: TargetServer) -> str:
        server.always("/hook", reply)
        return server.url("/hook")

    return prepare


def tls_to_plain_server(server: TargetServer) -> str:
    return server.url("/hook").replace("http://", "https://")


FAULTS: dict[str, Fault] = {
    "connection refused": Fault(closed_port_url, "transient", ("ConnectError",)),
    "reset mid-response": Fault(
        answering(Reply.reset()), "transient", ("ReadError", "RemoteProtocolError")
    ),
    "503": Fault(answering(Reply(503)), "transient", ("http.503",)),
    "429 with Retry-After": Fault(
        answering(Reply(429, headers={"Retry-After": "2"})),
        "transient",
        ("http.429",),
        retry_after=2.0,
    ),
    "slower than the timeout": Fault(
        answering(Reply(200, delay=60.0)), "timeout", ("timeout",), timeout="500ms"
    ),
    "100 MB body": Fault(answering(Reply.huge(HUNDRED_MB)), "ok", timeout="10s"),
    "redirect": Fault(
        answering(Reply.redirect("http://127.0.0.1:9/elsewhere")), "permanent", ("http.redirect",)
    ),
    "TLS failure": Fault(tls_to_plain_server, "permanent", ("TLSError",)),
    "unresolvable name": Fault(
        lambda _: "http://hook-target.invalid/hook", "transient", ("DNSError",)
    ),
}


def hook_yaml(url: str, on_error: str, timeout: str) -> str:
    return f"""
    - name: target
      on: [post-start]
      action:
        type: http
        url: "{url}"
        body: '{{"event": "${{EVENT}}"}}'
      on_error: {on_error}
      timeout: {timeout}
      blocking: true
    """


def seconds(duration: str) -> float:
    return float(duration[:-2]) / 1000 if duration.endswith("ms") else float(duration[:-1])


@pytest.mark.parametrize("on_error", ["log", "retry", "fail"])
@pytest.mark.parametrize("fault_name", list(FAULTS))
def test_each_target_fault_ends_as_its_policy_says_in_budget_and_is_recorded(
    fault_name: str, on_error: str, engine_runner: EngineRunner, target_server: TargetServer
) -> None:
    fault = FAULTS[fault_name]
    url = fault.prepare(target_server)
    peak_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    run = engine_runner.fire(hook_yaml(url, on_error, fault.timeout))

    retried = on_error == "retry" and fault.kind in ("transient", "timeout")
    attempts = 4 if retried else 1
    outcome = {"ok": "success", "timeout": "timeout"}.get(fault.kind, "failed")
    assert run.outcome == outcome
    # Policies: retry waits 1s, 2s, 4s (or what Retry-After asked, within that budget); log and
    # fail make one attempt; only `fail` aborts the transition.
    if retried:
        delay = fault.retry_after
        assert run.sleeps == ([delay] * 3 if delay else [1.0, 2.0, 4.0])
    else:
        assert run.sleeps == []
    assert run.result.ok == (outcome == "success" or on_error != "fail")
    # The time budget: every attempt is cut at the hook's timeout.
    assert run.elapsed < attempts * seconds(fault.timeout) + SLACK
    # The span.
    attributes = run.span_attributes
    assert attributes["agent.lifecycle_hook.outcome"] == outcome
    assert attributes["agent.lifecycle_hook.attempts"] == attempts
    assert attributes["agent.lifecycle_hook.on_error"] == on_error
    assert run.retry_events == attempts - 1
    # The journal row.
    assert (run.row.hook, run.row.event, run.row.outcome, run.row.attempts) == (
        "target",
        "post-start",
        outcome,
        attempts,
    )
    assert run.row.request is not None and run.row.request["body"] == '{"event": "post-start"}'
    if fault.error_types:
        assert attributes["error.type"] in fault.error_types
        assert run.row.error_type == attributes["error.type"]
    else:
        assert "error.type" not in attributes and run.row.error_type is None
    if fault_name == "100 MB body":
        peak_growth_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before_kib
        assert peak_growth_kib < 32 * 1024  # read bounded, never buffered
