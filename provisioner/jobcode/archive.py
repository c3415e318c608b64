"""A workdir as a deterministic, content-addressed ``tar.gz``, and the safe way back.

The same files give the same bytes, so the same sha256: entries sorted, times and owners
zeroed, modes reduced to 0644/0755, gzip without a name or time. The digest names the archive
in the checkpoint store (``<checkpoint_uri>/_code/sha256-<hex>.tar.gz``), so the same code is
uploaded once, and the agent knows what it fetched is what was packed.

Packing refuses, with the fix: a workdir that is not a directory, one over its size limit
(after the ignore rules: the largest entries are named), and a symlink that leads outside it
(a VM would find nothing there). Unpacking refuses absolute paths, ``..``, links out of the
tree and device files (``tarfile``'s ``data`` filter where Python has it, the same checks by
hand where it does not).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner.jobcode import CODE_DIR, CodeError
from provisioner.jobcode.ignore import included_files

#: gzip level: 6 is gzip's own default; code compresses well and packing stays fast
GZIP_LEVEL = 6
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Packed:
    """A packed workdir: the local archive and what names it."""

    path: Path
    sha256: str
    size: int  # bytes of the archive
    files: int
    content_bytes: int  # bytes of the files packed

    @property
    def name(self) -> str:
        return f"sha256-{self.sha256}.tar.gz"


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def _largest(sizes: dict[str, int], n: int = 3) -> str:
    top: dict[str, int] = {}
    for rel, size in sizes.items():
        head = rel.split("/", 1)[0] + ("/" if "/" in rel else "")
        top[head] = top.get(head, 0) + size
    best = sorted(top.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{k} {_human(v)}" for k, v in best)


def _entries(root: Path, max_bytes: int) -> tuple[list[tuple[str, Path, os.stat_result]], int]:
    entries: list[tuple[str, Path, os.stat_result]] = []
    sizes: dict[str, int] = {}
    total = 0
    real_root = root.resolve()
    for rel, path in included_files(root):
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            target = (path.parent / os.readlink(path)).resolve()
            if target != real_root and real_root not in target.parents:
                raise CodeError(
                    f"{rel} is a link to {os.readlink(path)}, outside the workdir: a VM would "
                    "find nothing there; copy what it needs into the workdir, or add the link "
                    "to .provisionerignore"
                )
        elif not stat.S_ISREG(st.st_mode):
            continue  # sockets, FIFOs, devices: not code
        else:
            total += st.st_size
            sizes[rel] = st.st_size
        entries.append((rel, path, st))
    if total > max_bytes:
        raise CodeError(
            f"{root} holds {_human(total)} after .gitignore and .provisionerignore, over the "
            f"limit of {_human(max_bytes)} (job.workdir_max_mb); the largest: {_largest(sizes)}. "
            "Add data and outputs to .provisionerignore (read data from a bucket), or raise "
            "job.workdir_max_mb"
        )
    return entries, total


class _HashingWriter(io.RawIOBase):
    """A file that hashes what goes through it."""

    def __init__(self, out: Any) -> None:
        self.out, self.digest, self.size = out, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        b = bytes(data)
        self.digest.update(b)
        self.out.write(b)
        self.size += len(b)
        return len(b)


def pack(root: Path, *, max_bytes: int, into: Path | None = None) -> Packed:
    """Pack the files of ``root`` that go into a deterministic ``tar.gz`` (see module doc)."""
    if not root.is_dir():
        raise CodeError(f"{root} is not a directory")
    entries, total = _entries(root, max_bytes)
    fd, name = tempfile.mkstemp(prefix="workdir-", suffix=".tar.gz", dir=into)
    with os.fdopen(fd, "wb") as raw:
        hashing = _HashingWriter(raw)
        with (
            gzip.GzipFile(
                filename="", mode="wb", fileobj=hashing, compresslevel=GZIP_LEVEL, mtime=0
            ) as gz,
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
        ):
            for rel, path, st in entries:
                info = tarfile.TarInfo(rel)
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                if stat.S_ISLNK(st.st_mode):
                    info.type, info.linkname, info.mode = tarfile.SYMTYPE, os.readlink(path), 0o777
                    tar.addfile(info)
                    continue
                info.size = st.st_size
                info.mode = 0o755 if st.st_mode & stat.S_IXUSR else 0o644
                with open(path, "rb") as fh:
                    tar.addfile(info, fh)
    return Packed(Path(name), hashing.digest.hexdigest(), hashing.size, len(entries), total)


def store_uri(checkpoint_uri: str, sha256: str) -> str:
    """Where an archive of this digest lives in a checkpoint store."""
    return f"{checkpoint_uri.rstrip('/')}/{CODE_DIR}/sha256-{sha256}.tar.gz"


def upload(packed: Packed, checkpoint_uri: str) -> tuple[str, bool]:
    """Put the archive in the checkpoint store (once: one of this digest and size already
    there is kept). Returns its URI and whether it was uploaded now."""
    from provisioner.objstore.fs import filesystem

    uri = store_uri(checkpoint_uri, packed.sha256)
    fs, path = filesystem(uri)
    try:
        if fs.exists(path) and int(fs.size(path)) == packed.size:
            return uri, False
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        # one PUT on object stores; a torn local copy has the wrong size (sent again by the
        # next `up`) and the wrong digest (refused by the agent)
        fs.put_file(str(packed.path), path)
    except Exception as exc:
        raise CodeError(
            f"cannot put the code archive in {checkpoint_uri}: {type(exc).__name__}: {exc}"
        ) from None
    return uri, True


def sha256_file(path: Path, progress: Callable[[int], None] | None = None) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
            if progress:
                progress(len(chunk))
    return digest.hexdigest()


def _checked(member: tarfile.TarInfo, dest: Path) -> tarfile.TarInfo | None:
    """An entry that stays in ``dest`` (None: one to skip, a device or FIFO); CodeError for
    one that would leave it (absolute, ``..``, a link out)."""
    name = member.name
    if name.startswith("/") or ".." in Path(name).parts:
        raise CodeError(f"archive entry {name!r} leaves the directory")
    if member.isdev() or member.isfifo():
        return None
    if member.issym() or member.islnk():
        target = (dest / Path(name).parent / member.linkname).resolve()
        if member.linkname.startswith("/") or (
            target != dest.resolve() and dest.resolve() not in target.parents
        ):
            raise CodeError(f"archive link {name!r} -> {member.linkname!r} leaves the directory")
    return member


def unpack(archive: Path, dest: Path) -> int:
    """Unpack ``archive`` into the new directory ``dest``; returns the number of entries."""
    dest.mkdir(parents=True, exist_ok=False)
    with tarfile.open(archive, mode="r:gz") as tar:
        members = tar.getmembers()
        safe = [m for m in members if _checked(m, dest) is not None]  # refuse, never rewrite
        if hasattr(tarfile, "data_filter"):  # and Python's own checks where it has them
            try:
                tar.extractall(dest, members=safe, filter="data")
            except tarfile.FilterError as exc:
                raise CodeError(f"unsafe archive: {exc}") from None
        else:  # Python < 3.11.4
            tar.extractall(dest, members=safe)
    return len(members)
