"""The `otel-lifecycle-hooks` command line.

Each command lives in its own module exposing `add_parser(subparsers)` and `run(args) -> int`;
a run imports only the module of the command it names. `hook` is dispatched before argparse
is even imported: a harness calls it on every event.
"""

from __future__ import annotations

import os
import sys

from ..errors import LifecycleHooksError
from ..version import __version__

EXIT_CONFIG = 2  # a setting or an install that cannot work: what the message says to change
EXIT_USAGE = 2  # as argparse exits on a command line it cannot parse
PROG = "otel-lifecycle-hooks"

# The console script imports this module on every harness event: `typing` is for checkers.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterable, Sequence
    from types import ModuleType

# command name -> module under otel_lifecycle_hooks.cli
COMMANDS: dict[str, str] = {
    "validate": "validate",
    "list": "list_hooks",
    "test": "dry_run",
    "schema": "schema",
    "run": "run",
    "hook": "hook",
    "status": "status",
    "history": "history",
    "replay": "replay",
    "reconcile": "reconcile",
    "trace": "trace",
    "harness": "harness",
    "ui": "ui",
    "completion": "completion",
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "hook" and "-h" not in args and "--help" not in args:
        # Here, not at the top: `hook`'s module (about 0.3 ms of `run`'s start, -X importtime)
        # only for `hook`, which never builds the parser below.
        from .hook import main as hook_main
        from .hook import run_command

        if argv is None:  # this process's own command line: it may end at once
            run_command(args[1:])
            return 0
        return hook_main(args[1:])
    return _run_parsed(args, own_process=argv is None)


def build_parser(names: Iterable[str]) -> tuple[argparse.ArgumentParser, dict[str, ModuleType]]:
    """The command line's parser with the commands `names` (from COMMANDS), and their modules.
    `completion` builds it with every command; a run builds it with the one it names."""
    # Here, not at the top: the parser's modules (argparse, importlib, the examples), about
    # 2 ms of every harness event's `hook` (-X importtime), which never builds a parser.
    import argparse
    import importlib

    from .examples import attach_examples

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Lifecycle hooks for AI agents, visible as OpenTelemetry traces and metrics.",
    )
    parser.add_argument("--version", "-V", action="version", version=f"{PROG} {__version__}")
    subparsers = parser.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)
    modules = {}
    for name in names:
        module_name = COMMANDS[name]
        try:
            module = importlib.import_module(f"{__package__}.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.{module_name}":
                raise
            continue  # a command not built yet
        module.add_parser(subparsers)
        attach_examples(subparsers.choices[name], name)
        modules[name] = module
    return parser, modules


def unknown_command(word: str) -> str:
    """The one line for a first word that is no command, naming the nearest ones."""
    import difflib  # a mistyped command only: about 0.8 ms of every start (-X importtime)

    near = difflib.get_close_matches(word, COMMANDS, n=3, cutoff=0.6)
    if not near:
        return f"{PROG}: {word!r} is not a command; the commands are {', '.join(COMMANDS)}"
    named = " or ".join(repr(name) for name in near)
    return f"{PROG}: {word!r} is not a command; did you mean {named}?"


def _run_parsed(args: list[str], own_process: bool = False) -> int:
    import gc  # not `hook`'s: the hook path imports nothing it does not use (0.04 ms)

    if args and not args[0].startswith("-") and args[0] not in COMMANDS:
        print(unknown_command(args[0]), file=sys.stderr)
        return EXIT_USAGE
    # A named command needs only its own module: importing all of them (`test` pulls in the
    # HTTP stack) would cost every `run` and `status` tens of milliseconds.
    wanted = [args[0]] if args and args[0] in COMMANDS else list(COMMANDS)
    # Importing a command's module (for `run`: the SDK, the engine, the supervisor) makes
    # tens of thousands of objects that live as long as the process; the cyclic collector
    # would rescan them many times over while they are made: about 6 ms of a `run`'s start
    # before its agent's (bench_startup). Then they are frozen (never scanned again) and
    # collection resumes, before the command runs. Only in a process of its own: a caller's
    # heap is the caller's.
    hold = own_process and gc.isenabled()
    if hold:
        gc.disable()
    try:
        parser, modules = build_parser(wanted)
        parsed = parser.parse_args(args)
    finally:
        if hold:
            gc.freeze()
            gc.enable()
    try:
        code = int(modules[parsed.subcommand].run(parsed) or 0)
        sys.stdout.flush()
    except BrokenPipeError:
        # `list T | head -1`: the reader went away, which is no error of the command. Point
        # stdout at /dev/null so that the interpreter's last flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except LifecycleHooksError as exc:
        # What a command did not handle itself is still a user's error with a clear message
        # (a missing extra, a bad setting): one line, not a traceback.
        print(f"{PROG} {parsed.subcommand}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
