"""The docs name the package's environment variables as the code reads them: the current
`LIFECYCLE_HOOKS_*` names, an older `OTEL_LIFECYCLE_HOOKS_*` name only where the same line
calls it the older one, and no name the package does not read."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([*ROOT.joinpath("docs").glob("*.md"), ROOT / "README.md"])
NAME = re.compile(r"\b(?:OTEL_)?LIFECYCLE_HOOKS_[A-Z0-9_]*[A-Z0-9]\b")


def _is_the_suites(name: str) -> bool:
    """The test suite's own settings (`..._TEST_CACHE`): the tests read them, not the package."""
    return "_TEST_" in name


def _package_text() -> str:
    return "\n".join(
        path.read_text() for path in ROOT.joinpath("otel_lifecycle_hooks").rglob("*.py")
    )


def test_an_older_name_appears_only_where_the_line_says_it_is_the_older_one() -> None:
    stale = [
        f"{page.name}:{number}: {name}"
        for page in PAGES
        for number, line in enumerate(page.read_text().splitlines(), 1)
        for name in NAME.findall(line)
        if name.startswith("OTEL_") and "older" not in line and not _is_the_suites(name)
    ]
    assert stale == [], "name the current LIFECYCLE_HOOKS_* variable:\n" + "\n".join(stale)


def test_every_variable_the_docs_name_is_one_the_package_reads() -> None:
    package = _package_text()
    unknown = sorted(
        {
            f"{page.name}: {name}"
            for page in PAGES
            for name in NAME.findall(page.read_text())
            if name.removeprefix("OTEL_") not in package
            and name not in package
            and not _is_the_suites(name)
        }
    )
    assert unknown == [], "\n".join(unknown)
