"""Ingress that a hostile client cannot stall or crash: the supervisor's event socket serves
clients concurrently, with a deadline per line and bounds on connections and bytes; whatever
arrives that is not a message it knows is refused and counted, never raised."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otel_lifecycle_hooks.harness import socket_client
from otel_lifecycle_hooks.supervisor import server as server_module
from otel_lifecycle_hooks.supervisor.admission import Admission, IngressCounts
from otel_lifecycle_hooks.supervisor.server import EventServer
from otel_lifecycle_hooks.telemetry.tracefile import read_trace_file
from tests.security.conftest import HostileWorkspace, wire_line
from tests.supervisor.supervised import wait_until
from tests.support.target_server import TargetServer


def tool_start(tool: str) -> dict[str, Any]:
    return {"v": 1, "kind": "event", "event": "tool-start", "fields": {"TOOL_NAME": tool}}


HOSTILE_LINES = [
    b'{"kind":"status"}\n',
    b'{"v":1,"kind":"status"}\n',
    b'{"v":1,"kind":"status","status":"reboot"}\n',
    b'{"v":1,"kind":"status","status":"blocked","message":7}\n',
    b'{"v":1,"kind":"shutdown"}\n',
    b'{"v":1,"kind":"event","event":"pre-stop"}\n',
    b'{"v":1,"kind":"event","event":"quoted-nowhere-5e1"}\n',
    b'{"v":1,"kind":"event","event":"tool-start","fields":["x"]}\n',
    b'{"v":2,"kind":"event","event":"tool-start"}\n',
    b"[1, 2]\n",
    b'"text"\n',
    b"null\n",
    b"{not json\n",
    b"[" * 100_000 + b"\n",
]


def tool_recorder(workspace: HostileWorkspace, target: TargetServer) -> Path:
    return workspace.template(
        "  - name: record-tool\n"
        "    on: [tool-start]\n"
        "    action:\n"
        "      type: http\n"
        "      method: POST\n"
        f'      url: "{target.url("/tool")}"\n'
        '      body: \'{"tool": "${TOOL_NAME}"}\'\n'
    )


def test_malformed_and_unknown_messages_are_refused_and_counted_and_the_session_goes_on(
    workspace: HostileWorkspace, target: TargetServer
) -> None:
    ready = workspace.root / "ready"
    sends = [
        *HOSTILE_LINES,
        # Invalid Unicode still delivers the event: a bad byte and a lone surrogate.
        b'{"v":1,"kind":"event","event":"tool-start","fields":{"TOOL_NAME":"bad\xff"}}\n',
        b'{"v":1,"kind":"event","event":"tool-start","fields":{"TOOL_NAME":"lone\\ud800"}}\n',
        wire_line(tool_start("Bash")),
    ]
    run = workspace.start(
        tool_recorder(workspace, target),
        workspace.hostile_command(sends=sends, ready_file=ready),
    )
    requests = target.wait_for(3, timeout=30)
    assert [json.loads(r.body)["tool"] for r in requests] == ["bad\ufffd", "lone\ufffd", "Bash"]
    wait_until(ready.exists, what="the agent to finish")
    run.signal(15)
    assert run.wait() == 0  # the agent was stopped by the signal, not by a socket line
    assert "supervisor failed" not in run.stderr
    assert "quoted-nowhere-5e1" not in run.stderr  # what the agent sent is never logged
    summary = run.stderr
    for reason in (
        "unknown_version: 2",
        "unknown_status: 2",
        "malformed_status: 1",
        "unknown_kind: 1",
        "malformed_event: 3",
        "not_an_object: 3",
        "not_json: 2",
    ):
        assert reason in summary
    # The trace file holds the session, lone surrogate and all.
    [trace_file] = workspace.trace_dir.glob("*.jsonl")
    spans = read_trace_file(trace_file)
    [session] = [s for s in spans if s["name"].startswith("invoke_agent")]
    tools = [
        e["attributes"].get("gen_ai.tool.name")
        for e in session["events"]
        if e["name"] == "agent.lifecycle.tool_start"
    ]
    assert tools == ["bad\ufffd", "lone\ufffd", "Bash"]


class Inbox:
    """What an EventServer delivered, through the supervisor's own admission."""

    def __init__(self, counts: IngressCounts | None = None) -> None:
        self.admission = Admission(counts)
        self.events: list[Any] = []
        self.lock = threading.Lock()

    def deliver(self, message: dict[str, Any]) -> None:
        admitted = self.admission.admit(message)
        if admitted is not None:
            with self.lock:
                self.events.append(admitted)

    def tools(self) -> list[str]:
        with self.lock:
            return [a.event.fields.get("TOOL_NAME", "") for a in self.events if a.event]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[EventServer, Inbox, FakeClock]]:
    counts = IngressCounts()
    inbox = Inbox(counts)
    clock = FakeClock()
    events = EventServer(
        inbox.deliver, directory=str(tmp_path), refuse=counts.refuse, clock=clock
    ).start()
    try:
        yield events, inbox, clock
    finally:
        events.close()


def connect(path: str) -> socket.socket:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(path)
    return client


def test_a_client_trickling_a_byte_every_1_5s_does_not_hold_up_100_events_of_another(
    served: tuple[EventServer, Inbox, FakeClock],
) -> None:
    events, inbox, _ = served
    stop = threading.Event()
    trickler = connect(events.path)

    def trickle() -> None:
        for byte in json.dumps(tool_start("slow")).encode():
            if stop.wait(1.5):
                return
            try:
                trickler.send(bytes([byte]))
            except OSError:
                return

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        for n in range(100):
            socket_client.send_lines(events.path, [tool_start(f"tool-{n}")])
        wait_until(lambda: len(inbox.tools()) >= 100, timeout=60, what="100 events")
        assert inbox.tools() == [f"tool-{n}" for n in range(100)]
    finally:
        stop.set()
        thread.join(timeout=5)
        trickler.close()


def test_a_line_not_finished_within_its_deadline_is_refused_and_its_connection_closed(
    served: tuple[EventServer, Inbox, FakeClock],
) -> None:
    events, inbox, clock = served
    slow = connect(events.path)
    slow.sendall(b'{"v":1,"kind":"event",')
    # The server holds the first part under the old clock (a fixed pause is not enough on a
    # loaded machine: read later, the line would get its deadline from the advanced clock).
    wait_until(
        lambda: any(c.buffer for c in list(events._connections.values())),
        what="the server to read the first part",
    )
    clock.now += server_module.MESSAGE_DEADLINE + 1
    counts = inbox.admission.counts
    wait_until(lambda: counts.snapshot().get("message_deadline") == 1, what="the deadline")
    assert slow.recv(1) == b""  # closed by the server
    slow.close()
    socket_client.send_lines(events.path, [tool_start("after")])
    wait_until(lambda: inbox.tools() == ["after"], what="the next event")


def test_connections_beyond_the_bound_wait_and_idle_ones_are_cut_at_their_deadline(
    served: tuple[EventServer, Inbox, FakeClock],
) -> None:
    """A client holding many idle connections delays the others by one deadline at most."""
    events, inbox, clock = served
    counts = inbox.admission.counts
    idle = [connect(events.path) for _ in range(server_module.MAX_CONNECTIONS + 6)]
    try:
        waiting = threading.Thread(
            target=socket_client.send_lines, args=(events.path, [tool_start("waited")])
        )
        waiting.start()  # connected into the backlog: not served while the bound is reached

        def idle_ones_cut() -> bool:
            # Time passes for every connection the server has accepted by now.
            done = counts.snapshot().get("idle_connection", 0) >= server_module.MAX_CONNECTIONS
            if not done:
                clock.now += server_module.MESSAGE_DEADLINE + 1
            return done

        wait_until(idle_ones_cut, what="the idle connections to be cut")
        waiting.join(timeout=30)
        wait_until(lambda: inbox.tools() == ["waited"], what="the waiting client to be served")
    finally:
        for client in idle:
            client.close()


def test_a_line_over_the_size_bound_is_refused_and_the_next_client_is_served(
    served: tuple[EventServer, Inbox, FakeClock],
) -> None:
    events, inbox, _ = served
    huge = connect(events.path)
    with contextlib.suppress(OSError):  # closed by the server mid-write
        huge.sendall(
            b'{"v":1,"kind":"event","event":"tool-start","fields":{"TOOL_NAME":"'
            + b"x" * server_module.MAX_LINE_BYTES
        )
    huge.close()
    counts = inbox.admission.counts
    wait_until(lambda: counts.snapshot().get("line_too_long") == 1, what="the refusal")
    socket_client.send_lines(events.path, [tool_start("next")])
    wait_until(lambda: inbox.tools() == ["next"], what="the next event")


def test_a_full_backlog_makes_the_sender_retry_then_fail_within_its_budget(
    tmp_path: Path,
) -> None:
    """Nothing accepts: the backlog fills, connects fail with EAGAIN; the sender retries and
    then reports the supervisor busy, and never hangs."""
    path = str(tmp_path / "busy.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(0)
    queued: list[socket.socket] = []
    try:
        while True:  # fill the backlog
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.setblocking(False)
            try:
                client.connect(path)
            except BlockingIOError:
                client.close()
                break
            queued.append(client)
        with pytest.raises(socket_client.SupervisorUnavailable, match="busy"):
            socket_client.send_lines(path, [tool_start("lost")])
    finally:
        for client in queued:
            client.close()
        listener.close()


def test_under_a_flood_every_line_is_delivered_or_its_sender_is_told(
    served: tuple[EventServer, Inbox, FakeClock],
) -> None:
    events, inbox, _ = served
    delivered: list[str] = []
    failed: list[str] = []
    lock = threading.Lock()

    def send(n: int) -> None:
        try:
            socket_client.send_lines(events.path, [tool_start(f"t{n}")])
        except OSError:
            with lock:
                failed.append(f"t{n}")
        else:
            with lock:
                delivered.append(f"t{n}")

    threads = [threading.Thread(target=send, args=(n,)) for n in range(400)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    wait_until(lambda: len(inbox.tools()) >= len(delivered), what="every delivered line")
    assert sorted(inbox.tools()) == sorted(delivered)
    assert len(delivered) + len(failed) == 400


def test_a_flood_of_bad_lines_is_counted_in_full_and_logged_a_few_times(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    counts = IngressCounts(clock=clock)
    admission = Admission(counts)
    caplog.set_level(logging.WARNING, logger="otel_lifecycle_hooks.supervisor")
    for _ in range(1000):
        admission.admit({"kind": "status"})
    clock.now += 60
    admission.admit({"kind": "status"})
    assert counts.snapshot() == {"unknown_version": 1001}
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 6  # the first five, then one saying how many were not logged
    assert lines[-1].endswith("(995 more not logged)")
    assert counts.summary() == "refused 1001 (unknown_version: 1001)"


def test_a_template_that_lets_the_agent_choose_the_host_never_starts_the_agent(
    workspace: HostileWorkspace, attacker: TargetServer
) -> None:
    template = workspace.template(
        "  - name: probe\n"
        "    on: [tool-start]\n"
        "    action:\n"
        "      type: http\n"
        '      url: "http://${TOOL_NAME}/probe"\n'
    )
    started = workspace.root / "started"
    run = workspace.start(
        template,
        workspace.hostile_command(
            sends=[wire_line(tool_start(f"127.0.0.2:{attacker.port}"))], ready_file=started
        ),
    )
    assert run.wait() != 0
    assert "is chosen by the agent" in run.stderr
    assert not started.exists() and attacker.requests == []


def test_what_the_supervisor_refused_is_a_metric(tmp_path: Path, target: TargetServer) -> None:
    import urllib.request

    from tests.reliability.load import LoadedSupervisor

    supervisor = LoadedSupervisor(tmp_path, target.url("").rstrip("/"))
    supervisor.start()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(supervisor.socket_path)
            client.sendall(
                b'{"v":1,"kind":"status","status":"reboot"}\n'
                + wire_line(
                    {"v": 1, "kind": "event", "event": "tool-start", "fields": {"PHASE": "x"}}
                )
            )

        def refused() -> list[str]:
            url = f"http://127.0.0.1:{supervisor.metrics_port}/metrics"
            try:
                text = urllib.request.urlopen(url, timeout=5).read().decode()
            except OSError:  # the metrics endpoint is made once the agent has started
                return []
            return [
                line
                for line in text.splitlines()
                if line.startswith("agent_lifecycle_ingress_refused_total{")
            ]

        lines = wait_until(lambda: len(refused()) == 2 and refused(), what="the metric")
        assert any('reason="unknown_status"' in line and line.endswith(" 1.0") for line in lines)
        assert any(
            'reason="field_not_allowed"' in line and 'event="tool-start"' in line for line in lines
        )
    finally:
        supervisor.stop()
