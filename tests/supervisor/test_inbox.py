"""The main loop's inbox: admitted messages wait for room past the bound (backpressure on the
senders), while signals and the agent's exit never wait behind them."""

from __future__ import annotations

import threading

from otel_lifecycle_hooks.supervisor.admission import Admitted
from otel_lifecycle_hooks.supervisor.inbox import AgentExited, Inbox, SignalReceived


def test_a_message_past_the_bound_waits_until_the_loop_takes_one() -> None:
    inbox = Inbox(limit=2)
    inbox.put_message(Admitted("status", status="busy"))
    inbox.put_message(Admitted("status", status="idle"))
    third = threading.Thread(target=inbox.put_message, args=(Admitted("status"),), daemon=True)
    third.start()
    third.join(timeout=0.2)
    assert third.is_alive()  # no room: the sender waits
    first = inbox.get(timeout=1.0)
    assert isinstance(first, Admitted) and first.status == "busy"
    third.join(timeout=5.0)
    assert not third.is_alive()  # the loop took one: room for it


def test_signals_and_the_exit_never_wait_behind_a_full_inbox() -> None:
    inbox = Inbox(limit=1)
    inbox.put_message(Admitted("status", status="busy"))
    inbox.put_signal(15)
    inbox.put_exit(143)
    items = [inbox.get(timeout=1.0) for _ in range(3)]
    assert isinstance(items[0], Admitted)
    assert items[1:] == [SignalReceived(15), AgentExited(143)]
    assert inbox.get(timeout=0.01) is None  # nothing came: a tick


def test_what_is_left_at_the_end_is_drained_in_order() -> None:
    inbox = Inbox()
    inbox.put_signal(1)
    inbox.put_message(Admitted("status"))
    drained = list(inbox.drain())
    assert drained[0] == SignalReceived(1)
    assert isinstance(drained[1], Admitted)
    assert inbox.get_nowait() is None
