"""The job's side of the agent protocol: environment in, checkpoints and progress out.

The agent starts the job with these variables set:

- ``PROVISIONER_JOB_ID``, ``PROVISIONER_ATTEMPT``
- ``PROVISIONER_CHECKPOINT_DIR``: a local directory where the job writes checkpoints
- ``PROVISIONER_RESUME_FROM``: the local directory of the checkpoint to resume from, or empty
- ``PROVISIONER_CHECKPOINT_SIGNAL``: the signal that asks for a checkpoint now (``SIGUSR1``)
- ``PROVISIONER_OUTPUT_DIR``: where the job puts its result (uploaded when it exits 0)
- ``PROVISIONER_PROGRESS_FILE``: a JSON file the job may keep up to date (``{"step": 120,
  "total_steps": 400}``; any other keys are passed through to the progress record;
  ``checkpoint_warning`` is recorded by the controller as a ``checkpoint-warning`` event)
- ``PROVISIONER_NOTICE_FILE``: where the agent writes the interruption notice (``{"seen_at",
  "deadline", "cloud", "reason"}``, ISO UTC) before it signals the job; absent until a notice

A checkpoint is written in two moves: the files go into ``$PROVISIONER_CHECKPOINT_DIR/<name>/``
(``<name>`` ends with the step number, ``ckpt-000120``), then the name is written atomically
(temporary file + rename) to ``$PROVISIONER_CHECKPOINT_DIR/latest``. The agent watches
``latest``, and uploads a checkpoint only once it is named there. On the signal the job
finishes its current step, writes a checkpoint and carries on.

The agent's own progress record (``progress.json`` in the checkpoint store) is typed here too
(:class:`ProgressRecord`, with the notice it saw: :class:`AgentNotice`): the agent writes it,
the controller parses it once per read and turns a notice in it into an interruption of that
attempt, whatever the cloud's API reports.

This module is what the agent uses; a Python job imports :mod:`provisioner.job` (the standard
library only), and a job in any other language does the same with files and a rename.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ENV_JOB_ID = "PROVISIONER_JOB_ID"
ENV_ATTEMPT = "PROVISIONER_ATTEMPT"
ENV_CHECKPOINT_DIR = "PROVISIONER_CHECKPOINT_DIR"
ENV_RESUME_FROM = "PROVISIONER_RESUME_FROM"
ENV_SIGNAL = "PROVISIONER_CHECKPOINT_SIGNAL"
ENV_OUTPUT_DIR = "PROVISIONER_OUTPUT_DIR"
ENV_PROGRESS_FILE = "PROVISIONER_PROGRESS_FILE"
ENV_NOTICE_FILE = "PROVISIONER_NOTICE_FILE"
LATEST = "latest"
NOTICE_FILE = "notice.json"


def checkpoint_name(step: int) -> str:
    return f"ckpt-{step:09d}"


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``path`` so that a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def commit_checkpoint(checkpoint_dir: Path, name: str) -> None:
    """Mark ``checkpoint_dir/name`` complete: the agent may now upload it."""
    atomic_write(checkpoint_dir / LATEST, (name + "\n").encode())


def read_latest(checkpoint_dir: Path) -> str | None:
    try:
        name = (checkpoint_dir / LATEST).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return name if name and (checkpoint_dir / name).is_dir() else None


def write_checkpoint(
    checkpoint_dir: Path, step: int, files: dict[str, bytes], *, keep: int = 3
) -> str:
    """Write ``files`` as the checkpoint of ``step``, commit it, keep the ``keep`` newest."""
    name = checkpoint_name(step)
    final = checkpoint_dir / name
    staging = checkpoint_dir / f".{name}.partial-{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    for rel, data in files.items():
        target = staging / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    if final.exists():
        shutil.rmtree(final)
    os.replace(staging, final)
    commit_checkpoint(checkpoint_dir, name)
    for partial in checkpoint_dir.glob(".ckpt-*.partial-*"):  # left by a kill mid-write
        shutil.rmtree(partial, ignore_errors=True)
    if keep > 0:
        old = sorted(p.name for p in checkpoint_dir.glob("ckpt-*") if p.is_dir())
        for stale in old[:-keep]:
            shutil.rmtree(checkpoint_dir / stale, ignore_errors=True)
    return name


def checkpoint_signal() -> int:
    name = os.environ.get(ENV_SIGNAL, "SIGUSR1").upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    return int(getattr(signal, name, signal.SIGUSR1))


def write_notice(
    path: Path, seen_at: str | None, deadline: str | None, cloud: str, reason: str
) -> None:
    """The interruption notice, for the job (``$PROVISIONER_NOTICE_FILE``): written atomically
    before the job is signalled, so that every process of the job (torchrun's workers too)
    sees it at its next step. Times are ISO 8601 UTC."""
    doc = {"seen_at": seen_at, "deadline": deadline, "cloud": cloud, "reason": reason[:200]}
    atomic_write(path, json.dumps(doc, sort_keys=True).encode())


def report_progress(path: str | os.PathLike[str] | None, step: int, **extra: Any) -> None:
    """Tell the agent where the job is (atomic; a missing path means no agent: a no-op)."""
    if not path:
        return
    doc = {"step": step, **extra}
    atomic_write(Path(path), json.dumps(doc, sort_keys=True).encode())


# -- the agent's progress record, typed ---------------------------------------------------------
#
# The agent writes ``progress.json`` in the job's checkpoint store (provisioner.agent.report);
# the controller reads it (provisioner.control.jobpass.progress) and acts on the fields below. Both
# sides name them here, so that what the agent reports and what the controller reads are one
# contract. Unknown or malformed fields read as absent: a record written by an older or newer
# agent is never an error.

#: where a reported notice came from: the cloud's metadata endpoint, a peer of a gang (whose
#: metadata endpoint served it), or a stop signal to the agent (the VM going down)
NOTICE_SOURCES = ("metadata", "gang", "signal")


@dataclass(frozen=True, slots=True)
class AgentNotice:
    """An interruption notice as the agent saw it on the VM (``notice`` in its record)."""

    seen_at: datetime | None
    deadline: datetime | None  # when the capacity goes, as the cloud said (or its usual notice)
    raw: str = ""
    source: str = "metadata"  # one of NOTICE_SOURCES

    @property
    def from_cloud(self) -> bool:
        """Whether the cloud served it (its metadata endpoint, on this node or a peer's), not
        a stop signal that may be anything taking the VM down."""
        return self.source in ("metadata", "gang")

    def to_doc(self) -> dict[str, Any]:
        return {
            "seen_at": _iso(self.seen_at),
            "deadline": _iso(self.deadline),
            "raw": self.raw,
            "source": self.source,
        }

    @classmethod
    def from_doc(cls, doc: object) -> AgentNotice | None:
        if not isinstance(doc, dict):
            return None
        source = doc.get("source")
        return cls(
            seen_at=_time(doc.get("seen_at")),
            deadline=_time(doc.get("deadline")),
            raw=str(doc.get("raw") or "")[:500],
            source=source if source in NOTICE_SOURCES else "metadata",
        )


@dataclass(frozen=True, slots=True)
class ProgressRecord:
    """The fields of the agent's progress record that the controller acts on."""

    attempt: int | None = None
    state: str | None = None
    instance_id: str = ""  # empty where the agent was not told (a cloud's bootstrap)
    cloud: str = ""
    exit_code: int | None = None
    updated_at: datetime | None = None
    notice: AgentNotice | None = None
    setup_error: dict[str, Any] | None = None
    #: an early signal served now (AWS's rebalance recommendation): when it was issued
    rebalance_at: datetime | None = None
    rebalance_raw: str = ""

    @classmethod
    def from_doc(cls, doc: object) -> ProgressRecord | None:
        """The record in ``doc`` (the parsed JSON); None when it is not an object."""
        if not isinstance(doc, dict):
            return None
        attempt, code, setup = doc.get("attempt"), doc.get("exit_code"), doc.get("setup_error")
        state, rb = doc.get("state"), doc.get("rebalance")
        return cls(
            attempt=attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else None,
            state=state if isinstance(state, str) else None,
            instance_id=str(doc.get("instance_id") or ""),
            cloud=str(doc.get("cloud") or ""),
            exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
            updated_at=_time(doc.get("updated_at")),
            notice=AgentNotice.from_doc(doc.get("notice")),
            setup_error=setup if isinstance(setup, dict) else None,
            rebalance_at=_time(rb.get("at") or rb.get("seen_at")) if isinstance(rb, dict) else None,
            rebalance_raw=str(rb.get("raw") or "")[:200] if isinstance(rb, dict) else "",
        )


def _iso(value: datetime | None) -> str | None:
    return value.isoformat(timespec="milliseconds").replace("+00:00", "Z") if value else None


def _time(text: object) -> datetime | None:
    """An ISO 8601 time as aware UTC (no zone: UTC); None where absent or unreadable."""
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
