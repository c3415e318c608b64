"""One error tree (``provisioner/errors.py``): every exception class the project defines derives
from ``ProvisionerError`` through its family, keeps the builtin base its callers catch, and the
module's docstring draws the tree as it is. The CLI takes exit codes from one table by family.

Every module of ``policies/``, ``provisioner/`` and ``providers/`` is imported in a subprocess
(so this test's process keeps its lazy imports); a module that cannot import because an
optional SDK is missing is skipped and named (``SKIPPED`` below says the ones always skipped).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner import errors
from provisioner.cli import (
    EXIT_BAD_INPUT,
    EXIT_CODES,
    EXIT_ERROR,
    EXIT_JOB_FAILED,
    EXIT_NOTHING_ELIGIBLE,
    EXIT_PROVIDER,
    exit_code_for,
    report_unhandled,
)
from tests.session_once import once

REPO = Path(__file__).resolve().parents[1]
OURS = ("policies", "provisioner", "providers")
#: module -> why it is never imported here
SKIPPED = {
    "provisioner.control.migrations.env": "alembic's env script: it runs only inside alembic's "
    "command context (alembic.context.config)",
}

#: Run in a subprocess: import every module, then describe every exception class of ours.
WALK = """
import importlib, inspect, json, sys
from pathlib import Path
OURS = {ours!r}
SKIPPED = {skipped!r}
names = []
for top in OURS:
    for path in sorted(Path(top).rglob("*.py")):
        parts = list(path.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts[-1] == "__main__":
            continue  # runs the CLI
        names.append(".".join(parts))
missing_sdk = {{}}
for name in names:
    if name in SKIPPED:
        continue
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in OURS:
            raise
        missing_sdk[name] = exc.name
from provisioner.errors import ProvisionerError

def dotted(c):
    return c.__qualname__ if c.__module__ == "builtins" else f"{{c.__module__}}.{{c.__qualname__}}"

found = {{}}
def visit(obj):
    for value in list(vars(obj).values()):
        if (
            inspect.isclass(value)
            and issubclass(value, BaseException)
            and value.__module__.split(".")[0] in OURS
            and dotted(value) not in found
        ):
            found[dotted(value)] = {{
                "module": value.__module__,
                "bases": [dotted(b) for b in value.__bases__],
                "rooted": issubclass(value, ProvisionerError),
            }}
            visit(value)
for name, module in list(sys.modules.items()):
    if name.split(".")[0] in OURS and module is not None:
        visit(module)
print(json.dumps({{"classes": found, "missing_sdk": missing_sdk}}))
"""


def _walk(where: Path) -> None:
    code = WALK.format(ours=OURS, skipped=SKIPPED)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (where / "walked.json").write_text(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def walked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The walk, once a session (every module imported in a subprocess: seconds)."""
    where = once(tmp_path_factory, "error-tree-walk", _walk)
    out: dict[str, object] = json.loads((where / "walked.json").read_text())
    missing = out["missing_sdk"]
    assert isinstance(missing, dict)
    if missing:  # said, so a run without the SDKs shows what it did not see
        print(f"skipped for a missing optional SDK: {missing}", file=sys.stderr)
    return out


def _classes(walked: dict[str, object]) -> dict[str, dict[str, object]]:
    classes = walked["classes"]
    assert isinstance(classes, dict)
    return classes


def test_every_exception_class_derives_from_the_root(walked: dict[str, object]) -> None:
    classes = _classes(walked)
    # the walk saw the tree: a class from each top package, one nested deep in a package
    assert {"policies.loader.PolicyError", "providers.base.ProviderError"} <= set(classes)
    assert "provisioner.objstore.s3errors.NoSuchBucketError" in classes
    assert len(classes) > 40
    unrooted = sorted(name for name, c in classes.items() if not c["rooted"])
    assert unrooted == [], "derive these from a family of provisioner/errors.py"


def _tree(classes: dict[str, dict[str, object]], skipped_modules: set[str]) -> list[str]:
    """The tree as the docstring draws it: families by name, ours by dotted name, children
    in order (families as defined, then the rest by name), bases outside the tree in
    brackets."""
    families = [
        f"provisioner.errors.{n}"
        for n, v in vars(errors).items()
        if isinstance(v, type) and issubclass(v, errors.ProvisionerError)
    ]
    parent: dict[str, str | None] = {}
    extra: dict[str, list[str]] = {}
    for name, c in classes.items():
        bases = c["bases"]
        assert isinstance(bases, list)
        tree_bases = [b for b in bases if b in classes]
        parent[name] = tree_bases[0] if tree_bases else None
        extra[name] = [b for b in bases if b not in tree_bases[:1]]
    extra["provisioner.errors.ProvisionerError"] = []  # the root: an Exception, drawn bare

    def label(name: str) -> str:
        shown = name.removeprefix("provisioner.errors.") if name in families else name
        return shown + (f" [{', '.join(extra[name])}]" if extra[name] else "")

    def order(name: str) -> tuple[int, int, str]:
        return (0, families.index(name), "") if name in families else (1, 0, name)

    lines: list[str] = []

    def draw(name: str, depth: int) -> None:
        lines.append("  " * depth + label(name))
        kids = [n for n, p in parent.items() if p == name]
        for kid in sorted(kids, key=order):
            draw(kid, depth + 1)

    draw("provisioner.errors.ProvisionerError", 0)
    return [
        line for line in lines if not any(line.strip().startswith(m + ".") for m in skipped_modules)
    ]


def _docstring_tree() -> list[str]:
    doc = errors.__doc__ or ""
    block = doc.split("The tree", 1)[1].split("::\n\n", 1)[1]
    lines = []
    for line in block.splitlines():
        if not line.strip():
            break
        lines.append(line.removeprefix("    "))
    return lines


def test_the_docstring_draws_the_real_tree(walked: dict[str, object]) -> None:
    missing = walked["missing_sdk"]
    assert isinstance(missing, dict)
    drawn = [
        line
        for line in _docstring_tree()
        if not any(line.strip().startswith(m + ".") for m in [*missing, *SKIPPED])
    ]
    assert drawn[0] == "ProvisionerError" and len(drawn) > 40  # the parse saw the tree
    assert drawn == _tree(_classes(walked), {*missing, *SKIPPED})


def test_the_tree_drawing_sees_a_change() -> None:
    """The comparison is not vacuous: a class moved to another family draws differently."""
    classes: dict[str, dict[str, object]] = {
        "provisioner.errors.ProvisionerError": {"bases": ["Exception"]},
        "provisioner.errors.InputError": {"bases": ["provisioner.errors.ProvisionerError"]},
        "provisioner.errors.CloudError": {"bases": ["provisioner.errors.ProvisionerError"]},
        "a.B": {"bases": ["provisioner.errors.InputError", "ValueError"]},
    }
    first = _tree(classes, set())
    assert first == ["ProvisionerError", "  InputError", "    a.B [ValueError]", "  CloudError"]
    classes["a.B"]["bases"] = ["provisioner.errors.CloudError"]
    assert _tree(classes, set()) != first


def test_builtin_bases_are_kept_for_their_callers() -> None:
    """A class callers catch as a builtin still is one, after its family."""
    from policies.loader import PolicyError
    from provisioner.control.jobpass.state import LeaseLost
    from provisioner.objstore.s3errors import NoSuchBucketError

    assert PolicyError.__mro__[1:3] == (errors.InputError, errors.ProvisionerError)
    assert issubclass(PolicyError, ValueError)
    assert issubclass(LeaseLost, RuntimeError) and issubclass(LeaseLost, errors.ControlError)
    assert issubclass(NoSuchBucketError, FileNotFoundError)
    assert issubclass(NoSuchBucketError, errors.StoreError)


def test_the_errors_module_imports_nothing_of_ours() -> None:
    """So every layer, ``policies`` at the bottom included, may import it."""
    tree = ast.parse((REPO / "provisioner" / "errors.py").read_text(encoding="utf-8"))
    imported = [
        (n.module or "") if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in (n.names if isinstance(n, ast.Import) else [n.names[0]])
    ]
    assert [m for m in imported if m.split(".")[0] in OURS] == []


def test_the_exit_table_names_real_classes() -> None:
    import importlib

    for name in EXIT_CODES:
        module, _, attr = name.rpartition(".")
        cls = getattr(importlib.import_module(module), attr)
        assert isinstance(cls, type) and issubclass(cls, errors.ProvisionerError), name


def test_each_family_gets_its_documented_exit_code() -> None:
    from policies.loader import PolicyError
    from providers.base import ErrorKind, ProviderError, ProviderUnavailable
    from provisioner.api import JobFailed
    from provisioner.core.catalog import CatalogError
    from provisioner.core.states import TransitionError
    from provisioner.preflight import NothingEligible, Refused

    assert exit_code_for(PolicyError([])) == EXIT_BAD_INPUT == 2
    assert exit_code_for(CatalogError("x.csv:3: bad")) == EXIT_BAD_INPUT
    assert exit_code_for(Refused("no such provider")) == EXIT_BAD_INPUT
    nothing = NothingEligible("nothing eligible", plan=None)  # type: ignore[arg-type]
    assert exit_code_for(nothing) == EXIT_NOTHING_ELIGIBLE == 3
    assert (
        exit_code_for(ProviderError(ErrorKind.AUTH, "AuthFailure", "denied")) == EXIT_PROVIDER == 4
    )
    assert exit_code_for(ProviderUnavailable("no SDK")) == EXIT_PROVIDER
    assert exit_code_for(JobFailed("failed")) == EXIT_JOB_FAILED == 5
    assert exit_code_for(TransitionError("a bug")) == EXIT_ERROR == 1
    assert exit_code_for(RuntimeError("anything")) == EXIT_ERROR


def test_an_escaped_input_error_is_said_plainly_with_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An input error no command caught is the user's, not unexpected: its message alone."""
    from provisioner.core.catalog import CatalogError

    code = report_unhandled(CatalogError("prices.csv:7: price is not a number"))
    err = capsys.readouterr().err
    assert code == 2
    assert "prices.csv:7: price is not a number" in err and "unexpected" not in err
    code = report_unhandled(KeyError("boom"))
    assert code == 1 and "unexpected error: KeyError" in capsys.readouterr().err


def test_families_are_the_roots_children() -> None:
    families = [
        v
        for v in vars(errors).values()
        if isinstance(v, type) and issubclass(v, errors.ProvisionerError)
    ]
    assert all(f.__bases__ == (errors.ProvisionerError,) for f in families[1:])
    assert sorted(f.__name__ for f in families) == sorted(errors.__all__)
    assert re.search(r"^\s+InputError$", errors.__doc__ or "", re.M)
