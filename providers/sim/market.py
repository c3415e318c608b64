"""Spot availability and price per zone over simulated time: a recorded trace or a seeded model.

Traces (one file per zone):

- JSON, the layout of ``../shared/data/traces``: ``{"metadata": {"gap_seconds": G}, "data":
  [1, 1, 0, ...], "prices": [...]}`` where point ``i`` covers ``[i·G, (i+1)·G)`` seconds and a
  value >= 1 means available (``prices`` is optional);
- CSV ``timestamp,available[,price]`` (a header row is optional): ``timestamp`` in seconds from
  the start of the trace or an ISO time (taken relative to the first row); each row holds until
  the next one.

A trace loops when simulated time runs past its end. Without a trace, :class:`StochasticZone`
alternates available and unavailable spells with exponential lengths (means ``mtbp_hours``
and ``outage_hours``), seeded by ``(seed, zone)``: the same seed gives the same market.
"""

from __future__ import annotations

import bisect
import csv
import json
import random
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path


class TraceError(ValueError):
    pass


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
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{p}: cannot read trace: {exc.strerror}") from None
    if p.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        return _json_trace(p, text)
    return _csv_trace(p, text)


def _json_trace(p: Path, text: str) -> Trace:
    try:
        doc = json.loads(text)
        gap = float(doc["metadata"]["gap_seconds"])
        data = [float(v) for v in doc["data"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise TraceError(
            f"{p}: not a trace ({{metadata: {{gap_seconds}}, data: [...]}}): {exc}"
        ) from None
    if gap <= 0 or not data:
        raise TraceError(f"{p}: empty trace or gap_seconds <= 0")
    raw_prices = doc.get("prices") or []
    prices = [
        float(raw_prices[i]) if i < len(raw_prices) and raw_prices[i] is not None else None
        for i in range(len(data))
    ]
    times = [i * gap for i in range(len(data))]
    return Trace(times, [v >= 1 for v in data], prices, period=len(data) * gap)


def _csv_trace(p: Path, text: str) -> Trace:
    rows = [r for r in csv.reader(text.splitlines()) if r and r[0].strip()]
    if rows and not _is_time(rows[0][0]):
        rows = rows[1:]  # header
    if not rows:
        raise TraceError(f"{p}: empty trace")
    points: list[tuple[float, bool, float | None]] = []
    start: float | None = None
    for n, row in enumerate(rows, 1):
        try:
            t = _seconds(row[0])
            avail = float(row[1]) >= 1
            price = float(row[2]) if len(row) > 2 and row[2].strip() else None
        except (ValueError, IndexError) as exc:
            raise TraceError(f"{p}: row {n}: expected timestamp,available[,price]: {exc}") from None
        start = t if start is None else start
        points.append((t - start, avail, price))
    points.sort(key=lambda x: x[0])
    times = [x[0] for x in points]
    gap = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 3600.0
    return Trace(times, [x[1] for x in points], [x[2] for x in points], period=times[-1] + gap)


def _is_time(text: str) -> bool:
    try:
        _seconds(text)
    except ValueError:
        return False
    return True


def _seconds(text: str) -> float:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


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
