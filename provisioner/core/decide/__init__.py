"""The one decision function: ``decide(job, observations, now) -> list[Action]``.

Pure (no I/O, clock or randomness): the daemon's reconciler and the trace simulator both call
it, so what the simulator measures is what the daemon does. Inputs, built by the caller:

* :class:`JobView`: the job as the store knows it: its policy, deadline, work (total and
  *checkpointed* progress, in hours on the job's instance type), spend, restart count, the
  latest attempt (:class:`AttemptView`), zone cooldowns, and two timings: the changeover
  ``changeover_h`` (launch + setup + restore) and the decision interval ``step_h`` (how soon
  the caller will ask again).
* :class:`Observations`: what the providers say now: the job's instances (found by tag),
  interruptions, the planner's ranked candidates (both markets, best first), recent
  capacity errors (the caller decides how recent), and optionally where spot capacity is
  known to be up, since when (``spot_up_since``; both drivers fill it, see
  :mod:`provisioner.core.views`, the input contract and its constants).

The job's own situation is part of the view too: a cancel request (``cancel_requested``),
what its agent last reported (:class:`AgentReport`: running, done or failed, when), and its
launch failures that another offer would not cure (``launch_failures``,
``last_launch_failure_at``), so that every decision is made here and the caller only executes.

Output: actions, to be carried out in order (the executor does nothing else):

* :class:`Terminate` (instance id, reason, cause): stop an instance; its attempt ends
  (``preempted`` when the cause is a preemption, else ``ended``), billed to that moment;
* :class:`CoolDown` (provider, location, until): keep spot away from a zone a while;
* :class:`Launch` (placement, attempt, reason, replaces): a new attempt; ``replaces`` names
  the instance it takes over from (under notice, or a switch made before break; None:
  nothing alive is left running beside it);
* :class:`Wait` (until or None, reason): nothing to do now;
* :class:`Backoff` (until, reason): hold off launches after failures another offer would
  not cure (auth, invalid request, transient errors past their retries);
* :class:`Cancel` (reason): the user asked to stop: the job ends ``cancelled``;
* :class:`Finish` (reason): the work is done: the job ends ``succeeded``;
* :class:`Fail` (reason): the job cannot go on (restarts or budget exhausted, its command
  failed): the job ends ``failed``;
* :class:`Stop` (reason): the policy stops it (GPUs idle, ``idle.action: stop``): the job
  ends ``stopped``.

Order of the rules: a notice long enough to overlap (the rules below, as if the instance under
notice were gone); the gate (:mod:`provisioner.core.decide.gate`: cancel, the agent's exit, a setup
failure, the policy's probe floor and idle stop, launch backoff, the total budget, a notice's
wait, the work covered by checkpoints, time windows, an attempt not yet reported, restarts
exhausted); a rebalance recommendation's look (:mod:`provisioner.core.decide.signals`); the strategy.
Every action that ends an attempt or the job names its cause
(:class:`provisioner.core.states.Cause`); the driver takes the states from the transition
table (:mod:`provisioner.core.states`).

A switch is made before break (:mod:`provisioner.core.overlap`): a :class:`Launch` with
``replaces`` naming the instance alive, which works on until the new attempt has taken over. A
refused launch costs nothing (a capacity observation; :mod:`provisioner.core.looks` paces
them), an accepted one the overlap (counted against the budget). Overlap on notice is the same
with the cloud's notice as the reason. Never a third instance. Every :class:`Launch` names why
that placement (the audit event).

Guarantees (property-tested in ``tests/core/test_decide.py``): a Launch is never above the bid
cap (the placement's or the policy's) nor ``budget.max_price_per_hour``, never outside the
policy's residency, never on a market the policy excludes, never spot in a cooled-down zone or
an offer that just reported no capacity, never when ``restarts >= restart.max_restarts``,
and never one that the remaining budget could not pay for.

A gang (``resources.nodes`` > 1) is decided as one instance (:func:`provisioner.core.gang.fold`:
any node lost is the unit preempted; a Terminate is carried out on every node, a Launch is a
whole gang, the budgets held against the gang's hour, never overlapped on a notice).

Spot, on-demand or wait is a strategy's choice (:mod:`provisioner.core.strategies`), selected by
the policy's market (``on-demand``; ``spot``: spot only; ``spot-then-on-demand``: ours,
``provisioner``) or by name (``strategy=``, ``JobView.strategy``). Without a deadline or a work
estimate there is nothing to pace against: spot when there is capacity, else on-demand.

The package: this module (the entry, the triage, a notice's hand-over), then
:mod:`~provisioner.core.decide.choice` (the rules after the triage: the gate, the price cap,
held capacity, the strategy, the launch) and the modules it goes through:
:mod:`~provisioner.core.decide.gate`, :mod:`~provisioner.core.decide.pricecap` (a running
price over its cap), :mod:`~provisioner.core.decide.signals` (early signals: a rebalance
look re-enters the choice) and :mod:`~provisioner.core.decide.stepview` (the strategy's view).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from provisioner.core import gang
from provisioner.core import overlap as ov
from provisioner.core import reserved as rsv
from provisioner.core.actions import (
    FINAL,
    Action,
    Backoff,
    Cancel,
    CoolDown,
    Fail,
    Final,
    Finish,
    Launch,
    Stop,
    Terminate,
    Wait,
)
from provisioner.core.decide import signals as sig
from provisioner.core.decide.choice import decide_on, loc_of
from provisioner.core.decide.gate import Situation
from provisioner.core.models import Instance, InstanceState
from provisioner.core.rules import launch_price, launchable, region_allowed, spot_cap
from provisioner.core.states import Cause, InterruptionKind
from provisioner.core.views import (
    AgentReport,
    AttemptView,
    CapacityError,
    JobView,
    Observations,
    cooldown_over,
)

__all__ = [
    "FINAL",
    "Action",
    "AgentReport",
    "AttemptView",
    "Backoff",
    "Cancel",
    "CapacityError",
    "CoolDown",
    "Fail",
    "Final",
    "Finish",
    "JobView",
    "Launch",
    "Observations",
    "Stop",
    "Terminate",
    "Wait",
    "decide",
    "launch_price",
    "launchable",
    "region_allowed",
    "spot_cap",
]


def _triage(job: JobView, obs: Observations, now: datetime) -> Situation:
    """One live instance at most; a preempted attempt cools its zone down."""
    mine = [i for i in obs.instances if i.job_id in (None, job.id)]
    drains = ov.draining(job, [i for i in mine if i.state.alive], obs.interruptions, now)
    held = {x.instance.id for x in drains}  # under notice, replacement in flight: kept
    alive = [i for i in mine if i.state.alive and i.id not in held]
    cur = job.current
    ours = [i for i in alive if cur is not None and i.id == cur.instance_id]
    newest = sorted(alive, key=lambda i: (i.attempt or 0, i.id))[-1:]
    keep: Instance | None = (ours or newest)[0] if alive else None
    dupes = [
        Terminate(i.id, f"a second live instance for job {job.id}", Cause.DUPLICATE) for i in alive
    ]
    out = Situation(
        [d for d in dupes if keep is None or d.instance_id != keep.id], keep, dict(job.cooldowns)
    )
    for x in drains:
        done = f"attempt {cur.attempt if cur else '?'} takes over"
        if x.landed and x.planned:
            out.actions.append(Terminate(x.instance.id, f"handed over: {done}", Cause.HANDED_OVER))
        elif x.landed:
            out.actions.append(Terminate(x.instance.id, f"preempted; {done}", Cause.PREEMPTED))
        elif x.planned:
            out.handing_over = x.instance
    hits = [x for x in obs.interruptions if keep is not None and x.instance_id == keep.id]
    lost_at: datetime | None = None
    if cur is not None:
        seen = next((i for i in mine if i.id == cur.instance_id), None)
        if (seen.state if seen is not None else cur.state) is InstanceState.PREEMPTED:
            lost_at = cur.ended_at or now
    gone = [x.at for x in hits if x.kind == InterruptionKind.PREEMPTED]
    if gone and keep is not None:
        lost_at = min(gone)
        out.actions.append(Terminate(keep.id, "preempted: cleaning up", Cause.PREEMPTED))
        out.keep = None
    cd = job.policy.restart.zone_cooldown
    if lost_at is not None and cur is not None and cd > timedelta(0):
        loc, until = loc_of(cur.placement), lost_at + cd
        before = out.cooled.get(loc)
        if not cooldown_over(until, now) and (before is None or before < until):
            out.actions.append(CoolDown(loc[0], loc[1], until, "preempted: avoid the zone a while"))
            out.cooled[loc] = until
    notices = [ov.notice_deadline(x) for x in hits if x.kind == InterruptionKind.NOTICE]
    if notices and out.keep is not None:
        out.notice_until = min(notices)
    return out


def decide(
    job: JobView, obs: Observations, now: datetime, *, strategy: str | None = None
) -> list[Action]:
    """What to do for ``job`` now. See the module docstring for the contract."""
    nodes = job.policy.resources.nodes
    obs, rb = sig.split(obs)  # early signals (provisioner.core.decide.signals): kept apart
    mine = [i for i in obs.instances if i.job_id in (None, job.id)]
    ending = rsv.block_notices(mine, obs.interruptions, now)  # a block's end: a known notice
    if ending:
        obs = replace(obs, interruptions=(*obs.interruptions, *ending))
    if nodes > 1:  # a gang: its instances as one unit (provisioner.core.gang)
        cur = job.current
        leaders = {cur.attempt: cur.instance_id} if cur and cur.instance_id else {}
        young = gang.young_attempts(
            cur.attempt if cur else None, cur.launched_at if cur else None, now
        )
        g = gang.fold(obs.instances, obs.interruptions, nodes, now, leaders, young)
        obs = replace(obs, instances=g.units, interruptions=g.interruptions)
    t = _triage(job, obs, now)
    if (
        nodes == 1  # a gang is replaced after its notice (its planned switches: before break)
        and t.handing_over is None  # a switch in flight: never a third instance
        and t.keep is not None
        and ov.worth_overlapping(job, t.keep, t.notice_until, now)
    ):
        went = _hand_over(job, t, now)
        out = decide_on(job, obs, now, went, strategy)
        new = [a for a in out if isinstance(a, Launch)]
        if len(new) == 1 and all(isinstance(a, Launch | CoolDown | Terminate) for a in out):
            why = f"; overlapping the notice of {t.keep.id}"
            over = replace(new[0], replaces=t.keep.id, reason=new[0].reason + why)
            return [over if a is new[0] else a for a in out]
    return sig.decide_with(job, obs, now, t, rb, lambda j, x: decide_on(j, obs, now, x, strategy))


def _hand_over(job: JobView, t: Situation, now: datetime) -> Situation:
    """The situation as if the instance under notice were gone: its zone kept away until its
    capacity goes (and the policy's cooldown after), so the replacement goes elsewhere."""
    assert t.keep is not None and t.notice_until is not None
    assert job.current is not None
    loc = loc_of(job.current.placement)
    until = t.notice_until + job.policy.restart.zone_cooldown
    cooled, acts = dict(t.cooled), list(t.actions)
    if cooled.get(loc) is None or cooled[loc] < until:
        cooled[loc] = until
        acts.append(CoolDown(loc[0], loc[1], until, "interruption notice: replace elsewhere"))
    return Situation(acts, None, cooled)
