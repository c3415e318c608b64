"""A job's story from its store rows: the timeline of its attempts (launch, notice, checkpoint,
preemption, restart, each with the recorded reason), its spend over time, and the plans its
attempts were launched from.

Pure functions over the dicts of :mod:`provisioner.dashboard.queries` (and, for a plan the
store does not hold, the planner over the built-in catalog).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from provisioner.control.store import AttemptRow, EventRow, JobRow
from provisioner.core.timefmt import parse_time, utc

#: Event kinds that become marks on the timeline (the attempts give launch, restart,
#: launch-failed and preemption themselves).
EVENT_MARKS = {
    "submitted": "submitted",
    "notice": "notice",
    "checkpoint": "checkpoint",
    "succeeded": "succeeded",
    "finished": "succeeded",  # the same event in stores written before it was renamed
    "failed": "failed",
    "cancelled": "cancelled",
    "lost": "lost",
    "adopted": "adopted",
    "relaunch": "relaunch",
    "guard": "guard",
    "error": "error",
}
#: Attempts drawn on the timeline (the newest; the attempts table lists them all).
MAX_LANES = 40
_ATTEMPT_IN_MESSAGE = re.compile(r"\battempt (\d+)\b")


def _attempt_of(ev: dict[str, Any], atts: list[dict[str, Any]]) -> int | None:
    """Which attempt an event belongs to: named in its data or message, by its instance, or
    by when it happened."""
    data = ev.get("data") or {}
    if isinstance(data.get("attempt"), int):
        return int(data["attempt"])
    inst = data.get("instance")
    if inst:
        for a in atts:
            if a["instance_id"] == inst:
                return int(a["attempt"])
    m = _ATTEMPT_IN_MESSAGE.search(ev.get("message") or "")
    if m:
        return int(m.group(1))
    at = ev.get("at")
    if at is None:
        return None
    for a in reversed(atts):
        start = a["launched_at"] or a["created_at"]
        if start is not None and start <= at and (a["ended_at"] is None or at <= a["ended_at"]):
            return int(a["attempt"])
    return None


def timeline(
    job: dict[str, Any], atts: list[dict[str, Any]], evs: list[dict[str, Any]], end: datetime
) -> dict[str, Any]:
    """``{start, end, lanes, marks}``: one lane per attempt that ran, and the marks in time
    order (``kind``, ``at``, ``attempt``, ``label``, ``reason``)."""
    start = job["submitted_at"] or end
    lanes: list[dict[str, Any]] = []
    marks: list[dict[str, Any]] = []
    previous_end: str | None = None
    preempted_msgs = {_attempt_of(e, atts): e["message"] for e in evs if e["kind"] == "preempted"}
    for a in atts:
        where = f"{a['provider']}:{a['zone']} {a['instance_type']}"
        if a["state"] == "failed" and a["launched_at"] is None:
            marks.append(
                {
                    "kind": "launch-failed",
                    "at": a["ended_at"] or a["created_at"],
                    "attempt": a["attempt"],
                    "label": f"attempt {a['attempt']} not launched on {where} ({a['market']})",
                    "reason": a["end_reason"],
                }
            )
            continue
        began = a["launched_at"] or a["created_at"]
        restart = previous_end is not None and previous_end in ("preempted", "ended")
        kind = "restart" if restart and a["attempt"] > 1 else "launch"
        marks.append(
            {
                "kind": kind,
                "at": began,
                "attempt": a["attempt"],
                "label": f"attempt {a['attempt']} {'restarted' if kind == 'restart' else 'launched'}"
                f" on {where} {a['market']} ${a['price_per_hour']:.4f}/h",
                "reason": a["reason"],
            }
        )
        lanes.append(
            {
                "attempt": a["attempt"],
                "label": f"#{a['attempt']} {a['zone']} · {a['market']}",
                "where": where,
                "market": a["market"],
                "state": a["state"],
                "start": began,
                "end": a["ended_at"] or end,
                "open": a["ended_at"] is None,
                "reason": a["reason"],
                "end_reason": a["end_reason"],
                "cost_usd": a["cost_usd"],
            }
        )
        if a["state"] == "preempted":
            marks.append(
                {
                    "kind": "preemption",
                    "at": a["ended_at"] or end,
                    "attempt": a["attempt"],
                    "label": f"attempt {a['attempt']} preempted on {a['provider']}:{a['zone']}",
                    "reason": preempted_msgs.get(a["attempt"]) or a["end_reason"],
                }
            )
        previous_end = a["state"]
    ck_seen = set()
    for e in evs:
        mark = EVENT_MARKS.get(e["kind"])
        if mark is None or e["at"] is None:
            continue
        if mark == "checkpoint":
            ck_seen.add((e.get("data") or {}).get("checkpoint"))
        marks.append(
            {
                "kind": mark,
                "at": e["at"],
                "attempt": _attempt_of(e, atts),
                "label": mark,
                "reason": e["message"],
            }
        )
    prog = job.get("progress") or {}
    ck, ck_at = prog.get("last_checkpoint"), parse_time(prog.get("last_checkpoint_at"))
    if ck and ck not in ck_seen and ck_at is not None:  # stores written before checkpoint events
        marks.append(
            {
                "kind": "checkpoint",
                "at": ck_at,
                "attempt": atts[-1]["attempt"] if atts else None,
                "label": "checkpoint",
                "reason": f"newest checkpoint {ck} (from the agent's progress)",
            }
        )
    marks.sort(key=lambda m: (m["at"], m["attempt"] or 0))
    hidden = max(0, len(lanes) - MAX_LANES)
    if hidden:  # a job restarted hundreds of times: its newest attempts
        lanes = lanes[hidden:]
        shown = {lane["attempt"] for lane in lanes}
        start = lanes[0]["start"]
        marks = [
            m for m in marks if m["attempt"] in shown or (m["attempt"] is None and m["at"] >= start)
        ]
    times = [start, end, *[m["at"] for m in marks]]
    return {
        "start": min(times),
        "end": max(times),
        "lanes": lanes,
        "marks": marks,
        "hidden_attempts": hidden,
    }


def spend_series(job: dict[str, Any], atts: list[dict[str, Any]], end: datetime) -> dict[str, Any]:
    """Cumulative spend over time: each attempt's cost accrues evenly over its run (what a
    per-second bill does), flat between attempts. ``points``: ``[(time, usd)]``."""
    runs = [
        (a["launched_at"], a["ended_at"] or end, float(a["cost_usd"] or 0.0))
        for a in atts
        if a["launched_at"] is not None
    ][-500:]
    start = job["submitted_at"] or end
    ticks = sorted({start, end, *[t for s, e, _ in runs for t in (s, e)]})

    def spent_at(t: datetime) -> float:
        total = 0.0
        for s, e, cost in runs:
            if t >= e:
                total += cost
            elif t > s:
                total += cost * (t - s).total_seconds() / max(1e-9, (e - s).total_seconds())
        return total

    return {
        "points": [(t, round(spent_at(t), 6)) for t in ticks],
        "budget_usd": job.get("budget_usd"),
        "total_usd": round(sum(c for *_, c in runs), 6),
    }


def plans_of(
    job: JobRow, policy: Any, attempts: list[AttemptRow], events: list[EventRow]
) -> list[dict[str, Any]]:
    """The plan each attempt was launched from, newest first: as stored with its launch
    event, or (the newest attempt, or a job not launched yet, when none is stored) planned
    again here from the stored policy, and marked so."""
    out: list[dict[str, Any]] = []
    for e in events:
        data = e.data or {}
        plan = data.get("plan")
        if e.kind != "launch" or not isinstance(plan, dict):
            continue
        n = data.get("attempt")
        if not isinstance(n, int):
            m = _ATTEMPT_IN_MESSAGE.search(e.message or "")
            n = int(m.group(1)) if m else None
        out.append({"attempt": n, "at": utc(e.at), "source": "stored", "note": "", "plan": plan})
    have = {p["attempt"] for p in out}
    launched = [a for a in attempts if a.launched_at is not None]
    newest = launched[-1] if launched else (attempts[-1] if attempts else None)
    if policy is not None and (newest is None or newest.attempt not in have):
        out.append(replan(job, policy, newest))
    out.sort(key=lambda p: p["attempt"] or 0, reverse=True)
    return out


def replan(job: JobRow, policy: Any, attempt: AttemptRow | None) -> dict[str, Any]:
    """Plan again, deterministically, from the stored policy at the attempt's time (or the
    job's submission): the built-in catalog for the attempt's cloud (a sim job's offers are
    the sim's, relabelled with that cloud; they are not stored)."""
    from provisioner.catalog_files import builtin_catalog
    from provisioner.control.inputs import CANDIDATES, placement_of, plan_digest
    from provisioner.core.catalog import Catalog
    from provisioner.core.planner import PlanContext, PlanError, plan_offers

    at = utc(attempt.created_at if attempt else job.submitted_at) or datetime.now().astimezone()
    cloud = attempt.provider if attempt else job.provider
    cat = builtin_catalog()
    offers = cat.filter(provider=cloud) or cat.offers
    note = (
        "No plan was stored with this launch (launched before plans were recorded, or not "
        f"launched yet): planned again on this page from the stored policy over the built-in "
        f"catalog for {cloud}, at {at:%Y-%m-%d %H:%M:%S} UTC. Prices and cooldowns at launch "
        "time are not in the store, so the ranking may differ from what the launch saw."
    )
    try:
        plan = plan_offers(
            policy,
            Catalog.from_offers(offers, f"builtin:{cloud}"),
            PlanContext(now=at, submitted_at=at),
            top=CANDIDATES,
        )
    except PlanError as exc:
        return {
            "attempt": attempt.attempt if attempt else None,
            "at": at,
            "source": "re-planned",
            "note": f"{note} Planning failed: {exc}",
            "plan": None,
        }
    chosen = placement_of(attempt) if attempt else None
    return {
        "attempt": attempt.attempt if attempt else None,
        "at": at,
        "source": "re-planned",
        "note": note,
        "plan": plan_digest(plan, chosen),
    }
