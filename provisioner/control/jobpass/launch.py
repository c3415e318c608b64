"""A job's launch, crash-safely (carried out for decide()'s ``Launch``, or sent again for an
attempt left ``launching``): intent first (the attempt row with its (job, attempt) token),
then the cloud call, then what came back. A row left ``launching`` by a crash is sent again
with the same token (the cloud returns the instance it may have started), and the lease is
renewed right before each send so that two replicas never launch for one job."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime, timedelta

from policies.model import CapEnforce, Policy
from providers.base import ErrorKind, ErrorScope, ProviderError
from providers.capabilities import PlacementGroups
from provisioner.control.guard import guard_launch
from provisioner.control.inputs import placement_of, plan_digest, spot_events
from provisioner.control.jobpass.alerts import note_deadline
from provisioner.control.jobpass.state import LeaseLost, PassState
from provisioner.control.pricewatch import enforcement
from provisioner.control.records import PassReport, attempt_row, instance_row
from provisioner.control.store import AttemptRow
from provisioner.core.models import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_MANAGED,
    Instance,
    LaunchRequest,
    Market,
    Placement,
    WheelLink,
    placement_group_name,
)
from provisioner.core.overlap import notice_deadline
from provisioner.core.quotas import refused_at_launch
from provisioner.core.reserved import block_tags
from provisioner.core.reserved import notice_at as notice_at_
from provisioner.core.reserved import usable_end as usable_end_
from provisioner.core.states import AttemptState, Cause
from provisioner.core.views import CHANGEOVER_H, zone_history

#: A switch made before break: how long after its changeover the new agent waits for the old
#: one's checkpoint before it goes on from the newest one (the old one's stop has failed).
HANDOVER_WAIT = timedelta(minutes=30)
#: a launch's wheel URL is made again when the one this pass made has less left than this
URL_FRESH_FOR = timedelta(minutes=90)


def launch(ps: PassState, placement: Placement, reason: str, report: PassReport) -> bool:
    """Launch one attempt on ``placement``: intent first, then the cloud call."""
    job = ps.job
    guard_launch(ps.policy, placement, ps.spent())
    fence(ps, f"launching attempt {job.attempt + 1}")
    attempt = (ps.current.attempt if ps.current else 0) + 1
    # what this job's attempts showed of the zone updates its prior in the launch estimate
    seen = zone_history(spot_events(ps.attempts), ps.now).get(
        (placement.offer.provider, placement.offer.zone)
    )
    row = attempt_row(job, attempt, placement, ps.now, reason, ps.policy, seen)
    _wheel_link(ps)  # a wheel that cannot be carried: no attempt written
    _reference(ps, row)
    ps.store.add_attempt(row)
    ps.attempts.append(row)
    job.attempt = attempt
    ps.env.failpoints.hit("after-attempt-row")
    note_deadline(ps, row)
    return _send(ps, row, placement, reason, report)


def _reference(ps: PassState, row: AttemptRow) -> None:
    """The ledger's second reference, kept on the row: the cheapest on-demand placement
    the policy allows now (per node-hour). A figure for the report, never in the way."""
    if ps.env.reference is None:
        return
    try:
        ref = ps.env.reference(ps.job, ps.policy, ps.now)
    except Exception as exc:
        ps.log.info("job %s: no on-demand reference: %s", ps.job.id, exc)
        return
    if ref is not None:
        o = ref.offer
        row.cheapest_on_demand_per_hour = ref.price_per_hour
        row.cheapest_on_demand_offer = f"{o.provider}:{o.zone or o.region}:{o.instance_type}"


def _wheel_link(ps: PassState) -> WheelLink | None:
    """The running version's wheel in the job's checkpoint store and a fresh URL to it
    (provisioner.agentwheel), once per pass; None where the provider options name the
    package or the image has it. A wheel that cannot be stored or linked to is a
    ProviderError (transient: the next pass tries again; the event says what to do)."""
    from provisioner.agentwheel import WheelError
    from provisioner.agentwheel.carry import link_for, wanted

    if not wanted(ps.job.provider, ps.job.provider_options or {}):
        return None
    link = ps.wheel
    if link is not None and link.expires - ps.now > URL_FRESH_FOR:
        return link
    try:
        link = link_for(ps.checkpoint_uri(), ps.now)
    except WheelError as exc:
        raise ProviderError(
            ErrorKind.TRANSIENT,
            "AgentWheel",
            f"{exc} (or set package_spec or agent_preinstalled in the provider options)",
            provider=ps.job.provider,
        ) from None
    ps.wheel = link
    return link


def fence(ps: PassState, what: str) -> None:
    """Renew the job's lease right before a launch; raise LeaseLost if another replica
    claimed the job since this pass began (a pass that outran its lease)."""
    until = ps.env.clock() + ps.env.lease
    if not ps.store.renew_lease(ps.job.id, ps.env.owner, until):
        raise LeaseLost(f"another replica holds the job; not {what}")


def resend(ps: PassState, row: AttemptRow, report: PassReport) -> bool:
    """Send an attempt's launch again: its row was written but no instance carries its tag
    (the process that wrote it died before or during the call). Same token, so a cloud
    that did start it returns that instance instead of a second one."""
    placement = placement_of(row)
    try:
        guard_launch(ps.policy, placement, ps.spent())
    except Exception:
        ps.end_attempt(
            row, AttemptState.FAILED, "guard: launch refused on resend", Cause.GUARD_REFUSED
        )
        _stop_started(ps, row, "its launch is refused on resend", report)
        raise
    fence(ps, f"resending attempt {row.attempt}")
    ps.event(
        "relaunch",
        f"attempt {row.attempt}: no instance carries its tag; sending its launch again "
        f"(token {row.token})",
    )
    return _send(ps, row, placement, row.reason, report)


def _stop_started(
    ps: PassState, row: AttemptRow, why: str, report: PassReport, ids: list[str] | None = None
) -> None:
    """Stop what an attempt that will not run has started: ``ids``, and what an earlier
    process started for it (a gang's nodes before a crash), found by its tag."""
    ids = list(ids or [])
    try:
        tags = {TAG_MANAGED: "true", TAG_JOB: ps.job.id, TAG_ATTEMPT: str(row.attempt)}
        ids += [i.id for i in ps.provider.list(tags) if i.state.alive and i.id not in ids]
        report.provider_calls += 1
    except ProviderError as err:  # the next pass stops them (attempts.stop_leftovers)
        ps.log.info("job %s: attempt %d not listed: %s", ps.job.id, row.attempt, err)
    for iid in ids:
        ps.event("terminate", f"terminated {iid}: {why}")
    if ids:
        ps.provider.terminate(ids)
        ps.store.end_instances(ps.provider.name, ids, ps.now, why)
        report.provider_calls += 1


def _request(
    ps: PassState, row: AttemptRow, placement: Placement, node: int = 0, group: str | None = None
) -> LaunchRequest:
    from provisioner.agent.spec import CLOUDS, AgentSpec

    o = placement.offer
    nodes = placement.nodes
    spec = AgentSpec.from_policy(
        ps.policy,
        job_id=ps.job.id,
        attempt=row.attempt,
        cloud=o.provider if o.provider in CLOUDS else "aws",
        secrets_from=ps.job.provider,  # the sim's VMs read sim: references
        checkpoint_uri=ps.checkpoint_uri(),
        code=dict(ps.job.code or {}),
        region=o.region,
    )
    if nodes > 1:  # the agent finds its peers through the checkpoint store (agent/gang.py)
        spec = replace(spec, node=node, nodes=nodes)
    else:  # a notice this long is overlapped: on Azure the agent approves it after that
        spec = replace(spec, overlap_notice_s=ps.boot_s)
    prev = _replaces(ps, row)
    if prev is not None:  # overlap on notice: the agent waits for that one's checkpoint
        spec = replace(spec, handover_from=prev[0], handover_until=prev[1].isoformat())
    due, end = notice_at_(placement.reservation), usable_end_(placement.reservation)
    if due is not None and end is not None:  # a block: the agent tells itself of its end
        spec = replace(spec, block_notice_at=due.isoformat(), block_end=end.isoformat())
    return LaunchRequest(
        job_id=ps.job.id,
        attempt=row.attempt,
        offer=o,
        market=placement.market,
        bid_cap_per_hour=placement.bid_cap_per_hour if placement.market is Market.SPOT else None,
        # bid_cap.enforce: the cap goes as the cloud's maximum price, or the daemon holds it
        cap_on_wire=enforcement(ps.provider, ps.policy, o) is CapEnforce.CLOUD,
        image=ps.policy.job.image,
        disk_gb=ps.policy.job.disk_gb,
        # a block's end travels with the instance (provisioner.core.reserved)
        extra_tags={**ps.policy.tags, **block_tags(placement.reservation)},
        job_spec=spec.to_dict(),
        node=node,
        nodes=nodes,
        placement_group=group,
        fabric=_fabric(ps.policy) if nodes > 1 else "",
        agent_wheel=_wheel_link(ps),
        reservation=placement.reservation,
    )


def _launch_gang(
    ps: PassState, row: AttemptRow, placement: Placement, report: PassReport
) -> list[Instance]:
    """Every node of a gang attempt, in one placement group where the policy asks for one:
    all or nothing. A node refused (capacity, price, quota, anything) tears down the
    nodes already up and their group, and its error goes on as the attempt's. A crash
    part-way leaves the row ``launching``: the next pass sends the same launches again
    (one token per node), so the cloud returns the nodes it started and starts the rest."""
    o, nodes = placement.offer, placement.nodes
    group = row.placement_group
    if group is None and ps.policy.resources.interconnect.inter_node == "placement-group":
        if not isinstance(ps.provider, PlacementGroups):
            raise ProviderError(
                ErrorKind.INVALID,
                "NoPlacementGroups",
                f"{o.provider} cannot place a gang in a placement group; set "
                "resources.interconnect.inter_node to same-zone",
                provider=o.provider,
            )
        tags = {TAG_MANAGED: "true", TAG_JOB: ps.job.id, TAG_ATTEMPT: str(row.attempt)}
        name = placement_group_name(ps.job.id, row.attempt)
        group = ps.provider.ensure_placement_group(name, o.region, o.zone, tags)
        report.provider_calls += 1
        ps.store.update_attempt(ps.job.id, row.attempt, placement_group=group)
        row.placement_group = group
        ps.env.failpoints.hit("after-placement-group")
    launched: list[Instance] = []
    try:
        for node in range(nodes):
            launched.append(ps.provider.launch(_request(ps, row, placement, node, group)))
            report.provider_calls += 1
            if node == 0:
                ps.env.failpoints.hit("after-gang-node")  # a crash with part of it up
    except ProviderError as exc:
        _tear_down(ps, row, placement, launched, exc, report)
        raise
    return launched


def _tear_down(
    ps: PassState,
    row: AttemptRow,
    placement: Placement,
    launched: list[Instance],
    exc: ProviderError,
    report: PassReport,
) -> None:
    """A gang that could not be launched whole: the nodes that came up go (recorded
    first, as every terminate), and its group with them when the cloud lets it now
    (else the group sweep deletes it once they are gone)."""
    o, nodes = placement.offer, placement.nodes
    where = o.zone or o.region
    ps.nodes_up = len(launched)
    ps.event(
        "gang-incomplete",
        f"attempt {row.attempt}: only {len(launched)} of {nodes} nodes of {o.instance_type} "
        f"in {where} ({exc.kind.value}: {exc.code}); the gang is not started part-way",
        zone=o.zone,
        nodes_launched=len(launched),
        nodes=nodes,
        instance_type=o.instance_type,
    )
    _stop_started(ps, row, "gang incomplete", report, [i.id for i in launched])
    if row.placement_group and isinstance(ps.provider, PlacementGroups):
        try:
            ps.provider.delete_placement_group(row.placement_group)
            ps.store.update_attempt(ps.job.id, row.attempt, placement_group=None)
            row.placement_group = None
        except ProviderError as err:  # still in use while the nodes shut down
            ps.log.info("job %s: group %s kept for now: %s", ps.job.id, row.placement_group, err)


def _refused(ps: PassState, exc: ProviderError, placement: Placement) -> str:
    """What a refusal of the cloud's leaves behind, by its scope; says what comes next.

    A refusal that names the zone (the zone not open to the account, its subnet or vSwitch
    full) cools that zone down for the job: every offer there is left out of the next plan,
    and nothing is recorded for the region. A quota of the region or the account goes to
    the quota cache (``provisioner quotas``) as used up for the offer's kind."""
    o = placement.offer
    if exc.scope is ErrorScope.ZONE and o.zone:
        cooldown = ps.policy.restart.zone_cooldown
        ps.cool_down(o.provider, o.zone, ps.now + cooldown, f"launch refused: {exc.code}")
        return f"{o.provider}:{o.zone} cooled down for {cooldown}; trying another zone"
    if exc.kind is ErrorKind.QUOTA:
        ps.store.save_quotas([refused_at_launch(o, placement.market, exc.code, ps.now)])
    return "trying the next offer"


def _replaces(ps: PassState, row: AttemptRow) -> tuple[int, datetime] | None:
    """The earlier attempt this one overlaps (its number, and when it goes at the latest):
    one still running under an interruption notice (its capacity goes then), or a switch
    made before break (one instance or a gang) (the running one is stopped once this
    one's changeover is over, and its agent checkpoints on the way down; HANDOVER_WAIT
    after the launch the new agent goes on from the newest checkpoint whatever happened).
    Read from the store and what the pass observed, so a launch sent again after a crash
    says the same."""
    notes = {x.instance_id: x for x in ps.interruptions if x.kind == "notice"}
    for a in reversed(ps.attempts):
        if a.attempt < row.attempt and a.state == "running" and a.instance_id in notes:
            return a.attempt, notice_deadline(notes[a.instance_id])
    for a in reversed(ps.attempts):
        seen = ps.memo.instances.get(a.instance_id or "")  # as observed this pass
        alive = seen is not None and seen[0].alive
        if a.attempt < row.attempt and a.state == "running" and alive:
            return a.attempt, row.created_at + timedelta(hours=CHANGEOVER_H) + HANDOVER_WAIT
    return None


def _send(
    ps: PassState, row: AttemptRow, placement: Placement, reason: str, report: PassReport
) -> bool:
    """The cloud call of an attempt whose row is written; records what came back. A gang
    is launched whole or not at all (:func:`_launch_gang`)."""
    job, attempt, o = ps.job, row.attempt, placement.offer
    where = f"{o.provider}:{o.zone or o.region}"
    t0 = time.perf_counter()
    try:
        if placement.nodes > 1:
            members = _launch_gang(ps, row, placement, report)
            inst = members[0]
        else:
            members = [ps.provider.launch(_request(ps, row, placement))]
            inst = members[0]
        report.provider_calls += 1
    except ProviderError as exc:
        report.provider_calls += 1
        if exc.kind.try_next_offer or exc.kind is ErrorKind.QUOTA:  # raised ones: the pass
            report.provider_errors[(exc.provider or ps.job.provider, exc.kind.value)] += 1
        why = f"{exc.kind.value}: {exc.code}"
        if placement.nodes > 1:  # read back by inputs.gang_shortfalls for the next plan
            why += f" ({ps.nodes_up} of {placement.nodes} nodes)"
        moved_on = exc.kind.try_next_offer or exc.kind is ErrorKind.QUOTA
        cause = Cause.LAUNCH_REFUSED if moved_on else Cause.LAUNCH_FAILED
        ps.end_attempt(row, AttemptState.FAILED, why, cause)
        if not moved_on:
            raise
        # the failed attempt is the observation: decide() reads it as no capacity there
        # for a while (provisioner.core.views.CAPACITY_ERRORS_WITHIN)
        then = _refused(ps, exc, placement)
        ps.event(
            "launch-failed",
            f"attempt {attempt} on {where} {o.instance_type} {placement.market.value}: "
            f"{exc.kind.value} ({exc.code}); {then}",
            zone=o.zone,
            code=exc.code,
            scope=exc.scope.value,
        )
        return False
    report.launch_seconds.append(time.perf_counter() - t0)
    ps.env.failpoints.hit("after-launch-call")
    launched = inst.launched_at or ps.now
    head = inst if len(members) == 1 else ps.fold(members)[0]
    cap = f", bid cap ${placement.bid_cap_per_hour:.4f}/h" if placement.bid_cap_per_hour else ""
    gang = ""
    if len(members) > 1:
        group = f" in {row.placement_group}" if row.placement_group else ""
        cap += f" per node; {len(members)} nodes{group}: {', '.join(m.id for m in members)}"
        gang = f"gang of {len(members)} x "
    # told before it is recorded: a process killed between the two leaves the attempt
    # `launching`, and the next pass adopts the instance (event `adopted`); the launch
    # and why it went there are never lost (the row in memory first: the log names it)
    row.instance_id, row.state, row.launched_at = inst.id, "running", launched
    ps.event(
        "launch",
        f"attempt {attempt}: {where} {gang}{o.instance_type} ({o.gpu_count}x {o.gpu}) "
        f"{placement.market.value} ${placement.price_per_hour:.4f}/h{cap} -> {head.id}; "
        f"why: {reason}",
        zone=o.zone,
        instance=head.id,
        market=placement.market.value,
        price=placement.price_per_hour,
        billing=_billing(ps.provider),
        attempt=attempt,
        plan=None if ps.plan is None else plan_digest(ps.plan, placement),
    )
    ps.store.update_attempt(
        job.id, attempt, instance_id=inst.id, state="running", launched_at=launched
    )
    for m in members:
        ps.store.upsert_instance(instance_row(m, ps.now))
        ps.memo.instances[m.id] = (m.state, m.raw_state, m.state_reason, m.price_per_hour)
    if len(members) > 1:  # the pass goes on with the gang as one unit, as decide() sees it
        inst = head
    ps.sent = [*ps.sent, inst]
    ps.env.failpoints.hit("after-instance-record")
    report.launches += 1
    return True


def _fabric(policy: Policy) -> str:
    """The RDMA network a gang's launches ask for ("efa" makes AWS attach an EFA interface)."""
    fabric = policy.resources.interconnect.fabric
    return "" if fabric == "any" else fabric


def _billing(provider: object) -> dict[str, object]:
    """The account currency and USD rate the provider billed this launch in (for ``cost``),
    and the account's id where the provider knows it (the FOCUS export's BillingAccountId)."""
    try:
        account = provider.account_id()  # type: ignore[attr-defined]
    except Exception:  # an adapter without it: the export says which cloud, not which account
        account = None
    out: dict[str, object] = {"account": account} if account else {}
    try:
        info = provider.account_billing()  # type: ignore[attr-defined]
    except Exception:  # an adapter without it (or failing to say): USD, as the planner assumes
        return {"currency": "USD", "usd_per_unit": 1.0, **out}
    return {"currency": info.get("currency"), "usd_per_unit": info.get("usd_per_unit"), **out}
