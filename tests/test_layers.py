"""The layers of docs/architecture.md hold: `lint-imports` keeps pyproject's `layers` contract,
an import against it (even one inside a function) breaks the contract, and no two modules of
the package import each other."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "otel_lifecycle_hooks"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` on the package and pyproject.toml found in `cwd`."""
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(cwd)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_layers_contract_is_kept() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 1 kept, 0 broken." in result.stdout


def test_an_upward_import_inside_a_function_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(ROOT / PACKAGE, tmp_path / PACKAGE, ignore=shutil.ignore_patterns("*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    durations = tmp_path / PACKAGE / "template" / "durations.py"
    with durations.open("a") as module:
        module.write(
            "\n\ndef _upward() -> None:\n    from ..engine import policies  # noqa: F401\n"
        )

    result = lint_imports(tmp_path)

    assert result.returncode == 1
    assert "otel_lifecycle_hooks.template is not allowed to import" in result.stdout
    assert "otel_lifecycle_hooks.template.durations" in result.stdout


def package_edges(graph: grimp.ImportGraph) -> set[tuple[str, str]]:
    """`from . import rows` in journal/sqlite.py reads `rows` off the package `journal`, whose
    `__init__` runs first: the statement imports the package as well as its submodule."""
    edges: set[tuple[str, str]] = set()
    for module in graph.modules:
        spec_file = ROOT / Path(*module.split("."))
        path = spec_file / "__init__.py" if spec_file.is_dir() else spec_file.with_suffix(".py")
        is_package = path.name == "__init__.py"
        own_package = module if is_package else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None:
                edges.add((module, own_package))
    return edges


def test_no_two_modules_import_each_other() -> None:
    graph = grimp.build_graph(PACKAGE, cache_dir=None)
    edges = {
        (module, imported)
        for module in graph.modules
        for imported in graph.find_modules_directly_imported_by(module)
    } | package_edges(graph)

    mutual = [
        (first, second)
        for first, second in combinations(sorted(graph.modules), 2)
        if (first, second) in edges and (second, first) in edges
    ]

    assert mutual == []
