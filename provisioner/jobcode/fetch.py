"""The agent's side of the job's code: in place, verified, before the job starts.

``<workdir>/code`` holds the code the job runs in, with a marker (``.provisioner-code``) naming
what it holds; when the marker names the wanted digest or commit (an agent restarted on the
same VM), nothing is fetched or unpacked. An archive is fetched from the checkpoint store into
the VM's cache (``<cache>/code/sha256-<hex>.tar.gz``), its sha256 checked against the digest
the spec carries (a mismatch is an error, never a run of other code), and unpacked into a new
directory that then takes the place of the old one. A cached archive is hashed again before
use, so a damaged cache is fetched anew rather than trusted.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner.jobcode import CodeError
from provisioner.jobcode.archive import sha256_file, unpack

MARKER = ".provisioner-code"


@dataclass(frozen=True)
class CodeReady:
    """The code is in ``directory``; how it got there."""

    directory: Path
    how: str  # "in place", "cached", "fetched", "cloned"
    fetched_bytes: int
    seconds: float
    identity: str  # sha256-<hex> or the commit

    def as_dict(self) -> dict[str, Any]:
        return {
            "how": self.how,
            "id": self.identity,
            "fetched_bytes": self.fetched_bytes,
            "seconds": round(self.seconds, 3),
        }


def identity(code: dict[str, Any]) -> str:
    if code.get("kind") == "archive":
        return f"sha256-{code['sha256']}"
    if code.get("kind") == "git":
        return str(code["commit"])
    raise CodeError(f"unknown code kind {code.get('kind')!r}")


def _marker(directory: Path) -> str | None:
    try:
        return str(json.loads((directory / MARKER).read_text(encoding="utf-8"))["id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _cached_archive(code: dict[str, Any], cache: Path) -> tuple[Path, int]:
    """The verified archive in the cache, fetched if it is not there; (path, bytes fetched)."""
    sha = str(code["sha256"])
    path = cache / "code" / f"sha256-{sha}.tar.gz"
    if path.exists():
        if sha256_file(path) == sha:
            return path, 0
        path.unlink()  # damaged: fetch it again
    from provisioner.objstore.fs import filesystem

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    try:
        fs, remote = filesystem(str(code["uri"]))
        fs.get_file(remote, str(tmp))
    except FileNotFoundError:
        tmp.unlink(missing_ok=True)
        raise CodeError(f"the code archive {code['uri']} is not in the store") from None
    except Exception as exc:
        tmp.unlink(missing_ok=True)
        raise CodeError(f"cannot fetch {code['uri']}: {type(exc).__name__}: {exc}") from None
    got = sha256_file(tmp)
    if got != sha:
        tmp.unlink(missing_ok=True)
        raise CodeError(
            f"{code['uri']} has sha256 {got[:12]}..., not the {sha[:12]}... packed at up: the "
            "store's copy is damaged; submit the job again"
        )
    size = tmp.stat().st_size
    os.replace(tmp, path)
    return path, size


def ensure_code(code: dict[str, Any], workdir: Path, cache: Path) -> CodeReady:
    """Put ``code`` (the spec's descriptor) in ``<workdir>/code``; raises :class:`CodeError`."""
    started = time.monotonic()
    ident = identity(code)
    dest = workdir / "code"
    if _marker(dest) == ident:
        return CodeReady(dest, "in place", 0, time.monotonic() - started, ident)
    staging = workdir / f".code-{uuid.uuid4().hex[:8]}"
    fetched = 0
    try:
        if code["kind"] == "archive":
            archive, fetched = _cached_archive(code, cache)
            unpack(archive, staging)
            how = "fetched" if fetched else "cached"
        else:
            from provisioner.jobcode.git import checkout

            checkout(str(code["url"]), str(code["commit"]), staging)
            how = "cloned"
        (staging / MARKER).write_text(json.dumps({"id": ident}) + "\n", encoding="utf-8")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return CodeReady(dest, how, fetched, time.monotonic() - started, ident)
