"""The hook systems of the other seeds, read and run by this package's engine.

Each module translates one system into `HookSpec`s (or, for in-process hooks, a Python API):

- `core_agent`     seed 001: the `hooks` map of core-agent's `.agents/config.json`
- `the_loop`       seed 002: the-loop's `hooks:` list of in-process and JSON-RPC executors
- `host_protocol`  seed 003: scripts of the host-agnostic `<script> <stage>` protocol
- `inprocess`      seed 004: `name` + `on_event(event)` hooks registered in Python

Importing this package composes them with the core, which never names them:
- it registers their readers with the template loader: `read_foreign_hooks` for the `hooks:`
  key of a file whose hooks are written in one of them, `read_hook_scripts` for
  `hook_scripts:` (reading never imports, runs or contacts anything of the system read);
- the first time one of those readers reads hooks of its system, it adds the runners of
  their action types to the engine's default registry (`engine.runners.RUNNERS`, see
  `register_action_types`; code that builds such hooks itself calls it).
The edges that load templates with every system's hooks use `load_templates`,
`read_templates` and `load_template_text` from here, so the composition is always in place.
"""

from __future__ import annotations

from ..template.loader import (
    load_template_text,
    load_templates,
    read_templates,
    register_section_reader,
)
from ..template.model import HookSpec
from ..template.problems import Located, Problem, describe
from .core_agent import read_core_agent_hooks

__all__ = [
    "load_template_text",
    "load_templates",
    "read_foreign_hooks",
    "read_hook_scripts",
    "read_templates",
    "register_action_types",
]

_registered = False


def register_action_types() -> None:
    """Add these systems' action types to the engine's registry (`engine.runners.RUNNERS`).
    Their readers do it when a template has hooks of theirs; code that builds such hooks
    itself calls it."""
    global _registered
    if _registered:
        return
    # Here, not at the top: the engine's runners and what they import (the dataclasses module
    # among them), 37M instructions, a tenth of `run`'s start before its agent's spawn, that
    # a template of `lifecycle_hooks:` alone does not need (callgrind).
    from ..engine.runners import RUNNERS
    from .runners import register_runners

    register_runners(RUNNERS)
    _registered = True


def read_foreign_hooks(section: Located, file: str) -> tuple[list[HookSpec], list[Problem]]:
    """The `hooks:` key of a file with no `lifecycle_hooks:`: a mapping of event -> handlers
    is core-agent's (seed 001); a list of named executors is the-loop's (seed 002)."""
    if section.is_mapping or section.is_list:
        register_action_types()
    if section.is_mapping:
        return read_core_agent_hooks(section, file)
    if section.is_list:
        # Only a file of the-loop's pays for its executors (about 5 ms before `run`'s spawn).
        from .the_loop import read_the_loop_hooks

        return read_the_loop_hooks(section, file)
    if section.value is None:
        return [], []
    message = (
        f"got {describe(section)}; write core-agent's map of event -> handlers, "
        "or the-loop's list of executors"
    )
    return [], [Problem(section.position, None, "hooks", message)]


def read_hook_scripts(section: Located, file: str) -> tuple[list[HookSpec], list[Problem]]:
    """`hook_scripts:` of the host-agnostic protocol (seed 003), beside any other hooks."""
    # Only a template with hook_scripts: pays for the protocol's module (about 0.4 ms before
    # `run`'s spawn, -X importtime; tests/test_startup_imports.py pins it).
    from .host_protocol import read_hook_scripts as read

    register_action_types()
    return read(section, file)


# In this order: a file's foreign `hooks:` come before its `hook_scripts:`.
register_section_reader("hooks", read_foreign_hooks)
register_section_reader("hook_scripts", read_hook_scripts, beside_lifecycle_hooks=True)
