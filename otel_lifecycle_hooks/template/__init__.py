"""Template spec: the model of `lifecycle_hooks:`, its loader, validation and schema.

Names are imported on first use, so that importing `template.model` alone (as the engine and the
harness hook command do) never pays for PyYAML and the rules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the real names, for type checkers
    from .durations import DurationError, format_duration, parse_duration
    from .loader import load_template_text, load_templates, merge_templates
    from .model import AuthSpec, HookAction, HookSpec, Position, Template
    from .problems import Problem, TemplateError
    from .schema import lifecycle_hooks_schema, template_file_schema

_EXPORTS: dict[str, str] = {
    "AuthSpec": "model",
    "HookAction": "model",
    "HookSpec": "model",
    "Position": "model",
    "Template": "model",
    "DurationError": "durations",
    "format_duration": "durations",
    "parse_duration": "durations",
    "load_template_text": "loader",
    "load_templates": "loader",
    "merge_templates": "loader",
    "Problem": "problems",
    "TemplateError": "problems",
    "lifecycle_hooks_schema": "schema",
    "template_file_schema": "schema",
}

__all__ = [
    "AuthSpec",
    "DurationError",
    "HookAction",
    "HookSpec",
    "Position",
    "Problem",
    "Template",
    "TemplateError",
    "format_duration",
    "lifecycle_hooks_schema",
    "load_template_text",
    "load_templates",
    "merge_templates",
    "parse_duration",
    "template_file_schema",
]


def __getattr__(name: str) -> object:
    """A public name, imported from its module when first asked for."""
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module_name}", __name__), name)
