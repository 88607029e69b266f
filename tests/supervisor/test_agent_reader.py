"""supervisor/agent_reader.py: a file the agent names is read with the agent's rights, without
blocking, only when regular, and never past the tail's bound."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_lifecycle_hooks.harness.dialects.claude import read_tail, transcript_final_text
from otel_lifecycle_hooks.supervisor.agent_reader import (
    AgentIdentity,
    AsAgentTailReader,
    tail_reader,
)

NOBODY = AgentIdentity(65534, 65534)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="becoming another user needs root")


@pytest.fixture
def shared() -> Iterator[Path]:
    # tmp_path is root's (0700): the agent's user could not reach anything in it.
    directory = Path(tempfile.mkdtemp(prefix="olh-agent-reader-"))
    directory.chmod(0o711)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def assistant(text: str) -> str:
    return json.dumps({"type": "assistant", "message": {"content": text}}) + "\n"


def test_an_agent_running_as_this_process_reads_in_process() -> None:
    assert tail_reader(None) is read_tail
    assert tail_reader(AgentIdentity(os.geteuid(), os.getegid())) is read_tail


@needs_root
def test_a_file_only_root_may_read_is_not_read_for_the_agent(shared: Path) -> None:
    secret = shared / "secret.jsonl"
    secret.write_text(assistant("root's"))
    secret.chmod(0o600)
    assert read_tail(str(secret), 1024) is not None  # root itself could
    assert tail_reader(NOBODY)(str(secret), 1024) is None
    assert transcript_final_text(str(secret), read=tail_reader(NOBODY)) == ""


@needs_root
def test_a_file_the_agent_may_read_gives_its_tail_and_whether_it_was_cut(shared: Path) -> None:
    transcript = shared / "transcript.jsonl"
    transcript.write_text(assistant("first") * 50 + assistant("last"))
    transcript.chmod(0o644)
    reader = tail_reader(NOBODY)
    size = transcript.stat().st_size
    assert reader(str(transcript), size) == (transcript.read_bytes(), False)
    assert reader(str(transcript), 100) == (transcript.read_bytes()[-100:], True)
    assert transcript_final_text(str(transcript), read=reader) == "\n\n".join(
        ["first"] * 50 + ["last"]
    )


@needs_root
@pytest.mark.parametrize("kind", ["fifo", "directory", "device", "missing", "nul"])
def test_what_is_not_a_regular_file_gives_nothing_without_blocking(shared: Path, kind: str) -> None:
    path = shared / kind
    if kind == "fifo":
        os.mkfifo(path, 0o666)  # opened without blocking, then left unread: not regular
    elif kind == "directory":
        path.mkdir(mode=0o755)
    elif kind == "device":
        path = Path("/dev/zero")  # never ends: the bound would be all it read
    reader = AsAgentTailReader(NOBODY)
    name = str(path) + ("\0x" if kind == "nul" else "")
    assert reader(name, 1024) is None
