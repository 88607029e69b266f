"""Docs run as shown: every command and snippet of each page marked runnable is executed, and
its output compared where the page shows it (tests/docs/runnable.py says how pages mark them)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs.runnable import Sandbox, Step, bin_dir, blocks, is_runnable, mismatch, steps
from tests.support.locks import machine_lock
from tests.support.plain_venv import plain_install_bin
from tests.support.rotel import RotelReceiver, debug_spans

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = sorted(DOCS.glob("*.md"))
# Pages that must stay runnable: the test fails if one loses its marker.
MUST_RUN = {
    "quickstart.md",
    "troubleshooting.md",
    "open-questions.md",
    "template-reference.md",
    "viewing-traces.md",
    "existing-tracer.md",
}
# Pages with commands or snippets that are not run, and why; every other page is runnable
# (or has nothing to run).
NOT_RUNNABLE: dict[str, str] = {
    "fleet.md": "its one block is a Kubernetes manifest (no cluster here); tests/fleet/ runs the "
    "shared PostgreSQL journal, reconcile and recovery it describes",
    "ui.md": "its one command starts a server that runs until it is stopped; tests/ui/ starts "
    "it, reads the URL it prints first and drives the page in a real Chromium, and "
    "tests/test_demo.py runs the command the demo prints",
}
# Pages a user follows from a plain `pip install` run in a venv holding just that (no test
# extras: no gRPC exporter), so that a step needing more fails here as it would for them.
PLAIN_INSTALL = {"existing-tracer.md"}
# `<!-- docs-test: collector -->`: the page's programs export to a real collector, which
# OTEL_EXPORTER_OTLP_ENDPOINT names; `receives` markers say which spans it must get.
COLLECTOR = "<!-- docs-test: collector -->"


@pytest.fixture
def nothing_listens_on_8080() -> Iterator[None]:
    """The pages' examples post to localhost:8080 "where nothing listens": a socket bound there
    and not listening makes that true (connections are refused) whatever else this machine
    runs. Whoever else needs the port (another checkout's suite running at the same time)
    waits for it under a lock rather than skip."""
    with machine_lock("port-8080"):
        yield from _hold_port_8080()


def _hold_port_8080() -> Iterator[None]:
    held = []
    for family, address in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.bind((address, 8080))
        except OSError as exc:
            sock.close()
            if family == socket.AF_INET:
                pytest.skip(f"port 8080 is taken on this machine: {exc}")
            continue  # no IPv6 loopback here
        held.append(sock)
    yield
    for sock in held:
        sock.close()


def test_the_pages_that_must_run_are_marked_runnable() -> None:
    runnable = {page.name for page in PAGES if is_runnable(page)}
    assert runnable >= MUST_RUN, MUST_RUN - runnable


def test_every_page_with_commands_or_snippets_runs_or_says_why_not() -> None:
    unexplained = [
        page.name
        for page in PAGES
        if blocks(page) and not is_runnable(page) and page.name not in NOT_RUNNABLE
    ]
    assert unexplained == [], "mark these runnable, or say in NOT_RUNNABLE why they cannot be"
    stale = [name for name in NOT_RUNNABLE if is_runnable(DOCS / name)]
    assert stale == [], "runnable now: drop them from NOT_RUNNABLE"


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_a_runnable_page_runs_as_shown(
    page: Path, tmp_path: Path, nothing_listens_on_8080: None
) -> None:
    if not is_runnable(page):
        pytest.skip(NOT_RUNNABLE.get(page.name, f"{page.name} has no commands or snippets"))
    sandbox = Sandbox(tmp_path, plain_install_bin() if page.name in PLAIN_INSTALL else bin_dir())
    collector: Collector | None = None
    if COLLECTOR in page.read_text(encoding="utf-8"):
        collector = Collector(tmp_path.parent / f"{tmp_path.name}-collector", sandbox)
    failures: list[str] = []
    try:
        for step in steps(page, sandbox):
            if isinstance(step, str):
                failures.append(step)
                continue
            failures.extend(_run(step, sandbox))
            if step.receives:
                failures.extend(_received(step, collector))
    finally:
        if collector is not None:
            collector.stop()
    assert not failures, "\n\n".join(failures)


class Collector:
    """A real OTLP collector (rotel) that the sandbox's programs export to; restarted after
    each check, so that each check sees what the commands since the last one sent."""

    def __init__(self, workdir: Path, sandbox: Sandbox) -> None:
        self.workdir = workdir
        self.sandbox = sandbox
        self.rotel: RotelReceiver | None = None
        self._restart()

    def _restart(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.rotel = RotelReceiver(self.workdir).start()
        # Only the endpoint: the protocol is the page's to set, as a reader must.
        self.sandbox.env["OTEL_EXPORTER_OTLP_ENDPOINT"] = self.rotel.http_endpoint

    def received(self) -> list[str]:
        """The names of the spans received since the last call."""
        assert self.rotel is not None
        names = [span.name for span in debug_spans(self.rotel.stop_and_read())]
        (self.workdir / "rotel.stdout").unlink()
        self._restart()
        return names

    def stop(self) -> None:
        if self.rotel is not None:
            self.rotel.stop()


def _received(step: Step, collector: Collector | None) -> list[str]:
    if collector is None:
        return [f"{step.where}: docs-test receives on a page without docs-test: collector"]
    received = collector.received()
    missing = [name for name in step.receives if name not in received]
    if missing:
        return [f"{step.where}: $ {step.command}\nthe collector did not receive {missing}"]
    return []


def _run(step: Step, sandbox: Sandbox) -> list[str]:
    code, output, errors = sandbox.run(step.command)
    if step.expected:
        problem = mismatch(step.expected, output, errors)
        if problem is not None:
            return [f"{step.where}: $ {step.command}\n{problem}"]
    elif step.check_exit and code != 0:
        return [f"{step.where}: $ {step.command} exited {code}:\n{output}{errors}"]
    return []
