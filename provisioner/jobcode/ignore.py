"""Which files of a workdir are the job's code: everything but what ``.gitignore`` and
``.provisionerignore`` files exclude, and never ``.git/``.

Both files use git's pattern rules (``pathspec``'s GitIgnoreSpec), at any level of the tree: a
file's patterns apply below its own directory, and a deeper file, or a ``.provisionerignore``
beside a ``.gitignore``, decides over the ones above it (a ``!pattern`` there takes a path back
in). An excluded directory is not entered. A workdir inside a git repository also follows the
``.gitignore`` files between the repository's top and the workdir, as git would.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IGNORE_FILES = (".gitignore", ".provisionerignore")
ALWAYS_OUT = frozenset({".git"})


@dataclass(frozen=True)
class _Rules:
    base: str  # relative posix directory ("" at the top) the patterns apply below
    spec: Any  # pathspec.GitIgnoreSpec
    above: str = ""  # for a file above the workdir: the workdir's path from that file's dir


def _outer_rules(root: Path) -> list[_Rules]:
    """The ``.gitignore`` files between the enclosing git repository's top and ``root``."""
    import pathspec

    root = root.resolve()
    chain: list[Path] = []
    for parent in root.parents:
        chain.append(parent)
        if (parent / ".git").exists():
            break
    else:
        return []  # not in a repository: only the workdir's own files count
    out = []
    for parent in reversed(chain):
        try:
            lines = (parent / ".gitignore").read_text(encoding="utf-8", errors="replace")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            continue
        above = root.relative_to(parent).as_posix() + "/"
        out.append(_Rules("", pathspec.GitIgnoreSpec.from_lines(lines.splitlines()), above))
    return out


def _read_rules(directory: Path, rel: str) -> list[_Rules]:
    import pathspec

    out = []
    for name in IGNORE_FILES:
        path = directory / name
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            continue
        out.append(_Rules(rel, pathspec.GitIgnoreSpec.from_lines(lines)))
    return out


def _excluded(rules: list[_Rules], rel: str, is_dir: bool) -> bool:
    verdict: bool | None = None
    for r in rules:  # outer first: a later (deeper) verdict wins
        sub = r.above + (rel[len(r.base) + 1 :] if r.base else rel)
        result = r.spec.check_file(sub + "/" if is_dir else sub)
        if result.include is not None:
            verdict = bool(result.include)
    return bool(verdict)


def included_files(root: Path) -> Iterator[tuple[str, Path]]:
    """``(relative posix path, path)`` of every file and symlink that goes, sorted."""
    stack: list[tuple[Path, str, list[_Rules]]] = [
        (root, "", _outer_rules(root) + _read_rules(root, ""))
    ]
    found: list[tuple[str, Path]] = []
    while stack:
        directory, rel, rules = stack.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:
            from provisioner.jobcode import CodeError

            raise CodeError(f"cannot read {directory}: {exc.strerror or exc}") from None
        for entry in entries:
            if entry.name in ALWAYS_OUT:
                continue
            child = f"{rel}/{entry.name}" if rel else entry.name
            is_dir = entry.is_dir(follow_symlinks=False)
            if _excluded(rules, child, is_dir):
                continue
            if is_dir:
                path = Path(entry.path)
                stack.append((path, child, rules + _read_rules(path, child)))
            elif entry.is_file(follow_symlinks=False) or entry.is_symlink():
                found.append((child, Path(entry.path)))
    found.sort()
    yield from found
