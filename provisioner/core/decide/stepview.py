"""decide()'s reading of the job for a strategy: the :class:`StepState` of one job now, the
age of each spot option's capacity, and the words a decision is explained with (the helpers
of :mod:`provisioner.core.decide`, pure like it)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import numpy as np

from provisioner.core import strategies as st
from provisioner.core.models import Placement
from provisioner.core.rules import launch_price
from provisioner.core.strategies import NONE, StepState, Strategy
from provisioner.core.views import JobView, Location, Observations


def _hours(delta: timedelta) -> float:
    return delta.total_seconds() / 3600.0


def ages(obs: Observations, now: datetime, locs: list[Location], avail: np.ndarray) -> np.ndarray:
    """Hours each spot option's capacity has been up (0: unknown or not up), by the
    options' (provider, location)."""
    up = obs.spot_up_since
    if not up:
        return np.zeros(len(locs))
    hours = [0.0] * len(locs)  # Python floats, one array at the end: 40 options a decision
    for i, (loc, ok) in enumerate(zip(locs, avail.tolist(), strict=True)):
        since = up.get(loc) if ok else None
        if since is not None:
            h = (now - since).total_seconds() / 3600.0
            hours[i] = h if h > 0.0 else 0.0
    return np.asarray(hours, dtype=np.float64)


def state(
    job: JobView,
    now: datetime,
    running: int,
    spot: list[Placement],
    avail: np.ndarray,
    od: list[Placement],
    ages: np.ndarray,
    learned: tuple[float, float] | None = None,
) -> StepState:
    """The strategy's view of the job now; ``learned``: the chance spot is up where the job
    would go and the spot lifetime expected there (:mod:`provisioner.core.availability`)."""
    cur, total, deadline = job.current, job.work_total_h, job.deadline
    pending = 0.0
    if running != NONE and cur is not None and cur.launched_at is not None:
        pending = max(0.0, job.changeover_h - _hours(now - cur.launched_at))
    left_h = 1.0 if total is None else max(0.0, total - job.work_done_h)
    if total is None or deadline is None:  # nothing to pace against: never short of time
        time_left = horizon = math.inf
    else:
        time_left = _hours(deadline - now)
        horizon = _hours(deadline - job.submitted_at)
        if job.policy.windows:
            wins = [(w.cron, w.duration) for w in job.policy.windows]
            time_left = st.window_hours_left(wins, now, deadline, job.changeover_h)
    up = [p for i, p in enumerate(spot) if avail[i]]
    p_od = (
        od[0].price_per_hour if od else next((p.offer.price for p in spot if p.offer.price), None)
    )
    return StepState.single(
        elapsed_h=_hours(now - job.submitted_at),
        time_left_h=time_left,
        work_left_h=left_h,
        work_total_h=left_h + job.work_done_h if total is None else total,
        horizon_h=horizon,
        running=running,
        pending_h=pending,
        spot_available=bool(avail.any()),
        spot_age_h=float(ages.max()) if len(ages) else 0.0,
        step_h=job.step_h,
        overhead_h=job.changeover_h,
        price_on_demand=3.06 if p_od is None else p_od,
        price_spot=launch_price(up[0]) if up else 0.97,
        keeps_progress=job.checkpoint_on_notice,
        make_before_break=True,  # decide(): every switch, a gang's too
        **({} if learned is None else {"spot_p_up": learned[0], "spot_life_h": learned[1]}),
    )


def why(strat: Strategy, s: StepState, wish: int, choice: int) -> str:
    slack = float(s.time_left_h[0] - s.work_left_h[0] - s.pending_h[0])
    text = (
        f"{strat.name} chose {st.MARKET_NAMES[choice]}; work left {float(s.work_left_h[0]):.2f} h, "
        f"time left {float(s.time_left_h[0]):.2f} h, slack {slack:.2f} h"
    )
    if wish != choice:
        text += (
            f" (wanted {st.MARKET_NAMES[wish]}: overruled by the deadline safety net or the offers)"
        )
    return text
