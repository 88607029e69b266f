"""`condition:` expressions: `VAR == value`, `VAR != value`, joined by `and` / `or`.

STUB: the parser is being written; this placeholder keeps imports working.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


class ConditionSyntaxError(ValueError):
    """A condition that does not parse; `offset` is the 0-based column in the source text."""

    def __init__(self, message: str, offset: int = 0) -> None:
        super().__init__(message)
        self.offset = offset


@dataclass(frozen=True)
class Condition:
    source: str

    def evaluate(self, variables: Mapping[str, str]) -> bool:
        raise NotImplementedError


def parse_condition(text: str) -> Condition:
    raise NotImplementedError
