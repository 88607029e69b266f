"""`condition:` expressions: `VAR == value`, `VAR != value`, joined by `and` / `or`.

Grammar (`and` binds tighter than `or`; parentheses group)::

    condition  := and_expr ("or" and_expr)*
    and_expr   := operand ("and" operand)*
    operand    := "(" condition ")" | comparison
    comparison := VAR ("==" | "!=") VALUE
    VAR        := NAME | "${" NAME "}"          NAME = [A-Za-z_][A-Za-z0-9_]*
    VALUE      := bare-word | 'quoted' | "quoted"

A bare word runs up to whitespace, a parenthesis, a quote, `==` or `!=`; the words `and` and
`or` must be quoted to be used as values. Quoted values have no escapes. A value is always a
literal: `${...}` is only allowed on the left. An unset variable compares as the empty string.

Conditions are parsed once, at load time; evaluation is a few dictionary look-ups.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..errors import LifecycleHooksError

# Deep enough for any hand-written condition, shallow enough to never hit Python's recursion limit.
MAX_NESTING = 32

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_BRACED_NAME = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_KEYWORDS = ("and", "or")

Lookup = Callable[[str], "str | None"] | Mapping[str, str]


class ConditionSyntaxError(ValueError, LifecycleHooksError):
    """A condition that does not parse; `offset` is the 0-based column in the source text."""

    def __init__(self, message: str, offset: int = 0) -> None:
        super().__init__(message)
        self.offset = offset


@dataclass(frozen=True)
class Comparison:
    """`name == value` (or `!=`)."""

    name: str
    negated: bool
    value: str

    def evaluate(self, lookup: Callable[[str], str | None]) -> bool:
        equal = (lookup(self.name) or "") == self.value
        return equal != self.negated


@dataclass(frozen=True)
class AllOf:
    """Operands joined by `and`."""

    operands: tuple[Expression, ...]

    def evaluate(self, lookup: Callable[[str], str | None]) -> bool:
        return all(operand.evaluate(lookup) for operand in self.operands)


@dataclass(frozen=True)
class AnyOf:
    """Operands joined by `or`."""

    operands: tuple[Expression, ...]

    def evaluate(self, lookup: Callable[[str], str | None]) -> bool:
        return any(operand.evaluate(lookup) for operand in self.operands)


Expression = Comparison | AllOf | AnyOf


@dataclass(frozen=True)
class Condition:
    """A parsed `condition:`; `Condition("ACTIVITY == completed")` parses its source."""

    source: str
    expression: Expression | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.expression is None:
            object.__setattr__(self, "expression", _Parser(self.source).parse())

    def evaluate(self, lookup: Lookup) -> bool:
        """True when the condition holds; `lookup` is a mapping or a `name -> value` function."""
        get = lookup.get if isinstance(lookup, Mapping) else lookup
        assert self.expression is not None  # set in __post_init__
        return self.expression.evaluate(get)

    @property
    def variables(self) -> frozenset[str]:
        """The variable names the condition reads."""
        names: set[str] = set()
        pending: list[Expression] = [self.expression] if self.expression is not None else []
        while pending:
            node = pending.pop()
            if isinstance(node, Comparison):
                names.add(node.name)
            else:
                pending.extend(node.operands)
        return frozenset(names)

    def __str__(self) -> str:
        return self.source


def parse_condition(text: str) -> Condition:
    """Parse `text`, raising `ConditionSyntaxError` with the column of the first problem."""
    return Condition(text, _Parser(text).parse())


# --- tokens -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Token:
    kind: str  # "word", "var", "quoted", "op", "(", ")", "end"
    text: str  # the word, variable name, unquoted value or operator
    offset: int


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    position = 0
    length = len(text)
    while position < length:
        char = text[position]
        if char.isspace():
            position += 1
        elif char in "()":
            tokens.append(_Token(char, char, position))
            position += 1
        elif text.startswith(("==", "!="), position):
            tokens.append(_Token("op", text[position : position + 2], position))
            position += 2
        elif char in "'\"":
            closing = text.find(char, position + 1)
            if closing < 0:
                raise ConditionSyntaxError(
                    f"unterminated {char} string starting at column {position + 1}", position
                )
            tokens.append(_Token("quoted", text[position + 1 : closing], position))
            position = closing + 1
        elif text.startswith("${", position):
            match = _BRACED_NAME.match(text, position)
            if match is None:
                raise ConditionSyntaxError(
                    f"expected ${{NAME}} at column {position + 1}"
                    " (NAME is letters, digits and _, not starting with a digit)",
                    position,
                )
            tokens.append(_Token("var", match.group(1), position))
            position = match.end()
        else:
            end = position
            while (
                end < length
                and not text[end].isspace()
                and text[end] not in "()'\""
                and not text.startswith(("==", "!="), end)
            ):
                end += 1
            tokens.append(_Token("word", text[position:end], position))
            position = end
    tokens.append(_Token("end", "", length))
    return tokens


def _describe(token: _Token) -> str:
    if token.kind == "end":
        return "the end of the condition"
    if token.kind == "quoted":
        return f"a quoted value at column {token.offset + 1}"
    if token.kind == "var":
        return f"${{{token.text}}} at column {token.offset + 1}"
    return f"{token.text!r} at column {token.offset + 1}"


# --- parser ------------------------------------------------------------------------------


class _Parser:
    """Recursive descent over the token list; `and`/`or` chains are loops, not recursion."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._tokens = _tokenize(text)
        self._index = 0

    def parse(self) -> Expression:
        if self._peek().kind == "end":
            raise ConditionSyntaxError("empty condition: expected VAR == value", 0)
        expression = self._or_expression(depth=0)
        token = self._peek()
        if token.kind != "end":
            if token.kind == ")":
                message = f"unbalanced ')' at column {token.offset + 1}"
            else:
                message = f"expected 'and', 'or' or the end, found {_describe(token)}"
            raise ConditionSyntaxError(message, token.offset)
        return expression

    def _peek(self) -> _Token:
        return self._tokens[self._index]

    def _next(self) -> _Token:
        token = self._tokens[self._index]
        self._index += 1
        return token

    def _at_keyword(self, keyword: str) -> bool:
        token = self._peek()
        return token.kind == "word" and token.text == keyword

    def _or_expression(self, depth: int) -> Expression:
        operands = [self._and_expression(depth)]
        while self._at_keyword("or"):
            self._next()
            operands.append(self._and_expression(depth))
        return operands[0] if len(operands) == 1 else AnyOf(tuple(operands))

    def _and_expression(self, depth: int) -> Expression:
        operands = [self._operand(depth)]
        while self._at_keyword("and"):
            self._next()
            operands.append(self._operand(depth))
        return operands[0] if len(operands) == 1 else AllOf(tuple(operands))

    def _operand(self, depth: int) -> Expression:
        token = self._peek()
        if token.kind != "(":
            return self._comparison()
        if depth >= MAX_NESTING:
            raise ConditionSyntaxError(
                f"parentheses nested deeper than {MAX_NESTING} at column {token.offset + 1}",
                token.offset,
            )
        self._next()
        inner = self._or_expression(depth + 1)
        closing = self._next()
        if closing.kind != ")":
            raise ConditionSyntaxError(
                f"expected ')' to close the '(' at column {token.offset + 1},"
                f" found {_describe(closing)}",
                closing.offset,
            )
        return inner

    def _comparison(self) -> Comparison:
        name_token = self._next()
        if name_token.kind == "var" or (
            name_token.kind == "word"
            and _NAME.match(name_token.text)
            and name_token.text not in _KEYWORDS
        ):
            name = name_token.text
        else:
            raise ConditionSyntaxError(
                f"expected a variable name, found {_describe(name_token)}", name_token.offset
            )
        operator = self._next()
        if operator.kind != "op":
            column = operator.offset + 1
            where = "the end" if operator.kind == "end" else f"column {column}"
            raise ConditionSyntaxError(
                f"expected == or != after {name} at {where}", operator.offset
            )
        value = self._next()
        if value.kind == "quoted":
            return Comparison(name, operator.text == "!=", value.text)
        if value.kind == "word" and value.text not in _KEYWORDS and "${" not in value.text:
            return Comparison(name, operator.text == "!=", value.text)
        if value.kind == "word" and value.text in _KEYWORDS:
            hint = f" (quote it, '{value.text}', to compare with the word)"
        elif value.kind in ("var", "word"):
            hint = " (values are literals; only the left side names a variable)"
        else:
            hint = ""
        raise ConditionSyntaxError(
            f"expected a value after {name} {operator.text}, found {_describe(value)}{hint}",
            value.offset,
        )
