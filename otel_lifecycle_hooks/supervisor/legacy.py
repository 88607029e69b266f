"""Scion's legacy script hook directories, which run before the template's hooks.

For each directory (`$SCION_HOOKS_DIR`, colon-separated, else `/etc/scion/hooks`; then
`$HOME/.scion/hooks`) and event, the files `<event>`, `<event>.sh`, then `<event>.d/*` in
lexical order; only executable regular files run, sequentially, each bounded by the time left.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ..render import RenderedCommand

log = logging.getLogger("otel_lifecycle_hooks.supervisor")

DEFAULT_SYSTEM_DIR = "/etc/scion/hooks"
# A legacy script with no deadline from the caller gets this long.
DEFAULT_SCRIPT_TIMEOUT = 30.0


def hook_directories(environ: Mapping[str, str]) -> list[Path]:
    configured = environ.get("SCION_HOOKS_DIR")
    dirs = (
        [Path(d) for d in configured.split(":") if d] if configured else [Path(DEFAULT_SYSTEM_DIR)]
    )
    home = environ.get("HOME")
    if home:
        dirs.append(Path(home) / ".scion" / "hooks")
    return dirs


def discover(event: str, environ: Mapping[str, str]) -> list[Path]:
    """The executable scripts for `event`, in the order they run."""
    found: list[Path] = []
    for directory in hook_directories(environ):
        candidates = [directory / event, directory / f"{event}.sh"]
        drop_in = directory / f"{event}.d"
        if drop_in.is_dir():
            candidates += sorted(drop_in.iterdir(), key=lambda p: p.name)
        found += [p for p in candidates if p.is_file() and os.access(p, os.X_OK)]
    return found


def run_legacy_hooks(
    event: str,
    environ: Mapping[str, str],
    *,
    deadline: float | None = None,
    stdin: bytes = b"",
    on_result: Callable[[Path, object], None] | None = None,
    user: str | None = None,
) -> None:
    """Run every legacy script for `event`, one after another, never raising."""
    scripts = discover(event, environ)
    if not scripts:
        return  # the usual case: no legacy directory, and no script runner to import
    from ..actions.script import run_script  # about 1.5 ms before the spawn (-X importtime)

    for script in scripts:
        timeout = DEFAULT_SCRIPT_TIMEOUT
        if deadline is not None:
            timeout = min(timeout, deadline - time.monotonic())
        if timeout <= 0:
            log.warning("legacy hook %s skipped: no time left before the deadline", script)
            continue
        try:
            outcome = run_script(
                RenderedCommand(argv=(str(script),), env={"SCION_HOOK_EVENT": event}, stdin=stdin),
                timeout,
                base_env=dict(environ),
                user=user,
            )
        except Exception:
            log.exception("legacy hook %s failed to run", script)
            continue
        if on_result is not None:
            on_result(script, outcome)
