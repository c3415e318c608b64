"""What ran and what it cost, from the store: the rows ``provisioner cost`` prints.

An attempt's cost is what the reconciler billed it (``attempts.cost_usd``, by
:func:`provisioner.control.records.attempt_cost`: every node of a gang); a running attempt is billed the same way up to
``now``. Per day and per window the cost is split by :func:`provisioner.core.spend.split`, so
every grouping adds up to the same attempts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from provisioner.control.records import attempt_cost
from provisioner.control.store import AttemptRow, JobRow
from provisioner.core.spend import Piece, clip, split

GROUPINGS = ("job", "attempt", "cloud", "day")


@dataclass
class AttemptCost:
    job: JobRow
    row: AttemptRow
    billed_usd: float  # the whole attempt, as billed (or as billed so far when running)
    pieces: list[Piece] = field(default_factory=list)  # its parts inside the window, by day

    @property
    def cost_usd(self) -> float:
        return sum(p.cost_usd for p in self.pieces)

    @property
    def hours(self) -> float:
        return sum((p.end - p.start).total_seconds() for p in self.pieces) / 3600.0


def attempt_costs(
    store: Any,
    jobs: Sequence[JobRow],
    now: datetime,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[AttemptCost]:
    """Every attempt of ``jobs``, billed, split by UTC day and clipped to ``[since, until)``;
    with a window, only the attempts that ran in it."""
    by_job = store.attempts_for([j.id for j in jobs])
    cuts = [t for t in (since, until) if t is not None]
    out = []
    for job in jobs:
        for a in by_job.get(job.id, []):
            if a.launched_at is None:
                billed, pieces = a.cost_usd, []
            else:
                end = a.ended_at or now
                billed = (
                    a.cost_usd
                    if a.ended_at is not None
                    else attempt_cost(a, now, job.provider_options)
                )
                pieces = clip(split(billed, a.launched_at, end, cuts), since, until)
            if cuts and not pieces:
                continue  # it ran wholly outside the window (or never ran): not in it
            out.append(AttemptCost(job, a, billed, pieces))
    return out


def _diff(cost: float, est: float | None) -> dict[str, Any]:
    if est is None:
        return {"diff_usd": None, "diff_pct": None}
    return {
        "diff_usd": round(cost - est, 6),
        "diff_pct": None if est == 0 else round(100.0 * (cost - est) / est, 2),
    }


def attempt_doc(c: AttemptCost) -> dict[str, Any]:
    a = c.row
    return {
        "job_id": a.job_id,
        "attempt": a.attempt,
        "instance_id": a.instance_id,
        "provider": a.provider,
        "zone": a.zone or a.region,
        "instance_type": a.instance_type,
        "market": a.market,
        "price_per_hour": a.price_per_hour,
        "started_at": a.launched_at.isoformat() if a.launched_at else None,
        "ended_at": a.ended_at.isoformat() if a.ended_at else None,
        "hours": round(c.hours, 6),
        "cost_usd": round(c.cost_usd, 6),
        "billed_usd": round(c.billed_usd, 6),
        "estimate_usd": a.estimate_usd,
        "state": a.state,
        "end_reason": a.end_reason,
    }


def job_docs(costs: Sequence[AttemptCost]) -> list[dict[str, Any]]:
    """Per job: its cost in the window and the estimate made at its first launch."""
    out: dict[str, dict[str, Any]] = {}
    for c in costs:
        j = out.get(c.job.id)
        if j is None:
            first = c.row  # attempts come in order: the first launch's estimate is the job's
            j = out[c.job.id] = {
                "job_id": c.job.id,
                "name": c.job.name,
                "state": c.job.state,
                "attempts": 0,
                "hours": 0.0,
                "cost_usd": 0.0,
                "estimate_usd": first.estimate_usd,
                "estimate_p10_usd": first.estimate_p10_usd,
                "estimate_p90_usd": first.estimate_p90_usd,
            }
        j["attempts"] += 1
        j["hours"] += c.hours
        j["cost_usd"] += c.cost_usd
    clipped = {c.job.id for c in costs if abs(c.cost_usd - c.billed_usd) > 1e-9}
    for j in out.values():
        j["hours"] = round(j["hours"], 6)
        j["cost_usd"] = round(j["cost_usd"], 6)
        # the estimate is the whole job's: no difference against a part of it (a window)
        est = None if j["job_id"] in clipped else j["estimate_usd"]
        j.update(_diff(j["cost_usd"], est))
    return list(out.values())


def cloud_docs(costs: Sequence[AttemptCost]) -> list[dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for c in costs:
        d = out.setdefault(
            c.row.provider,
            {"provider": c.row.provider, "attempts": 0, "hours": 0.0, "cost_usd": 0.0},
        )
        d["attempts"] += 1
        d["hours"] += c.hours
        d["cost_usd"] += c.cost_usd
    return [
        {**d, "hours": round(d["hours"], 6), "cost_usd": round(d["cost_usd"], 6)}
        for _, d in sorted(out.items())
    ]


def day_docs(costs: Sequence[AttemptCost]) -> list[dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for c in costs:
        for p in c.pieces:
            key = p.day.isoformat()
            d = out.setdefault(key, {"day": key, "hours": 0.0, "cost_usd": 0.0, "by_cloud": {}})
            d["hours"] += (p.end - p.start).total_seconds() / 3600.0
            d["cost_usd"] += p.cost_usd
            d["by_cloud"][c.row.provider] = d["by_cloud"].get(c.row.provider, 0.0) + p.cost_usd
    return [
        {
            **d,
            "hours": round(d["hours"], 6),
            "cost_usd": round(d["cost_usd"], 6),
            "by_cloud": {k: round(v, 6) for k, v in sorted(d["by_cloud"].items())},
        }
        for _, d in sorted(out.items())
    ]


def spend_curve(costs: Sequence[AttemptCost]) -> list[tuple[datetime, float]]:
    """Cumulative spend over time (each piece accrues evenly over its span), for the plot."""
    steps: list[tuple[datetime, datetime, float]] = []  # start, end, amount
    for c in costs:
        steps.extend((p.start, p.end, p.cost_usd) for p in c.pieces)
    points: list[datetime] = sorted({t for s, e, _ in steps for t in (s, e)})
    curve = []
    for t in points:
        total = 0.0
        for s, e, amount in steps:
            if t >= e:
                total += amount
            elif t > s:
                total += amount * (t - s).total_seconds() / (e - s).total_seconds()
        curve.append((t, total))
    return curve
