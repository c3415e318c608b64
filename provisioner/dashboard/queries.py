"""Read-only queries for the dashboard, through the store's public tables.

Every function returns plain data (dicts, lists, numbers, aware datetimes) that both the HTML
templates and the JSON API use. Nothing here writes. Lists are paginated in SQL (``LIMIT`` /
``OFFSET`` over an indexed order) and summaries are ``GROUP BY`` aggregates, so a store with
10,000 jobs costs a page's worth of rows, not the whole table.

Credentials never leave: provider options and the policy's ``job.env`` are not returned;
messages from the store go through :func:`providers.base.redact`."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from sqlalchemy import func, select

from provisioner.control.store import AttemptRow, EventRow, InstanceRow, JobRow, Store
from provisioner.core.timefmt import utc
from provisioner.dashboard.history import price_history

#: Job states in the order the page lists their counts.
STATES = (
    "pending",
    "running",
    "recovering",
    "waiting",
    "succeeded",
    "failed",
    "cancelled",
    "stopped",
)
ALIVE = ("pending", "running")
MAX_PER_PAGE = 1000
#: Events shown on a job's page (the newest; `provisioner logs` has them all).
JOB_EVENTS = 500


def _redact(text: str) -> str:
    from providers.base import redact

    return redact(text)


@dataclass(frozen=True)
class Paging:
    page: int
    per_page: int
    total: int

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.per_page))

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.per_page

    def as_dict(self) -> dict[str, int]:
        return {
            "page": self.page,
            "per_page": self.per_page,
            "total": self.total,
            "pages": self.pages,
        }


def paging(page: int, per_page: int, total: int) -> Paging:
    per_page = max(1, min(MAX_PER_PAGE, per_page))
    pages = max(1, math.ceil(total / per_page))
    return Paging(max(1, min(page, pages)), per_page, total)


# -- policies (parsed once per distinct text; jobs share policies) ----------------------------


@lru_cache(maxsize=512)
def _policy(text: str) -> Any:
    from policies.loader import PolicyError, parse_policy

    try:
        return parse_policy(text, "<stored policy>")
    except PolicyError:
        return None


def policy_of(job: JobRow) -> Any:
    return _policy(job.policy_yaml)


def policy_summary(policy: Any) -> dict[str, Any]:
    """The rules of a policy worth showing (never ``job.env``: it may hold secrets)."""
    if policy is None:
        return {}
    r, b, bid, res = policy.resources, policy.budget, policy.bid_cap, policy.residency
    return {
        "name": policy.name,
        "market": policy.market.value,
        "gpus": list(r.gpus or []),
        "gpu_count": r.gpu_count,
        "min_vram_gb": r.min_vram_gb,
        "max_total_usd": b.max_total,
        "max_price_per_hour": b.max_price_per_hour,
        "max_spot_price_per_hour": bid.max_spot_price_per_hour,
        "max_spot_price_per_gpu_hour": bid.max_spot_price_per_gpu_hour,
        "max_fraction_of_on_demand": bid.max_fraction_of_on_demand,
        "residency_allow": list(res.allow),
        "residency_deny": list(res.deny),
        "allow_regions": list(res.allow_regions),
        "deny_regions": list(res.deny_regions),
        "providers": list(res.providers),
        "checkpoint_interval_s": policy.checkpoint.interval.total_seconds(),
        "max_restarts": getattr(policy.restart, "max_restarts", None),
    }


# -- jobs -----------------------------------------------------------------------------------


def _progress(job: JobRow) -> dict[str, Any]:
    p = job.progress or {}
    step, total = p.get("step"), p.get("total_steps")
    frac: float | None = None
    if isinstance(step, int | float) and isinstance(total, int | float) and total > 0:
        frac = min(1.0, max(0.0, step / total))
    elif job.work_total_h and job.work_done_h:
        frac = min(1.0, max(0.0, (job.work_done_h or 0.0) / job.work_total_h))
    if job.state == "succeeded":
        frac = 1.0
    return {
        "step": step if isinstance(step, int | float) else None,
        "total_steps": total if isinstance(total, int | float) else None,
        "fraction": frac,
        "last_checkpoint": p.get("last_checkpoint"),
        "last_checkpoint_at": p.get("last_checkpoint_at"),
        "agent_state": p.get("state"),
    }


def _placement(a: AttemptRow | None) -> dict[str, Any] | None:
    if a is None:
        return None
    return {
        **{k: getattr(a, k) for k in ("attempt", "provider", "region", "zone", "instance_type")},
        "gpu": a.gpu,
        "gpu_count": a.gpu_count,
        "nodes": a.nodes or 1,  # a gang: this many instances, each as described
        "market": a.market,
        "price_per_hour": a.price_per_hour,  # per node
        "gang_price_per_hour": a.price_per_hour * (a.nodes or 1),
        "bid_cap_per_hour": a.bid_cap_per_hour,
        "instance_id": a.instance_id,
        "state": a.state,
    }


def job_summary(job: JobRow, current: AttemptRow | None, now: datetime) -> dict[str, Any]:
    """One job as the list shows it: state, placement, market, progress, spend, deadline."""
    policy = policy_of(job)
    budget = policy.budget.max_total if policy is not None else None
    deadline = utc(job.deadline)
    return {
        "id": job.id,
        "name": job.name,
        "state": job.state,
        "reason": _redact(job.reason or ""),
        "cause": job.cause or None,
        "provider": job.provider,
        "submitted_at": utc(job.submitted_at),
        "updated_at": utc(job.updated_at),
        "deadline": deadline,
        "deadline_left_s": None if deadline is None else (deadline - now).total_seconds(),
        "attempt": job.attempt,
        "restarts": job.restarts,
        "spent_usd": round(job.spent_usd or 0.0, 6),
        "budget_usd": budget,
        "budget_fraction": None if not budget else (job.spent_usd or 0.0) / budget,
        "progress": _progress(job),
        "placement": _placement(current),
        "owner": job.owner,
    }


def state_counts(store: Store) -> dict[str, Any]:
    """Jobs and dollars by state, over the whole store (one aggregate query)."""
    with store.session() as s:
        rows = s.execute(
            select(JobRow.state, func.count(), func.coalesce(func.sum(JobRow.spent_usd), 0.0))
            .group_by(JobRow.state)
            .order_by(JobRow.state)
        ).all()
    counts = {st: 0 for st in STATES}
    spent = 0.0
    for state, n, usd in rows:
        counts[state] = int(n)
        spent += float(usd or 0.0)
    return {"by_state": counts, "total": sum(counts.values()), "spent_usd": round(spent, 6)}


def job_page(
    store: Store,
    now: datetime,
    *,
    page: int = 1,
    per_page: int = 100,
    state: str | None = None,
    q: str | None = None,
) -> dict[str, Any]:
    """A page of jobs, newest first, filtered by state and by id or name (substring)."""
    cond = []
    if state:
        cond.append(JobRow.state == state)
    if q:
        cond.append(
            JobRow.name.contains(q, autoescape=True) | JobRow.id.contains(q, autoescape=True)
        )
    with store.session() as s:
        total = int(s.scalar(select(func.count()).select_from(JobRow).where(*cond)) or 0)
        pg = paging(page, per_page, total)
        jobs = list(
            s.scalars(
                select(JobRow)
                .where(*cond)
                .order_by(JobRow.submitted_at.desc(), JobRow.id)
                .limit(pg.per_page)
                .offset(pg.offset)
            ).all()
        )
        ids = [j.id for j in jobs]
        current: dict[str, AttemptRow] = {}
        if ids:
            latest = (
                select(AttemptRow.job_id, func.max(AttemptRow.attempt).label("n"))
                .where(AttemptRow.job_id.in_(ids))
                .group_by(AttemptRow.job_id)
                .subquery()
            )
            for a in s.scalars(
                select(AttemptRow).join(
                    latest,
                    (AttemptRow.job_id == latest.c.job_id) & (AttemptRow.attempt == latest.c.n),
                )
            ).all():
                current[a.job_id] = a
    return {
        "jobs": [job_summary(j, current.get(j.id), now) for j in jobs],
        "paging": pg.as_dict(),
        "filter": {"state": state or None, "q": q or None},
        "counts": state_counts(store),
    }


def _attempt(a: AttemptRow, now: datetime) -> dict[str, Any]:
    from provisioner.control.records import attempt_billing_cloud, billed_cost

    launched, ended, nodes = utc(a.launched_at), utc(a.ended_at), a.nodes or 1
    cost = a.cost_usd
    if a.state == "running" and launched is not None:  # the sim: billed as the cloud it played
        cost = billed_cost(attempt_billing_cloud(a), a.price_per_hour, launched, now) * nodes
    return {
        **(_placement(a) or {}),
        "reason": _redact(a.reason or ""),
        "created_at": utc(a.created_at),
        "launched_at": launched,
        "ended_at": ended,
        "end_reason": _redact(a.end_reason or ""),
        "end_cause": a.end_cause or None,
        "cost_usd": round(cost or 0.0, 6),
        "token": a.token,
    }


def _event(e: EventRow) -> dict[str, Any]:
    data = {k: v for k, v in (e.data or {}).items() if k != "plan"}
    return {
        "id": e.id,
        "at": utc(e.at),
        "kind": e.kind,
        "message": _redact(e.message or ""),
        "data": data,
    }


def job_detail(store: Store, job_id: str, now: datetime) -> dict[str, Any] | None:
    """Everything the job's page shows: summary, attempts, timeline, spend, plans, instances."""
    from provisioner.dashboard.timeline import plans_of, spend_series, timeline

    job = store.job(job_id)
    if job is None:
        return None
    attempts = store.attempts(job.id)
    with store.session() as s:
        events = list(
            s.scalars(
                select(EventRow)
                .where(EventRow.job_id == job.id)
                .order_by(EventRow.id.desc())
                .limit(JOB_EVENTS)
            ).all()
        )
    events.reverse()
    instances = store.instances(job.id)
    policy = policy_of(job)
    atts = [_attempt(a, now) for a in attempts]
    evs = [_event(e) for e in events]
    summary = job_summary(job, attempts[-1] if attempts else None, now)
    end = _job_end(job, atts, evs, now)
    return {
        "job": summary,
        "policy": policy_summary(policy),
        "policy_path": job.policy_path,
        "attempts": atts,
        "events": evs,
        "timeline": timeline(summary, atts, evs, end),
        "spend": spend_series(summary, atts, end),
        "plans": plans_of(job, policy, attempts, events),
        "instances": [_instance(i) for i in sorted(instances, key=lambda i: i.launched_at or now)],
        "window": {"start": utc(job.submitted_at), "end": end},
    }


def _job_end(
    job: JobRow, atts: list[dict[str, Any]], evs: list[dict[str, Any]], now: datetime
) -> datetime:
    from provisioner.control.store import FINAL_STATES

    if job.state in FINAL_STATES:
        times = [t for t in (utc(job.updated_at),) if t]
        times += [a["ended_at"] for a in atts if a["ended_at"]]
        times += [e["at"] for e in evs if e["at"]]
        if times:
            return max(times)
    return now


# -- fleet ----------------------------------------------------------------------------------


def _instance(i: InstanceRow) -> dict[str, Any]:
    return {
        "provider": i.provider,
        "instance_id": i.instance_id,
        "job_id": i.job_id,
        "attempt": i.attempt,
        "region": i.region,
        "zone": i.zone,
        "instance_type": i.instance_type,
        "market": i.market,
        "state": i.state,
        "raw_state": i.raw_state,
        "state_reason": _redact(i.state_reason or ""),
        "price_per_hour": i.price_per_hour,
        "launched_at": utc(i.launched_at),
        "ended_at": utc(i.ended_at),
        "last_seen_at": utc(i.last_seen_at),
    }


def fleet(store: Store, now: datetime, *, page: int = 1, per_page: int = 100) -> dict[str, Any]:
    """Live instances by cloud and region (counts, markets, $/h), and a page of them.

    Live: last seen pending or running, and its job still active (or no job: an instance the
    next reaping pass looks at). A finished job's instance is not followed any more, so its
    row keeps the last state seen; those are counted apart (``stale``), not as the fleet."""
    from provisioner.control.store import ACTIVE_STATES

    seen_alive = InstanceRow.state.in_(ALIVE)
    job_state = select(JobRow.state).where(JobRow.id == InstanceRow.job_id).scalar_subquery()
    alive = seen_alive & (InstanceRow.job_id.is_(None) | job_state.in_(ACTIVE_STATES))
    with store.session() as s:
        stale = int(
            s.scalar(select(func.count()).select_from(InstanceRow).where(seen_alive, ~alive)) or 0
        )
        groups = s.execute(
            select(
                InstanceRow.provider,
                InstanceRow.region,
                InstanceRow.market,
                func.count(),
                func.coalesce(func.sum(InstanceRow.price_per_hour), 0.0),
            )
            .where(alive)
            .group_by(InstanceRow.provider, InstanceRow.region, InstanceRow.market)
        ).all()
        total = sum(int(n) for *_, n, _usd in groups)
        pg = paging(page, per_page, total)
        rows = list(
            s.scalars(
                select(InstanceRow)
                .where(alive)
                .order_by(InstanceRow.provider, InstanceRow.region, InstanceRow.instance_id)
                .limit(pg.per_page)
                .offset(pg.offset)
            ).all()
        )
        names = dict(
            s.execute(
                select(JobRow.id, JobRow.name).where(
                    JobRow.id.in_([r.job_id for r in rows if r.job_id])
                )
            ).all()
        )
        ended_day = int(
            s.scalar(
                select(func.count())
                .select_from(InstanceRow)
                .where(~seen_alive, InstanceRow.ended_at >= now - timedelta(days=1))
            )
            or 0
        )
    clouds: dict[str, dict[str, Any]] = {}
    for provider, region, market, n, usd in groups:
        c = clouds.setdefault(
            provider, {"provider": provider, "instances": 0, "usd_per_hour": 0.0, "regions": {}}
        )
        r = c["regions"].setdefault(
            region, {"region": region, "instances": 0, "usd_per_hour": 0.0, "by_market": {}}
        )
        for d in (c, r):
            d["instances"] += int(n)
            d["usd_per_hour"] = round(d["usd_per_hour"] + float(usd or 0.0), 6)
        r["by_market"][market] = r["by_market"].get(market, 0) + int(n)
    out_clouds = []
    for c in sorted(clouds.values(), key=lambda c: (-c["instances"], c["provider"])):
        regions = sorted(c["regions"].values(), key=lambda r: (-r["instances"], r["region"]))
        out_clouds.append({**c, "regions": regions})
    items = [_instance(r) | {"job_name": names.get(r.job_id or "")} for r in rows]
    return {
        "clouds": out_clouds,
        "instances": items,
        "paging": pg.as_dict(),
        "alive": total,
        "ended_last_day": ended_day,
        "stale": stale,
        "usd_per_hour": round(sum(c["usd_per_hour"] for c in out_clouds), 6),
    }


# -- prices ---------------------------------------------------------------------------------


def prices(
    store: Store, *, provider: str | None = None, page: int = 1, per_page: int = 100
) -> dict[str, Any]:
    """The newest quote per offer (the ``prices`` table) and the refresh history."""
    from provisioner.control.store.schema import PriceRow

    cond = [PriceRow.provider == provider] if provider else []
    with store.session() as s:
        total = int(s.scalar(select(func.count()).select_from(PriceRow).where(*cond)) or 0)
        pg = paging(page, per_page, total)
        rows = s.scalars(
            select(PriceRow)
            .where(*cond)
            .order_by(PriceRow.provider, PriceRow.instance_type, PriceRow.region, PriceRow.zone)
            .limit(pg.per_page)
            .offset(pg.offset)
        ).all()
        providers = [p for (p,) in s.execute(select(PriceRow.provider).distinct()).all()]
        newest = s.scalar(select(func.max(PriceRow.at)).where(*cond))
    history = price_history(store)
    if provider:
        history = [h for h in history if h["provider"] == provider]
    series: dict[str, dict[str, list[tuple[datetime, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for h in history:
        for gpu, row in h["cheapest"].items():
            if not isinstance(row, dict):
                continue
            for market in ("spot", "on_demand"):
                v = row.get(market)
                if isinstance(v, int | float) and h["at"] is not None:
                    series[f"{h['provider']}:{gpu}"][market].append((h["at"], float(v)))
    return {
        "quotes": [
            {
                "provider": r.provider,
                "region": r.region,
                "zone": r.zone,
                "instance_type": r.instance_type,
                "spot_price": r.spot_price,
                "on_demand_price": r.on_demand_price,
                "at": utc(r.at),
            }
            for r in rows
        ],
        "paging": pg.as_dict(),
        "providers": sorted(providers),
        "provider": provider,
        "newest_quote_at": utc(newest),
        "refreshes": [
            {"at": h["at"], "provider": h["provider"], "quotes": h["quotes"]} for h in history[-50:]
        ][::-1],
        "history": {k: dict(v) for k, v in sorted(series.items())},
    }
