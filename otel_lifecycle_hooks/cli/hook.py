"""`otel-lifecycle-hooks hook`: what a harness calls from its own hook configuration.

    otel-lifecycle-hooks hook [--dialect NAME | --dialect-file PATH] [--template PATH]...
        [--on-unreachable allow|deny] [--decision-wait SECONDS] [ARG]...

Reads one payload (JSON, at most `MAX_PAYLOAD_BYTES`, within `STDIN_DEADLINE`) on stdin, or from the
last argument when that is a JSON object (Codex's `notify` passes it so), translates it with the
dialect, and sends the normalized events to the supervisor's socket (`$LIFECYCLE_HOOKS_SOCKET`, else
the one named by the pointer file its supervisor wrote). Without a reachable supervisor and with a
template, it tracks activity in a state file and runs the hooks in-process. Without `--dialect` the
dialect is guessed from the payload's shape.

It always exits 0: a hook must never break its harness. Failures go to stderr in one line and
to the hook log (`$LIFECYCLE_HOOKS_LOG`, else `$HOME/agent.log`); payload content never
does. `main` runs before argparse is imported and imports no OpenTelemetry, HTTP client or YAML
on the way to the socket: a harness pays for this command on every event.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import sys
import time

from ..harness import socket_client
from ..harness.dialects import UnknownDialectError, detect_dialect, get_dialect
from ..harness.refusals import answer, style_for

# For annotations only: importing them (`typing` included) would cost every harness event.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any, BinaryIO

    from ..harness.dialects import Dialect
    from ..harness.normalized import NormalizedEvent

MAX_PAYLOAD_BYTES = 8 * 1024 * 1024
# How long `hook` waits for its payload on stdin (a harness writes it at once).
STDIN_DEADLINE = 5.0  # seconds
# No `OTEL_` prefix: Claude Code removes those variables from its hooks' environment.
LOG_ENV = "LIFECYCLE_HOOKS_LOG"
LEGACY_LOG_ENV = "OTEL_LIFECYCLE_HOOKS_LOG"  # still read, for one release
_DESCRIPTION = """\
Reads one harness hook payload (JSON) on stdin, or from the last argument when that is a JSON
object (Codex notify), and sends its normalized events to the supervisor at
$LIFECYCLE_HOOKS_SOCKET (else its pointer file). With no supervisor and a template, runs the
hooks in-process.
Always exits 0; failures are logged to stderr and to $LIFECYCLE_HOOKS_LOG ($HOME/agent.log).

examples:
  echo '{"hook_event_name": "Stop"}' | otel-lifecycle-hooks hook --dialect claude
  otel-lifecycle-hooks hook --dialect codex '{"type": "agent-turn-complete"}'
"""
_VALUE_OPTIONS = {
    "--dialect": "dialect",
    "--dialect-file": "dialect_file",
    "--template": "template",
    "--on-unreachable": "on_unreachable",
    "--decision-wait": "decision_wait",
}
# What a gate decides when no supervisor answers (`--on-unreachable`): written into the
# harness's hook settings, never read from the agent's environment.
UNREACHABLE_POLICIES = ("allow", "deny")
UNREACHABLE_REASON = "otel-lifecycle-hooks: no supervisor answered this gate, which is fail-closed"
# `--decision-wait`: how long a gate's decision is waited for (default
# socket_client.DECISION_WAIT, under the hook timeout install writes); past it,
# `--on-unreachable` answers. Above the longest gate timeout a template may give (120 s).
MAX_DECISION_WAIT = 600.0  # seconds


def main(
    argv: Sequence[str] | None = None,
    *,
    stdin: BinaryIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Run the hook command; always returns 0."""
    _run(argv, stdin, environ)
    return 0


def run_command(argv: Sequence[str]) -> None:
    """The `hook` command of a real process: `main`, then, when its events went to the
    supervisor's socket (or there were none), the process ends at once, its output flushed.

    Such a process has nothing left to tear down (no thread, no open file, no exit handler),
    and the interpreter's own finalization, every module's teardown, was about 2 ms of a
    16 ms run: a tenth of what each harness event costs. When the hooks ran in-process (no
    supervisor reachable), or anything failed, it returns and the interpreter exits as usual,
    so that the engine's exit handlers drain and flush."""
    if _run(argv, None, None):
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):
            return  # let the interpreter's exit report it, as it would have
        os._exit(0)


def _run(
    argv: Sequence[str] | None, stdin: BinaryIO | None, environ: Mapping[str, str] | None
) -> bool:
    """The hook command; True when the process may end at once (see `run_command`)."""
    env = os.environ if environ is None else environ
    try:
        return _hook(list(sys.argv[2:] if argv is None else argv), stdin, env)
    except _Refused as exc:
        log(str(exc), env)
    # A hook must never fail its harness, whatever went wrong.
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001
        if type(exc).__name__ == "TemplateError":  # file:line: what is wrong; never a value
            log(f"hook: template not loaded: {exc}".replace("\n", "; "), env)
        else:
            # Only the type: an exception's text may quote the payload.
            log(f"hook failed: {type(exc).__name__}", env)
    return False


class _Refused(Exception):
    """A failure whose message is safe and useful to log as is."""


def _hook(argv: list[str], stdin: BinaryIO | None, env: Mapping[str, str]) -> bool:
    """True when the events went to the supervisor's socket, or there were none; False when
    the hooks ran in this process."""
    options, extra = parse_args(argv)
    # Read the payload first, so that the harness's write to our stdin never fails.
    payload = _payload(extra, stdin)
    dialect = _named_dialect(options, env)
    if payload is None:
        return True  # nothing on stdin: nothing happened
    if dialect is None:
        dialect = get_dialect(detect_dialect(payload, extra), env)
    events = dialect.translate(payload, extra)
    _log_dropped(events, env)
    style = style_for(dialect.name, payload) if events else None
    if style is not None:
        return _gate(events, style, options, env)
    _answer(dialect.response(payload))
    return not events or _deliver(events, options.get("template", []), env)


def _gate(
    events: list[NormalizedEvent], style: str, options: Mapping[str, Any], env: Mapping[str, str]
) -> bool:
    """An event the harness lets a hook refuse: wait for the supervisor's decision on its
    gates, at most `--decision-wait`, and answer it in the harness's protocol. With no answer
    (no supervisor, none reachable, none in time), `--on-unreachable` decides (default
    allow): a decision that comes after the harness's own hook timeout would never be told,
    and the harness would go on whatever the gate's policy."""
    wait = options.get("decision_wait", socket_client.DECISION_WAIT)
    try:
        decision = socket_client.ask_decision(events, env, timeout=wait)
        if decision is None:
            # The events went to a socket served by no process this hook runs under: its
            # answer would not be trusted, so none was asked for.
            if options.get("on_unreachable", "allow") == "deny":
                _answer(answer(style, {"decision": "deny", "reason": UNREACHABLE_REASON}))
                log("gate: the socket is served by no process this hook runs under: no "
                    "decision trusted; answered deny (--on-unreachable)", env)  # fmt: skip
            return True
    except OSError as exc:
        policy = options.get("on_unreachable", "allow")
        if policy == "deny":
            reason = "no supervisor answered for this gate, which is fail-closed"
            if isinstance(exc, socket_client.DecisionLate):
                reason = f"no decision within {wait:g}s for this gate, which is fail-closed"
            _answer(
                answer(style, {"decision": "deny", "reason": f"otel-lifecycle-hooks: {reason}"})
            )
        if isinstance(exc, socket_client.NoSupervisor):
            return _deliver(events, options.get("template", []), env)
        log(f"gate: {exc}; event not delivered, answered {policy} (--on-unreachable)", env)
        return True
    _answer(answer(style, decision))
    return True


def _log_dropped(events: list[NormalizedEvent], env: Mapping[str, str]) -> None:
    """One hook log line for the fields an event may not set (reported.py): they were
    not kept, and the supervisor never sees them, so this line is their count."""
    for event in events:
        if event.dropped:
            names = ", ".join(n if n.isidentifier() else "(a field)" for n in event.dropped[:8])
            log(f"{event.event} may not set {names}: not kept", env)


def _answer(text: str | None) -> None:
    """Print what the dialect says the harness expects on stdout, if anything."""
    if text is None:
        return
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError):
        pass  # the harness stopped listening; the events still go out


def parse_args(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """`--dialect`, `--dialect-file`, `--template` (repeatable), `--on-unreachable`,
    `--decision-wait`; everything else is extra."""
    options: dict[str, Any] = {"template": []}
    extra: list[str] = []
    args = iter(argv)
    for arg in args:
        name, has_value, value = arg.partition("=")
        key = _VALUE_OPTIONS.get(name)
        if arg == "--":
            extra.extend(args)
        elif key is None:
            extra.append(arg)
        else:
            if not has_value:
                value = next(args, "")
            if not value:
                raise _Refused(f"{name} needs a value")
            if key == "template":
                options["template"].append(value)
            elif key == "on_unreachable" and value not in UNREACHABLE_POLICIES:
                raise _Refused(f"{name}: got {value!r}; write allow or deny")
            elif key == "decision_wait":
                options[key] = _decision_wait(name, value)
            else:
                options[key] = value
    return options, extra


def _decision_wait(name: str, value: str) -> float:
    """`--decision-wait`'s seconds: a number above 0, at most `MAX_DECISION_WAIT`."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= MAX_DECISION_WAIT:  # NaN fails this too
        raise _Refused(
            f"{name}: got {value!r}; write seconds above 0, at most {MAX_DECISION_WAIT:g} "
            "(under the harness's own hook timeout)"
        )
    return seconds


def _named_dialect(options: Mapping[str, Any], env: Mapping[str, str]) -> Dialect | None:
    try:
        if "dialect_file" in options:
            # Here, not at the top: the YAML parser (about 25 ms, -X importtime) only for a
            # dialect file; the built-in dialects are code.
            from ..harness.dialect_yaml import load_dialect_file

            return load_dialect_file(options["dialect_file"])
        if "dialect" in options:
            return get_dialect(options["dialect"], env)
    except (UnknownDialectError, ValueError) as exc:  # ValueError: DialectFileError
        raise _Refused(str(exc)) from None
    return None


def _payload(extra: list[str], stdin: BinaryIO | None) -> dict[str, Any] | None:
    """The payload object: the last argument if it is a JSON object, else stdin."""
    if extra and extra[-1].lstrip().startswith("{"):
        raw: bytes = extra[-1].encode("utf-8", "surrogatepass")
    else:
        raw = _read_stdin(stdin)
    if not raw.strip():
        return None
    try:
        # Bytes that are not UTF-8 are replaced (U+FFFD) rather than costing the event.
        payload = json.loads(raw.decode("utf-8", "replace"))
    except (ValueError, RecursionError) as exc:
        # The position only: the message of a decode error can quote the input.
        raise _Refused(f"payload is not valid JSON ({type(exc).__name__})") from None
    if not isinstance(payload, dict):
        raise _Refused(f"payload is a JSON {type(payload).__name__}, not an object")
    return payload


def _read_stdin(stdin: BinaryIO | None) -> bytes:
    stream = stdin if stdin is not None else getattr(sys.stdin, "buffer", None)
    if stream is None or (hasattr(stream, "isatty") and stream.isatty()):
        return b""  # no stdin, or a terminal: no payload to wait for
    try:
        descriptor = stream.fileno()
    except (AttributeError, OSError, ValueError):  # an in-memory stream: it cannot block
        data = stream.read(MAX_PAYLOAD_BYTES + 1)
    else:
        data = _read_with_deadline(descriptor)
    if len(data) > MAX_PAYLOAD_BYTES:
        raise _Refused(f"payload larger than {MAX_PAYLOAD_BYTES} bytes, ignored")
    return data


def _read_with_deadline(descriptor: int) -> bytes:
    """Up to `MAX_PAYLOAD_BYTES + 1` bytes, until end of file, until what was read is a whole
    JSON object (some harnesses keep stdin open after the payload), or until
    `STDIN_DEADLINE`: a stdin that stays open, a FIFO nobody writes, or a device never holds up
    the harness."""
    deadline = time.monotonic() + STDIN_DEADLINE
    chunks: list[bytes] = []
    size = 0
    while size <= MAX_PAYLOAD_BYTES:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            readable, _, _ = select.select([descriptor], [], [], remaining)
        except (OSError, ValueError):  # not selectable: a plain blocking read, bounded
            chunks.append(os.read(descriptor, MAX_PAYLOAD_BYTES + 1 - size))
            break
        if not readable:
            break  # the deadline passed with nothing more
        chunk = os.read(descriptor, min(1 << 20, MAX_PAYLOAD_BYTES + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if chunk.rstrip().endswith(b"}") and _is_json_object(b"".join(chunks)):
            break
    return b"".join(chunks)


def _is_json_object(data: bytes) -> bool:
    try:
        return isinstance(json.loads(data), dict)
    except ValueError:
        return False


def _deliver(
    events: list[NormalizedEvent], given_templates: list[str], env: Mapping[str, str]
) -> bool:
    """Send the events to the supervisor (True), else run the hooks in-process (False)."""
    unsupervised = False
    try:
        socket_client.send_events(events, env)
        return True
    except socket_client.NoSupervisor as nothing:
        reason, unsupervised = str(nothing), True
    except socket_client.SupervisorUnavailable as unavailable:
        reason = str(unavailable)
    except OSError as exc:  # accepted, then lost: the same as no supervisor
        reason = f"supervisor socket: {exc.strerror or type(exc).__name__}"
    templates = socket_client.template_paths(given_templates, env)
    if not templates and unsupervised:
        # Hooks installed at user level with the agent not under `run`: a user's normal day.
        # The event ends here, silently (a harness shows a hook's stderr to its user), and the
        # hook log says so once, at the session's start.
        if any(event.event == "session-start" for event in events):
            log(f"{reason}; no template given, this session's events are not delivered", env,
                to_stderr=False)  # fmt: skip
        return True
    if not templates:  # a supervisor was named and is gone: that is worth an error
        raise _Refused(f"{reason}; no template given, event not delivered")
    # Here, not at the top: with a supervisor the hook never runs hooks itself, and these
    # (the state file, the hook log) cost about 25 ms (-X importtime); the engine comes later.
    from ..harness import without_supervisor
    from ..hooklog import HookLog, default_hook_log_path, diagnostics_to

    # The harness shows a hook's stderr to its user, or to the model: warnings (an unresolved
    # variable) go to the hook log only; errors also to stderr, as every failure here.
    def show_errors(text: str, is_error: bool) -> None:
        if is_error:
            sys.stderr.write(f"otel-lifecycle-hooks: {text}\n")

    try:
        with diagnostics_to(HookLog(default_hook_log_path(env)), show_errors):
            without_supervisor.fire_events(templates, events, env)
    except without_supervisor.EngineMissing as exc:
        raise _Refused(f"{reason}; {exc}") from None
    return False


def log(message: str, environ: Mapping[str, str] | None = None, *, to_stderr: bool = True) -> None:
    """One line to stderr (unless `to_stderr` is false) and one appended to the hook log
    (rotated at its size bound, as the supervisor's lines are: hooklog.py); never raises."""
    env = os.environ if environ is None else environ
    line = message.replace("\n", " ")
    if to_stderr:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            sys.stderr.write(f"otel-lifecycle-hooks: {line}\n")
    home = env.get("HOME") or os.path.expanduser("~")
    path = env.get(LOG_ENV) or env.get(LEGACY_LOG_ENV) or os.path.join(home, "agent.log")
    # Only when there is something to say: the hook log's module is about 14 ms (-X importtime).
    from ..hooklog import HookLog

    hook_log = HookLog(path, environ=env, quiet=True)
    hook_log.write(f"[hook] {line}")
    hook_log.close()


def add_parser(subparsers: Any) -> None:
    """Register `hook` for `--help`; a real invocation goes straight to `main`."""
    import argparse  # `--help` only: about 1.5 ms of every harness event (-X importtime)

    parser = subparsers.add_parser(
        "hook",
        help="feed one harness hook payload (stdin) to the running supervisor",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--dialect",
        metavar="NAME",
        help="claude, gemini, codex, opencode, core-agent, cursor, or a dialect file's name "
        "found in $LIFECYCLE_HOOKS_DIALECTS (default: guessed from the payload)",
    )
    parser.add_argument("--dialect-file", metavar="PATH", help="a dialect.yaml to translate with")
    parser.add_argument(
        "--on-unreachable",
        choices=UNREACHABLE_POLICIES,
        help="what a gate answers the harness when no supervisor does, or none decides "
        "within --decision-wait (default: allow)",
    )
    parser.add_argument(
        "--decision-wait",
        metavar="SECONDS",
        help="how long a gate's decision is waited for; keep it under the harness's own "
        "hook timeout (default: 8, under the 10 s `harness install` writes)",
    )
    parser.add_argument(
        "--template",
        metavar="PATH",
        action="append",
        default=[],
        help="templates to run in-process when no supervisor is reachable "
        "(default: $LIFECYCLE_HOOKS_TEMPLATE)",
    )
    parser.add_argument("extra", nargs="*", metavar="ARG", help="a JSON payload (Codex notify)")


def run(args: Any) -> int:
    """argparse entry: rebuild the argument list and run `main`."""
    argv: list[str] = []
    if args.dialect:
        argv += ["--dialect", args.dialect]
    if args.dialect_file:
        argv += ["--dialect-file", args.dialect_file]
    for template in args.template:
        argv += ["--template", template]
    if getattr(args, "on_unreachable", None):
        argv += ["--on-unreachable", args.on_unreachable]
    if getattr(args, "decision_wait", None):
        argv += ["--decision-wait", args.decision_wait]
    return main([*argv, "--", *args.extra])
