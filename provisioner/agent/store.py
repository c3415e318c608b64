"""The checkpoint store: one directory per job under an fsspec URI (file://, s3://, gs://, az://).

Layout under ``<uri>/<job_id>/`` (the controller reads the same paths)::

    latest                      name of the newest complete checkpoint ("ckpt-000120")
    checkpoints/<name>/...      the checkpoint files, as the job wrote them
    output/...                  the job's output (result.json ...), uploaded when it exits 0
    progress.json               the agent's progress record (see provisioner.agent.progress)

A checkpoint is complete once ``latest`` names it: files are uploaded first, the marker last,
so a preemption in the middle of an upload leaves the previous checkpoint in force. ``latest``
never goes backwards: an agent that finds a newer checkpoint named there (another attempt ran
ahead) leaves it alone. Small files (``latest``, ``progress.json``) are written atomically on
a local filesystem (temporary file, then rename) and with one PUT on object stores, which is
atomic there.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import uuid
from pathlib import Path
from typing import Any

log = logging.getLogger("provisioner.agent.store")

_STEP = re.compile(r"(\d+)$")


def step_of(name: str | None) -> int | None:
    """The step a checkpoint name ends with (``ckpt-000120`` -> 120), or None."""
    if not name:
        return None
    m = _STEP.search(name.strip())
    return int(m.group(1)) if m else None


class CheckpointStore:
    """One job's directory in the checkpoint store."""

    def __init__(self, uri: str, job_id: str) -> None:
        from provisioner.objstore.fs import filesystem

        self.uri = uri.rstrip("/")
        self.job_id = job_id
        fs, root = filesystem(self.uri)
        self.fs = fs
        self.root = root.rstrip("/") + "/" + job_id
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        self.local = protocol in ("file", "local")

    def path(self, *parts: str) -> str:
        return "/".join((self.root, *parts))

    # -- small files ------------------------------------------------------------------------

    def write_text(self, rel: str, text: str) -> None:
        """Write ``<root>/<rel>`` atomically where the filesystem allows it."""
        _write_atomic(self.fs, self.local, self.path(rel), text.encode("utf-8"))

    def read_text(self, rel: str) -> str | None:
        try:
            data = self.fs.cat_file(self.path(rel))
        except (FileNotFoundError, OSError):
            return None
        return bytes(data).decode("utf-8")

    def read_json(self, rel: str) -> dict[str, Any] | None:
        text = self.read_text(rel)
        if text is None:
            return None
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            return None
        return doc if isinstance(doc, dict) else None

    # -- checkpoints --------------------------------------------------------------------------

    def latest(self) -> str | None:
        """Name of the newest complete checkpoint, or None when there is none yet."""
        text = self.read_text("latest")
        name = (text or "").strip()
        return name or None

    def download(self, name: str, local_parent: Path) -> Path:
        """Copy checkpoint ``name`` to ``local_parent/<name>``; returns that directory."""
        target = local_parent / name
        target.mkdir(parents=True, exist_ok=True)
        src = self.path("checkpoints", name)
        for remote in self.fs.find(src):
            rel = remote[len(src) :].lstrip("/")
            dest = target / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            self.fs.get_file(remote, str(dest))
        return target

    def upload(self, local_dir: Path, name: str, *, keep: int = 3) -> bool:
        """Upload a checkpoint directory, then point ``latest`` at it (never backwards).

        Returns False when ``latest`` already names a newer checkpoint (it is left alone).
        """
        self.put_dir(local_dir, self.path("checkpoints", name))
        current = self.latest()
        new_step, cur_step = step_of(name), step_of(current)
        if new_step is not None and cur_step is not None and cur_step > new_step:
            log.info("store has newer checkpoint %s than %s; latest left alone", current, name)
            return False
        self.write_text("latest", name + "\n")
        if keep > 0:
            self.prune(keep)
        return True

    def put_dir(self, local_dir: Path, remote_dir: str) -> None:
        for path in sorted(local_dir.rglob("*")):
            if path.is_file():
                rel = path.relative_to(local_dir).as_posix()
                dest = remote_dir + "/" + rel
                if self.local:
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                self.fs.put_file(str(path), dest)

    def checkpoints(self) -> list[str]:
        """Checkpoint names present in the store, oldest step first."""
        try:
            entries = self.fs.ls(self.path("checkpoints"), detail=False)
        except (FileNotFoundError, OSError):
            return []
        names = [str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries]
        return sorted(names, key=lambda n: (step_of(n) or -1, n))

    def prune(self, keep: int) -> None:
        """Remove all but the ``keep`` newest checkpoints (never the one ``latest`` names)."""
        current = self.latest()
        names = self.checkpoints()
        for name in names[: max(0, len(names) - keep)]:
            if name == current:
                continue
            with contextlib.suppress(FileNotFoundError, OSError):
                self.fs.rm(self.path("checkpoints", name), recursive=True)

    # -- output and progress ----------------------------------------------------------------

    def upload_output(self, local_dir: Path) -> None:
        if local_dir.is_dir():
            self.put_dir(local_dir, self.path("output"))

    def write_progress(self, doc: dict[str, Any], rel: str = "progress.json") -> None:
        self.write_text(rel, json.dumps(doc, indent=2, sort_keys=True))


def _write_atomic(fs: Any, local: bool, target: str, data: bytes) -> None:
    if local:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = f"{target}.tmp-{uuid.uuid4().hex[:8]}"
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    else:
        fs.pipe_file(target, data)


def write_text_uri(uri: str, text: str) -> None:
    """Write ``text`` to an fsspec URI, atomically on a local filesystem."""
    from provisioner.objstore.fs import filesystem

    fs, path = filesystem(uri)
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    _write_atomic(fs, protocol in ("file", "local"), path, text.encode("utf-8"))


def read_progress(checkpoint_uri: str, job_id: str) -> dict[str, Any] | None:
    """The agent's progress record for ``job_id`` (None while there is none): for the controller."""
    return CheckpointStore(checkpoint_uri, job_id).read_json("progress.json")


def latest_checkpoint(checkpoint_uri: str, job_id: str) -> str | None:
    """The name of the newest complete checkpoint of ``job_id`` in the store, or None."""
    return CheckpointStore(checkpoint_uri, job_id).latest()
