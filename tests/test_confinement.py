"""confinement.py's reading of the machine: the cgroup v2 mount from mountinfo, this process's
cgroup in it, and the parent a variable may name (plain names only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_lifecycle_hooks.confinement import (
    CGROUP_ENV,
    Hierarchy,
    _parent_path,
    find_hierarchy,
)

HYBRID = """\
25 30 0:23 / /sys rw,nosuid - sysfs sysfs rw
35 25 0:30 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
41 35 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
42 35 0:39 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
"""


def _files(tmp_path: Path, mountinfo: str, own: str) -> tuple[str, str]:
    (tmp_path / "mountinfo").write_text(mountinfo)
    (tmp_path / "cgroup").write_text(f"4:memory:/elsewhere\n0::{own}\n")
    return str(tmp_path / "mountinfo"), str(tmp_path / "cgroup")


def test_the_cgroup2_mount_is_read_from_mountinfo_not_assumed(tmp_path: Path) -> None:
    found = find_hierarchy(*_files(tmp_path, HYBRID, "/system.slice/agent.service"))

    assert found == Hierarchy(Path("/sys/fs/cgroup/unified"), "/", "/system.slice/agent.service")
    assert found.directory(found.own) == Path("/sys/fs/cgroup/unified/system.slice/agent.service")


def test_an_escaped_mount_point_and_a_mount_of_a_subtree_are_understood(tmp_path: Path) -> None:
    mountinfo = "50 1 0:40 /outer /mnt/cg\\040two rw - cgroup2 cgroup2 rw\n"
    found = find_hierarchy(*_files(tmp_path, mountinfo, "/outer/inner"))

    assert found is not None
    assert found.directory("/outer/inner") == Path("/mnt/cg two/inner")
    assert found.directory("/other") is None  # outside what the mount shows


@pytest.mark.parametrize(
    ("mountinfo", "own"),
    [
        ("42 35 0:39 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n", "/"),  # v1 only
        ("50 1 0:40 /outer /mnt/cg rw - cgroup2 cgroup2 rw\n", "/not-under-it"),
        (HYBRID, "/gone (deleted)"),
    ],
)
def test_no_usable_hierarchy_is_none(tmp_path: Path, mountinfo: str, own: str) -> None:
    assert find_hierarchy(*_files(tmp_path, mountinfo, own)) is None


HIERARCHY = Hierarchy(Path("/sys/fs/cgroup"), "/", "/system.slice/run.service")


def test_the_default_parent_is_below_this_processes_own_cgroup() -> None:
    assert _parent_path(HIERARCHY, {}) == "/system.slice/run.service/otel-lifecycle-hooks"
    assert _parent_path(HIERARCHY, {CGROUP_ENV: "/agents/fleet"}) == "/agents/fleet"


@pytest.mark.parametrize("value", ["off", "OFF", "0", "false", "no"])
def test_confinement_can_be_turned_off(value: str) -> None:
    assert _parent_path(HIERARCHY, {CGROUP_ENV: value}) is None


@pytest.mark.parametrize(
    "value", ["agents", "/agents/../..", "/a//b", "/.hidden", "/a b", "/a\nb", "/" + "x" * 200]
)
def test_a_parent_that_is_not_a_plain_cgroup_path_turns_confinement_off(value: str) -> None:
    assert _parent_path(HIERARCHY, {CGROUP_ENV: value}) is None
