"""The reconciler: level-triggered passes that make the clouds match the store.

Each pass, for the jobs this process owns:

1. observe — list our instances at each provider (one call per provider and pass, not per
   job), collect interruptions, read each running job's progress from its checkpoint store;
2. record — instance states and billing into the store, events for notices and preemptions;
3. decide — call the pure :func:`provisioner.decide.decide` with a view of the job and what
   was observed; the planner supplies ranked candidates (cooled-down zones excluded);
4. act — launch (intent first: the attempt row with its (job, attempt) token is written
   *before* the cloud call, so a crash in between is healed by adopting the tagged instance on
   the next pass, never by a second launch), terminate, cool zones down, finish or fail.

Instances carrying our tag whose job is unknown or finished are reaped (orphans).
Money and residency are re-checked here before every launch (:func:`guard_launch`), whatever
decide() said: a launch above the bid cap or the hourly budget, or outside the allowed
jurisdictions, raises instead of reaching the cloud.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from policies.loader import parse_policy
from policies.model import Policy
from providers.base import ErrorKind, Provider, ProviderError
from provisioner.catalog import Catalog, builtin_catalog
from provisioner.models import (
    TAG_JOB,
    TAG_MANAGED,
    Instance,
    InstanceState,
    LaunchRequest,
    Market,
    Placement,
    launch_token,
)
from provisioner.store import ACTIVE_STATES, FINAL_STATES, AttemptRow, InstanceRow, JobRow, Store

log = logging.getLogger("provisioner.reconciler")

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)


class GuardViolation(RuntimeError):
    """A launch that would break a money or residency rule: a bug upstream, never sent."""


def guard_launch(policy: Policy, placement: Placement, spent_usd: float) -> None:
    """Re-check the hard rules on the exact launch about to be sent."""
    from provisioner.regions import region

    o = placement.offer
    price = o.price_for(placement.market)
    if price is None or abs(price - placement.price_per_hour) > 1e-9:
        raise GuardViolation(
            f"placement price {placement.price_per_hour} is not the offer's {price}"
        )
    res = policy.residency
    if res.providers and o.provider not in res.providers:
        raise GuardViolation(f"provider {o.provider} not allowed")
    if res.allow or res.deny:
        reg = region(o.provider, o.region)
        if reg is None:
            raise GuardViolation(f"region {o.provider}:{o.region} has no known jurisdiction")
        if res.allow and not reg.in_any(set(res.allow)):
            raise GuardViolation(f"region {o.provider}:{o.region} outside {res.allow}")
        if res.deny and reg.in_any(set(res.deny)):
            raise GuardViolation(f"region {o.provider}:{o.region} is denied ({res.deny})")
    budget = policy.budget
    if budget.max_price_per_hour is not None and price > budget.max_price_per_hour + 1e-12:
        raise GuardViolation(
            f"${price}/h above budget.max_price_per_hour {budget.max_price_per_hour}"
        )
    if budget.max_total is not None and spent_usd >= budget.max_total:
        raise GuardViolation(f"budget.max_total {budget.max_total} already spent ({spent_usd:.2f})")
    if placement.market is Market.SPOT:
        if not policy.allows_spot:
            raise GuardViolation("policy does not allow spot")
        bid = policy.bid_cap
        caps = [
            c
            for c in (
                bid.max_spot_price_per_hour,
                None
                if bid.max_spot_price_per_gpu_hour is None
                else bid.max_spot_price_per_gpu_hour * o.gpu_count,
                None
                if bid.max_fraction_of_on_demand is None or o.price is None
                else bid.max_fraction_of_on_demand * o.price,
            )
            if c is not None
        ]
        if bid.max_fraction_of_on_demand is not None and o.price is None:
            raise GuardViolation(
                "bid cap as a fraction of on-demand, but the on-demand price is unknown"
            )
        if caps and price > min(caps) + 1e-12:
            raise GuardViolation(f"spot ${price}/h above the bid cap ${min(caps)}/h")
        if (
            placement.bid_cap_per_hour is not None
            and caps
            and placement.bid_cap_per_hour > min(caps) + 1e-12
        ):
            raise GuardViolation("the bid sent would exceed the policy's cap")
    elif not policy.allows_on_demand:
        raise GuardViolation("policy does not allow on-demand")


def resolve_checkpoint_uri(uri: str, base: str | None = None) -> str:
    """``file://./x`` and ``file://x`` become absolute (relative to ``base`` or the cwd)."""
    if uri.startswith("file://"):
        path = uri[len("file://") :]
        if not path.startswith("/"):
            return "file://" + os.path.abspath(os.path.join(base or os.getcwd(), path))
    return uri


# -- billing ------------------------------------------------------------------------------------

#: Per-second billing with a minimum, per cloud (on-demand and spot alike).
BILLING_MINIMUM_S = {"aws": 60, "gcp": 60, "azure": 60, "alibaba": 60, "tencent": 60, "sim": 60}


def billed_cost(
    provider: str, price_per_hour: float, start: datetime | None, end: datetime
) -> float:
    if start is None:
        return 0.0
    seconds = max((end - start).total_seconds(), BILLING_MINIMUM_S.get(provider, 60))
    return price_per_hour * seconds / 3600.0


# -- the pass -------------------------------------------------------------------------------------


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


ProviderFactory = Callable[[str, dict[str, Any]], Provider]


def default_provider_factory(name: str, options: dict[str, Any]) -> Provider:
    from providers.base import get

    return get(name, **options)


class Reconciler:
    def __init__(
        self,
        store: Store,
        *,
        catalog: Catalog | None = None,
        provider_factory: ProviderFactory = default_provider_factory,
        clock: Clock = utcnow,
        owner: str | None = None,
        lease: timedelta = timedelta(seconds=30),
        job_ids: Iterable[str] | None = None,
    ) -> None:
        self.store = store
        # Live prices stored by `catalog refresh` / the daemon's price refresh override the catalog's.
        self.catalog = catalog or builtin_catalog().with_prices(store.prices())
        self.provider_factory = provider_factory
        self.clock = clock
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self.lease = lease
        self.only_jobs = set(job_ids) if job_ids is not None else None
        self._providers: dict[str, Provider] = {}
        self._policies: dict[str, Policy] = {}
        self._last_interruptions: dict[str, datetime] = {}
        self._catalogs: dict[str, Catalog] = {}
        self._seen_interruptions: set[tuple[str, str]] = set()
        self._plans: dict[tuple[str, frozenset[tuple[str, str]], int], list[Placement]] = {}
        self.pass_interval_s = 5.0

    # -- offers and candidates -------------------------------------------------------------

    def catalog_for(self, job: JobRow) -> Catalog:
        """The offers a job can be placed on: its provider's rows of the catalog (live prices
        overlaid); for the sim, the sim's offers under the cloud each zone mimics, so that
        residency and latency are judged by the mimicked region."""
        key = self._provider_key(job)
        cat = self._catalogs.get(key)
        if cat is None:
            if job.provider == "sim":
                from dataclasses import replace

                prov: Any = self.provider_for(job)
                offers = [replace(o, provider=prov.zone_cloud(o.zone)) for o in prov.offers()]
                cat = Catalog.from_offers(offers, "sim")
            else:
                cat = Catalog.from_offers(self.catalog.filter(provider=job.provider), job.provider)
            self._catalogs[key] = cat
        return cat

    def candidates(
        self, job: JobRow, policy: Policy, cooled: frozenset[tuple[str, str]], now: datetime
    ) -> list[Placement]:
        """Ranked placements for a job, shared by jobs with the same policy, provider and
        cooldowns within a minute (planning is pure, so sharing is exact)."""
        from provisioner.jobdecide import plan_candidates

        key = (self._provider_key(job) + "\0" + job.policy_yaml, cooled, int(now.timestamp() // 60))
        got = self._plans.get(key)
        if got is None:
            if len(self._plans) > 10_000:
                self._plans.clear()
            got = plan_candidates(policy, self.catalog_for(job), cooled, now)
            self._plans[key] = got
        return got

    @staticmethod
    def _provider_key(job: JobRow) -> str:
        return job.provider + ":" + json.dumps(job.provider_options, sort_keys=True)

    # -- helpers ----------------------------------------------------------------------------

    def provider_for(self, job: JobRow) -> Provider:
        key = self._provider_key(job)
        prov = self._providers.get(key)
        if prov is None:
            prov = self.provider_factory(job.provider, dict(job.provider_options))
            self._providers[key] = prov
        return prov

    def policy_of(self, job: JobRow) -> Policy:
        pol = self._policies.get(job.id)
        if pol is None:
            pol = parse_policy(job.policy_yaml, job.policy_path or job.id)
            self._policies[job.id] = pol
        return pol

    def close(self) -> None:
        for p in self._providers.values():
            try:
                p.close()
            except Exception:  # closing is best effort
                log.debug("provider close failed", exc_info=True)

    # -- one pass ---------------------------------------------------------------------------

    def run_pass(self) -> PassReport:
        from provisioner.jobrun import JobRunner

        t0 = time.perf_counter()
        now = self.clock()
        report = PassReport()
        claimed = set(self.store.claim_jobs(self.owner, now, self.lease))
        if self.only_jobs is not None:
            claimed &= self.only_jobs
        jobs = [j for j in self.store.jobs(list(ACTIVE_STATES)) if j.id in claimed]
        report.jobs = len(jobs)
        # Observe: one list() per provider (configured once) per pass.
        by_provider: dict[str, list[JobRow]] = {}
        for j in jobs:
            by_provider.setdefault(
                j.provider + ":" + json.dumps(j.provider_options, sort_keys=True), []
            ).append(j)
        attempts = self.store.attempts_for([j.id for j in jobs])
        for key, group in by_provider.items():
            prov = self.provider_for(group[0])
            try:
                seen = prov.list({TAG_MANAGED: "true"})
                report.provider_calls += 1
            except ProviderError as exc:
                report.errors += 1
                log.warning("listing instances at %s failed: %s", key.split(":")[0], exc)
                continue
            by_job: dict[str, list[Instance]] = {}
            for inst in seen:
                if inst.job_id:
                    by_job.setdefault(inst.job_id, []).append(inst)
            notices = self._interruptions(key, prov, by_job, now, report)
            for job in group:
                runner = JobRunner(
                    self, job, self.policy_of(job), prov, attempts.get(job.id, []), now
                )
                runner.interruptions = notices.get(job.id, [])
                try:
                    runner.step(by_job.get(job.id, []), report)
                except GuardViolation as exc:
                    report.errors += 1
                    log.error("job %s: refused a launch that breaks a rule: %s", job.id, exc)
                    self.store.add_event(job.id, "guard", f"launch refused: {exc}", at=now)
                except ProviderError as exc:
                    report.errors += 1
                    self.store.add_event(
                        job.id,
                        "provider-error",
                        str(exc),
                        at=now,
                        kind=exc.kind.value,
                        code=exc.code,
                    )
            self._reap(prov, seen, {j.id for j in jobs}, now, report)
        report.seconds = time.perf_counter() - t0
        return report

    def _interruptions(
        self,
        key: str,
        prov: Provider,
        by_job: dict[str, list[Instance]],
        now: datetime,
        report: PassReport,
    ) -> dict[str, list[Any]]:
        """Interruptions the provider reports for instances of our jobs (one call per provider
        and pass); each is recorded once as an event."""
        since = self._last_interruptions.get(key, now - timedelta(minutes=15))
        try:
            items = prov.interruptions(since)
            report.provider_calls += 1
        except ProviderError as exc:
            log.warning("interruptions at %s failed: %s", key.split(":")[0], exc)
            return {}
        self._last_interruptions[key] = now - timedelta(seconds=5)  # overlap: clocks, late events
        owner = {i.id: job_id for job_id, insts in by_job.items() for i in insts}
        out: dict[str, list[Any]] = {}
        for it in items:
            job_id = owner.get(it.instance_id)
            if job_id is None:
                continue
            out.setdefault(job_id, []).append(it)
            mark = (it.instance_id, it.kind)
            if mark in self._seen_interruptions:
                continue
            self._seen_interruptions.add(mark)
            if it.kind == "notice":
                until = f"; capacity goes at {it.deadline:%H:%M:%S}" if it.deadline else ""
                self.store.add_event(
                    job_id,
                    "notice",
                    f"interruption notice for {it.instance_id} in {it.zone} ({it.raw}){until}; "
                    "the agent checkpoints",
                    at=it.at,
                    instance=it.instance_id,
                )
        return out

    def _reap(
        self,
        prov: Provider,
        seen: list[Instance],
        owned: set[str],
        now: datetime,
        report: PassReport,
    ) -> None:
        """Terminate instances with our tag whose job is finished or unknown to the store."""
        candidates = [i for i in seen if i.state.alive and i.job_id and i.job_id not in owned]
        if not candidates:
            return
        orphans = []
        for inst in candidates:
            assert inst.job_id is not None
            job = self.store.job(inst.job_id) if inst.job_id else None
            if job is None or job.id != inst.job_id or job.state in FINAL_STATES:
                orphans.append(inst)
        if orphans:
            prov.terminate([i.id for i in orphans])
            report.provider_calls += 1
            report.reaped += len(orphans)
            for i in orphans:
                self.store.add_event(
                    i.job_id, "reaped", f"terminated orphan instance {i.id} ({i.zone})", at=now
                )


def cancel_job(
    store: Store, job_id: str, *, provider_factory: ProviderFactory = default_provider_factory
) -> list[str]:
    """Stop a job now: terminate its instances (checkpoints stay), mark it cancelled."""
    job = store.job(job_id)
    if job is None:
        return []
    store.request_cancel(job.id)
    prov = provider_factory(job.provider, dict(job.provider_options))
    try:
        live = [i for i in prov.list({TAG_JOB: job.id}) if i.state.alive]
        if live:
            prov.terminate([i.id for i in live])
        now = utcnow()
        for a in store.attempts(job.id):
            if a.state in ("launching", "running"):
                store.update_attempt(
                    job.id,
                    a.attempt,
                    state="ended",
                    ended_at=now,
                    end_reason="cancelled",
                    cost_usd=billed_cost(job.provider, a.price_per_hour, a.launched_at, now),
                )
        spent = sum(a.cost_usd for a in store.attempts(job.id))
        if job.state not in FINAL_STATES:
            store.update_job(
                job.id, state="cancelled", reason="cancelled by the user", spent_usd=spent
            )
        store.add_event(
            job.id, "cancelled", f"cancelled; terminated {len(live)} instance(s); checkpoints kept"
        )
        return [i.id for i in live]
    finally:
        prov.close()


def attempt_row(
    job: JobRow, attempt: int, placement: Placement, now: datetime, reason: str
) -> AttemptRow:
    o = placement.offer
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
    )


def instance_row(inst: Instance, now: datetime) -> InstanceRow:
    return InstanceRow(
        provider=inst.provider,
        instance_id=inst.id,
        job_id=inst.job_id,
        attempt=inst.attempt,
        region=inst.region,
        zone=inst.zone,
        instance_type=inst.instance_type,
        market=inst.market.value,
        state=inst.state.value,
        raw_state=inst.raw_state,
        state_reason=inst.state_reason,
        price_per_hour=inst.price_per_hour,
        launched_at=inst.launched_at,
        ended_at=None if inst.state.alive else now,
        last_seen_at=now,
    )


__all__ = [
    "ErrorKind",
    "GuardViolation",
    "InstanceState",
    "LaunchRequest",
    "PassReport",
    "Reconciler",
    "billed_cost",
    "cancel_job",
    "guard_launch",
    "resolve_checkpoint_uri",
]
