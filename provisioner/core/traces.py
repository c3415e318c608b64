"""Spot availability traces: parse them, put them on a step grid, cut windows out of them.

The one reading of a trace for the simulator (:mod:`provisioner.simulate.traces` opens the
file) and for the sim cloud's market (:mod:`providers.sim.market`), so both see the same
capacity at the same moment. Pure: :func:`parse_trace` takes the file's text; the path is
only its name in messages and where the zone is read from.

Two formats are read:

* the JSON of the Can't Be Late trace release (``{"metadata": {"gap_seconds": G}, "data":
  [v0, v1, ...]}``, optionally ``"prices": [...]``): tick ``i`` covers ``[i·G, (i+1)·G)``
  seconds from the start and ``v`` is the number of spot instances available (``1`` =
  available in a single-node trace; ``0..N`` in the multi-node sets, of ``N`` instances
  asked for);
* CSV ``timestamp,available[,price]`` (header optional; the timestamp is ISO 8601 or epoch
  seconds; a row holds until the next one). The gap is the median spacing of the rows.

A trace knows nothing of policies: :meth:`Trace.available_on` turns it into one boolean per
simulation step (``True`` only when capacity was there for the *whole* step, so a blip that a
coarser step straddles still preempts), and :func:`window_starts` draws random windows.

A gang of ``nodes`` instances (issue 10) has spot capacity in a zone while at least ``nodes``
instances are there: ``available_on(step_s, nodes)``. Per-node availability (one column per
node: is that node up) becomes such a count with :func:`nodes_trace`.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

import numpy as np

from provisioner.core.timefmt import parse_time
from provisioner.errors import InputError


class TraceError(InputError, ValueError):
    """A trace file that cannot be read; the message names the file (and line for CSV)."""


@dataclass(frozen=True, eq=False)
class Trace:
    """Spot capacity in one zone over time, one value per tick of ``gap_s`` seconds."""

    name: str  # e.g. "us-west-2a_v100_1"
    zone: str  # e.g. "us-west-2a" (the file name up to the first "_", or the name)
    gap_s: float
    values: np.ndarray  # float64: instances available per tick
    prices: np.ndarray | None = None  # spot USD/h per tick, where the trace has them
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.values)

    @property
    def duration_h(self) -> float:
        return len(self.values) * self.gap_s / 3600.0

    @property
    def region(self) -> str:
        """The region the zone belongs to (``us-west-2a`` -> ``us-west-2``)."""
        z = self.zone
        return z[:-1] if len(z) > 1 and z[-1].isalpha() and z[-2].isdigit() else z

    @property
    def peak(self) -> int:
        """The most instances the trace ever shows available (1 for a single-node trace)."""
        return int(self.values.max()) if len(self.values) else 0

    def available(self, nodes: int = 1) -> np.ndarray:
        """One boolean per tick: at least ``nodes`` instances available."""
        return self.values >= nodes

    def steps(self, step_s: float) -> int:
        """How many whole steps of ``step_s`` seconds the trace covers."""
        return math.floor(len(self.values) * self.gap_s / step_s + 1e-9)

    def available_on(self, step_s: float, nodes: int = 1) -> np.ndarray:
        """One boolean per step of ``step_s`` seconds: available for the whole step."""
        avail = self.available(nodes)
        if abs(step_s - self.gap_s) < 1e-9:
            return avail.copy()
        n = self.steps(step_s)
        starts = np.arange(n) * step_s
        first = np.floor(starts / self.gap_s + 1e-9).astype(np.int64)
        last = np.ceil((starts + step_s) / self.gap_s - 1e-9).astype(np.int64) - 1
        last = np.minimum(np.maximum(last, first), len(avail) - 1)
        # all() over [first, last] via a prefix count of unavailable ticks
        down = np.concatenate([[0], np.cumsum(~avail)])
        return (down[last + 1] - down[first]) == 0

    def prices_on(self, step_s: float) -> np.ndarray | None:
        """Spot price per step (the price at the step's start), where the trace has prices."""
        if self.prices is None:
            return None
        n = self.steps(step_s)
        idx = np.minimum(
            (np.arange(n) * step_s / self.gap_s + 1e-9).astype(np.int64), len(self.prices) - 1
        )
        return self.prices[idx]


def _zone_of(name: str) -> str:
    return name.split("_", 1)[0] if "_" in name else name


def parse_trace(text: str, path: str | os.PathLike[str]) -> Trace:
    """A JSON (Can't Be Late layout) or CSV (``timestamp,available[,price]``) trace from its
    text; ``path`` names it (messages, the trace's name and zone, JSON by its suffix)."""
    p = PurePath(path)
    if p.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        return _load_json(p, text)
    return _load_csv(p, text)


def _load_json(p: PurePath, text: str) -> Trace:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{p}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    if not isinstance(doc, dict) or "data" not in doc:
        raise TraceError(f'{p}: expected {{"metadata": {{"gap_seconds": G}}, "data": [...]}}')
    meta = doc.get("metadata") or {}
    gap = meta.get("gap_seconds")
    if not isinstance(gap, int | float) or gap <= 0:
        raise TraceError(f"{p}: metadata.gap_seconds must be a positive number")
    try:
        values = np.asarray(doc["data"], dtype=np.float64)
    except (TypeError, ValueError):
        raise TraceError(f"{p}: data must be a list of numbers") from None
    if values.ndim != 1 or len(values) == 0:
        raise TraceError(f"{p}: data must be a non-empty list of numbers")
    prices = None
    if doc.get("prices") is not None:
        prices = np.asarray(doc["prices"], dtype=np.float64)
        if prices.shape != values.shape:
            raise TraceError(f"{p}: prices must have one value per data point")
    name = p.stem
    return Trace(name, _zone_of(name), float(gap), values, prices, str(p), dict(meta))


def _timestamp(text: str) -> float:
    """Epoch seconds, or an ISO time read as every other time in the project is (a time
    without a zone is UTC, not the machine's zone); ValueError where it is neither."""
    try:
        return float(text)
    except ValueError:
        pass
    dt = parse_time(text)
    if dt is None:
        raise ValueError(f"not a time: {text!r}")
    return dt.timestamp()


def _load_csv(p: PurePath, text: str) -> Trace:
    rows = list(csv.reader(text.splitlines()))
    times: list[float] = []
    vals: list[float] = []
    prices: list[float] = []
    for i, row in enumerate(rows, start=1):
        if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
            continue
        if len(row) < 2:
            raise TraceError(f"{p}:{i}: expected timestamp,available[,price]")
        try:
            t = _timestamp(row[0])
            v = float(row[1])
        except ValueError:
            if not times:  # a header line
                continue
            raise TraceError(f"{p}:{i}: cannot read {row[:2]!r} as timestamp,available") from None
        times.append(t)
        vals.append(v)
        if len(row) > 2 and row[2].strip():
            try:
                prices.append(float(row[2]))
            except ValueError:
                raise TraceError(f"{p}:{i}: price {row[2]!r} is not a number") from None
    if len(times) < 2:
        raise TraceError(f"{p}: a CSV trace needs at least two rows")
    t_arr = np.asarray(times)
    if np.any(np.diff(t_arr) <= 0):
        raise TraceError(f"{p}: timestamps must increase")
    gap = float(np.median(np.diff(t_arr)))
    # Put the rows on a regular grid: each row holds until the next one.
    n = round((t_arr[-1] - t_arr[0]) / gap) + 1
    grid = t_arr[0] + np.arange(n) * gap
    idx = np.searchsorted(t_arr, grid + 1e-6, side="right") - 1
    values = np.asarray(vals)[idx]
    price_arr = None
    if prices:
        if len(prices) != len(vals):
            raise TraceError(f"{p}: give a price on every row or on none")
        price_arr = np.asarray(prices)[idx]
    meta = {"gap_seconds": gap, "start": float(t_arr[0])}
    return Trace(p.stem, _zone_of(p.stem), gap, values, price_arr, str(p), meta)


def synthetic_trace(
    available: list[int] | np.ndarray, gap_s: float = 600.0, name: str = "synthetic"
) -> Trace:
    """A trace from a list of 0/1 (or counts), for tests and examples."""
    values = np.asarray(available, dtype=np.float64)
    return Trace(name, _zone_of(name), float(gap_s), values)


def nodes_trace(
    per_node: list[list[int]] | np.ndarray, gap_s: float = 600.0, name: str = "synthetic"
) -> Trace:
    """A multi-node trace from per-node availability, ``(ticks, nodes)`` of 0/1 (node ``j`` up
    at tick ``i``): the count of nodes up per tick, as the multi-node sets record it. A gang of
    ``N`` is then up where at least ``N`` are (:meth:`Trace.available`), whichever they are."""
    arr = np.asarray(per_node, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise TraceError(f"{name}: per-node availability must be (ticks, nodes), not {arr.shape}")
    if not np.isin(arr, (0.0, 1.0)).all():
        raise TraceError(f"{name}: per-node availability must be 0 or 1")
    meta = {"gap_seconds": float(gap_s), "nodes": int(arr.shape[1])}
    return Trace(name, _zone_of(name), float(gap_s), arr.sum(axis=1), meta=meta)


def window_starts(n_steps: int, window_steps: int, count: int, seed: int) -> np.ndarray:
    """``count`` random start steps such that ``window_steps`` fit (a seeded, sorted draw)."""
    room = n_steps - window_steps
    if room < 0:
        raise TraceError(
            f"the trace is shorter ({n_steps} steps) than the window ({window_steps} steps)"
        )
    rng = np.random.default_rng(seed)
    return np.sort(rng.integers(0, room + 1, size=count))


def step_for(overhead_s: float, gap_s: float) -> float:
    """The simulation step for a changeover of ``overhead_s``: the largest divisor of it (in
    whole seconds) that is no longer than the trace's gap, so a changeover is a whole number of
    steps and the offline optimum can be computed exactly. No overhead: the trace's gap."""
    d = round(overhead_s)
    g = math.floor(gap_s)
    if d <= 0:
        return float(gap_s)
    best = 1
    i = 1
    while i * i <= d:
        if d % i == 0:
            for c in (i, d // i):
                if c <= g and c > best:
                    best = c
        i += 1
    return float(best)
