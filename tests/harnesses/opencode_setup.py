"""opencode's own configuration for the real-harness tests: offline, against the fake model API.

- The model: an OpenAI-compatible provider (`@ai-sdk/openai-compatible`, bundled in the binary)
  whose base URL is the fake API; opencode then sends `POST /v1/chat/completions`.
- The start: opencode gives every config folder that has plugins a `package.json` depending on
  `@opencode-ai/plugin` and installs it from npm at each start, before it loads any plugin.
  Offline that install waits for the network to time out (70-80 s a start). A config folder
  that already holds that package at opencode's own version starts at once, so the suite
  installs it once into its cache (beside the CLI) and copies it into each fresh HOME.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
from pathlib import Path

from tests.harnesses.npm_cache import HARNESSES, INSTALL_TIMEOUT_S, HarnessUnavailable

MODEL = "fake/fake-model"
COMPLETE_MARKER = ".installed"
# What opencode runs offline without asking anything: no model list, update or share request.
OFFLINE_ENV = {
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_SHARE": "1",
}


def config(fake_url: str) -> dict[str, object]:
    """opencode.json: the fake provider as the default model; the shell tool needs no asking."""
    return {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": MODEL,
        "permission": {"bash": "allow", "edit": "allow", "external_directory": "allow"},
        "provider": {
            "fake": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Fake",
                "options": {"baseURL": f"{fake_url}/v1", "apiKey": "sk-test-not-a-key"},
                "models": {"fake-model": {"name": "Fake model", "tool_call": True}},
            }
        },
    }


def prepare_opencode(home: Path, env: dict[str, str], fake_url: str) -> None:
    """Write HOME's opencode config and its plugin dependencies; set the offline variables."""
    folder = home / ".config" / "opencode"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "opencode.json").write_text(json.dumps(config(fake_url), indent=2))
    seed_plugin_dependencies(folder)
    env.update(OFFLINE_ENV)


def seed_plugin_dependencies(folder: Path) -> None:
    """Copy the cached `@opencode-ai/plugin` install (package.json, lock, node_modules) in."""
    cached = plugin_dependencies()
    for name in ("package.json", "package-lock.json"):
        shutil.copy2(cached / name, folder / name)
    shutil.copytree(cached / "node_modules", folder / "node_modules", symlinks=True)


def plugin_dependencies() -> Path:
    """The cached install of `@opencode-ai/plugin` at the pinned opencode's version."""
    version = HARNESSES["opencode"].version
    folder = HARNESSES["opencode"].folder.parent / f"opencode-plugin-deps@{version}"
    if (folder / COMPLETE_MARKER).exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / COMPLETE_MARKER).exists():
            _install_plugin_dependencies(folder, version)
    return folder


def _install_plugin_dependencies(folder: Path, version: str) -> None:
    staging = folder.with_name(folder.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    # The same manifest opencode writes into a config folder.
    manifest = {"dependencies": {"@opencode-ai/plugin": version}}
    (staging / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")
    try:
        result = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--ignore-scripts"],
            cwd=staging,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise HarnessUnavailable(f"npm install @opencode-ai/plugin did not finish: {exc}") from exc
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise HarnessUnavailable(f"npm install @opencode-ai/plugin@{version}: {result.stderr}")
    (staging / COMPLETE_MARKER).write_text(version + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
