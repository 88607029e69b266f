"""The layers of docs/architecture.md hold: `lint-imports` keeps pyproject's `layers` contract,
an import against it (even one inside a function) breaks the contract, and no modules of the
package import one another, in a cycle of any length."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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


def parent_package_edges(graph: grimp.ImportGraph) -> set[tuple[str, str]]:
    """Importing `harness.dialects._common` runs `harness/dialects/__init__.py` first, so the
    importer depends on every package above what it imports, except those it is itself inside:
    their `__init__` started before its own first line ran. (`from . import cells` is an
    import of the submodule alone; `from . import name`, a name the `__init__` defines, is an
    import of the package, and grimp records it so.)"""
    edges: set[tuple[str, str]] = set()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            package = imported.rpartition(".")[0]
            while package and not (module == package or module.startswith(package + ".")):
                edges.add((module, package))
                package = package.rpartition(".")[0]
    return edges


def add_package_imports(graph: grimp.ImportGraph) -> grimp.ImportGraph:
    """`graph` with the packages whose `__init__` each import runs, as imports of their own."""
    for importer, imported in parent_package_edges(graph):
        graph.add_import(importer=importer, imported=imported)
    return graph


def build_graph() -> grimp.ImportGraph:
    """Every import of the package: at module level, inside functions, and under
    `TYPE_CHECKING` (the layers contract counts those too, and a cycle kept only for the type
    checker still means neither module can be read without the other)."""
    return grimp.build_graph(PACKAGE, cache_dir=None)


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module, of any length: modules each
    importing, directly or through others, every other module of their component."""
    cycles: list[list[str]] = []
    seen: set[str] = set()
    for module in sorted(graph.modules):
        if module in seen:
            continue
        # What `module` imports through a chain, and what imports `module` through one.
        component = graph.find_upstream_modules(module) & graph.find_downstream_modules(module)
        if component:
            cycles.append(sorted({module, *component}))
            seen.update(component)
    return cycles


def test_no_modules_import_one_another_in_a_cycle_of_any_length() -> None:
    assert import_cycles(add_package_imports(build_graph())) == []


def test_a_cycle_of_three_modules_is_found() -> None:
    graph = build_graph()
    events, redact, controls = (f"{PACKAGE}.{name}" for name in ("events", "redact", "controls"))
    for importer, imported in ((events, redact), (redact, controls), (controls, events)):
        graph.add_import(importer=importer, imported=imported)

    assert [controls, events, redact] in import_cycles(add_package_imports(graph))


def test_importing_a_submodule_imports_its_package() -> None:
    # `events` importing `engine.clock` runs `engine/__init__.py`, which imports `events`.
    graph = build_graph()
    events, engine = f"{PACKAGE}.events", f"{PACKAGE}.engine"
    graph.add_import(importer=events, imported=f"{engine}.clock")
    graph.add_import(importer=engine, imported=events)
    assert not any(events in cycle for cycle in import_cycles(graph))

    cycles = import_cycles(add_package_imports(graph))

    assert any({events, engine} <= set(cycle) for cycle in cycles), cycles
