"""Through libyaml a template is read from the parser's events, with no node graph held: the
values, positions, quoting styles, duplicate keys, anchors and merges come out exactly as the
node reader (PyYAML's composed nodes) gives them, what only the node reader can say is left to
it, and a large template's load holds far less memory at its peak."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml

from otel_lifecycle_hooks.template import loader
from otel_lifecycle_hooks.template.loader import load_template_text
from otel_lifecycle_hooks.template.problems import Located, TemplateError

pytestmark = pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML built without libyaml")

SPEC_TESTS = Path(__file__).parent
REPOSITORY = SPEC_TESTS.parent.parent
FILES = sorted(
    [
        *(SPEC_TESTS / "fixtures").glob("*.yaml"),
        *(SPEC_TESTS / "broken").glob("*.yaml"),
        *(REPOSITORY / "examples").rglob("*.yaml"),
        *(REPOSITORY / "benchmarks" / "templates").glob("*.yaml"),
    ]
)

ODD_BUT_VALID = {
    "empty": "",
    "only a document marker": "---\n",
    "a null document": "~\n",
    "a list at the top": "- a\n- b\n",
    "anchors, aliases and a merge": (
        "defaults: &defaults\n  timeout: 5s\n  on_error: continue\n"
        "lifecycle_hooks:\n  - <<: *defaults\n    name: a\n    on: [post-start]\n"
        "    timeout: 9s\n"
        "    action: {type: http, url: 'http://127.0.0.1:1/x'}\n"
    ),
    "a merge of a list of mappings": (
        "a: &a {x: 1, y: 2}\nb: &b {y: 3, z: 4}\nc:\n  <<: [*a, *b]\n  w: 0\n"
    ),
    "a merge of something that is no mapping stays a key": "a: &s 5\nb:\n  <<: *s\n",
    "an alias used twice is one value": "a: &x [1, 2]\nb: *x\nc: *x\n",
    "an alias inside its own anchor": "a: &self [1, *self]\n",
    "a key's anchor used as a value": "&k name: v\nother: *k\n",
    "an aliased merge key": "m: &m {q: 1}\nx:\n  ? &mk <<\n  : *m\ny:\n  *mk : *m\n",
    "keys written twice": "a: 1\nb: 2\na: 3\n'a': 4\n",
    "on bare and quoted": 'h:\n  on: [x]\n  "on": [y]\n  on: [z]\n',
    "complex keys": "? [a, b]\n: 1\n? {c: d}\n: 2\n? [e]\n: 3\n",
    "tagged core scalars": (
        "a: !!str 12\nb: !!int '7'\nc: !!float '1.5'\nd: !!bool 'yes'\ne: !!null ''\n"
        "f: !!map 'not a map'\ng: !!seq 'not a list'\nh: !!int 'x'\ni: !!timestamp '2024-13-40'\n"
        "j: !!timestamp 2024-01-02\nk: !!str\n"
    ),
    "every style of scalar": (
        "plain: text\nsingle: 'text'\ndouble: \"t\\u00e9xt\"\nliteral: |\n  one\n  two\n"
        "folded: >-\n  one\n  two\nnumbers: [1, 0x1f, 1.5e3, .inf, -.nan]\n"
        "bools: [yes, No, on, off, true]\nnulls: [~, null, ]\ndate: 2024-01-02 03:04:05\n"
    ),
    "flow collections": "a: {b: [c, {d: e}], f: []}\ng: {}\n",
}

LEFT_TO_THE_NODE_READER = {
    "a tag outside the core schema": "a: !env HOME\n",
    "a python tag": "a: !!python/object:os.system x\n",
    "a binary tag": "a: !!binary aGk=\n",
    "an undefined alias": "a: *nowhere\n",
    "an anchor defined twice": "a: &x 1\nb: &x 2\n",
    "two documents": "a: 1\n---\nb: 2\n",
}


def _through_nodes(text: str) -> Located | None:
    """What PyYAML's composed node graph reads as, through the same libyaml parser."""
    composer = yaml.CSafeLoader(text)
    try:
        node = composer.get_single_node()
        return None if node is None else loader._NodeReader(composer, "t.yaml").read(node)
    finally:
        composer.dispose()


def _through_events(text: str) -> Located | None:
    composed = loader._compose_with_libyaml(text, "t.yaml")
    assert composed is not None, "the event reader left a plain document to the node reader"
    located, problems = composed
    assert problems == []
    return located


def _shape(located: Located | None, seen: dict[int, int]) -> Any:
    """Everything a Located holds, with a shared value (an alias) written as a back-reference
    to the first place it was met, so that sharing must match too."""
    if located is None:
        return None
    if id(located) in seen:
        return ("same as", seen[id(located)])
    seen[id(located)] = len(seen)
    value = located.value
    if located.is_mapping:
        value = {key: _shape(item, seen) for key, item in value.items()}
    elif located.is_list:
        value = [_shape(item, seen) for item in value]
    else:
        value = (type(value).__name__, repr(value))
    return (
        value,
        tuple(located.position),
        located.source,
        located.style,
        list(located.key_positions.items()),
        located.duplicate_keys,
    )


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(REPOSITORY)))
def test_every_template_file_reads_from_events_as_from_nodes(path: Path) -> None:
    text = path.read_text(encoding="utf-8-sig")
    if yaml.reader.Reader.NON_PRINTABLE.search(text):
        pytest.skip("left to PyYAML's own parser, which refuses the character")
    try:
        expected = _shape(_through_nodes(text), {})
    except yaml.YAMLError:
        assert loader._compose_with_libyaml(text, "t.yaml") is None
        return
    if loader._compose_with_libyaml(text, "t.yaml") is None:
        return  # a tag outside the core schema, a refused alias: the node reader's to say
    assert _shape(_through_events(text), {}) == expected


@pytest.mark.parametrize("text", ODD_BUT_VALID.values(), ids=ODD_BUT_VALID.keys())
def test_odd_but_valid_yaml_reads_from_events_as_from_nodes(text: str) -> None:
    assert _shape(_through_events(text), {}) == _shape(_through_nodes(text), {})


def test_a_duplicate_key_and_a_merge_keep_the_node_readers_words_and_positions() -> None:
    located = _through_events(ODD_BUT_VALID["keys written twice"])
    assert located is not None
    assert [(key, tuple(where), message) for key, where, message in located.duplicate_keys] == [
        ("a", ("t.yaml", 3, 1), "written twice (first at line 1, column 1); keep one"),
        ("a", ("t.yaml", 4, 1), "written twice (first at line 1, column 1); keep one"),
    ]
    merged = _through_events(ODD_BUT_VALID["a merge of a list of mappings"])
    assert merged is not None
    c = merged.value["c"]
    assert {key: item.value for key, item in c.value.items()} == {"w": 0, "x": 1, "y": 2, "z": 4}
    assert tuple(c.key_positions["x"]) == ("t.yaml", 1, 8)  # where it was written, in a


@pytest.mark.parametrize(
    "text", LEFT_TO_THE_NODE_READER.values(), ids=LEFT_TO_THE_NODE_READER.keys()
)
def test_what_only_the_node_reader_can_say_is_left_to_it(text: str) -> None:
    assert loader._compose_with_libyaml(text, "t.yaml") is None
    with pytest.raises(TemplateError) as caught:
        load_template_text(text, "t.yaml")
    assert all(str(problem).startswith("t.yaml:") for problem in caught.value.problems)


def _many_hooks(count: int) -> str:
    lines = ["lifecycle_hooks:"]
    for index in range(count):
        lines += [
            f"  - name: h{index}",
            "    on: [tool-start]",
            "    action:",
            "      type: http",
            "      method: POST",
            f'      url: "http://127.0.0.1:{9000 + index % 4}/h{index}"',
            '      body: \'{"seq": "${TOOL_NAME}"}\'',
            "    timeout: 10s",
        ]
    return "\n".join(lines) + "\n"


def _peak_bytes(read: Any, text: str) -> int:
    tracemalloc.start()
    try:
        located = read(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert located is not None
    return peak


def test_a_thousand_hook_template_is_read_without_holding_a_node_graph() -> None:
    text = _many_hooks(1000)
    through_nodes = _peak_bytes(_through_nodes, text)
    through_events = _peak_bytes(_through_events, text)
    # The node graph (a node and two marks per value) outweighs the values read from it: the
    # node reader's peak holds both, the event reader's little more than the values.
    assert through_events < 0.6 * through_nodes, (through_events, through_nodes)
