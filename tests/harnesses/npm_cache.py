"""The real harness CLIs, installed from npm once per machine into the suite's cache.

`ensure_harness("claude")` returns the CLI's executable, installing the pinned version into
`cache_root()/npm/<package>@<version>` the first time (under an flock, so several checkouts can
ask at once). Afterwards nothing touches the network: the tests run the cached binary offline.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.support.cache import cache_root

INSTALL_TIMEOUT_S = 900.0
COMPLETE_MARKER = ".installed"


@dataclass(frozen=True)
class NpmHarness:
    """One pinned harness CLI: its npm package, version, and the executable it installs."""

    package: str
    version: str
    executable: str

    @property
    def folder(self) -> Path:
        return cache_root() / "npm" / f"{self.package}@{self.version}"


# The latest release of each line the package supports, checked with `npm view PKG versions`.
HARNESSES: dict[str, NpmHarness] = {
    "claude": NpmHarness("@anthropic-ai/claude-code", "2.1.332", "claude"),
    "gemini": NpmHarness("@google/gemini-cli", "0.61.0", "gemini"),
    "codex": NpmHarness("@openai/codex", "0.171.0", "codex"),
    "opencode": NpmHarness("opencode-ai", "1.18.33", "opencode"),
}


class HarnessUnavailable(RuntimeError):
    """The pinned CLI is not cached and npm could not install it."""


def ensure_harness(name: str) -> Path:
    """The executable of harness `name`, installed into the cache when it is not there yet."""
    harness = HARNESSES[name]
    binary = harness.folder / "node_modules" / ".bin" / harness.executable
    if (harness.folder / COMPLETE_MARKER).exists():
        return binary
    harness.folder.parent.mkdir(parents=True, exist_ok=True)
    lock_path = harness.folder.parent / f"{harness.folder.name}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (harness.folder / COMPLETE_MARKER).exists():
            _install(harness)
    return binary


def _install(harness: NpmHarness) -> None:
    # Install beside the final folder and rename, so a half-finished install is never used.
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=harness.folder.parent))
    spec = f"{harness.package}@{harness.version}"
    try:
        result = subprocess.run(
            ["npm", "install", "--prefix", str(staging), "--no-audit", "--no-fund", spec],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            env={**os.environ, "npm_config_update_notifier": "false"},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise HarnessUnavailable(f"npm install {spec} did not finish: {exc}") from exc
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = "\n".join(result.stderr.strip().splitlines()[-10:])
        raise HarnessUnavailable(
            f"{spec} is not in the test cache ({harness.folder}) and npm could not install it "
            f"(exit {result.returncode}); run the suite once with the npm registry reachable:\n"
            f"{tail}"
        )
    (staging / COMPLETE_MARKER).write_text(spec + "\n")
    if harness.folder.exists():
        shutil.rmtree(harness.folder)
    staging.rename(harness.folder)
