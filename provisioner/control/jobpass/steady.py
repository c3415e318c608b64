"""Whether a job's pass has anything to do: a policy stop due (the probe floor, idle GPUs,
a running spot price over its cap) makes it decide now; a pass that sees what the last one
saw when that one only waited (:func:`unchanged`) settles the job's updates and ends there.
The fingerprint of decide()'s inputs and the steady key are made here too (the decision
step keeps them in the memo)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from provisioner.control import inputs
from provisioner.control.jobpass.probes import gpu_idle_since, probe_below
from provisioner.control.jobpass.settle import settle
from provisioner.control.jobpass.state import GO_ON, SETTLED, PassState, Result
from provisioner.control.pricewatch import price_key
from provisioner.core.decide.pricecap import running_cap
from provisioner.core.models import Instance
from provisioner.core.rules import EPS_USD


class Steady:
    """Decide now where a policy stop is due; else end a pass that sees what the last one
    saw when it only waited (nothing to record, no decision due)."""

    def reconcile(self, ps: PassState) -> Result:
        ps.stop_due = policy_stop_due(ps, ps.progress) or over_cap(ps, ps.live())
        if ps.stop_due:
            ps.steady = None  # decide now, whatever was decided before
        steady = ps.steady
        if steady is not None and unchanged(ps, steady, ps.seen, ps.progress):
            ps.memo.steady = steady
            settle(ps, ps.updates)
            return SETTLED
        return GO_ON


def over_cap(ps: PassState, live: list[Instance]) -> bool:
    """Whether a running spot instance's price read this pass passed its cap (the daemon
    holds it there: provisioner.control.pricewatch): decide now, whatever was decided."""
    cur = ps.current
    if not ps.spot_prices or cur is None:
        return False
    cap = running_cap(ps.policy, inputs.placement_of(cur))
    return any(ps.spot_prices.get(price_key(i), 0.0) > cap + EPS_USD for i in live)


def policy_stop_due(ps: PassState, progress: dict[str, Any] | None) -> bool:
    """Whether decide() has a policy stop to make now: the probe floor or idle GPUs."""
    if probe_below(ps):
        return True
    idle, since = ps.policy.idle, gpu_idle_since(ps, progress)
    return idle is not None and since is not None and ps.now - since >= idle.duration


def fingerprint(
    ps: PassState, seen: list[Instance], progress: dict[str, Any] | None
) -> tuple[Any, ...]:
    """Everything decide() reads that changes other than with the clock."""
    cur, job = ps.current, ps.job
    p = progress or {}
    iid = None if cur is None else cur.instance_id
    shown = [
        (i.id, i.state.value, i.market.value)
        for i in seen
        if i.state.alive or (cur is not None and i.id == iid)
    ]
    if len(shown) > 1:
        shown.sort()
    notes = ps.interruptions
    return (
        job.state,
        job.restarts,
        job.cancel_requested,
        None if cur is None else (cur.attempt, cur.state, iid, cur.launched_at, cur.ended_at),
        tuple(shown),
        tuple(sorted((x.instance_id, x.kind) for x in notes)) if notes else (),
        (p.get("state"), p.get("attempt"), p.get("last_checkpoint"), p.get("total_steps")),
        tuple(sorted(ps.cooldowns())),
    )


def steady_key(
    ps: PassState, seen: list[Instance], progress: dict[str, Any] | None
) -> tuple[Any, ...]:
    p = progress or {}
    fields = (p.get("state"), p.get("attempt"), p.get("last_checkpoint"), p.get("total_steps"))
    return (ps.job, ps.attempts, len(ps.attempts), tuple(seen), fields)


def unchanged(
    ps: PassState, steady: tuple[Any, ...], seen: list[Instance], progress: dict[str, Any] | None
) -> bool:
    """Whether this pass sees what the last one saw when it only waited (its fingerprint
    matched, the job ran as recorded, no cooldown, no interruption): the same job row and
    attempts (a write re-reads the row; any other step clears the memo), the same
    instances, field for field, the same progress fields that decide() reads, and no
    decision due. Then the observation and the fingerprint would come out the same."""
    job, attempts, n, instances, fields = steady
    cur = ps.current
    p = progress or {}
    return (
        job is ps.job
        and attempts is ps.attempts
        and n == len(attempts)
        and cur is not None
        and cur.state == "running"
        and not ps.interruptions
        and ps.cooled == {}
        and ps.env.decide_every > timedelta(0)
        and instances == tuple(seen)
        and fields
        == (p.get("state"), p.get("attempt"), p.get("last_checkpoint"), p.get("total_steps"))
        and not ps.due(ps.memo.decided_at, ps.env.decide_every)
    )


def running_as_recorded(ps: PassState, live: list[Instance]) -> bool:
    """One live instance, the current attempt's, running, and no interruption for it."""
    cur = ps.current
    return (
        cur is not None
        and cur.state == "running"
        and len(live) == 1
        and live[0].id == cur.instance_id
        and not ps.interruptions
    )
