"""The layout says what each part holds: the engine's session does not know the in-process hooks
(they register with it), and loopback is defined once."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "otel_lifecycle_hooks"


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, at module level, in functions or for type checkers alone,
    resolved to absolute names."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = f"{base}.{node.module}" if base and node.module else (node.module or base)
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def test_the_session_does_not_import_the_in_process_hooks_that_register_with_it() -> None:
    session = imported_modules(PACKAGE / "engine" / "session.py")
    inprocess = imported_modules(PACKAGE / "systems" / "inprocess.py")

    assert not any(name.startswith("otel_lifecycle_hooks.systems") for name in session)
    assert "otel_lifecycle_hooks.engine.session.register_in_process_hooks" in inprocess


def test_loopback_is_defined_once() -> None:
    # An address's own loopback test, or a set of loopback names, outside loopback.py would
    # be a second definition.
    defining = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if ".is_loopback" in (text := path.read_text()) or "_LOOPBACK" in text
    )

    assert defining == ["loopback.py"]
