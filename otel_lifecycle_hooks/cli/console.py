"""What every command does the same way on a terminal: exit codes, outcome colours, and tables
fitted to the terminal's width. Escaping agent-controlled text and choosing colour live in
`terminal.py` (shared with what `run` prints while it supervises) and are re-exported here.
"""

from __future__ import annotations

import os
import shutil
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO

from ..terminal import CYAN as CYAN
from ..terminal import DIM as DIM
from ..terminal import GREEN as GREEN
from ..terminal import RED as RED
from ..terminal import YELLOW as YELLOW
from ..terminal import escape_control as escape_control
from ..terminal import paint as paint
from ..terminal import wants_colour as wants_colour

# Exit codes shared by `list`, `history` and `trace`.
EXIT_OK = 0
EXIT_NOTHING = 1  # nothing to show: no journal, no trace file, no such id
EXIT_USAGE = 2  # argparse's own code for a bad command line

OUTCOME_COLOURS = {
    "success": GREEN,
    "failed": RED,
    "timeout": YELLOW,
    "refused": YELLOW,
    "interrupted": RED,  # it may not have arrived, as a failure
    "skipped": DIM,
}


# --- tables that fit the terminal ------------------------------------------------------------


def output_width(stream: IO[str], environ: Mapping[str, str] | None = None) -> int | None:
    """The columns a table may use: the terminal's, or `COLUMNS` when set (piped too, as for
    `trace`: `COLUMNS=80 history | less`); None when neither says (a pipe: every column,
    whole, for `grep` and the like)."""
    env = os.environ if environ is None else environ
    columns = env.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None

    return shutil.get_terminal_size((80, 24)).columns


@dataclass(frozen=True)
class Step:
    """One way to make a table narrower, tried in the order given until the table fits.

    - `omit`: leave the column out (named in the table's note). With `when_all`, only when
      every row holds that value, and the note says so ("ON_ERROR log for every hook").
    - `cut`: cut its cells to `width` characters, the last one an ellipsis. Only for text
      whose end matters least (names of hooks and events, error types), never for an id.
    - `compact`: show `shorter(cell)` instead (the same value written shorter), at least
      `width` wide.
    - `wrap`: move the column to a line of its own under each row, cut to the width.
    """

    kind: str
    column: str
    width: int = 0
    when_all: str | None = None
    shorter: Callable[[str], str] | None = None


@dataclass
class TableLayout:
    """The columns shown, their widths, and what was left out, for rows of `titles`."""

    titles: tuple[str, ...]
    shown: list[int]
    widths: list[int]
    cut: set[int] = field(default_factory=set)
    wrapped: int | None = None
    compacted: dict[int, Callable[[str], str]] = field(default_factory=dict)
    omitted: list[str] = field(default_factory=list)  # columns left out to fit
    uniform: list[str] = field(default_factory=list)  # "ON_ERROR log": the same in every row
    width: int | None = None

    def note(self, rows_noun: str = "row", elsewhere: str = "") -> str:
        """What the table does not show (`elsewhere`: where to see it), wrapped to the width;
        "" when it shows everything."""
        parts = []
        if self.uniform:
            parts.append(f"{', '.join(self.uniform)} for every {rows_noun}")
        if self.omitted:
            parts.append(
                f"not shown at {self.width} columns: {', '.join(self.omitted)}"
                + (f"; {elsewhere}" if elsewhere else "")
            )
        if not parts:
            return ""

        return textwrap.fill(f"({'; '.join(parts)})", width=self.width or 10_000)

    def lines(
        self,
        rows: Sequence[Sequence[str]],
        *,
        header: bool = True,
        paint_cell: Callable[[int, str, str], str] | None = None,
    ) -> list[str]:
        """The header (when `header`) and the rows, aligned; `paint_cell(column, cell, padded)`
        may colour a cell once its padding is known (colour takes no columns)."""
        out: list[str] = []
        if header:
            out.append(self._line(self.titles, None, None))
        for number, row in enumerate(rows):
            out.append(self._line(row, number, paint_cell))
            if self.wrapped is not None:
                extra = row[self.wrapped]
                limit = (self.width or len(extra) + 4) - 4
                out.append("    " + shorten(extra, limit))
        return out

    def _line(
        self,
        row: Sequence[str],
        number: int | None,
        paint_cell: Callable[[int, str, str], str] | None,
    ) -> str:
        cells = []
        for index, width in zip(self.shown, self.widths, strict=False):
            cell = row[index]
            if number is not None and index in self.compacted:
                cell = self.compacted[index](cell)
            if index in self.cut:
                cell = shorten(cell, width)
            padded = cell.ljust(width)
            if paint_cell is not None and number is not None:
                padded = paint_cell(index, cell, padded)
            cells.append(padded)
        return "  ".join(cells).rstrip()


def shorten(text: str, width: int) -> str:
    """`text` cut to `width` characters, the last an ellipsis when anything was cut."""
    if len(text) <= width:
        return text
    return text[: max(width - 1, 0)] + "…"


def fit_table(
    titles: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int | None,
    steps: Sequence[Step] = (),
    *,
    least: Sequence[int] | None = None,
) -> TableLayout:
    """A layout of `rows` under `titles` within `width` columns (None: no limit), taking
    `steps` in order until it fits. `least` (given, for `history --follow`) is each column's
    width at least, for rows still to come."""
    index_of = {title: index for index, title in enumerate(titles)}
    natural = [
        max([len(title), *(len(row[index]) for row in rows), (least or [0] * len(titles))[index]])
        for index, title in enumerate(titles)
    ]
    layout = TableLayout(tuple(titles), list(range(len(titles))), list(natural), width=width)

    def total() -> int:
        return sum(layout.widths) + 2 * (len(layout.widths) - 1)

    def set_width(index: int, value: int) -> None:
        layout.widths[layout.shown.index(index)] = value

    def remove(index: int) -> None:
        position = layout.shown.index(index)
        del layout.shown[position]
        del layout.widths[position]

    for step in steps:
        if width is None or total() <= width:
            break
        index = index_of[step.column]
        if index not in layout.shown:
            continue
        if step.kind == "omit":
            if step.when_all is not None:
                if rows and all(row[index] == step.when_all for row in rows):
                    remove(index)
                    if step.when_all not in ("", "-"):
                        layout.uniform.append(f"{step.column} {step.when_all}")
                continue
            remove(index)
            layout.omitted.append(step.column)
        elif step.kind == "cut":
            current = layout.widths[layout.shown.index(index)]
            needed = current - (total() - width)
            new = max(step.width, needed, len(step.column))
            if new < current:
                set_width(index, new)
                layout.cut.add(index)
        elif step.kind == "compact" and step.shorter is not None:
            shorter = step.shorter
            layout.compacted[index] = shorter
            # `width`: what later rows may need (`history --follow`).
            widest = max(
                [len(step.column), step.width if least else 0]
                + [len(shorter(row[index])) for row in rows]
            )
            set_width(index, widest)
        elif step.kind == "wrap" and layout.wrapped is None:
            remove(index)
            layout.wrapped = index
    return layout
