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

Strategies (pick one by name with :func:`get_strategy`): ``on-demand`` (on-demand only);
``greedy`` (spot whenever available, else wait; the safety net brings on-demand in at the
end); ``uniform-progress`` (Can't Be Late §5.2 as the authors' simulator runs it: spot whenever
available; without spot, on-demand while progress is behind the uniform line ``C0·t/R0``; once
on on-demand, stay while spot is gone or progress is behind the line ``2d`` later);
``uniform-progress-variant`` (the project's earlier reading: the same, but it leaves
on-demand to wait once ahead); ``eager-next-region`` (SkyPilot's EAGER_NEXT_REGION failover:
greedy, and after a preemption the next zone in turn, the zone just lost tried last);
``provisioner`` (ours, the default: :class:`SlackAware`); ``learned`` (ours, learning each
zone's availability online: :class:`Learned`); ``spot-only`` (for ``market: spot`` policies:
spot or wait; ``decide()`` never buys on-demand for them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from provisioner.core.availability import PRIOR_LIFE_H
from provisioner.core.windows import window_hours_left  # noqa: F401  (re-exported)

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
    #: learned availability (:mod:`provisioner.core.availability`) of the zone with the most
    #: expected spot hours among the usable ones: the chance it has capacity now and its mean
    #: spot lifetime (hours); None where the driver gives no history
    spot_p_up: Array | None = None
    spot_life_h: Array | None = None
    #: a switch from a running instance is made before break (the driver launches the new
    #: one first; the old one works on through the changeover): a look costs no slack
    make_before_break: bool = False

    @classmethod
    def single(cls, **values: float | int | bool) -> StepState:
        """A one-window state from plain numbers (what ``decide()`` builds)."""
        scalars = {"step_h", "overhead_h", "price_on_demand", "price_spot", "margin_h"}
        kw: dict[str, object] = {}
        for k, v in values.items():
            if k in ("keeps_progress", "make_before_break"):
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


def choose_market(strategy: Strategy, s: StepState, wish: Array | None = None) -> Array:
    """The market for the next step: the strategy's wish (``wish`` where known), made safe.

    Spot is chosen only where capacity is there; a wish that the safety net cannot allow
    becomes on-demand. On-demand is never overridden.
    """
    want = np.asarray(strategy.want(s) if wish is None else wish, dtype=np.int8)
    want = np.where((want == SPOT) & ~s.spot_available, NONE, want)
    want = np.where((want == SPOT) & ~spot_is_safe(s), ON_DEMAND, want)
    want = np.where((want == NONE) & ~waiting_is_safe(s), ON_DEMAND, want)
    done = s.work_left_h <= EPS_H
    return np.where(done, NONE, want).astype(np.int8)


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

    def pick_zone(
        self, avail: Array, age: Array, current: Array, last: Array, score: Array | None = None
    ) -> Array:
        """The spot zone (option index) to use per row: stay on the running one while it is
        up, else the first available in the caller's ranking. ``avail``, ``age``: (rows,
        zones) capacity now and for how long (hours); ``current``: the zone of the running
        spot instance (-1 none); ``last``: the zone of the latest attempt (-1 none);
        ``score``: (rows, zones) the expected spot hours a launch buys, where learned."""
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


class UniformProgressVariant(Strategy):
    """The project's earlier reading of Uniform Progress (kept for comparison).

    It differs from the paper's code (:class:`UniformProgress`) in one rule, its on-demand
    exit: once progress is ahead of the line ``2d`` later it leaves on-demand even while spot is
    gone (and waits), where the paper's keeps on-demand until spot comes back."""

    name = "uniform-progress-variant"
    summary = "UP variant: leaves on-demand to wait once ahead of the line 2d later"

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


class UniformProgress(UniformProgressVariant):
    """Uniform Progress as the Can't Be Late authors' simulator runs it (NSDI'24 §5.2).

    Step by step, with ``done`` the progress, ``t`` the time since the start, ``C0`` the work
    and ``R0`` the deadline (both from the start):

    1. spot when spot is available, else nothing;
    2. behind the line (``done < t·C0/R0``): spot if available, else on-demand;
    3. on on-demand: stay there while spot is gone, and also while progress is behind the line
       ``2d`` later (hysteresis): on-demand is left for spot only, never for waiting;
    4. the paper's own safety net, on whole steps: idle or on on-demand with
       ``ceil((W + 2d)/step) >= floor(R/step)`` steps: on-demand; with
       ``ceil((W + d)/step) >= floor(R/step)``: keep a spot instance past its changeover,
       else on-demand (with ``d = 0`` and spot there: spot).

    :func:`choose_market`'s shared net still applies on top (it never binds before rule 4).
    """

    name = "uniform-progress"
    summary = "Can't Be Late §5.2 as the authors' code runs it (on-demand left for spot only)"

    def want(self, s: StepState) -> Array:
        g, d = s.step_h, s.overhead_h
        on_od = s.running == ON_DEMAND
        out = np.where(s.spot_available, SPOT, NONE)
        behind = self._behind(s, s.elapsed_h)
        out = np.where(behind, np.where(s.spot_available, SPOT, ON_DEMAND), out)
        done = s.work_total_h - s.work_left_h
        later = done <= (s.elapsed_h + 2 * d) * s.work_total_h / s.horizon_h + EPS_H
        out = np.where(on_od & (~s.spot_available | later), ON_DEMAND, out)
        steps_left = np.floor(s.time_left_h / g + EPS_H)
        need_2d = np.ceil((s.work_left_h + 2 * d) / g - EPS_H)
        need_d = np.ceil((s.work_left_h + d) / g - EPS_H)
        out = np.where((need_2d >= steps_left) & (s.running != SPOT), ON_DEMAND, out)
        settled_spot = (s.running == SPOT) & (s.pending_h <= EPS_H)
        last = np.where(settled_spot, SPOT, ON_DEMAND)
        if d <= 0:
            last = np.where(s.spot_available, SPOT, last)
        out = np.where(need_d >= steps_left, last, out)
        return out.astype(np.int8)


class EagerNextRegion(Greedy):
    name = "eager-next-region"
    summary = "SkyPilot EAGER_NEXT_REGION: greedy, failing over to the next zone in turn"

    def pick_zone(
        self, avail: Array, age: Array, current: Array, last: Array, score: Array | None = None
    ) -> Array:
        n = avail.shape[0]
        rows = np.arange(n)
        cur_ok = (current >= 0) & avail[rows, np.maximum(current, 0)]
        start = np.where(last >= 0, last + 1, 0)
        return np.where(cur_ok, current, first_available(avail, start))


class SlackAware(Strategy):
    """Ours (``provisioner``, the default): wait for spot only with slack to spare.

    The slack ``sigma = R - W - pending`` is the time the job can still lose (to waiting or
    to changeovers) and make its deadline on on-demand. Greedy spends it all on waiting and
    then sits on on-demand to the end while spot is back (the safety net forbids the
    changeover); Uniform Progress buys on-demand early and returns to spot too eagerly. So:

    * **reserve**: keep ``2d + step + s·R`` of slack (``R`` the time left, ``H`` the horizon),
      ``s = 7% + 6%·R/H``: 13% of the time left at the start, 7% at the deadline. Above it,
      wait for spot when it is gone; below it, run on-demand (waiting would eat slack that
      future changeovers need). ``2d + step`` is one spot try, the fall-back to on-demand and
      a step of delay; the share keeps room for the changeovers of the hours to come, more
      early on, when most of them (and the least known of the zone) lie ahead: a window that
      spends its slack waiting in its first hours ends on the safety net, on on-demand.
    * **hold**: once on on-demand, stay until the slack is 10 changeovers above the reserve,
      so each on-demand changeover buys a long, useful block (at most ~10% lost to it).
    * **return**: while on-demand is still needed, leave it for spot only once capacity has
      been back for the break-even time ``d·(p_od + p_spot)/(p_od - p_spot)`` (ski rental:
      the changeovers a switch costs, against what an hour on spot saves; spot lifetimes are
      heavy-tailed, a blip of minutes is not worth two changeovers), stretched by
      ``stint/U`` where the zone's mean spot lifetime ``U`` (``spot_life_h``, from the job's
      own runs) is shorter than the break-even stint ``2d·p_od/(p_od - p_spot)`` (the spot
      run that pays for the switch's overlap and the on-demand changeover after its loss).
    * **zone**: among zones with capacity, the one that has had it longest (same reason).

    Where switches are made before break (``make_before_break``; decide() makes every one
    so), leaving on-demand costs no slack (it works on through spot's changeover) and a
    refused look costs nothing, so on-demand is held longer (``HOLD_MBB`` changeovers) and
    left for spot sooner (``BREAKEVEN_MBB`` of the break-even time): more spot hours.

    Constants: round numbers with the reasons above, in the job's own changeover, step, time
    and prices; none is derived from a trace file, but for the make-before-break ones and the
    reserve's two shares, picked on the 2022-10-26 traces (docs/simulate.md).
    """

    name = "provisioner"
    summary = (
        "ours: wait for spot only with slack above a reserve; hold on-demand; ski-rental return"
    )
    RESERVE_SHARE = 0.07  # of the time left, kept as slack for future changeovers
    RESERVE_EARLY = 0.06  # more of it at the start, fading with the time left (R/H)
    HOLD_CHANGEOVERS = 10.0  # hysteresis on leaving on-demand, in changeovers
    HOLD_MBB = 35.0  # the same where switches are made before break
    BREAKEVEN_MBB = 0.5  # share of the break-even time, where switches are made before break

    def reserve_h(self, s: StepState) -> Array:
        h = np.broadcast_to(np.asarray(s.horizon_h, dtype=np.float64), np.shape(s.time_left_h))
        ahead = np.divide(s.time_left_h, h, out=np.ones(h.shape), where=np.isfinite(h) & (h > 0))
        share = self.RESERVE_SHARE + self.RESERVE_EARLY * np.clip(ahead, 0.0, 1.0)
        return 2 * s.overhead_h + s.step_h + s.margin_h + share * s.time_left_h

    @staticmethod
    def short_life(s: StepState) -> float | Array:
        """The return's stretch: the break-even stint over the zone's mean spot lifetime
        (at least 1; 1 where no lifetime is known or spot saves nothing)."""
        if s.spot_life_h is None:
            return 1.0
        saving = np.asarray(s.price_on_demand - s.price_spot, dtype=np.float64)
        per = np.asarray(s.price_on_demand) / np.where(saving > 0, saving, np.inf)
        return np.maximum(1.0, 2 * s.overhead_h * per / np.maximum(s.spot_life_h, 1e-6))

    @staticmethod
    def breakeven_h(s: StepState) -> float | Array:
        """``d·(p_od + p_spot)/(p_od - p_spot)`` (inf where spot saves nothing); one price
        pair, or one per window (the estimate replays many placements at once)."""
        saving = np.asarray(s.price_on_demand - s.price_spot, dtype=np.float64)
        ok = saving > 0
        total = np.asarray(s.price_on_demand + s.price_spot)
        return np.where(ok, s.overhead_h * total / np.where(ok, saving, 1.0), np.inf)

    def want(self, s: StepState) -> Array:
        slack = s.time_left_h - s.work_left_h - s.pending_h
        on_od = s.running == ON_DEMAND
        mbb = s.make_before_break
        hold_n = self.HOLD_MBB if mbb else self.HOLD_CHANGEOVERS
        hold = np.where(on_od, hold_n * s.overhead_h, 0.0)
        short = slack < self.reserve_h(s) + hold - EPS_H
        out = np.where(short, ON_DEMAND, NONE)
        scale = self.BREAKEVEN_MBB if mbb else 1.0
        wait_h = scale * self.breakeven_h(s) * self.short_life(s)
        back = s.spot_age_h >= wait_h - EPS_H
        take = s.spot_available & (~(on_od & short) | back)
        return np.where(take, SPOT, out).astype(np.int8)

    def pick_zone(
        self, avail: Array, age: Array, current: Array, last: Array, score: Array | None = None
    ) -> Array:
        n = avail.shape[0]
        rows = np.arange(n)
        cur_ok = (current >= 0) & avail[rows, np.maximum(current, 0)]
        if avail.shape[1] == 0:
            return np.full(n, -1, dtype=np.int64)
        oldest = np.argmax(np.where(avail, age, -1.0), axis=1)  # ties: the caller's ranking
        return np.where(cur_ok, current, np.where(avail.any(axis=1), oldest, -1))


class Learned(SlackAware):
    """Ours, learning each zone's availability online (``learned``).

    :class:`SlackAware`'s hold, with the zone's own history (:mod:`provisioner.core.availability`:
    mean spot lifetime ``U``, the chance ``p`` that a zone last seen down is back) instead:

    * **reserve**: ``2d + step``, ``PREEMPTION_COST·(W / U)·d`` (the preemptions to come) and
      a share of the time left (``RESERVE_SHARE``).
    * **return** from on-demand to spot: only when the try is worth its risk, i.e. ``p >=
      P_TRY`` and ``p·(saving over min(U, W) hours - two changeovers) > (1 - p)·one on-demand
      changeover`` (a refused try costs the on-demand instance just stopped).
    * **zone**: the usable zone with the most expected spot hours ``p·U``.

    The safety net (:func:`choose_market`) holds the deadline whatever the estimates say.
    """

    name = "learned"
    summary = "ours, learning each zone's spot lifetime and outage length online"
    # tuned on the 2022-10-26 traces only (docs/simulate.md); the preemption term came out at 0
    RESERVE_SHARE = 0.07
    PREEMPTION_COST = 0.0  # changeovers of slack kept per expected preemption
    P_TRY = 0.6  # least chance of capacity worth leaving on-demand for

    def _life(self, s: StepState) -> Array:
        if s.spot_life_h is None:
            return np.full(np.shape(s.work_left_h), PRIOR_LIFE_H)
        return np.maximum(s.spot_life_h, 1e-6)

    def reserve_h(self, s: StepState) -> Array:
        expected = self.PREEMPTION_COST * s.overhead_h * s.work_left_h / self._life(s)
        base = 2 * s.overhead_h + s.step_h + s.margin_h
        return base + expected + self.RESERVE_SHARE * s.time_left_h

    def want(self, s: StepState) -> Array:
        slack = s.time_left_h - s.work_left_h - s.pending_h
        on_od = s.running == ON_DEMAND
        hold = np.where(on_od, self.HOLD_CHANGEOVERS * s.overhead_h, 0.0)
        short = slack < self.reserve_h(s) + hold - EPS_H
        out = np.where(short, ON_DEMAND, NONE)
        p = np.ones(np.shape(s.work_left_h)) if s.spot_p_up is None else s.spot_p_up
        d, po, ps = s.overhead_h, s.price_on_demand, s.price_spot
        gain = (po - ps) * np.minimum(self._life(s), s.work_left_h) - d * (po + ps)
        back = (p >= self.P_TRY) & (p * gain > (1.0 - p) * d * po + EPS_H)
        take = s.spot_available & (~(on_od & short) | back)
        return np.where(take, SPOT, out).astype(np.int8)

    def pick_zone(
        self, avail: Array, age: Array, current: Array, last: Array, score: Array | None = None
    ) -> Array:
        if score is None:
            return super().pick_zone(avail, age, current, last)
        n = avail.shape[0]
        rows = np.arange(n)
        cur_ok = (current >= 0) & avail[rows, np.maximum(current, 0)]
        if avail.shape[1] == 0:
            return np.full(n, -1, dtype=np.int64)
        best = np.argmax(np.where(avail, score, -1.0), axis=1)
        return np.where(cur_ok, current, np.where(avail.any(axis=1), best, -1))


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
    for cls in (
        OnDemandOnly,
        Greedy,
        UniformProgress,
        UniformProgressVariant,
        EagerNextRegion,
        SlackAware,
        Learned,
        SpotOnly,
    )
}
DEFAULT_STRATEGY = SlackAware.name
#: the strategies the benchmark compares (spot-only may miss deadlines: not a contender)
COMPARED = (
    "on-demand",
    "greedy",
    "uniform-progress",
    "uniform-progress-variant",
    "eager-next-region",
    "provisioner",
    "learned",
)


def get_strategy(name: str) -> Strategy:
    """A strategy by name (see the module docstring); ``ValueError`` names the known ones."""
    cls = STRATEGIES.get(name)
    if cls is None:
        known = ", ".join(sorted(STRATEGIES))
        raise ValueError(f"unknown strategy {name!r} (known: {known})")
    return cls()
