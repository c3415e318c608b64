"""The interruption notices a job's pass learns of beside the provider's API: the notice
(and rebalance signal) its agent reported in the progress record, and a capacity block's end
known from its launch. Each joins this pass's interruptions (decide() gets it as an
interruption of that attempt, on every cloud) and is recorded once as a ``notice`` (or
``rebalance``) event."""

from __future__ import annotations

from typing import Any

from provisioner.agent.protocol import ProgressRecord
from provisioner.control import inputs
from provisioner.control.jobpass.progress import record_of
from provisioner.control.jobpass.state import GO_ON, PassState, Result
from provisioner.core.models import Interruption
from provisioner.core.reserved import block_notices
from provisioner.core.timefmt import parse_time, utc


class Notices:
    """The agent's notices, and a capacity block's end (known from the instance's tags)."""

    def reconcile(self, ps: PassState) -> Result:
        take_reported_notice(ps, record_of(ps, ps.progress))  # the notice the agent saw
        ending = block_notices(ps.live(), ps.interruptions, ps.now)
        if ending:
            ps.interruptions = inputs.merged(ps.interruptions, ending)
            for it in ending:
                _note_block_end(ps, it)
        return GO_ON


def take_reported_notice(ps: PassState, record: ProgressRecord | None) -> None:
    """The notice the agent reports (:func:`provisioner.control.inputs.reported_notices`)
    joins this pass's interruptions, and is kept while its attempt runs (a replacement's
    agent overwrites the record once the checkpoint is in, but the instance under notice
    stays under notice until it goes); each is recorded once as a ``notice`` event."""
    memo = ps.memo
    for it in inputs.reported_rebalance(record, ps.attempts):  # an early signal
        ps.interruptions = inputs.merged(ps.interruptions, [it])
        _note_rebalance(ps, it)
    for it in inputs.reported_notices(record, ps.attempts, ps.now):
        if it.instance_id not in memo.notices:
            memo.notices[it.instance_id] = it
            _note_notice(ps, it)
    _recall_notices(ps)
    if not memo.notices:
        return
    running = {a.instance_id for a in ps.attempts if a.state == "running"}
    old = ps.now - inputs.NOTICE_KEPT
    for iid, it in list(memo.notices.items()):
        if iid not in running or (it.deadline or it.at) < old:
            del memo.notices[iid]
    ps.interruptions = inputs.merged(ps.interruptions, memo.notices.values())


def _recall_notices(ps: PassState) -> None:
    """An earlier attempt still running beside the current one (an overlap this process
    did not see begin: a restarted daemon, a takeover) gets its notice back from its
    ``notice`` event, once: its agent's record may be the replacement's by now."""
    memo, cur = ps.memo, ps.current
    if len(ps.attempts) < 2:
        return  # no earlier attempt
    earlier = {
        a.instance_id
        for a in ps.attempts
        if a.state == "running" and a.instance_id and a is not cur
    } - set(memo.notices)
    if not earlier or earlier <= memo.recalled:
        return
    memo.recalled |= earlier
    for e in ps.store.events_of_kinds([ps.job.id], ["notice"]).get(ps.job.id, []):
        iid = (e.data or {}).get("instance")
        if iid not in earlier or iid in memo.notices:
            continue
        a = next(a for a in ps.attempts if a.instance_id == iid)
        memo.notices[iid] = Interruption(
            instance_id=iid,
            provider=a.provider,
            zone=a.zone,
            kind="notice",
            at=utc(e.at),
            deadline=parse_time((e.data or {}).get("deadline")),
            raw=e.message[:200],
        )


def _note_notice(ps: PassState, it: Interruption) -> None:
    if ps.store.has_event(ps.job.id, "notice", it.instance_id):
        return  # the provider's API reported it (or an earlier process recorded it)
    until = f"; capacity goes at {it.deadline:%H:%M:%S}" if it.deadline else ""
    ps.store.add_event(
        ps.job.id,
        "notice",
        f"interruption notice for {it.instance_id} in {it.zone}, reported by its agent "
        f"({it.raw}){until}; the agent checkpoints",
        at=it.at,
        instance=it.instance_id,
        deadline=it.deadline.isoformat() if it.deadline else None,
    )


def _note_rebalance(ps: PassState, it: Interruption) -> None:
    if ps.store.has_event(ps.job.id, "rebalance", it.instance_id):
        return  # recorded once per instance
    ps.store.add_event(
        ps.job.id,
        "rebalance",
        f"rebalance recommendation for {it.instance_id} in {it.zone}, reported by its agent "
        f"({it.raw}): an early signal, not a notice (the job goes on); decide() may start "
        "a replacement elsewhere, made before break",
        at=it.at,
        instance=it.instance_id,
    )


def _note_block_end(ps: PassState, it: Any) -> None:
    """A capacity block's end, recorded once as the instance's ``notice`` event."""
    if it.kind != "notice" or ps.store.has_event(ps.job.id, "notice", it.instance_id):
        return
    ps.store.add_event(
        ps.job.id,
        "notice",
        f"{it.instance_id} in {it.zone}: {it.raw} (known since its launch); the agent "
        "checkpoints and the job moves on before the end",
        at=it.at,
        instance=it.instance_id,
        deadline=it.deadline.isoformat() if it.deadline else None,
    )
