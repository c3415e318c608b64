"""``provisioner simulate`` as a function: a policy, traces, windows -> a report (a dict).

The policy's own path is simulated: :func:`provisioner.simulate.engine.run_window` calls
``decide()`` with the policy as written (its strategy, bid caps, budget, windows, restarts,
zone cooldown, checkpoint interval). Beside it, for reference, on the same windows: the cost
on on-demand only, the simple lower bound and (where the optimum applies: whole-step
changeover, no time windows) the offline optimum.

A gang (``nodes``: the policy's ``resources.nodes`` unless given, 1..64) replays the traces'
gang availability (at least ``nodes`` instances in the zone, so multi-node traces), billed
``nodes`` times, the optimum and the lower bound alike (:mod:`provisioner.simulate.engine`).
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import numpy as np

from policies.model import Policy
from provisioner.core.views import CHANGEOVER_H
from provisioner.errors import SimulationError
from provisioner.simulate.engine import Timeline, World, gang_policy, run_window
from provisioner.simulate.optimum import lower_bound_cost, optimum_cost
from provisioner.simulate.replay import total_steps
from provisioner.simulate.scenario import (
    P3_2XLARGE_ON_DEMAND,
    P3_2XLARGE_SPOT,
    Scenario,
    check_nodes,
)
from provisioner.simulate.traces import Trace, step_for, window_starts

DEFAULT_CHANGEOVER_H = CHANGEOVER_H  # the daemon's too (provisioner.core.views)


class SimulateError(SimulationError, ValueError):
    """The simulation cannot be set up as asked (the message says why)."""


def scenario_for(
    policy: Policy,
    traces: list[Trace],
    *,
    work_h: float | None = None,
    deadline_h: float | None = None,
    changeover_h: float = DEFAULT_CHANGEOVER_H,
    step_s: float | None = None,
    on_demand_price: float = P3_2XLARGE_ON_DEMAND,
    spot_price: float | None = None,
    checkpoint_loss: bool = True,
    nodes: int | None = None,
) -> Scenario:
    """The job to simulate: work, deadline and gang size (``nodes``) from the policy unless
    given."""
    if not traces:
        raise SimulateError("give at least one trace")
    gang = _gang_size(policy, traces, nodes)
    gaps = {t.gap_s for t in traces}
    if len(gaps) > 1:
        raise SimulateError(
            f"traces with different gaps cannot be replayed together: {sorted(gaps)}"
        )
    work = work_h if work_h is not None else policy.job.compute_hours
    if work is None:
        raise SimulateError("the policy has no job.compute_hours: give --work")
    if deadline_h is None:
        if isinstance(policy.deadline, timedelta):
            deadline_h = policy.deadline.total_seconds() / 3600.0
        elif policy.deadline is None:
            raise SimulateError("the policy has no deadline: give --deadline (a duration)")
        else:
            raise SimulateError("the policy's deadline is a date: give --deadline as a duration")
    step = step_s if step_s is not None else step_for(changeover_h * 3600.0, traces[0].gap_s)
    if spot_price is None:
        priced = [t.prices for t in traces if t.prices is not None]
        spot_price = float(np.mean([p.mean() for p in priced])) if priced else P3_2XLARGE_SPOT
    ckpt = policy.checkpoint.interval.total_seconds() if checkpoint_loss else 0.0
    return Scenario(
        work_s=work * 3600.0,
        deadline_s=deadline_h * 3600.0,
        overhead_s=changeover_h * 3600.0,
        step_s=step,
        price_on_demand=on_demand_price,
        price_spot=spot_price,
        checkpoint_s=ckpt,
        nodes=gang,
    )


def _gang_size(policy: Policy, traces: list[Trace], nodes: int | None) -> int:
    """The gang size, checked: 1..64, and some trace must show that many instances (a gang
    never up on spot anywhere is a wrong trace set, not a simulation)."""
    n = policy.resources.nodes if nodes is None else nodes
    try:
        check_nodes(n)
    except ValueError as exc:
        raise SimulateError(str(exc)) from None
    if n > 1 and all(t.peak < n for t in traces):
        peak = max(t.peak for t in traces)
        raise SimulateError(
            f"a gang of {n} nodes needs a multi-node trace: these show at most {peak} "
            f"instance(s) available (the 4- and 16-node sets count instances up)"
        )
    return n


def simulate(
    policy: Policy,
    traces: list[Trace],
    sc: Scenario,
    *,
    windows: int = 1,
    seed: int = 0,
    strategy: str | None = None,
    timeline: Timeline | None = None,
    oracle: bool = False,
) -> dict[str, Any]:
    """Simulate ``policy`` on ``windows`` windows of the traces (one zone per trace).

    One window starts at the traces' start; more are drawn at random (``seed``). A gang
    (``sc.nodes``, :func:`scenario_for`) has spot in a zone while its trace shows at least
    ``sc.nodes`` instances, and pays every node.
    decide() is told what a daemon can know (its own refused launches and preemptions);
    ``oracle``: every zone's spot capacity now and how long it has lasted instead, an upper
    bound no daemon can reach (see :mod:`provisioner.simulate.engine`).
    ``timeline``, when given, receives the first window's steps (for the plot).
    """
    n = min(t.steps(sc.step_s) for t in traces)
    avail = np.stack([t.available_on(sc.step_s, sc.nodes)[:n] for t in traces], axis=1)
    priced = all(t.prices is not None for t in traces)
    prices = np.stack([t.prices_on(sc.step_s)[:n] for t in traces], axis=1) if priced else None  # type: ignore[index]
    if sc.window_steps > n:
        hours = n * sc.step_s / 3600.0
        raise SimulateError(f"the traces cover {hours:.1f} h, shorter than the deadline")
    starts = (
        [0] if windows <= 1 else [int(s) for s in window_starts(n, sc.window_steps, windows, seed)]
    )
    world = World([t.zone for t in traces])
    _check_eligible(policy, world, sc)
    k = total_steps(sc)
    rows = []
    for i, s0 in enumerate(starts):
        win = avail[s0 : s0 + k]
        row = run_window(
            policy, win, sc, world, strategy=strategy,
            spot_prices=None if prices is None else prices[s0 : s0 + k],
            timeline=timeline if i == 0 else None, horizon_steps=k, observed=not oracle,
        )  # fmt: skip
        row["start_hours"] = s0 * sc.step_s / 3600.0
        rows.append(row)
    ref = avail[np.asarray(starts)[:, None] + np.arange(sc.window_steps)[None, :]]
    lower = lower_bound_cost(ref, sc)
    optimum = None
    if sc.integral and not policy.windows:
        optimum = optimum_cost(ref, sc)
    for i, row in enumerate(rows):
        row["on_demand_only_cost"] = sc.on_demand_cost
        row["lower_bound_cost"] = float(lower[i])
        row["optimum_cost"] = None if optimum is None else float(optimum[i])
    return {
        "policy": policy.name,
        "strategy": strategy or _strategy_name(policy),
        "knowledge": "oracle" if oracle else "daemon",
        "traces": [t.source or t.name for t in traces],
        "zones": world.zones,
        "nodes": sc.nodes,
        "work_hours": sc.work_s / 3600.0,
        "deadline_hours": sc.deadline_s / 3600.0,
        "changeover_hours": sc.overhead_s / 3600.0,
        "step_seconds": sc.step_s,
        "checkpoint_interval_hours": sc.checkpoint_s / 3600.0,
        "on_demand_price": sc.price_on_demand,
        "spot_price": sc.price_spot if prices is None else "from the traces",
        "windows": rows,
        "summary": summarize(rows),
    }


def _check_eligible(policy: Policy, world: World, sc: Scenario) -> None:
    """Refuse a replay in which the policy's rules allow no trace zone on any market."""
    from provisioner.core.decide import launchable

    reasons = []
    gang = gang_policy(policy, sc.nodes)
    for p in world.candidates(sc, None):
        why = launchable(gang, p)
        if why is None:
            return
        reasons.append(f"{p.offer.zone} {p.market.value}: {why}")
    raise SimulateError("no trace zone can be used under this policy (" + "; ".join(reasons) + ")")


def _strategy_name(policy: Policy) -> str:
    from provisioner.core.reserved import strategy_for

    return strategy_for(policy.market.names)


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Means (and p75 of cost) over windows; counts of missed deadlines and failures."""

    def mean(key: str) -> float:
        vals = [r[key] for r in rows if r.get(key) is not None]
        return float(np.mean(vals)) if vals else math.nan

    cost = np.asarray([r["cost"] for r in rows])
    out: dict[str, Any] = {
        "windows": len(rows),
        "cost_mean": float(cost.mean()),
        "cost_p75": float(np.percentile(cost, 75)),
        "on_demand_hours": mean("on_demand_hours"),
        "spot_hours": mean("spot_hours"),
        "restarts": mean("restarts"),
        "preemptions": mean("preemptions"),
        "lost_work_hours": mean("lost_work_hours"),
        "deadlines_missed": int(sum(bool(r["deadline_missed"]) for r in rows)),
        "failed": int(sum(bool(r["failed"]) for r in rows)),
        # a failed window usually missed its deadline too: each window counted once
        "deadlines_met": int(sum(not r["deadline_missed"] and not r["failed"] for r in rows)),
        "on_demand_only_cost": mean("on_demand_only_cost"),
        "lower_bound_cost": mean("lower_bound_cost"),
        "optimum_cost": mean("optimum_cost"),
    }
    ran = [r for r in rows if not r["failed"]]  # a failed window's spend is no job's cost
    if ran and all(r.get("optimum_cost") for r in ran):
        out["cost_over_optimum"] = float(np.mean([r["cost"] / r["optimum_cost"] for r in ran]))
        out["cost_over_optimum_windows"] = len(ran)
    return out
