"""Reading a journal's cells as the types its rows declare, whatever the file holds.

The journal may be a file the agent can write. SQLite keeps any value in any column (text in
an INTEGER column, anything in a JSON one), so a cell read back is hostile input: each is
taken as its row's type or, when it is not one, as the column's empty value. A reader
(`history`, `replay`, the page) then never fails on a row, and shows what it can of it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


def integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        result = float(value)
        return result if math.isfinite(result) else None
    return None


def text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def parsed_json(value: Any) -> Any:
    """The JSON a text cell holds, or None when it holds none."""
    if not isinstance(value, str):
        return None
    try:
        return json.loads(value)
    except ValueError:
        return None


def string_map(value: Any) -> dict[str, str]:
    """A JSON object of strings (metadata, variables); other entries are left out."""
    if not isinstance(value, Mapping):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def strings(value: Any) -> tuple[str, ...]:
    """A JSON array of strings (template files); other entries are left out."""
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def maps(value: Any) -> tuple[dict[str, str], ...]:
    """A JSON array of string objects (stored templates); other entries are left out."""
    return (
        tuple(string_map(v) for v in value if isinstance(v, Mapping))
        if isinstance(value, list)
        else ()
    )


def header_pairs(value: Any) -> list[list[str]] | None:
    """An attempt's headers: a list of [name, value] string pairs; other entries left out."""
    if not isinstance(value, list):
        return None
    return [
        list(pair)
        for pair in value
        if isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)
    ]


def request(value: Any, *, pairs: bool) -> dict[str, Any] | None:
    """A journaled request: a script's `argv`, or an HTTP method, url, headers (a mapping in an
    execution, `pairs` in an attempt) and body, each of its type; None when it is none."""
    if not isinstance(value, dict):
        return None
    if "argv" in value:
        argv = value["argv"]
        if isinstance(argv, list) and all(isinstance(arg, str) for arg in argv):
            return value
        return None
    if not isinstance(value.get("method"), str) or not isinstance(value.get("url", ""), str):
        return None
    if not isinstance(value.get("body"), (str, type(None))):
        return None
    headers = value.get("headers")
    if pairs:
        fitted: Any = header_pairs(headers) if headers is not None else None
    elif headers is None:
        fitted = None
    elif isinstance(headers, Mapping) and len(string_map(headers)) == len(headers):
        fitted = dict(headers)
    else:
        return None  # a header left out would change what a replay sends
    return {**value, "headers": fitted} if "headers" in value else value
