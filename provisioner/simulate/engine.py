"""The ``decide()``-driven simulator: the daemon's own decision path over a virtual clock.

Each step it builds the :class:`~provisioner.core.decide.JobView` and
:class:`~provisioner.core.decide.Observations` a reconciler would (the trace source of the one
input contract, :mod:`provisioner.core.views`; the changeover is the scenario's, by default
:data:`~provisioner.core.views.CHANGEOVER_H`, as in the daemon), from the simulated world (one
spot offer per trace zone, one on-demand offer, the instance it launched), calls
:func:`~provisioner.core.decide.decide`, carries out the actions, and advances the clock by one
step: changeover first, then progress, billed until the job is done.

decide() is told what a daemon can know (the default, ``observed=True``): the launches the
simulated cloud refused for capacity (as they happen, for
:data:`~provisioner.core.views.CAPACITY_ERRORS_WITHIN`) and the preemptions, and capacity is
taken to be up in a zone since the latest of these there (as :mod:`provisioner.control.inputs`
does). So the simulator measures what the daemon does (``tests/e2e/test_equivalence.py``).
``observed=False`` makes the simulated cloud an oracle prober instead: every zone without
spot capacity in a step is reported as a capacity error, and zones with capacity come with how
long it has been there (since the window start at most): an upper bound no daemon can reach.

A preemption loses the progress since the last checkpoint (periodic, every
``Scenario.checkpoint_s`` of progress; a voluntary stop checkpoints first). With
``Scenario.notice_s``, capacity that goes is served a notice first (the agent checkpoints,
the instance runs and is billed until it runs out) and decide() sees it; one long enough
(``Scenario.boot_s``) is overlapped: the replacement's changeover runs during the notice,
both billed, the old one's work kept until its capacity goes (an upper bound on its bill: the
daemon terminates it as soon as its checkpoint is in).

A switch from a running instance is made before break (decide() launches first, ``replaces``
naming it): the old instance works on, billed, until decide() stops it once the new one's
changeover is over; a launch refused for capacity leaves it running (``refusals`` counts them);
a new spot instance lost in the overlap hands back to it. ``overlap_hours``: the time two
instances were billed at once.

A gang (``Scenario.nodes`` > 1) is what decide() sees after :func:`provisioner.core.gang.fold`:
one unit per attempt, so the engine hands decide() units directly (the fold leaves them be).
The candidates carry ``nodes`` (per-node prices, as the planner's do, so budget rules see the
gang's hourly cost), the policy simulated is given ``resources.nodes = nodes`` (decide() then
replaces a gang under notice after it, and makes its planned switches before break, a new gang
beside the old one until it has taken over), the caller's ``avail`` is the gang's (at least
``nodes`` instances in the zone) and every hour is billed ``nodes`` times.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from policies.model import Policy
from provisioner.core.decide import (
    Action,
    AttemptView,
    CapacityError,
    CoolDown,
    Fail,
    Finish,
    JobView,
    Launch,
    Observations,
    Terminate,
    decide,
)
from provisioner.core.looks import recent_calls, schedule
from provisioner.core.models import (
    TAG_ATTEMPT,
    TAG_JOB,
    Instance,
    InstanceState,
    Interruption,
    Market,
)
from provisioner.core.rebalance import grid
from provisioner.core.reserved import block_tags, block_times
from provisioner.core.strategies import NONE, ON_DEMAND, SPOT
from provisioner.core.views import (
    CAPACITY_ERRORS_WITHIN,
    Call,
    SpotEvent,
    spot_up_since,
    step_h,
    zone_history,
)
from provisioner.simulate.replay import MAX_PASSES, total_steps
from provisioner.simulate.scenario import RunStats, Scenario
from provisioner.simulate.world import HELD_TAG, World

__all__ = ["EPOCH", "Timeline", "World", "gang_policy", "run_window", "run_windows"]

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Timeline:
    """Per step, for plots: time (h), spot capacity per zone, market and zone chosen, cost."""

    t_h: list[float] = field(default_factory=list)
    avail: list[list[bool]] = field(default_factory=list)
    market: list[int] = field(default_factory=list)
    zone: list[int] = field(default_factory=list)
    cost: list[float] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)


def run_window(
    policy: Policy,
    avail: np.ndarray,
    sc: Scenario,
    world: World,
    *,
    strategy: str | None = None,
    spot_prices: np.ndarray | None = None,
    start: datetime = EPOCH,
    timeline: Timeline | None = None,
    horizon_steps: int | None = None,
    actions: list[tuple[datetime, Action]] | None = None,
    observed: bool = True,
) -> dict[str, Any]:
    """Simulate one job from ``start`` on ``avail`` (steps, zones): one row of results.

    ``actions``, where given, receives each of decide()'s actions as it is carried out, with
    the time (a Launch that the simulated cloud refused for capacity is not one).
    ``observed``: decide() is told only what the daemon could observe (the default); False:
    the oracle (see the module)."""
    if avail.ndim == 1:
        avail = avail[:, None]
    policy = gang_policy(policy, sc.nodes)
    n_avail, n_z = avail.shape
    step = float(sc.step_s)
    job_id = "sim"
    deadline = start + timedelta(seconds=sc.deadline_s)
    k_max = horizon_steps if horizon_steps is not None else total_steps(sc)
    inst: Instance | None = None
    cur: AttemptView | None = None
    attempt = restarts = launches = preemptions = 0
    cooldowns: dict[tuple[str, str], datetime] = {}
    done_s = ckpt_s = lost_s = 0.0
    cost = od_s = spot_s = od_work = spot_work = 0.0
    held_s = 0.0  # hours on held capacity (billed $0 marginal: neither spot nor on-demand)
    finish_s: float | None = None
    failed = ""
    age = np.zeros(n_z)
    prev = np.zeros(n_z, dtype=bool)
    after_preemption = False
    seen_down: dict[tuple[str, str], datetime] = {}  # observed: the latest outage seen
    notice_until: datetime | None = None  # the instance's notice: its capacity goes then
    drain: Instance | None = None  # overlap: the instance under notice, replaced
    drain_until = start
    planned = False  # the drain is a switch made before break (no notice): decide() ends it
    overlap_s = 0.0
    refusals = 0
    notice = timedelta(seconds=sc.notice_s)
    refused: list[CapacityError] = []  # observed: launches refused for capacity
    events: list[SpotEvent] = []  # what each zone has shown so far (views.zone_history)
    rb = sc.rebalance if sc.rebalance is not None and sc.rebalance.on else None
    rb_start = None if rb is None else grid(rb, avail, step, world.zones)  # early signals
    calls: list[Call] = []  # launch calls sent (the policy's hourly call budget)

    for k in range(k_max):
        t = k * step
        now = start + timedelta(seconds=t)
        av = avail[k] if k < n_avail else np.zeros(n_z, dtype=bool)
        age = np.where(av & prev, age + step, 0.0)
        prev = av
        prices = spot_prices[min(k, len(spot_prices) - 1)] if spot_prices is not None else None
        if drain is not None and not planned and now >= drain_until:  # its notice ran out
            preemptions += 1
            restarts += 1
            seen_down[(world.provider, drain.zone)] = drain_until
            drain = None
        if (
            drain is not None
            and planned
            and drain.market is Market.SPOT
            and not av[world.zones.index(drain.zone)]
        ):  # lost while handing over
            preemptions += 1
            seen_down[(world.provider, drain.zone)] = now
            events.append((now, (world.provider, drain.zone), "lost"))
            drain = None
        ending = None if inst is None else block_times(inst.tags)  # on a capacity block
        if inst is not None and ending is not None:
            if notice_until is None and now >= ending[0]:  # its end's notice, known at launch
                notice_until = ending[1]
                ckpt_s = done_s  # the agent checkpoints on it
            if notice_until is not None and now >= notice_until:  # the block takes it back
                notice_until = None
                lost_s += done_s - ckpt_s
                done_s = ckpt_s
                preemptions += 1
                after_preemption = True
                if timeline is not None:
                    timeline.events.append((t / 3600.0, f"capacity block ended in {inst.zone}"))
                cur = _ended(cur, InstanceState.PREEMPTED, now)
                inst = None
                if drain is not None and planned:
                    inst, drain = drain, None
        if inst is not None and inst.market is Market.SPOT:
            z = world.zones.index(inst.zone)
            if not av[z] and notice_until is None and sc.notice_s > 0:  # the notice is served
                notice_until = now + timedelta(seconds=sc.notice_s)
                ckpt_s = done_s  # the agent checkpoints on it
            if (notice_until is None and not av[z]) or (
                notice_until is not None and now >= notice_until
            ):  # preempted at the step boundary: lose what was not checkpointed
                notice_until = None
                lost_s += done_s - ckpt_s
                done_s = ckpt_s
                preemptions += 1
                after_preemption = True
                if timeline is not None:
                    timeline.events.append((t / 3600.0, f"preempted in {inst.zone}"))
                cur = _ended(cur, InstanceState.PREEMPTED, now)
                seen_down[(world.provider, inst.zone)] = now
                events.append((now, (world.provider, inst.zone), "lost"))
                inst = None
                if drain is not None and planned:  # lost while taking over: the old one stays
                    inst, drain = drain, None
        used = {
            x.tags.get(HELD_TAG, ""): 1
            for x in (inst, drain)
            if x is not None and x.market is Market.RESERVED
        }
        cands = world.candidates(sc, prices, policy.allows_reserved, used)
        if observed:  # the daemon's memory of refused launches
            refused = [e for e in refused if now - e.at <= CAPACITY_ERRORS_WITHIN]
            errors = tuple(refused)
        else:  # the oracle: every zone without capacity
            errors = tuple(
                CapacityError(world.provider, zone, world.instance_type, Market.SPOT, now)
                for z, zone in enumerate(world.zones)
                if not av[z]
            )
        # the trace's outages: a zone up for age[z] seconds was last seen down just before
        locs = [(world.provider, zone) for zone in world.zones]
        up_since = (
            spot_up_since(locs, seen_down, start)
            if observed
            else spot_up_since(
                locs,
                {loc: now - timedelta(seconds=float(age[z])) for z, loc in enumerate(locs)},
                start,
                down=[loc for z, loc in enumerate(locs) if not av[z]],
            )
        )
        for _ in range(MAX_PASSES):
            job = JobView(
                id=job_id, policy=policy, submitted_at=start, deadline=deadline,
                work_total_h=sc.work_s / 3600.0, work_done_h=ckpt_s / 3600.0, restarts=restarts,
                attempt=attempt, spent_usd=cost, current=cur, cooldowns=dict(cooldowns),
                changeover_h=sc.overhead_s / 3600.0, step_h=step_h(step),
                checkpoint_on_notice=sc.checkpoint_s <= 0, boot_s=sc.boot_s,
                looks=schedule(events), launch_calls=recent_calls(calls, now),
                billing={world.provider: sc.billing},
            )  # fmt: skip
            notes = tuple(
                Interruption(x.id, world.provider, x.zone, "notice", until - notice, until)
                for x, until in ((drain, drain_until), (inst, notice_until))
                if x is not None and until is not None and block_times(x.tags) is None
            )  # a block's end: decide() tells it from the instance's tags
            if rb_start is not None and inst is not None and inst.market is Market.SPOT:
                notes = (*notes, *_rebalance(rb_start, k, inst, world, start))
            obs = Observations(
                instances=tuple(x for x in (drain, inst) if x is not None),
                interruptions=notes,
                candidates=cands,
                capacity_errors=errors,
                spot_up_since=up_since,
                spot_history=zone_history(events, now),
            )
            again = False
            for action in decide(job, obs, now, strategy=strategy):
                if (
                    isinstance(action, Terminate)
                    and inst is not None
                    and action.instance_id == inst.id
                ):
                    ckpt_s = done_s  # the agent checkpoints on a voluntary stop
                    if inst.market is Market.SPOT:
                        events.append((now, (world.provider, inst.zone), "stop"))
                    inst, notice_until = None, None
                    cur = _ended(cur, InstanceState.TERMINATED, now)
                elif isinstance(action, Terminate) and drain is not None:
                    if action.instance_id == drain.id and planned:  # the new one took over
                        if drain.market is Market.SPOT:
                            events.append((now, (world.provider, drain.zone), "stop"))
                        drain = None
                    elif action.instance_id == drain.id:  # its checkpoint is in: handed over
                        preemptions += 1
                        restarts += 1
                        drain = None
                elif isinstance(action, CoolDown):
                    cooldowns[(action.provider, action.location)] = action.until
                elif isinstance(action, Launch):
                    p = action.placement
                    calls.append((p.offer.provider, now))
                    if p.market is Market.SPOT and not av[world.zones.index(p.offer.zone)]:
                        err = CapacityError(
                            world.provider, p.offer.zone, world.instance_type, Market.SPOT, now
                        )
                        errors = (*errors, err)
                        refused.append(err)
                        refusals += 1
                        seen_down[(world.provider, p.offer.zone)] = now
                        events.append((now, (world.provider, p.offer.zone), "refused"))
                        if observed:
                            up_since = spot_up_since(locs, seen_down, start)
                        again = True
                        break
                    if action.replaces is not None and inst is not None and notice_until:
                        drain, drain_until, notice_until = inst, notice_until, None
                        planned = False
                    elif action.replaces is not None and inst is not None:  # before break
                        drain, planned = inst, True
                        drain_until = now + timedelta(seconds=sc.overhead_s)
                    attempt = action.attempt
                    launches += 1
                    if p.market is Market.SPOT:
                        events.append((now, (world.provider, p.offer.zone), "up"))
                    if after_preemption:
                        restarts += 1
                        after_preemption = False
                    tags = {TAG_JOB: job_id, TAG_ATTEMPT: str(attempt), **block_tags(p.reservation)}
                    if p.reservation is not None:
                        tags[HELD_TAG] = p.reservation.id
                    inst = Instance(
                        id=f"i-{attempt}", provider=p.offer.provider, region=p.offer.region,
                        zone=p.offer.zone, instance_type=p.offer.instance_type, market=p.market,
                        state=InstanceState.RUNNING, tags=tags,
                        launched_at=now, price_per_hour=p.price_per_hour,
                    )  # fmt: skip
                    cur = AttemptView(attempt, p, inst.id, InstanceState.RUNNING, launched_at=now)
                    if timeline is not None:
                        timeline.events.append((t / 3600.0, action.reason))
                elif isinstance(action, Finish | Fail):
                    failed = "" if isinstance(action, Finish) else action.reason
                if actions is not None:
                    actions.append((now, action))
            if not again:
                break
        if failed:
            break
        market = NONE if inst is None else (SPOT if inst.market is Market.SPOT else ON_DEMAND)
        busy = 0.0  # overlap: the instance under notice works on until its capacity goes
        if drain is not None:
            busy = max(0.0, min(step, (drain_until - now).total_seconds()))
            work = min(busy, sc.work_s - done_s)
            price = drain.price_per_hour or 0.0
            if prices is not None and drain.market is Market.SPOT:
                price = float(prices[world.zones.index(drain.zone)])
            if planned and work < busy - 1e-9:  # the work ends on the old one: billed to then
                busy = work
                finish_s = t + work
            cost += price * sc.nodes * busy / 3600.0
            overlap_s += busy
            if drain.market is Market.SPOT:
                spot_s += busy
                spot_work += work
            elif drain.market is Market.RESERVED:
                held_s += busy
            else:
                od_s += busy
                od_work += work
            done_s += work
            ckpt_s = done_s  # continuous on the notice; its last checkpoint hands over
        if finish_s is not None:  # finished on the instance handing over
            inst_cost = 0.0
            if inst is not None and inst.price_per_hour is not None:
                inst_cost = inst.price_per_hour
                if inst.market is Market.SPOT and prices is not None:
                    inst_cost = float(prices[world.zones.index(inst.zone)])
            cost += inst_cost * sc.nodes * busy / 3600.0  # the new one, billed alongside
            if inst is not None and inst.market is Market.SPOT:
                spot_s += busy
            elif inst is not None and inst.market is Market.RESERVED:
                held_s += busy
            elif inst is not None:
                od_s += busy
        elif inst is not None and inst.launched_at is not None:
            pend = max(0.0, sc.overhead_s - (now - inst.launched_at).total_seconds(), busy)
            span = step
            if notice_until is not None:  # under notice: runs until its capacity goes
                span = max(0.0, min(step, (notice_until - now).total_seconds()))
            progress = max(0.0, span - pend)
            remaining = sc.work_s - done_s
            ends = progress >= remaining - 1e-9
            billed = pend + remaining if ends else span
            progress = remaining if ends else progress
            price = inst.price_per_hour or 0.0
            if inst.market is Market.SPOT and prices is not None:
                price = float(prices[world.zones.index(inst.zone)])
            cost += price * sc.nodes * billed / 3600.0  # every node of a gang
            if market == SPOT:
                spot_s += billed
                spot_work += progress
            elif inst.market is Market.RESERVED:
                held_s += billed
            else:
                od_s += billed
                od_work += progress
            done_s += progress
            if sc.checkpoint_s > 0:
                ckpt_s += np.floor((done_s - ckpt_s) / sc.checkpoint_s + 1e-9) * sc.checkpoint_s
            else:
                ckpt_s = done_s
            if ends:
                finish_s = t + billed
        if timeline is not None:
            timeline.t_h.append(t / 3600.0)
            timeline.avail.append([bool(x) for x in av])
            timeline.market.append(market)
            timeline.zone.append(world.zones.index(inst.zone) if market == SPOT and inst else -1)
            timeline.cost.append(cost)
        if finish_s is not None:
            break
    missed = finish_s is None or finish_s > sc.deadline_s + 1e-6
    return {
        "cost": cost,
        "on_demand_hours": od_s / 3600.0,
        "spot_hours": spot_s / 3600.0,
        "on_demand_work_hours": od_work / 3600.0,
        "spot_work_hours": spot_work / 3600.0,
        "finish_hours": np.nan if finish_s is None else finish_s / 3600.0,
        "deadline_missed": missed,
        "launches": launches,
        "restarts": restarts,
        "preemptions": preemptions,
        "lost_work_hours": lost_s / 3600.0,
        "overlap_hours": overlap_s / 3600.0,
        "reserved_hours": held_s / 3600.0,
        "refusals": refusals,
        "failed": failed,
    }


def _rebalance(
    starts: np.ndarray, k: int, inst: Instance, world: World, start: datetime
) -> tuple[Interruption, ...]:
    """The rebalance recommendation served to ``inst`` at step ``k`` (the trace's model,
    :func:`provisioner.core.rebalance.grid`), as the agent reports it."""
    began = starts[k, world.zones.index(inst.zone)] if k < len(starts) else np.nan
    if np.isnan(began):
        return ()
    at = max(start + timedelta(seconds=float(began)), inst.launched_at or start)
    return (Interruption(inst.id, world.provider, inst.zone, "rebalance", at),)


def gang_policy(policy: Policy, nodes: int) -> Policy:
    """``policy`` with ``resources.nodes = nodes`` (itself when it says so already)."""
    if policy.resources.nodes == nodes:
        return policy
    res = policy.resources.model_copy(update={"nodes": nodes})
    return policy.model_copy(update={"resources": res})


def _ended(cur: AttemptView | None, state: InstanceState, at: datetime) -> AttemptView | None:
    return None if cur is None else replace(cur, state=state, ended_at=at)


def run_windows(
    policy: Policy,
    avail: np.ndarray,
    sc: Scenario,
    world: World,
    *,
    strategy: str | None = None,
    spot_prices: np.ndarray | None = None,
    observed: bool = True,
) -> RunStats:
    """:func:`run_window` over (windows, steps, zones), gathered like the replay's output."""
    if avail.ndim == 2:
        avail = avail[:, :, None]
    rows = [
        run_window(
            policy,
            avail[i],
            sc,
            world,
            strategy=strategy,
            spot_prices=None if spot_prices is None else spot_prices[i],
            observed=observed,
        )
        for i in range(avail.shape[0])
    ]
    col = lambda key, dtype=float: np.asarray([r[key] for r in rows], dtype=dtype)  # noqa: E731
    return RunStats(
        cost=col("cost"),
        od_hours=col("on_demand_hours"),
        spot_hours=col("spot_hours"),
        od_work_hours=col("on_demand_work_hours"),
        spot_work_hours=col("spot_work_hours"),
        finish_h=col("finish_hours"),
        missed=col("deadline_missed", bool),
        launches=col("launches", np.int64),
        preemptions=col("preemptions", np.int64),
        lost_work_hours=col("lost_work_hours"),
        overlap_hours=col("overlap_hours"),
        refusals=col("refusals", np.int64),
    )
