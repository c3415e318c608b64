"""decide()'s actions carried out for one job, in order: terminate (recorded first, then
the cloud call), cool a zone down, launch (:mod:`provisioner.control.jobpass.launch`), wait
or back off, and a final action (finish, cancel, stop, fail) that ends the job's attempts.
The job's new state is the transition table's
(:func:`provisioner.core.states.job_after`) for what was carried out; nothing here picks
one."""

from __future__ import annotations

from typing import Any

from providers.base import ProviderError
from provisioner.control.groups import sweep_groups
from provisioner.control.jobpass import alerts
from provisioner.control.jobpass.attempts import tell_preempted
from provisioner.control.jobpass.launch import launch
from provisioner.control.jobpass.progress import read_result
from provisioner.control.jobpass.settle import settle
from provisioner.control.jobpass.state import PassState
from provisioner.control.records import PassReport
from provisioner.control.store import AttemptRow
from provisioner.core import decide as d
from provisioner.core.models import TAG_JOB, TAG_MANAGED
from provisioner.core.states import (
    LIVE_ATTEMPT_STATES,
    AttemptState,
    Cause,
    JobState,
    attempt_end,
    job_after,
)
from provisioner.core.timefmt import parse_time, utc


def carry_out(
    ps: PassState, actions: list[d.Action], report: PassReport, updates: dict[str, Any]
) -> bool:
    """Carry out decide()'s actions, in order; True when decide() is to be asked again (a
    launch refused for capacity or price, or a new cooldown that changes the candidates).
    The job's new state is the transition table's (:func:`provisioner.core.states.job_after`)
    for what was carried out; nothing here picks one."""
    job = ps.job
    retry = False
    final: d.Final | None = None
    refused: Cause | None = None
    ended: Cause | None = None
    waited: Cause | None = None
    ending = any(isinstance(a, d.FINAL) for a in actions)
    for i, action in enumerate(actions):
        if isinstance(action, d.Terminate):
            terminate(ps, action, report, finishing=ending)
            ended = action.cause
        elif isinstance(action, d.CoolDown):
            before = ps.cooldowns().get((action.provider, action.location))
            if before is None or before < action.until:
                ps.cool_down(action.provider, action.location, action.until, action.reason)
                if any(isinstance(a, d.Launch) for a in actions[i + 1 :]):
                    retry = True  # plan again without the zone
                    break
        elif isinstance(action, d.Launch):
            if not launch(ps, action.placement, action.reason, report):
                cur = ps.current
                refused = Cause.parse(cur.end_cause if cur is not None else None)
                if refused is Cause.UNKNOWN:
                    refused = Cause.LAUNCH_REFUSED
                retry = True
        elif isinstance(action, d.Wait | d.Backoff):
            waited = action.cause
            if isinstance(action, d.Backoff):
                ps.log.info("job %s: %s", job.id, action.reason)
        elif isinstance(action, d.FINAL):
            final = action
    running = any(a.state == AttemptState.RUNNING for a in ps.attempts)
    step = job_after(
        JobState(job.state),
        final=None if final is None else final.cause,
        running=running and final is None,
        refused=refused,
        ended=ended,
        waited=waited,
    )
    if final is not None:
        end_job(ps, final, report, updates)
    state = step.after.value
    if step.changed:
        updates["cause"] = step.cause.value
    if state == job.state and set(updates) <= {"progress"}:
        settle(ps, updates)
        updates.clear()
        return retry
    spent = ps.spent()
    ps.write_queued()
    ps.store.update_job(job.id, at=ps.now, state=state, spent_usd=spent, **updates)
    job.state, job.spent_usd = state, spent
    updates.clear()
    if final is None:
        alerts.note_budget(ps, spent)
    return retry


def _checkpoint_note(ps: PassState, a: AttemptRow) -> str:
    """Whether a checkpoint got in after the notice of the attempt under it, as the
    agents reported (the newest checkpoint's upload time, or the checkpoint events this
    job's passes wrote from their records): what the ``preempted`` event says, never
    "in" when none was."""
    p = ps.memo.progress or {}
    notice = next((x.at for x in ps.interruptions if x.instance_id == a.instance_id), None) or (
        a.launched_at or ps.now
    )
    notice = utc(notice)
    at = parse_time(p.get("last_checkpoint_at"))
    mine = p.get("last_checkpoint_attempt") in (a.attempt, None)
    if at is not None and at >= notice and p.get("last_checkpoint") and mine:
        return f"its checkpoint {p.get('last_checkpoint')} is in"
    newer = [
        e
        for e in ps.store.events(ps.job.id)
        if e.kind == "checkpoint"
        and utc(e.at) >= notice
        and (e.data or {}).get("attempt") in (a.attempt, None)  # its own, not its successor's
    ]
    if newer:
        return f"its checkpoint {(newer[-1].data or {}).get('checkpoint') or ''} is in"
    last = p.get("last_checkpoint")
    return "no checkpoint since its notice; " + (
        f"resuming from {last}" if last else "no checkpoint yet: the job starts over"
    )


def terminate(ps: PassState, action: d.Terminate, report: PassReport, *, finishing: bool) -> None:
    """Stop an instance and end its attempt: its bill stops here, whatever comes next.
    Recorded first: an instance gone later is ours, not a preemption, even when this
    process dies right after the call."""
    ids = ps.expand([action.instance_id])
    if action.cause is Cause.SETUP_FAILED:  # what the setup said last, for the user
        failure = (ps.memo.progress or {}).get("setup_error") or {}
        tail = [str(t) for t in failure.get("tail") or []][-10:]
        ps.event(
            "setup-failed",
            "\n".join([f"attempt {ps.job.attempt}: {action.reason}", *tail]),
            instance=action.instance_id,
            stage=failure.get("stage"),
            tail=tail,
        )
    for iid in ids:  # a gang's unit: every node (each recorded, so none reads as preempted)
        ps.event("terminate", f"terminated {iid}: {action.reason}")
    ps.provider.terminate(ids)
    ps.store.end_instances(ps.provider.name, ids, ps.now, action.reason)
    report.provider_calls += 1
    report.terminations += 1
    ps.env.failpoints.hit("after-finish-terminate" if finishing else "after-terminate")
    for a in ps.attempts:
        if a.instance_id == action.instance_id and a.state in LIVE_ATTEMPT_STATES:
            preempted = action.cause is Cause.PREEMPTED
            cooled = f"the zone is cooled down for {ps.policy.restart.zone_cooldown}"
            if preempted and a is not ps.current:  # overlap: told before it ends
                tell_preempted(
                    ps,
                    a,
                    f"attempt {a.attempt} on {a.provider}:{a.zone} under notice: "
                    f"{_checkpoint_note(ps, a)}; attempt {ps.job.attempt} takes over; "
                    f"{cooled}",
                )
            elif preempted:  # the cloud took it (a gang's node, say) while it still listed
                tell_preempted(
                    ps,
                    a,
                    f"attempt {a.attempt} on {a.provider}:{a.zone} preempted "
                    f"({action.reason}); {cooled}",
                )
            ps.end_attempt(a, attempt_end(action.cause), action.reason, action.cause)
            if action.cause is Cause.PROBE_BELOW_FLOOR:
                ps.event(
                    "probe-below",
                    f"attempt {a.attempt}: terminated {a.instance_id} ({a.instance_type}): "
                    f"{action.reason}; {a.provider}:{a.zone} cooled down for "
                    f"{ps.policy.restart.zone_cooldown}",
                    instance=a.instance_id,
                    zone=a.zone,
                )
            if preempted and a is not ps.current:  # overlap: the replacement runs
                report.restarts += 1


def end_job(ps: PassState, action: d.Final, report: PassReport, updates: dict[str, Any]) -> None:
    """A final action: the job's open attempts end, and its reason is set. What people
    hear of it comes in order: a restart completed in this pass, the budget level spend
    reached, then the end itself."""
    live = [a for a in ps.attempts if a.state in LIVE_ATTEMPT_STATES]
    ids = ps.expand([a.instance_id for a in live if a.instance_id])
    if ids and not isinstance(action, d.Finish):  # decide() stops what it sees; the rest
        for iid in ids:  # recorded first (see terminate)
            ps.event("terminate", f"terminated {iid}: {action.reason}")
        ps.provider.terminate(ids)
        ps.store.end_instances(ps.provider.name, ids, ps.now, action.reason)
        report.provider_calls += 1
    alerts.note_restart(ps)  # a replacement that ran before the end is still a restart
    why = {d.Finish: "job finished", d.Cancel: "cancelled"}.get(type(action))
    for a in live:
        cause = action.cause if action.cause is Cause.CANCELLED else Cause.JOB_ENDED
        ps.end_attempt(a, AttemptState.ENDED, why or "job ended: " + action.reason, cause)
    updates["reason"] = action.reason
    report.finished += 1
    if any(a.nodes > 1 for a in ps.attempts):
        _sweep_groups(ps, report)
    spent = ps.spent()
    alerts.note_budget(ps, spent)
    if isinstance(action, d.Finish):
        updates["result"] = read_result(ps, ps.memo.progress or {})
        text, figures = alerts.success_message(ps, action.reason, spent)
        ps.event(action.state.value, text, **figures)
    else:
        ps.event(action.state.value, _final_message(ps, action, spent))


def _final_message(ps: PassState, action: d.Final, spent: float) -> str:
    if isinstance(action, d.Cancel):
        n = sum(1 for a in ps.attempts if a.end_cause == Cause.CANCELLED)
        return f"cancelled; terminated {n} instance(s); checkpoints kept"
    if isinstance(action, d.Stop):
        return f"{action.reason}; checkpoints kept"
    return action.reason


def _sweep_groups(ps: PassState, report: PassReport) -> None:
    """A gang job's end: its placement groups go now where the cloud lets (its nodes
    already gone); those still in use go at a later sweep (provisioner.control.groups)."""
    try:
        seen = ps.provider.list({TAG_MANAGED: "true", TAG_JOB: ps.job.id})
        report.provider_calls += 1
        sweep_groups(ps.store, ps.provider, seen, ps.now, report, ps.env.failpoints, ps.job.id)
    except ProviderError as exc:
        ps.log.info("job %s: placement groups left to the sweep: %s", ps.job.id, exc)
