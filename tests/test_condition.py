"""`condition:` parsing and evaluation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otel_lifecycle_hooks.template.condition import Condition, ConditionSyntaxError, parse_condition


def test_equality_holds_only_for_the_same_value() -> None:
    condition = parse_condition("ACTIVITY == completed")
    assert condition.evaluate({"ACTIVITY": "completed"})
    assert not condition.evaluate({"ACTIVITY": "idle"})


def test_inequality_is_the_negation() -> None:
    condition = parse_condition("ACTIVITY != completed")
    assert not condition.evaluate({"ACTIVITY": "completed"})
    assert condition.evaluate({"ACTIVITY": "idle"})


def test_and_binds_tighter_than_or() -> None:
    condition = parse_condition("A == x or B == y and C == z")
    # Read as A == x or (B == y and C == z).
    assert condition.evaluate({"A": "x", "B": "no", "C": "no"})
    assert not condition.evaluate({"A": "no", "B": "y", "C": "no"})
    assert condition.evaluate({"A": "no", "B": "y", "C": "z"})


def test_parentheses_group_before_and() -> None:
    condition = parse_condition("(A == x or B == y) and C == z")
    assert not condition.evaluate({"A": "x", "B": "no", "C": "no"})
    assert condition.evaluate({"A": "x", "B": "no", "C": "z"})


def test_a_variable_may_be_written_braced() -> None:
    condition = parse_condition("${PHASE} == running and EXIT_CODE != 0")
    assert condition.variables == frozenset({"PHASE", "EXIT_CODE"})
    assert condition.evaluate({"PHASE": "running", "EXIT_CODE": "1"})
    assert not condition.evaluate({"PHASE": "running", "EXIT_CODE": "0"})


def test_quoted_values_keep_spaces_keywords_and_the_other_quote() -> None:
    assert parse_condition("MSG == 'hello world'").evaluate({"MSG": "hello world"})
    assert parse_condition('WORD == "and"').evaluate({"WORD": "and"})
    assert parse_condition('Q == "it\'s"').evaluate({"Q": "it's"})


def test_operators_need_no_spaces() -> None:
    condition = parse_condition("A==x and B!=y")
    assert condition.evaluate({"A": "x", "B": "z"})


def test_an_unset_variable_compares_as_the_empty_string() -> None:
    assert parse_condition("TOOL_NAME == ''").evaluate({})
    assert not parse_condition("TOOL_NAME != ''").evaluate({})
    assert not parse_condition("TOOL_NAME == bash").evaluate({})


def test_evaluate_accepts_a_lookup_function() -> None:
    seen: list[str] = []

    def lookup(name: str) -> str | None:
        seen.append(name)
        return "running" if name == "PHASE" else None

    assert parse_condition("PHASE == running").evaluate(lookup)
    assert seen == ["PHASE"]


def test_a_condition_built_from_its_source_is_parsed_and_equal_to_the_parsed_one() -> None:
    assert Condition("A == b") == parse_condition("A == b")
    assert Condition("A == b").evaluate({"A": "b"})
    with pytest.raises(ConditionSyntaxError):
        Condition("A b")


@pytest.mark.parametrize(
    ("text", "offset", "fragment"),
    [
        ("PHASE running", 6, "expected == or != after PHASE at column 7"),
        ("A = b", 2, "expected == or != after A at column 3"),
        ("A ==", 4, "expected a value after A =="),
        ("A == and", 5, "quote it"),
        ("A == ${B}", 5, "values are literals"),
        ("A == 'open", 5, "unterminated ' string starting at column 6"),
        ("(A == b", 7, "expected ')' to close the '(' at column 1"),
        ("A == b)", 6, "unbalanced ')' at column 7"),
        ("A == b c == d", 7, "expected 'and', 'or' or the end"),
        ("A == b and", 10, "expected a variable name"),
        ("1A == b", 0, "expected a variable name"),
        ("${1A} == b", 0, "expected ${NAME} at column 1"),
        ("", 0, "empty condition"),
        ("   ", 0, "empty condition"),
    ],
)
def test_syntax_errors_say_what_was_expected_and_where(
    text: str, offset: int, fragment: str
) -> None:
    with pytest.raises(ConditionSyntaxError) as caught:
        parse_condition(text)
    assert caught.value.offset == offset
    assert fragment in str(caught.value)


def test_deep_nesting_is_a_syntax_error_not_a_crash() -> None:
    text = "(" * 500 + "A == b" + ")" * 500
    with pytest.raises(ConditionSyntaxError, match="nested deeper"):
        parse_condition(text)


@given(st.text(max_size=60))
def test_arbitrary_text_parses_or_raises_a_syntax_error(text: str) -> None:
    try:
        condition = parse_condition(text)
    except ConditionSyntaxError as exc:
        assert 0 <= exc.offset <= len(text)
    else:
        condition.evaluate({})


@given(st.text(alphabet="()=!'\" aAnd_or$\t{}xy1", max_size=40))
def test_operator_soup_parses_or_raises_a_syntax_error(text: str) -> None:
    try:
        parse_condition(text)
    except ConditionSyntaxError as exc:
        assert 0 <= exc.offset <= len(text)


# --- a model: random expression trees, written out, parse back to the same truth ------------

_NAMES = ("A", "B", "C")
_VALUES = ("x", "y", "with space", "and")

Tree = tuple[str, str, str] | tuple[str, list["Tree"]]


def _trees() -> st.SearchStrategy[Tree]:
    comparison = st.tuples(
        st.sampled_from(_NAMES), st.sampled_from(["==", "!="]), st.sampled_from(_VALUES)
    )
    return st.recursive(
        comparison,
        lambda inner: st.tuples(
            st.sampled_from(["and", "or"]), st.lists(inner, min_size=2, max_size=3)
        ),
        max_leaves=8,
    )


def _write(tree: Tree) -> str:
    if len(tree) == 3:
        name, operator, value = tree
        return f"{name} {operator} '{value}'"
    joiner, operands = tree
    return "(" + f" {joiner} ".join(_write(operand) for operand in operands) + ")"


def _truth(tree: Tree, values: dict[str, str]) -> bool:
    if len(tree) == 3:
        name, operator, value = tree
        return (values.get(name, "") == value) == (operator == "==")
    joiner, operands = tree
    results = [_truth(operand, values) for operand in operands]
    return all(results) if joiner == "and" else any(results)


@given(_trees(), st.dictionaries(st.sampled_from(_NAMES), st.sampled_from(_VALUES)))
def test_written_expressions_evaluate_like_the_tree_they_came_from(
    tree: Tree, values: dict[str, str]
) -> None:
    condition = parse_condition(_write(tree))
    assert condition.evaluate(values) == _truth(tree, values)
