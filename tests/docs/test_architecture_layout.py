"""architecture.md's package layout names only what is there: every folder and module of the
tree, and every module its descriptions mention."""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs.runnable import blocks

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
_ENTRY = re.compile(r"^(?P<indent> *)(?P<name>[A-Za-z_][\w.]*(?:\.py|/))(?:\s|$)")
_MENTION = re.compile(r"\b([a-z_][a-z0-9_]*\.py)\b")


def layout_paths() -> tuple[list[Path], list[Path]]:
    """(the entries of the tree, the modules its descriptions mention), as paths."""
    [tree] = [block for block in blocks(PAGE) if block.text.startswith("otel_lifecycle_hooks/")]
    entries: list[Path] = []
    mentioned: list[Path] = []
    parents: list[tuple[int, Path]] = []  # (indent, folder) of the folders we are in
    folder = ROOT
    for line in tree.text.splitlines():
        match = _ENTRY.match(line)
        if match:
            indent, name = len(match.group("indent")), match.group("name")
            while parents and parents[-1][0] >= indent:
                parents.pop()
            base = parents[-1][1] if parents else ROOT
            path = base / name.rstrip("/")
            entries.append(path)
            if name.endswith("/"):
                parents.append((indent, path))
                folder = path
            else:
                folder = base
            description = line[match.end() :]
        else:
            description = line
        mentioned += [folder / module for module in _MENTION.findall(description)]
    return entries, mentioned


def test_every_folder_and_module_of_the_layout_exists() -> None:
    entries, mentioned = layout_paths()
    assert len(entries) > 30  # the tree was read
    assert [str(path.relative_to(ROOT)) for path in entries if not path.exists()] == []
    assert [str(path.relative_to(ROOT)) for path in mentioned if not path.exists()] == []


def test_the_layout_block_is_marked_as_checked_here() -> None:
    [tree] = [block for block in blocks(PAGE) if block.text.startswith("otel_lifecycle_hooks/")]
    assert tree.marker == "skip" and Path(__file__).name in tree.argument
