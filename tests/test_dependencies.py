"""Every third-party module the project imports is a declared requirement: a core dependency,
or an optional extra's (the cloud SDKs, imported lazily). A module that arrives only through
the dev tools (pathspec came with mypy) would pass every test here and fail a new user's
`pip install -e .` at the first `up`."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OURS = {"provisioner", "providers", "policies", "examples", "tests", "benchmarks", "tools"}


def _imported(root: Path) -> dict[str, str]:
    """Top-level module name -> a file that imports it, over the installed packages."""
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], str(path.relative_to(REPO)))
    return found


def _declared() -> set[str]:
    doc = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    project = doc["project"]
    reqs = list(project["dependencies"])
    for name, extra in project.get("optional-dependencies", {}).items():
        if name != "dev":  # the test tools: what a user's install never has
            reqs.extend(extra)
    names = {re.split(r"[\s\[<>=!~;]", r.strip(), maxsplit=1)[0] for r in reqs}
    return {n.lower().replace("_", "-") for n in names}


def _norm(name: str) -> str:
    return re.split(r"[\s\[<>=!~;(]", name.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _with_their_requirements(names: set[str]) -> set[str]:
    """The declared requirements and, installed here, what they require in turn (a module
    of boto3's botocore or Jinja2's markupsafe comes with the requirement that names it)."""
    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = requires(name) or []
        except PackageNotFoundError:
            continue
        todo.extend(_norm(r) for r in reqs if "extra ==" not in r)
    return seen


def test_every_third_party_import_is_a_declared_requirement() -> None:
    dists = packages_distributions()
    declared = _with_their_requirements(_declared())
    missing = {}
    for package in ("provisioner", "providers", "policies"):
        for module, where in _imported(REPO / package).items():
            if module in OURS or module in sys.stdlib_module_names or module == "__future__":
                continue
            owners = {d.lower().replace("_", "-") for d in dists.get(module, [])}
            if not owners:  # not installed here (an SDK of another cloud's extra): its import
                continue  # is lazy and the extras test covers it
            if not owners & declared:
                missing[module] = (sorted(owners), where)
    assert missing == {}, f"imported but not a requirement (module: distribution, file): {missing}"
