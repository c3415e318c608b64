"""The decision after the triage (:mod:`provisioner.core.decide`): the gate
(:mod:`~provisioner.core.decide.gate`), a running price over its cap
(:mod:`~provisioner.core.decide.pricecap`), held capacity, then the strategy's market and zone
(:mod:`provisioner.core.strategies`, its view: :mod:`~provisioner.core.decide.stepview`) and
the launch it leads to, within the budget (:mod:`provisioner.core.admission`). A rebalance
recommendation's look (:mod:`~provisioner.core.decide.signals`) re-enters
:func:`decide_on`. Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import numpy as np

from provisioner.core import admission as adm
from provisioner.core import availability as av
from provisioner.core import looks as lk
from provisioner.core import overlap as ov
from provisioner.core import reserved as rsv
from provisioner.core import strategies as st
from provisioner.core.actions import (
    Action,
    Launch,
    Terminate,
    Wait,
)
from provisioner.core.decide import pricecap as pc
from provisioner.core.decide import signals as sig
from provisioner.core.decide import stepview as sv
from provisioner.core.decide.gate import Situation, budget_out, gate, stop_all
from provisioner.core.models import Market, Placement
from provisioner.core.rules import (
    capped,
    launch_price,
    launchable,
    placement_key,
    spot_split,
)
from provisioner.core.states import Cause, InterruptionKind
from provisioner.core.strategies import NONE, ON_DEMAND, SPOT, Strategy
from provisioner.core.views import (
    JobView,
    Location,
    Observations,
    ZoneHistory,
    cooldown_over,
)
from provisioner.core.zone_priors import prior_life_h

#: a spot location with nothing seen yet (one shared, immutable record)
NO_HISTORY = ZoneHistory()


def _hours(delta: timedelta) -> float:
    return delta.total_seconds() / 3600.0


def loc_of(p: Placement) -> Location:
    return (p.offer.provider, p.offer.location)


def _describe(p: Placement) -> str:
    o = p.offer
    return f"{p.market.value} {o.provider}:{o.location} {o.instance_type} ${launch_price(p):.4g}/h"


def _strategy_for(job: JobView, name: str | None) -> Strategy:
    return st.get_strategy(name or job.strategy or rsv.strategy_for(job.policy.market.names))


def decide_on(
    job: JobView, obs: Observations, now: datetime, t: Situation, strategy: str | None
) -> list[Action]:
    """The rules after the triage: the gate, a running price over the cap, held capacity,
    then the strategy's market and the launch it leads to."""
    gated = gate(job, obs, now, t)
    if gated is not None:
        return gated
    over = pc.over_cap(job, obs, t.keep)  # its price passed the cap: it moves or stops
    if over is not None:
        t = pc.keep_away(job, t, now, over)
        if t.handing_over is not None:  # a replacement, over the cap before it took over:
            # stopped, and the instance it was to replace decided on as the one that works
            # (itself held to its cap: moved again, or kept)
            works = t.handing_over
            end = Terminate(over.instance.id, f"{over.why}; {works.id} works on", Cause.OVER_CAP)
            back = replace(t, actions=[*t.actions, end], keep=works, handing_over=None)
            return decide_on(job, obs, now, back, strategy)
    if job.policy.allows_reserved:  # held capacity first: paid for whether used or not
        on_held = _held(job, obs, now, t, over is not None)
        if on_held is not None:
            return on_held
    return _by_strategy(job, obs, now, t, over, strategy)


@dataclass
class _Spot:
    """The spot options as the strategy sees them: the re-checked candidates (and the
    running one), whether each may launch now, their locations and launch prices, what runs
    (``running``: a strategy's market code) and which option it is (``cur_i``; -1: none)."""

    spot: list[Placement]
    avail: np.ndarray
    od: list[Placement]
    locs: list[Location]
    prices: list[float]
    running: int = NONE
    cur_i: int = -1


def _spot_now(
    job: JobView, obs: Observations, now: datetime, t: Situation, over: pc.OverCap | None
) -> _Spot:
    """The options, with the instance that runs among them: a spot one's own capacity is
    there (at its price; over the cap: its price is not)."""
    policy, keep, cur = job.policy, t.keep, job.current
    spot, avail, od, locs, prices = _options(job, obs, now, t.cooled)
    avail = lk.open_zones(job, keep, locs, avail, now)  # looks due (from a working instance)
    o = _Spot(spot, avail, od, locs, prices)
    if keep is None:
        return o
    o.running = SPOT if keep.market is Market.SPOT else ON_DEMAND
    if o.running == SPOT and cur is not None and keep.id == cur.instance_id:
        o.cur_i = next(
            (i for i, p in enumerate(spot) if placement_key(p) == placement_key(cur.placement)),
            -1,
        )
        if o.cur_i < 0 and launchable(policy, cur.placement) is None:
            spot.append(capped(policy, cur.placement))
            locs.append(loc_of(spot[-1]))
            prices.append(launch_price(spot[-1]))
            o.cur_i, o.avail = len(spot) - 1, np.append(o.avail, True)
        if o.cur_i >= 0 and over is None:
            o.avail[o.cur_i] = True  # it is running: capacity is there (at its price)
    elif o.running == SPOT:  # a replacement lost in its overlap: it took over again
        o.cur_i = sig.running_at(keep, locs, o.avail)
    if over is not None and o.cur_i >= 0:
        o.avail[o.cur_i] = False  # its capacity is there, its price is not
    return o


def _by_strategy(
    job: JobView,
    obs: Observations,
    now: datetime,
    t: Situation,
    over: pc.OverCap | None,
    strategy: str | None,
) -> list[Action]:
    """The strategy's market (spot, on-demand or wait) and, on spot, its zone; then the
    launch (or why none)."""
    keep, cur = t.keep, job.current
    alive = [x for x in (keep, t.handing_over) if x is not None]
    o = _spot_now(job, obs, now, t, over)
    spot, avail, od = o.spot, o.avail, o.od
    ages = sv.ages(obs, now, o.locs, avail)
    known = obs.spot_history
    hist = [known.get(loc) or NO_HISTORY for loc in o.locs] if known else [NO_HISTORY] * len(o.locs)
    base = od[0].price_per_hour if od else 0.0
    saving = [max(0.0, base - price) for price in o.prices]
    seed = prior_life_h(obs.zone_priors, [p.offer for p in spot])  # None: no prior known
    p_up, life, score = av.for_options(hist, avail, ages, np.asarray(saving) if od else None, seed)
    strat = _strategy_for(job, strategy)
    state = sv.state(job, now, o.running, spot, avail, od, ages, (p_up, life))
    wants = strat.want(state)
    wish = int(np.asarray(wants)[0])
    choice = int(st.choose_market(strat, state, wants)[0])
    if job.deadline is None or job.work_total_h is None:
        choice = st.unpaced_choice(strat, state, bool(od))
    if choice == ON_DEMAND and not od:
        choice = SPOT if avail.any() else NONE
    why = sv.why(strat, state, wish, choice)
    if choice == NONE:
        stop = stop_all(alive, f"waiting: {why}", Cause.OVER_CAP if over else Cause.WAITING)
        return [*t.actions, *stop, Wait(None, f"waiting: {why}")]
    if choice == SPOT:
        last = cur.placement if cur is not None and cur.placement.market is Market.SPOT else None
        last_i = next((i for i, p in enumerate(spot) if last and loc_of(p) == loc_of(last)), -1)
        pick = int(
            strat.pick_zone(
                avail[None, :],
                ages[None, :],
                np.asarray([o.cur_i]),
                np.asarray([last_i]),
                score=score[None, :],
            )[0]
        )
        if pick == o.cur_i:
            if over is not None:
                return pc.stop(over, t.actions, f"no spot placement under it ({why})")
            return [*t.actions, Wait(None, f"staying on {_describe(spot[pick])}: {why}")]
        ordered = [spot[pick]] + [p for i, p in enumerate(spot) if i != pick and avail[i]]
    elif o.running == ON_DEMAND:
        return [*t.actions, Wait(None, f"staying on on-demand: {why}")]
    else:
        ordered = od
    return _launch(job, obs, now, t, over, ordered, why)


def _launch(
    job: JobView,
    obs: Observations,
    now: datetime,
    t: Situation,
    over: pc.OverCap | None,
    ordered: list[Placement],
    why: str,
) -> list[Action]:
    """The first of ``ordered`` that may be launched now (restarts left, no switch in flight,
    not passed over, within the budget): made before break from a settled instance, else
    the ones alive stopped first; or why none."""
    policy, keep = job.policy, t.keep
    alive = [x for x in (keep, t.handing_over) if x is not None]
    if job.restarts >= policy.restart.max_restarts:
        if over is not None:
            return pc.stop(over, t.actions, "restarts exhausted")
        return [*t.actions, Wait(None, f"restarts exhausted: keeping the instance we have ({why})")]
    if t.handing_over is not None:  # one switch at a time: never a third instance
        old = t.handing_over.id
        return [*t.actions, Wait(None, f"handing over from {old}; then: {why}")]
    # make before break: the running instance works on (and bills) through the changeover
    mbb = keep is not None and ov.settled(job, keep, now)  # a gang's unit too
    # passed over: the launch-call budget spent, a look that does not pay (core.looks)
    # (a move off a price over the cap is no look: it is made whatever it saves)
    looking = keep if mbb and over is None else None
    passed = [lk.pass_over(job, looking, p, now, why) for p in ordered]
    # the budget (core.admission, the rule plan applies too): what is spent, what instances
    # under a notice bill until they go, a switch's overlap, and the launch's least charge
    # (billing minimum, one pass) or the work left on it, whichever is more
    standing = adm.Standing.of(job, _draining_usd(job, obs, now))
    for p in (p for p, w in zip(ordered, passed, strict=True) if w is None):
        overlap_usd = ov.overlap_usd(job, keep, now, p) if mbb else 0.0
        more = replace(standing, committed_usd=standing.committed_usd + overlap_usd)
        if adm.budget_refusal(policy, p, more) is not None:
            continue
        if mbb and keep is not None:
            n = job.attempt + 1
            how = f"make before break: {keep.id} runs until attempt {n} takes over"
            if over is not None:
                how = f"{over.why}; {how}"
            return [
                *t.actions,
                Launch(p, n, f"{_describe(p)} (rank {p.rank}): {why}; {how}", replaces=keep.id),
            ]
        cause, note = (Cause.OVER_CAP, f"{over.why}; ") if over else (Cause.SWITCHED, "")
        stop = stop_all(alive, f"{note}switching to {p.market.value}: {why}", cause)
        return [
            *t.actions,
            *stop,
            Launch(p, job.attempt + 1, f"{_describe(p)} (rank {p.rank}): {note}{why}"),
        ]
    if over is not None:
        held = next((w.reason for w in passed if w is not None), "no launch fits the budget")
        return pc.stop(over, t.actions, held)
    if any(passed):
        return [*t.actions, next(w for w in passed if w is not None)]
    if alive:
        return [*t.actions, Wait(None, "no launch fits the remaining budget: keeping the instance")]
    return t.actions + budget_out(
        policy, [], "no launch fits the remaining budget", Cause.NO_LAUNCH_FITS
    )


def _held(
    job: JobView, obs: Observations, now: datetime, t: Situation, over: bool
) -> list[Action] | None:
    """Held capacity before the strategy (None: the strategy decides). A job on a reservation
    stays there (never preempted; a block's end comes as a notice, handled before this). With
    nothing running, the first usable reservation is launched into; from spot or on-demand, a
    move into one is made before break where what it saves over the work left (or the time
    the reservation lasts) pays for the overlap. Usable: started, free, its end notice at
    least a changeover away, no recent "no capacity" from it."""
    policy, keep = job.policy, t.keep
    if keep is not None and keep.market is Market.RESERVED:
        times = rsv.block_times(keep.tags)
        return [
            *t.actions,
            Wait(
                None if times is None else times[0],
                "staying on reserved capacity (marginal $0/h)"
                + ("" if times is None else f"; its block's notice is due {times[0].isoformat()}"),
            ),
        ]
    if t.handing_over is not None or job.restarts >= policy.restart.max_restarts or over:
        return None
    split = spot_split(policy, obs.candidates)
    if not split.reserved:
        return None
    busy = {(e.provider, e.location, e.instance_type, e.market) for e in obs.capacity_errors}
    mbb = keep is not None and ov.settled(job, keep, now)
    if keep is not None and not mbb:
        return None  # one still booting: the strategy's (it is kept, or stopped first)
    standing = adm.Standing.of(job, _draining_usd(job, obs, now))
    for p in split.reserved:
        r = p.reservation
        assert r is not None  # launchable() checked it
        o = p.offer
        if rsv.usable(r, now, job.changeover_h) is not None:
            continue
        if (o.provider, o.location, o.instance_type, Market.RESERVED) in busy:
            continue
        overlap = 0.0
        if keep is not None:
            overlap = ov.overlap_usd(job, keep, now, p)
            due = rsv.notice_at(r)
            span_h = math.inf if due is None else _hours(due - now) - job.changeover_h
            left_h = math.inf if job.work_total_h is None else job.work_total_h - job.work_done_h
            price = keep.price_per_hour
            if price is None and job.current is not None:
                price = launch_price(job.current.placement)
            saving = (price or 0.0) * max(0.0, min(span_h, left_h)) * p.nodes
            if not saving > overlap:
                continue
        more = replace(standing, committed_usd=standing.committed_usd + overlap)
        if adm.budget_refusal(policy, p, more) is not None:
            continue
        n = job.attempt + 1
        why = f"{_describe(p)} (rank {p.rank}): held capacity, reservation {r.id}"
        if keep is not None:
            how = f"make before break: {keep.id} runs until attempt {n} takes over"
            return [*t.actions, Launch(p, n, f"{why}; {how}", replaces=keep.id)]
        return [*t.actions, Launch(p, n, why)]
    return None


def _options(
    job: JobView, obs: Observations, now: datetime, cooled: Mapping[Location, datetime]
) -> tuple[list[Placement], np.ndarray, list[Placement], list[Location], list[float]]:
    """Re-checked candidates in the planner's order: spot (with whether each may launch now:
    no recent capacity error, zone not cooled down; and each one's location and launch
    price) and on-demand (no recent capacity error)."""
    split = spot_split(job.policy, obs.candidates)
    spot, locs, prices = list(split.spot), list(split.locs), list(split.prices)
    if not obs.capacity_errors and not cooled:  # the usual case: every candidate may launch
        return spot, np.ones(len(spot), dtype=bool), [p for _, p in split.od], locs, prices
    busy = {(e.provider, e.location, e.instance_type, e.market) for e in obs.capacity_errors}
    avail: list[bool] = []
    for key, p, loc in zip(split.spot_keys, split.spot, split.locs, strict=True):
        # a cooldown keeps spot away; on-demand is not preempted
        until = cooled.get(loc) or cooled.get((p.offer.provider, p.offer.region))
        avail.append(key not in busy and (until is None or cooldown_over(until, now)))
    od = [p for key, p in split.od if key not in busy]
    return spot, np.asarray(avail, dtype=bool), od, locs, prices


def _draining_usd(job: JobView, obs: Observations, now: datetime) -> float:
    """What the job's instances under a notice bill until their capacity goes."""
    ends = {
        x.instance_id: ov.notice_deadline(x)
        for x in obs.interruptions
        if x.kind == InterruptionKind.NOTICE
    }
    mine = [i for i in obs.instances if i.job_id in (None, job.id) and i.state.alive]
    return adm.draining_usd(job, mine, ends, now)
