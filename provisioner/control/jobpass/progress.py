"""A job's progress, as its agent reports it in the checkpoint store: read (cheaply, and
only as often as the reconciler's ``progress_every`` asks) and parsed once per read into the
typed record (:class:`~provisioner.agent.protocol.ProgressRecord`); the job's result read at
its end. The sub-reconciler :class:`Progress` reads it into the pass state; what it says is
recorded by the next ones (:mod:`~provisioner.control.jobpass.notices`: the interruption
notice the agent saw on the VM; :mod:`~provisioner.control.jobpass.checkpoints`: checkpoint
events and the job row's copy).

On a local store (a path every machine mounts, and the sim) the daemon also watches the file
between passes (:func:`local_notice`, from its interruption poll): an agent's notice starts a
pass within the poll interval instead of waiting for ``progress_every``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from provisioner.agent.protocol import ProgressRecord
from provisioner.control.effects import Pending, store_where
from provisioner.control.jobpass.state import GO_ON, PassState, Result
from provisioner.control.passguard import describe
from provisioner.core.models import Instance

#: How long a finished job waits for its result from a store that does not answer before it
#: ends with its last progress as the result.
RESULT_PATIENCE_S = 3600.0


def read_small(path: str, chunk: int = 1 << 16) -> bytes:
    """A small file's bytes with the bare system calls: the daemon reads thousands of
    progress files a pass, and ``open()``'s buffered file object costs twice the read."""
    fd = os.open(path, os.O_RDONLY)
    try:
        parts = [os.read(fd, chunk)]
        while len(parts[-1]) == chunk:  # larger than one read: go on to the end
            parts.append(os.read(fd, chunk))
    finally:
        os.close(fd)
    return b"".join(parts) if len(parts) > 1 else parts[0]


def is_local_uri(uri: str) -> bool:
    """Whether a checkpoint store is a path on this machine (``file://`` or no scheme)."""
    return "://" not in uri or uri.split("://", 1)[0].lower() in ("file", "local")


def local_mtime(path: str) -> int | None:
    """A local progress file's modification time (ns), or None where it cannot be seen."""
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def local_notice(memo: Any) -> bool:
    """Whether the job's progress file, on a local store, now holds a notice the memo's copy
    does not (a ``stat``, and a read only when the file changed). The daemon's interruption
    poll asks this of every job it holds, every 0.5 s, so that an agent's notice starts a pass
    at once; other changes wait for the pass's pace, and a bucket is read only by the pass."""
    if not local_changed(memo):
        return False
    try:
        doc = json.loads(read_small(memo.progress_file).decode())
    except (OSError, ValueError):
        return False
    if not isinstance(doc, dict):
        return False
    old = memo.progress if isinstance(memo.progress, dict) else {}
    notice, rebalance = doc.get("notice"), doc.get("rebalance")  # and an early signal
    return (bool(notice) and notice != old.get("notice")) or rebalance != old.get("rebalance")


def local_changed(memo: Any) -> bool:
    """Whether the job's progress file, on a local store, changed since the memo read it (one
    ``stat``)."""
    path = memo.progress_file
    return path is not None and memo.progress_mtime != local_mtime(path)


class Progress:
    """Read the agent's record into the pass state (when due, see :func:`progress_for`)."""

    def reconcile(self, ps: PassState) -> Result:
        reads = ps.memo.progress_at
        ps.progress = progress_for(ps, ps.live())
        ps.report.progress_reads += ps.memo.progress_at is not reads
        return GO_ON


def progress_for(ps: PassState, live: list[Instance]) -> dict[str, Any] | None:
    """The job's progress: read again when the memo's copy is older than the reconciler's
    ``progress_every`` (see :meth:`PassState.due`), when the live instances changed, when one is
    under an interruption notice, or when none is live."""
    memo, every = ps.memo, ps.env.progress_every
    ids = frozenset(i.id for i in live)
    fresh = (
        memo.progress_at is not None
        and ids
        and ids == memo.live
        and not ps.interruptions  # under a notice: what was checkpointed, every pass
        and not ps.due(memo.progress_at, every)
        and not local_notice(memo)  # an agent's notice on a local store: read at once
        and not (ps.env.effects and ps.env.effects.ready(ps.job.id, "progress"))
    )
    if not fresh:
        memo.progress, memo.progress_at, memo.live = read_progress(ps), ps.now, ids
    return memo.progress


def read_progress(ps: PassState) -> dict[str, Any] | None:
    """The agent's progress record: a local file read here (a ``stat`` and a read); a
    remote store asked through the pass's bounded calls (:mod:`provisioner.control.effects`):
    while it has not answered, the last record read stands."""
    memo = ps.memo
    try:
        if memo.progress_file is None and memo.checkpoints is None:
            uri = ps.checkpoint_uri()
            if is_local_uri(uri):  # the same file, without fsspec's per-call overhead
                from provisioner.agent.store import CheckpointStore

                memo.checkpoints = CheckpointStore(uri, ps.job.id)
                memo.progress_file = str(Path(memo.checkpoints.path("progress.json")))
        if memo.progress_file is not None:
            memo.progress_mtime = local_mtime(memo.progress_file)
            try:
                doc = json.loads(read_small(memo.progress_file).decode())
            except (OSError, ValueError):  # missing, half-written, not UTF-8 or not JSON
                return None
            return doc if isinstance(doc, dict) else None
        return from_store(ps, "progress", "progress.json")
    except Pending:  # the store is slow: its last answer stands (its event is written)
        return memo.progress
    except Exception as exc:  # an unreachable checkpoint store must not stop the pass
        ps.log.warning("job %s: cannot read progress: %s", ps.job.id, describe(exc))
        return None


def from_store(ps: PassState, purpose: str, rel: str) -> dict[str, Any] | None:
    """A small JSON file of the job's remote checkpoint store, through the pass's bounded
    calls (:class:`~provisioner.control.effects.Pending` while it has not answered)."""
    memo, uri, job_id = ps.memo, ps.checkpoint_uri(), ps.job.id

    def read() -> dict[str, Any] | None:
        from provisioner.agent.store import CheckpointStore

        if memo.checkpoints is None:  # made in the worker: a filesystem may dial out
            memo.checkpoints = CheckpointStore(uri, job_id)
        got: dict[str, Any] | None = memo.checkpoints.read_json(rel)
        return got

    effects = ps.env.effects
    if effects is None:
        return read()
    return effects.call(job_id, purpose, store_where(uri), rel, read)


def record_of(ps: PassState, progress: dict[str, Any] | None) -> ProgressRecord | None:
    """``progress`` as the typed record, parsed once per read (kept beside the memo's copy)."""
    memo = ps.memo
    if memo.record is None or memo.record[0] is not progress:
        memo.record = (progress, ProgressRecord.from_doc(progress))
    return memo.record[1]


def read_result(ps: PassState, progress: dict[str, Any]) -> dict[str, Any]:
    """The job's output/result.json from the checkpoint store, else its last progress.
    :class:`~provisioner.control.effects.Pending` while a remote store has not answered
    (the job ends in a later pass, with its result)."""
    try:
        if ps.memo.progress_file is not None or is_local_uri(ps.checkpoint_uri()):
            from provisioner.agent.store import CheckpointStore

            doc = CheckpointStore(ps.checkpoint_uri(), ps.job.id).read_json("output/result.json")
        else:
            doc = from_store(ps, "result", "output/result.json")
    except Pending as exc:
        if exc.waited_s < RESULT_PATIENCE_S:
            raise
        doc = None  # an hour without an answer: the job ends on its last progress
    except Exception:
        doc = None
    return doc or {k: progress.get(k) for k in ("step", "total_steps", "last_checkpoint", "job")}
