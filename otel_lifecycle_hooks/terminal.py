"""Writing to an operator's terminal: agent-controlled text escaped, and colour only where it
belongs (a terminal, NO_COLOR unset). Shared by the commands (cli/console.py) and by what `run`
prints while it supervises (supervisor/report.py, supervisor/running.py).

Agent-controlled text (tool names, messages, response bodies) may hold escape sequences that
would rewrite the operator's screen or title bar, so every such value is shown escaped.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import IO

from .controls import escape_controls

# SGR colour codes.
RED, GREEN, YELLOW, CYAN, DIM = "31", "32", "33", "36", "2"


def escape_control(text: object, *, keep_newlines: bool = False) -> str:
    """`text` with every control character (ESC, BEL, CR, C1, bidirectional controls: see
    `controls.py`) written as a visible escape: `\\x1b[2J` is shown, never interpreted."""
    value = text if isinstance(text, str) else str(text)
    # Line structure is kept where a caller prints multi-line text on purpose.
    return escape_controls(value, keep="\n" if keep_newlines else "")


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
    """`text` in the SGR colour `code` when `colour`, else as it is."""
    return f"\x1b[{code}m{text}\x1b[0m" if colour else text
