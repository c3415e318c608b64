"""Load a policy from YAML with errors that say where: ``file:line:column: field message``.

The YAML is composed once into nodes (which carry their marks) and constructed from those
same nodes, so every pydantic error location maps back to the line and column of the value
(or, for an unknown key, of the key). Unknown keys get a "did you mean". Nothing here raises
anything but :class:`PolicyError` for bad input.
"""

from __future__ import annotations

import difflib
import os
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from policies.model import Policy

MAX_POLICY_BYTES = 1_000_000


@dataclass(frozen=True, slots=True)
class PolicyIssue:
    file: str
    line: int
    column: int
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        return f"{where}: {self.field} {self.message}" if self.field else f"{where}: {self.message}"


class PolicyError(ValueError):
    """A policy that cannot be used; ``issues`` lists every problem with its location."""

    def __init__(self, issues: list[PolicyIssue]) -> None:
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))


Marks = dict[tuple[Any, ...], tuple[int, int]]


def _walk(
    node: yaml.Node, path: tuple[Any, ...], values: Marks, keys: Marks, issues: list[Any]
) -> None:
    values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node)
            child = (*path, key)
            if key in seen:
                issues.append(child)
            seen.add(key)
            keys[child] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            _walk(value_node, child, values, keys, issues)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, (*path, i), values, keys, issues)


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class that holds the fields at ``loc`` (a path of keys/indices)."""
    current: Any = Policy
    for part in loc:
        current = _unwrap(current)
        if isinstance(part, int):
            args = typing.get_args(current)
            current = args[0] if args else None
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(str(part))
        if field is None:
            return None
        current = field.annotation
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(tp: Any) -> Any:
    """Strip Optional/Union-with-None and Annotated down to the model or list type."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        for a in args:
            a = _unwrap(a)
            if isinstance(a, type) and issubclass(a, BaseModel):
                return a
        return args[0] if args else tp
    return tp


def _message(err: dict[str, Any]) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    inp = err.get("input")

    def num(key: str) -> str:
        v = ctx.get(key)
        return f"{v:g}" if isinstance(v, int | float) else str(v)

    if kind == "greater_than":
        return f"must be > {num('gt')}"
    if kind == "greater_than_equal":
        return f"must be >= {num('ge')}"
    if kind == "less_than":
        return f"must be < {num('lt')}"
    if kind == "less_than_equal":
        return f"must be <= {num('le')}"
    if kind == "missing":
        return "is required"
    if kind in ("enum", "literal_error"):
        return f"must be one of {ctx.get('expected')}, got {inp!r}"
    if kind in ("float_type", "float_parsing", "int_type", "int_parsing", "int_from_float"):
        return f"must be a number, got {inp!r}"
    if kind in ("string_type",):
        return f"must be text, got {inp!r}"
    if kind in ("list_type",):
        return f"must be a list, got {type(inp).__name__}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"must be a mapping of keys, got {type(inp).__name__}"
    if kind == "bool_type" or kind == "bool_parsing":
        return f"must be true or false, got {inp!r}"
    if kind == "string_pattern_mismatch":
        return "must start with a letter or digit and use only letters, digits, '_', '.', '-'"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"])).removeprefix("Value error, ")
    msg = str(err["msg"])
    return msg[0].lower() + msg[1:] if msg else kind


def _issues_from_validation(
    exc: ValidationError, file: str, values: Marks, keys: Marks
) -> Iterator[PolicyIssue]:
    seen: set[tuple[Any, ...]] = set()
    for err in exc.errors():
        raw_loc = tuple(err["loc"])
        # pydantic adds union member tags (e.g. "datetime", "function-after[...]"): keep real keys
        loc = tuple(p for p in raw_loc if isinstance(p, int) or p in _known_keys(raw_loc, p))
        if err["type"] == "extra_forbidden":
            parent, key = loc[:-1], loc[-1] if loc else ""
            model = _model_at(parent)
            options = list(model.model_fields) if model else []
            hint = difflib.get_close_matches(str(key), options, n=1, cutoff=0.6)
            suggestion = (
                f" (did you mean '{hint[0]}'?)"
                if hint
                else (f" (known keys: {', '.join(options)})" if options else "")
            )
            line, col = keys.get(loc) or _nearest(loc, values)
            yield PolicyIssue(file, line, col, "", f"unknown key '{_dotted(loc)}'{suggestion}")
            continue
        if err["type"] == "missing":
            line, col = _nearest(loc[:-1], values)
        else:
            line, col = values.get(loc) or _nearest(loc, values)
        sig = (loc, err["type"])
        if sig in seen:
            continue
        seen.add(sig)
        yield PolicyIssue(file, line, col, _dotted(loc), _message(dict(err)))


def _known_keys(loc: tuple[Any, ...], part: Any) -> set[Any]:
    # A location element is a real key when it is a plain identifier-like field name or a YAML
    # key; pydantic's union tags contain brackets or are type names of the union members.
    if not isinstance(part, str):
        return set()
    if "[" in part or part in {"datetime", "timedelta", "str", "int", "float", "list[str]"}:
        return set()
    return {part}


def _nearest(loc: tuple[Any, ...], values: Marks) -> tuple[int, int]:
    for n in range(len(loc), -1, -1):
        if loc[:n] in values:
            return values[loc[:n]]
    return (1, 1)


def parse_policy(text: str, file: str = "<policy>") -> Policy:
    """Parse and validate policy YAML text; raise :class:`PolicyError` naming each location."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_POLICY_BYTES:
        raise PolicyError([PolicyIssue(file, 1, 1, "", "policy file is larger than 1 MB")])
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = exc.problem or "invalid YAML"
        if exc.context:
            problem = f"{exc.context}: {problem}"
        raise PolicyError(
            [PolicyIssue(file, line, col, "", f"YAML syntax error: {problem}")]
        ) from None
    except (yaml.YAMLError, ValueError, RecursionError, UnicodeError) as exc:
        raise PolicyError([PolicyIssue(file, 1, 1, "", f"cannot read YAML: {exc}")]) from None
    if node is None or data is None:
        raise PolicyError(
            [PolicyIssue(file, 1, 1, "", "the policy is empty; see policies/*.yaml for examples")]
        )
    if not isinstance(data, dict):
        line, col = node.start_mark.line + 1, node.start_mark.column + 1
        raise PolicyError(
            [
                PolicyIssue(
                    file,
                    line,
                    col,
                    "",
                    f"a policy must be a mapping of keys, got {type(data).__name__}",
                )
            ]
        )
    values: Marks = {}
    keys: Marks = {}
    dups: list[Any] = []
    try:
        _walk(node, (), values, keys, dups)
    except RecursionError:
        raise PolicyError([PolicyIssue(file, 1, 1, "", "the policy nests too deeply")]) from None
    if dups:
        issues = [PolicyIssue(file, *keys[d], _dotted(d), "is given twice; keep one") for d in dups]
        raise PolicyError(issues)
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        issues = list(_issues_from_validation(exc, file, values, keys))
        raise PolicyError(issues or [PolicyIssue(file, 1, 1, "", str(exc))]) from None
    except RecursionError:
        raise PolicyError([PolicyIssue(file, 1, 1, "", "the policy nests too deeply")]) from None


def load_policy(path: str | os.PathLike[str]) -> Policy:
    """Read and validate a policy file."""
    p = Path(path)
    name = str(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise PolicyError([PolicyIssue(name, 0, 0, "", "no such file")]) from None
    except IsADirectoryError:
        raise PolicyError(
            [PolicyIssue(name, 0, 0, "", "is a directory, not a policy file")]
        ) from None
    except OSError as exc:
        raise PolicyError([PolicyIssue(name, 0, 0, "", f"cannot read: {exc.strerror}")]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise PolicyError([PolicyIssue(name, line, 1, "", "is not UTF-8 text")]) from None
    return parse_policy(text, name)


def policy_schema() -> dict[str, Any]:
    """JSON Schema of the policy, for editors (yaml-language-server)."""
    schema = Policy.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "provisioner policy"
    return schema
