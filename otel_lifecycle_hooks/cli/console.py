"""What every command does the same way on a terminal: escaping what the agent controls,
colour (off when NO_COLOR is set or the stream is not a terminal), and exit codes.

Agent-controlled text (tool names, messages, response bodies) reaches `trace`, `history` and
`run`'s report; a raw escape sequence in it could rewrite the operator's screen or title bar,
so every such value is shown with its control characters escaped.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import IO

# Exit codes shared by `list`, `history` and `trace`.
EXIT_OK = 0
EXIT_NOTHING = 1  # nothing to show: no journal, no trace file, no such id
EXIT_USAGE = 2  # argparse's own code for a bad command line

RED, GREEN, YELLOW, CYAN, DIM = "31", "32", "33", "36", "2"

# The C0 controls, DEL and the C1 controls, each shown as a visible escape.
_CONTROL = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_CONTROL.update({0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"})
# Bidirectional overrides and line separators: they reorder or split what the operator reads.
_CONTROL.update(
    {
        code: f"\\u{code:04x}"
        for code in (0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
    }
)
# Line structure is kept where a caller prints multi-line text on purpose.
_CONTROL_KEEP_NEWLINES = {code: text for code, text in _CONTROL.items() if code != 0x0A}


def escape_control(text: object, *, keep_newlines: bool = False) -> str:
    """`text` with every control character (ESC, BEL, CR, C1 ...) written as a visible escape:
    `\\x1b[2J` is shown, never interpreted."""
    value = text if isinstance(text, str) else str(text)
    return value.translate(_CONTROL_KEEP_NEWLINES if keep_newlines else _CONTROL)


def wants_colour(stream: IO[str], environ: Mapping[str, str] | None = None) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR"):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def paint(text: str, code: str, colour: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if colour else text


OUTCOME_COLOURS = {
    "success": GREEN,
    "failed": RED,
    "timeout": YELLOW,
    "refused": YELLOW,
    "skipped": DIM,
}
