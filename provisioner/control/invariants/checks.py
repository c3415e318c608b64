"""The promises, each a pure function of a :class:`~.snapshot.Snapshot` returning the
:class:`Violation` s it finds (docs/testing.md, "Invariants"): :data:`CHEAP` (the store's rows
only: the daemon runs them after every pass) and :data:`FULL` (the clouds' lists, every event,
the outbox, results, plan against the daemon too)."""

from __future__ import annotations

import enum
import itertools
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import lru_cache

from policies.loader import PolicyError, parse_policy
from policies.model import Policy
from providers.base import CLOUDS
from providers.facts import billing_for
from provisioner.control.invariants.snapshot import Snapshot
from provisioner.control.rowchecks import ended_row_problems
from provisioner.control.store import FINAL_STATES, AttemptRow, EventRow, InstanceRow, JobRow
from provisioner.core.states import LIVE_ATTEMPT_STATES
from provisioner.core.timefmt import utc
from provisioner.core.views import CHANGEOVER_H

log = logging.getLogger("provisioner.control.invariants")

#: instance states (normalised) of capacity that is there
LIVE_INSTANCE_STATES = ("pending", "running")
#: the event each final state is told by
FINAL_EVENTS: dict[str, frozenset[str]] = {
    "succeeded": frozenset({"succeeded"}),
    "failed": frozenset({"failed", "policy-error"}),
    "cancelled": frozenset({"cancelled"}),
    "stopped": frozenset({"stopped", "budget", "failed"}),
}
EPS_USD = 1e-6


class Invariant(str, enum.Enum):
    """The promises checked (docs/testing.md, "Invariants")."""

    FINAL_JOB_LIVE = "final-job-live"  # a job in a final state still has live capacity
    ENDED_ROW = "ended-row"  # an ended instance row without its end time or final raw state
    EXIT_NOT_FAILED = "exit-not-failed"  # a non-zero exit seen, the job still active
    BUDGET_OVERRUN = "budget-overrun"  # spend past max_total (stop) by more than a minimum
    LAUNCH_OVER_BUDGET = "launch-over-budget"  # a launch whose minimum charge exceeds what's left
    LIVE_ATTEMPTS = "live-attempts"  # more than two live attempts (gang: one unit)
    ORPHAN = "orphan"  # capacity at the cloud without its active job and attempt
    EVENTS = "events"  # a preemption, restart or final state without its event, or out of order
    NOTIFICATIONS = "notifications"  # more than one message per event and target
    PLAN_DAEMON = "plan-daemon"  # plan and the daemon disagree on an offer
    RESUME = "resume"  # a resumed attempt did not start from the newest complete checkpoint
    RESULT = "result"  # a deterministic job's result differs from an uninterrupted run's
    OVER_CAP = "over-cap"  # a spot instance held by the daemon left running above its cap
    #: a launch into held capacity the policy does not allow, or that was not usable then
    RESERVED_LAUNCH = "reserved-launch"
    BLOCK_END = "block-end"  # a job's instance still on a capacity block after its usable end
    RESERVED_BILLED = "reserved-billed"  # held capacity billed above zero marginal to the job

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True, order=True)
class Violation:
    invariant: Invariant
    job_id: str
    message: str

    def __str__(self) -> str:
        return f"{self.invariant.value} {self.job_id or '-'}: {self.message}"

    def to_doc(self) -> dict[str, str]:
        return {"invariant": self.invariant.value, "job_id": self.job_id, "message": self.message}


@lru_cache(maxsize=1024)
def _policy(text: str) -> Policy | None:
    try:
        return parse_policy(text, "invariants")
    except PolicyError:
        return None


def _final(job: JobRow) -> bool:
    return job.state in FINAL_STATES


def _live_row(row: InstanceRow) -> bool:
    return row.state in LIVE_INSTANCE_STATES and row.ended_at is None


def _unit_minimum_usd(a: AttemptRow) -> float:
    """The least a launch of attempt ``a`` is billed (all its nodes): the cloud's minimum or
    increment, whichever is longer. The sim bills each zone as the cloud it mimics: the
    longest of theirs."""
    rules = [billing_for(c) for c in CLOUDS] if a.provider == "sim" else [billing_for(a.provider)]
    unit_s = max(max(r.minimum_s, r.increment_s) for r in rules)
    return a.price_per_hour * max(1, a.nodes or 1) * unit_s / 3600.0


# -- the checks ---------------------------------------------------------------------------------


def check_final_job_live(snap: Snapshot) -> list[Violation]:
    """No live instance of a job in a final state (its rows; the cloud's where listed)."""
    out: list[Violation] = []
    final = {j.id for j in snap.jobs if _final(j)}
    for r in snap.instances:
        if r.job_id in final and _live_row(r):
            out.append(
                Violation(
                    Invariant.FINAL_JOB_LIVE,
                    r.job_id or "",
                    f"instance row {r.instance_id} is {r.state} with no end time; "
                    f"the job is {snap.job(r.job_id or '').state}",  # type: ignore[union-attr]
                )
            )
    for i in snap.cloud or ():
        if i.job_id in final and i.state.alive:
            out.append(
                Violation(
                    Invariant.FINAL_JOB_LIVE,
                    i.job_id or "",
                    f"instance {i.id} (attempt {i.attempt}) is {i.state.value} at the cloud; "
                    f"the job is {snap.job(i.job_id or '').state}",  # type: ignore[union-attr]
                )
            )
    return out


def check_ended_rows(snap: Snapshot) -> list[Violation]:
    """Every ended instance has an end time and a final raw state, and no row of an ended
    attempt is live (:func:`provisioner.control.rowchecks.ended_row_problems`)."""
    attempts = [a for rows in snap.attempts.values() for a in rows]
    return [
        Violation(Invariant.ENDED_ROW, r.job_id or "", why)
        for r, why in ended_row_problems(snap.instances, attempts)
    ]


def _restart_codes(policy: Policy | None) -> tuple[int, ...]:
    restart = getattr(policy, "restart", None)
    return tuple(getattr(restart, "on_exit_codes", ()) or ())


def check_exit_fails(snap: Snapshot) -> list[Violation]:
    """A non-zero exit the daemon has read (the job's stored progress: its current attempt
    ``failed`` with an exit code) fails the job in that pass, unless the policy restarts on
    that code (``restart.on_exit_codes``)."""
    out: list[Violation] = []
    for j in snap.jobs:
        if _final(j):
            continue
        p = j.progress or {}
        code = p.get("exit_code")
        if p.get("state") != "failed" or not isinstance(code, int) or code == 0:
            continue
        if p.get("attempt") is not None and p.get("attempt") != j.attempt:
            continue  # an earlier attempt's record
        if code in _restart_codes(_policy(j.policy_yaml)):
            continue
        out.append(
            Violation(
                Invariant.EXIT_NOT_FAILED,
                j.id,
                f"attempt {j.attempt} exited {code} and the job is still {j.state}",
            )
        )
    return out


def check_budget(snap: Snapshot) -> list[Violation]:
    """Spend never passes ``max_total`` (``on_exhausted: stop``) by more than one billing
    minimum of a launch; no launch is made whose minimum charge is more than what was left
    (what earlier attempts, ended by then, had cost)."""
    out: list[Violation] = []
    for j in snap.jobs:
        pol = _policy(j.policy_yaml)
        budget = pol.budget if pol is not None else None
        if budget is None or budget.max_total is None or budget.on_exhausted != "stop":
            continue
        cap = float(budget.max_total)
        atts = [a for a in snap.attempts.get(j.id, ()) if a.instance_id]
        spent = max(float(j.spent_usd or 0.0), sum(float(a.cost_usd or 0.0) for a in atts))
        allowance = max((_unit_minimum_usd(a) for a in atts), default=0.0)
        if spent > cap + allowance + EPS_USD:
            out.append(
                Violation(
                    Invariant.BUDGET_OVERRUN,
                    j.id,
                    f"spent ${spent:.5f} of max_total ${cap:.5f} (stop): past it by more "
                    f"than one launch's billing minimum (${allowance:.5f})",
                )
            )
        for a in atts:
            before = sum(
                float(b.cost_usd or 0.0)
                for b in atts
                if b.attempt < a.attempt and b.ended_at is not None and b.ended_at <= a.created_at
            )
            left, minimum = cap - before, _unit_minimum_usd(a)
            if minimum > left + EPS_USD:
                out.append(
                    Violation(
                        Invariant.LAUNCH_OVER_BUDGET,
                        j.id,
                        f"attempt {a.attempt} launched at ${a.price_per_hour:.4f}/h (minimum "
                        f"charge ${minimum:.5f}) with ${max(left, 0.0):.5f} of the budget left",
                    )
                )
    return out


def check_live_attempts(snap: Snapshot) -> list[Violation]:
    """At most one live attempt per job, two during a handover (make-before-break or a
    replacement under notice), never a third; a gang's nodes are one unit (its attempt).
    Counted on the attempt rows and, where listed, on the cloud's live instances."""
    out: list[Violation] = []
    for j in snap.jobs:
        live = [a.attempt for a in snap.attempts.get(j.id, ()) if a.state in LIVE_ATTEMPT_STATES]
        if len(live) > 2:
            out.append(
                Violation(
                    Invariant.LIVE_ATTEMPTS,
                    j.id,
                    f"{len(live)} live attempts recorded: {sorted(live)}",
                )
            )
        if snap.cloud is not None:
            units = {i.attempt for i in snap.cloud if i.job_id == j.id and i.state.alive}
            if len(units) > 2:
                out.append(
                    Violation(
                        Invariant.LIVE_ATTEMPTS,
                        j.id,
                        f"{len(units)} attempts live at the cloud: {sorted(u or 0 for u in units)}",
                    )
                )
    return out


def check_orphans(snap: Snapshot) -> list[Violation]:
    """No live instance at the cloud without its job (known, not final) and its attempt
    (recorded, not ended) after the reaper's pass. Instances of jobs the snapshot does not
    hold are not judged unless the snapshot holds every job (``--all``)."""
    if snap.cloud is None:
        return []
    out: list[Violation] = []
    jobs = {j.id: j for j in snap.jobs}
    for i in snap.cloud:
        if not i.state.alive:
            continue
        job = jobs.get(i.job_id or "")
        if job is None:
            continue  # another job's, or unknown: judged where the snapshot holds the job
        if _final(job):
            continue  # check_final_job_live tells it
        atts = {a.attempt: a for a in snap.attempts.get(job.id, ())}
        a = atts.get(i.attempt or -1)
        if a is None:
            why = f"instance {i.id} carries attempt {i.attempt}, which the store does not hold"
        elif a.state not in LIVE_ATTEMPT_STATES:
            why = f"instance {i.id} runs for attempt {a.attempt}, which is {a.state}"
        else:
            continue
        out.append(Violation(Invariant.ORPHAN, job.id, why))
    return out


def check_unknown_instances(snap: Snapshot, known_jobs: Iterable[str]) -> list[Violation]:
    """Live instances at the cloud whose job the store does not know at all."""
    if snap.cloud is None:
        return []
    known = set(known_jobs)
    return [
        Violation(Invariant.ORPHAN, i.job_id or "", f"instance {i.id}: its job is unknown")
        for i in snap.cloud
        if i.state.alive and (i.job_id or "") not in known
    ]


def _attempt_of(ev: EventRow) -> int | None:
    data = ev.data or {}
    value = data.get("attempt")
    if isinstance(value, int):
        return value
    msg = ev.message or ""
    if msg.startswith("attempt "):
        head = msg.split()[1].rstrip(":")
        if head.isdigit():
            return int(head)
    return None


def check_events(snap: Snapshot) -> list[Violation]:
    """Every preemption, restart and final state has its event, in order: each preempted
    attempt a ``preempted`` event; each attempt that ran after a preempted one a
    ``restarted`` event; a final job exactly one final event, after every other of them."""
    out: list[Violation] = []
    for j in snap.jobs:
        if j.id not in snap.events:
            continue
        evs = snap.events[j.id]
        atts = list(snap.attempts.get(j.id, ()))
        preempted_evs = [e for e in evs if e.kind == "preempted"]
        for a in atts:
            if a.state != "preempted":
                continue
            told = any(
                (e.data or {}).get("instance") == a.instance_id or _attempt_of(e) == a.attempt
                for e in preempted_evs
            )
            if not told:
                out.append(
                    Violation(
                        Invariant.EVENTS, j.id, f"attempt {a.attempt} was preempted: no event"
                    )
                )
        ran = [a for a in atts if a.launched_at is not None and a.instance_id]
        restarted = {_attempt_of(e) for e in evs if e.kind == "restarted"}
        # the job ran on it (its first progress was seen; a failed setup is no restart)
        worked = {_attempt_of(e) for e in evs if e.kind == "first-progress"}
        for prev, cur in itertools.pairwise(ran):
            if prev.state == "preempted" and cur.attempt in worked and cur.attempt not in restarted:
                out.append(
                    Violation(
                        Invariant.EVENTS,
                        j.id,
                        f"attempt {cur.attempt} ran after attempt {prev.attempt} was "
                        "preempted: no restarted event",
                    )
                )
        if _final(j):
            kinds = FINAL_EVENTS.get(j.state, frozenset({j.state}))
            finals = [e for e in evs if e.kind in kinds]
            if not finals:
                out.append(
                    Violation(Invariant.EVENTS, j.id, f"the job is {j.state}: no final event")
                )
            elif len([e for e in finals if e.kind in ("succeeded", "failed", "cancelled")]) > 1:
                out.append(
                    Violation(
                        Invariant.EVENTS,
                        j.id,
                        f"{len(finals)} final events: {[e.kind for e in finals]}",
                    )
                )
            else:
                last = max(k for k, e in enumerate(evs) if e.kind in kinds)  # in order
                late = [e.kind for e in evs[last + 1 :] if e.kind in ("preempted", "restarted")]
                if late:
                    out.append(
                        Violation(
                            Invariant.EVENTS,
                            j.id,
                            f"{', '.join(late)} event(s) after the final {finals[-1].kind}",
                        )
                    )
    return out


def check_notifications(snap: Snapshot) -> list[Violation]:
    """Exactly one message per event and notification target (rows deduplicated by event
    id), each about an event of its job."""
    out: list[Violation] = []
    seen: dict[tuple[int | None, str], int] = {}
    ids = {e.id: e for evs in snap.events.values() for e in evs}
    for n in snap.notifications:
        if n.event_id is None:
            continue
        key = (n.event_id, n.target)
        seen[key] = seen.get(key, 0) + 1
        ev = ids.get(n.event_id)
        if ids and n.job_id in snap.events and ev is None:
            out.append(
                Violation(
                    Invariant.NOTIFICATIONS,
                    n.job_id or "",
                    f"message {n.id} to {n.target} tells of event {n.event_id}, not recorded",
                )
            )
    for (eid, target), count in seen.items():
        if count > 1:
            ev = ids.get(eid or -1)
            out.append(
                Violation(
                    Invariant.NOTIFICATIONS,
                    (ev.job_id if ev else "") or "",
                    f"{count} messages to {target} about event {eid}",
                )
            )
    return out


def check_resume(snap: Snapshot) -> list[Violation]:
    """A resumed attempt starts from the newest complete checkpoint of any earlier attempt:
    the checkpoint its ``first-progress`` event names is no older than every checkpoint the
    controller had seen complete (``checkpoint`` events) before that attempt launched."""
    from provisioner.agent.store import step_of

    out: list[Violation] = []
    for j in snap.jobs:
        evs = snap.events.get(j.id, ())
        launched = {a.attempt: a.launched_at for a in snap.attempts.get(j.id, ())}
        for e in evs:
            if e.kind != "first-progress":
                continue
            attempt = _attempt_of(e)
            start = launched.get(attempt or -1)
            if attempt is None or start is None:
                continue
            earlier = [
                c
                for c in evs
                if c.kind == "checkpoint"
                and c.id < e.id
                and c.at <= start
                and isinstance((c.data or {}).get("attempt"), int)
                and (c.data or {})["attempt"] < attempt
            ]
            newest = max(
                (step_of((c.data or {}).get("checkpoint")) or -1 for c in earlier), default=-1
            )
            if newest < 0:
                continue
            resumed = (e.data or {}).get("resumed_from")
            got = step_of(resumed) if resumed else None
            if got is None or got < newest:
                out.append(
                    Violation(
                        Invariant.RESUME,
                        j.id,
                        f"attempt {attempt} resumed from {resumed or 'nothing'}; a checkpoint "
                        f"at step {newest} was complete before it launched",
                    )
                )
    return out


def check_results(snap: Snapshot) -> list[Violation]:
    """A deterministic job's result equals an uninterrupted run's (where the snapshot knows
    what that is)."""
    out: list[Violation] = []
    for j in snap.jobs:
        want = snap.expected_results.get(j.id)
        if want is None or j.state != "succeeded":
            continue
        got = {k: (j.result or {}).get(k) for k in want}
        if got != dict(want):
            out.append(
                Violation(
                    Invariant.RESULT, j.id, f"result {got} != uninterrupted run's {dict(want)}"
                )
            )
    return out


def check_plan_daemon(snap: Snapshot) -> list[Violation]:
    """Plan and the daemon agree: for each active job whose catalog the snapshot holds, an
    offer ``plan`` lists as eligible now is one the daemon may launch, and the reverse
    (:func:`provisioner.control.plancheck.disagreements`)."""
    from provisioner.control.plancheck import disagreements

    out: list[Violation] = []
    for j in snap.jobs:
        catalog = snap.catalogs.get(j.id)
        pol = None if catalog is None or _final(j) else _policy(j.policy_yaml)
        if catalog is None or pol is None:
            continue
        attempts = snap.attempts.get(j.id, ())
        found = disagreements(j, pol, attempts, catalog, snap.now, interval_s=snap.interval_s)
        out += [Violation(Invariant.PLAN_DAEMON, j.id, m) for m in found]
    return out


#: how long a switch made before break may keep the old instance after its replacement's
#: launch: the changeover, then the wait for its checkpoint (control.jobpass.launch.HANDOVER_WAIT)
HANDOVER_BOUND = timedelta(hours=CHANGEOVER_H) + timedelta(minutes=30)


def check_over_cap(snap: Snapshot) -> list[Violation]:
    """A spot instance launched with no bid (``bid_cap.enforce: daemon``) whose price passed
    its cap is acted on within two passes (a newer attempt launched, or the instance gone),
    and is gone once its replacement has had the handover's time (:data:`HANDOVER_BOUND`)."""
    out: list[Violation] = []
    live = {i.id: i for i in snap.cloud or () if i.state.alive and i.job_id}
    grace = timedelta(seconds=2 * snap.interval_s)
    for iid, since in snap.over_cap_since.items():
        inst = live.get(iid)
        if inst is None or inst.job_id is None:
            continue
        waited = snap.now - since
        newer = [a for a in snap.attempts.get(inst.job_id, ()) if a.attempt > (inst.attempt or 0)]
        moving = [a for a in newer if a.state in ("launching", "running")]
        if waited > grace and not moving:
            out.append(
                Violation(
                    Invariant.OVER_CAP,
                    inst.job_id,
                    f"instance {iid} (attempt {inst.attempt}) above its cap for "
                    f"{waited.total_seconds():.0f} s: neither moved nor stopped",
                )
            )
        elif waited > grace + HANDOVER_BOUND:
            out.append(
                Violation(
                    Invariant.OVER_CAP,
                    inst.job_id,
                    f"instance {iid} (attempt {inst.attempt}) still running above its cap "
                    f"{waited.total_seconds():.0f} s on, after its replacement's handover time",
                )
            )
    return out


def check_reserved(snap: Snapshot) -> list[Violation]:
    """Held capacity: every launch into a reservation names one the job's policy allows
    (``market`` with ``reserved``, ``reservations``), made before the reservation's usable end
    (a block's: its cloud's stop margin before its end time); and it is billed to the job at
    its marginal price, zero (what the reservation costs is held, not spent)."""
    from provisioner.control.inputs import placement_of
    from provisioner.core.reserved import usable_end

    out: list[Violation] = []
    for job in snap.jobs:
        pol = _policy(job.policy_yaml)
        for a in snap.attempts.get(job.id, ()):
            if a.market != "reserved":
                continue
            rid = a.reservation_id or ""
            if pol is not None and not pol.reservation_allowed(rid):
                out.append(
                    Violation(
                        Invariant.RESERVED_LAUNCH,
                        job.id,
                        f"attempt {a.attempt} launched into reservation {rid or '(none)'}, "
                        f"which the policy (market {pol.market.value}) does not allow",
                    )
                )
            end = usable_end(placement_of(a).reservation)
            created = utc(a.created_at)
            if end is not None and created is not None and created >= end:
                out.append(
                    Violation(
                        Invariant.RESERVED_LAUNCH,
                        job.id,
                        f"attempt {a.attempt} launched into {rid} at {created.isoformat()}, "
                        f"after its usable end {end.isoformat()}",
                    )
                )
            if a.price_per_hour > 1e-12 or a.cost_usd > 1e-9:
                out.append(
                    Violation(
                        Invariant.RESERVED_BILLED,
                        job.id,
                        f"attempt {a.attempt} on held capacity {rid} billed "
                        f"${a.price_per_hour:.4g}/h, ${a.cost_usd:.4g} (marginal is 0)",
                    )
                )
    return out


def check_block_end(snap: Snapshot) -> list[Violation]:
    """No job's instance is still running on a capacity block once its usable end has come
    (the cloud takes it back then; the job moved on before it, or is stopped at it)."""
    from provisioner.core.reserved import block_times

    out: list[Violation] = []
    for inst in snap.cloud or ():
        if not inst.state.alive or not inst.job_id:
            continue
        times = block_times(inst.tags)
        if times is not None and snap.now > times[1]:
            out.append(
                Violation(
                    Invariant.BLOCK_END,
                    inst.job_id,
                    f"instance {inst.id} (attempt {inst.attempt}) still on its capacity block "
                    f"{(snap.now - times[1]).total_seconds():.0f} s after its usable end",
                )
            )
    return out


Check = Callable[[Snapshot], list[Violation]]

#: store-only, run by the daemon after every pass
CHEAP: tuple[Check, ...] = (
    check_final_job_live,
    check_ended_rows,
    check_exit_fails,
    check_budget,
    check_live_attempts,
    check_reserved,
)
#: everything (the clouds' lists, events, outbox, results)
FULL: tuple[Check, ...] = (
    *CHEAP,
    check_orphans,
    check_events,
    check_notifications,
    check_resume,
    check_results,
    check_plan_daemon,
    check_over_cap,
    check_block_end,
)


def run_checks(snap: Snapshot, checks: Sequence[Check] = FULL) -> list[Violation]:
    out: list[Violation] = []
    for check in checks:
        out += check(snap)
    return sorted(set(out))
