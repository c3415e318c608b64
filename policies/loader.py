"""Load a policy from YAML with errors that say where: ``file:line:column: field message``.

The YAML is composed once into nodes (which carry their marks) by the bounded composer in
:mod:`policies.safeyaml` and constructed from those same nodes, so every pydantic error
location maps back to the line and column of the value (or, for an unknown key, of the key).
Unknown keys get a "did you mean". Nothing here raises anything but :class:`PolicyError` for
bad input, and no input takes more than a fraction of a second or a few MB to answer.
"""

from __future__ import annotations

import difflib
import os
import stat
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from policies.model import Policy
from policies.safeyaml import MAX_BYTES, Refusal, compose
from provisioner.errors import InputError

M = TypeVar("M", bound=BaseModel)

MAX_POLICY_BYTES = MAX_BYTES


@dataclass(frozen=True, slots=True)
class PolicyIssue:
    """One problem: where (``line``/``column`` are 1-based; ``None`` for the file as a whole,
    e.g. a missing file), which field (dotted path, may be empty) and what is wrong."""

    file: str
    line: int | None
    column: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}:{self.column or 1}"
        return f"{where}: {self.field} {self.message}" if self.field else f"{where}: {self.message}"


class PolicyError(InputError, ValueError):
    """A policy that cannot be used; ``issues`` lists every problem with its location."""

    def __init__(self, issues: list[PolicyIssue]) -> None:
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))


Marks = dict[tuple[Any, ...], tuple[int, int]]


def _walk(root: yaml.Node, values: Marks, keys: Marks) -> None:
    """Record where each value (and each key) is, by its path of keys and indices. The
    document was bounded by :mod:`policies.safeyaml` (nodes after aliases, depth), so this
    walk is too; it is a loop, not a recursion."""
    todo: list[tuple[yaml.Node, tuple[Any, ...]]] = [(root, ())]
    while todo:
        node, path = todo.pop()
        values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if isinstance(node, yaml.MappingNode):
            # pushed last-first, so a later pair (an explicit key after a `<<` merge) wins
            for key_node, value_node in reversed(node.value):
                child = (*path, key_node.value)
                keys.setdefault(
                    child, (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                )
                todo.append((value_node, child))
        elif isinstance(node, yaml.SequenceNode):
            todo.extend((item, (*path, i)) for i, item in reversed(list(enumerate(node.value))))


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = str(part)
            # a key that is empty or has spaces is quoted, so the field reads as one word
            shown = _short(text) if text and not any(c.isspace() for c in text) else repr(text)
            out += ("." if out else "") + shown
    return out


def _quoted(dotted: str) -> str:
    return dotted if dotted.startswith("'") else f"'{dotted}'"


def _short(text: str, limit: int = 40) -> str:
    """User text fit for a one-line message: control characters escaped, long text cut."""
    shown = text if text.isprintable() else repr(text)[1:-1]
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def _got(value: Any) -> str:
    """``repr`` of an offending value, cut to a readable length."""
    if isinstance(value, dict | list | tuple | set):
        return f"a {'mapping' if isinstance(value, dict) else 'list'} of {len(value)}"
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _model_at(loc: tuple[Any, ...], root: type[BaseModel] = Policy) -> type[BaseModel] | None:
    """The pydantic model class that holds the fields at ``loc`` (a path of keys/indices)."""
    current: Any = root
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
        return f"must be one of {ctx.get('expected')}, got {_got(inp)}"
    if kind == "finite_number":
        return f"must be a finite number, got {_got(inp)}; leave the key out for no limit"
    if kind in ("float_type", "float_parsing", "int_type", "int_parsing", "int_from_float"):
        return f"must be a number, got {_got(inp)}"
    if kind in ("int_parsing_size",):
        return f"is too large a number, got {_got(inp)}"
    if kind in ("string_type",):
        return f"must be text, got {_got(inp)}"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters long"
    if kind == "string_too_short":
        return f"must be at least {ctx.get('min_length')} character(s) long"
    if kind in ("list_type",):
        return f"must be a list, got {type(inp).__name__}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"must be a mapping of keys, got {type(inp).__name__}"
    if kind == "bool_type" or kind == "bool_parsing":
        return f"must be true or false, got {_got(inp)}"
    if kind == "string_pattern_mismatch":
        return "must start with a letter or digit and use only letters, digits, '_', '.', '-'"
    if kind == "value_error":
        return _short(str(ctx.get("error", err["msg"])).removeprefix("Value error, "), 300)
    msg = str(err["msg"])
    return _short(msg[0].lower() + msg[1:], 200) if msg else kind


def _issues_from_validation(
    exc: ValidationError, file: str, values: Marks, keys: Marks, root: type[BaseModel] = Policy
) -> Iterator[PolicyIssue]:
    seen: set[tuple[Any, ...]] = set()
    for err in exc.errors():
        loc = _real_loc(tuple(err["loc"]), values, keys)
        if err["type"] == "extra_forbidden":
            parent, key = loc[:-1], loc[-1] if loc else ""
            model = _model_at(parent, root)
            options = list(model.model_fields) if model else []
            hint = (
                difflib.get_close_matches(str(key), options, n=1, cutoff=0.6)
                if len(str(key)) <= 64
                else []
            )
            suggestion = (
                f" (did you mean '{hint[0]}'?)"
                if hint
                else (f" (known keys: {', '.join(options)})" if options else "")
            )
            line, col = keys.get(loc) or _nearest(loc, values)
            yield PolicyIssue(
                file, line, col, "", f"unknown key {_quoted(_dotted(loc))}{suggestion}"
            )
            continue
        if err["type"] == "missing":
            line, col = _nearest(loc[:-1], values)
        elif err["loc"] and err["loc"][-1] == "[key]":  # a mapping's key is wrong: point at it
            line, col = keys.get(loc) or _nearest(loc, values)
        else:
            line, col = values.get(loc) or _nearest(loc, values)
        sig = (loc, err["type"])
        if sig in seen:
            continue
        seen.add(sig)
        yield PolicyIssue(file, line, col, _dotted(loc), _message(dict(err)))


_UNION_TAGS = frozenset({"datetime", "timedelta", "str", "int", "float", "list[str]"})


def _real_loc(loc: tuple[Any, ...], values: Marks, keys: Marks) -> tuple[Any, ...]:
    """pydantic's error location without the tags it adds for union members (e.g.
    ``datetime``, ``function-after[...]``): a part is kept when the document has that key
    there, or when it does not look like such a tag (a missing field's name)."""
    real: tuple[Any, ...] = ()
    for part in loc:
        here = (*real, part)
        in_doc = isinstance(part, int) or here in values or here in keys
        if in_doc or (isinstance(part, str) and "[" not in part and part not in _UNION_TAGS):
            real = here
    return real


def _nearest(loc: tuple[Any, ...], values: Marks) -> tuple[int, int]:
    for n in range(len(loc), -1, -1):
        if loc[:n] in values:
            return values[loc[:n]]
    return (1, 1)


def parse_policy(text: str, file: str = "<policy>") -> Policy:
    """Parse and validate policy YAML text; raise :class:`PolicyError` naming each location.

    Bounded whatever the text: see :mod:`policies.safeyaml` for the limits (1 MB, 10,000
    values after aliases, 32 levels, plain-data tags, finite numbers of sane size).
    """
    return parse_document(text, file, Policy, what="policy", example="policies/*.yaml")


def parse_document(text: str, file: str, model: type[M], *, what: str, example: str) -> M:
    """YAML text validated as ``model`` (a policy, a workload profile), every problem a
    :class:`PolicyIssue` at its ``file:line:column``; ``what`` and ``example`` name the kind of
    document and where to find one in the messages."""
    try:
        node, data = compose(text)
    except Refusal as exc:
        raise PolicyError(
            [PolicyIssue(file, exc.line, exc.column, _dotted(exc.path), exc.message)]
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = exc.problem or "invalid YAML"
        if exc.context:
            problem = f"{exc.context}: {problem}"
        raise PolicyError(
            [PolicyIssue(file, line, col, "", f"YAML syntax error: {problem}")]
        ) from None
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        # not expected past safeyaml's checks; still an answer, never a traceback
        raise PolicyError([PolicyIssue(file, 1, 1, "", f"cannot read YAML: {exc}")]) from None
    if node is None or data is None:
        raise PolicyError(
            [PolicyIssue(file, 1, 1, "", f"the {what} is empty; see {example} for examples")]
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
                    f"a {what} must be a mapping of keys, got {type(data).__name__}",
                )
            ]
        )
    values: Marks = {}
    keys: Marks = {}
    _walk(node, values, keys)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        issues = list(_issues_from_validation(exc, file, values, keys, model))
        raise PolicyError(issues or [PolicyIssue(file, 1, 1, "", str(exc))]) from None
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # a validator that raised something pydantic does not wrap: still located at the top
        raise PolicyError([PolicyIssue(file, 1, 1, "", f"cannot use this {what}: {exc}")]) from None


def issue_at(text: str | None, file: str, loc: tuple[Any, ...], message: str) -> PolicyIssue:
    """A problem found after validation (a workdir too large, a git ref that is not there, a
    secret that cannot be read) at the line and column of ``loc`` in the policy's text (the
    nearest enclosing key there; the file as a whole when there is no text)."""
    line: int | None = None
    col: int | None = None
    if text is not None:
        try:
            node, _ = compose(text)
        except (Refusal, yaml.YAMLError, ValueError, TypeError, RecursionError):
            node = None
        if node is not None:
            values: Marks = {}
            _walk(node, values, {})
            line, col = values.get(loc) or _nearest(loc, values)
    return PolicyIssue(file, line, col, _dotted(loc), message)


def load_policy(path: str | os.PathLike[str]) -> Policy:
    """Read and validate a policy file (a regular file of at most 1 MB of UTF-8)."""
    return parse_policy(read_document(path, what="policy", example="policies/*.yaml"), str(path))


def read_document(path: str | os.PathLike[str], *, what: str, example: str) -> str:
    """The text of a small YAML document file: a regular file (a FIFO or a device could block
    or never end) of at most ``MAX_POLICY_BYTES`` of UTF-8; else :class:`PolicyError`."""
    name = str(path)

    def whole_file(message: str) -> PolicyError:
        return PolicyError([PolicyIssue(name, None, None, "", message)])

    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise whole_file(f"is a directory, not a {what} file")
            if not stat.S_ISREG(st.st_mode):
                raise whole_file(f"is not a regular file; give the path of a {what} YAML file")
            os.set_blocking(fd, True)
            raw = f.read(MAX_POLICY_BYTES + 1)
    except FileNotFoundError:
        raise whole_file(f"no such file (see {example} for examples)") from None
    except IsADirectoryError:
        raise whole_file(f"is a directory, not a {what} file") from None
    except PermissionError:
        raise whole_file("cannot be read: permission denied") from None
    except OSError as exc:
        raise whole_file(f"cannot be read: {exc.strerror or exc}") from None
    if len(raw) > MAX_POLICY_BYTES:
        raise PolicyError(
            [
                PolicyIssue(
                    name, 1, 1, "", f"is larger than {MAX_POLICY_BYTES:,} bytes; a {what} is small"
                )
            ]
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line = before.count(b"\n") + 1
        col = len(before[before.rfind(b"\n") + 1 :].decode("utf-8", "replace")) + 1
        raise PolicyError(
            [PolicyIssue(name, line, col, "", "is not UTF-8 text; save the file as UTF-8")]
        ) from None


def policy_schema() -> dict[str, Any]:
    """JSON Schema of the policy, for editors (yaml-language-server)."""
    schema = Policy.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "provisioner policy"
    return schema
