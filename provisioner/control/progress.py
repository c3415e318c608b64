"""A job's progress, as its agent reports it in the checkpoint store: read (cheaply, and
only as often as the reconciler's ``progress_every`` asks), parsed once per read into the
typed record (:class:`~provisioner.agent.protocol.ProgressRecord`), recorded on the job's row,
and turned into ``checkpoint`` events, the job's result, and the interruption notice the
agent saw on the VM (:meth:`ProgressReading.take_reported_notice`: decide() gets it as an
interruption of that attempt, on every cloud, and a ``notice`` event is written once).

On a local store (a path every machine mounts, and the sim) the daemon also watches the file
between passes (:func:`local_notice`, from its interruption poll): an agent's notice starts a
pass within the poll interval instead of waiting for ``progress_every``."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from provisioner.agent.protocol import ProgressRecord
from provisioner.control import inputs
from provisioner.control.effects import Pending, store_where
from provisioner.control.jobbase import JobPassBase
from provisioner.control.passguard import describe
from provisioner.core.models import Instance, Interruption
from provisioner.core.timefmt import parse_time, utc

#: A running job's row gets its progress (step counts) at least this often.
PROGRESS_ROW_EVERY = timedelta(seconds=60)
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


class ProgressReading(JobPassBase):
    """The progress part of a job's pass."""

    def read_progress(self) -> dict[str, Any] | None:
        """The agent's progress record: a local file read here (a ``stat`` and a read); a
        remote store asked through the pass's bounded calls (:mod:`provisioner.control.effects`):
        while it has not answered, the last record read stands."""
        memo = self.memo
        try:
            if memo.progress_file is None and memo.checkpoints is None:
                uri = self.checkpoint_uri()
                if is_local_uri(uri):  # the same file, without fsspec's per-call overhead
                    from provisioner.agent.store import CheckpointStore

                    memo.checkpoints = CheckpointStore(uri, self.job.id)
                    memo.progress_file = str(Path(memo.checkpoints.path("progress.json")))
            if memo.progress_file is not None:
                memo.progress_mtime = local_mtime(memo.progress_file)
                try:
                    doc = json.loads(read_small(memo.progress_file).decode())
                except (OSError, ValueError):  # missing, half-written, not UTF-8 or not JSON
                    return None
                return doc if isinstance(doc, dict) else None
            return self.from_store("progress", "progress.json")
        except Pending:  # the store is slow: its last answer stands (its event is written)
            return memo.progress
        except Exception as exc:  # an unreachable checkpoint store must not stop the pass
            self.log.warning("job %s: cannot read progress: %s", self.job.id, describe(exc))
            return None

    def from_store(self, purpose: str, rel: str) -> dict[str, Any] | None:
        """A small JSON file of the job's remote checkpoint store, through the pass's bounded
        calls (:class:`~provisioner.control.effects.Pending` while it has not answered)."""
        memo, uri, job_id = self.memo, self.checkpoint_uri(), self.job.id

        def read() -> dict[str, Any] | None:
            from provisioner.agent.store import CheckpointStore

            if memo.checkpoints is None:  # made in the worker: a filesystem may dial out
                memo.checkpoints = CheckpointStore(uri, job_id)
            got: dict[str, Any] | None = memo.checkpoints.read_json(rel)
            return got

        effects = self.env.effects
        if effects is None:
            return read()
        return effects.call(job_id, purpose, store_where(uri), rel, read)

    def progress_for(self, live: list[Instance]) -> dict[str, Any] | None:
        """The job's progress: read again when the memo's copy is older than the reconciler's
        ``progress_every`` (see :meth:`due`), when the live instances changed, when one is
        under an interruption notice, or when none is live."""
        memo, every = self.memo, self.env.progress_every
        ids = frozenset(i.id for i in live)
        fresh = (
            memo.progress_at is not None
            and ids
            and ids == memo.live
            and not self.interruptions  # under a notice: what was checkpointed, every pass
            and not self.due(memo.progress_at, every)
            and not local_notice(memo)  # an agent's notice on a local store: read at once
            and not (self.env.effects and self.env.effects.ready(self.job.id, "progress"))
        )
        if not fresh:
            memo.progress, memo.progress_at, memo.live = self.read_progress(), self.now, ids
        return memo.progress

    def record_of(self, progress: dict[str, Any] | None) -> ProgressRecord | None:
        """``progress`` as the typed record, parsed once per read (kept beside the memo's copy)."""
        memo = self.memo
        if memo.record is None or memo.record[0] is not progress:
            memo.record = (progress, ProgressRecord.from_doc(progress))
        return memo.record[1]

    def take_reported_notice(self, record: ProgressRecord | None) -> None:
        """The notice the agent reports (:func:`provisioner.control.inputs.reported_notices`)
        joins this pass's interruptions, and is kept while its attempt runs (a replacement's
        agent overwrites the record once the checkpoint is in, but the instance under notice
        stays under notice until it goes); each is recorded once as a ``notice`` event."""
        memo = self.memo
        for it in inputs.reported_rebalance(record, self.attempts):  # an early signal
            self.interruptions = inputs.merged(self.interruptions, [it])
            self._note_rebalance(it)
        for it in inputs.reported_notices(record, self.attempts, self.now):
            if it.instance_id not in memo.notices:
                memo.notices[it.instance_id] = it
                self._note_notice(it)
        self._recall_notices()
        if not memo.notices:
            return
        running = {a.instance_id for a in self.attempts if a.state == "running"}
        old = self.now - inputs.NOTICE_KEPT
        for iid, it in list(memo.notices.items()):
            if iid not in running or (it.deadline or it.at) < old:
                del memo.notices[iid]
        self.interruptions = inputs.merged(self.interruptions, memo.notices.values())

    def _recall_notices(self) -> None:
        """An earlier attempt still running beside the current one (an overlap this process
        did not see begin: a restarted daemon, a takeover) gets its notice back from its
        ``notice`` event, once: its agent's record may be the replacement's by now."""
        memo, cur = self.memo, self.current
        if len(self.attempts) < 2:
            return  # no earlier attempt
        earlier = {
            a.instance_id
            for a in self.attempts
            if a.state == "running" and a.instance_id and a is not cur
        } - set(memo.notices)
        if not earlier or earlier <= memo.recalled:
            return
        memo.recalled |= earlier
        for e in self.store.events_of_kinds([self.job.id], ["notice"]).get(self.job.id, []):
            iid = (e.data or {}).get("instance")
            if iid not in earlier or iid in memo.notices:
                continue
            a = next(a for a in self.attempts if a.instance_id == iid)
            memo.notices[iid] = Interruption(
                instance_id=iid,
                provider=a.provider,
                zone=a.zone,
                kind="notice",
                at=utc(e.at),
                deadline=parse_time((e.data or {}).get("deadline")),
                raw=e.message[:200],
            )

    def _note_notice(self, it: Interruption) -> None:
        if self.store.has_event(self.job.id, "notice", it.instance_id):
            return  # the provider's API reported it (or an earlier process recorded it)
        until = f"; capacity goes at {it.deadline:%H:%M:%S}" if it.deadline else ""
        self.store.add_event(
            self.job.id,
            "notice",
            f"interruption notice for {it.instance_id} in {it.zone}, reported by its agent "
            f"({it.raw}){until}; the agent checkpoints",
            at=it.at,
            instance=it.instance_id,
            deadline=it.deadline.isoformat() if it.deadline else None,
        )

    def _note_rebalance(self, it: Interruption) -> None:
        if self.store.has_event(self.job.id, "rebalance", it.instance_id):
            return  # recorded once per instance
        self.store.add_event(
            self.job.id,
            "rebalance",
            f"rebalance recommendation for {it.instance_id} in {it.zone}, reported by its agent "
            f"({it.raw}): an early signal, not a notice (the job goes on); decide() may start "
            "a replacement elsewhere, made before break",
            at=it.at,
            instance=it.instance_id,
        )

    def progress_worth_writing(self, progress: dict[str, Any]) -> bool:
        """Whether the job row's copy of the progress is to be replaced: at once when its state,
        attempt or checkpoint moved (or the reconciler reads progress every pass, as ``up``
        does); a step count alone, once per ``PROGRESS_ROW_EVERY`` (10,000 agents report
        every 5 s: their steps are for display, the store need not follow each one)."""
        old = self.job.progress or {}
        if (
            self.env.progress_every <= timedelta(0)
            or progress.get("state") != old.get("state")
            or progress.get("attempt") != old.get("attempt")
            or progress.get("last_checkpoint") != old.get("last_checkpoint")
        ):
            return True
        return self.due(self.memo.progress_written_at, PROGRESS_ROW_EVERY)

    def note_checkpoint(self, progress: dict[str, Any]) -> None:
        """A ``checkpoint`` event, at the agent's upload time, for each new checkpoint seen
        (the timeline of ``provisioner logs`` and the dashboard); and a job's warning that a
        checkpoint may not finish in time (:meth:`note_checkpoint_warning`)."""
        self.note_checkpoint_warning(progress)
        ck = progress.get("last_checkpoint")
        if not ck or ck == self.memo.checkpoint:
            return
        told = self.memo.checkpoint or (self.job.progress or {}).get("last_checkpoint")
        self.memo.checkpoint = ck
        if ck == told:
            return  # recorded before (this process or the one before it)
        attempt = progress.get("attempt")
        for name, step, at, by in _untold(progress, told):
            if by is None and isinstance(attempt, int):  # resumed from: an earlier attempt's
                by = max((a.attempt for a in self.attempts if a.attempt < attempt), default=None)
            self.store.add_event(
                self.job.id,
                "checkpoint",
                f"checkpoint {name} in the checkpoint store"
                + (f" (step {step})" if step is not None else "")
                + f", attempt {by if by is not None else '?'}",
                at=parse_time(at) or self.now,
                checkpoint=name,
                attempt=by,
            )

    def note_checkpoint_warning(self, progress: dict[str, Any]) -> None:
        """A ``checkpoint-warning`` event, once per attempt, when the job's progress file says
        that a checkpoint may not finish before the capacity goes (``provisioner.job`` writes
        ``checkpoint_warning`` there when the last save took longer than the notice leaves)."""
        job = progress.get("job")
        warning = job.get("checkpoint_warning") if isinstance(job, dict) else None
        attempt = progress.get("attempt")
        if not warning or not isinstance(attempt, int) or self.memo.warned == attempt:
            return
        self.memo.warned = attempt
        head = f"attempt {attempt}: "
        if self.store.has_event(self.job.id, "checkpoint-warning", head):
            return  # recorded before (this process or the one before it)
        assert isinstance(job, dict)
        self.store.add_event(
            self.job.id,
            "checkpoint-warning",
            head + str(warning)[:500],
            at=self.now,
            attempt=attempt,
            last_save_s=job.get("last_save_s"),
        )

    def read_result(self, progress: dict[str, Any]) -> dict[str, Any]:
        """The job's output/result.json from the checkpoint store, else its last progress.
        :class:`~provisioner.control.effects.Pending` while a remote store has not answered
        (the job ends in a later pass, with its result)."""
        try:
            if self.memo.progress_file is not None or is_local_uri(self.checkpoint_uri()):
                from provisioner.agent.store import CheckpointStore

                doc = CheckpointStore(self.checkpoint_uri(), self.job.id).read_json(
                    "output/result.json"
                )
            else:
                doc = self.from_store("result", "output/result.json")
        except Pending as exc:
            if exc.waited_s < RESULT_PATIENCE_S:
                raise
            doc = None  # an hour without an answer: the job ends on its last progress
        except Exception:
            doc = None
        return doc or {
            k: progress.get(k) for k in ("step", "total_steps", "last_checkpoint", "job")
        }


def _untold(progress: dict[str, Any], told: str | None) -> list[tuple[str, Any, Any, int | None]]:
    """The checkpoints of a progress record not yet told, oldest first: (name, step, upload
    time, the attempt that wrote it, None: an earlier one). The agent lists its own uploads
    (``checkpoints``), so a controller that reads progress seldom misses none of them."""
    from provisioner.agent.store import step_of

    attempt = progress.get("attempt")
    own = [c for c in progress.get("checkpoints") or [] if isinstance(c, dict) and c.get("name")]
    names = [str(c["name"]) for c in own]
    if told in names:
        own = own[names.index(str(told)) + 1 :]
    else:
        floor = step_of(told)
        own = [c for c in own if floor is None or (step_of(c["name"]) or 0) > floor]
    out = [(str(c["name"]), c.get("step"), c.get("at"), attempt) for c in own]
    ck = str(progress["last_checkpoint"])
    if not any(name == ck for name, *_ in out):
        by = attempt
        if "last_checkpoint_attempt" in progress:  # an agent that says who wrote it
            by = progress["last_checkpoint_attempt"]
        out.append(
            (ck, progress.get("last_checkpoint_step"), progress.get("last_checkpoint_at"), by)
        )
    return out
