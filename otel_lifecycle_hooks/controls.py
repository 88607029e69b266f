"""The characters that change how a line reads on a terminal or in a log viewer, and the visible
escapes they are written as, for every place that writes text the agent, a script or an
endpoint chose (the hook log, and what `trace`, `history` and `run` print).

- C0 controls and DEL (ESC starts an escape sequence, CR rewrites a line, LF splits one);
- C1 controls, U+0080-U+009F (CSI U+009B is ESC [ on many terminals, NEL U+0085 a line break);
- the bidirectional controls U+202A-U+202E, U+2066-U+2069, U+200E, U+200F and U+061C, which
  reorder what follows them ("exe.txt" shown as "txt.exe");
- the line and paragraph separators U+2028 and U+2029, line breaks to some viewers.

Each is written as `\\xNN` (below U+0100), `\\uNNNN` otherwise, or `\\t`, `\\n`, `\\r`. Text in
any script, right-to-left ones included, is left as it is.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

_C0_AND_C1 = (*range(0x20), 0x7F, *range(0x80, 0xA0))
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_SEPARATORS = (0x2028, 0x2029)

_ALL: dict[int, str] = {code: f"\\x{code:02x}" for code in _C0_AND_C1}
_ALL.update({code: f"\\u{code:04x}" for code in (*_BIDI, *_SEPARATORS)})
_ALL.update({0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"})


@functools.cache
def _table(keep: str) -> Mapping[int, str]:
    kept = {ord(char) for char in keep}
    return {code: text for code, text in _ALL.items() if code not in kept}


# Compiled at first use, not at import (`hook --dialect` imports this and writes no line).
@functools.cache
def _pattern(keep: str) -> re.Pattern[str]:
    return re.compile("[" + "".join(re.escape(chr(code)) for code in _table(keep)) + "]")


def escape_controls(text: str, *, keep: str = "") -> str:
    """`text` with every control character, except those in `keep` (a tab in the hook log, a
    newline where a caller prints multi-line text on purpose), written as its visible escape:
    `\\x1b[2J` and `\\u202e` are shown, never interpreted."""
    # Most lines hold none: one search is cheaper than translating every character.
    if _pattern(keep).search(text) is None:
        return text
    return text.translate(_table(keep))
