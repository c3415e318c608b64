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
from dataclasses import dataclass, field
from pathlib import Path


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
    ) -> None:
        self.traces = {zone: load_trace(path) for zone, path in (traces or {}).items()}
        self.seed = seed
        self.mtbp_hours = mtbp_hours
        self.outage_hours = outage_hours
        self._models: dict[str, StochasticZone] = {}

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
