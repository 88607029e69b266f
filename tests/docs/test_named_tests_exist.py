"""Every test a page names as the proof of a case exists: a renamed or deleted test must take
its row with it, or the page would point at nothing."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = ("security.md", "reliability.md", "fleet.md")
# `tests/x/test_y.py::test_z`, or a `::test_z` that follows one in the same cell.
FILE_REF = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?")
MORE_REF = re.compile(r"`::(\w+)")


def _named(page: str) -> list[tuple[str, str | None]]:
    """(file, test) pairs the page names, in order; test None where only the file is named."""
    names: list[tuple[str, str | None]] = []
    for line in (REPO / "docs" / page).read_text().splitlines():
        current = None
        for match in re.finditer(rf"{FILE_REF.pattern}|{MORE_REF.pattern}", line):
            if match.group(1):
                current = match.group(1)
                names.append((current, match.group(2)))
            elif current is not None:
                names.append((current, match.group(3)))
    return names


def _tests_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


@pytest.mark.parametrize("page", PAGES)
def test_every_test_a_page_names_exists(page: str) -> None:
    missing = []
    for file, test in _named(page):
        path = REPO / file
        if not path.is_file():
            missing.append(file)
        elif test is not None and test not in _tests_in(path):
            missing.append(f"{file}::{test}")
    assert _named(page), f"{page} names no test"
    assert not missing, f"{page} names tests that do not exist: {missing}"
