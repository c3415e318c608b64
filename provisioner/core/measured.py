"""Measured figures per (cloud, instance type, GPU), for the planner: pure data, no I/O.

The controller summarises the store's probe results
(:mod:`provisioner.control.store.probes`) into :class:`Measured` values and hands them to the
planner in ``PlanContext.measured``; the planner multiplies the datasheet TFLOPS by
``fraction`` in the TFLOPS-per-dollar score and divides the estimated hours by it. Nothing here reads a clock or a database.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

#: (provider, instance_type, gpu) as the catalog and the attempts spell them.
Key = tuple[str, str, str]


@dataclass(frozen=True)
class Measured:
    """What probes measured of one (provider, instance type, GPU): the median over runs."""

    provider: str
    instance_type: str
    gpu: str
    runs: int
    fraction: float  # median measured/datasheet matmul throughput (the planner's precision)
    tflops: float | None = None  # median measured TFLOPS of the whole instance
    precision: str | None = None
    lowest: float | None = None  # the worst run's fraction
    last_at: datetime | None = None

    @property
    def key(self) -> Key:
        return (self.provider, self.instance_type, self.gpu)

    def as_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "instance_type": self.instance_type,
            "gpu": self.gpu,
            "runs": self.runs,
            "fraction": self.fraction,
            "lowest": self.lowest,
            "tflops": self.tflops,
            "precision": self.precision,
            "last_at": None if self.last_at is None else self.last_at.isoformat(),
        }


@dataclass(frozen=True)
class ProbeFact:
    """One probe result as the summary needs it (a row of the store, or of a test)."""

    provider: str
    instance_type: str
    gpu: str
    fraction: float | None
    tflops: float | None = None
    precision: str | None = None
    at: datetime | None = None


def summarise(facts: Iterable[ProbeFact], *, last: int = 20) -> dict[Key, Measured]:
    """Median over the ``last`` runs with a fraction, per (provider, instance type, GPU).
    Runs that measured nothing comparable (a CPU, a failed probe) do not count."""
    import statistics  # here: the planner imports this module on every cold `plan`

    by: dict[Key, list[ProbeFact]] = {}
    for f in facts:
        if f.fraction is None or f.fraction <= 0:
            continue
        by.setdefault((f.provider, f.instance_type, f.gpu), []).append(f)
    out: dict[Key, Measured] = {}
    for key, rows in by.items():
        rows.sort(key=lambda r: (r.at is None, r.at or datetime.min))
        rows = rows[-last:]
        fractions = [float(r.fraction) for r in rows if r.fraction is not None]
        tflops = [float(r.tflops) for r in rows if r.tflops]
        out[key] = Measured(
            provider=key[0],
            instance_type=key[1],
            gpu=key[2],
            runs=len(fractions),
            fraction=round(statistics.median(fractions), 4),
            tflops=round(statistics.median(tflops), 3) if tflops else None,
            precision=rows[-1].precision,
            lowest=min(fractions),
            last_at=rows[-1].at,
        )
    return out
