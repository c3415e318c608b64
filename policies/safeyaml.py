"""Bounded YAML: one document composed from the parser's events under fixed limits.

PyYAML's own composer follows every alias wherever it is used, recurses once per nesting
level, and builds numbers of any size; a few hundred hostile bytes then cost seconds and
gigabytes in whatever walks the result (the "billion laughs" shape). Here the document is
composed from the event stream (libyaml's parser where it is installed, PyYAML's otherwise)
by a loop, not by recursion, and refused as soon as it breaks a limit:

* the text is at most :data:`MAX_BYTES` (1 MB) of valid Unicode;
* one document only, nested at most :data:`MAX_DEPTH` levels;
* at most :data:`MAX_NODES` values *after* expanding aliases. Each node is composed once and
  its expanded size is remembered, so an alias costs one addition however large the node it
  names, and the check fires at the alias that crosses the budget; an alias to a node that
  contains it (a cycle) is refused;
* only the tags of plain data (``str``, ``int``, ``float``, ``bool``, ``null``, ``timestamp``,
  ``map``, ``seq``; ``<<`` merge keys are allowed), so no ``!!binary``, ``!!set`` or
  ``!!python/...``;
* mapping keys are text, each given once;
* numbers are checked before they are converted: at most :data:`MAX_NUMBER_CHARS`
  characters, finite, and at most :data:`MAX_ABS_NUMBER` in size.

What breaks a limit raises :class:`Refusal` with the line and column (1-based) and the
path of keys to the value, and a message that says what would be valid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import yaml

from provisioner.errors import InputError

MAX_BYTES = 1_000_000
MAX_DEPTH = 32
MAX_NODES = 10_000
MAX_NUMBER_CHARS = 32
MAX_ABS_NUMBER = 1e15

_TAG = "tag:yaml.org,2002:"
SCALAR_TAGS = frozenset(_TAG + t for t in ("str", "int", "float", "bool", "null", "timestamp"))
COLLECTION_TAGS = frozenset((_TAG + "map", _TAG + "seq"))
MERGE_TAG = _TAG + "merge"

Path = tuple[Any, ...]


class Refusal(InputError):
    """A document broke a limit or a rule of plain data; ``line``/``column`` are 1-based."""

    def __init__(self, line: int, column: int, path: Path, message: str) -> None:
        super().__init__(message)
        self.line, self.column, self.path, self.message = line, column, path, message


def _at(mark: Any, path: Path, message: str) -> Refusal:
    return Refusal(mark.line + 1, mark.column + 1, path, message)


def loader_class() -> type[Any]:
    """libyaml's parser (about 20 times faster) with PyYAML's safe constructor, if present."""
    return getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader


@dataclass(slots=True)
class _Frame:
    node: yaml.MappingNode | yaml.SequenceNode
    path: Path
    size: int = 1
    key: yaml.Node | None = None  # a mapping's key waiting for its value
    keys: dict[str, Any] = field(default_factory=dict)


def _short(value: str, limit: int = 40) -> str:
    text = value if value.isprintable() else repr(value)[1:-1]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _position(text: str, index: int) -> tuple[int, int]:
    before = text[:index]
    return before.count("\n") + 1, index - (before.rfind("\n") + 1) + 1


def _reader_refusal(exc: yaml.reader.ReaderError, text: str, c_parser: bool) -> Refusal:
    pos = int(exc.position)
    if c_parser:  # libyaml counts bytes of the UTF-8 encoding
        pos = len(text.encode("utf-8")[:pos].decode("utf-8", "ignore"))
    line, col = _position(text, pos)
    char = exc.character
    what = f"the character {char!r}" if isinstance(char, str) else f"the byte {char!r}"
    if isinstance(char, int):
        what = f"the character U+{char:04X}"
    return Refusal(
        line, col, (), f"{what} is not allowed in YAML; remove it or write it as an escape"
    )


def compose(text: str) -> tuple[yaml.Node | None, Any]:
    """The document's root node (with marks) and its plain Python value, or a Refusal.

    Syntax errors raise ``yaml.MarkedYAMLError`` as PyYAML's loaders do.
    """
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        line, col = _position(text, exc.start)
        raise Refusal(
            line, col, (), "the text has a lone surrogate (not Unicode); remove it"
        ) from None
    if size > MAX_BYTES:
        raise Refusal(
            1,
            1,
            (),
            f"the document is {size:,} bytes; a policy may have at most {MAX_BYTES:,}",
        )
    cls = loader_class()
    loader = cls(text)
    try:
        try:
            root = _compose_events(loader)
        except yaml.reader.ReaderError as exc:
            raise _reader_refusal(exc, text, cls is not yaml.SafeLoader) from None
        if root is None:
            return None, None
        return root, loader.construct_document(root)
    finally:
        loader.dispose()


def _compose_events(loader: Any) -> yaml.Node | None:
    loader.get_event()  # StreamStart
    if loader.check_event(yaml.StreamEndEvent):
        return None
    loader.get_event()  # DocumentStart
    anchors: dict[str, yaml.Node] = {}
    sizes: dict[int, int] = {}  # id(node) -> size after expanding aliases, once it is closed
    open_ids: set[int] = set()
    stack: list[_Frame] = []
    total = 0
    root: yaml.Node | None = None

    def child_path() -> Path:
        if not stack:
            return ()
        top = stack[-1]
        if isinstance(top.node, yaml.SequenceNode):
            return (*top.path, len(top.node.value))
        if top.key is None:  # this child is a key: report it under its parent
            return top.path
        return (*top.path, top.key.value)

    def attach(node: yaml.Node, size: int, mark: Any) -> None:
        nonlocal root
        if not stack:
            root = node
            return
        top = stack[-1]
        top.size += size
        if isinstance(top.node, yaml.SequenceNode):
            top.node.value.append(node)
        elif top.key is None:
            if not isinstance(node, yaml.ScalarNode):
                raise _at(mark, top.path, "a key must be text, not a list or a mapping")
            if node.tag != MERGE_TAG:
                if node.tag != _TAG + "str":
                    kind = node.tag.removeprefix(_TAG)
                    raise _at(
                        mark,
                        (*top.path, node.value),
                        f"key {_short(node.value)!r} reads as {kind}; keys are text (quote it)",
                    )
                if node.value in top.keys:
                    raise _at(mark, (*top.path, node.value), "is given twice; keep one")
                top.keys[node.value] = node
            top.key = node
        else:
            top.node.value.append((top.key, node))
            top.key = None

    while not loader.check_event(yaml.DocumentEndEvent):
        event: Any = loader.get_event()
        mark, what = event.start_mark, type(event)  # (issubclass: keeps `event` untyped for mypy)
        if issubclass(what, yaml.AliasEvent):
            target = anchors.get(event.anchor)
            if target is None:
                raise _at(mark, child_path(), f"alias *{_short(event.anchor)} is not defined")
            if id(target) in open_ids:
                raise _at(
                    mark,
                    child_path(),
                    f"alias *{_short(event.anchor)} is inside the node it names (a cycle)",
                )
            size = sizes[id(target)]
            total += size
            if total > MAX_NODES:
                raise _at(
                    mark,
                    child_path(),
                    f"aliases expand the policy past {MAX_NODES:,} values (an alias bomb?); "
                    "a policy needs a few hundred: write the values out or alias less",
                )
            attach(target, size, mark)
            continue
        if issubclass(what, yaml.ScalarEvent):
            total += 1
            if total > MAX_NODES:
                raise _at(mark, child_path(), f"the policy has more than {MAX_NODES:,} values")
            tag = event.tag
            if tag is None or tag == "!":
                tag = loader.resolve(yaml.ScalarNode, event.value, event.implicit)
            node: yaml.Node = yaml.ScalarNode(
                tag, event.value, event.start_mark, event.end_mark, style=event.style
            )
            is_key = bool(stack) and isinstance(stack[-1].node, yaml.MappingNode)
            is_key = is_key and stack[-1].key is None
            if not (is_key and tag == MERGE_TAG):
                _check_scalar(loader, node, child_path())  # type: ignore[arg-type]
            if event.anchor is not None:
                anchors[event.anchor] = node
                sizes[id(node)] = 1
            attach(node, 1, mark)
            continue
        if issubclass(what, yaml.SequenceStartEvent | yaml.MappingStartEvent):
            total += 1
            if total > MAX_NODES:
                raise _at(mark, child_path(), f"the policy has more than {MAX_NODES:,} values")
            if len(stack) >= MAX_DEPTH:
                raise _at(
                    mark,
                    child_path(),
                    f"the policy nests deeper than {MAX_DEPTH} levels; a policy needs about 4",
                )
            seq = issubclass(what, yaml.SequenceStartEvent)
            kind: type[yaml.SequenceNode | yaml.MappingNode] = (
                yaml.SequenceNode if seq else yaml.MappingNode
            )
            tag = event.tag
            if tag is None or tag == "!":
                tag = loader.resolve(kind, None, event.implicit)
            path = child_path()
            if tag not in COLLECTION_TAGS:
                raise _at(mark, path, f"the tag {_short(tag)!r} is not used in policies; remove it")
            coll = kind(tag, [], event.start_mark, None, flow_style=event.flow_style)
            if stack and isinstance(stack[-1].node, yaml.MappingNode) and stack[-1].key is None:
                # a collection as a key: refused by attach() right away
                attach(coll, 1, mark)
            if event.anchor is not None:
                anchors[event.anchor] = coll
            open_ids.add(id(coll))
            stack.append(_Frame(coll, path))
            continue
        if issubclass(what, yaml.SequenceEndEvent | yaml.MappingEndEvent):
            frame = stack.pop()
            frame.node.end_mark = event.end_mark
            open_ids.discard(id(frame.node))
            sizes[id(frame.node)] = frame.size
            attach(frame.node, frame.size, frame.node.start_mark)
            continue
        raise _at(mark, (), f"unexpected YAML event {type(event).__name__}")  # pragma: no cover
    loader.get_event()  # DocumentEnd
    if not loader.check_event(yaml.StreamEndEvent):
        second = loader.peek_event()
        raise _at(
            second.start_mark,
            (),
            "a policy is one YAML document; remove the second one (after '---')",
        )
    loader.get_event()
    return root


def _check_scalar(loader: Any, node: yaml.ScalarNode, path: Path) -> None:
    """Refuse what plain data does not hold; convert numbers only once their size is known."""
    tag, text, mark = node.tag, node.value, node.start_mark
    if tag not in SCALAR_TAGS:
        raise _at(mark, path, f"the tag {_short(tag)!r} is not used in policies; remove it")
    if tag in (_TAG + "int", _TAG + "float"):
        if len(text) > MAX_NUMBER_CHARS:
            raise _at(
                mark,
                path,
                f"the number {_short(text, 24)} is longer than {MAX_NUMBER_CHARS} characters; "
                f"numbers here are at most {MAX_ABS_NUMBER:g}",
            )
        try:
            value = loader.construct_object(node)
        except (ValueError, OverflowError, yaml.constructor.ConstructorError):
            raise _at(mark, path, f"{_short(text)!r} is not a number YAML can read") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise _at(
                mark,
                path,
                f"must be a finite number, got {_short(text)}; leave the key out for no limit",
            )
        if abs(value) > MAX_ABS_NUMBER:
            raise _at(mark, path, f"the number {_short(text)} is too large (at most 1e15)")
    elif tag == _TAG + "timestamp":
        try:
            loader.construct_object(node)
        except (ValueError, OverflowError, yaml.constructor.ConstructorError):
            raise _at(
                mark,
                path,
                f"{_short(text)!r} is not a valid date or time (like 2026-12-24T18:00:00Z)",
            ) from None
