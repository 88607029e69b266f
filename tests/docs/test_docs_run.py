"""Docs run as shown: every command and snippet of each page marked runnable is executed, and
its output compared where the page shows it (tests/docs/runnable.py says how pages mark them)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs.runnable import Sandbox, Step, bin_dir, is_runnable, mismatch, steps

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = sorted(DOCS.glob("*.md"))
# Pages that must stay runnable: the test fails if one loses its marker.
MUST_RUN = {
    "quickstart.md",
    "troubleshooting.md",
    "open-questions.md",
    "template-reference.md",
    "viewing-traces.md",
}


@pytest.fixture
def nothing_listens_on_8080() -> Iterator[None]:
    """The pages' examples post to localhost:8080 "where nothing listens": a socket bound there
    and not listening makes that true (connections are refused) whatever else this machine
    runs."""
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
    assert MUST_RUN <= runnable, MUST_RUN - runnable


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_a_runnable_page_runs_as_shown(
    page: Path, tmp_path: Path, nothing_listens_on_8080: None
) -> None:
    if not is_runnable(page):
        pytest.skip(f"{page.name} is not marked runnable")
    sandbox = Sandbox(tmp_path, bin_dir())
    failures: list[str] = []
    for step in steps(page, sandbox):
        if isinstance(step, str):
            failures.append(step)
            continue
        failures.extend(_run(step, sandbox))
    assert not failures, "\n\n".join(failures)


def _run(step: Step, sandbox: Sandbox) -> list[str]:
    code, output, errors = sandbox.run(step.command)
    if step.expected:
        problem = mismatch(step.expected, output, errors)
        if problem is not None:
            return [f"{step.where}: $ {step.command}\n{problem}"]
    elif step.check_exit and code != 0:
        return [f"{step.where}: $ {step.command} exited {code}:\n{output}{errors}"]
    return []
