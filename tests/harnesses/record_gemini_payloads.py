"""Record the Gemini CLI payloads only its interactive mode sends: a permission prompt's
`Notification` and the `PreCompress` of a typed `/compress`.

    python -m tests.harnesses.record_gemini_payloads tests/harness/payloads/gemini

writes notification.json and pre_compress_manual.json there as the binary sent them (only the
session's scratch folder renamed, as record_sequences does). Gemini CLI asks permission only
interactively (headless without yolo it does not offer the shell tool at all), so each session
runs the real binary on a pseudo-terminal, offline against the fake model API, with a recorder
as its only hook program. In the first the fake model asks for a shell command, Gemini shows its
permission dialog and fires `Notification` (`ToolPermission`), and the session is ended there;
in the second the user types `/compress` after one answer.
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
from collections.abc import Callable, Sequence
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
    typing: Sequence[tuple[Callable[[], bool], bytes]] = (),
) -> str:
    """Run `argv` on a pseudo-terminal until `done()`, then send `stop` to its process group
    and wait for it; the screen so far. Fails when it exits or `timeout` passes first.
    `typing`: (ready, keys) in order, each typed once, the first time its `ready()`."""
    pending = list(typing)
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
            if pending and pending[0][0]():
                os.write(controller, pending.pop(0)[1])
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


def manual_compress_payloads(root: Path, timeout: float = 90.0) -> list[dict[str, object]]:
    """Every hook payload of one interactive session in `root` (an empty folder) up to the
    `PreCompress` of a `/compress` the user types after one answered prompt."""
    home, work = root / "home", root / "project"
    home.mkdir(parents=True)
    work.mkdir()
    record = root / "payloads.jsonl"
    recorder = root / "recorder.py"
    recorder.write_text(RECORDER, encoding="utf-8")
    with FakeModelServer([Step.reply("Hello.")]) as fake, TargetServer() as receiver:
        env = base_env(home) | INTERACTIVE_ENV
        gemini = Gemini(harness_binary("gemini"))
        gemini.prepare(Session(root, home, work, env, fake, receiver))
        program = [sys.executable, str(recorder), str(record)]
        plan("install", "gemini", Scope(home, environ=env), program).apply()

        def answered() -> bool:
            return any(p.get("hook_event_name") == "AfterAgent" for p in _read(record))

        def compressed() -> bool:
            return any(p.get("trigger") == "manual" for p in _read(record))

        typed_at: list[float] = []

        def typed_a_while_ago() -> bool:
            return bool(typed_at) and time.monotonic() - typed_at[0] > 1.0

        def mark() -> bool:
            typed_at.append(time.monotonic())
            return True

        argv = [str(gemini.binary), "--prompt-interactive", "Say hello."]
        # The command and its Enter apart: a paste ending in a newline is not a submission.
        keys = [(answered, b"/compress"), (mark, b""), (typed_a_while_ago, b"\r")]
        drive(argv, env, work, compressed, timeout, typing=keys)
        return _read(record)


def _write(output: Path, payload: dict[str, object], scratch: str) -> None:
    # The session's scratch folder gets a stable name (as record_sequences gives it); nothing
    # else is changed.
    text = json.dumps(payload, indent=2, ensure_ascii=False).replace(scratch, "/tmp/session-root")
    output.write_text(text + "\n", encoding="utf-8")


def record(folder: Path) -> list[Path]:
    """Record notification.json and pre_compress_manual.json into `folder`."""
    written = []
    with tempfile.TemporaryDirectory() as scratch:
        prompt = next(filter(is_permission_prompt, permission_payloads(Path(scratch))))
        _write(folder / "notification.json", prompt, scratch)
        written.append(folder / "notification.json")
    with tempfile.TemporaryDirectory() as scratch:
        payloads = manual_compress_payloads(Path(scratch))
        manual = next(p for p in payloads if p.get("trigger") == "manual")
        _write(folder / "pre_compress_manual.json", manual, scratch)
        written.append(folder / "pre_compress_manual.json")
    return written


if __name__ == "__main__":
    for path in record(Path(sys.argv[1])):
        print(path)
