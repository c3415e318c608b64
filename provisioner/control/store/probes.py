"""Probe results in the store (table ``probe_results``, migration 0002).

One row per attempt (``uq_probe_attempt``), written by the controller when the attempt's agent
reports its probe, keyed by the attempt's (provider, instance type, GPU), which is how the
planner names an offer. ``provisioner probe`` on a user's machine writes nothing here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from provisioner.control.store import Store
from provisioner.control.store.schema import ProbeRow
from provisioner.core.measured import Key, Measured, ProbeFact, summarise
from provisioner.core.timefmt import utc


def save_probe(
    store: Store,
    *,
    job_id: str | None,
    attempt: int | None,
    provider: str,
    instance_type: str,
    gpu: str,
    gpu_count: int,
    zone: str,
    instance_id: str | None,
    at: datetime,
    report: dict[str, Any],
    verdict: str,
) -> bool:
    """Record one probe; False when that attempt's probe is recorded already (idempotent: a
    controller that crashed after writing it and reads the report again writes nothing)."""
    summary = report.get("summary") or {}
    row = ProbeRow(
        job_id=job_id,
        attempt=attempt,
        provider=provider,
        instance_type=instance_type,
        gpu=gpu,
        gpu_count=gpu_count,
        zone=zone or "",
        instance_id=instance_id,
        at=at,
        backend=str(report.get("backend") or "unknown")[:32],
        precision=summary.get("precision"),
        fraction=_float(summary.get("fraction")),
        tflops=_float(summary.get("tflops")),
        verdict=verdict,
        report=report,
    )
    if job_id is not None and has_probe(store, job_id, attempt):
        return False
    try:
        with store.session() as s:
            s.add(row)
    except IntegrityError:
        return False
    return True


def _float(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def has_probe(store: Store, job_id: str, attempt: int | None) -> bool:
    with store.session() as s:
        q = select(ProbeRow.id).where(ProbeRow.job_id == job_id, ProbeRow.attempt == attempt)
        return s.scalar(q.limit(1)) is not None


def probes(store: Store, job_id: str | None = None, limit: int | None = None) -> list[ProbeRow]:
    """Probe rows, newest first (one job's, or all)."""
    with store.session() as s:
        q = select(ProbeRow).order_by(ProbeRow.at.desc(), ProbeRow.id.desc())
        if job_id is not None:
            q = q.where(ProbeRow.job_id == job_id)
        if limit:
            q = q.limit(limit)
        return [store._fix(r) for r in s.scalars(q).all()]


def measured(store: Store, *, last: int = 20) -> dict[Key, Measured]:
    """The store's probe results summarised per (provider, instance type, GPU)."""
    with store.session() as s:
        rows = s.execute(
            select(
                ProbeRow.provider,
                ProbeRow.instance_type,
                ProbeRow.gpu,
                ProbeRow.fraction,
                ProbeRow.tflops,
                ProbeRow.precision,
                ProbeRow.at,
            ).where(ProbeRow.fraction.is_not(None))
        ).all()
    facts = [ProbeFact(p, t, g, f, tf, pr, utc(at)) for p, t, g, f, tf, pr, at in rows]
    return summarise(facts, last=last)


def verdict(store: Store, job_id: str, attempt: int | None) -> str | None:
    """The recorded verdict of an attempt's probe, or None when none is recorded."""
    with store.session() as s:
        q = select(ProbeRow.verdict).where(ProbeRow.job_id == job_id, ProbeRow.attempt == attempt)
        got = s.scalar(q.limit(1))
        return None if got is None else str(got)


def status_rows(store: Store, job_id: str) -> list[dict[str, Any]]:
    """A job's probe results for ``provisioner status``, oldest attempt first."""
    out = []
    for r in reversed(probes(store, job_id)):
        s = (r.report or {}).get("summary") or {}
        out.append(
            {
                "attempt": r.attempt,
                "instance_id": r.instance_id,
                "provider": r.provider,
                "zone": r.zone,
                "instance_type": r.instance_type,
                "gpu": f"{r.gpu_count}x {r.gpu}",
                "backend": r.backend,
                "precision": r.precision,
                "fraction": r.fraction,
                "tflops": r.tflops,
                "verdict": r.verdict,
                "note": s.get("note") or (r.report or {}).get("error"),
                "at": r.at.isoformat(),
            }
        )
    return out
