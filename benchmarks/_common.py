"""What every benchmark shares: interleaved timing, statistics, loopback servers, the seed's
template pointed at a loopback server, and one way of printing a figure.

The machines these run on are shared and noisy, so every figure is a ratio to a baseline
measured in the same run, and subject and baseline runs are interleaved (ABAB...) so that a
burst of noise hits both alike.
"""

from __future__ import annotations

import argparse
import compileall
import http.client
import json
import os
import re
import resource
import select
import shlex
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
PACKAGE = "otel_lifecycle_hooks"
PACKAGE_DIR = REPO_DIR / PACKAGE
SEED_TEMPLATE = BENCH_DIR / "templates" / "agent-registry.yaml"
SEED_REGISTRY_URL = "https://agentregistry.googleapis.com"


# -- figures ----------------------------------------------------------------------------------


@dataclass
class Figure:
    """One measured figure, its baseline, and the target it is judged against.

    `ratio` is value / baseline, or `paired_ratio` when the figure has one: the median of
    the ratios of interleaved runs taken pair by pair, which holds when the machine's speed
    drifts during the run (the ratio of two medians moves with every burst that hits one
    side more than the other). How `target` is checked depends on `checked`: "ratio" (the
    ratio at most the target), "value" (the value at most), "min" (the value at least), or
    "growth" (value - baseline at most).
    """

    benchmark: str
    name: str
    value: float
    unit: str
    baseline: float | None
    baseline_name: str
    target: float | None = None
    checked: str = "ratio"
    detail: str = ""
    paired_ratio: float | None = None

    @property
    def ratio(self) -> float | None:
        if self.paired_ratio is not None:
            return self.paired_ratio
        if not self.baseline:
            return None
        return self.value / self.baseline

    @property
    def met(self) -> bool | None:
        if self.target is None:
            return None
        if self.checked == "ratio":
            return self.ratio is not None and self.ratio <= self.target
        if self.checked == "min":
            return self.value >= self.target
        if self.checked == "growth":
            return self.value - (self.baseline or 0.0) <= self.target
        return self.value <= self.target

    @property
    def target_text(self) -> str:
        if self.target is None:
            return ""
        return {
            "ratio": f"<= {format_number(self.target)}x",
            "value": f"< {format_number(self.target)} {self.unit}",
            "min": f">= {format_number(self.target)} {self.unit}",
            "growth": f"growth <= {format_number(self.target)} {self.unit}",
        }[self.checked]

    def describe(self) -> str:
        baseline = (
            f"{format_number(self.baseline)} {self.unit} ({self.baseline_name})"
            if self.baseline is not None
            else self.baseline_name
        )
        ratio = f"{self.ratio:.2f}x" if self.ratio is not None else "-"
        verdict = ""
        if self.target is not None:
            verdict = f"  target {self.target_text}: {'MET' if self.met else 'MISSED'}"
        detail = f"  [{self.detail}]" if self.detail else ""
        return (
            f"  {self.name}: {format_number(self.value)} {self.unit}; baseline {baseline}; "
            f"ratio {ratio}{verdict}{detail}"
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(ratio=self.ratio, met=self.met, target_text=self.target_text)
        return data


def format_number(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def bench_arguments(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="tiny counts: checks it runs")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args()
    problem = installed_package_problem()
    if problem and not args.quick:
        # Before any work: a figure of the source tree is not one of an install.
        print(f"NOT MEASURED: {problem}", file=sys.stderr)
        sys.exit(2)
    return args


def report(script: str, figures: Sequence[Figure], args: argparse.Namespace) -> int:
    """Print the figures and the command that reproduces them; exit 1 if a target was missed
    (never in --quick mode, whose counts are too small to judge), and 2, with no figures
    written, when the package measured was not an installed copy (see `installed_package`)."""
    print(f"{script}{' (quick)' if args.quick else ''}")
    problem = installed_package_problem()
    if problem and not args.quick:
        print(f"  NOT MEASURED: {problem}", flush=True)
        return 2
    for figure in figures:
        print(figure.describe())
    if problem:
        print(f"  (quick: {problem})")
    print(f"  reproduce: {reproduce_command(script)}")
    if args.json:
        Path(args.json).write_text(json.dumps([f.to_json() for f in figures], indent=2))
    missed = [f for f in figures if f.met is False]
    return 1 if missed and not args.quick else 0


def reproduce_command(script: str) -> str:
    """This very interpreter (relative to the checkout when inside it) running the script."""
    python = Path(sys.executable)
    try:
        shown = str(python.relative_to(REPO_DIR))
    except ValueError:
        shown = str(python)
    return f"{shown} benchmarks/{script}"


def package_location(python: str | None = None) -> str:
    """Where `python` (default: this interpreter), started as the measured processes are
    (this environment, this working directory), imports the package from."""
    completed = subprocess.run(
        [python or sys.executable, "-c", f"import {PACKAGE}; print({PACKAGE}.__file__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        return f"(not importable: {completed.stderr.strip().splitlines()[-1:]})"
    return completed.stdout.strip()


def installed_package_problem() -> str | None:
    """None when the package this script and its processes use is the copy installed in this
    interpreter's environment (`sys.prefix`), as a user's `pip install` puts it; else why
    not. The source tree (an editable install, or the checkout on `sys.path`) is not what
    users run: no bytecode compiled at install time, and an editable finder's imports in
    every interpreter, the baseline's included."""
    prefix = os.path.realpath(sys.prefix) + os.sep
    found = [package_location()]
    module = sys.modules.get(PACKAGE)
    if module is not None and getattr(module, "__file__", None):
        found.append(str(module.__file__))
    for location in found:
        if not os.path.realpath(location).startswith(prefix):
            return (
                f"{PACKAGE} is imported from {location}, not from an install under "
                f"{sys.prefix}: run it with the wheel venv's python (`make bench`)"
            )
    return None


# -- timing -----------------------------------------------------------------------------------


@dataclass
class Samples:
    """Wall times in milliseconds."""

    values: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    def summary(self) -> str:
        return (
            f"median {self.median:.1f} min {self.low:.1f} max {self.high:.1f} ms, "
            f"n={len(self.values)}"
        )


def paired_ratio(subject: Samples, baseline: Samples) -> float:
    """The median of subject / baseline over the runs of one `interleave` round each."""
    return statistics.median(a / b for a, b in zip(subject.values, baseline.values, strict=True))


def interleave(runs: int, subjects: dict[str, Callable[[], float]]) -> dict[str, Samples]:
    """Run each subject once per round, `runs` rounds; each returns its own measure. The
    order rotates from round to round, so that no subject always follows the same one."""
    samples = {name: Samples() for name in subjects}
    order = list(subjects.items())
    for round_number in range(runs):
        shift = round_number % len(order)
        for name, run in order[shift:] + order[:shift]:
            samples[name].values.append(run())
    return samples


def time_process(
    argv: Sequence[str], *, stdin: bytes = b"", env: dict[str, str] | None = None
) -> float:
    """Wall time of one whole process, milliseconds; it must exit 0."""
    started = time.perf_counter()
    completed = subprocess.run(
        argv, input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False
    )
    elapsed = (time.perf_counter() - started) * 1000.0
    if completed.returncode != 0:
        raise RuntimeError(
            f"{shlex.join(argv)} exited {completed.returncode}: {completed.stderr[-500:]!r}"
        )
    return elapsed


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


# -- processes and the environment ------------------------------------------------------------


def compile_package() -> None:
    """Write the source tree's bytecode, as pip does at install time, when the package is
    run from there (a --quick run from the development venv); an installed wheel was
    compiled by pip."""
    if os.path.realpath(package_location()).startswith(str(PACKAGE_DIR) + os.sep):
        compileall.compile_dir(str(PACKAGE_DIR), quiet=1)


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment for a measured process: ours without OTEL_* settings or the package's
    own variables, HOME in a temporary directory so that nothing is written outside it."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "SCION_")) and k not in ("XDG_STATE_HOME",)
    }
    # Both names: the package reads LIFECYCLE_HOOKS_JOURNAL first, the older one after it.
    journal = str(home / "journal.db")
    env.update(
        HOME=str(home), LIFECYCLE_HOOKS_JOURNAL=journal, OTEL_LIFECYCLE_HOOKS_JOURNAL=journal
    )
    env.update(extra)
    return env


def console_script() -> str:
    """The installed `otel-lifecycle-hooks` entry point beside this interpreter."""
    return str(Path(sys.executable).with_name("otel-lifecycle-hooks"))


def base_python() -> str:
    """The interpreter this environment was made from (`python3`, without a venv's site)."""
    return str(getattr(sys, "_base_executable", sys.executable))


def rss_kib(pid: int) -> int:
    """Resident set size of a process, KiB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_ticks(pid: int) -> int:
    """utime + stime of a process, in clock ticks (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def wait_until_idle(pid: int, quiet_for: float = 0.5, timeout: float = 120.0) -> None:
    """Wait until a process has used no CPU for `quiet_for` seconds."""
    deadline = time.monotonic() + timeout
    last = cpu_ticks(pid)
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = cpu_ticks(pid)
        if now != last:
            last, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_for:
            return
    raise TimeoutError(f"process {pid} still busy after {timeout:.0f}s")


@dataclass
class Supervisor:
    """A real `otel-lifecycle-hooks run` whose child reports the event socket's path."""

    process: subprocess.Popen[bytes]
    socket_path: str


@contextmanager
def running_supervisor(template: Path, home: Path, timeout: float = 30.0) -> Iterator[Supervisor]:
    """`python -m otel_lifecycle_hooks run --template T -- sh -c '...; exec sleep 600'`,
    stopped with SIGTERM (pre-stop and session-end fire) when the block ends."""
    socket_file = home / "socket-path"
    child = (
        f'printf %s "$OTEL_LIFECYCLE_HOOKS_SOCKET" > {shlex.quote(str(socket_file))}; '
        "exec sleep 600"
    )
    argv = [sys.executable, "-m", "otel_lifecycle_hooks", "run", "--template", str(template)]
    process = subprocess.Popen(
        [*argv, "--", "sh", "-c", child],
        env=clean_env(home),
        stdout=subprocess.DEVNULL,
        stderr=open(home / "supervisor.err", "wb"),  # noqa: SIM115 - closed with the process
        cwd=home,
    )
    try:
        deadline = time.monotonic() + timeout
        while not (socket_file.exists() and socket_file.read_text()):
            if process.poll() is not None or time.monotonic() > deadline:
                err = (home / "supervisor.err").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the supervisor did not start: {err}")
            time.sleep(0.02)
        yield Supervisor(process, socket_file.read_text())
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


# -- the seed's template, pointed at a loopback server ----------------------------------------


def seed_template(directory: Path, base_url: str) -> Path:
    """The seed's agent-registry example with its URLs on `base_url` and `auth: none` (the
    stand-in registry takes no credentials); everything else as the seed has it."""
    text = SEED_TEMPLATE.read_text()
    text = text.replace(SEED_REGISTRY_URL, base_url).replace("auth: gcp-default", "auth: none")
    path = directory / "scion-agent.yaml"
    path.write_text(text)
    return path


# -- loopback HTTP servers --------------------------------------------------------------------


class _RegistryHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        server: Any = self.server
        with server.lock:
            server.requests.append((self.command, self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def registry_server() -> Iterator[Any]:
    """A stand-in Agent Registry on 127.0.0.1: answers 200 `{}` and keeps (method, path, body)."""
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _RegistryHandler)
    server.daemon_threads = True
    server.requests = []
    server.lock = threading.Lock()
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class StampingServer:
    """A raw HTTP/1.1 server on 127.0.0.1 that stamps each request's arrival with
    `time.perf_counter()` (keyed by its path) and answers 200 at once; one thread per
    connection, keep-alive unless `close_connections`."""

    def __init__(self, close_connections: bool = False) -> None:
        self.close_connections = close_connections
        self.arrivals: dict[str, float] = {}
        self.count = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self.all_arrived = threading.Event()
        self.expected = 0

    def __enter__(self) -> Self:
        self._accepting.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(connection,), daemon=True)
            thread.start()

    def _serve(self, connection: socket.socket) -> None:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n"
        answer += b"Connection: close\r\n\r\n" if self.close_connections else b"\r\n"
        buffer = b""
        with connection:
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = connection.recv(65536)
                    if not chunk:
                        return
                    if not buffer:
                        arrived = time.perf_counter()
                    buffer += chunk
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                path = lines[0].split(b" ")[1].decode()
                length = 0
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buffer) < length:
                    chunk = connection.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                buffer = buffer[length:]
                with self._lock:
                    self.arrivals[path] = arrived
                    self.count += 1
                    if self.expected and self.count >= self.expected:
                        self.all_arrived.set()
                connection.sendall(answer)
                if self.close_connections:
                    return
                if buffer:
                    arrived = time.perf_counter()  # a pipelined request already here


@dataclass(frozen=True)
class ArrivalReport:
    """What a `LoopbackServerProcess` saw since `expect`: requests, distinct paths, and the
    first and last arrival (`time.perf_counter()`, comparable with this process's)."""

    count: int
    distinct_paths: int
    first: float
    last: float


class LoopbackServerProcess:
    """`loopback_server.py` in its own process (same interpreter): a keep-alive HTTP/1.1 sink
    on 127.0.0.1, or one that closes each connection. Its CPU is not this process's, as a real
    webhook receiver's would not be."""

    def __init__(self, close_connections: bool = False) -> None:
        argv = [sys.executable, str(BENCH_DIR / "loopback_server.py")]
        if close_connections:
            argv.append("--close")
        self._process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        port = self._read_line(30.0)
        self.url = f"http://127.0.0.1:{int(port)}"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()  # end of commands: the server exits
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def expect(self, count: int) -> None:
        """Forget earlier arrivals; report once `count` more requests arrived."""
        assert self._process.stdin is not None
        self._process.stdin.write(f"expect {count}\n")
        self._process.stdin.flush()
        # Requests sent before the server took the command would be forgotten with the
        # earlier arrivals, and the expected count never reached.
        if self._read_line(30).split() != ["expecting", str(count)]:
            raise RuntimeError("the loopback server did not take the expect command")

    def wait_arrivals(self, timeout: float) -> ArrivalReport:
        """The report of the expected arrivals; TimeoutError if they did not all come."""
        words = self._read_line(timeout).split()
        if words[:1] != ["arrived"]:
            raise RuntimeError(f"unexpected line from the loopback server: {words}")
        return ArrivalReport(int(words[1]), int(words[2]), float(words[3]), float(words[4]))

    def _read_line(self, timeout: float) -> str:
        stdout = self._process.stdout
        assert stdout is not None
        ready, _, _ = select.select([stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(f"the loopback server said nothing within {timeout:.0f}s")
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"the loopback server exited ({self._process.poll()})")
        return line


# -- an in-process agent with one HTTP hook ---------------------------------------------------


def one_hook_session(
    directory: Path,
    url: str,
    action: str = "http",
    queue_limit: int = 1024,
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
) -> Any:
    """An AgentSession whose template has one non-blocking `action` hook on `tool-start`,
    POSTing to `url` (which may use ${TOOL_NAME}); the journal and the hook log are real
    files in `directory`, as a supervisor has them. The providers default to the global ones."""
    from otel_lifecycle_hooks import AgentSession, HookEngine, load_templates

    method = "      method: POST\n" if action == "http" else ""
    template = directory / "one-hook.yaml"
    template.write_text(
        "lifecycle_hooks:\n"
        "  - name: tool-started\n"
        "    on: [tool-start]\n"
        "    action:\n"
        f"      type: {action}\n"
        f"{method}"
        f'      url: "{url}"\n'
        '      body: \'{"tool": "${TOOL_NAME}", "agent": "${AGENT_NAME}"}\'\n'
        "    timeout: 5s\n"
    )
    engine = HookEngine(
        load_templates([template]),
        journal=directory / "journal.db",
        hook_log=directory / "agent.log",
        queue_limit=queue_limit,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
    )
    return AgentSession(engine, agent_name="bench-agent", tracer_provider=tracer_provider)


# -- a supervisor with its routes, and Claude Code's settings for them ------------------------

CHANNEL_FILE = "channel.json"


def launch_supervisor(
    template: Path, home: Path, *, http: bool = False, **env: str
) -> subprocess.Popen[bytes]:
    """`otel-lifecycle-hooks run --template T -- sh -c ...` (this install's console script),
    not waited for: its child writes where the routes are (`wait_for_channel`), then sleeps.
    `http` opens the loopback HTTP route (Claude Code's)."""
    found = home / CHANNEL_FILE
    child = (
        'printf \'{"socket": "%s", "http_url": "%s", "token": "%s", "settings": "%s"}\' '
        '"$LIFECYCLE_HOOKS_SOCKET" "$LIFECYCLE_HOOKS_HTTP_URL" "$LIFECYCLE_HOOKS_HTTP_TOKEN" '
        '"$LIFECYCLE_HOOKS_CLAUDE_SETTINGS" '
        f"> {shlex.quote(str(found))}.tmp && mv {shlex.quote(str(found))}.tmp "
        f"{shlex.quote(str(found))}; exec sleep 600"
    )
    argv = [console_script(), "run", "--template", str(template), "--", "sh", "-c", child]
    return subprocess.Popen(
        argv,
        env=clean_env(home, LIFECYCLE_HOOKS_HTTP="1" if http else "0", **env),
        stdout=subprocess.DEVNULL,
        stderr=open(home / "supervisor.err", "wb"),
        cwd=home,
    )


def wait_for_channel(
    process: subprocess.Popen[bytes], home: Path, timeout: float = 60.0
) -> dict[str, str]:
    """The routes a `launch_supervisor` child wrote: socket, http_url, token, settings (the
    last three empty without the HTTP route). Stops the supervisor and exits if it did not
    start."""
    found = home / CHANNEL_FILE
    deadline = time.monotonic() + timeout
    while not found.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            stop_process(process)
            err = (home / "supervisor.err").read_text(errors="replace")[-2000:]
            raise SystemExit(f"the supervisor did not start: {err}")
        time.sleep(0.02)
    channel: dict[str, str] = json.loads(found.read_text())
    return channel


def stop_process(process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """SIGTERM (a supervisor then runs pre-stop and session-end), SIGKILL after `timeout`."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_process(argv: list[str], stdin: bytes, env: dict[str, str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one whole process, milliseconds; it must
    exit 0."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    completed = subprocess.run(
        argv, input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False
    )
    wall = (time.perf_counter() - started) * 1000.0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if completed.returncode != 0:
        raise RuntimeError(
            f"{shlex.join(argv)} exited {completed.returncode}: {completed.stderr[-500:]!r}"
        )
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, used * 1000.0


def claude_command_hook(settings: dict[str, Any]) -> list[str]:
    """The command hook of the settings (SessionStart's): the console script of this
    install, with its arguments."""
    [group] = settings["hooks"]["SessionStart"]
    [handler] = group["hooks"]
    argv = shlex.split(handler["command"])
    if os.path.dirname(argv[0]) != os.path.dirname(sys.executable):
        raise SystemExit(f"the settings' hook command is not this install's: {argv[0]}")
    return argv


def claude_http_hook(settings: dict[str, Any], env: Mapping[str, str]) -> Callable[[bytes], float]:
    """A sender of PreToolUse's http hook as Claude Code sends it: its URL, its headers with
    the variables it allows interpolated from the environment; the POST's wall time, ms."""
    [group] = settings["hooks"]["PreToolUse"]
    [handler] = group["hooks"]
    if handler["type"] != "http":
        raise SystemExit(f"PreToolUse is a {handler['type']} hook, not http")
    allowed = set(handler.get("allowedEnvVars", []))

    def interpolate(text: str) -> str:
        return re.sub(
            r"\$\{?([A-Z_][A-Z0-9_]*)\}?",
            lambda m: env.get(m[1], "") if m[1] in allowed else "",
            text,
        )

    headers = {k: interpolate(v) for k, v in handler.get("headers", {}).items()}
    headers["Content-Type"] = "application/json"
    url = handler["url"].removeprefix("http://")
    address, _, path = url.partition("/")
    host, port = address.split(":")

    def post(body: bytes) -> float:
        started = time.perf_counter()
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            connection.request("POST", "/" + path, body=body, headers=headers)
            response = connection.getresponse()
            response.read()
        finally:
            connection.close()
        elapsed = (time.perf_counter() - started) * 1000.0
        if response.status != 200:
            raise RuntimeError(f"POST {handler['url']} answered {response.status}")
        return elapsed

    return post
