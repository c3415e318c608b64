"""The reconciler: level-triggered passes that make the clouds match the store.

Each pass, for the jobs this process owns:

1. observe — list our instances at each provider (one call per provider and pass, not per
   job), collect interruptions, read each running job's progress from its checkpoint store;
2. record — instance states and billing into the store, events for notices and preemptions;
3. decide — call the pure :func:`provisioner.core.decide.decide` with a view of the job and what
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

import contextlib
import json
import logging
import os
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from policies.loader import PolicyError, parse_policy
from policies.model import Policy
from providers.base import ErrorKind, Provider, ProviderError
from provisioner.catalog_files import builtin_catalog
from provisioner.control.jobpass import JobMemo
from provisioner.control.passguard import (
    BLOCKED,
    block,
    describe,
    fail_unparseable,
    is_store_error,
    unblock,
)
from provisioner.control.store import (
    ACTIVE_STATES,
    FINAL_STATES,
    AttemptRow,
    InstanceRow,
    JobRow,
    Store,
)
from provisioner.core.catalog import Catalog
from provisioner.core.models import (
    TAG_JOB,
    TAG_MANAGED,
    Instance,
    InstanceState,
    LaunchRequest,
    Market,
    Placement,
    launch_token,
)
from provisioner.core.planner import Plan

log = logging.getLogger("provisioner.control.reconciler")

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)


class GuardViolation(RuntimeError):
    """A launch that would break a money or residency rule: a bug upstream, never sent."""


def guard_launch(policy: Policy, placement: Placement, spent_usd: float) -> None:
    """Re-check the hard rules on the exact launch about to be sent."""
    from provisioner.core.decide import region_allowed

    o = placement.offer
    price = o.price_for(placement.market)
    if price is None or abs(price - placement.price_per_hour) > 1e-9:
        raise GuardViolation(
            f"placement price {placement.price_per_hour} is not the offer's {price}"
        )
    if not region_allowed(policy, o.provider, o.region):  # the planner's residency rules
        raise GuardViolation(f"{o.provider}:{o.region} is outside the policy's residency")
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
    launch_seconds: list[float] = field(default_factory=list)  # each launch call's latency
    restarts: int = 0  # attempts found preempted this pass
    decisions: int = 0  # decide() calls
    progress_reads: int = 0  # progress.json reads
    provider_errors: Counter[tuple[str, str]] = field(default_factory=Counter)  # (provider, kind)


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
        share: bool = False,
        decide_every: timedelta = timedelta(0),
        progress_every: timedelta = timedelta(0),
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
        self._plans: dict[tuple[str, frozenset[tuple[str, str]], int], Plan] = {}
        self.pass_interval_s = 5.0
        #: Daemon replicas split the active jobs evenly between the live ones (a replica's
        #: share is re-read every pass; see :meth:`claim_limit`).
        self.share = share
        #: A job whose observations have not changed since its last decision is decided again
        #: only after this long (0: every pass); what changes with time alone (deadline slack,
        #: spend against the budget) is re-judged at least this often.
        self.decide_every = decide_every
        #: A running job's progress is re-read from its checkpoint store at most this often
        #: (0: every pass); a job without a live instance is read every pass.
        self.progress_every = progress_every
        self._memos: dict[str, JobMemo] = {}
        self._job_cols: dict[str, dict[str, Any]] = {}
        self._instance_rows: list[InstanceRow] = []
        from provisioner.probe.watch import MeasuredFigures

        #: probe results per (provider, instance type, GPU), handed to the planner as data
        self.measured = MeasuredFigures(store)

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
        """Ranked placements for a job (see :meth:`plan_for`)."""
        return self.plan_for(job, policy, cooled, now).placements

    def plan_for(
        self, job: JobRow, policy: Policy, cooled: frozenset[tuple[str, str]], now: datetime
    ) -> Plan:
        """The plan behind a job's candidates (with its rejections, stored with a launch),
        shared by jobs with the same policy, provider and cooldowns within a minute (planning
        is pure, so sharing is exact)."""
        from provisioner.control.inputs import candidate_plan

        measured = self.measured.get(now)
        key = (
            self._provider_key(job) + "\0" + job.policy_yaml,
            cooled,
            int(now.timestamp() // 60) * 1_000_000 + self.measured.version,
        )
        got = self._plans.get(key)
        if got is None:
            if len(self._plans) > 10_000:
                self._plans.clear()
            got = candidate_plan(policy, self.catalog_for(job), cooled, now, measured)
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
        """The job's policy, parsed once per distinct policy text (jobs share policies)."""
        pol = self._policies.get(job.policy_yaml)
        if pol is None:
            if len(self._policies) > 10_000:
                self._policies.clear()
            pol = parse_policy(job.policy_yaml, job.policy_path or job.id)
            self._policies[job.policy_yaml] = pol
        return pol

    def claim_limit(self, now: datetime) -> int:
        """How many jobs this replica claims: all of them alone, else an even share of the
        active jobs between the replicas seen alive within one lease."""
        if not self.share:
            return 100_000_000
        from provisioner.control.store import live_replicas

        alive = set(live_replicas(self.store, now, within=self.lease)) | {self.owner}
        active = self.store.count_active()
        return max(1, -(-active // len(alive)))

    def close(self) -> None:
        for p in self._providers.values():
            try:
                p.close()
            except Exception:  # closing is best effort
                log.debug("provider close failed", exc_info=True)

    # -- one pass ---------------------------------------------------------------------------

    def run_pass(self) -> PassReport:
        from provisioner.control.jobpass import JobRunner

        t0 = time.perf_counter()
        now = self.clock()
        report = PassReport()
        claimed = self.store.claim(
            self.owner, now, self.lease, limit=self.claim_limit(now), job_ids=self.only_jobs
        )
        for gone in set(self._memos) - set(claimed):  # released, taken over or finished
            del self._memos[gone]
        # Rows are read again only where they changed (their version moved) since last pass:
        # this process writes the jobs it holds, so its copies stay current in between.
        stale = [
            j for j, v in claimed.items() if j not in self._memos or self._memos[j].version != v
        ]
        if stale:
            fresh = self.store.jobs_by_id(stale, states=ACTIVE_STATES)
            fresh_attempts = self.store.attempts_for([j.id for j in fresh])
            for j in fresh:
                memo = self._memos.setdefault(j.id, JobMemo())
                memo.job, memo.version, memo.attempts = j, j.version, fresh_attempts[j.id]
                memo.provider_key = self._provider_key(j)
            for jid in set(stale) - {j.id for j in fresh}:
                self._memos.pop(jid, None)
        jobs: list[JobRow] = [
            m.job
            for jid in claimed
            if (m := self._memos.get(jid)) is not None and m.job is not None
        ]
        ids = [j.id for j in jobs]
        report.jobs = len(jobs)
        # Observe: one list() per provider (configured once) per pass.
        by_provider: dict[str, list[JobRow]] = {}
        for j in jobs:
            by_provider.setdefault(self._memos[j.id].provider_key, []).append(j)
        cooldowns = self.store.cooldowns_for(ids, now)
        for key, group in by_provider.items():
            try:
                prov = self.provider_for(group[0])
            except Exception as exc:  # unknown provider, SDK missing, bad options, credentials
                if is_store_error(exc):
                    raise
                report.errors += 1
                self._block(group, f"cannot set up {group[0].provider}: {describe(exc)}", now)
                continue
            try:
                seen = prov.list({TAG_MANAGED: "true"})
                report.provider_calls += 1
            except ProviderError as exc:
                report.errors += 1
                report.provider_errors[(exc.provider or key.split(":")[0], exc.kind.value)] += 1
                log.warning("listing instances at %s failed: %s", key.split(":")[0], exc)
                if exc.kind in (ErrorKind.AUTH, ErrorKind.INVALID):  # will not pass by itself
                    why = f"{group[0].provider} refuses ({exc.kind.value} {exc.code})"
                    self._block(group, f"{why}: {describe(exc)}", now, same=why)
                continue
            self._unblock(group, now)
            by_job: dict[str, list[Instance]] = {}
            for inst in seen:
                if inst.job_id:
                    by_job.setdefault(inst.job_id, []).append(inst)
            notices = self._interruptions(key, prov, by_job, now, report)
            for job in group:
                memo = self._memos[job.id]
                try:
                    policy = self.policy_of(job)
                except PolicyError as exc:  # this job's alone: the others go on
                    report.errors += 1
                    memo.forget()
                    with contextlib.suppress(Exception):
                        fail_unparseable(self.store, job, exc, now)
                    continue
                runner = JobRunner(
                    self,
                    job,
                    policy,
                    prov,
                    memo.attempts,
                    now,
                    cooldowns=cooldowns.get(job.id, {}),
                    memo=memo,
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
                    report.provider_errors[(exc.provider or job.provider, exc.kind.value)] += 1
                    memo.forget()
                    self.store.add_event(
                        job.id,
                        "provider-error",
                        str(exc),
                        at=now,
                        error_kind=exc.kind.value,
                        code=exc.code,
                    )
                except Exception as exc:  # one job's trouble must not stop the others
                    report.errors += 1
                    memo.forget()
                    if is_store_error(exc):  # locked or full: writing an event would fail too
                        log.warning("job %s: the store is unavailable (%s)", job.id, describe(exc))
                        continue
                    log.exception("job %s: step failed; the next pass retries", job.id)
                    with contextlib.suppress(Exception):
                        self.store.add_event(job.id, "error", f"step failed: {exc!r}", at=now)
            try:
                self._reap(prov, seen, set(ids), now, report)
            except ProviderError as exc:
                report.errors += 1
                log.warning("reaping at %s failed: %s", key.split(":")[0], exc)
        self._flush()
        report.seconds = time.perf_counter() - t0
        return report

    def _block(
        self, jobs: list[JobRow], reason: str, now: datetime, same: str | None = None
    ) -> None:
        """Jobs whose provider cannot be used now: the reason on each (once), pass goes on."""
        for job in jobs:
            self._memos[job.id].forget()
            try:
                block(self.store, job, reason, now, same=same)
            except Exception as exc:  # the store itself may be the trouble
                log.warning("job %s: %s (not recorded: %s)", job.id, reason, describe(exc))

    def _unblock(self, jobs: list[JobRow], now: datetime) -> None:
        for job in jobs:
            if (job.reason or "").startswith(BLOCKED):
                with contextlib.suppress(Exception):
                    unblock(self.store, job, now)

    def record_instance(self, row: InstanceRow) -> None:
        """Write an instance row at the end of the pass (with the others, in one statement)."""
        self._instance_rows.append(row)

    def record_job(self, job_id: str, **columns: Any) -> None:
        """Job columns that change all the time (spend, progress), written at the end of the
        pass with the others' in a few statements."""
        self._job_cols.setdefault(job_id, {}).update(columns)

    def _flush(self) -> None:
        rows, self._instance_rows = self._instance_rows, []
        cols, self._job_cols = self._job_cols, {}
        by_keys: dict[frozenset[str], list[dict[str, Any]]] = {}
        for job_id, values in cols.items():
            by_keys.setdefault(frozenset(values), []).append({"id": job_id, **values})
        try:
            self.store.upsert_instances(rows)
            for batch in by_keys.values():
                self.store.update_jobs(batch)
        except Exception:  # bookkeeping only: the next pass writes it again
            log.exception("writing instance states and spend failed")
            for m in self._memos.values():
                m.instances.clear()

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
        if len(self._seen_interruptions) > 100_000:  # a daemon runs for months
            self._seen_interruptions = {m for m in self._seen_interruptions if m[0] in owner}
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
            # once per notice, also across restarts (the memory above is this process's)
            if it.kind == "notice" and not self.store.has_event(job_id, "notice", it.instance_id):
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

    def reap_orphans(self, provider: str, options: dict[str, Any]) -> int:
        """List one provider's managed instances and reap those whose job is finished or
        unknown (the daemon's periodic reaping, for providers that no active job uses)."""
        probe = JobRow(provider=provider, provider_options=dict(options))
        prov = self.provider_for(probe)
        report = PassReport()
        seen = prov.list({TAG_MANAGED: "true"})
        self._reap(prov, seen, set(), self.clock(), report)
        return report.reaped

    def _reap(
        self,
        prov: Provider,
        seen: list[Instance],
        owned: set[str],
        now: datetime,
        report: PassReport,
    ) -> None:
        """Terminate instances with our tag whose job is finished or unknown to the store
        (an active job's instances are its runner's business, whichever replica holds it)."""
        candidates = [i for i in seen if i.state.alive and i.job_id and i.job_id not in owned]
        if not candidates:
            return
        states = self.store.job_states([i.job_id for i in candidates if i.job_id])
        orphans = [
            i for i in candidates if i.job_id not in states or states[i.job_id] in FINAL_STATES
        ]
        if orphans:
            from provisioner.control.jobpass import crash_point

            prov.terminate([i.id for i in orphans])
            crash_point("after-reap")
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
