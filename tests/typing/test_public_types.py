"""Users' type checkers see the package's public names as their real types: each name
`otel_lifecycle_hooks` exports resolves, under mypy, to the class or function it names (the
package loads them lazily at run time, which a type checker must not see as `Any`)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import otel_lifecycle_hooks

ROOT = Path(__file__).resolve().parents[2]

# Each public name, and the type its `reveal_type` ends with: a class's constructor returns
# the class, `load_templates` the Template, `__version__` is a str.
EXPECTED = {
    "HookEngine": "-> otel_lifecycle_hooks.engine.engine.HookEngine",
    "LifecycleHookProcessor": "-> otel_lifecycle_hooks.engine.processor.LifecycleHookProcessor",
    "LifecycleHookLogProcessor": (
        "-> otel_lifecycle_hooks.engine.log_processor.LifecycleHookLogProcessor"
    ),
    "AgentSession": "-> otel_lifecycle_hooks.engine.session.AgentSession",
    "load_templates": "fallback=otel_lifecycle_hooks.template.model.Template]",
    "TemplateError": "-> otel_lifecycle_hooks.template.problems.TemplateError",
    "LifecycleHooksError": "-> otel_lifecycle_hooks.errors.LifecycleHooksError",
    "__version__": "str",
}


def _mypy(tmp_path: Path, source: str) -> str:
    """mypy's output for `source`, checked with the project's configuration (strict)."""
    snippet = tmp_path / "snippet.py"
    snippet.write_text(source)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", str(snippet)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return result.stdout + result.stderr


def test_every_public_name_is_listed_here() -> None:
    assert set(otel_lifecycle_hooks.__all__) == set(EXPECTED)


def test_each_public_name_reveals_its_real_type_and_unknown_methods_are_errors(
    tmp_path: Path,
) -> None:
    names = sorted(EXPECTED)
    source = (
        f"from otel_lifecycle_hooks import {', '.join(names)}\n\n"
        + "".join(f"reveal_type({name})\n" for name in names)
        + "HookEngine.no_such_method()\n"
    )
    output = _mypy(tmp_path, source)
    found = re.findall(r'note: Revealed type is "(.*)"', output)
    assert len(found) == len(names), output
    revealed = dict(zip(names, found, strict=True))
    for name in names:
        assert revealed[name].endswith(EXPECTED[name]), (name, revealed[name])
        assert revealed[name] != "Any", name
    no_method = len(names) + 3  # the import line, a blank line, a reveal per name, then this
    assert re.search(
        rf':{no_method}: error: "type\[HookEngine\]" has no attribute "no_such_method"', output
    ), output
