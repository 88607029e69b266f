"""Attacks on the root-script guard: as root, a script hook never runs a file that another
user could replace, whether it is the program, its `#!` interpreter, or the script an
interpreter is given; nor one below a directory another user can write.

Each attack plants a script that would leave a marker file if it ran as root, then fires it
through the real engine (a blocking script hook on post-start), and checks it was refused with
a message saying what to fix, and that nothing ran. Needs root (to chown files to `nobody`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from otel_lifecycle_hooks.actions.script import run_script, unsafe_as_root
from otel_lifecycle_hooks.engine import Execution, HookEngine, SessionInfo
from otel_lifecycle_hooks.render import RenderedCommand
from otel_lifecycle_hooks.template.loader import load_template_text

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown and to run as root")

NOBODY = 65534


def planted(directory: Path, name: str, marker: Path, mode: int = 0o755, owner: int = 0) -> Path:
    """A shell script that leaves `marker` when it runs (also when read by python or node:
    its first line is a comment in each)."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / name
    script.write_text(
        f"#!/bin/sh\n// 2>/dev/null; echo ran > '{marker}'; exit 0\n"
        f"open({str(marker)!r}, 'w').write('ran')\n"
    )
    os.chown(script, owner, owner)
    os.chmod(script, mode)
    return script


def safe_directory(path: Path, mode: int = 0o755, owner: int = 0) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, owner, owner)
    os.chmod(path, mode)
    return path


def fire(command: list[str], env: dict[str, str] | None = None) -> Execution:
    template = load_template_text(
        "lifecycle_hooks:\n"
        "  - name: audit\n"
        "    on: [post-start]\n"
        "    blocking: true\n"
        "    action:\n"
        "      type: script\n"
        f"      command: {json.dumps(command)}\n"
        f"      env: {json.dumps(env or {})}\n"
    )
    engine = HookEngine(template, journal=False, hook_log=False)
    try:
        return engine.fire("post-start", SessionInfo("session-1")).executions[0]
    finally:
        engine.shutdown(5)


def assert_refused(execution: Execution, marker: Path, *words: str) -> None:
    assert (execution.outcome, execution.error_type) == ("refused", "UnsafeScript")
    assert execution.attempts == 0
    for word in ("refusing to run it as root", "chmod go-w", *words):
        assert word in execution.message
    assert not marker.exists()


@pytest.fixture
def root_dir(tmp_path: Path) -> Path:
    # pytest's tmp_path is root's, 0700, under sticky /tmp: a safe start for every attack.
    return safe_directory(tmp_path / "hooks")


def test_a_script_of_another_user_is_refused_even_with_mode_0755(
    root_dir: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    script = planted(root_dir, "theirs.sh", marker, 0o755, owner=NOBODY)

    assert_refused(fire([str(script)]), marker, f"owned by uid {NOBODY}, not root")


def test_a_root_script_in_a_directory_anyone_can_write_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    open_dir = safe_directory(tmp_path / "open", 0o777)
    script = planted(open_dir, "ours.sh", marker)

    assert_refused(fire([str(script)]), marker, str(open_dir), "writable by others and not sticky")


def test_a_directory_owned_by_another_user_is_refused_whatever_its_mode(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    theirs = safe_directory(tmp_path / "theirs", 0o755, owner=NOBODY)
    script = planted(theirs, "ours.sh", marker)

    assert_refused(fire([str(script)]), marker, f"{str(theirs)!r}, is owned by uid {NOBODY}")


def test_a_directory_writable_by_its_group_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    shared = safe_directory(tmp_path / "shared", 0o775)
    script = planted(shared / "deeper", "ours.sh", marker)

    assert_refused(fire([str(script)]), marker, "writable by its group")


@pytest.mark.parametrize(
    "interpreter",
    [
        ["sh"],
        ["bash", "-eu"],
        ["/bin/sh", "--"],
        [sys.executable, "-u"],
        ["python3"],
        ["node"],
        ["env", "LANG=C", "sh"],
        ["timeout", "5", "bash"],
    ],
)
def test_the_script_an_interpreter_is_given_is_checked_not_only_the_interpreter(
    root_dir: Path, tmp_path: Path, interpreter: list[str]
) -> None:
    marker = tmp_path / "marker"
    script = planted(root_dir, "world_writable.sh", marker, 0o757)

    assert_refused(fire([*interpreter, str(script)]), marker, "writable by others")


def test_a_relative_script_argument_is_checked_where_the_interpreter_will_read_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "marker"
    work = safe_directory(tmp_path / "work")
    planted(work, "relative.sh", marker, owner=NOBODY)
    monkeypatch.chdir(work)

    assert_refused(fire(["sh", "relative.sh"]), marker, f"owned by uid {NOBODY}")


def test_a_shebang_naming_an_interpreter_others_can_replace_is_refused(
    root_dir: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    fake_shell = safe_directory(tmp_path / "tools") / "mysh"
    shutil.copy("/bin/sh", fake_shell)
    os.chmod(fake_shell, 0o777)
    script = root_dir / "uses-mysh.sh"
    script.write_text(f"#!{fake_shell}\necho ran > '{marker}'\n")
    os.chmod(script, 0o755)

    assert_refused(fire([str(script)]), marker, str(fake_shell))


def test_a_symlink_in_a_writable_directory_to_a_safe_script_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    script = planted(safe_directory(tmp_path / "safe"), "ours.sh", marker)
    open_dir = safe_directory(tmp_path / "open", 0o777)
    link = open_dir / "link.sh"
    link.symlink_to(script)

    assert_refused(fire([str(link)]), marker, str(open_dir))


def test_a_module_run_by_name_is_refused_as_its_search_path_cannot_be_checked(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "marker"
    assert_refused(fire([sys.executable, "-m", "some_module"]), marker, "'-m'")


def test_run_script_refuses_an_unsafe_interpreter_argument_for_every_caller(
    root_dir: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    script = planted(root_dir, "world_writable.sh", marker, 0o757)

    outcome = run_script(RenderedCommand(argv=("sh", str(script)), env={}, stdin=b""), timeout=5)

    assert (outcome.result.kind, outcome.result.error_type) == ("permanent", "UnsafeScript")
    assert outcome.pid is None and not marker.exists()


# -- what still runs --------------------------------------------------------------------------


def test_a_root_script_below_root_directories_and_a_sticky_root_directory_runs(
    tmp_path: Path,
) -> None:
    # /tmp-like: sticky and root's, so only an entry's owner can rename what is in it.
    sticky = safe_directory(tmp_path / "sticky", 0o1777)
    marker = tmp_path / "marker"
    script = planted(safe_directory(sticky / "ours"), "ours.sh", marker)

    execution = fire(["sh", str(script)])

    assert (execution.outcome, execution.error_type) == ("success", None)
    assert marker.read_text() == "ran\n"


def test_inline_shell_text_is_the_templates_own_and_not_a_file_to_check(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    execution = fire(["sh", "-c", f"echo ran > '{marker}'"])
    assert (execution.outcome, execution.error_type) == ("success", None)
    assert marker.exists()


def test_as_another_user_the_guard_does_not_apply(root_dir: Path, tmp_path: Path) -> None:
    script = planted(root_dir, "world_writable.sh", tmp_path / "marker", 0o757)
    assert unsafe_as_root(["sh", str(script)], {}, "nobody") is None
    assert unsafe_as_root(["sh", str(script)], {}, "root") is not None
