"""The interruption-aware estimate of a placement: the simulator's model run forward.

A placement's price times its hours says nothing of interruptions. Here each spot placement
is replayed ``samples`` times through :func:`provisioner.simulate.replay.replay` (the
benchmark's vectorised replay, tested equal to the ``decide()`` path) with the strategy
``decide()`` would use for the policy, on spot availability drawn at random from a two-state
(up/down) model of the zone: exponential up and down periods whose rates each run draws from
the zone's prior (:mod:`provisioner.simulate.priors`: a mixture over plausible rates scaled by
the zone's Spot Advisor band, :func:`band_rates`, or the posterior after a recorded history,
:func:`fit_rates`). Every run pays the changeover :data:`~provisioner.core.views.CHANGEOVER_H`
on each launch, falls back to on-demand when the strategy's safety net says so, and is billed
under the cloud's rule (its increment, and Alibaba's protection period: a spot instance
younger than it is not reclaimed). The runs give the expected spot and on-demand hours,
restarts (relaunches after an interruption), changeover, the mean cost and its P10-P90 (the
P90 never under the on-demand-only cost when one run in ten found no spot), and the share
that missed the deadline.

All placements of a plan go through one replay call (one window per placement and sample),
so a plan with ten placements costs one pass over the steps (:func:`decision_step`: 300 s, or
coarser past :data:`MAX_STEPS`). Random draws are seeded by the placement (its provider, zone,
type and market), so the same plan prints the same estimate.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np

from policies.model import Policy
from provisioner.core.billing import Billing
from provisioner.core.models import CostEstimate, Market, Placement
from provisioner.core.reserved import strategy_for
from provisioner.core.strategies import DEFAULT_STRATEGY, get_strategy
from provisioner.core.views import CHANGEOVER_H, ZoneRisk
from provisioner.core.zone_priors import Key, for_offer
from provisioner.simulate.priors import (
    CALIBRATION_STEP_S,
    Rates,
    draw_rates,
    fit_rates,
    new_account_rates,
)
from provisioner.simulate.replay import PerWindow, replay
from provisioner.simulate.scenario import Scenario

if TYPE_CHECKING:
    from provisioner.core.planner import Plan

__all__ = [
    "CloudRule",
    "Rates",
    "band_rates",
    "decision_step",
    "estimate_placements",
    "estimate_plan",
    "fit_rates",
    "gang_rates",
    "sample_availability",
]

#: Runs per placement, and the most decision steps a run is cut into (the step grows with the
#: horizon beyond it). The time budget: at most ``SAMPLES x MAX_STEPS`` run-steps per
#: placement (docs/money.md says what that costs). 1,500 steps of 300 s are 125 h: a job and
#: its deadline up to that (a 48 h job by a 60 h deadline takes 1,298) run at the fine step.
SAMPLES = 128
MAX_STEPS = 1500
#: The decision step, seconds: the step the prior was fitted at and the realised costs are
#: measured at, where the estimate stops moving (under 1% to 150 s). A coarser step is no
#: cheap approximation of it: at 974 s a 48 h job's mean was 1.7% lower and its P10-P90 held
#: 58-72% of realised costs against 69-83% at 300 s (docs/money.md), so the estimate keeps
#: it wherever the horizon fits in :data:`MAX_STEPS`.
FINE_STEP_S = CALIBRATION_STEP_S
#: Without a deadline the strategy is paced against this many times the work (plus a day).
NO_DEADLINE_FACTOR = 3.0
#: The spot discount assumed when an offer has no on-demand price to fall back to.
FALLBACK_DISCOUNT = 0.35
#: P90 is at least the on-demand-only cost when this share of the runs found no spot at all.
NO_SPOT_SHARE = 0.10
#: How sure an estimate is: the mean absolute error of its mean against the realised cost,
#: per job, measured by ``benchmarks/estimate_bench.py`` held out (each set against priors
#: fitted without it, every AWS set pooled) on the recorded traces, by the prior's kind and
#: the job's length (work up to :data:`LONG_JOB_H`: the 12 h job's figure; longer: the 48 h
#: job's). ``plan`` prints it as est USD's ``±``. A placement score's prior measured 27-29%
#: on a proxy for the score (the share of the last day the zone had spot; AWS's own scores
#: were not recorded with the traces): until it is measured on real scores it claims no
#: more than the band's.
ERROR_BY_PRIOR: dict[str, tuple[float, float]] = {
    "band": (0.53, 0.45),  # a new account: the band (or the cloud's risk) alone
    "score": (0.53, 0.45),  # a new account with the zone's placement score (see above)
    "history": (0.26, 0.30),  # the zone's recorded history
}
LONG_JOB_H = 24.0


def prior_kind(r: Rates) -> str:
    """Which of :data:`ERROR_BY_PRIOR`'s priors ``r`` is."""
    if r.source == "trace" or "history" in r.source:
        return "history"
    return "score" if r.p_up is not None else "band"


def typical_error(r: Rates, work_h: float) -> float:
    """The measured error per job of an estimate on prior ``r`` (:data:`ERROR_BY_PRIOR`)."""
    short, long = ERROR_BY_PRIOR[prior_kind(r)]
    return long if work_h > LONG_JOB_H else short


def band_rates(band: str, prior: ZoneRisk | None = None) -> Rates:
    """The prior for a zone in Spot Advisor ``band`` with no recorded history ("" or unknown:
    the planner's default risk), refined by the cloud's own ``prior`` of the zone where one is
    known: :func:`provisioner.simulate.priors.new_account_rates`."""
    return new_account_rates(band, prior)


def prior_rates(placements: Sequence[Placement], risks: Mapping[Key, ZoneRisk]) -> dict[int, Rates]:
    """The priors of the placements whose zone has an availability prior (by index), for
    :func:`estimate_placements`'s ``rates``; the others keep their band's."""
    out: dict[int, Rates] = {}
    for i, p in enumerate(placements):
        zr = for_offer(risks, p.offer) if risks else None
        if zr is not None:
            out[i] = band_rates(p.offer.interruption_band, zr)
    return out


def gang_rates(r: Rates, nodes: int) -> Rates:
    """A gang's spot capacity: up only while every one of its ``nodes`` is (issue 10). With
    nodes taken back independently, each at ``1 / up_h``, the first of N goes N times as soon;
    an outage is as long as one node's (the gang relaunches whole once there is room)."""
    if nodes <= 1:
        return r
    return replace(r, up_h=r.up_h / nodes, source=f"{r.source}, gang of {nodes}")


def sample_availability(
    rates: Rates, n: int, steps: int, step_s: float, seed: int, protect_s: float = 0.0
) -> np.ndarray:
    """``n`` random runs of ``steps`` steps (n, steps) of spot capacity under ``rates``: each
    run draws its own failure and recovery rates from the prior (fixed where it has no
    shapes) and, where the state now is unknown, starts up with the prior's share
    (``Rates.p_up``, else its rates' stationary share)."""
    return sample_many([(rates, seed)], n, steps, step_s)[0]


def sample_many(
    priors: Sequence[tuple[Rates, int]], n: int, steps: int, step_s: float, horizon_h: float = 0.0
) -> list[np.ndarray]:
    """:func:`sample_availability` of several (rates, seed), stepped together (one loop over
    the steps for all of them: a plan's placements cost one pass); each the same bits as
    alone. ``horizon_h``: the job's horizon, over which rates that drift widen."""
    k = len(priors)
    u = np.empty((steps, k * n))
    lam = np.empty(k * n)
    mu = np.empty(k * n)
    state = np.empty(k * n, dtype=bool)
    for j, (rates, seed) in enumerate(priors):
        sl = slice(j * n, (j + 1) * n)
        # step-major: the first steps are the same for any ``steps``
        u[:, sl] = np.random.default_rng(seed).random((steps, n))
        prm = np.random.default_rng([seed, 1])  # the runs' rates: the same for any ``steps``
        lam[sl], mu[sl] = draw_rates(rates, n, prm, horizon_h)
        if rates.up_now is not None:
            state[sl] = rates.up_now
        else:
            share = mu[sl] / np.maximum(lam[sl] + mu[sl], 1e-12)
            state[sl] = prm.random(n) < (share if rates.p_up is None else rates.p_up)
    h = step_s / 3600.0
    p_fail = -np.expm1(-h * lam)
    p_back = -np.expm1(-h * mu)
    out = np.empty((steps, k * n), dtype=bool)
    for t in range(steps):
        out[t] = state
        state = np.where(state, u[t] >= p_fail, u[t] < p_back)
    return [out[:, j * n : (j + 1) * n].T for j in range(k)]


def percentile(values: np.ndarray, pct: float) -> float:
    """``np.percentile(values, pct)`` of a 1-D array (linear interpolation), the same bits, on a
    sort: numpy's own goes through ``np.unique``, which imports ``numpy.ma`` (about 8 ms of a
    cold ``provisioner plan``)."""
    a = np.sort(np.asarray(values, dtype=float), kind="stable")
    if a.size == 0:
        raise ValueError("percentile of no values")
    h = (a.size - 1) * (pct / 100.0)
    lo = min(math.floor(h), a.size - 1)
    hi = min(lo + 1, a.size - 1)
    t = h - lo
    below, above = float(a[lo]), float(a[hi])
    diff = above - below
    # numpy's _lerp: from the nearer end, so that t = 1 gives the upper value exactly
    return above - diff * (1.0 - t) if t >= 0.5 else below + diff * t


def strategy_name(policy: Policy) -> str:
    """The strategy decide() uses for ``policy`` (by its market)."""
    return strategy_for(policy.market.names)


def _seed(p: Placement, seed: int) -> int:
    o = p.offer
    key = f"{o.provider}|{o.location}|{o.instance_type}|{p.market.value}"
    return zlib.crc32(key.encode()) ^ seed


def _extra_h(billing: Billing) -> float:
    """Hours a launch adds on average through the billing increment (half an increment)."""
    return (billing.increment_s - 1) / 2.0 / 3600.0


@dataclass(frozen=True)
class CloudRule:
    """What the estimate needs of a cloud's facts."""

    billing: Billing
    protect_s: float = 0.0
    notice_s: float = 120.0


def cloud_rule(provider: str) -> CloudRule:
    """The billing rule, spot protection and notice of ``provider`` (its facts)."""
    from providers.facts import cloud_facts

    try:
        f = cloud_facts("aws" if provider == "sim" else provider)
    except ValueError:
        return CloudRule(Billing())
    return CloudRule(f.billing, float(f.spot_protection_s), float(f.notice_s))


def decision_step(sim_h: float, work_h: float) -> float:
    """The replay's step (seconds) for a horizon of ``sim_h`` and ``work_h`` of work:
    :data:`FINE_STEP_S`, or coarser where the run (to the deadline, plus room to finish on
    on-demand) would take more than :data:`MAX_STEPS` steps."""
    return max(FINE_STEP_S, (sim_h + work_h + CHANGEOVER_H) * 3600.0 / MAX_STEPS)


def estimate_placements(
    placements: Sequence[Placement],
    policy: Policy,
    horizon_h: float | None,
    *,
    samples: int = SAMPLES,
    seed: int = 0,
    rates: dict[int, Rates] | None = None,
    rules: dict[str, CloudRule] | None = None,
) -> list[Placement]:
    """``placements`` with their :class:`CostEstimate` (None where the work is unknown).

    ``horizon_h``: hours from now to the deadline (None: no deadline). ``rates``: the spot
    model per placement index (default: :func:`band_rates` of its zone). ``rules``: the
    clouds' rules by provider (default: their facts).
    """
    rules = dict(rules or {})
    for p in placements:
        if p.offer.provider not in rules:
            rules[p.offer.provider] = cloud_rule(p.offer.provider)
    d_h = CHANGEOVER_H
    grace_h = policy.checkpoint.grace.total_seconds() / 3600.0
    ckpt_h = policy.checkpoint.interval.total_seconds() / 3600.0
    out = list(placements)
    spot_i = [
        i for i, p in enumerate(placements) if p.est_hours is not None and p.market is Market.SPOT
    ]
    for i, p in enumerate(placements):
        if p.est_hours is not None and p.market is Market.ON_DEMAND:
            out[i] = replace(p, estimate=_on_demand(p, rules[p.offer.provider], horizon_h))
    if not spot_i:
        return out
    work = np.asarray([float(placements[i].est_hours or 0.0) for i in spot_i])
    sim_h = (
        horizon_h
        if horizon_h is not None
        else float(NO_DEADLINE_FACTOR * (work.max() + d_h) + 24.0)
    )
    sim_h = max(sim_h, 1e-3)
    step_s = decision_step(sim_h, float(work.max()))
    steps = math.ceil((sim_h + float(work.max()) + d_h) * 3600.0 / step_s) + 2
    drawn, protect, p_od, p_sp = [], [], [], []
    for i in spot_i:
        p = placements[i]
        rule = rules[p.offer.provider]
        r = gang_rates((rates or {}).get(i) or band_rates(p.offer.interruption_band), p.nodes)
        drawn.append((r, _seed(p, seed)))
        protect.append(rule.protect_s)
        p_sp.append(p.price_per_hour * p.nodes)  # a gang's hour: every node's
        p_od.append((p.offer.price or p.price_per_hour / FALLBACK_DISCOUNT) * p.nodes)
    n = samples
    rep = np.repeat
    pw = PerWindow(
        work_s=rep(work * 3600.0, n),
        deadline_s=np.full(len(spot_i) * n, sim_h * 3600.0),
        price_on_demand=rep(np.asarray(p_od), n),
        price_spot=rep(np.asarray(p_sp), n),
    )
    sc = Scenario(float(work.max()) * 3600.0, sim_h * 3600.0, d_h * 3600.0, step_s)
    strat = get_strategy(strategy_name(policy))
    if not strat.uses_spot:
        strat = get_strategy(DEFAULT_STRATEGY)  # a spot placement: the default's pacing
    runs = replay(
        strat,
        np.concatenate(sample_many(drawn, samples, steps, step_s, sim_h)),
        sc,
        per_window=pw,
        protect_s=rep(np.asarray(protect), n),
        on_demand=policy.allows_on_demand,
    )
    for k, i in enumerate(spot_i):
        p = placements[i]
        rule = rules[p.offer.provider]
        sl = slice(k * n, (k + 1) * n)
        launches = runs.launches[sl].astype(float)
        pre = runs.preemptions[sl].astype(float)
        # a preemption loses the work since the last checkpoint unless the checkpoint taken on
        # the notice fits in it (the policy's grace within the cloud's notice)
        lost = pre * (0.0 if grace_h <= rule.notice_s / 3600.0 else ckpt_h / 2.0)
        spot_h = runs.spot_hours[sl] + lost + launches * _extra_h(rule.billing)
        od_h = runs.od_hours[sl]
        cost = p_sp[k] * spot_h + p_od[k] * od_h
        missed = runs.missed[sl] | (runs.finish_h[sl] + lost > sim_h + 1e-9)
        p90 = percentile(cost, 90)
        if policy.allows_on_demand:
            # the zone may have no spot: when one run in ten found none, those runs paid the
            # on-demand-only cost, and the P90 is not below it (no interpolation under it)
            no_spot = float(np.mean(runs.spot_hours[sl] <= 0.0))
            if no_spot >= NO_SPOT_SHARE:
                p90 = max(p90, _on_demand(p, rule, horizon_h, p_od[k] / p.nodes).mean_usd)
        est = CostEstimate(
            mean_usd=float(cost.mean()),
            p10_usd=percentile(cost, 10),
            p90_usd=p90,
            p_miss_deadline=None if horizon_h is None else float(missed.mean()),
            spot_h=float(spot_h.mean()),
            on_demand_h=float(od_h.mean()),
            restarts=float(pre.mean()),  # relaunches after an interruption (docs/money.md)
            lost_work_h=float(lost.mean()),
            # billed but no progress: a changeover cut short by a preemption counts its part
            changeover_h=float(
                (
                    runs.spot_hours[sl]
                    + runs.od_hours[sl]
                    - runs.spot_work_hours[sl]
                    - runs.od_work_hours[sl]
                ).mean()
            ),
            spot_usd=float(p_sp[k] * spot_h.mean()),
            on_demand_usd=float(p_od[k] * od_h.mean()),
            samples=n,
            prior=drawn[k][0].source,
            error=typical_error(drawn[k][0], float(work[k])),
        )
        out[i] = replace(p, estimate=est)
    return out


def _on_demand(
    p: Placement, rule: CloudRule, horizon_h: float | None, price: float | None = None
) -> CostEstimate:
    """An on-demand placement: one launch, the work, no interruptions (exact); every node
    of a gang billed. ``price``: the on-demand price per node (default: the placement's)."""
    hours = float(p.est_hours or 0.0) + CHANGEOVER_H
    billed = rule.billing.billed_seconds(hours * 3600.0) / 3600.0
    cost = (p.price_per_hour if price is None else price) * billed * p.nodes
    miss = None if horizon_h is None else float(hours > horizon_h + 1e-9)
    return CostEstimate(
        cost, cost, cost, miss, 0.0, billed, 0.0, 0.0, CHANGEOVER_H, 0.0, cost, 0, "on-demand"
    )


def estimate_plan(
    plan: Plan, now: datetime, *, seed: int = 0, priors: Mapping[Key, ZoneRisk] | None = None
) -> Plan:
    """``plan`` with an estimate on each of its placements, the deadline counted from ``now``
    (``priors``: the clouds' availability priors, refining the bands of the zones they know)."""
    horizon = None if plan.deadline is None else (plan.deadline - now).total_seconds() / 3600.0
    rates = prior_rates(plan.placements, priors) if priors else None
    placements = estimate_placements(plan.placements, plan.policy, horizon, seed=seed, rates=rates)
    return replace(plan, placements=placements)
