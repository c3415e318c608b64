"""Code from a git repository: the ref pinned to a commit at ``up``, that commit on the VM.

At ``up``, :func:`pin` asks the repository (``git ls-remote``) which commit the ref names now
(a branch's head, a tag's commit, peeled), so every restart runs the same code even when the
branch moves on. A ref the repository does not have is an error naming the branches and tags it
does have. A full commit id is checked too: the repository must answer, and the commit must be
in it (a ref's head, or fetched by id with no file contents: ``git fetch --depth 1
--filter=tree:0``), so that a typo fails at ``up`` and not on every VM launched for it.

On the VM, :func:`checkout` fetches only that commit (``git fetch --depth 1 origin <commit>``,
which GitHub, GitLab and git >= 2.5 servers allow) and falls back to a full fetch where the
server refuses a fetch by id; the result is checked with ``git rev-parse HEAD``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from provisioner.jobcode import CodeError

_SHA = re.compile(r"^[0-9a-f]{40}$")
TIMEOUT_S = 120.0
#: git never asks on a terminal (a missing credential is an error, not a hang)
_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "LC_ALL": "C"}


def _git(args: list[str], cwd: Path | None = None, timeout: float = TIMEOUT_S) -> str:
    git = shutil.which("git")
    if git is None:
        raise CodeError("git is not installed here (job.git needs it)")
    try:
        done = subprocess.run(
            [git, *args],
            cwd=cwd,
            env={**os.environ, **_ENV},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise CodeError(f"git {args[0]} took over {timeout:.0f} s") from None
    if done.returncode != 0:
        raise CodeError(
            f"git {args[0]} failed: {git_says(done.stderr or done.stdout, done.returncode)}"
        )
    return done.stdout


#: the most of git's own words an error keeps
SAYS_MAX = 600


def git_says(output: str, returncode: int) -> str:
    """git's message, whole (its lines joined), never only its last line: git explains over
    several lines ("fatal: ... does not appear to be a git repository", "Please make sure you
    have the correct access rights", "and the repository exists.")."""
    lines = [x.strip() for x in output.strip().splitlines() if x.strip()]
    if not lines:
        return f"exit {returncode}"
    text = " ".join(lines)
    return text if len(text) <= SAYS_MAX else text[: SAYS_MAX - 3] + "..."


def pin(url: str, ref: str) -> str:
    """The commit ``ref`` names in the repository at ``url`` now (raises :class:`CodeError`)."""
    out = _git(["ls-remote", "--", url])  # the repository answers (and says what it has)
    if _SHA.match(ref.lower()):
        commit = ref.lower()
        if commit not in out:
            _has_commit(url, commit)
        return commit
    refs: dict[str, str] = {}
    for line in out.splitlines():
        sha, _, name = line.partition("\t")
        if sha and name:
            refs[name.strip()] = sha.strip()
    wanted = (
        [ref]
        if ref.startswith("refs/") or ref == "HEAD"
        else [f"refs/tags/{ref}", f"refs/heads/{ref}"]
    )
    for name in wanted:
        if f"{name}^{{}}" in refs:  # an annotated tag: its commit
            return refs[f"{name}^{{}}"]
        if name in refs:
            return refs[name]
    names = sorted(n.split("/", 2)[-1] for n in refs if n.startswith(("refs/heads/", "refs/tags/")))
    names = [n for n in names if not n.endswith("^{}")]
    shown = ", ".join(names[:10]) + (" ..." if len(names) > 10 else "") if names else "none"
    raise CodeError(f"ref {ref!r} is not in {url} (its branches and tags: {shown})")


def _has_commit(url: str, commit: str) -> None:
    """Raise :class:`CodeError` unless ``url`` has ``commit`` (one that no ref's head names):
    fetched by id into a scratch repository, the commit object only where the server filters
    (git >= 2.19; one that does not sends the commit's files too)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="provisioner-pin-") as scratch:
        _git(["init", "-q", "--bare", scratch])
        try:
            _git(
                ["fetch", "-q", "--depth", "1", "--filter=tree:0", "--", url, commit],
                cwd=Path(scratch),
            )
        except CodeError as exc:
            raise CodeError(
                f"commit {commit} is not in {url} (or the server refuses a fetch by commit "
                f"id; name a branch or tag instead): {exc}"
            ) from None


def checkout(url: str, commit: str, dest: Path) -> None:
    """``commit`` of ``url`` checked out in the new directory ``dest``."""
    dest.mkdir(parents=True, exist_ok=False)
    _git(["init", "-q", str(dest)])
    _git(["remote", "add", "origin", url], cwd=dest)
    try:
        _git(["fetch", "-q", "--depth", "1", "origin", commit], cwd=dest)
    except CodeError:
        _git(["fetch", "-q", "origin"], cwd=dest)  # a server that refuses a fetch by id
    _git(["-c", "advice.detachedHead=false", "checkout", "-q", commit], cwd=dest)
    head = _git(["rev-parse", "HEAD"], cwd=dest).strip()
    if head != commit:
        raise CodeError(f"checked out {head}, not the pinned {commit}")
