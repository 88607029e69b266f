"""The JSON Schema (draft 2020-12) of `lifecycle_hooks:`, shipped beside this module.

`schema.json` describes a whole `scion-agent.yaml` (other keys allowed); its `$defs` hold the
hook section. Editors point their YAML language server at it for completion and checks.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from importlib import resources
from typing import Any

SCHEMA_RESOURCE = "schema.json"


@cache
def _schema() -> dict[str, Any]:
    text = resources.files(__package__).joinpath(SCHEMA_RESOURCE).read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def template_file_schema() -> dict[str, Any]:
    """The schema of a whole `scion-agent.yaml`: `lifecycle_hooks:` and the keys hooks read."""
    return copy.deepcopy(_schema())


def lifecycle_hooks_schema() -> dict[str, Any]:
    """The schema of the `lifecycle_hooks:` list alone, self-contained (with its `$defs`)."""
    whole = _schema()
    section = copy.deepcopy(whole["$defs"]["lifecycle_hooks"])
    return {
        "$schema": whole["$schema"],
        "$id": whole["$id"].replace("scion-agent.json", "lifecycle-hooks.json"),
        "title": "lifecycle_hooks",
        **section,
        "$defs": copy.deepcopy(whole["$defs"]),
    }
