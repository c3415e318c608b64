"""What became of the job's attempts since the last pass, recorded: an unrecorded launch
adopted (or sent again, same token), an instance preempted or gone, an earlier attempt whose
instance went after its notice (an overlap), capacity left over by an attempt that has ended;
and the restarts, counted from the attempts (never incremented: a crash between ending an
attempt and writing the job loses none)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from providers.base import ErrorKind, ProviderError
from provisioner.control.jobpass.launch import resend
from provisioner.control.jobpass.state import GO_ON, PassState, Result
from provisioner.control.records import PassReport
from provisioner.control.store import PREEMPTED_ROW, AttemptRow
from provisioner.core.models import Instance, InstanceState
from provisioner.core.states import LIVE_ATTEMPT_STATES, AttemptState, Cause, counts_as_restart


class Attempts:
    """The current attempt observed, earlier ones replaced, leftovers stopped, restarts
    counted (into the pass's updates)."""

    def reconcile(self, ps: PassState) -> Result:
        ps.seen = observe_attempt(ps, ps.seen, ps.progress, ps.report)
        end_replaced(ps, ps.seen, ps.report)
        ps.seen = stop_leftovers(ps, ps.seen, ps.report)
        # Restarts are the preempted attempts: counted, never incremented, so a crash between
        # ending an attempt and writing the job loses none.
        restarts = restarts_so_far(ps)
        if restarts != ps.job.restarts:
            ps.job.restarts = restarts
            ps.updates["restarts"] = restarts
        return GO_ON


def observe_attempt(
    ps: PassState, seen: list[Instance], progress: dict[str, Any] | None, report: PassReport
) -> list[Instance]:
    """Record what became of the current attempt: an unrecorded launch adopted (or sent
    again), an instance preempted or gone. Returns the instances seen, with any sent."""
    cur, job = ps.current, ps.job
    live = [i for i in seen if i.state.alive]
    # Heal an attempt whose launch was sent but never recorded: adopt the tagged instance;
    # where there is none, the launch may never have left: send it again (same token).
    if cur is not None and cur.state == "launching" and not job.cancel_requested:
        mine = [i for i in live if i.attempt == cur.attempt]
        if ps.policy.resources.nodes > 1:
            mine = []  # a gang: every node's launch again (same tokens), never part of one
        if mine:
            found = mine[0]
            at = found.launched_at or ps.now
            ps.store.update_attempt(
                job.id, cur.attempt, instance_id=found.id, state="running", launched_at=at
            )
            cur.instance_id, cur.state, cur.launched_at = found.id, "running", at
            ps.event(
                "adopted",
                f"adopted instance {found.id} of attempt {cur.attempt} (launch was not recorded)",
                instance=found.id,
            )
            ps.env.failpoints.hit("after-adopt")
        else:
            resend(ps, cur, report)
            known = {i.id for i in seen}
            seen = [*seen, *[i for i in ps.sent if i.id not in known]]
    if cur is None or cur.state != "running":
        return seen
    inst = next((i for i in seen if i.id == cur.instance_id), None)
    if inst is None and cur.instance_id:
        try:
            inst = ps.provider.get(cur.instance_id)
            report.provider_calls += 1
        except ProviderError as exc:
            if exc.kind is not ErrorKind.NOT_FOUND:
                raise
            inst = None
    if inst is not None and inst.state.alive:
        return seen
    p = progress or {}
    # A spot instance in no list that no terminate of ours (in the store) explains was
    # reclaimed and released: level-triggered, so a restarted daemon reads it the same.
    released = (
        inst is None
        and cur.market == "spot"
        and bool(cur.instance_id)
        and not ps.store.has_event(job.id, "terminate", cur.instance_id or "")
    )
    if p.get("state") == "done" and p.get("attempt", cur.attempt) <= cur.attempt:
        ps.end_attempt(cur, AttemptState.ENDED, "job finished", Cause.JOB_DONE)
    elif released or (inst is not None and inst.state is InstanceState.PREEMPTED):
        why = inst.state_reason if inst else "spot instance released"
        shown = why or (inst.raw_state if inst else "")
        preempted(
            ps,
            cur,
            f"attempt {cur.attempt} on {cur.provider}:{cur.zone} preempted"
            f" ({shown}); the zone is cooled down for {ps.policy.restart.zone_cooldown}",
            why or "preempted",
            report,
        )
    else:
        reason = "instance gone" if inst is None else f"instance {inst.state.value}"
        ps.end_attempt(cur, AttemptState.ENDED, reason, Cause.INSTANCE_LOST)
        ps.event("lost", f"attempt {cur.attempt}: {reason}", instance=cur.instance_id)
    return seen


def stop_leftovers(ps: PassState, seen: list[Instance], report: PassReport) -> list[Instance]:
    """Capacity of an attempt that has ended (say a gang's nodes, started by a launch
    sent again after a crash, whose attempt then failed on a throttled call): stopped,
    recorded first, never taken for the job's instance. Returns what was seen, those
    shown terminated."""
    ended = {a.attempt for a in ps.attempts if a.state not in LIVE_ATTEMPT_STATES}
    left = [i for i in seen if i.state.alive and i.attempt in ended and i.job_id == ps.job.id]
    if not left:
        return seen
    ids = [i.id for i in left]
    why = "its attempt has ended: capacity left over"
    for iid in ids:
        ps.event("terminate", f"terminated {iid}: {why}")
    ps.provider.terminate(ids)
    ps.store.end_instances(ps.provider.name, ids, ps.now, why, ps.job.id)
    report.provider_calls += 1
    report.terminations += len(ids)
    gone = set(ids)
    return [replace(i, state=InstanceState.TERMINATED) if i.id in gone else i for i in seen]


def preempted(ps: PassState, a: AttemptRow, message: str, why: str, report: PassReport) -> None:
    """An attempt the cloud took back: its ``preempted`` event (once, whatever crash
    comes between the writes: the event goes first, and a pass that finds the attempt
    still running and its instance gone comes here again), its instance rows ended as
    preempted, then the attempt ended (a restart)."""
    tell_preempted(ps, a, message)
    ps.env.failpoints.hit("after-preempted")
    if a.instance_id:
        gone = ps.expand([a.instance_id])
        ps.store.end_instances(ps.provider.name, gone, ps.now, why, ps.job.id, state=PREEMPTED_ROW)
    ps.end_attempt(a, AttemptState.PREEMPTED, why, Cause.PREEMPTED)
    report.restarts += 1


def tell_preempted(ps: PassState, a: AttemptRow, message: str) -> None:
    """The ``preempted`` event of attempt ``a``, unless it has one already (a process
    killed between the event and the attempt's end wrote it); a restart may be complete
    either way (:func:`provisioner.control.jobpass.alerts.note_restart` looks this pass)."""
    if not ps.store.has_event(ps.job.id, "preempted", f"attempt {a.attempt} on "):
        ps.event("preempted", message, zone=a.zone, instance=a.instance_id)
    ps.restart_check = True


def end_replaced(ps: PassState, seen: list[Instance], report: PassReport) -> None:
    """End the earlier attempts still recorded running whose instance is gone: one
    replaced after a notice (overlap), taken by the cloud or terminated by a pass that
    died before it wrote so. Preempted when it had a notice (a restart), else ended."""
    alive = {i.id for i in seen if i.state.alive}
    for a in ps.attempts[:-1]:
        if a.state != "running" or not a.instance_id or a.instance_id in alive:
            continue
        inst = next((i for i in seen if i.id == a.instance_id), None)
        noticed = ps.store.has_event(ps.job.id, "notice", a.instance_id)
        if noticed or (inst is not None and inst.state is InstanceState.PREEMPTED):
            cur = ps.current
            took = (
                f"; attempt {cur.attempt} took over"
                if cur is not None and cur is not a and cur.state == "running"
                else ""
            )
            preempted(
                ps,
                a,
                f"attempt {a.attempt} on {a.provider}:{a.zone} gone after its notice{took}",
                "replaced after an interruption notice",
                report,
            )
        else:
            ps.end_attempt(a, AttemptState.ENDED, "instance gone", Cause.INSTANCE_LOST)


def restarts_so_far(ps: PassState) -> int:
    """Restarts are counted from the attempts (never incremented: a crash between ending
    an attempt and writing the job loses none): preempted ones, and those whose command
    exited with a code the policy restarts on."""
    return sum(1 for a in ps.attempts if counts_as_restart(a.state, a.end_cause))


def without_terminated(ps: PassState, seen: list[Instance]) -> list[Instance]:
    """The instances seen, those terminated this pass shown as such (decide again)."""
    gone = {a.instance_id for a in ps.attempts if a.state != "running" and a.instance_id}
    return [
        replace(i, state=InstanceState.TERMINATED) if i.id in gone and i.state.alive else i
        for i in seen
    ]
