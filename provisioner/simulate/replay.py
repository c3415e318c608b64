"""Vectorised replay: one strategy over many windows at once (the benchmark's fast path).

It runs the model of :mod:`provisioner.simulate.scenario` step by step with one numpy array
per quantity (one value per window), calling the strategy's own ``want``/``pick_zone`` code
through :func:`provisioner.core.strategies.choose_market`: the same rule ``decide()`` applies to
one job. ``tests/simulate/test_simulate.py`` checks on real and synthetic windows that this path and
the ``decide()``-driven simulator (:mod:`provisioner.simulate.engine`) give identical runs.

It assumes progress is saved continuously (no checkpoint interval) and constant prices; the
``decide()``-driven simulator handles checkpoint loss and per-step spot prices. A gang
(``Scenario.nodes``) is one unit on its gang availability (the caller's ``avail``: at least
``nodes`` instances in the zone), billed ``nodes`` times; the strategy sees per-node prices, as
in ``decide()``.

Like the engine, it tells the strategy what a daemon can know (``observed=True``, the
default): a zone counts as without capacity only for
:data:`~provisioner.core.views.CAPACITY_ERRORS_WITHIN` after a launch there was refused, and
capacity is up since the latest refusal or preemption seen there. A refused spot launch asks
the strategy again, up to the engine's ``MAX_PASSES`` a step. Switches are made before break as
in ``decide()`` (from an instance or a gang past its changeover; ``Scenario.make_before_break``
False: the old order, stop then launch, for comparison): the running instance works on and is
billed through the new one's changeover, a refused launch leaves it running, a new spot
instance lost in the overlap hands back to it, and no second switch starts meanwhile. The look
schedule and the launch-call budget (:mod:`provisioner.core.looks`,
``Scenario.launch_calls_per_hour``) and whether a look from on-demand pays
(``Scenario.billing``) are modelled as decide() applies them. ``observed=False``: the oracle
(every zone's capacity now, and how long it has lasted), an upper bound no daemon can reach.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from provisioner.core import looks as lk
from provisioner.core.availability import best_zone, lifetime_h, outage_h, zone_scores
from provisioner.core.decide import signals as sig
from provisioner.core.rebalance import grid
from provisioner.core.strategies import NONE, ON_DEMAND, SPOT, StepState, Strategy, choose_market
from provisioner.core.views import CAPACITY_ERRORS_WITHIN
from provisioner.simulate.scenario import RunStats, Scenario

#: decide() calls per step (a launch refused for capacity asks again): the engine's.
MAX_PASSES = 8


def total_steps(sc: Scenario) -> int:
    """Steps to simulate: to the deadline, plus room to finish on on-demand after a miss."""
    return sc.window_steps + int(np.ceil((sc.work_s + sc.overhead_s) / sc.step_s)) + 2


@dataclass(frozen=True)
class PerWindow:
    """Per-window values that override the scenario's (one job per window: the estimate
    replays every placement of a plan in one call). Arrays of one value per window."""

    work_s: np.ndarray
    deadline_s: np.ndarray
    price_on_demand: np.ndarray
    price_spot: np.ndarray


def _look_pays(
    sc: Scenario, age_s: np.ndarray, left_s: np.ndarray, p_od: object, p_spot: object
) -> np.ndarray:
    """:func:`provisioner.core.overlap.look_pays` per window: the saving on the work left
    against the on-demand instance billed through the changeover and to the end of its
    billing at the handover, plus spot's billing minimum."""
    rule = sc.billing
    at = age_s + sc.overhead_s  # the on-demand instance's age at the handover
    inc = float(rule.increment_s)
    billed = np.maximum(np.ceil(np.maximum(at, 0.0) / inc - 1e-9) * inc, rule.minimum_s)
    tail = np.maximum(0.0, billed - at)
    cost = np.asarray(p_od) * (sc.overhead_s + tail) / 3600.0
    cost = cost + np.asarray(p_spot) * rule.minimum_s / 3600.0
    saving = (np.asarray(p_od) - np.asarray(p_spot)) * np.maximum(0.0, left_s) / 3600.0
    return np.asarray(saving > cost)


def replay(
    strategy: Strategy,
    avail: np.ndarray,
    sc: Scenario,
    *,
    observed: bool = True,
    per_window: PerWindow | None = None,
    protect_s: float | np.ndarray = 0.0,
    max_steps: int | None = None,
    on_demand: bool = True,
    zone_keys: list[list[str]] | None = None,
) -> RunStats:
    """Simulate ``strategy`` on ``avail`` (windows, steps, zones) of booleans.

    Steps beyond ``avail``'s second axis count as no spot capacity. ``observed``: what the
    strategy is told (see the module). ``per_window``: work, deadline and prices per window
    (``sc``'s otherwise). ``protect_s``: a spot instance younger than this is not reclaimed
    (Alibaba's protection period; 0 elsewhere; one value or one per window). ``max_steps``: the steps to simulate (default
    :func:`total_steps`). ``on_demand=False``: the policy has no on-demand market (``market:
    spot``): as in ``decide()``, an on-demand choice becomes spot where some zone is thought to
    have capacity, else a wait; a window may then not finish (``missed``, finish ``inf``).
    """
    if sc.checkpoint_s:
        raise ValueError("replay() models continuous checkpointing; use the engine for intervals")
    if avail.ndim == 2:
        avail = avail[:, :, None]
    n, n_avail, n_zones = avail.shape
    rows = np.arange(n)
    step = float(sc.step_s)
    d_s = float(sc.overhead_s)
    d_h = d_s / 3600.0
    pw = per_window
    work_s = np.full(n, float(sc.work_s)) if pw is None else np.asarray(pw.work_s, float)
    deadline_s = (
        np.full(n, float(sc.deadline_s)) if pw is None else np.asarray(pw.deadline_s, float)
    )
    p_od = sc.price_on_demand if pw is None else np.asarray(pw.price_on_demand, float)
    p_spot = sc.price_spot if pw is None else np.asarray(pw.price_spot, float)
    work_total_h = work_s / 3600.0
    horizon_h = deadline_s / 3600.0

    running = np.zeros(n, dtype=np.int8)
    zone = np.full(n, -1, dtype=np.int64)
    last_zone = np.full(n, -1, dtype=np.int64)
    started = np.zeros(n)
    done_s = np.zeros(n)
    finished = np.zeros(n, dtype=bool)
    finish_s = np.full(n, np.nan)
    cost = np.zeros(n)
    od_s = np.zeros(n)
    spot_s = np.zeros(n)
    od_work = np.zeros(n)
    spot_work = np.zeros(n)
    launches = np.zeros(n, dtype=np.int64)
    preempt = np.zeros(n, dtype=np.int64)
    no_capacity = np.zeros((n, n_zones), dtype=bool)
    age = np.zeros((n, n_zones))  # how long each zone has had capacity, at the step start
    prev_av = np.zeros((n, n_zones), dtype=bool)

    seen_down = np.zeros((n, n_zones))  # observed: the latest outage seen (s; 0: the start)
    refused_at = np.full((n, n_zones), -np.inf)  # observed: the latest refused launch (s)
    within_s = CAPACITY_ERRORS_WITHIN.total_seconds()
    in_a_row = np.zeros((n, n_zones), dtype=np.int64)  # the look schedule: refusals in a row
    # the launch-call budget: the latest ``budget`` calls per window, a ring (oldest at ``ci``)
    budget = int(sc.launch_calls_per_hour)
    calls = np.full((n, budget), -np.inf)
    ci = np.zeros(n, dtype=np.int64)
    hour_s = lk.HOUR.total_seconds()
    # each zone's history so far (views.zone_history's four numbers, in seconds and counts)
    up_done = np.zeros((n, n_zones))  # spot seconds run there, instances ended
    spot_start = np.zeros(n)  # when the running spot instance was launched
    lost_n = np.zeros((n, n_zones))
    down_s = np.zeros((n, n_zones))
    rec_n = np.zeros((n, n_zones))
    opened = np.full((n, n_zones), np.nan)  # first sign of the outage still open
    # make before break: the instance (or gang) that works on until the new one has taken over
    mbb = sc.make_before_break
    old_mk = np.zeros(n, dtype=np.int8)  # its market (NONE: no switch in flight)
    old_zone = np.full(n, -1, dtype=np.int64)
    old_until = np.zeros(n)  # when the new one's changeover is over: it goes then
    old_run = np.zeros(n)  # when it was launched
    old_spot = np.zeros(n)  # when its spot run began (the zone's history)
    run_started = np.zeros(n)  # when the instance running now was launched (its changeover)
    overlap = np.zeros(n)
    refusals = np.zeros(n, dtype=np.int64)

    # early signals (provisioner.core.decide.signals): AWS's rebalance recommendation, modelled from
    # the trace (provisioner.core.rebalance), starts a look elsewhere made before break
    rb = sc.rebalance
    rb_start = None
    if rb is not None and rb.on and mbb and sc.nodes == 1:  # signals.eligible: one instance
        names = zone_keys or [[f"{w}:{z}" for z in range(n_zones)] for w in range(n)]
        rb_start = np.stack([grid(rb, avail[w], step, names[w]) for w in range(n)])
    cool_until = np.full((n, n_zones), -np.inf)
    lost_h = max(0.0, d_h - sig.NOTICE_H)  # what a preemption after a signal would cost
    gain_price = p_od if on_demand else p_spot
    cool_s = sig.COOLDOWN.total_seconds()

    def signalled(t: float, k: int, done: np.ndarray) -> np.ndarray:
        """Windows whose running spot instance is served a recommendation now and for which a
        look is worth its overlap (provisioner.core.decide.signals.eligible and look_value)."""
        assert rb_start is not None
        if k >= rb_start.shape[1]:
            return np.zeros(n, dtype=bool)
        on = rb_start[rows, k, np.maximum(zone, 0)]
        left_h = work_total_h - done / 3600.0
        gain = sig.FOLLOWED * np.minimum(lost_h, np.maximum(left_h, 0.0)) * gain_price
        cost = (1.0 - sig.FOLLOWED) * p_spot * d_h
        ok = (running == SPOT) & (old_mk == NONE) & ~np.isnan(on) & (left_h > d_h)
        return ok & (t - run_started >= d_s - 1e-9) & (gain > cost)

    def ask(
        t: float, known: np.ndarray, ages: np.ndarray, run: np.ndarray, todo: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The strategy's market and zone for each window (decide()'s choice), ``run`` the
        market it is told is running (NONE: as if the instance were gone, for a look)."""
        up_s = up_done.copy()
        sp = running == SPOT
        up_s[rows[sp], zone[sp]] += t - spot_start[sp]
        osp = old_mk == SPOT
        up_s[rows[osp], old_zone[osp]] += t - old_spot[osp]
        life = lifetime_h(up_s / 3600.0, lost_n)
        outage = outage_h(down_s / 3600.0, rec_n)
        _, p_best, life_best = best_zone(known, ages / 3600.0, life, outage)
        _, score = zone_scores(known, ages / 3600.0, life, outage)
        since_h = (t - started) / 3600.0
        pending_h = np.where(run != NONE, np.maximum(0.0, d_h - since_h), 0.0)
        state = StepState(
            elapsed_h=np.full(n, t / 3600.0),
            time_left_h=(deadline_s - t) / 3600.0,
            work_left_h=work_total_h - done_s / 3600.0,
            work_total_h=work_total_h,
            horizon_h=horizon_h,
            running=run,
            pending_h=pending_h,
            spot_available=np.asarray(known.any(axis=1)),
            spot_age_h=ages.max(axis=1) / 3600.0,
            step_h=step / 3600.0,
            overhead_h=d_h,
            price_on_demand=p_od,
            price_spot=p_spot,
            margin_h=sc.margin_s / 3600.0,
            spot_p_up=p_best,
            spot_life_h=life_best,
            make_before_break=mbb,
        )
        choice = choose_market(strategy, state)
        if not on_demand:  # decide(): no on-demand candidates for a spot-only policy
            od_wish = choice == ON_DEMAND
            choice = np.where(od_wish, np.where(known.any(axis=1), SPOT, NONE), choice)
        choice = np.where(todo, choice, run).astype(np.int8)
        cur = np.where(run == SPOT, zone, -1)
        pick = strategy.pick_zone(known, ages / 3600.0, cur, last_zone, score=score)
        return choice, pick

    for k in range(total_steps(sc) if max_steps is None else max_steps):
        if finished.all():
            break
        t = k * step
        av = avail[:, k, :] if k < n_avail else no_capacity
        age = np.where(av & prev_av, age + step, 0.0)
        prev_av = av
        # a switch in flight: handed over once the new one's changeover is over; an old
        # spot instance lost meanwhile is a preemption (the new one carries on)
        old_lost = (old_mk == SPOT) & ~av[rows, np.maximum(old_zone, 0)]
        preempt += old_lost
        oz = old_zone[old_lost]
        up_done[rows[old_lost], oz] += t - old_spot[old_lost]
        lost_n[rows[old_lost], oz] += 1
        was = opened[rows[old_lost], oz]
        opened[rows[old_lost], oz] = np.where(np.isnan(was), t, was)
        if observed:
            seen_down[rows[old_lost], oz] = t
        lost = (running == SPOT) & ~av[rows, np.maximum(zone, 0)]
        if np.any(np.asarray(protect_s) > 0):
            lost &= t - run_started >= protect_s
        handed = (old_mk != NONE) & ~old_lost & (t >= old_until - 1e-9) & (running != NONE)
        handed &= ~lost  # the new one lost as it takes over: the old one is kept
        hz = handed & (old_mk == SPOT)
        up_done[rows[hz], old_zone[hz]] += t - old_spot[hz]
        old_mk = np.where(old_lost | handed, NONE, old_mk).astype(np.int8)
        preempt += lost
        lz = zone[lost]
        up_done[rows[lost], lz] += t - spot_start[lost]
        lost_n[rows[lost], lz] += 1
        opened[rows[lost], lz] = np.where(
            np.isnan(opened[rows[lost], lz]), t, opened[rows[lost], lz]
        )
        if observed:
            seen_down[rows[lost], zone[lost]] = t
        running = np.where(lost, NONE, running).astype(np.int8)
        zone = np.where(lost, -1, zone)
        back = lost & (old_mk != NONE)  # lost while taking over: the old one is kept
        running = np.where(back, old_mk, running).astype(np.int8)
        zone = np.where(back, old_zone, zone)
        run_started = np.where(back, old_run, run_started)
        spot_start = np.where(back & (old_mk == SPOT), old_spot, spot_start)
        old_mk = np.where(back, NONE, old_mk).astype(np.int8)

        todo = ~finished  # windows still deciding this step
        for _ in range(MAX_PASSES if observed else 1):
            # a look from a working instance waits for the zone's schedule (core.looks)
            settled = (running != NONE) & (t - run_started >= d_s - 1e-9)
            if observed:  # zones not refused lately, and the running one: capacity is there
                used = (t - calls < hour_s).sum(axis=1)
                looking = settled & lk.tight(used, budget) if mbb else np.zeros(n, bool)
                wait_s = np.where(looking[:, None], lk.hold_s(in_a_row), within_s)
                known = t - refused_at > np.maximum(wait_s, within_s)
                on_spot = running == SPOT
                known[rows[on_spot], zone[on_spot]] = True
                ages = np.where(known, t - seen_down, 0.0)
            else:
                known, ages = av, np.where(av, age, 0.0)
            if rb_start is not None:  # a zone kept away after a look (decide()'s CoolDown)
                known = known & ~(cool_until > t)
                here = running == SPOT
                known[rows[here], zone[here]] = True
                ages = np.where(known, ages, 0.0)
            choice, pick = ask(t, known, ages, running, todo)
            if rb_start is not None:  # early signals: a look before the notice elsewhere
                rb_look = todo & signalled(t, k, done_s)
                if rb_look.any():
                    kn = known.copy()
                    kn[rows[rb_look], zone[rb_look]] = False
                    c2, p2 = ask(
                        t, kn, np.where(kn, ages, 0.0), np.where(rb_look, NONE, running), todo
                    )
                    rb_look &= ((c2 == SPOT) & (p2 >= 0)) | (c2 == ON_DEMAND)
                    choice, pick = (
                        np.where(rb_look, c2, choice).astype(np.int8),
                        np.where(rb_look, p2, pick),
                    )
                    cool_until[rows[rb_look], zone[rb_look]] = t + cool_s
            launch_spot = (choice == SPOT) & ((running != SPOT) | (pick != zone))
            launch_od = (choice == ON_DEMAND) & (running != ON_DEMAND)
            stop = todo & (choice == NONE)  # waiting: every instance goes
            ostop = stop & (old_mk == SPOT)
            up_done[rows[ostop], old_zone[ostop]] += t - old_spot[ostop]
            old_mk = np.where(stop, NONE, old_mk).astype(np.int8)
            if mbb:  # one switch at a time: none while one is handing over
                launch_spot &= old_mk == NONE
                launch_od &= old_mk == NONE
            # no launch call once the hour's budget is spent: the instance (if any) runs on
            spent = t - calls[rows, ci] < hour_s
            launch_spot &= ~spent
            launch_od &= ~spent
            # a look from on-demand at spot only where it pays (overlap.look_pays)
            if mbb:
                od_look = launch_spot & settled & (running == ON_DEMAND)
                launch_spot &= ~od_look | _look_pays(
                    sc, t - run_started, work_s - done_s, p_od, p_spot
                )
            # made before break from an instance past its changeover (it does the work)
            switch = settled & (launch_spot | launch_od) if mbb else np.zeros(n, bool)
            leaving = (running == SPOT) & ~switch & (launch_spot | launch_od | (choice == NONE))
            up_done[rows[leaving], zone[leaving]] += t - spot_start[leaving]
            # a spot launch into a zone without capacity is refused and the strategy is asked
            # again (observed only: the oracle never picks such a zone); the instance it would
            # replace runs on (made before break), or was stopped first (a gang)
            refused = launch_spot & ~av[rows, np.maximum(pick, 0)]
            refusals += refused
            in_a_row[rows[refused], pick[refused]] += 1
            refused_at[rows[refused], pick[refused]] = t
            seen_down[rows[refused], pick[refused]] = t
            rz = pick[refused]
            was = opened[rows[refused], rz]
            opened[rows[refused], rz] = np.where(np.isnan(was), t, was)
            sent = launch_spot | launch_od  # a call each, refused or not
            calls[rows[sent], ci[sent]] = t
            ci = np.where(sent, (ci + 1) % budget, ci)
            launch_spot &= ~refused
            gz = pick[launch_spot]
            in_a_row[rows[launch_spot], gz] = 0
            was = opened[rows[launch_spot], gz]
            down_s[rows[launch_spot], gz] += np.where(np.isnan(was), 0.0, t - was)
            rec_n[rows[launch_spot], gz] += ~np.isnan(was)
            opened[rows[launch_spot], gz] = np.nan
            launch = launch_spot | launch_od
            handing = switch & launch  # accepted: the running one works on until handed over
            old_mk = np.where(handing, running, old_mk).astype(np.int8)
            old_zone = np.where(handing, zone, old_zone)
            old_until = np.where(handing, t + d_s, old_until)
            old_run = np.where(handing, run_started, old_run)
            old_spot = np.where(handing, spot_start, old_spot)
            spot_start = np.where(launch_spot, t, spot_start)
            launches += launch
            started = np.where(launch, t, started)
            run_started = np.where(launch, t, run_started)
            # refused: the running instance stays as it is (made before break) or is gone
            gone = stop | (refused & ~switch)
            zone = np.where(launch_spot, pick, np.where(launch_od | gone, -1, zone))
            last_zone = np.where(launch_spot, pick, np.where(launch_od, -1, last_zone))
            running = np.where(
                launch_spot, SPOT, np.where(launch_od, ON_DEMAND, np.where(gone, NONE, running))
            ).astype(np.int8)
            todo = refused
            if not todo.any():
                break

        # the instance handing over works (and bills) until the new one takes over
        busy = np.where(old_mk != NONE, np.clip(old_until - t, 0.0, step), 0.0)
        remaining = work_s - done_s
        o_work = np.minimum(busy, remaining)
        o_ends = (old_mk != NONE) & (o_work < busy - 1e-9)  # the work ends on it
        busy = np.where(o_ends, o_work, busy)
        o_spot, o_od = old_mk == SPOT, old_mk == ON_DEMAND
        cost += np.where(o_spot, p_spot, p_od) * sc.nodes * busy / 3600.0
        overlap += busy
        spot_s += np.where(o_spot, busy, 0.0)
        od_s += np.where(o_od, busy, 0.0)
        spot_work += np.where(o_spot, o_work, 0.0)
        od_work += np.where(o_od, o_work, 0.0)
        done_s = done_s + o_work

        active = running != NONE
        pend = np.where(active, np.maximum(0.0, d_s - (t - run_started)), 0.0)
        pend = np.maximum(pend, busy)
        progress = np.where(active, np.maximum(0.0, step - pend), 0.0)
        remaining = work_s - done_s
        ends = active & (progress >= remaining - 1e-9)
        billed = np.where(ends, pend + remaining, np.where(active, step, 0.0))
        billed = np.where(o_ends, busy, billed)
        progress = np.where(ends, remaining, progress)
        on_spot = running == SPOT
        on_od = running == ON_DEMAND
        price = np.where(on_spot, p_spot, p_od)  # per node: a gang pays every node
        cost += price * sc.nodes * billed / 3600.0
        spot_s += np.where(on_spot, billed, 0.0)
        od_s += np.where(on_od, billed, 0.0)
        spot_work += np.where(on_spot, progress, 0.0)
        od_work += np.where(on_od, progress, 0.0)
        done_s = done_s + progress
        finish_s = np.where(ends, t + billed, finish_s)
        finish_s = np.where(o_ends, t + o_work, finish_s)
        ends |= o_ends
        finished |= ends
        running = np.where(ends, NONE, running).astype(np.int8)
        old_mk = np.where(ends, NONE, old_mk).astype(np.int8)

    if not finished.all():
        if on_demand and max_steps is None:  # cannot happen: the net runs on-demand to the end
            raise RuntimeError("replay: a window did not finish")
        finish_s = np.where(finished, finish_s, np.inf)
    return RunStats(
        cost=cost,
        od_hours=od_s / 3600.0,
        spot_hours=spot_s / 3600.0,
        od_work_hours=od_work / 3600.0,
        spot_work_hours=spot_work / 3600.0,
        finish_h=finish_s / 3600.0,
        missed=finish_s > deadline_s + 1e-6,
        launches=launches,
        preemptions=preempt,
        lost_work_hours=np.zeros(n),
        overlap_hours=overlap / 3600.0,
        refusals=refusals,
    )
