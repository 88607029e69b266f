"""`otel-lifecycle-hooks harness install|uninstall|doctor`.

    harness install   NAME [--project DIR] [--template PATH] [--dry-run] [--json]
    harness uninstall NAME [--project DIR] [--dry-run] [--json]
    harness doctor    [NAME] [--json]

`install` writes the harness's own configuration so that it calls this package (claude, gemini,
codex or opencode): user level, under $HOME, unless `--project DIR` names a project. It merges
with what is there and keeps the user's own hooks; running it again changes nothing;
`--dry-run` prints the change as a diff and writes nothing; `uninstall` removes only what
`install` added. `--template PATH`: the hook command of each event where the template has a
fail-closed gate (`on_error: fail`) answers deny when no supervisor answers
(`--on-unreachable deny`, docs/gates.md); the others allow.

`doctor`, run from inside a session (a hook or the agent's shell tool), tells whether the
supervisor is reachable (its variable, its pointer file, its socket, its HTTP route) and whether
events arrive: it sends a ping and reads back the count of messages the supervisor received.
Exit 0 when all is well, 1 otherwise, 2 for a usage or configuration error.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from ..harness import socket_client
from ..harness.install import HARNESSES, InstallError, Scope, fail_closed_events, plan
from ..loopback import is_loopback_host
from ..template.loader import load_templates
from ..template.problems import TemplateError

EXIT_PROBLEM = 1
EXIT_CONFIG = 2
PING_WAIT_S = 2.0


def add_parser(subparsers: Any) -> None:
    """Register the `harness` command and its three actions."""
    parser = subparsers.add_parser(
        "harness",
        help="install, remove or check a harness's hook configuration",
        description=__doc__.split("\n\n", 2)[2] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="harness_action", metavar="ACTION", required=True)
    for action, text in (
        ("install", "write the harness's configuration to call this package"),
        ("uninstall", "remove what install wrote"),
    ):
        sub = actions.add_parser(action, help=text, description=text)
        sub.add_argument("name", metavar="NAME", help=f"one of: {', '.join(HARNESSES)}")
        sub.add_argument("--project", metavar="DIR", help="a project's configuration, not $HOME's")
        sub.add_argument("--dry-run", action="store_true", help="print the change, write nothing")
        sub.add_argument("--json", action="store_true", help="a JSON summary on stdout")
        if action == "install":
            sub.add_argument(
                "--template",
                metavar="PATH",
                help="fail closed, when no supervisor answers, where its gates are fail-closed",
            )
    doctor = actions.add_parser("doctor", help="check a running session's channel")
    doctor.add_argument("name", metavar="NAME", nargs="?", help="also check this harness's config")
    doctor.add_argument("--json", action="store_true", help="the checks as JSON on stdout")


def run(args: Any) -> int:
    if args.harness_action == "doctor":
        return _doctor(args)
    return _install(args)


def _scope(args: Any) -> Any:
    home = Path(os.environ.get("HOME") or Path.home())
    project = None
    if getattr(args, "project", None):
        project = Path(args.project).absolute()
        if not project.is_dir():
            raise InstallError(f"--project {args.project}: not a directory")
    fail_closed = None
    if getattr(args, "template", None):
        fail_closed = fail_closed_events(load_templates([args.template]))
    return Scope(home=home, project=project, environ=dict(os.environ), fail_closed=fail_closed)


def _install(args: Any) -> int:
    try:
        change = plan(args.harness_action, args.name, _scope(args))
        if not args.dry_run:
            change.apply()
    except (InstallError, TemplateError) as exc:
        print(f"otel-lifecycle-hooks harness {args.harness_action}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        print(
            f"otel-lifecycle-hooks harness {args.harness_action}:{where}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    if args.json:
        summary = change.to_json()
        summary["dry_run"] = bool(args.dry_run)
        if args.dry_run:
            summary["diff"] = change.diff()
        print(json.dumps(summary, indent=2))
        return 0
    if args.dry_run:
        sys.stdout.write(change.diff() or f"no change: {args.name} is already as wanted\n")
    else:
        done = "installed" if args.harness_action == "install" else "uninstalled"
        if change.changed:
            for item in change.changed:
                print(f"{done} {args.name} ({change.scope.label}): {item.path}")
        else:
            print(f"{args.name} ({change.scope.label}): nothing to change")
    for note in change.notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


# -- doctor --------------------------------------------------------------------------------


def _doctor(args: Any) -> int:
    checks = diagnose(dict(os.environ), args.name)
    if args.json:
        print(json.dumps(checks, indent=2))
    else:
        for check in checks["checks"]:
            mark = "ok  " if check["ok"] else ("--  " if check.get("optional") else "FAIL")
            print(f"{mark} {check['name']}: {check['detail']}")
        print("supervisor reachable, events arrive" if checks["ok"] else "problems found")
    return 0 if checks["ok"] else (EXIT_CONFIG if checks.get("config_error") else EXIT_PROBLEM)


def diagnose(environ: dict[str, str], harness: str | None = None) -> dict[str, Any]:
    """Every check of `harness doctor`, as data."""
    checks: list[dict[str, Any]] = []
    result: dict[str, Any] = {"checks": checks}

    def add(name: str, ok: bool, detail: str, optional: bool = False) -> None:
        checks.append({"name": name, "ok": ok, "detail": detail, "optional": optional})

    variable = socket_client.package_env(environ, "SOCKET")
    add(
        "variable",
        bool(variable),
        f"${socket_client.SOCKET_ENV} = {variable}"
        if variable
        else f"${socket_client.SOCKET_ENV} is not set (this harness may strip it)",
        optional=True,
    )
    pointer = socket_client.find_pointer(environ)
    add(
        "pointer file",
        pointer is not None,
        f"supervisor pid {pointer['pid']}"
        if pointer
        else "no supervisor among this process's ancestors left one",
        optional=bool(variable),
    )
    socket_path = variable or (pointer or {}).get("socket") or ""
    http_url = environ.get("LIFECYCLE_HOOKS_HTTP_URL") or (pointer or {}).get("http_url") or ""
    token = environ.get("LIFECYCLE_HOOKS_HTTP_TOKEN") or (pointer or {}).get("http_token") or ""
    if http_url and not _is_loopback_url(http_url):
        # The pointer file and the variables are the agent's to write: never send the token
        # anywhere but to this machine.
        add(
            "http route",
            False,
            f"{http_url!r} is not a loopback http:// URL: not contacted",
            optional=True,
        )
        http_url = ""
    before = _received(http_url, token) if http_url and token else None
    if http_url:
        add(
            "http route",
            before is not None,
            f"{http_url} answers ({before} messages so far)"
            if before is not None
            else f"{http_url} does not answer",
            optional=True,
        )
    socket_ok = False
    if socket_path:
        try:
            # A socket named by the pointer file only counts if its supervisor serves it.
            served_by = None if variable else (pointer or {}).get("pid")
            socket_client.send_lines(
                socket_path, [{"v": 1, "kind": socket_client.PING_KIND}], served_by
            )
            socket_ok = True
            add("socket", True, f"{socket_path} accepted a ping")
        except OSError as exc:
            add(
                "socket",
                False,
                f"{socket_path}: {exc.strerror or exc}{_sandbox_hint(exc, harness, environ)}",
            )
    else:
        add("socket", False, "no supervisor socket found: is this running under `run`?")
    if socket_ok and before is not None:
        after: int | None = before
        deadline = time.monotonic() + PING_WAIT_S
        while after is not None and after <= before and time.monotonic() < deadline:
            time.sleep(0.05)
            after = _received(http_url, token)
        arrived = after is not None and after > before
        add(
            "events arrive",
            arrived,
            f"the supervisor counted the ping ({before} -> {after})"
            if arrived
            else "the ping was sent but the supervisor did not count it",
        )
    elif socket_ok:
        add(
            "events arrive",
            True,
            "the socket took the ping; its count can be read back only "
            "where the session has its HTTP route (Claude Code, or LIFECYCLE_HOOKS_HTTP=1)",
            optional=True,
        )
    if harness == "claude" and before is not None and _claude_http_route(environ, harness):
        # Claude Code started with the session's settings (`--settings`) posts its events to
        # this route: a user-level install as well would send each of them twice.
        add(
            "claude config",
            True,
            f"the session's HTTP route {http_url} answers: Claude Code run with "
            "`--settings $LIFECYCLE_HOOKS_CLAUDE_SETTINGS` needs no install (one would send "
            "each event twice)",
        )
    elif harness:
        _check_installed(harness, environ, add, result)
    result["ok"] = all(c["ok"] or c["optional"] for c in checks)
    return result


def _claude_http_route(environ: dict[str, str], harness: str) -> bool:
    """Whether Claude Code's hooks come by the session's HTTP route alone: the settings
    the supervisor wrote for `--settings` exist and no command hook is installed."""
    if not environ.get("LIFECYCLE_HOOKS_CLAUDE_SETTINGS"):
        return False
    home = Path(environ.get("HOME") or Path.home())
    try:
        pending = plan("uninstall", harness, Scope(home=home, environ=environ))
    except InstallError:
        return False
    return not pending.changed  # nothing of ours to remove: nothing installed


def _sandbox_hint(error: OSError, harness: str | None, environ: dict[str, str]) -> str:
    """What to do when Codex's sandbox refused the socket (docs/harness-setup.md)."""
    in_codex = harness == "codex" or any(key.startswith("CODEX_SANDBOX") for key in environ)
    if error.errno in (errno.EPERM, errno.EACCES) and in_codex:
        return (
            " (Codex's sandbox refuses Unix sockets unless network access is allowed: "
            "`-c sandbox_workspace_write.network_access=true`, or "
            "`[sandbox_workspace_write] network_access = true` in config.toml)"
        )
    return ""


def _is_loopback_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return False
    return parts.scheme == "http" and not parts.username and is_loopback_host(host)


def _received(url: str, token: str) -> int | None:
    try:
        # trust_env=False: a proxy from the environment must never see the session token.
        with httpx.Client(trust_env=False, timeout=1.0) as client:
            response = client.get(
                url.rstrip("/") + "/v1/status", headers={"Authorization": f"Bearer {token}"}
            )
        if response.status_code != 200:
            return None
        count = response.json().get("received")
        return count if isinstance(count, int) else None
    except (httpx.HTTPError, ValueError):
        return None


def _check_installed(
    harness: str, environ: dict[str, str], add: Any, result: dict[str, Any]
) -> None:
    home = Path(environ.get("HOME") or Path.home())
    try:
        pending = plan("install", harness, Scope(home=home, environ=environ))
    except InstallError as exc:
        add(f"{harness} config", False, str(exc))
        result["config_error"] = True
        return
    if pending.changed:
        paths = ", ".join(str(c.path) for c in pending.changed)
        add(
            f"{harness} config",
            False,
            f"hooks not (fully) installed in {paths}: run `otel-lifecycle-hooks harness install "
            f"{harness}`",
        )
    else:
        add(f"{harness} config", True, "hooks installed (user level)")
