"""`completion bash|zsh|fish` prints a script generated from the command line's own parser, and
in a real bash (an interactive one, under a pseudo-terminal) it completes commands and options
as a user's Tab does. shtab is imported by that command only, never by `run` or `hook`."""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_lifecycle_hooks.cli.main import COMMANDS

PROG = "otel-lifecycle-hooks"
SCRIPT = Path(sys.executable).parent / PROG
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]|\r")


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "otel_lifecycle_hooks", *args],
        capture_output=True, text=True, timeout=120, check=False, env=env,  # a hang guard
    )  # fmt: skip


class Terminal:
    """An interactive bash on a pseudo-terminal: keys typed in, the screen's text read back."""

    def __init__(self, home: Path) -> None:
        env = {
            "PATH": f"{SCRIPT.parent}:/usr/bin:/bin",
            "HOME": str(home),
            "TERM": "dumb",
            "PS1": "$ ",
            "INPUTRC": os.devnull,
        }
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: bash with no start-up files of this machine's
            os.execve("/bin/bash", ["bash", "--norc", "--noprofile", "-i"], env)
        self.seen = ""

    def type(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def read_until(self, pattern: str, timeout: float = 60.0) -> str:
        """The screen's text once `pattern` (a regex) shows in it; fails after `timeout`,
        a hang guard only."""
        deadline = time.monotonic() + timeout
        while not re.search(pattern, ANSI.sub("", self.seen)):
            left = deadline - time.monotonic()
            assert left > 0, f"{pattern!r} never showed; the terminal read:\n{self.seen}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    self.seen += os.read(self.fd, 4096).decode(errors="replace")
                except OSError:  # the shell is gone
                    break
        return ANSI.sub("", self.seen)

    def clear(self) -> None:
        """Forget what was read, and empty the command line (Ctrl-U)."""
        self.type("\x15")
        self.seen = ""

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        os.close(self.fd)


@pytest.fixture
def bash(tmp_path: Path) -> Iterator[Terminal]:
    assert SCRIPT.exists(), f"the console script is not installed beside {sys.executable}"
    script = tmp_path / "completion.bash"
    done = _cli("completion", "bash")
    assert done.returncode == 0, done.stderr
    script.write_text(done.stdout)
    terminal = Terminal(tmp_path)
    try:
        terminal.type("bind 'set bell-style none'\n")
        terminal.type(f"source {script}; echo sourced-$?\n")
        terminal.read_until(r"\nsourced-0")
        terminal.clear()
        yield terminal
    finally:
        terminal.close()


def test_tab_completes_a_command_in_a_real_bash(bash: Terminal) -> None:
    bash.type(f"{PROG} val\t")
    screen = bash.read_until(rf"{PROG} validate ")
    assert f"{PROG} validate " in screen


def test_tab_tab_lists_a_commands_options_in_a_real_bash(bash: Terminal) -> None:
    bash.type(f"{PROG} run --\t\t")
    # The list comes in rows, possibly over several reads: wait for each option in turn.
    for option in (
        "--grace-period",
        "--user",
        "--template",
        "--agent-name",
        "--journal",
        "--quiet",
    ):
        screen = bash.read_until(re.escape(option))
    assert "--dialect" not in screen  # hook's option, not run's


def test_tab_tab_lists_every_command(bash: Terminal) -> None:
    bash.type(f"{PROG} \t\t")
    # The list comes in rows, possibly over several reads: wait for each command in turn.
    for command in COMMANDS:
        screen = bash.read_until(rf"(^|\s){re.escape(command)}(\s|$)")
    assert set(COMMANDS) <= set(screen.split()), screen


@pytest.mark.parametrize(
    ("shell", "marker"),
    [("bash", "complete -o"), ("zsh", "#compdef otel-lifecycle-hooks"), ("fish", "complete -c")],
)
def test_each_shells_script_names_every_command_and_runs_options(shell: str, marker: str) -> None:
    done = _cli("completion", shell)
    assert done.returncode == 0, done.stderr
    assert marker in done.stdout
    for name in COMMANDS:
        assert name in done.stdout
    assert "grace-period" in done.stdout and "--agent-name" not in done.stderr


@pytest.mark.skipif(
    shutil.which("fish") is None, reason="fish is not installed (apt-get install fish)"
)
def test_fish_completes_a_command_and_an_option(tmp_path: Path) -> None:
    script = tmp_path / "otel-lifecycle-hooks.fish"
    script.write_text(_cli("completion", "fish").stdout)
    asked = f"source {script}; complete -C '{PROG} val'; echo ---; complete -C '{PROG} run --gr'"
    done = subprocess.run(
        ["fish", "--no-config", "-c", asked],
        capture_output=True, text=True, timeout=120, check=False,  # a hang guard
        env={"PATH": f"{SCRIPT.parent}:/usr/bin:/bin", "HOME": str(tmp_path)},
    )  # fmt: skip
    commands, options = done.stdout.split("---\n")
    assert [line.split("\t")[0] for line in commands.splitlines()] == ["validate"], done
    assert [line.split("\t")[0] for line in options.splitlines()] == ["--grace-period"], done


@pytest.mark.skipif(
    shutil.which("zsh") is None, reason="zsh is not installed (apt-get install zsh)"
)
def test_the_zsh_script_is_valid_zsh(tmp_path: Path) -> None:
    script = tmp_path / "_otel-lifecycle-hooks"
    script.write_text(_cli("completion", "zsh").stdout)
    done = subprocess.run(
        ["zsh", "-n", str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr


def test_an_unknown_shell_is_a_usage_error_naming_the_valid_ones() -> None:
    done = _cli("completion", "tcsh")
    assert done.returncode == 2
    assert "bash" in done.stderr and "zsh" in done.stderr and "fish" in done.stderr


NOTE_SHTAB = """
import atexit, sys
from otel_lifecycle_hooks.cli.main import main
atexit.register(lambda: print("shtab" in sys.modules, file=sys.stderr))
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--", "true"],
        ["hook", "--dialect", "claude"],
        ["status"],
    ],
)
def test_shtab_is_not_imported_outside_completion(args: list[str], tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LIFECYCLE_"))}
    env |= {"HOME": str(tmp_path), "OTEL_SDK_DISABLED": "true"}
    done = subprocess.run(
        [sys.executable, "-c", NOTE_SHTAB, *args],
        input="{}", capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    assert done.stderr.strip().splitlines()[-1] == "False", done.stderr


def test_the_completion_command_does_import_it(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", NOTE_SHTAB, "completion", "bash"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.stderr.strip().splitlines()[-1] == "True", done.stderr
