"""Market strategies: run on spot, on on-demand, or wait, at each decision step.

A strategy is a small pure object. It looks at a :class:`StepState` (time and work left, what
is running, whether spot capacity is there now) and says which market it *wants*;
:func:`choose_market` then applies the one safety net every strategy shares (Can't Be Late,
NSDI'24: never let the job get into a state from which on-demand could no longer finish it
by the deadline). Every field of a :class:`StepState` may be a numpy array (one value per
simulated window) or a one-element array, so the same code serves ``decide()`` (one job) and
the benchmark's vectorised replay (hundreds of windows at once): one rule, two drivers.

Markets are small integer codes: :data:`NONE` (wait, nothing running), :data:`ON_DEMAND`,
:data:`SPOT`.

Strategies (pick one by name with :func:`get_strategy`):

``on-demand``
    on-demand only.
``greedy``
    spot whenever it is available, else wait; the safety net brings on-demand in at the end.
``uniform-progress``
    Can't Be Late §5.2: spot whenever available; when spot is not available, on-demand only
    while progress is behind the uniform line ``C0·t/R0``; once on on-demand, stay until
    progress is ahead of the line ``2d`` later (hysteresis).
``eager-next-region``
    SkyPilot's EAGER_NEXT_REGION failover: greedy on the market, and after a preemption the
    next zone in turn (the zone just lost is tried last).
``provisioner``
    ours, the default: see :class:`SlackAware`.
``spot-only``
    for ``market: spot`` policies: spot or wait (``decide()`` never buys on-demand for them).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ClassVar

import numpy as np

NONE = 0
ON_DEMAND = 1
SPOT = 2
MARKET_NAMES = {NONE: "none", ON_DEMAND: "on-demand", SPOT: "spot"}
EPS_H = 1e-7  # tolerance for comparisons of hours (float noise, never a policy margin)

Array = np.ndarray


@dataclass(frozen=True)
class StepState:
    """What a strategy knows at a decision step. Hours throughout; arrays or scalars.

    ``running`` is the market of the instance alive now (NONE when none), ``pending_h`` the
    part of its changeover still to go (launch, setup, restore: no progress yet).
    ``spot_available`` says spot capacity is there now (some zone could launch, or the
    running spot instance is up); ``spot_age_h`` how long it has been there without a break
    (the longest over the usable zones; 0 when it just came, or is not there). ``step_h`` is the time to the next decision; ``overhead_h`` the
    changeover ``d`` a new instance costs; ``margin_h`` extra safety the caller wants kept
    (e.g. checkpoint loss that a preemption could cause).
    """

    elapsed_h: Array
    time_left_h: Array
    work_left_h: Array
    work_total_h: Array
    horizon_h: Array
    running: Array
    pending_h: Array
    spot_available: Array
    spot_age_h: Array
    step_h: float
    overhead_h: float
    price_on_demand: float | Array = 3.06  # one price, or one per window
    price_spot: float | Array = 0.97
    margin_h: float = 0.0
    keeps_progress: bool = True  # progress made on spot survives a preemption

    @classmethod
    def single(cls, **values: float | int | bool) -> StepState:
        """A one-window state from plain numbers (what ``decide()`` builds)."""
        scalars = {"step_h", "overhead_h", "price_on_demand", "price_spot", "margin_h"}
        kw: dict[str, object] = {}
        for k, v in values.items():
            if k == "keeps_progress":
                kw[k] = bool(v)
            elif k in scalars:
                kw[k] = float(v)
            elif k == "running":
                kw[k] = np.asarray([v], dtype=np.int8)
            elif k == "spot_available":
                kw[k] = np.asarray([v], dtype=bool)
            else:
                kw[k] = np.asarray([v], dtype=np.float64)
        return cls(**kw)  # type: ignore[arg-type]


# -- the safety net --------------------------------------------------------------------------


def spot_is_safe(s: StepState) -> Array:
    """Spot (continuing, or starting now) for one step still leaves on-demand able to finish.

    After one step on spot the job has made at least ``step - overhead still pending`` of
    progress (capacity is there for the step), and if the spot instance is then lost,
    on-demand must still fit: ``R - g >= (W - progress) + d + margin``. Where a preemption
    loses the progress since the last periodic checkpoint (``keeps_progress`` false), the
    step's progress is not counted on.
    """
    pend = np.where(s.running == SPOT, s.pending_h, s.overhead_h)
    progress = np.clip(s.step_h - pend, 0.0, None) if s.keeps_progress else 0.0
    left_after = s.work_left_h - progress
    return (s.time_left_h - s.step_h) - left_after - s.overhead_h - s.margin_h >= -EPS_H


def waiting_is_safe(s: StepState) -> Array:
    """Waiting one step (no instance) still leaves on-demand able to finish: ``R - g >= W + d``."""
    return (s.time_left_h - s.step_h) - s.work_left_h - s.overhead_h - s.margin_h >= -EPS_H


def choose_market(strategy: Strategy, s: StepState) -> Array:
    """The market to be on for the next step: the strategy's wish, made feasible and safe.

    Spot is chosen only where capacity is there; a wish that the safety net cannot allow
    becomes on-demand. On-demand is never overridden.
    """
    want = np.asarray(strategy.want(s), dtype=np.int8)
    want = np.where((want == SPOT) & ~s.spot_available, NONE, want)
    want = np.where((want == SPOT) & ~spot_is_safe(s), ON_DEMAND, want)
    want = np.where((want == NONE) & ~waiting_is_safe(s), ON_DEMAND, want)
    done = s.work_left_h <= EPS_H
    return np.where(done, NONE, want).astype(np.int8)


def window_hours_left(
    windows: list[tuple[str, timedelta]], now: datetime, deadline: datetime, changeover_h: float
) -> float:
    """Hours inside time ``windows`` ((cron, duration) pairs) from ``now`` to ``deadline``, less
    one changeover per window still to open (each starts a new instance): the time a job with
    windows really has left."""
    from policies.cron import CronSpec, in_window, next_window_start

    wins = windows
    t, total, openings = now, 0.0, 0
    for _ in range(10_000):
        if t >= deadline:
            break
        if in_window(wins, t):
            end = t
            for expr, dur in wins:
                start = CronSpec.parse(expr).previous(t, limit=dur + timedelta(minutes=1))
                if start is not None and t < start + dur:
                    end = max(end, start + dur)
            seg_end = min(end, deadline)
            total += (seg_end - t).total_seconds() / 3600.0
            t = max(seg_end, t + timedelta(minutes=1))
        else:
            nxt = next_window_start(wins, t)
            if nxt is None or nxt >= deadline:
                break
            openings += 1
            t = nxt
    return total - openings * changeover_h


# -- zone choice -----------------------------------------------------------------------------


def first_available(avail: Array, order_start: Array | None = None) -> Array:
    """Index of the first True per row of ``avail`` (n, Z), scanning from ``order_start``
    cyclically (0 when None); -1 where a row has none."""
    n, z = avail.shape
    if z == 0:
        return np.full(n, -1, dtype=np.int64)
    if order_start is None:
        idx = np.argmax(avail, axis=1)
        return np.where(avail.any(axis=1), idx, -1)
    cols = (order_start[:, None] + np.arange(z)[None, :]) % z
    rolled = np.take_along_axis(avail, cols, axis=1)
    k = np.argmax(rolled, axis=1)
    return np.where(rolled.any(axis=1), cols[np.arange(n), k], -1)


# -- strategies ------------------------------------------------------------------------------


class Strategy:
    """Base: a named, stateless rule from :class:`StepState` to a wished-for market."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    uses_spot: ClassVar[bool] = True

    def want(self, s: StepState) -> Array:
        raise NotImplementedError

    def pick_zone(self, avail: Array, age: Array, current: Array, last: Array) -> Array:
        """The spot zone (option index) to use per row: stay on the running one while it is
        up, else the first available in the caller's ranking. ``avail``, ``age``: (rows,
        zones) capacity now and for how long (hours); ``current``: the zone of the running
        spot instance (-1 none); ``last``: the zone of the latest attempt (-1 none)."""
        n = avail.shape[0]
        rows = np.arange(n)
        cur_ok = (current >= 0) & avail[rows, np.maximum(current, 0)]
        return np.where(cur_ok, current, first_available(avail))

    def __repr__(self) -> str:
        return f"<strategy {self.name}>"


class OnDemandOnly(Strategy):
    name = "on-demand"
    summary = "on-demand only"
    uses_spot = False

    def want(self, s: StepState) -> Array:
        return np.full(np.shape(s.work_left_h), ON_DEMAND, dtype=np.int8)


class Greedy(Strategy):
    name = "greedy"
    summary = "spot whenever available, else wait; the safety net brings on-demand in"

    def want(self, s: StepState) -> Array:
        return np.where(s.spot_available, SPOT, NONE).astype(np.int8)


class SpotOnly(Greedy):
    """For policies with ``market: spot``: spot or wait. The safety net still applies in
    ``choose_market``; ``decide()`` drops on-demand wishes for such policies."""

    name = "spot-only"
    summary = "spot or wait; never on-demand (the deadline may be missed)"


class UniformProgress(Strategy):
    name = "uniform-progress"
    summary = "Can't Be Late §5.2: keep progress on the line C0·t/R0, hysteresis 2d"

    @staticmethod
    def _behind(s: StepState, at_h: Array | float) -> Array:
        done = s.work_total_h - s.work_left_h
        expected = np.asarray(at_h) * s.work_total_h / s.horizon_h
        return done < expected - EPS_H

    def want(self, s: StepState) -> Array:
        hold_od = (s.running == ON_DEMAND) & self._behind(s, s.elapsed_h + 2 * s.overhead_h)
        behind = self._behind(s, s.elapsed_h)
        out = np.where(behind, ON_DEMAND, NONE)
        out = np.where(s.spot_available, SPOT, out)
        return np.where(hold_od, ON_DEMAND, out).astype(np.int8)


class EagerNextRegion(Greedy):
    name = "eager-next-region"
    summary = "SkyPilot EAGER_NEXT_REGION: greedy, failing over to the next zone in turn"

    def pick_zone(self, avail: Array, age: Array, current: Array, last: Array) -> Array:
        n = avail.shape[0]
        rows = np.arange(n)
        cur_ok = (current >= 0) & avail[rows, np.maximum(current, 0)]
        start = np.where(last >= 0, last + 1, 0)
        return np.where(cur_ok, current, first_available(avail, start))


class SlackAware(Strategy):
    """Ours (``provisioner``, the default): wait for spot only with slack to spare.

    The slack ``sigma = R - W - pending`` is the time the job can still lose (to waiting or
    to changeovers) and make its deadline on on-demand. It is spent on two things: waiting
    for spot while capacity is gone, and changeovers back to spot when it returns. Greedy
    spends it all on waiting and then sits on on-demand to the end while spot is back
    (the safety net forbids the changeover); Uniform Progress buys on-demand early and
    returns to spot too eagerly, paying changeovers for spot that lasts minutes. So:

    * **reserve**: keep ``2d + step + 10% of the time left`` of slack. Above it, wait for spot
      when it is gone; below it, run on-demand (waiting would eat slack that future
      changeovers need). ``2d + step`` is one spot try plus the fall-back to on-demand and one
      step of delay (the least that still allows a try); the share of the time left keeps
      room for the changeovers of the hours still to come and shrinks with them.
    * **hold**: once on on-demand, stay until the slack is 10 changeovers above the reserve,
      so each on-demand changeover buys a long, useful block (at most ~10% lost to it).
    * **return**: while on-demand is still needed, leave it for spot only once capacity has
      been back for the break-even time ``d·(p_od + p_spot)/(p_od - p_spot)`` (ski rental: the changeovers a
      switch costs, against what an hour on spot saves). Spot capacity that has lasted tends
      to last (spot lifetimes are heavy-tailed); a blip of minutes is not worth two
      changeovers.
    * **zone**: among zones with capacity, the one that has had it longest (same reason).

    The constants are round numbers with the reasons above, stated in units of the job's
    own changeover, step and prices; none is derived from a trace file.
    """

    name = "provisioner"
    summary = (
        "ours: wait for spot only with slack above a reserve; hold on-demand; ski-rental return"
    )
    RESERVE_SHARE = 0.10  # of the time left, kept as slack for future changeovers
    HOLD_CHANGEOVERS = 10.0  # hysteresis on leaving on-demand, in changeovers

    def reserve_h(self, s: StepState) -> Array:
        return 2 * s.overhead_h + s.step_h + s.margin_h + self.RESERVE_SHARE * s.time_left_h

    @staticmethod
    def breakeven_h(s: StepState) -> float | Array:
        saving = s.price_on_demand - s.price_spot
        if np.ndim(saving) == 0:
            if saving <= 0:
                return float("inf")
            return s.overhead_h * (s.price_on_demand + s.price_spot) / saving
        # one price pair per window (the estimate replays many placements at once)
        ok = np.asarray(saving) > 0
        total = np.asarray(s.price_on_demand + s.price_spot)
        return np.where(ok, s.overhead_h * total / np.where(ok, saving, 1.0), np.inf)

    def want(self, s: StepState) -> Array:
        slack = s.time_left_h - s.work_left_h - s.pending_h
        on_od = s.running == ON_DEMAND
        hold = np.where(on_od, self.HOLD_CHANGEOVERS * s.overhead_h, 0.0)
        short = slack < self.reserve_h(s) + hold - EPS_H
        out = np.where(short, ON_DEMAND, NONE)
        back = s.spot_age_h >= self.breakeven_h(s) - EPS_H
        take = s.spot_available & (~(on_od & short) | back)
        return np.where(take, SPOT, out).astype(np.int8)

    def pick_zone(self, avail: Array, age: Array, current: Array, last: Array) -> Array:
        n = avail.shape[0]
        rows = np.arange(n)
        cur_ok = (current >= 0) & avail[rows, np.maximum(current, 0)]
        if avail.shape[1] == 0:
            return np.full(n, -1, dtype=np.int64)
        oldest = np.argmax(np.where(avail, age, -1.0), axis=1)  # ties: the caller's ranking
        return np.where(cur_ok, current, np.where(avail.any(axis=1), oldest, -1))


def unpaced_choice(strategy: Strategy, s: StepState, has_on_demand: bool) -> int:
    """The market for a job with no deadline (or no work estimate): nothing to pace against.

    Spot when there is capacity (leaving on-demand for it only after the break-even time, so a
    flapping zone does not cost two changeovers a blip); otherwise on-demand where the policy
    has it, except for the strategies that wait for spot by design (greedy, spot-only, eager).
    """
    if strategy.name == OnDemandOnly.name:
        return ON_DEMAND
    on_od = int(s.running[0]) == ON_DEMAND
    if bool(s.spot_available[0]) and (
        not on_od or float(s.spot_age_h[0]) >= SlackAware.breakeven_h(s)
    ):
        return SPOT
    if has_on_demand and not isinstance(strategy, Greedy):
        return ON_DEMAND
    return NONE


STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls
    for cls in (OnDemandOnly, Greedy, UniformProgress, EagerNextRegion, SlackAware, SpotOnly)
}
DEFAULT_STRATEGY = SlackAware.name
#: the strategies the benchmark compares (spot-only may miss deadlines: not a contender)
COMPARED = ("on-demand", "greedy", "uniform-progress", "eager-next-region", "provisioner")


def get_strategy(name: str) -> Strategy:
    """A strategy by name (see the module docstring); ``ValueError`` names the known ones."""
    cls = STRATEGIES.get(name)
    if cls is None:
        known = ", ".join(sorted(STRATEGIES))
        raise ValueError(f"unknown strategy {name!r} (known: {known})")
    return cls()
