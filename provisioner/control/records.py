"""What a pass writes and reports, shared by the reconciler and one job's pass.

* :class:`PassReport`: the figures of one pass (the daemon's metrics read them);
* :class:`PassBatch`: instance rows, job columns and bookkeeping events written at the end of
  the pass, in a few statements for all jobs, in one transaction;
* :func:`attempt_row`, :func:`instance_row`, :func:`instance_doc`: store rows (or a row's
  columns) from model objects;
* :func:`launch_estimate`: the estimate an attempt row keeps from its launch (the one place
  that reads it off the placement);
* :func:`billed_cost`: what an attempt cost, by its cloud's billing rule
  (:func:`providers.facts.billing_for`: increment and minimum, declared once per cloud).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from providers.facts import billing_for
from provisioner.control.store import AttemptRow, InstanceRow, JobRow
from provisioner.control.store.records import event_doc
from provisioner.core.billing import Billing
from provisioner.core.models import (
    CostEstimate,
    Instance,
    Market,
    Offer,
    Placement,
    Reservation,
    ReservationKind,
    launch_token,
)
from provisioner.core.timefmt import utc

if TYPE_CHECKING:
    from policies.model import Policy
    from provisioner.core.views import ZoneHistory

log = logging.getLogger(__name__)


@dataclass
class PassReport:
    jobs: int = 0
    launches: int = 0
    terminations: int = 0
    finished: int = 0
    reaped: int = 0
    provider_calls: int = 0
    errors: int = 0
    seconds: float = 0.0
    actions: list[str] = field(default_factory=list)
    launch_seconds: list[float] = field(default_factory=list)  # each launch call's latency
    restarts: int = 0  # attempts found preempted this pass
    decisions: int = 0  # decide() calls
    progress_reads: int = 0  # progress.json reads
    provider_errors: Counter[tuple[str, str]] = field(default_factory=Counter)  # (provider, kind)
    step_s: float = 0.0  # the decision interval decide() was told this pass
    #: the cheap invariants this pass broke (provisioner.control.invariants.Violation)
    violations: list[Any] = field(default_factory=list)
    #: seconds the pass waited on each slow service (provisioner.control.effects)
    waited: dict[str, float] = field(default_factory=dict)


@dataclass
class PassBatch:
    """Rows queued during a pass, written together at its end, in one transaction
    (:meth:`provisioner.control.store.Store.write_pass`)."""

    instances: list[dict[str, Any]] = field(default_factory=list)  # instance_doc()s
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: events that tell of what the batch writes (a job's first progress), by job, in order;
    #: none sends a notification
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def instance(self, doc: dict[str, Any]) -> None:
        self.instances.append(doc)

    def job(self, job_id: str, **columns: Any) -> None:
        """Job columns that change all the time (spend, progress)."""
        self.jobs.setdefault(job_id, {}).update(columns)

    def event(self, job_id: str, kind: str, message: str, at: datetime, **data: Any) -> None:
        self.events.setdefault(job_id, []).append(event_doc(job_id, kind, message, at, data))

    def events_of(self, job_id: str) -> list[dict[str, Any]]:
        """This job's queued events, taken out of the batch (to be written now)."""
        return self.events.pop(job_id, [])

    def take(self) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]], list[dict[str, Any]]]:
        rows, cols = self.instances, self.jobs
        events = [e for evs in self.events.values() for e in evs]
        self.instances, self.jobs, self.events = [], {}, {}
        return rows, cols, events


def billed_cost(
    provider: str, price_per_hour: float, start: datetime | None, end: datetime
) -> float:
    """What run time from ``start`` to ``end`` at ``price_per_hour`` is billed by
    ``provider`` (its increment and minimum); nothing when it never started. For the sim, pass
    the cloud it played (:func:`attempt_billing_cloud`): ``sim`` itself bills as AWS."""
    if start is None:
        return 0.0
    return billing_rule(provider).cost(price_per_hour, (end - start).total_seconds())


def billing_rule(provider: str) -> Billing:
    """``provider``'s billing rule (a provider without declared facts, a test double: AWS's)."""
    try:
        return billing_for(provider)
    except ValueError:
        return billing_for("aws")


def attempt_billing_cloud(a: AttemptRow, options: Mapping[str, Any] | None = None) -> str:
    """The cloud whose billing rule attempt ``a`` is billed by: its provider's, or for the sim
    the cloud it played in the attempt's zone (``options``: the job's provider options)."""
    from provisioner.control.played import played_cloud

    return played_cloud(a.provider, a.region, a.zone, options)


def attempt_cost(a: AttemptRow, end: datetime, options: Mapping[str, Any] | None = None) -> float:
    """What attempt ``a`` is billed from its launch to ``end``: every node of a gang, each
    under the billing rule of the cloud it ran on (``options``: the job's provider options,
    which say what cloud the sim played)."""
    nodes = a.nodes or 1
    cloud = attempt_billing_cloud(a, options)
    return billed_cost(cloud, a.price_per_hour, a.launched_at, end) * nodes


def launch_estimate(
    placement: Placement,
    policy: Policy | None = None,
    job: JobRow | None = None,
    now: datetime | None = None,
) -> tuple[float | None, float | None, float | None]:
    """The estimate made at launch, kept on the attempt row: (expected USD, P10, P90) for the
    job on ``placement`` from this launch on. The single place that reads it off a placement.

    A placement that carries its interruption-aware estimate (``plan``, ``up``) gives it; one
    from the daemon's plan is estimated here, by the same model (``provisioner.simulate.estimate``),
    for the work the job has left and the time to its deadline. Without a model figure (no
    work given, or the estimate failed: it must never stop a launch), the planner's hours x
    price."""
    est = launch_cost_estimate(placement, policy, job, now)
    if est is not None:
        return (est.mean_usd, est.p10_usd, est.p90_usd)
    return (placement.est_job_cost, None, None)


def launch_cost_estimate(
    placement: Placement,
    policy: Policy | None = None,
    job: JobRow | None = None,
    now: datetime | None = None,
    history: ZoneHistory | None = None,
) -> CostEstimate | None:
    """The whole estimate behind :func:`launch_estimate` (with its chance of missing the
    deadline), or None where there is no model figure. ``history``: what the job's attempts
    showed of the placement's zone (it updates the zone's prior)."""
    est = placement.estimate
    if est is None and policy is not None and placement.est_hours is not None:
        try:
            est = _estimate_now(placement, policy, job, now, history)
        except Exception as exc:  # a figure for the report, never a reason not to launch
            log.warning("no estimate for the launch on %s: %s", placement.offer.location, exc)
    return est


def _estimate_now(
    placement: Placement,
    policy: Policy,
    job: JobRow | None,
    now: datetime | None,
    history: ZoneHistory | None = None,
) -> CostEstimate | None:
    from provisioner.simulate.estimate import band_rates, estimate_placements
    from provisioner.simulate.priors import history_rates

    left = 1.0
    if job is not None and job.work_total_h:
        left = max(0.0, 1.0 - (job.work_done_h or 0.0) / job.work_total_h)
    hours = (placement.est_hours or 0.0) * left
    p = replace(placement, est_hours=hours, est_job_cost=hours * placement.gang_price_per_hour)
    horizon = None
    if job is not None and job.deadline is not None and now is not None:
        deadline = job.deadline if job.deadline.tzinfo else job.deadline.replace(tzinfo=UTC)
        horizon = max(0.0, (deadline - now).total_seconds() / 3600.0)
    rates = None
    if history is not None and (history.up_h > 0 or history.lost or history.recovered):
        rates = {0: history_rates(band_rates(placement.offer.interruption_band), history)}
    # the estimate is a pure function of these (its random draws are seeded by the placement):
    # a relaunch with the same work left, horizon and zone history gets it from the cache
    # instead of another replay (a tenth to half a second of a pass each)
    key = (
        replace(p, score=0.0, rank=0, est_rtt_ms=None, tflops_per_dollar=None, reasons=()),
        horizon,
        rates[0] if rates else None,
        policy.market,
        policy.checkpoint.grace,
        policy.checkpoint.interval,
    )
    try:
        return _ESTIMATES[key]
    except (KeyError, TypeError):  # TypeError: a field that does not hash (never cached)
        pass
    [done] = estimate_placements([p], policy, horizon, rates=rates)
    with contextlib.suppress(TypeError):
        if len(_ESTIMATES) >= ESTIMATE_CACHE:
            _ESTIMATES.pop(next(iter(_ESTIMATES)))  # the oldest goes
        _ESTIMATES[key] = done.estimate
    return done.estimate


#: launch estimates kept (by their inputs), the oldest dropped first
ESTIMATE_CACHE = 4096
_ESTIMATES: dict[Any, CostEstimate | None] = {}


def job_checkpoint_uri(job: JobRow, policy: Policy | None = None) -> str:
    """The checkpoint store of ``job``: as submitted, else its policy's (relative URIs
    resolved where the job was submitted)."""
    if job.checkpoint_uri:
        return job.checkpoint_uri
    if policy is None:
        from policies.loader import parse_policy

        policy = parse_policy(job.policy_yaml, job.policy_path or "<stored policy>")
    return resolve_checkpoint_uri(policy.checkpoint.uri, job.workdir)


def resolve_checkpoint_uri(uri: str, base: str | None = None) -> str:
    """``file://./x`` and ``file://x`` become absolute (relative to ``base`` or the cwd)."""
    if uri.startswith("file://"):
        path = uri[len("file://") :]
        if not path.startswith("/"):
            return "file://" + os.path.abspath(os.path.join(base or os.getcwd(), path))
    return uri


def attempt_row(
    job: JobRow,
    attempt: int,
    placement: Placement,
    now: datetime,
    reason: str,
    policy: Policy | None = None,
    history: ZoneHistory | None = None,
) -> AttemptRow:
    o = placement.offer
    r = placement.reservation
    full = launch_cost_estimate(placement, policy, job, now, history)
    est, p10, p90 = (
        (full.mean_usd, full.p10_usd, full.p90_usd)
        if full is not None
        else (placement.est_job_cost, None, None)
    )
    return AttemptRow(
        job_id=job.id,
        attempt=attempt,
        token=launch_token(job.id, attempt),
        provider=o.provider,
        region=o.region,
        zone=o.zone or o.region,
        instance_type=o.instance_type,
        gpu=o.gpu,
        gpu_count=o.gpu_count,
        market=placement.market.value,
        price_per_hour=placement.price_per_hour,
        bid_cap_per_hour=placement.bid_cap_per_hour,
        instance_id=None,
        state="launching",
        reason=reason,
        created_at=now,
        launched_at=None,
        ended_at=None,
        end_reason="",
        cost_usd=0.0,
        estimate_usd=est,
        estimate_p10_usd=p10,
        estimate_p90_usd=p90,
        nodes=placement.nodes,
        placement_group=None,
        on_demand_price_per_hour=o.price,
        cheapest_on_demand_per_hour=None,
        cheapest_on_demand_offer=None,
        estimate_p_miss=None if full is None else full.p_miss_deadline,
        reservation_id=None if r is None else r.id,
        reservation_kind=None if r is None else r.kind.value,
        reservation_ends_at=None if r is None else r.ends_at,
        held_usd_per_hour=None if r is None else r.held_usd_per_hour,
    )


def instance_row(inst: Instance, now: datetime) -> InstanceRow:
    return InstanceRow(**instance_doc(inst, now))


def instance_doc(inst: Instance, now: datetime) -> dict[str, Any]:
    """An instance row's columns, as seen ``now`` (what a pass queues: no ORM object)."""
    return {
        "provider": inst.provider,
        "instance_id": inst.id,
        "job_id": inst.job_id,
        "attempt": inst.attempt,
        "region": inst.region,
        "zone": inst.zone,
        "instance_type": inst.instance_type,
        "market": inst.market.value,
        "state": inst.state.value,
        "raw_state": inst.raw_state,
        "state_reason": inst.state_reason,
        "price_per_hour": inst.price_per_hour,
        "launched_at": inst.launched_at,
        "ended_at": None if inst.state.alive else now,
        "last_seen_at": now,
    }


def placement_of(a: AttemptRow) -> Placement:
    """The placement an attempt was launched on, rebuilt from its row."""
    offer = Offer(
        provider=a.provider,
        region=a.region,
        zone=a.zone,
        instance_type=a.instance_type,
        gpu=a.gpu,
        gpu_count=a.gpu_count,
        vcpus=0,
        memory_gib=0,
        price=a.price_per_hour if a.market == Market.ON_DEMAND.value else None,
        spot_price=a.price_per_hour if a.market == Market.SPOT.value else None,
    )
    held = None
    if a.reservation_id:  # held capacity: which one, as at its launch
        held = Reservation(
            provider=a.provider,
            id=a.reservation_id,
            region=a.region,
            zone=a.zone,
            instance_type=a.instance_type,
            kind=ReservationKind(a.reservation_kind or ReservationKind.ON_DEMAND.value),
            total=a.nodes or 1,
            free=a.nodes or 1,
            ends_at=utc(a.reservation_ends_at) if a.reservation_ends_at else None,
            held_usd_per_hour=a.held_usd_per_hour,
        )
    return Placement(
        offer=offer,
        market=Market(a.market),
        price_per_hour=a.price_per_hour,
        bid_cap_per_hour=a.bid_cap_per_hour,
        score=0.0,
        nodes=a.nodes or 1,
        reservation=held,
    )
