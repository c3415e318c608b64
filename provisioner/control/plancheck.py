"""Plan and the daemon agree: the invariant, for a job as the store holds it.

``provisioner plan`` lists the offers it judges eligible; the daemon launches what decide()
and the guard allow. Both judge by one predicate (:mod:`provisioner.core.admission`), and this
module checks, for one stored job at one moment, that they still agree: the plan the user
would see now (the job's catalog, its spend, its work left, each cloud's billing rule, the
pass interval) against the daemon's launch rule on the same view
(:func:`provisioner.core.admission.plan_daemon_disagreements`). Used by the invariants
(:mod:`provisioner.control.invariants`: the seeded run and ``provisioner check``), never on
the daemon's own pass (a whole plan per job per pass is not cheap).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from policies.model import Policy
from provisioner.control.store import AttemptRow, JobRow
from provisioner.core.admission import Standing, plan_daemon_disagreements
from provisioner.core.catalog import Catalog
from provisioner.core.planner import PlanContext, plan_offers

__all__ = ["disagreements"]


def disagreements(
    job: JobRow,
    policy: Policy,
    attempts: Sequence[AttemptRow],
    catalog: Catalog,
    now: datetime,
    *,
    interval_s: float = 5.0,
) -> list[str]:
    """Where plan (as the CLI would plan ``job`` now, on ``catalog``) and the daemon's launch
    rule disagree; empty when they agree. A job in a final state has nothing to launch."""
    from provisioner.control.inputs import job_view
    from provisioner.core.states import JobState

    if JobState(job.state).final:
        return []
    spent = sum(a.cost_usd for a in attempts) if attempts else job.spent_usd
    view = job_view(
        job,
        policy,
        attempts,
        (),
        job.progress or None,
        spent_usd=max(spent, job.spent_usd),
        cooldowns={},
        interval_s=interval_s,
    )
    context = PlanContext(now=now, standing=Standing.of(view))  # each cloud's billing rule
    plan = plan_offers(policy, catalog, context, top=None, with_rows=True)
    return plan_daemon_disagreements(view, plan.rows, now)
