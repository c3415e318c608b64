"""Early signals: a look made before the notice on a rebalance recommendation (decide()'s part).

AWS may serve a *rebalance recommendation* to a spot instance before (sometimes instead of)
its two-minute interruption notice; the agent reports it, the daemon hands it to decide() as
an :class:`~provisioner.core.models.Interruption` with ``kind="rebalance"`` (never a notice:
the job is not asked to checkpoint, nothing is terminated on it). On one, for the running spot
instance of a single-node job, decide() may launch the replacement at once, made before break
(``Launch(replaces=...)``), to another zone (the signalled one is cooled down for
:data:`COOLDOWN`, or the policy's zone cooldown if longer), when the look is worth its price:

* what it costs: a false alarm wastes one changeover beside the running instance, the overlap
  (:func:`provisioner.core.overlap.overlap_usd`), so ``(1 - FOLLOWED) * overlap``;
* what it saves: a preemption that follows costs the changeover left over the notice
  (``changeover_h - NOTICE_H``, at most the work left) of progress, made up at worst on
  on-demand (its price; the new spot instance's where the policy has no on-demand), so
  ``FOLLOWED * lost_h * price``.

:data:`FOLLOWED` is a prior (AWS publishes no rate). No look when the work left is no longer
than a changeover (finishing here is cheaper), under a notice, while a switch is handing over
(never a third instance), for a gang, or when the instance is still in its own changeover. The
launch is whatever decide() would launch with the instance gone and its zone cooled, so every
launch guarantee holds (caps, residency, markets, budget with the overlap counted); a wait,
a failure or anything else there means no look, and the instance runs on. A refused launch
costs nothing: the instance runs on, and the next pass may look again while the signal holds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from provisioner.core import overlap as ov
from provisioner.core.actions import Action, CoolDown, Launch, Terminate
from provisioner.core.models import Instance, InstanceState, Interruption, Market
from provisioner.core.rules import fits_budget, hourly_cost, spot_split
from provisioner.core.views import AttemptView, JobView, Location, Observations

#: the prior probability that a rebalance recommendation is followed by an interruption
FOLLOWED = 0.5
#: the interruption notice that would follow (AWS: two minutes), in hours
NOTICE_H = 2.0 / 60.0
#: how long the signalled zone is kept away from (at least; the policy's cooldown if longer)
COOLDOWN = timedelta(minutes=30)
REASON = "rebalance recommendation"


def split(obs: Observations) -> tuple[Observations, dict[str, Interruption]]:
    """``obs`` without the rebalance recommendations, and those by instance id."""
    signals = {x.instance_id: x for x in obs.interruptions if x.kind == "rebalance"}
    if not signals:
        return obs, signals
    rest = tuple(x for x in obs.interruptions if x.kind != "rebalance")
    return replace(obs, interruptions=rest), signals


def running_at(keep: Instance, locs: list[Location], avail: np.ndarray) -> int:
    """The index of the spot option ``keep`` runs in (-1: none), marked available: capacity
    is there, even in a zone cooled since it launched (a look's replacement lost in its
    overlap hands back to it: it stays, as the simulator's replay has it)."""
    # by zone, the provider's first: a sim's instance names "sim", its offers the cloud
    here = [i for i, loc in enumerate(locs) if loc[1] == keep.zone]
    i = next((i for i in here if locs[i][0] == keep.provider), here[0] if here else -1)
    if i >= 0:
        avail[i] = True
    return i


def look_value(
    job: JobView, keep: Instance, od_price: float | None, new_price: float
) -> tuple[float, float]:
    """(expected saving, expected cost) in dollars of a look made now on a recommendation."""
    co = job.changeover_h
    lost_h = max(0.0, co - NOTICE_H)
    if job.work_total_h is not None:
        lost_h = min(lost_h, max(0.0, job.work_total_h - job.work_done_h))
    price = od_price if od_price is not None else new_price
    return FOLLOWED * lost_h * price, (1.0 - FOLLOWED) * ov.overlap_usd(job, keep)


def eligible(
    job: JobView, keep: Instance | None, signal: Interruption | None, now: datetime
) -> bool:
    """Whether a recommendation on ``keep`` may start a look (see the module)."""
    cur = job.current
    if signal is None or keep is None or cur is None:
        return False
    if keep.id != cur.instance_id and cur.state in (None, InstanceState.RUNNING):
        return False  # the current attempt is another instance's (a switch in flight)
    if keep.market is not Market.SPOT or job.policy.resources.nodes != 1:
        return False
    if job.restarts >= job.policy.restart.max_restarts:
        return False
    left = None if job.work_total_h is None else job.work_total_h - job.work_done_h
    if left is not None and left <= job.changeover_h:
        return False
    return ov.settled(job, keep, now)


def decide_with(
    job: JobView,
    obs: Observations,
    now: datetime,
    t: Any,
    signals: Mapping[str, Interruption],
    decide_on: Callable[[JobView, Any], list[Action]],
) -> list[Action]:
    """decide()'s last step with the early signals: the look on a recommendation for
    ``t.keep`` (:func:`look`) where one is worth it, else ``decide_on(job, t)`` (the strategy's
    choice). A look refused for capacity leaves the daemon a failed attempt as the current
    one; the strategy sees the running instance's attempt as current instead, as the simulator
    has it (a refused launch makes no attempt there)."""
    job = _after_refusal(job, t.keep, obs, signals)
    out = look(job, obs, now, t, signals, decide_on)
    return out if out is not None else decide_on(job, t)


def _after_refusal(
    job: JobView, keep: Instance | None, obs: Observations, signals: Mapping[str, Interruption]
) -> JobView:
    cur = job.current
    if keep is None or keep.id not in signals or cur is None or keep.market is not Market.SPOT:
        return job
    if cur.instance_id is not None or cur.state is not InstanceState.TERMINATED:
        return job
    if (keep.attempt or 0) >= cur.attempt:
        return job
    here = [p for p in spot_split(job.policy, obs.candidates).spot if p.offer.location == keep.zone]
    if here:
        placed = here[0]
    else:  # its zone is cooled down: the planner left it out; the look's offer, moved there
        price = keep.price_per_hour or cur.placement.price_per_hour
        offer = replace(cur.placement.offer, region=keep.region, zone=keep.zone, spot_price=price)
        placed = replace(cur.placement, offer=offer, market=Market.SPOT, price_per_hour=price)
    was = AttemptView(keep.attempt or 0, placed, keep.id, InstanceState.RUNNING, keep.launched_at)
    return replace(job, current=was)


def look(
    job: JobView,
    obs: Observations,
    now: datetime,
    t: Any,
    signals: Mapping[str, Interruption],
    decide_on: Callable[[JobView, Any], list[Action]],
) -> list[Action] | None:
    """The look on a recommendation for ``t.keep`` (decide()'s triaged situation): a CoolDown
    of the signalled zone and a Launch replacing it; None: none (or none worth it).
    ``decide_on(job, situation)``: what decide() does in a situation (here: ``t`` with the
    instance gone, its zone kept away, the CoolDown taken)."""
    keep = t.keep
    signal = signals.get(keep.id) if keep is not None else None
    if t.notice_until is not None or t.handing_over is not None:
        return None  # a notice is overlapped as such; a switch in flight: no third instance
    if not eligible(job, keep, signal, now):
        return None
    assert keep is not None and signal is not None and job.current is not None
    offer = job.current.placement.offer  # the offers' provider (a sim's instance says "sim")
    loc = (offer.provider, offer.location if keep.id == job.current.instance_id else keep.zone)
    until = now + max(COOLDOWN, job.policy.restart.zone_cooldown)
    cooled, acts = dict(t.cooled), list(t.actions)
    if cooled.get(loc) is None or cooled[loc] < until:
        cooled[loc] = until
        acts.append(CoolDown(loc[0], loc[1], until, f"{REASON}: replace elsewhere"))
    out = decide_on(job, replace(t, actions=acts, keep=None, cooled=cooled))
    new = [a for a in out if isinstance(a, Launch)]
    if len(new) != 1 or not all(isinstance(a, Launch | CoolDown | Terminate) for a in out):
        return None
    if any(isinstance(a, Terminate) and a.instance_id == keep.id for a in out):
        return None
    p = new[0].placement
    od = [q for _, q in spot_split(job.policy, obs.candidates).od]
    gain, cost = look_value(job, keep, od[0].price_per_hour if od else None, hourly_cost(p))
    if gain <= cost:
        return None
    left_h = None
    if job.work_total_h is not None:
        left_h = max(0.0, job.work_total_h - job.work_done_h) + job.changeover_h
    if not fits_budget(
        job.policy, job.spent_usd + ov.overlap_usd(job, keep), hourly_cost(p), left_h
    ):
        return None
    why = (
        f"; {REASON} for {keep.id} ({signal.at:%H:%M:%S}): made before break, "
        f"expected saving ${gain:.2f} > ${cost:.2f} overlap risk"
    )
    launch = Launch(p, new[0].attempt, new[0].reason + why, replaces=keep.id)
    return [launch if a is new[0] else a for a in out]
