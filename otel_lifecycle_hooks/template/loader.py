"""Template files -> `Template`: YAML with a position on every value, then the rules, then merging.

The YAML is read from libyaml's parse events (or, when libyaml is missing or the document
needs PyYAML's own words, from PyYAML's composed node graph) rather than constructed, so that
every key and value keeps its line and column, and so that a bare `on:` key (YAML 1.1's boolean
`true`) reads as the text it was written as. Of the other keys of `scion-agent.yaml`, the ones
that matter to hooks are read (`env:`, `secrets:`, agent metadata, `limits:`, `user:`), and the
sections of other hook systems that systems/ registers here; none is refused.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

import yaml

from .checks import (
    TURN_OFF_ACTION,
    condition_problems,
    env_reference_problems,
    unmatched_turn_offs,
)
from .durations import DurationError, parse_duration
from .model import HookSpec, Position, Template
from .problems import Located, Problem, TemplateError, describe, did_you_mean
from .trust import env_expansion_problems, trust_problems
from .validate import PartialHooks, read_hooks, read_template_rate_limit

__all__ = [
    "TEMPLATE_FILE_NAME",
    "Problem",
    "TemplateError",
    "TemplateReading",
    "load_template_text",
    "load_templates",
    "merge_templates",
    "read_templates",
    "template_file",
]

TEMPLATE_FILE_NAME = "scion-agent.yaml"

# scion-agent.yaml keys that carry agent metadata, and the variable each one feeds.
_METADATA_KEYS: dict[str, str] = {
    "harness": "HARNESS_NAME",
    "image": "IMAGE",
    "default_harness_config": "HARNESS_CONFIG",
    "template": "TEMPLATE_NAME",
    "name": "TEMPLATE_NAME",  # written after `template`, so an explicit `name` wins
}
_READ_KEYS = (
    "lifecycle_hooks", "env", "secrets", "limits", "user",
    "hook_rate_limit", "share_with_agent", *_METADATA_KEYS,
)  # fmt: skip

# Reads another hook system's section of a file: (its hooks, what is wrong with it).
SectionReader = Callable[[Located, str], tuple[list[HookSpec], list[Problem]]]

# key -> (the reader of another hook system's section, read beside `lifecycle_hooks:` too),
# registered by systems/.
_OTHER_SYSTEMS: dict[str, tuple[SectionReader, bool]] = {}
_MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"
# Read before parsing: a template is a few kilobytes; 50 MB of YAML would take a minute and
# gigabytes to compose.
MAX_TEMPLATE_BYTES = 4 * 1024 * 1024
_UTF8_BOM = b"\xef\xbb\xbf"
# The tags YAML's core schema gives plain values (and `<<`). Any other tag (`!env`, `!!python/
# object`, `!!binary`) would be silently read as text: it is refused instead.
_CORE_TAGS = frozenset(
    f"tag:yaml.org,2002:{name}"
    for name in ("str", "int", "float", "bool", "null", "timestamp", "seq", "map", "merge")
)


def load_templates(paths: Sequence[str | os.PathLike[str]]) -> Template:
    """Load template files, parent first, and merge them into one `Template`.

    A path may name a template directory (its `scion-agent.yaml` is read). Raises
    `TemplateError` with every problem of every file; nothing is loaded if any file fails.
    """
    reading = read_templates(paths)
    if reading.problems or reading.template is None:
        raise TemplateError(reading.problems)
    return reading.template


# A NamedTuple, not a dataclass: made before run's spawn, 0.07 ms vs 0.5 ms (bench_startup.py)
class TemplateReading(NamedTuple):
    """What one reading of template files found: every problem, in file order then position.

    `template` is the merged template, usable only when `problems` is empty; with problems it
    holds the hooks that read cleanly, and `partial_hooks` what read cleanly of the others,
    so that warnings can still be looked for. It is None when a file could not be read at all
    (`unread`: those files and where reading stopped), in which case the checks of the merged
    template were not run either.
    """

    template: Template | None
    problems: tuple[Problem, ...]
    unread: tuple[Position, ...] = ()
    # What read cleanly of the hooks with problems (`validate.read_hook`): never run, only
    # looked at by the rules of the merged template and the warnings.
    partial_hooks: tuple[HookSpec, ...] = ()


def read_templates(paths: Sequence[str | os.PathLike[str]]) -> TemplateReading:
    """Read and check template files, parent first, collecting every problem in one pass: the
    rules of each file, then those of the merged template (conditions, turned-off hooks,
    trust) on the hooks that read cleanly. Only a file that cannot be read (invalid YAML,
    not UTF-8, missing) stops a check: the rest of that file and the merged template."""
    files = [template_file(path) for path in paths]
    templates: list[Template] = []
    problems: list[Problem] = []
    unread: list[Position] = []
    partial = PartialHooks()
    for file in files:
        template, file_problems = _read_file(file, partial)
        problems.extend(file_problems)
        if template is None:
            unread.append(min((p.position for p in file_problems), default=Position(file, 0, 0)))
        else:
            templates.append(template)
    if unread:
        return TemplateReading(None, _in_order(problems, files), tuple(unread))
    merged = merge_templates(templates)
    problems.extend(_merged_problems(merged, problems, partial=partial))
    return TemplateReading(merged, _in_order(problems, files), partial_hooks=tuple(partial))


def _merged_problems(
    merged: Template,
    found: Sequence[Problem],
    turn_offs: bool = True,
    partial: PartialHooks | None = None,
) -> list[Problem]:
    """The rules of the merged template, less what the files' own rules already said;
    `turn_offs=False` for one template read alone, whose parent may be merged later;
    `partial`: hooks with problems of their own, whose conditions and trust are checked too."""
    # A hook that failed its own rules is not in `merged`: a child turning it off is not
    # "unmatched", the author has the hook's own problem to fix.
    failed_names = {problem.hook for problem in found if problem.hook is not None}
    unmatched = unmatched_turn_offs(merged) if turn_offs else []
    candidates = [p for p in unmatched if p.hook not in failed_names]
    # On the merged template: a child's env: can change what a parent's hook refers to.
    partial = partial if partial is not None else PartialHooks()
    candidates += condition_problems(with_partial_hooks(merged, partial))
    candidates += trust_problems(with_partial_hooks(merged, partial.with_valid_actions()))
    said = {(problem.hook, problem.field, problem.message) for problem in found}
    return [p for p in candidates if (p.hook, p.field, p.message) not in said]


def with_partial_hooks(template: Template, partial: Sequence[HookSpec]) -> Template:
    """`template` with the hooks that failed their own rules beside its own, for the checks
    that look at every hook (never to run)."""
    if not partial:
        return template
    return template._replace(hooks=(*template.hooks, *partial))


def _in_order(problems: Sequence[Problem], files: Sequence[str]) -> tuple[Problem, ...]:
    """Files in the order given (parent first), each by line and column."""
    rank = {file: index for index, file in enumerate(files)}

    def key(problem: Problem) -> tuple[int, int, int]:
        position = problem.position
        return rank.get(position.file, len(files)), position.line, position.column

    return tuple(sorted(problems, key=key))


def load_template_text(text: str, filename: str = TEMPLATE_FILE_NAME) -> Template:
    """Load one template from text; `filename` is what error positions name."""
    partial = PartialHooks()
    template, problems = _parse(text, filename, partial)
    if template is not None:
        problems = problems + _merged_problems(template, problems, False, partial)
    if problems or template is None:
        raise TemplateError(_in_order(problems, [filename]))
    return template


def template_file(path: str | os.PathLike[str]) -> str:
    """The file to read for `path`: itself, or the `scion-agent.yaml` of a directory."""
    if os.path.isdir(path):
        return os.path.join(path, TEMPLATE_FILE_NAME)
    return os.fspath(path)


def merge_templates(templates: Sequence[Template]) -> Template:
    """Merge templates, parent first.

    A child's hook replaces the parent's hook of the same name where the parent had it; new
    hooks are appended in order. `env`, metadata and limits merge with the child winning;
    secrets are the union.
    """
    hooks: list[HookSpec] = []
    slot_by_name: dict[str, int] = {}
    env: dict[str, str] = {}
    metadata: dict[str, str] = {}
    limits: dict[str, str] = {}
    secrets: set[str] = set()
    shared: set[str] = set()
    files: list[str] = []
    user: str | None = None
    hook_rate_limit = None
    for template in templates:
        for hook in template.hooks:
            if hook.name in slot_by_name and hook.action is TURN_OFF_ACTION:
                # `- {name: x, enabled: false}`: the parent's hook, turned off.
                hooks[slot_by_name[hook.name]] = hooks[slot_by_name[hook.name]]._replace(
                    enabled=False
                )
            elif hook.name in slot_by_name:
                hooks[slot_by_name[hook.name]] = hook
            else:
                slot_by_name[hook.name] = len(hooks)
                hooks.append(hook)
        env.update(template.env)
        metadata.update(template.metadata)
        limits.update(template.limits)
        secrets.update(template.secrets)
        shared.update(template.share_with_agent)
        files.extend(template.files)
        user = template.user if template.user is not None else user
        hook_rate_limit = template.hook_rate_limit or hook_rate_limit
    return Template(
        hooks=tuple(hooks),
        env=MappingProxyType(env),
        secrets=frozenset(secrets),
        metadata=MappingProxyType(metadata),
        files=tuple(files),
        limits=MappingProxyType(limits),
        user=user,
        hook_rate_limit=hook_rate_limit,
        share_with_agent=frozenset(shared),
    )


def _read_file(
    file: str, partial: list[HookSpec] | None = None
) -> tuple[Template | None, list[Problem]]:
    try:
        with open(file, "rb") as handle:
            data = handle.read(MAX_TEMPLATE_BYTES + 1)  # never more: a huge file fails fast
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        return None, [Problem(Position(file, 0, 0), None, None, f"cannot read the file: {reason}")]
    if len(data) > MAX_TEMPLATE_BYTES:
        return None, [_too_large(file)]
    # A byte order mark is dropped (as the utf-8-sig codec would) and still counted in the
    # column a decoding error points at.
    bom = len(_UTF8_BOM) if data.startswith(_UTF8_BOM) else 0
    try:
        text = data[bom:].decode("utf-8")
    except UnicodeDecodeError as exc:
        start = bom + exc.start
        line = data[:start].count(b"\n") + 1
        column = start - (data.rfind(b"\n", 0, start) + 1) + 1
        message = "is not UTF-8 text; save the template as UTF-8"
        return None, [Problem(Position(file, line, column), None, None, message)]
    return _parse(text, file, partial)


def _too_large(file: str) -> Problem:
    message = (
        f"is larger than {MAX_TEMPLATE_BYTES // (1024 * 1024)} MiB; a template holds hooks, "
        "not data: move large content to files the hooks read"
    )
    return Problem(Position(file, 0, 0), None, None, message)


def _parse(
    text: str, file: str, partial: list[HookSpec] | None = None
) -> tuple[Template | None, list[Problem]]:
    if len(text) > MAX_TEMPLATE_BYTES:
        return None, [_too_large(file)]
    root, problems = _compose(text, file)
    if root is None and problems:
        return None, problems  # invalid YAML: nothing past it can be read
    # A refused tag leaves the document readable: its rules are checked too.
    template, document_problems = _read_document(root, file, partial)
    problems = sorted(problems + document_problems, key=lambda p: p.position[1:])
    return template, problems


# --- YAML -> Located ------------------------------------------------------------------


def _compose(text: str, file: str) -> tuple[Located | None, list[Problem]]:
    composed = _compose_with_libyaml(text, file)
    if composed is not None:
        return composed
    loader: yaml.SafeLoader | None = None
    try:
        loader = yaml.SafeLoader(text)  # reads ahead: may already refuse a character
        node = loader.get_single_node()
        if node is None:
            return None, []
        reader = _NodeReader(loader, file)
        return reader.read(node), reader.problems
    except yaml.MarkedYAMLError as exc:
        return None, [_yaml_problem(exc, file)]
    except yaml.reader.ReaderError as exc:
        position = _position_of_offset(text, exc.position, file)
        character = f"#x{exc.character:04x}" if isinstance(exc.character, int) else "a character"
        message = f"invalid YAML: {character} is not allowed in YAML text"
        return None, [Problem(position, None, None, message)]
    except yaml.YAMLError as exc:
        return None, [Problem(Position(file, 1, 1), None, None, f"invalid YAML: {exc}")]
    except RecursionError:
        message = "invalid YAML: nested too deeply to read"
        return None, [Problem(Position(file, 1, 1), None, None, message)]
    finally:
        if loader is not None:
            loader.dispose()


def _compose_with_libyaml(text: str, file: str) -> tuple[Located | None, list[Problem]] | None:
    """The document through libyaml's parser, about twenty times faster than PyYAML's own
    (a few milliseconds of every `run`), or None when libyaml is missing, refuses the text, the
    text holds a character PyYAML refuses, or it needs what only the node reader says (a tag
    outside the core schema, an alias the composer refuses, a second document): PyYAML then
    reads it again, so that what is refused is refused with the same words.

    Values are built from libyaml's parse events as they come (`_EventReader`), never from a
    composed node graph: a node with its two marks weighs more than the value read from it, so
    the graph of a 1,000-hook template was about 6 MB held at once, on top of the values, and
    the process kept that memory after the load. Both readers give the same values and
    positions (tests/template/test_template_memory.py compares them)."""
    if not yaml.__with_libyaml__ or yaml.reader.Reader.NON_PRINTABLE.search(text):
        return None
    loader = yaml.CSafeLoader(text)
    try:
        return _EventReader(loader, file).document(), []
    except (yaml.YAMLError, RecursionError, _LeftToTheNodeReader):
        return None
    finally:
        loader.dispose()


class _LeftToTheNodeReader(Exception):
    """The document needs what `_NodeReader` reports in its own words (a tag outside the core
    schema) or what PyYAML's composer refuses (an undefined or repeated anchor, a second
    document)."""


class _EventReader:
    """Reads one document's parse events into Located values, as `_NodeReader` reads the node
    graph PyYAML's composer would build from the same events: each alias is the value its
    anchor named, tags are resolved as the composer resolves them, and scalars are constructed
    by the loader's own constructors, one transient node at a time."""

    def __init__(self, loader: yaml.CSafeLoader, file: str) -> None:
        self._loader = loader
        self._file = file
        # anchor -> (the value it names, its resolved tag); a key's tag decides a merge.
        self._anchors: dict[str, tuple[Located, str]] = {}

    def document(self) -> Located | None:
        loader = self._loader
        loader.get_event()  # the stream's start
        if loader.check_event(yaml.StreamEndEvent):
            return None
        loader.get_event()  # the document's start
        root, _ = self._value()
        loader.get_event()  # the document's end
        if not loader.check_event(yaml.StreamEndEvent):
            raise _LeftToTheNodeReader("a second document")
        loader.get_event()
        return root

    def _value(self) -> tuple[Located, str]:
        loader = self._loader
        # Any: the stubs type every event as the base Event; the kinds are told apart below.
        event: Any = loader.get_event()
        if isinstance(event, yaml.AliasEvent):
            named = self._anchors.get(str(event.anchor))
            if named is None:
                raise _LeftToTheNodeReader("an undefined alias")
            return named
        anchor = event.anchor
        if anchor is not None and anchor in self._anchors:
            raise _LeftToTheNodeReader("an anchor defined twice")
        mark, end_mark = event.start_mark, event.end_mark
        position = Position(self._file, mark.line + 1, mark.column + 1)
        tag = event.tag
        if isinstance(event, yaml.ScalarEvent):
            if tag is None or tag == "!":
                tag = loader.resolve(yaml.ScalarNode, event.value, event.implicit)
            self._check_tag(tag)
            style = event.style or None  # libyaml's plain style is ""
            if tag == _STR_TAG:
                value: Any = event.value  # what SafeConstructor makes of a string: its text
            else:
                node = yaml.ScalarNode(tag, event.value, mark, end_mark, event.style)
                value = _construct_scalar(loader, node)
            located = Located(value, position, event.value, style)
            if anchor is not None:
                self._anchors[anchor] = (located, tag)
            return located, tag
        kind = yaml.SequenceNode if isinstance(event, yaml.SequenceStartEvent) else yaml.MappingNode
        if tag is None or tag == "!":
            tag = loader.resolve(kind, None, event.implicit)
        self._check_tag(tag)
        located = Located([] if kind is yaml.SequenceNode else {}, position)
        if anchor is not None:  # before the children: an alias among them may point back here
            self._anchors[anchor] = (located, tag)
        if kind is yaml.SequenceNode:
            while not loader.check_event(yaml.SequenceEndEvent):
                located.value.append(self._value()[0])
        else:
            self._fill_mapping(located)
        loader.get_event()  # the collection's end
        return located, tag

    @staticmethod
    def _check_tag(tag: str) -> None:
        if tag not in _CORE_TAGS:
            raise _LeftToTheNodeReader("a tag outside the core schema")

    def _fill_mapping(self, located: Located) -> None:
        """As `_NodeReader._fill_mapping`, on values instead of nodes."""
        key_styles: dict[str, str | None] = {}
        merged: list[Located] = []
        while not self._loader.check_event(yaml.MappingEndEvent):
            key, key_tag = self._value()
            value, _ = self._value()
            if key_tag == _MERGE_TAG and _is_merge_source(value):
                merged.extend(value.value if value.is_list else [value])
                continue
            text = _key_text(key)
            if _claim_key(located, text, key.position, key.style, key_styles):
                located.value[text] = value
        _merge_into(located, merged)


def _claim_key(
    located: Located,
    key: str,
    position: Position,
    style: str | None,
    key_styles: dict[str, str | None],
) -> bool:
    """Take `key` for the mapping `located`, at `position`: False, and the repeat noted as a
    duplicate, when the mapping already has it (its value is then not the mapping's)."""
    if key in located.key_positions:
        message = _duplicate_message(key, located.key_positions[key], key_styles[key], style)
        located.duplicate_keys.append((key, position, message))
        return False
    located.key_positions[key] = position
    key_styles[key] = style
    return True


def _merge_into(located: Located, merged: list[Located]) -> None:
    """`<<: *defaults`: the merged mappings' keys the mapping does not have itself (explicit
    keys win over merged ones, as in YAML's merge key)."""
    for source in merged:
        for key, value in list(source.value.items()):
            if key not in located.value:
                located.value[key] = value
                located.key_positions[key] = source.key_positions[key]


def _construct_scalar(loader: yaml.CSafeLoader, node: yaml.ScalarNode) -> Any:
    """The scalar's value by the loader's constructors. `construct_document` (not
    `construct_object`) empties the constructor's cache of nodes afterwards, so that no node
    outlives its value."""
    try:
        return loader.construct_document(node)
    except Exception:  # noqa: BLE001 - as `_NodeReader._scalar`: the text as written
        return node.value


def _is_merge_source(value: Located) -> bool:
    """As `_NodeReader._is_merge_source`: a mapping, or a list of mappings."""
    if value.is_mapping:
        return True
    return value.is_list and all(item.is_mapping for item in value.value)


def _key_text(key: Located) -> str:
    """As `_NodeReader._key_text`: a scalar key's text as written."""
    if key.is_list:
        return "[...]"
    if key.is_mapping:
        return "{...}"
    return str(key.source)


def _style(node: yaml.Node) -> str | None:
    """A node's quoting style, None when plain (or not a scalar)."""
    return getattr(node, "style", None) or None


def _yaml_problem(exc: yaml.MarkedYAMLError, file: str) -> Problem:
    mark = exc.problem_mark or exc.context_mark
    position = Position(file, mark.line + 1, mark.column + 1) if mark else Position(file, 1, 1)
    message = f"invalid YAML: {exc.problem or exc.context or 'cannot be read'}"
    if exc.context and exc.problem:
        context_mark = exc.context_mark
        where = (
            f" at line {context_mark.line + 1}, column {context_mark.column + 1}"
            if context_mark is not None and context_mark is not mark
            else ""
        )
        message += f" ({exc.context}{where})"
    return Problem(position, None, None, message)


def _position_of_offset(text: str, offset: int, file: str) -> Position:
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return Position(file, line, column)


class _NodeReader:
    """Turns a composed node graph into Located values; each node is read once (aliases)."""

    def __init__(self, loader: yaml.SafeLoader | yaml.CSafeLoader, file: str) -> None:
        self._loader = loader
        self._file = file
        self._read: dict[int, Located] = {}
        self.problems: list[Problem] = []  # tags outside the core schema

    def _position(self, node: yaml.Node) -> Position:
        return Position(self._file, node.start_mark.line + 1, node.start_mark.column + 1)

    def read(self, node: yaml.Node) -> Located:
        known = self._read.get(id(node))
        if known is not None:
            return known
        position = self._position(node)
        if node.tag not in _CORE_TAGS:
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            message = (
                f"the YAML tag {tag} is not supported (tags would be silently ignored); "
                "remove it and write the value itself"
            )
            self.problems.append(Problem(position, None, None, message))
        if isinstance(node, yaml.ScalarNode):
            located = Located(self._scalar(node), position, source=node.value, style=_style(node))
            self._read[id(node)] = located
        elif isinstance(node, yaml.SequenceNode):
            located = Located([], position)
            self._read[id(node)] = located  # before the children: an alias may point back here
            located.value.extend(self.read(child) for child in node.value)
        else:
            assert isinstance(node, yaml.MappingNode)
            located = Located({}, position)
            self._read[id(node)] = located
            self._fill_mapping(located, node)
        return located

    def _scalar(self, node: yaml.ScalarNode) -> Any:
        try:
            return self._loader.construct_object(node, deep=True)
        except Exception:  # noqa: BLE001
            # PyYAML's constructors fail in many ways on odd input (an unknown tag, an empty
            # !!int, an impossible date); the text as written is then the value.
            return node.value

    def _fill_mapping(self, located: Located, node: yaml.MappingNode) -> None:
        key_styles: dict[str, str | None] = {}
        merged: list[Located] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG and self._is_merge_source(value_node):
                merged.extend(self._merge_sources(value_node))
                continue
            key = self._key_text(key_node)
            if _claim_key(located, key, self._position(key_node), _style(key_node), key_styles):
                located.value[key] = self.read(value_node)
        _merge_into(located, merged)

    @staticmethod
    def _is_merge_source(node: yaml.Node) -> bool:
        if isinstance(node, yaml.MappingNode):
            return True
        return isinstance(node, yaml.SequenceNode) and all(
            isinstance(child, yaml.MappingNode) for child in node.value
        )

    def _merge_sources(self, node: yaml.Node) -> list[Located]:
        nodes = node.value if isinstance(node, yaml.SequenceNode) else [node]
        return [self.read(child) for child in nodes]

    @staticmethod
    def _key_text(node: yaml.Node) -> str:
        # The text as written: `on` stays "on" instead of YAML 1.1's boolean true.
        if isinstance(node, yaml.ScalarNode):
            return str(node.value)
        return "[...]" if isinstance(node, yaml.SequenceNode) else "{...}"


def _duplicate_message(
    key: str, first: Position, first_style: str | None, repeat_style: str | None
) -> str:
    if key == "on" and (first_style is None) != (repeat_style is None):
        return 'written twice, bare (on:) and quoted ("on":); keep one'
    return f"written twice (first at line {first.line}, column {first.column}); keep one"


# --- the document -----------------------------------------------------------------------


def _read_document(
    root: Located | None, file: str, partial: list[HookSpec] | None = None
) -> tuple[Template, list[Problem]]:
    if root is None or root.value is None:
        return Template(files=(file,)), []
    if not root.is_mapping:
        message = (
            f"got {describe(root)}; a template is a mapping, as in scion-agent.yaml, "
            "holding a lifecycle_hooks: list"
        )
        return Template(files=(file,)), [Problem(root.position, None, None, message)]
    fields: dict[str, Located] = root.value
    problems = [
        Problem(position, None, key, message)
        for key, position, message in root.duplicate_keys
        if key in _READ_KEYS or key in _OTHER_SYSTEMS
    ]
    problems.extend(_misspelt_section(root))
    hooks, hook_problems = read_hooks(fields.get("lifecycle_hooks"), file, partial)
    problems.extend(hook_problems)
    hooks, hook_problems = _read_other_systems(fields, file, hooks, root.key_positions)
    problems.extend(hook_problems)
    env = _read_env(fields.get("env"), problems)
    problems.extend(
        Problem(position, None, field_path, message)
        for position, field_path, message in env_reference_problems(fields.get("env"))
    )
    secrets = _read_secrets(fields.get("secrets"), problems)
    shared = _read_shared(fields.get("share_with_agent"), problems)
    metadata = {
        variable: fields[key].text()
        for key, variable in _METADATA_KEYS.items()
        if key in fields and fields[key].is_scalar and fields[key].value is not None
    }
    limits = _read_limits(fields.get("limits"), metadata.get("HARNESS_NAME", ""), problems)
    env_located = fields.get("env")
    if env and env_located is not None:
        problems.extend(
            env_expansion_problems(
                Template(env=MappingProxyType(env), files=(file,)), env_located.key_positions
            )
        )
    user_located = fields.get("user")
    user = (
        user_located.text()
        if user_located is not None and user_located.is_scalar and user_located.value is not None
        else None
    )
    hook_rate_limit, rate_problems = read_template_rate_limit(fields.get("hook_rate_limit"), file)
    problems.extend(rate_problems)
    template = Template(
        hooks=tuple(hooks),
        env=MappingProxyType(env),
        secrets=frozenset(secrets),
        metadata=MappingProxyType(metadata),
        files=(file,),
        limits=MappingProxyType(limits),
        user=user,
        hook_rate_limit=hook_rate_limit,
        share_with_agent=frozenset(shared),
    )
    return template, problems


def register_section_reader(
    key: str, reader: SectionReader, *, beside_lifecycle_hooks: bool = False
) -> None:
    """Read the top-level `key` of a template file as hooks of another hook system, with
    `reader` (systems/ registers core-agent's and the-loop's `hooks:` and the host protocol's
    `hook_scripts:`; this module knows none of them). Unless `beside_lifecycle_hooks`, the
    key is read only in a file without `lifecycle_hooks:`."""
    _OTHER_SYSTEMS[key] = (reader, beside_lifecycle_hooks)


def _read_other_systems(
    fields: dict[str, Located],
    file: str,
    hooks: list[HookSpec],
    positions: Mapping[str, Position],
) -> tuple[list[HookSpec], list[Problem]]:
    """`hooks` (those of `lifecycle_hooks:`) with the hooks of the other hook systems
    registered here that a file holds, section by section in the order the file writes them:
    hooks of one event run in declaration order, so a later section sees an earlier one's
    results. See docs/hook-systems.md."""
    problems: list[Problem] = []
    sections = [(positions.get("lifecycle_hooks"), hooks)]
    for key, (reader, beside_lifecycle_hooks) in _OTHER_SYSTEMS.items():
        if key not in fields or ("lifecycle_hooks" in fields and not beside_lifecycle_hooks):
            continue
        found, found_problems = reader(fields[key], file)
        sections.append((positions.get(key), found))
        problems += found_problems
    # Only an absent `lifecycle_hooks:` (no hooks) has no position; the sort is stable.
    sections.sort(
        key=lambda section: (section[0].line, section[0].column) if section[0] else (0, 0)
    )
    return [hook for _, found in sections for hook in found], problems


def _misspelt_section(root: Located) -> list[Problem]:
    """`lifecycle-hooks:` and the like: other keys are never refused, but a near miss of ours
    would silently load no hooks at all."""
    if "lifecycle_hooks" in root.value:
        return []
    import difflib  # only a template with a mistake pays for it (about 1 ms before the spawn)

    return [
        Problem(
            position,
            None,
            key,
            'unknown key (did you mean "lifecycle_hooks"?); hooks are read only from '
            "lifecycle_hooks:",
        )
        for key, position in root.key_positions.items()
        if difflib.SequenceMatcher(None, key.lower(), "lifecycle_hooks").ratio() >= 0.85
    ]


def _read_env(located: Located | None, problems: list[Problem]) -> dict[str, str]:
    if located is None or located.value is None:
        return {}
    if not located.is_mapping:
        message = f"got {describe(located)}; write a mapping of NAME: value"
        problems.append(Problem(located.position, None, "env", message))
        return {}
    env: dict[str, str] = {}
    for name, value in located.value.items():
        if value.is_scalar:
            env[name] = value.text()
        else:
            message = f"got {describe(value)}; an env value is a string"
            problems.append(Problem(value.position, None, f"env.{name}", message))
    return env


# The limits a template may set (supervisor/limits.py enforces them).
_LIMITS = ("max_turns", "max_model_calls", "max_duration")
# Harnesses whose hooks tell no model call: `max_model_calls` could never be reached there.
_NO_MODEL_CALLS = {"claude": "Claude Code"}


def _read_limits(located: Located | None, harness: str, problems: list[Problem]) -> dict[str, str]:
    if located is None or located.value is None:
        return {}
    if not located.is_mapping:
        message = (
            f"got {describe(located)}; write a mapping such as "
            "limits: {max_turns: 50, max_model_calls: 200, max_duration: 2h}"
        )
        problems.append(Problem(located.position, None, "limits", message))
        return {}
    limits: dict[str, str] = {}
    for name, value in located.value.items():
        problem = _limit_problem(name, value, harness)
        if problem is None:
            limits[name] = value.text()
            continue
        # An unknown key is pointed at by its name; a wrong value, by the value.
        position = located.key_positions[name] if name not in _LIMITS else value.position
        problems.append(Problem(position, None, f"limits.{name}", problem))
    return limits


def _limit_problem(name: str, value: Located, harness: str) -> str | None:
    """What is wrong with `limits.<name>: value`, or None: a typo must not load as no limit,
    and a bad value must be refused here rather than end `run` at its start."""
    if name not in _LIMITS:
        return (
            f"unknown limit{did_you_mean(name, _LIMITS)}; the limits are "
            "max_turns, max_model_calls and max_duration"
        )
    if not value.is_scalar or value.value is None:
        return f"got {describe(value)}; a limit is a number or a duration"
    if name == "max_duration":
        try:
            parse_duration(value.value)
        except DurationError as error:
            return str(error)
        return None
    number = value.value
    if isinstance(number, str) and number.strip().isdecimal():
        number = int(number)  # "50", quoted, is the same whole number
    if isinstance(number, bool) or not isinstance(number, int) or number <= 0:
        return f"got {describe(value)}; write a whole number above 0, e.g. {name}: 50"
    if name == "max_model_calls" and harness in _NO_MODEL_CALLS:
        return (
            f"{_NO_MODEL_CALLS[harness]} reports no model call to its hooks, so this limit "
            "could never be reached; use max_turns or max_duration"
        )
    return None


def _read_shared(located: Located | None, problems: list[Problem]) -> set[str]:
    """`share_with_agent:`, a list of variable names."""
    if located is None or located.value is None:
        return set()
    example = "write a list of variable names, e.g. share_with_agent: [GITHUB_TOKEN]"
    if not located.is_list:
        problems.append(
            Problem(
                located.position, None, "share_with_agent", f"got {describe(located)}; {example}"
            )
        )
        return set()
    names: set[str] = set()
    for index, item in enumerate(located.value):
        if item.is_scalar and isinstance(item.value, str) and item.value:
            names.add(item.value)
        else:
            message = f"got {describe(item)}; {example}"
            problems.append(Problem(item.position, None, f"share_with_agent[{index}]", message))
    return names


def _read_secrets(located: Located | None, problems: list[Problem]) -> set[str]:
    if located is None or located.value is None:
        return set()
    if not located.is_list:
        message = f"got {describe(located)}; write a list of secrets, each as - key: NAME"
        problems.append(Problem(located.position, None, "secrets", message))
        return set()
    names: set[str] = set()
    for index, item in enumerate(located.value):
        key = item.value.get("key") if item.is_mapping else item
        if key is not None and isinstance(key.value, str) and key.value:
            names.add(key.value)
        else:
            found = "has no key" if key is None else f"got {describe(key)}"
            message = f"{found}; each secret names its variable: - key: NAME"
            problems.append(Problem((key or item).position, None, f"secrets[{index}]", message))
    return names
