"""Overlap on notice: the replacement launched during an interruption notice (decide()'s part).

When the job's instance has a notice with at least ``JobView.boot_s`` left, decide() launches
the replacement at once, as Karpenter does, instead of waiting for the capacity to go: a
:class:`~provisioner.core.decide.Launch` whose ``replaces`` names the instance under notice.
That instance is *draining* from then on: it is kept (it is not a duplicate) while its agent
checkpoints, and terminated as soon as the checkpoint has landed (its agent reports
``interrupted``, or a later attempt's agent reports), or when the notice runs out, whichever is
first. Its attempt ends ``preempted`` (a restart, as if the cloud had taken it).

Never more than one extra instance: a replacement is launched only for the current attempt's
instance, never while one is in flight (a draining instance is never the one kept), and a
replacement whose launch failed leaves the old instance the current one again (the next offer
is tried as a replacement, not as a third instance). Pure: the daemon and the simulator both
reach it through decide().

Make before break: a planned switch (on-demand to spot, one zone to another, spot to
on-demand) launches the new instance first with ``replaces`` naming the running one, which
drains the same way without a notice: it keeps working (and billing) until the new attempt runs
and its changeover is over (``JobView.changeover_h`` after its launch: boot, setup, restore),
or its agent reports; then it is terminated (an ``ended`` attempt, not a restart) and its agent
checkpoints on the way down, which the new agent waits for (``handover_from``). A refused
launch leaves it the current instance; a replacement lost during the overlap does too.

What a look costs (:func:`overlap_usd`) counts each cloud's billing rule (``JobView.billing``,
the drivers fill it from the clouds' facts): the old instance's remaining billed time at the
handover and the new one's minimum; decide() makes a look from on-demand to spot only where it
pays (:func:`look_pays`), and counts its cost against the budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from provisioner.core.billing import PER_SECOND, Billing
from provisioner.core.models import Instance, InstanceState, Interruption, Market, Placement
from provisioner.core.rules import launch_price
from provisioner.core.strategies import EPS_H
from provisioner.core.views import AgentReport, JobView

#: Agent states that say the checkpoint taken on the notice is in the checkpoint store.
LANDED = ("interrupted", "done", "failed")


@dataclass(frozen=True, slots=True)
class Draining:
    """An instance under notice whose replacement is in flight."""

    instance: Instance
    until: datetime  # when its capacity goes
    landed: bool  # its checkpoint is in (or its notice is over): terminate it now
    planned: bool = False  # make before break (no notice): a switch the strategy chose


def notice_deadline(x: Interruption) -> datetime:
    """When a notice's capacity goes (two minutes when it does not say)."""
    return x.deadline or x.at + timedelta(minutes=2)


def draining(
    job: JobView, alive: Sequence[Instance], notices: Sequence[Interruption], now: datetime
) -> list[Draining]:
    """The live instances of an earlier attempt than the current one, under notice, while the
    current attempt (their replacement) is in flight (launching or running); and the newest
    earlier one without a notice (one instance, or a gang's unit): a planned switch made before
    break (its handover is due ``changeover_h`` after the current attempt's launch)."""
    cur = job.current
    if cur is None or cur.state not in (None, InstanceState.RUNNING):
        return []
    agent = job.agent or AgentReport()
    out = []
    noticed = {x.instance_id for x in notices}
    earlier = [
        i
        for i in alive
        if i.id != cur.instance_id and (i.attempt or 0) < cur.attempt and i.id not in noticed
    ]
    if earlier:
        inst = max(earlier, key=lambda i: (i.attempt or 0, i.id))
        n = inst.attempt or 0
        until = handover_due(job)
        landed = (
            (agent.attempt == n and agent.state in LANDED)
            or (agent.attempt is not None and agent.attempt > n)
            or (cur.state is InstanceState.RUNNING and until is not None and now >= until)
        )
        out.append(Draining(inst, until or now, landed, planned=True))
    for inst in alive:
        n = inst.attempt or 0
        if inst.id == cur.instance_id or n >= cur.attempt:
            continue
        mine = [notice_deadline(x) for x in notices if x.instance_id == inst.id]
        mine += [x.at for x in notices if x.instance_id == inst.id and x.kind == "preempted"]
        if not mine:
            continue
        until = min(mine)
        landed = (
            (agent.attempt == n and agent.state in LANDED)
            or (agent.attempt is not None and agent.attempt > n)
            or now >= until
        )
        out.append(Draining(inst, until, landed))
    return out


def handover_due(job: JobView) -> datetime | None:
    """When the current attempt's changeover is over (None: not launched yet): a planned
    switch's old instance is stopped then (its agent checkpoints on the way down)."""
    cur = job.current
    if cur is None or cur.launched_at is None:
        return None
    return cur.launched_at + timedelta(hours=job.changeover_h)


def worth_overlapping(
    job: JobView, keep: Instance | None, until: datetime | None, now: datetime
) -> bool:
    """Whether a notice on ``keep`` (capacity gone at ``until``) is overlapped: long enough
    left for a replacement to boot, a restart left after this one, and ``keep`` the current
    attempt's, or a replacement's launch failed (none in flight)."""
    cur = job.current
    if keep is None or until is None or cur is None:
        return False
    replacement_failed = (  # the launch of a replacement failed: keep is current again
        cur.instance_id is None
        and cur.state is InstanceState.TERMINATED
        and (keep.attempt or 0) < cur.attempt
    )
    if keep.id != cur.instance_id and not replacement_failed:
        return False
    if job.restarts + 1 >= job.policy.restart.max_restarts:
        return False
    return (until - now).total_seconds() >= job.boot_s


# -- switches made before break --------------------------------------------------------------


def settled(job: JobView, keep: Instance, now: datetime) -> bool:
    """Whether ``keep`` is past its changeover (it does the work while a new one boots; one
    still booting is stopped before its replacement is launched)."""
    cur = job.current
    since = keep.launched_at
    if cur is not None and keep.id == cur.instance_id and cur.launched_at is not None:
        since = cur.launched_at
    return since is None or (now - since).total_seconds() / 3600.0 >= job.changeover_h - EPS_H


def billing(job: JobView, provider: str) -> Billing:
    """``provider``'s billing rule as the driver told it (``JobView.billing``); per second
    without a minimum where it did not."""
    return job.billing.get(provider) or PER_SECOND


def overlap_usd(
    job: JobView, keep: Instance | None, now: datetime | None = None, new: Placement | None = None
) -> float:
    """What a look that is accepted costs beyond the work (a refused one costs nothing):
    ``keep`` billed through the new instance's changeover, and on to the end of what its
    cloud bills at the handover (the rest of a started billing increment, or of its minimum
    if it is younger than that; known only with ``now``); plus ``new``'s billing minimum,
    what the new instance is billed if it is lost at once (a look refused after it started,
    or lost early), where ``new`` is given."""
    if keep is None:
        return 0.0
    price = keep.price_per_hour
    cur = job.current
    if price is None and cur is not None and keep.id == cur.instance_id:
        price = launch_price(cur.placement)
    hand_s = job.changeover_h * 3600.0
    tail_s = 0.0
    if now is not None and keep.launched_at is not None:
        age_s = (now - keep.launched_at).total_seconds() + hand_s  # at the handover
        tail_s = max(0.0, billing(job, keep.provider).billed_seconds(age_s) - age_s)
    cost = (price or 0.0) * (hand_s + tail_s) / 3600.0
    if new is not None:
        cost += launch_price(new) * billing(job, new.offer.provider).minimum_s / 3600.0
    return cost * job.policy.resources.nodes  # a gang: every node, old and new


def look_pays(job: JobView, keep: Instance | None, new: Placement, now: datetime) -> bool:
    """Whether a look from ``keep`` (on-demand) at ``new`` (spot) pays: what the work left
    saves on ``new``'s price is more than the look costs (:func:`overlap_usd`; during the
    changeover ``keep`` does the work, so the saving is over all of the work left). A look of
    any other kind (a move the strategy needs, not a saving), or without a work estimate,
    is not weighed here."""
    if keep is None or job.work_total_h is None:
        return True
    if keep.market is not Market.ON_DEMAND or new.market is not Market.SPOT:
        return True
    price = keep.price_per_hour
    cur = job.current
    if price is None and cur is not None and keep.id == cur.instance_id:
        price = launch_price(cur.placement)
    left_h = max(0.0, job.work_total_h - job.work_done_h)
    saving = ((price or 0.0) - launch_price(new)) * left_h * job.policy.resources.nodes
    return saving > overlap_usd(job, keep, now, new)
