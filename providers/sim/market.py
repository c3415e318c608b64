"""Spot availability and price per zone over simulated time: a recorded trace or a seeded model.

Traces (one file per zone) are read by the core's parser (:mod:`provisioner.core.traces`),
the one the simulator uses, so a zone's capacity here is what ``provisioner simulate`` sees:

- JSON, the layout of ``../shared/data/traces``: ``{"metadata": {"gap_seconds": G}, "data":
  [1, 1, 0, ...], "prices": [...]}`` where point ``i`` covers ``[i·G, (i+1)·G)`` seconds and a
  value >= 1 means available (``prices`` is optional);
- CSV ``timestamp,available[,price]`` (a header row is optional): ``timestamp`` in seconds or
  an ISO time; each row holds until the next one, on a grid of the rows' median spacing
  starting at the first row.

A trace loops when simulated time runs past its end. Without a trace, :class:`StochasticZone`
alternates available and unavailable spells with exponential lengths (means ``mtbp_hours``
and ``outage_hours``), seeded by ``(seed, zone)``: the same seed gives the same market.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.core.models import Offer
from provisioner.core.rebalance import RebalanceModel


@dataclass
class Trace:
    """Change points ``times`` (simulated seconds, ascending, first 0) with their values."""

    times: list[float]
    available: list[bool]
    prices: list[float | None]
    period: float

    def _index(self, t: float) -> int:
        if self.period > 0:
            t = t % self.period
        return max(0, bisect.bisect_right(self.times, t) - 1)

    def available_at(self, t: float) -> bool:
        return self.available[self._index(t)]

    def price_at(self, t: float) -> float | None:
        return self.prices[self._index(t)]


def load_trace(path: str | Path) -> Trace:
    """The zone's trace as change points, read as the simulator reads it (a bad file is
    :class:`provisioner.core.traces.TraceError`, naming the file)."""
    from provisioner import trace_files  # numpy: only for a market with traces

    grid = trace_files.load_trace(path)
    gap = grid.gap_s
    n = len(grid)
    prices: list[float | None] = (
        [float(v) for v in grid.prices] if grid.prices is not None else [None] * n
    )
    return Trace(
        [i * gap for i in range(n)],
        [bool(v >= 1) for v in grid.values],
        prices,
        period=n * gap,
    )


@dataclass
class StochasticZone:
    """Alternating available/unavailable spells with exponential lengths, seeded per zone."""

    seed: int
    zone: str
    mtbp_s: float  # mean available spell (simulated seconds)
    outage_s: float  # mean unavailable spell
    _changes: list[float] = field(default_factory=list)  # spell boundaries; starts available
    _rng: random.Random | None = None

    def available_at(self, t: float) -> bool:
        if self._rng is None:
            self._rng = random.Random(f"{self.seed}:{self.zone}")
        while not self._changes or self._changes[-1] <= t:
            last = self._changes[-1] if self._changes else 0.0
            mean = self.mtbp_s if len(self._changes) % 2 == 0 else self.outage_s
            self._changes.append(last + self._rng.expovariate(1.0 / max(mean, 1e-6)))
        # an even number of boundaries passed: inside an available spell
        return bisect.bisect_right(self._changes, t) % 2 == 0


class Market:
    """Availability and price per zone at simulated time ``t`` (seconds)."""

    def __init__(
        self,
        *,
        traces: dict[str, str] | None = None,
        seed: int = 0,
        mtbp_hours: float | None = None,
        outage_hours: float = 0.5,
        rebalance: RebalanceModel | None = None,
    ) -> None:
        self.traces = {zone: load_trace(path) for zone, path in (traces or {}).items()}
        self.seed = seed
        self.mtbp_hours = mtbp_hours
        self.outage_hours = outage_hours
        self._models: dict[str, StochasticZone] = {}
        self.rebalance = rebalance
        self._spans: dict[str, tuple[float, list[tuple[float, float]]]] = {}

    def available(self, zone: str, t: float) -> bool:
        trace = self.traces.get(zone)
        if trace is not None:
            return trace.available_at(t)
        if self.mtbp_hours is None:
            return True
        model = self._models.get(zone)
        if model is None:
            model = StochasticZone(
                self.seed, zone, self.mtbp_hours * 3600.0, self.outage_hours * 3600.0
            )
            self._models[zone] = model
        return model.available_at(t)

    def price(self, zone: str, t: float) -> float | None:
        """The trace's spot price in ``zone`` at ``t``; None: use the catalog's."""
        trace = self.traces.get(zone)
        return trace.price_at(t) if trace is not None else None

    # -- early signals ---------------------------------------------------------------------

    def _outages(self, zone: str, until: float) -> tuple[float, list[tuple[float, float]]]:
        """The zone's outages (``[down, up)``, simulated seconds) over one period of its trace
        (the period; a trace loops), or up to ``until`` of its model (period 0)."""
        trace = self.traces.get(zone)
        if trace is not None:
            out, down = [], None
            for t, up in zip(trace.times, trace.available, strict=True):
                if not up and down is None:
                    down = t
                elif up and down is not None:
                    out.append((down, t))
                    down = None
            if down is not None:
                out.append((down, trace.period))
            return trace.period, out
        self.available(zone, until)  # the spells drawn so far reach past ``until``
        model = self._models.get(zone)
        ch = model._changes if model is not None else []
        return 0.0, [(ch[i], ch[i + 1]) for i in range(0, len(ch) - 1, 2)]

    def rebalance_since(self, zone: str, launched: float, t: float) -> float | None:
        """When the rebalance recommendation served now (simulated time ``t``) to a spot
        instance launched at ``launched`` in ``zone`` was issued; None: none is served
        (:class:`~provisioner.core.rebalance.RebalanceModel`)."""
        rb = self.rebalance
        if rb is None or not rb.on:
            return None
        trace = self.traces.get(zone)
        if trace is None and self.mtbp_hours is None:
            return None  # capacity never goes: no signal, no false alarm drawn either
        if trace is not None:
            if zone not in self._spans:
                period, outages = self._outages(zone, 0.0)
                self._spans[zone] = (period, rb.windows(zone, outages, period))
            period, spans = self._spans[zone]
            loop = (t // period) * period if period > 0 else 0.0
            shifted = [(a + loop, b + loop) for a, b in spans]
            return rb.served_since(shifted, launched, t)
        _, outages = self._outages(zone, t + 3 * rb.lead_s)
        return rb.served_since(rb.windows(zone, outages, t + rb.lead_s), launched, t)


def rebalance_real(cloud: Any, inst: dict[str, Any]) -> float | None:
    """The real (or virtual-clock) epoch time at which the rebalance recommendation now served
    to ``inst`` was issued, for the metadata service (AWS-mimicking spot instances only)."""
    if inst.get("cloud") != "aws" or inst.get("market") != "spot" or inst["state"] != "running":
        return None
    now = cloud.now()
    sim_now, sim_launch = cloud.sim_time(now), cloud.sim_time(inst["launched_real"])
    at = cloud.market.rebalance_since(inst["zone"], sim_launch, sim_now)
    if at is None:
        return None
    return float(now - (sim_now - at) / cloud.config.time_scale)


class Surges:
    """Spot price surges: a zone's spot price times ``factor`` until a time on the cloud's
    clock (``POST /v1/market/surge``; the seeded run draws them). A price that passes a bid
    sent with the launch reclaims the instance, as the clouds that take a bid do; with no bid
    sent the instance runs on at the higher price and the daemon is the one to move it."""

    def __init__(self) -> None:
        self.by_zone: dict[str, tuple[float, float]] = {}  # zone -> (until, factor)

    def set(self, zone: str, factor: float, until: float) -> None:
        if factor <= 0:
            raise ValueError(f"a surge's factor must be positive, not {factor}")
        self.by_zone[zone] = (until, factor)

    def factor(self, zone: str, now: float) -> float:
        until, factor = self.by_zone.get(zone, (0.0, 1.0))
        return factor if now < until else 1.0


def spot_now(view: dict[str, Any], offers: Iterable[Offer]) -> dict[Offer, float]:
    """Each offer's spot price in a ``POST /v1/market`` answer: the zone's trace price, else
    the offer's own, times the zone's surge (an offer with neither is left out)."""
    out: dict[Offer, float] = {}
    for o in offers:
        zone = view.get(o.zone) or {}
        base = zone.get("price") or o.spot_price
        if base is not None:
            out[o] = float(base) * float(zone.get("factor") or 1.0)
    return out
