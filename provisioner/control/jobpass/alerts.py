"""Events a job's pass writes for people and for the ledger, beside decide()'s actions; the
pass's last sub-reconciler (:class:`Restarts`) tells of restarts completed.

* ``first-progress``: the first report of the attempt's agent that the job runs (boot, setup
  and restore from the checkpoint are over: the end of its changeover, which the ledger
  prices), with the checkpoint it resumed from;
* ``restarted``: a new attempt runs after a preemption (once per restart, counted from the
  preempted attempts);
* ``budget``: spend crossed one of the policy's budget levels (percent of ``budget.max_total``;
  the highest level crossed, once);
* ``deadline-risk``: a launch's estimate gives at least ``notify.deadline_miss`` chance of
  missing the deadline, where the launch before it gave less;
* ``no-capacity``: the job has no instance and every eligible offer answered no capacity or
  no quota within the last five minutes; ``price-cap``: no offer is left and offers were
  rejected for their price (bid cap, hourly budget). Each once until a launch succeeds.

Each goes through the pass state's ``event()``, so the notification outbox rows are written in the
event's own transaction (:mod:`provisioner.control.notify.route` says who hears of which).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from provisioner.control.inputs import refused
from provisioner.control.jobpass.state import GO_ON, PassState, Result
from provisioner.control.notify.route import settings
from provisioner.control.store import AttemptRow
from provisioner.core import decide as d
from provisioner.core.models import Instance
from provisioner.core.money import against_decimals, usd, written_decimals
from provisioner.core.states import counts_as_restart
from provisioner.core.timefmt import parse_time
from provisioner.core.views import CAPACITY_ERRORS_WITHIN

#: The agent's states in which the job itself runs (its step counts).
RUNNING_STATES = ("running", "checkpointing")


def note_first_progress(ps: PassState, progress: dict[str, Any] | None) -> None:
    """An event at the current attempt's first progress (the agent's report time)."""
    cur, p = ps.current, progress or {}
    if cur is None or cur.launched_at is None or ps.memo.first_progress == cur.attempt:
        return
    if p.get("attempt") != cur.attempt or p.get("state") not in RUNNING_STATES:
        return
    old = ps.job.progress or {}
    ps.memo.first_progress = cur.attempt
    if old.get("attempt") == cur.attempt and old.get("state") in (*RUNNING_STATES, "done"):
        return  # seen and recorded before (this process or the one before it)
    at = parse_time(p.get("updated_at")) or ps.now
    at = min(max(at, cur.launched_at), ps.now)
    secs = (at - cur.launched_at).total_seconds()
    resumed = p.get("resumed_from")
    ps.queue_event(  # with the progress row that records it (the pass's batch)
        "first-progress",
        f"attempt {cur.attempt}: the job runs, {secs:.0f} s after its launch"
        + (f" (resumed from {resumed})" if resumed else ""),
        at=at,
        attempt=cur.attempt,
        resumed_from=resumed,
    )


def note_restart(ps: PassState) -> None:
    """A ``restarted`` event for each restart whose replacement has run, in order, once: a
    restart is an attempt preempted (or whose command exited with a code the policy restarts
    on), its replacement the next attempt that got an instance. Called each pass a restart may
    be complete, and before a job's end (a replacement that ran before the end is told too)."""
    attempts = ps.attempts
    n = 0
    for i, a in enumerate(attempts):
        if not counts_as_restart(a.state, a.end_cause):
            continue
        n += 1
        if ps.memo.restart_told >= n:
            continue
        nxt = next(
            (
                b
                for b in attempts[i + 1 :]
                if b.instance_id and b.launched_at is not None and b.state != "failed"
            ),
            None,
        )
        if nxt is None:
            return  # not replaced yet: this one and the later ones wait
        if not ps.store.has_event(ps.job.id, "restarted", f"restart {n}:"):
            ps.event(
                "restarted",
                f"restart {n}: attempt {nxt.attempt} runs on {nxt.provider}:{nxt.zone} "
                f"{nxt.instance_type} ({nxt.market}, ${nxt.price_per_hour:.4f}/h) after attempt "
                f"{a.attempt} on {a.provider}:{a.zone} "
                + ("was preempted" if a.state == "preempted" else f"ended: {a.end_reason}"),
                restart=n,
                attempt=nxt.attempt,
            )
        ps.memo.restart_told = n


def note_budget(ps: PassState, spent: float) -> None:
    """A ``budget`` event when spend crosses a level higher than any told before."""
    total = ps.policy.budget.max_total
    if not total or spent <= 0.0:
        return
    reached = [lv for lv in settings(ps.policy.notify).budget_levels if spent >= total * lv / 100]
    if not reached:
        return
    top, memo = reached[-1], ps.memo
    if memo.budget_level is not None and memo.budget_level >= top:
        return
    if memo.budget_level is None:  # first look in this process: what was told before
        memo.budget_level = max(
            [float((e.data or {}).get("level") or 0.0) for e in _events(ps, "budget")] or [0.0]
        )
        if memo.budget_level >= top:
            return
    memo.budget_level = top
    places = against_decimals(total)  # the budget as written, spend to a hundredth of it
    ps.event(
        "budget",
        f"spent {usd(spent, places)} of the {usd(total, written_decimals(total))} budget: "
        f"{top:g}% of it",
        level=top,
        spent_usd=round(spent, 6),
        budget_usd=total,
    )


def success_message(ps: PassState, reason: str, spent: float) -> tuple[str, dict[str, Any]]:
    """The ``succeeded`` event's words and figures: what was billed, what the same runs cost
    on on-demand (the references kept at launch, :mod:`provisioner.control.ledger`) and what
    spot saved; to the budget's precision when the policy has one (else to 1/100 cent)."""
    total = ps.policy.budget.max_total
    places = max(4, against_decimals(total)) if total else 4
    head = f"job succeeded after {ps.job.restarts} restart(s) ({reason})"
    try:
        from provisioner.control import ledger

        rows = ledger.store_ledgers(ps.store, [ps.job.id], ps.now)[ps.job.id]
        t = ledger.totals(rows)
    except Exception as exc:  # the figures are a courtesy: the job's end is recorded anyway
        ps.log.info("job %s: no ledger for its final event: %s", ps.job.id, exc)
        return f"{head}; spent {usd(spent, places)}", {}
    billed = t.billed_usd
    data: dict[str, Any] = {"billed_usd": round(billed, 6)}
    text = f"{head}; billed {usd(billed, places)}"
    if t.priced:
        saved, pct = t.saved_usd, t.saved_pct or 0.0
        data.update(on_demand_usd=round(t.on_demand_usd, 6), saved_usd=round(saved, 6))
        data["saved_pct"] = round(pct, 2)
        some = f" (of the {t.priced} attempts with an on-demand price)" if t.unpriced else ""
        text += (
            f"; the same runs on on-demand {usd(t.on_demand_usd, places)}{some}: "
            f"spot saved {usd(saved, places)} ({pct:.1f} %)"
        )
    else:
        text += "; no on-demand price is known for its attempts, so no saving is told"
    return text, data


def note_deadline(ps: PassState, row: AttemptRow) -> None:
    """A ``deadline-risk`` event when this launch's estimate crosses the threshold."""
    p = row.estimate_p_miss
    limit = settings(ps.policy.notify).deadline_miss
    if p is None or p < limit:
        return
    before = [
        a.estimate_p_miss
        for a in ps.attempts
        if a.attempt < row.attempt and a.estimate_p_miss is not None
    ]
    if before and before[-1] >= limit:
        return  # at risk already, and told
    deadline = ps.job.deadline
    when = f" ({deadline:%Y-%m-%d %H:%M} UTC)" if isinstance(deadline, datetime) else ""
    ps.event(
        "deadline-risk",
        f"the estimate at the launch of attempt {row.attempt} on {row.provider}:{row.zone} "
        f"gives a {p:.0%} chance of finishing after the deadline{when} (told from "
        f"{limit:.0%})",
        attempt=row.attempt,
        p_miss=round(p, 4),
        threshold=limit,
    )


def note_exhausted(ps: PassState, actions: list[d.Action], seen: list[Instance]) -> None:
    """``no-capacity`` / ``price-cap`` when the job cannot run anywhere, once until a launch."""
    plan = ps.plan
    if plan is None or any(i.state.alive for i in seen) or ps.job.cancel_requested:
        return
    if any(isinstance(a, (d.Launch, *d.FINAL)) for a in actions):
        return
    kind, text = _exhausted(ps, plan)
    if kind is None or ps.memo.exhausted == kind:
        return
    ps.memo.exhausted = kind
    last = [e for e in _events(ps, "no-capacity", "price-cap", "launch")][-1:]
    if last and last[0].kind == kind:
        return  # told already, and nothing launched since
    ps.event(kind, text)


def _exhausted(ps: PassState, plan: Any) -> tuple[str | None, str]:
    rejected = plan.rejected
    priced = rejected.get("bid_cap", 0) + rejected.get("budget_hourly", 0)
    if not plan.placements:
        if not priced:
            return None, ""
        parts = [
            f"{n} above {what}"
            for n, what in (
                (rejected.get("bid_cap", 0), "the bid cap"),
                (rejected.get("budget_hourly", 0), "budget.max_price_per_hour"),
            )
            if n
        ]
        return "price-cap", "no offer within the price caps: " + ", ".join(parts)
    recent = ps.now - CAPACITY_ERRORS_WITHIN
    busy = {
        (a.provider, a.zone, a.instance_type, a.market)
        for a in ps.attempts
        if refused(a) and (a.ended_at or a.created_at) >= recent
    }
    keys = {
        (p.offer.provider, p.offer.zone or p.offer.region, p.offer.instance_type, p.market.value)
        for p in plan.placements
    }
    if not keys or not keys <= busy:
        return None, ""
    return "no-capacity", (
        f"every eligible offer ({len(keys)}) answered no capacity or no quota in the last "
        f"{int(CAPACITY_ERRORS_WITHIN.total_seconds() // 60)} min; the job waits and tries again"
    )


def _events(ps: PassState, *kinds: str) -> list[Any]:
    return [e for e in ps.store.events(ps.job.id) if e.kind in kinds]


class Restarts:
    """The pass's last turn, whatever came before: a restart not yet told (this process's
    memo) is looked at, level-triggered, whatever events this process wrote (one killed
    between a replacement's record and its event left it to the next)."""

    def reconcile(self, ps: PassState) -> Result:
        if ps.restart_check or ps.memo.restart_told < ps.job.restarts:
            note_restart(ps)
        return GO_ON
