"""What the agent's record says, recorded: a ``checkpoint`` event for each new checkpoint
(and a ``checkpoint-warning`` once per attempt), the attempt's ``first-progress`` event, and
the job row's copy of the progress (queued in the pass's updates when worth a write)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from provisioner.control.jobpass import alerts
from provisioner.control.jobpass.state import GO_ON, PassState, Result
from provisioner.core.timefmt import parse_time

#: A running job's row gets its progress (step counts) at least this often.
PROGRESS_ROW_EVERY = timedelta(seconds=60)


class Checkpoints:
    """Checkpoint events, the first progress of an attempt, and the row's copy queued."""

    def reconcile(self, ps: PassState) -> Result:
        progress, job = ps.progress, ps.job
        if progress:
            note_checkpoint(ps, progress)
            alerts.note_first_progress(ps, progress)
        if progress and progress != job.progress and worth_writing(ps, progress):
            ps.updates["progress"] = progress
        return GO_ON


def worth_writing(ps: PassState, progress: dict[str, Any]) -> bool:
    """Whether the job row's copy of the progress is to be replaced: at once when its state,
    attempt or checkpoint moved (or the reconciler reads progress every pass, as ``up``
    does); a step count alone, once per ``PROGRESS_ROW_EVERY`` (10,000 agents report
    every 5 s: their steps are for display, the store need not follow each one)."""
    old = ps.job.progress or {}
    if (
        ps.env.progress_every <= timedelta(0)
        or progress.get("state") != old.get("state")
        or progress.get("attempt") != old.get("attempt")
        or progress.get("last_checkpoint") != old.get("last_checkpoint")
    ):
        return True
    return ps.due(ps.memo.progress_written_at, PROGRESS_ROW_EVERY)


def note_checkpoint(ps: PassState, progress: dict[str, Any]) -> None:
    """A ``checkpoint`` event, at the agent's upload time, for each new checkpoint seen
    (the timeline of ``provisioner logs`` and the dashboard); and a job's warning that a
    checkpoint may not finish in time (:func:`note_checkpoint_warning`)."""
    note_checkpoint_warning(ps, progress)
    ck = progress.get("last_checkpoint")
    if not ck or ck == ps.memo.checkpoint:
        return
    told = ps.memo.checkpoint or (ps.job.progress or {}).get("last_checkpoint")
    ps.memo.checkpoint = ck
    if ck == told:
        return  # recorded before (this process or the one before it)
    attempt = progress.get("attempt")
    for name, step, at, by in _untold(progress, told):
        if by is None and isinstance(attempt, int):  # resumed from: an earlier attempt's
            by = max((a.attempt for a in ps.attempts if a.attempt < attempt), default=None)
        ps.store.add_event(
            ps.job.id,
            "checkpoint",
            f"checkpoint {name} in the checkpoint store"
            + (f" (step {step})" if step is not None else "")
            + f", attempt {by if by is not None else '?'}",
            at=parse_time(at) or ps.now,
            checkpoint=name,
            attempt=by,
        )


def note_checkpoint_warning(ps: PassState, progress: dict[str, Any]) -> None:
    """A ``checkpoint-warning`` event, once per attempt, when the job's progress file says
    that a checkpoint may not finish before the capacity goes (``provisioner.job`` writes
    ``checkpoint_warning`` there when the last save took longer than the notice leaves)."""
    job = progress.get("job")
    warning = job.get("checkpoint_warning") if isinstance(job, dict) else None
    attempt = progress.get("attempt")
    if not warning or not isinstance(attempt, int) or ps.memo.warned == attempt:
        return
    ps.memo.warned = attempt
    head = f"attempt {attempt}: "
    if ps.store.has_event(ps.job.id, "checkpoint-warning", head):
        return  # recorded before (this process or the one before it)
    assert isinstance(job, dict)
    ps.store.add_event(
        ps.job.id,
        "checkpoint-warning",
        head + str(warning)[:500],
        at=ps.now,
        attempt=attempt,
        last_save_s=job.get("last_save_s"),
    )


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
