"""The job's row, written: what changed of it at the end of its pass (progress and spend
with the pass's batch, anything else at once) and its running spend, weighed on the beat."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from provisioner.control.jobpass.alerts import note_budget
from provisioner.control.jobpass.state import PassState

#: A running job's spend is written to its row when it moved by this much (batched per pass),
SPEND_STEP_USD = 0.001
#: ...and, where the reconciler reads progress on a beat (the daemon), weighed at most this
#: often: at 10,000 jobs a write per job per pass was most of the pass's store time, and
#: billing every attempt every pass a good part of its CPU. A job's first spend,
#: and every spend written with another change (launch, preemption, end), goes at once; the
#: bill itself is the attempts' (their cost is written when each ends), never this column.
SPEND_ROW_EVERY = timedelta(seconds=30)


def note_spend(ps: PassState) -> None:
    """Queue the job's running spend for the pass's batched write when it moved (on the
    daemon's beat: once per ``SPEND_ROW_EVERY`` at most, see there)."""
    memo = ps.memo
    if (
        memo.spend_checked_at is not None
        and ps.env.progress_every > timedelta(0)
        and not ps.due(memo.spend_checked_at, SPEND_ROW_EVERY)
    ):
        return
    spent = ps.spent()
    if spent > 0.0:  # weighed once per beat from the first spend on, which goes at once
        memo.spend_checked_at = ps.now
        note_budget(ps, spent)
    if abs(spent - ps.job.spent_usd) >= SPEND_STEP_USD:
        ps.env.batch.job(ps.job.id, spent_usd=spent)
        ps.job.spent_usd = spent


def settle(ps: PassState, updates: dict[str, Any]) -> None:
    """Write what changed of the job: its progress and spend with the pass's batch (they
    change all the time and decide nothing here), anything else at once."""
    if set(updates) <= {"progress"}:
        if "progress" in updates:
            ps.job.progress = updates["progress"]
            ps.memo.progress_written_at = ps.now
            ps.env.batch.job(ps.job.id, progress=updates["progress"])
        note_spend(ps)
    else:
        spent = ps.spent()
        ps.write_queued()
        ps.store.update_job(ps.job.id, at=ps.now, spent_usd=spent, **updates)
        ps.job.spent_usd = spent
        note_budget(ps, spent)
