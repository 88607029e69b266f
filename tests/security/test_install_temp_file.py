"""`harness install` as root in a folder another user can write (a project the agent works
in): that user plants a link at the name the install would give its temporary file; the
install must not write, chmod or otherwise follow it to the root-only file it points at."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from otel_lifecycle_hooks.harness.install import Scope, plan

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the install runs as root")

NOBODY = (65534, 65534)
CANARY_TEXT = "root's secret\n"


def test_a_link_planted_at_the_old_temporary_name_is_not_followed(tmp_path: Path) -> None:
    secret_dir = tmp_path / "root-only"
    secret_dir.mkdir(mode=0o700)
    canary = secret_dir / "canary"
    canary.write_text(CANARY_TEXT)
    canary.chmod(0o600)
    project = tmp_path / "project"
    claude = project / ".claude"
    claude.mkdir(parents=True)
    (claude / "settings.json").write_text("{}\n")
    for path in (project, claude, claude / "settings.json"):
        os.chown(path, *NOBODY)
    # The name this very process would have used: `.settings.json.<pid>.tmp`.
    planted = claude / f".settings.json.{os.getpid()}.tmp"
    planted.symlink_to(canary)
    os.lchown(planted, *NOBODY)

    plan("install", "claude", Scope(home=tmp_path / "home", project=project)).apply()

    info = canary.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode), canary.read_text()) == (0, 0o600, CANARY_TEXT)
    assert planted.is_symlink() and os.readlink(planted) == str(canary)
    settings = claude / "settings.json"
    assert not settings.is_symlink()
    assert "hook --dialect claude" in json.dumps(json.loads(settings.read_text()))
    # No temporary file of ours is left behind.
    assert sorted(p.name for p in claude.iterdir()) == sorted([planted.name, "settings.json"])
