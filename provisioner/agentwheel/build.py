"""A wheel of the running provisioner, made offline and deterministically.

No build backend and no network: the wheel is the files of the packages this process imported
(``provisioner``, ``providers``, ``policies``; caches and dot-files left out) and a
``.dist-info`` with their metadata, zipped in sorted order with fixed times and modes. So a
checkout, an editable install and an installed (non-editable) copy all give a wheel, and the
same files give the same bytes: the sha256 names the wheel in the store.

The metadata comes from the checkout's ``pyproject.toml`` where the packages sit in one (the
source of truth there), else from the installed distribution (``METADATA``,
``entry_points.txt``). Neither (a copy of the packages without metadata): :class:`WheelError`,
and ``up`` asks for ``package_spec`` or ``agent_preinstalled`` as before.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import importlib.metadata
import io
import os
import re
import tempfile
import threading
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner.agentwheel import WheelError

DIST = "provisioner"
#: the top-level packages the wheel holds (pyproject.toml's ``packages.find.include``)
PACKAGES = ("provisioner", "providers", "policies")
#: a zip entry's time (the earliest a zip can say) and modes: the same files, the same bytes
ZIP_TIME = (1980, 1, 1, 0, 0, 0)
FILE_MODE = 0o644 << 16
#: where built wheels are kept between processes (``$XDG_CACHE_HOME``/provisioner/wheels)
CACHE_ENV = "PROVISIONER_WHEEL_CACHE"


@dataclass(frozen=True)
class Wheel:
    """A built wheel: its file here, its name, digest and size."""

    path: Path
    filename: str
    sha256: str
    size: int
    version: str


def package_dirs() -> list[Path]:
    """The directories of the imported top-level packages, in :data:`PACKAGES` order."""
    dirs = []
    for name in PACKAGES:
        module = importlib.import_module(name)
        where = getattr(module, "__file__", None)
        if not where:
            raise WheelError(f"the {name!r} package has no files here (a namespace package)")
        dirs.append(Path(where).resolve().parent)
    return dirs


def _pyproject(dirs: list[Path]) -> dict[str, Any] | None:
    """The checkout's ``[project]`` table, when every package sits under one pyproject.toml
    that names this project."""
    roots = {d.parent for d in dirs}
    if len(roots) != 1:
        return None
    path = next(iter(roots)) / "pyproject.toml"
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return None
    project = doc.get("project")
    if not isinstance(project, dict) or project.get("name") != DIST:
        return None
    return project


def _metadata_from_project(project: dict[str, Any]) -> tuple[str, str, str]:
    """(version, METADATA, entry_points.txt) from a ``[project]`` table."""
    version = str(project.get("version") or "")
    if not version:
        raise WheelError("pyproject.toml's [project] has no static version")
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {DIST}",
        f"Version: {version}",
    ]
    if project.get("description"):
        lines.append(f"Summary: {project['description']}")
    if project.get("requires-python"):
        lines.append(f"Requires-Python: {project['requires-python']}")
    lines += [f"Requires-Dist: {dep}" for dep in project.get("dependencies", [])]
    for extra, deps in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {dep}; extra == "{extra}"' for dep in deps]
    groups: dict[str, dict[str, str]] = {}
    if project.get("scripts"):
        groups["console_scripts"] = dict(project["scripts"])
    for group, entries in project.get("entry-points", {}).items():
        groups[group] = dict(entries)
    points = "".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in sorted(entries.items())) + "\n"
        for group, entries in sorted(groups.items())
    )
    return version, "\n".join(lines) + "\n", points


def _metadata_installed(dirs: list[Path]) -> tuple[str, str, str]:
    """(version, METADATA, entry_points.txt) of the installed distribution: the one beside
    the packages (a non-editable install), else the one Python finds by name."""
    beside = sorted(dirs[0].parent.glob(f"{DIST}-*.dist-info"))
    try:
        dist: importlib.metadata.Distribution = (
            importlib.metadata.PathDistribution(beside[0])
            if len(beside) == 1
            else importlib.metadata.distribution(DIST)
        )
    except importlib.metadata.PackageNotFoundError:
        raise WheelError(
            "the running provisioner has no package metadata (neither installed with pip nor "
            "in a checkout with its pyproject.toml), so no wheel of it can be made"
        ) from None
    meta = dist.read_text("METADATA")
    if not meta:
        raise WheelError("the installed provisioner's METADATA cannot be read")
    return str(dist.version), meta, dist.read_text("entry_points.txt") or ""


def _files(dirs: list[Path]) -> list[tuple[str, Path]]:
    """(name in the wheel, path here) of every file of the packages, sorted by name."""
    out = []
    for top in dirs:
        for folder, subdirs, names in os.walk(top):
            subdirs[:] = sorted(d for d in subdirs if d != "__pycache__" and not d.startswith("."))
            for name in names:
                if name.startswith(".") or name.endswith((".pyc", ".pyo")):
                    continue
                path = Path(folder) / name
                if path.is_file():
                    out.append((f"{top.name}/{path.relative_to(top).as_posix()}", path))
    return sorted(out)


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def wheel_bytes(dirs: list[Path] | None = None) -> tuple[str, str, bytes]:
    """(version, filename, the wheel's bytes) of the packages in ``dirs`` (the imported ones by
    default). Raises :class:`WheelError` when no wheel can be made."""
    dirs = dirs or package_dirs()
    project = _pyproject(dirs)
    version, metadata, entry_points = (
        _metadata_from_project(project) if project is not None else _metadata_installed(dirs)
    )
    if not re.fullmatch(r"[0-9A-Za-z.+!_-]+", version):
        raise WheelError(f"the version {version!r} cannot name a wheel")
    tag_version = version.replace("-", "_")
    info = f"{DIST}-{tag_version}.dist-info"
    filename = f"{DIST}-{tag_version}-py3-none-any.whl"
    entries: list[tuple[str, bytes]] = []
    try:
        for name, path in _files(dirs):
            entries.append((name, path.read_bytes()))
    except OSError as exc:
        raise WheelError(f"cannot read the running provisioner's files: {exc}") from None
    wheel_meta = "Wheel-Version: 1.0\nGenerator: provisioner\nRoot-Is-Purelib: true\n"
    entries.append((f"{info}/METADATA", metadata.encode()))
    entries.append((f"{info}/WHEEL", (wheel_meta + "Tag: py3-none-any\n").encode()))
    if entry_points:
        entries.append((f"{info}/entry_points.txt", entry_points.encode()))
    entries.append((f"{info}/top_level.txt", "".join(f"{p}\n" for p in PACKAGES).encode()))
    record = "".join(f"{n},{_record_hash(d)},{len(d)}\n" for n, d in entries)
    entries.append((f"{info}/RECORD", (record + f"{info}/RECORD,,\n").encode()))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            item = zipfile.ZipInfo(name, date_time=ZIP_TIME)
            item.external_attr = FILE_MODE
            item.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(item, data, compresslevel=6)
    return version, filename, buf.getvalue()


def cache_dir() -> Path:
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "provisioner" / "wheels"


_BUILT: dict[tuple[str, ...], Wheel] = {}
_LOCK = threading.Lock()


def running_wheel() -> Wheel:
    """The wheel of the running provisioner, made once per process and kept in
    :func:`cache_dir` under its digest. Raises :class:`WheelError`."""
    dirs = package_dirs()
    key = tuple(str(d) for d in dirs)
    with _LOCK:
        got = _BUILT.get(key)
        if got is not None and got.path.is_file():
            return got
        version, filename, data = wheel_bytes(dirs)
        sha = hashlib.sha256(data).hexdigest()
        folder = cache_dir() / sha
        path = folder / filename
        try:
            if not (path.is_file() and path.stat().st_size == len(data)):
                folder.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=folder, prefix=".wheel-")
                try:
                    with os.fdopen(fd, "wb") as out:
                        out.write(data)
                    os.replace(tmp, path)
                finally:
                    Path(tmp).unlink(missing_ok=True)
        except OSError as exc:
            raise WheelError(f"cannot keep the wheel in {folder}: {exc}") from None
        wheel = Wheel(path, filename, sha, len(data), version)
        _BUILT[key] = wheel
        return wheel
