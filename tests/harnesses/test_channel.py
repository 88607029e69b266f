"""The harness -> supervisor channel: variables without the `OTEL_` prefix, and the pointer
file through which `hook` and `status` find their supervisor when no variable reaches them."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from otel_lifecycle_hooks.harness import socket_client
from otel_lifecycle_hooks.supervisor.channel import SessionChannel
from otel_lifecycle_hooks.supervisor.server import EventServer
from tests.harnesses.session import (
    PACKAGE_CLI,
    base_env,
    finish,
    start_run,
    write_template,
)
from tests.support.target_server import TargetServer

TIMEOUT = 60


class Received:
    def __init__(self) -> None:
        self.messages: list[dict[str, object]] = []

    def __call__(self, message: dict[str, object]) -> None:
        self.messages.append(message)


@pytest.fixture
def events_server(tmp_path: Path):
    received = Received()
    server = EventServer(received, directory=str(tmp_path)).start()
    yield server, received
    server.close()


def _status(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PACKAGE_CLI), "status", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def _wait(received: Received, count: int) -> list[dict[str, object]]:
    import time

    deadline = time.monotonic() + 60  # a hang guard
    while len(received.messages) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    return received.messages


def test_the_socket_variable_has_no_otel_prefix_and_the_old_name_still_works() -> None:
    assert not socket_client.SOCKET_ENV.startswith("OTEL_")
    assert socket_client.socket_path({"LIFECYCLE_HOOKS_SOCKET": "/new"}) == "/new"
    assert socket_client.socket_path({"OTEL_LIFECYCLE_HOOKS_SOCKET": "/old"}) == "/old"
    both = {"LIFECYCLE_HOOKS_SOCKET": "/new", "OTEL_LIFECYCLE_HOOKS_SOCKET": "/old"}
    assert socket_client.socket_path(both) == "/new"


def test_status_finds_its_supervisor_through_the_pointer_file(
    tmp_path: Path, events_server
) -> None:
    server, received = events_server
    home = tmp_path / "home"
    home.mkdir()
    # This test process stands for the supervisor: its pid names the pointer file.
    channel = SessionChannel(received)
    variables = channel.open(server.path, {"HOME": str(home)})
    try:
        pointer = home / ".local/state/otel-lifecycle-hooks/run" / f"supervisor-{os.getpid()}.json"
        assert stat.S_IMODE(pointer.stat().st_mode) == 0o600
        assert json.loads(pointer.read_text())["socket"] == server.path
        assert variables["LIFECYCLE_HOOKS_SOCKET"] == server.path
        result = _status(base_env(home), "task_completed", "found it")
        assert result.returncode == 0, result.stderr
        [message] = _wait(received, 1)
        assert message["status"] == "task_completed" and message["message"] == "found it"
    finally:
        channel.close()
    assert not pointer.exists()


def test_a_pointer_file_of_a_process_that_is_not_an_ancestor_is_ignored(
    tmp_path: Path, events_server
) -> None:
    server, received = events_server
    home = tmp_path / "home"
    folder = home / ".local/state/otel-lifecycle-hooks/run"
    folder.mkdir(parents=True)
    stranger = subprocess.Popen(["sleep", "30"])
    try:
        pointer = {"v": 1, "pid": stranger.pid, "socket": server.path}
        (folder / f"supervisor-{stranger.pid}.json").write_text(json.dumps(pointer))
        result = _status(base_env(home), "blocked")
    finally:
        stranger.kill()
        stranger.wait()
    assert result.returncode == 1
    assert "no supervisor" in result.stderr
    assert received.messages == []


def test_a_pointer_file_that_is_a_symbolic_link_is_not_followed(
    tmp_path: Path, events_server
) -> None:
    server, received = events_server
    home = tmp_path / "home"
    folder = home / ".local/state/otel-lifecycle-hooks/run"
    folder.mkdir(parents=True)
    elsewhere = tmp_path / "planted.json"
    elsewhere.write_text(json.dumps({"v": 1, "pid": os.getpid(), "socket": server.path}))
    (folder / f"supervisor-{os.getpid()}.json").symlink_to(elsewhere)
    result = _status(base_env(home), "blocked")
    assert result.returncode == 1
    assert received.messages == []


def test_the_runtime_directory_is_preferred_when_there_is_one(tmp_path: Path) -> None:
    runtime = tmp_path / "run-user"
    runtime.mkdir(mode=0o700)
    channel = SessionChannel(Received())
    channel.open(
        str(tmp_path / "events.sock"),
        {"HOME": str(tmp_path / "home"), "XDG_RUNTIME_DIR": str(runtime)},
    )
    try:
        assert (runtime / "otel-lifecycle-hooks" / f"supervisor-{os.getpid()}.json").exists()
        assert stat.S_IMODE((runtime / "otel-lifecycle-hooks").stat().st_mode) == 0o700
    finally:
        channel.close()


def test_status_reaches_run_from_an_agent_that_sees_none_of_its_variables(
    tmp_path: Path,
) -> None:
    """What a harness that strips the environment does: the agent's shell removes every
    variable of ours, and `status` still reaches the supervisor of this session."""
    home = tmp_path / "home"
    home.mkdir()
    script = (
        "env -u LIFECYCLE_HOOKS_SOCKET -u OTEL_LIFECYCLE_HOOKS_SOCKET "
        f"{PACKAGE_CLI} status task_completed 'no variables needed'"
    )
    with TargetServer() as receiver:
        template = write_template(tmp_path / "t.yaml", receiver, tmp_path / "rt.jsonl", "sh")
        process = start_run(["sh", "-c", script], base_env(home), template, tmp_path)
        code, _out, err = finish(process, TIMEOUT)
        assert code == 0, err
        completed = [json.loads(r.body) for r in receiver.requests if r.path == "/task-completed"]
    assert [c["TASK_SUMMARY"] for c in completed] == ["no variables needed"]
    assert not list((home / ".local/state/otel-lifecycle-hooks/run").glob("*.json"))


def test_the_agent_gets_the_new_and_the_old_socket_variable(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    dump = tmp_path / "env.json"
    code = f"import json, os; json.dump(dict(os.environ), open({str(dump)!r}, 'w'))"
    with TargetServer() as receiver:
        template = write_template(tmp_path / "t.yaml", receiver, tmp_path / "rt.jsonl", "py")
        process = start_run([sys.executable, "-c", code], base_env(home), template, tmp_path)
        assert finish(process, TIMEOUT)[0] == 0
    seen = json.loads(dump.read_text())
    assert seen["LIFECYCLE_HOOKS_SOCKET"] == seen["OTEL_LIFECYCLE_HOOKS_SOCKET"]
    assert seen["LIFECYCLE_HOOKS_SOCKET"].endswith("events.sock")


def test_doctor_inside_a_session_sees_the_supervisor_and_its_ping_arrive(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    report = tmp_path / "doctor.json"
    script = (
        "env -u LIFECYCLE_HOOKS_SOCKET -u OTEL_LIFECYCLE_HOOKS_SOCKET "
        "-u LIFECYCLE_HOOKS_HTTP_URL -u LIFECYCLE_HOOKS_HTTP_TOKEN "
        f"{PACKAGE_CLI} harness doctor --json > {report}; echo $? >> {report}.rc"
    )
    with TargetServer() as receiver:
        template = write_template(tmp_path / "t.yaml", receiver, tmp_path / "rt.jsonl", "sh")
        env = base_env(home) | {"LIFECYCLE_HOOKS_HTTP": "1"}  # the route doctor counts through
        process = start_run(["sh", "-c", script], env, template, tmp_path)
        assert finish(process, TIMEOUT)[0] == 0
    checks = {c["name"]: c for c in json.loads(report.read_text())["checks"]}
    assert (tmp_path / "doctor.json.rc").read_text().strip() == "0"
    assert checks["pointer file"]["ok"]
    assert checks["socket"]["ok"]
    assert checks["events arrive"]["ok"], checks["events arrive"]["detail"]


def test_doctor_outside_any_session_says_so_and_exits_1(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(PACKAGE_CLI), "harness", "doctor"],
        env=base_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 1
    assert "FAIL socket: no supervisor socket found" in result.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="the supervisor writes for another user only as root")
def test_as_root_for_another_user_a_pointer_folder_the_agent_linked_elsewhere_is_not_written(
    tmp_path: Path,
) -> None:
    """The agent owns its HOME: it could point ~/.local/state/otel-lifecycle-hooks/run at a
    folder of root's. The supervisor, root, must not write its file there."""
    nobody = (65534, 65534)
    home = tmp_path / "home"
    state = home / ".local" / "state" / "otel-lifecycle-hooks"
    state.mkdir(parents=True)
    for folder in (home, home / ".local", home / ".local" / "state", state):
        os.chown(folder, *nobody)
    roots_folder = tmp_path / "roots-only"
    roots_folder.mkdir(mode=0o700)
    (state / "run").symlink_to(roots_folder)
    os.lchown(state / "run", *nobody)
    channel = SessionChannel(Received(), owner=nobody)
    try:
        channel.open(str(tmp_path / "events.sock"), {"HOME": str(home)})
        assert list(roots_folder.iterdir()) == []
    finally:
        channel.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="the supervisor writes for another user only as root")
def test_as_root_for_another_user_the_pointer_file_belongs_to_that_user() -> None:
    nobody = (65534, 65534)
    # The agent's user makes the missing folders itself: its home must be within its reach
    # (pytest's tmp_path is not).
    top = Path(tempfile.mkdtemp(prefix="olh-channel-"))
    try:
        top.chmod(0o755)
        home = top / "home"
        home.mkdir()
        os.chown(home, *nobody)
        channel = SessionChannel(Received(), owner=nobody)
        try:
            channel.open(str(top / "events.sock"), {"HOME": str(home)})
            [pointer] = (home / ".local/state/otel-lifecycle-hooks/run").glob("supervisor-*.json")
            assert (pointer.stat().st_uid, stat.S_IMODE(pointer.stat().st_mode)) == (65534, 0o600)
            assert pointer.parent.stat().st_uid == 65534
        finally:
            channel.close()
        assert not pointer.exists()
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_doctor_never_sends_the_token_to_an_address_that_is_not_loopback(tmp_path: Path) -> None:
    """The pointer file and the variables are the agent's to write: a planted URL elsewhere is
    reported, not contacted."""
    env = base_env(tmp_path) | {
        "LIFECYCLE_HOOKS_SOCKET": str(tmp_path / "nothing.sock"),
        "LIFECYCLE_HOOKS_HTTP_URL": "http://192.0.2.10:8080",
        "LIFECYCLE_HOOKS_HTTP_TOKEN": "planted",
    }
    result = subprocess.run(
        [str(PACKAGE_CLI), "harness", "doctor", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert "is not a loopback http:// URL: not contacted" in checks["http route"]["detail"]
    assert "planted" not in result.stdout + result.stderr
