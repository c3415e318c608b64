"""A running spot instance whose price passed its bid cap (``bid_cap.enforce: daemon``).

Where the cap went with the launch as the cloud's maximum price, the cloud reclaims the
instance once its price passes it (a preemption like any other). Where it did not, the caller
reads the price in effect for the job's running spot instance (``Observations.spot_prices``)
and decide() holds the job to the cap itself: the instance's zone is kept away a while (the
policy's ``restart.zone_cooldown``, at least :data:`OVER_CAP_COOLDOWN`), the job moves, made
before break, to the best placement under the cap as it does for a look; where nothing can be
launched (the launch-call budget, restarts exhausted, the budget, the strategy waits) the
instance is stopped with cause ``over-cap``. Never is it kept running above the cap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from policies.model import Policy
from provisioner.core.actions import Action, CoolDown, Terminate, Wait
from provisioner.core.decide.gate import Situation
from provisioner.core.models import Instance, Market, Placement
from provisioner.core.rules import EPS_USD, fixed_spot_cap, policy_spot_cap, spot_cap
from provisioner.core.states import Cause
from provisioner.core.views import JobView, Observations

#: the least time a zone whose price passed the cap is kept away (a price that rose seldom
#: falls back within minutes)
OVER_CAP_COOLDOWN = timedelta(minutes=15)


@dataclass(frozen=True, slots=True)
class OverCap:
    """The job's running spot instance, what it pays now against its cap (USD/h), and the
    location (provider, zone) the strategy knows it by."""

    instance: Instance
    price: float
    cap: float
    location: tuple[str, str]

    @property
    def why(self) -> str:
        return f"the spot price ${self.price:.4g}/h passed the bid cap ${self.cap:.4g}/h"


def running_cap(policy: Policy, placement: Placement) -> float:
    """The cap a running spot instance is held to (inf: none): the one its launch was held to
    (the attempt's), else the policy's; a share of on-demand counts only where the on-demand
    price is known (an attempt's row keeps the price it runs at, not the on-demand one, and
    its launch's cap already holds that share)."""
    o = placement.offer
    if placement.bid_cap_per_hour is not None:
        return spot_cap(policy, placement)
    if o.price is not None:
        return policy_spot_cap(policy, o.gpu_count, o.price)
    return fixed_spot_cap(policy, o.gpu_count)


def _candidate(obs: Observations, keep: Instance) -> Placement | None:
    """The planner's spot candidate of ``keep``'s zone and type (a sim's instance names "sim",
    its offers the cloud it mimics)."""
    here = [
        p
        for p in obs.candidates
        if p.market is Market.SPOT
        and p.offer.zone == keep.zone
        and p.offer.instance_type == keep.instance_type
    ]
    return next((p for p in here if p.offer.provider == keep.provider), here[0] if here else None)


def over_cap(job: JobView, obs: Observations, keep: Instance | None) -> OverCap | None:
    """The job's working spot instance when the price read now is above its cap: the current
    attempt's (held to the cap its launch was), or an earlier one's that took over again when
    its replacement was lost (held to the policy's cap on its offer)."""
    cur = job.current
    if keep is None or cur is None or keep.market is not Market.SPOT or not obs.spot_prices:
        return None
    price = obs.spot_prices.get((keep.region, keep.zone, keep.instance_type))
    if price is None:
        return None
    if keep.id == cur.instance_id:
        placement = cur.placement
        cap = running_cap(job.policy, placement)
    else:
        placement = _candidate(obs, keep) or replace(cur.placement, bid_cap_per_hour=None)
        cap = running_cap(job.policy, replace(placement, bid_cap_per_hour=None))
    if math.isinf(cap) or price <= cap + EPS_USD:
        return None
    here = (placement.offer.provider, placement.offer.location)
    if keep.id != cur.instance_id and placement.offer.zone != keep.zone:
        here = (keep.provider, keep.zone)
    return OverCap(keep, price, cap, here)


def keep_away(job: JobView, t: Situation, now: datetime, over: OverCap) -> Situation:
    """The situation with the instance's zone cooled down (its capacity is there, its price
    is not), so the strategy looks elsewhere."""
    loc = over.location
    until = now + max(job.policy.restart.zone_cooldown, OVER_CAP_COOLDOWN)
    before = t.cooled.get(loc)
    if before is not None and before >= until:
        return t
    cool = CoolDown(loc[0], loc[1], until, f"{over.why}: keep spot away a while")
    return replace(t, actions=[*t.actions, cool], cooled={**t.cooled, loc: until})


def stop(over: OverCap, actions: list[Action], why: str) -> list[Action]:
    """Stop the instance instead of keeping it (``why``: what kept the job from moving)."""
    end = Terminate(over.instance.id, over.why, Cause.OVER_CAP)
    return [*actions, end, Wait(None, f"{over.why}; stopped: {why}")]
