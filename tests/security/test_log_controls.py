"""Text the agent, a script or an endpoint wrote cannot reorder or hide what the operator reads.

C1 controls (U+0080-U+009F: CSI U+009B is an escape sequence on many terminals, NEL U+0085 a
line break) and the bidirectional controls (U+202A-U+202E, U+2066-U+2069, U+200E, U+200F,
U+061C: they reorder a line, "txt.exe" shown for "exe.txt"), and the line and paragraph
separators, are written as visible escapes in the hook log and in what `trace`, `history` and
`run` print, like the C0 controls already were.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_lifecycle_hooks.cli.console import escape_control
from otel_lifecycle_hooks.hooklog import HookLog
from tests.supervisor.supervised import Workspace, script_hook

C1 = [chr(code) for code in range(0x80, 0xA0)]
BIDI = [
    chr(code) for code in (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
]
SEPARATORS = ["\u2028", "\u2029"]
HIDDEN = C1 + BIDI + SEPARATORS
AT = 1_764_496_800.123
# The script runs as nobody, who may not reach the test's own interpreter (a venv under a
# private directory).
SYSTEM_PYTHON = Path("/usr/bin/python3")


def _visible(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


@pytest.mark.parametrize("char", HIDDEN, ids=[f"U+{ord(c):04X}" for c in HIDDEN])
def test_the_hook_log_writes_each_control_as_a_visible_escape(tmp_path: Path, char: str) -> None:
    hook_log = HookLog(tmp_path / "agent.log")

    hook_log.script_output("h", "stdout", f"exe.{char}txt", at=AT)
    hook_log.write_execution("h", "post-start", "failed", 1, 0.5, message=f"a{char}b", at=AT)

    text = (tmp_path / "agent.log").read_text(encoding="utf-8")
    assert char not in text
    lines = text.split("\n")
    assert lines[-1] == "" and len(lines) == 3, lines
    assert lines[0].endswith(f"[h stdout] exe.{_visible(char)}txt")
    assert _visible(char) in lines[1]


@pytest.mark.parametrize("char", HIDDEN, ids=[f"U+{ord(c):04X}" for c in HIDDEN])
def test_the_terminal_escape_shows_each_control(char: str) -> None:
    assert escape_control(f"a{char}b") == f"a{_visible(char)}b"
    assert escape_control(f"a{char}b", keep_newlines=True) == f"a{_visible(char)}b"


def test_text_in_other_scripts_is_written_as_it_is(tmp_path: Path) -> None:
    # Arabic and Hebrew text is not a control: only the invisible marks are escaped.
    hook_log = HookLog(tmp_path / "agent.log")
    hook_log.script_output("h", "stdout", "שלום مرحبا état\t完了", at=AT)

    assert (
        (tmp_path / "agent.log")
        .read_text(encoding="utf-8")
        .endswith("[h stdout] שלום مرحبا état\t完了\n")
    )
    assert escape_control("שלום مرحبا") == "שלום مرحبا"


@pytest.fixture
def agent_reachable_workspace() -> Iterator[Workspace]:
    """A workspace under a fresh directory of /tmp that `nobody` may traverse (pytest's own
    tmp_path is root's, 0700)."""
    root = Path(tempfile.mkdtemp(prefix="log-controls-"))
    root.chmod(0o711)
    space = Workspace(root)
    try:
        yield space
    finally:
        space.cleanup()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the agent's scripts as nobody")
@pytest.mark.skipif(not SYSTEM_PYTHON.exists(), reason=f"no {SYSTEM_PYTHON} for nobody to run")
def test_a_script_running_as_the_agent_cannot_hide_a_line_of_the_root_supervisors_log(
    agent_reachable_workspace: Workspace,
) -> None:
    space = agent_reachable_workspace
    # The script runs as the agent's user: what it prints is the agent's to choose.
    printed = "".join(f"<{char}>" for char in HIDDEN)
    program = f"import os, sys; sys.stdout.write(str(os.getuid()) + ' ' + {printed!r} + '\\n')"
    template = space.template(
        script_hook("shout", ["post-start"], [str(SYSTEM_PYTHON), "-c", program], blocking="true")
    )
    run = space.start(template, ["sleep", "0.2"], "--user", "nobody")
    assert run.wait(60) == 0, run.stderr

    text = space.hook_log.read_text(encoding="utf-8")
    [line] = [line for line in text.splitlines() if "[shout stdout]" in line]
    # As nobody (uid 65534), every control shown, none written.
    assert line.endswith("[shout stdout] 65534 " + "".join(f"<{_visible(c)}>" for c in HIDDEN))
    assert not any(char in text for char in HIDDEN)
