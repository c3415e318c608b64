"""decide()'s inputs from the store and what a pass observed (the daemon's source).

The contract, its fields and its constants are :mod:`provisioner.core.views`; the simulator
(:mod:`provisioner.simulate.engine`) fills the same fields from a trace. Here they come from
the store (the job's row and attempts, cooldowns, spend), the provider (instances by tag,
interruptions), the checkpoint store (the agent's progress, and the interruption notice the
agent saw on the VM: :func:`reported_notices`) and the planner (candidates over
the job's provider's offers). Nothing here decides; nothing here reads a clock or a provider:
the caller hands in what it observed.

Spot capacity history (``Observations.spot_up_since``) is read from the attempts: each
location's latest outage is its latest preempted spot attempt or "no capacity" answer, and a
location without one has been up, as far as this job knows, since the job was submitted.
The same attempts give each location's history (``Observations.spot_history``, what the
learned strategy estimates spot lifetimes and outages from): :func:`spot_events` turns them
into the events :func:`provisioner.core.views.zone_history` summarises, the events the
simulator records as it replays a trace.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from policies.model import Policy
from providers.facts import CLOUD_BILLING
from provisioner.agent.protocol import ProgressRecord
from provisioner.agent.store import step_of
from provisioner.control.records import placement_of
from provisioner.control.store import AttemptRow, JobRow
from provisioner.core.decide import (
    AgentReport,
    AttemptView,
    CapacityError,
    JobView,
    Observations,
)
from provisioner.core.looks import schedule
from provisioner.core.models import (
    Instance,
    InstanceState,
    Interruption,
    Market,
    Placement,
    Reservation,
)
from provisioner.core.planner import Plan, PlanContext, plan_offers
from provisioner.core.states import AgentState, Cause
from provisioner.core.views import (
    BOOT_S,
    CAPACITY_ERRORS_WITHIN,
    CHANGEOVER_H,
    Location,
    SpotEvent,
    spot_up_since,
    step_h,
    zone_history,
)

#: A reported notice whose deadline is this long past is over (the capacity stayed): as the
#: provider's notices, which the interruption feed keeps an hour.
NOTICE_KEPT = timedelta(hours=1)
#: How many ranked candidates decide() sees (both markets).
CANDIDATES = 40
#: Launch failures that send the job to its next offer at once (end_reason prefixes): they
#: are capacity errors for decide(), not failures to back off from.
MOVE_ON = ("capacity", "price-too-low", "quota")


def refused(a: AttemptRow) -> bool:
    """Whether an attempt's launch was refused for capacity, quota or price (the next offer
    is tried at once): its cause says so; rows from before causes were stored, its reason."""
    cause = Cause.parse(a.end_cause)
    if cause is Cause.UNKNOWN:
        return a.state == "failed" and a.end_reason.startswith(MOVE_ON)
    return cause is Cause.LAUNCH_REFUSED


_ATTEMPT_STATE = {
    "launching": None,
    "running": InstanceState.RUNNING,
    "preempted": InstanceState.PREEMPTED,
    "ended": InstanceState.TERMINATED,
    "failed": InstanceState.TERMINATED,
}

__all__ = [
    "CANDIDATES",
    "CHANGEOVER_H",
    "agent_report",
    "job_view",
    "merged",
    "observations",
    "placement_of",
    "reported_notices",
]


def work_done_h(progress: dict[str, Any] | None, total_h: float | None) -> float:
    """Checkpointed progress in hours: the share of steps the newest checkpoint holds."""
    if not progress or not total_h:
        return 0.0
    total_steps = progress.get("total_steps")
    ck = step_of(progress.get("last_checkpoint"))
    if not total_steps or ck is None:
        return 0.0
    return min(1.0, ck / float(total_steps)) * total_h


def agent_report(progress: ProgressRecord | dict[str, Any] | None) -> AgentReport | None:
    """What the agent's progress record says of the job's command (the record as
    :mod:`provisioner.control.jobpass.progress` parsed it; a raw document is parsed here)."""
    rec = progress if isinstance(progress, ProgressRecord) else ProgressRecord.from_doc(progress)
    if rec is None or not progress:
        return None
    setup = rec.setup_error or {}
    return AgentReport(
        state=AgentState.parse(rec.state),
        attempt=rec.attempt,
        exit_code=rec.exit_code,
        updated_at=rec.updated_at,
        setup_message=f"{setup.get('stage', 'setup')}: {setup.get('message', '')}" if setup else "",
        setup_fingerprint=str(setup.get("fingerprint") or ""),
    )


def reported_notices(
    record: ProgressRecord | None, attempts: Sequence[AttemptRow], now: datetime
) -> list[Interruption]:
    """The interruption notice the agent reports, as decide() reads a notice: an
    :class:`Interruption` (``kind="notice"``, the deadline the VM was given) of the instance of
    the attempt that reported it, while that attempt runs. Every cloud serves its notice to the
    VM; few report it through their API before the capacity goes (``CloudFacts.notice_api``),
    so this is how a notice reaches decide() on any of them. A stop signal to the agent (the
    VM going down, for whatever reason) is not a cloud's notice and is left out."""
    n = record.notice if record is not None else None
    if n is None or not n.from_cloud or record is None or record.attempt is None:
        return []
    if (n.deadline or n.seen_at or now) < now - NOTICE_KEPT:
        return []  # long over, and the capacity is still there: no longer a notice
    for a in reversed(attempts):
        if a.attempt != record.attempt:
            continue
        if a.state != "running" or not a.instance_id:
            return []
        at = n.seen_at or now
        return [
            Interruption(
                instance_id=a.instance_id,
                provider=a.provider,
                zone=a.zone,
                kind="notice",
                at=at,
                deadline=n.deadline,
                raw=(f"{record.cloud}: {n.raw}" if record.cloud else n.raw)[:200],
            )
        ]
    return []


def reported_rebalance(
    record: ProgressRecord | None, attempts: Sequence[AttemptRow]
) -> list[Interruption]:
    """The early signal the agent reports being served now (AWS's rebalance recommendation),
    as decide() reads it: an :class:`Interruption` with ``kind="rebalance"`` (no deadline: it
    says nothing of when the capacity goes) of the instance of the attempt that reported it,
    while that attempt runs (provisioner/core/decide/signals.py)."""
    if record is None or record.rebalance_at is None or record.attempt is None:
        return []
    for a in reversed(attempts):
        if a.attempt == record.attempt and a.state == "running" and a.instance_id:
            raw = (
                f"{record.cloud}: {record.rebalance_raw}" if record.cloud else record.rebalance_raw
            )
            return [
                Interruption(
                    a.instance_id,
                    a.provider,
                    a.zone,
                    "rebalance",
                    record.rebalance_at,
                    None,
                    raw[:200],
                )
            ]
    return []


def merged(api: Sequence[Interruption], reported: Iterable[Interruption]) -> list[Interruption]:
    """The provider's interruptions and the agents' notices, one notice per instance (the
    API's where both report it, with the agent's deadline where the API gives none: Alibaba's
    Recycling lock says nothing of when, the VM's metadata does)."""
    out = list(api)
    have = {(x.instance_id, x.kind): i for i, x in enumerate(out)}
    for x in reported:
        i = have.get((x.instance_id, x.kind))
        if i is None:
            have[(x.instance_id, x.kind)] = len(out)
            out.append(x)
        elif out[i].deadline is None and x.deadline is not None:
            out[i] = dataclasses.replace(out[i], deadline=x.deadline)
    return out


_SETUP_FAILED = re.compile(r"^setup failed \(([0-9a-f]*)\)")


def setup_failures(attempts: Sequence[AttemptRow]) -> tuple[str, ...]:
    """The fingerprints of the attempts that ended in a failed setup (their end reason, as
    decide() wrote it: ``setup failed (<fingerprint>): ...``)."""
    out = []
    for a in attempts:
        cause = Cause.parse(a.end_cause)
        if cause not in (Cause.SETUP_FAILED, Cause.UNKNOWN):
            continue  # the fingerprint is read from the reason of a setup failure only
        m = _SETUP_FAILED.match(a.end_reason or "")
        if m:
            out.append(m.group(1))
    return tuple(out)


def launch_failures(attempts: Sequence[AttemptRow]) -> tuple[int, datetime | None]:
    """The latest run of failed launches that another offer would not cure (capacity, price
    and quota failures are skipped: decide() moves on to the next offer for those), and when
    the latest of them ended."""
    n, last = 0, None
    for a in reversed(attempts):
        if a.state != "failed":
            break
        if refused(a):
            continue
        n += 1
        last = last or (a.ended_at or a.created_at)
    return n, last


def outages(attempts: Iterable[AttemptRow]) -> dict[Location, datetime]:
    """Per location, the latest time spot capacity was seen gone there: a preempted spot
    attempt's end, a launch answered "no capacity"."""
    out: dict[Location, datetime] = {}
    for a in attempts:
        lost = a.state == "preempted" or refused(a)
        if not lost or a.market != Market.SPOT.value:
            continue
        at = a.ended_at or a.created_at
        for loc in ((a.provider, a.zone), (a.provider, a.region)):
            if loc not in out or out[loc] < at:
                out[loc] = at
    return out


def spot_events(attempts: Iterable[AttemptRow]) -> list[SpotEvent]:
    """The job's spot attempts as :data:`~provisioner.core.views.SpotEvent` s, at the zone and
    at the region: a launch that held (``up`` at its launch), its end (``lost`` when
    preempted, ``stop`` otherwise) and a launch answered "no capacity" (``refused``)."""
    out: list[SpotEvent] = []
    for a in attempts:
        if a.market != Market.SPOT.value:
            continue
        locs = ((a.provider, a.zone), (a.provider, a.region))
        start, end = a.launched_at or a.created_at, a.ended_at or a.created_at
        if refused(a):
            out += [(end, loc, "refused") for loc in locs]
        elif a.state in ("running", "preempted", "ended") and a.instance_id is not None:
            out += [(start, loc, "up") for loc in locs]
            if a.state != "running":
                kind = "lost" if a.state == "preempted" else "stop"
                out += [(end, loc, kind) for loc in locs]
    return out


def job_view(
    job: JobRow,
    policy: Policy,
    attempts: Sequence[AttemptRow],
    instances: Sequence[Instance],
    progress: dict[str, Any] | None,
    *,
    record: ProgressRecord | None = None,
    spent_usd: float,
    cooldowns: dict[Location, datetime],
    interval_s: float,
    boot_s: float = BOOT_S,
    changeover_h: float = CHANGEOVER_H,
    probe_below: str = "",
    gpu_idle_since: datetime | None = None,
) -> JobView:
    """The job as decide() sees it (see :mod:`provisioner.core.views` for the fields)."""
    cur = attempts[-1] if attempts else None
    current = None
    if cur is not None:
        seen = next((i for i in instances if i.id == cur.instance_id), None)
        current = AttemptView(
            attempt=cur.attempt,
            placement=placement_of(cur),
            instance_id=cur.instance_id,
            state=seen.state if seen is not None else _ATTEMPT_STATE.get(cur.state),
            launched_at=cur.launched_at or cur.created_at,
            ended_at=cur.ended_at,
        )
    failures, failed_at = launch_failures(attempts)
    return JobView(
        id=job.id,
        policy=policy,
        submitted_at=job.submitted_at,
        deadline=job.deadline,
        work_total_h=job.work_total_h,
        work_done_h=work_done_h(progress, job.work_total_h),
        restarts=job.restarts,
        attempt=cur.attempt if cur else 0,
        spent_usd=spent_usd,
        current=current,
        cooldowns=cooldowns,
        changeover_h=changeover_h,
        step_h=step_h(interval_s),
        cancel_requested=job.cancel_requested,
        agent=agent_report(record if record is not None else progress),
        launch_failures=failures,
        last_launch_failure_at=failed_at,
        boot_s=boot_s,
        setup_failures=setup_failures(attempts),
        looks=schedule(spot_events(attempts)),
        launch_calls=tuple((a.provider, a.created_at) for a in attempts),
        billing=CLOUD_BILLING,
        probe_below=probe_below,
        gpu_idle_since=gpu_idle_since,
    )


def observations(
    job: JobRow,
    attempts: Sequence[AttemptRow],
    instances: Sequence[Instance],
    interruptions: Sequence[Interruption],
    plan: Plan,
    now: datetime,
    record: ProgressRecord | None = None,
    zone_priors: Mapping[Any, Any] | None = None,
    spot_prices: Mapping[tuple[str, str, str], float] | None = None,
) -> Observations:
    """What the providers say now, as decide() sees it: the provider's interruptions, and the
    notice the agent reports (``record``; :func:`reported_notices`) where the provider's API
    did not report one for that instance."""
    interruptions = merged(interruptions, reported_notices(record, attempts, now))
    recent = now - CAPACITY_ERRORS_WITHIN
    errors = tuple(
        CapacityError(
            a.provider, a.zone, a.instance_type, Market(a.market), a.ended_at or a.created_at
        )
        for a in attempts
        if refused(a) and (a.ended_at or a.created_at) >= recent
    )
    spot = _spot_locations(plan)
    return Observations(
        instances=tuple(instances),
        interruptions=tuple(interruptions),
        candidates=_candidates(plan),
        capacity_errors=errors,
        spot_up_since=spot_up_since(spot, outages(attempts), job.submitted_at),
        spot_history=zone_history(spot_events(attempts), now),
        zone_priors=zone_priors or {},
        spot_prices=spot_prices or {},
    )


#: plan -> its placements as one tuple, the same object each time (decide() keeps what it
#: checks of a candidate list by the list's identity; plans are shared and kept a minute)
_CANDIDATES: dict[int, tuple[Plan, tuple[Placement, ...]]] = {}


def _candidates(plan: Plan) -> tuple[Placement, ...]:
    got = _CANDIDATES.get(id(plan))
    if got is None or got[0] is not plan:
        if len(_CANDIDATES) > 1_000:
            _CANDIDATES.clear()
        got = _CANDIDATES[id(plan)] = (plan, tuple(plan.placements))
    return got[1]


#: plan -> the (provider, location) of its spot placements, in order (as _CANDIDATES)
_SPOT_LOCATIONS: dict[int, tuple[Plan, list[tuple[str, str]]]] = {}


def _spot_locations(plan: Plan) -> list[tuple[str, str]]:
    got = _SPOT_LOCATIONS.get(id(plan))
    if got is None or got[0] is not plan:
        if len(_SPOT_LOCATIONS) > 1_000:
            _SPOT_LOCATIONS.clear()
        spot = [
            (p.offer.provider, p.offer.location) for p in plan.placements if p.market is Market.SPOT
        ]
        got = _SPOT_LOCATIONS[id(plan)] = (plan, spot)
    return got[1]


_SHORT = re.compile(r"\((\d+) of (\d+) nodes\)$")

#: (provider, zone or region, instance type, market) -> how many nodes of a gang came up there
Shortfalls = frozenset[tuple[tuple[str, str, str, str], int]]


def gang_shortfalls(attempts: Sequence[AttemptRow], now: datetime) -> Shortfalls:
    """Where a gang of this job could not be launched whole lately (within
    :data:`CAPACITY_ERRORS_WITHIN`): how many of its nodes came up there, the fewest seen.
    The planner rejects those offers as ``gang_capacity`` ("only 2 of 4 nodes of ...")."""
    recent = now - CAPACITY_ERRORS_WITHIN
    fewest: dict[tuple[str, str, str, str], int] = {}
    for a in attempts:
        if a.state != "failed" or (a.ended_at or a.created_at) < recent:
            continue
        m = _SHORT.search(a.end_reason or "")
        if m is None:
            continue
        key = (a.provider, a.zone, a.instance_type, a.market)  # spot short: on-demand may not be
        fewest[key] = min(int(m.group(1)), fewest.get(key, 1 << 30))
    return frozenset(fewest.items())


def candidate_plan(
    policy: Any,
    catalog: Any,
    cooled: frozenset[tuple[str, str]],
    now: Any,
    measured: Any = None,
    short: Shortfalls = frozenset(),
    priors: Mapping[Any, Any] | None = None,
    reservations: Sequence[Reservation] = (),
    changeover_h: float = CHANGEOVER_H,
) -> Plan:
    # pacing=False: a running job is paced by decide() against what is left, not filtered by
    # whole-job estimates here (which left a job no budget could pay for waiting forever)
    ctx = PlanContext(
        now=now,
        submitted_at=now,
        cooldown=cooled,
        measured=measured or {},
        pacing=False,
        node_capacity=dict(short),
        priors=priors or {},
        reservations=tuple(reservations),
        changeover_h=changeover_h,
    )
    return plan_offers(policy, catalog, ctx, top=CANDIDATES)


def plan_candidates(
    policy: Any,
    catalog: Any,
    cooled: frozenset[tuple[str, str]],
    now: Any,
    measured: Any = None,
) -> list[Placement]:
    return candidate_plan(policy, catalog, cooled, now, measured).placements


#: How many of a plan's ranked placements a launch event keeps.
PLAN_DIGEST_TOP = 5


def plan_digest(plan: Plan, chosen: Placement | None) -> dict[str, Any]:
    """What a launch records of the plan it was chosen from (JSON, a few kB): the best
    placements, where the chosen one ranked, and the rejected offers by reason."""

    def key(p: Placement) -> tuple[Any, ...]:
        o = p.offer
        return (o.provider, o.zone, o.region, o.instance_type, p.market)

    rank = None
    if chosen is not None:
        want = key(chosen)
        rank = next((i + 1 for i, p in enumerate(plan.placements) if key(p) == want), None)
    return {
        "eligible": plan.eligible,
        "candidates": plan.candidates,
        "chosen_rank": rank,
        "chosen": None if chosen is None else chosen.as_dict(),
        "top": [p.as_dict() for p in plan.placements[:PLAN_DIGEST_TOP]],
        "rejected": plan.rejected,
        "rejected_examples": {r: list(rej.examples) for r, rej in plan.rejections.items()},
        "required_vram_gb": None
        if plan.required_vram_gb is None
        else round(plan.required_vram_gb, 2),
        "notes": list(plan.notes),
    }
