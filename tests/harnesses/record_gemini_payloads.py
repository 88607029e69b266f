"""Record the Gemini CLI payload the real-harness scenarios cannot: a permission prompt's
`Notification`.

    python -m tests.harnesses.record_gemini_payloads tests/harness/payloads/gemini

writes notification.json there as the binary sent it (only the session's scratch folder
renamed, as record_sequences does). Gemini CLI asks permission only in its interactive mode
(headless without yolo it does not offer the shell tool at all), so this runs the real binary on
a pseudo-terminal, offline against the fake model API, with a recorder as its only hook program:
the fake model asks for a shell command, Gemini shows its permission dialog and fires
`Notification` (`ToolPermission`), and the session is ended there.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Callable
from pathlib import Path

from otel_lifecycle_hooks.harness.install import Scope, plan
from tests.harnesses.fake_models import FakeModelServer, Step
from tests.harnesses.real import Gemini, Session, harness_binary
from tests.harnesses.session import base_env
from tests.support.target_server import TargetServer

# The interactive TUI wants a terminal it knows (base_env's TERM=dumb is for headless runs).
INTERACTIVE_ENV = {"TERM": "xterm-256color"}
PROMPT = "Run the command, then say what it printed."
COMMAND = "echo allowed > answered.txt"

# Appends each payload (stdin) to the file named by its argument, one JSON object a line, and
# answers nothing: Gemini goes on as if no hook were installed.
RECORDER = """\
import json, sys
raw = sys.stdin.buffer.read()
with open(sys.argv[1], "a", encoding="utf-8") as out:
    out.write(json.dumps(json.loads(raw), ensure_ascii=False) + "\\n")
"""


def permission_payloads(root: Path, timeout: float = 90.0) -> list[dict[str, object]]:
    """Every hook payload Gemini sent up to and including its first `ToolPermission`
    notification, from one interactive session in `root` (an empty folder)."""
    home, work = root / "home", root / "project"
    home.mkdir(parents=True)
    work.mkdir()
    record = root / "payloads.jsonl"
    recorder = root / "recorder.py"
    recorder.write_text(RECORDER, encoding="utf-8")
    script = [Step.shell(COMMAND), Step.reply("Done.")]
    with FakeModelServer(script) as fake, TargetServer() as receiver:
        env = base_env(home) | INTERACTIVE_ENV
        session = Session(root, home, work, env, fake, receiver)
        gemini = Gemini(harness_binary("gemini"))
        gemini.prepare(session)
        program = [sys.executable, str(recorder), str(record)]
        plan("install", "gemini", Scope(home, environ=env), program).apply()
        argv = [str(gemini.binary), "--prompt-interactive", PROMPT]
        drive(argv, env, work, lambda: any(map(is_permission_prompt, _read(record))), timeout)
        return _read(record)


def is_permission_prompt(payload: dict[str, object]) -> bool:
    """Gemini CLI's Notification hook payload for a tool's permission dialog."""
    return payload.get("notification_type") == "ToolPermission"


def drive(
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    done: Callable[[], bool],
    timeout: float,
    stop: signal.Signals = signal.SIGKILL,
) -> str:
    """Run `argv` on a pseudo-terminal until `done()`, then send `stop` to its process group
    and wait for it; the screen so far. Fails when it exits or `timeout` passes first."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    process = subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        start_new_session=True,
    )
    os.close(terminal)
    screen = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(controller, 65536)
                except OSError:  # EIO: the terminal is closed
                    break
                if not chunk:
                    break
                screen += chunk
                # The TUI asks where its cursor is; a terminal answers.
                if b"\x1b[6n" in chunk:
                    os.write(controller, b"\x1b[1;1R")
            if done():
                return screen.decode(errors="replace")
            if process.poll() is not None:
                break
        raise AssertionError(f"not done; screen: {screen[-3000:].decode(errors='replace')}")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, stop)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        os.close(controller)


def _read(record: Path) -> list[dict[str, object]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines() if line]


def _write(output: Path, payload: dict[str, object], scratch: str) -> None:
    # The session's scratch folder gets a stable name (as record_sequences gives it); nothing
    # else is changed.
    text = json.dumps(payload, indent=2, ensure_ascii=False).replace(scratch, "/tmp/session-root")
    output.write_text(text + "\n", encoding="utf-8")


def record(folder: Path) -> list[Path]:
    """Record notification.json into `folder`."""
    written = []
    with tempfile.TemporaryDirectory() as scratch:
        prompt = next(filter(is_permission_prompt, permission_payloads(Path(scratch))))
        _write(folder / "notification.json", prompt, scratch)
        written.append(folder / "notification.json")
    return written


if __name__ == "__main__":
    for path in record(Path(sys.argv[1])):
        print(path)
