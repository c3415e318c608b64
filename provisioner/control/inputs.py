"""Build decide()'s inputs from the store and what a pass observed (the daemon's driver).

The simulator builds the same :class:`~provisioner.core.decide.JobView` and
:class:`~provisioner.core.decide.Observations` from a trace; here they come from the store
(attempts, cooldowns, spend), the provider (instances by tag) and the checkpoint store
(progress), and the candidates from the planner over the job's provider's offers.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from provisioner.agent.store import step_of
from provisioner.core.decide import (
    Action,
    AttemptView,
    CapacityError,
    JobView,
    Observations,
    decide,
)
from provisioner.core.models import InstanceState, Market, Offer, Placement
from provisioner.core.planner import Plan, PlanContext, plan_offers

if TYPE_CHECKING:
    from provisioner.control.jobpass import JobRunner, Observed
    from provisioner.control.store import AttemptRow

#: How many ranked candidates decide() sees (both markets).
CANDIDATES = 40
#: Assumed changeover (launch, setup, restore) of a new instance, in hours.
CHANGEOVER_H = 0.1

_ATTEMPT_STATE = {
    "launching": None,
    "running": InstanceState.RUNNING,
    "preempted": InstanceState.PREEMPTED,
    "ended": InstanceState.TERMINATED,
    "failed": InstanceState.TERMINATED,
}


def placement_of(a: AttemptRow) -> Placement:
    """The placement an attempt was launched on, rebuilt from its row."""
    offer = Offer(
        provider=a.provider,
        region=a.region,
        zone=a.zone,
        instance_type=a.instance_type,
        gpu=a.gpu,
        gpu_count=a.gpu_count,
        vcpus=0,
        memory_gib=0,
        price=a.price_per_hour if a.market == Market.ON_DEMAND.value else None,
        spot_price=a.price_per_hour if a.market == Market.SPOT.value else None,
    )
    return Placement(
        offer=offer,
        market=Market(a.market),
        price_per_hour=a.price_per_hour,
        bid_cap_per_hour=a.bid_cap_per_hour,
        score=0.0,
    )


def work_done_h(progress: dict[str, Any] | None, total_h: float | None) -> float:
    """Checkpointed progress in hours: the share of steps the newest checkpoint holds."""
    if not progress or not total_h:
        return 0.0
    total_steps = progress.get("total_steps")
    ck = step_of(progress.get("last_checkpoint"))
    if not total_steps or ck is None:
        return 0.0
    return min(1.0, ck / float(total_steps)) * total_h


def decide_for(runner: JobRunner, observed: Observed) -> list[Action]:
    job, policy, now = runner.job, runner.policy, runner.now
    cooldowns = runner.cooldowns()
    cur = runner.current
    current = None
    if cur is not None:
        seen = next((i for i in observed.instances if i.id == cur.instance_id), None)
        current = AttemptView(
            attempt=cur.attempt,
            placement=placement_of(cur),
            instance_id=cur.instance_id,
            state=seen.state if seen is not None else _ATTEMPT_STATE.get(cur.state),
            launched_at=cur.launched_at or cur.created_at,
            ended_at=cur.ended_at,
        )
    view = JobView(
        id=job.id,
        policy=policy,
        submitted_at=job.submitted_at,
        deadline=job.deadline,
        work_total_h=job.work_total_h,
        work_done_h=work_done_h(observed.progress, job.work_total_h),
        restarts=job.restarts,
        attempt=cur.attempt if cur else 0,
        spent_usd=runner.spent(),
        current=current,
        cooldowns=cooldowns,
        changeover_h=CHANGEOVER_H,
        step_h=max(1.0, runner.rec.pass_interval_s) / 3600.0,
    )
    # kept on the runner: a launch stores the plan it was chosen from (see plan_digest)
    plan = runner.plan = runner.rec.plan_for(job, policy, frozenset(cooldowns), now)
    recent = now - timedelta(minutes=5)
    errors = tuple(
        CapacityError(
            a.provider, a.zone, a.instance_type, Market(a.market), a.ended_at or a.created_at
        )
        for a in runner.attempts
        if a.state == "failed"
        and (a.ended_at or a.created_at) >= recent
        and a.end_reason.startswith(("capacity", "price-too-low", "quota"))
    )
    obs = Observations(
        instances=tuple(observed.instances),
        interruptions=tuple(runner.interruptions),
        candidates=tuple(plan.placements),
        capacity_errors=errors,
    )
    return decide(view, obs, now)


def candidate_plan(
    policy: Any,
    catalog: Any,
    cooled: frozenset[tuple[str, str]],
    now: Any,
    measured: Any = None,
) -> Plan:
    ctx = PlanContext(now=now, submitted_at=now, cooldown=cooled, measured=measured or {})
    return plan_offers(policy, catalog, ctx, top=CANDIDATES)


def plan_candidates(
    policy: Any,
    catalog: Any,
    cooled: frozenset[tuple[str, str]],
    now: Any,
    measured: Any = None,
) -> list[Placement]:
    return candidate_plan(policy, catalog, cooled, now, measured).placements


#: How many of a plan's ranked placements a launch event keeps.
PLAN_DIGEST_TOP = 5


def plan_digest(plan: Plan, chosen: Placement | None) -> dict[str, Any]:
    """What a launch records of the plan it was chosen from (JSON, a few kB): the best
    placements, where the chosen one ranked, and the rejected offers by reason."""

    def key(p: Placement) -> tuple[Any, ...]:
        o = p.offer
        return (o.provider, o.zone, o.region, o.instance_type, p.market)

    rank = None
    if chosen is not None:
        want = key(chosen)
        rank = next((i + 1 for i, p in enumerate(plan.placements) if key(p) == want), None)
    return {
        "eligible": plan.eligible,
        "candidates": plan.candidates,
        "chosen_rank": rank,
        "chosen": None if chosen is None else chosen.as_dict(),
        "top": [p.as_dict() for p in plan.placements[:PLAN_DIGEST_TOP]],
        "rejected": plan.rejected,
        "rejected_examples": {r: list(rej.examples) for r, rej in plan.rejections.items()},
        "required_vram_gb": None
        if plan.required_vram_gb is None
        else round(plan.required_vram_gb, 2),
        "notes": list(plan.notes),
    }
