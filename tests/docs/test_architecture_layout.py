"""architecture.md's package layout and the package agree both ways: every folder and module the
tree names (or its descriptions mention) exists, and every module and package that exists is
named in the tree."""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs.runnable import blocks

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "otel_lifecycle_hooks"
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


def package_modules() -> list[Path]:
    """Every module of the package, and every package as its folder."""
    modules = [path for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts]
    folders = [
        path.parent
        for path in modules
        if path.name == "__init__.py" and path != PACKAGE / "__init__.py"
    ]
    files = [
        path for path in modules if path.name != "__init__.py" or path == PACKAGE / "__init__.py"
    ]
    return sorted(folders + files)


def test_every_module_and_package_that_exists_is_in_the_layout() -> None:
    entries, _ = layout_paths()
    named = set(entries)
    assert [str(path.relative_to(ROOT)) for path in package_modules() if path not in named] == []


def test_the_layout_block_is_marked_as_checked_here() -> None:
    [tree] = [block for block in blocks(PAGE) if block.text.startswith("otel_lifecycle_hooks/")]
    assert tree.marker == "skip" and Path(__file__).name in tree.argument
