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
Money and residency are re-checked before every launch
(:func:`provisioner.control.guard.guard_launch`), whatever decide() said: a launch above the
bid cap or the hourly budget, or outside the allowed jurisdictions, raises instead of
reaching the cloud.

Calls point one way: this module hands each job's pass
(:class:`provisioner.control.jobpass.runner.JobRunner`) a
:class:`~provisioner.control.jobpass.state.PassState` (with the
:class:`~provisioner.control.jobpass.state.PassEnv` it needs); nothing below calls back.
Stored prices (``catalog refresh``, the daemon's hourly refresh) are overlaid on the catalog
each pass where they changed (:meth:`Reconciler.refresh_prices`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from policies.loader import PolicyError, parse_policy
from policies.model import Policy
from providers.base import ErrorKind, Provider, ProviderError
from providers.capabilities import HeldCapacity, PriceKey
from provisioner.catalog_files import builtin_catalog
from provisioner.control import pricewatch
from provisioner.control.cancel import (
    ProviderFactory,
    cancel_job,
    default_provider_factory,
    utcnow,
)
from provisioner.control.effects import Effects, Pending
from provisioner.control.failpoints import Failpoints, installed
from provisioner.control.groups import SWEEP_EVERY_S, sweep_groups, sweep_job_groups
from provisioner.control.guard import GuardViolation, guard_launch
from provisioner.control.heap import GcPacer, paced
from provisioner.control.inputs import placement_of
from provisioner.control.invariants import check_pass
from provisioner.control.jobpass.runner import JobRunner
from provisioner.control.jobpass.state import JobMemo, PassEnv, PassState, job_log, phase_of
from provisioner.control.lanes import ProviderLanes
from provisioner.control.notify.route import Router
from provisioner.control.observe import InterruptionFeed, reap
from provisioner.control.passguard import (
    BLOCKED,
    block,
    describe,
    fail_unparseable,
    is_store_error,
    unblock,
)
from provisioner.control.priorfigures import figures
from provisioner.control.records import (
    PassBatch,
    PassReport,
    attempt_row,
    billed_cost,
    instance_row,
    resolve_checkpoint_uri,
)
from provisioner.control.reference import OnDemandReference
from provisioner.control.store import ACTIVE_STATES, JobRow, Store
from provisioner.core.catalog import Catalog
from provisioner.core.models import (
    TAG_MANAGED,
    Instance,
    InstanceState,
    LaunchRequest,
    Placement,
    Reservation,
)
from provisioner.core.planner import Plan
from provisioner.core.views import CHANGEOVER_H

log = logging.getLogger("provisioner.control.reconciler")

Clock = Callable[[], datetime]

#: every job a replica holds has its cheap invariants checked once this often, its turn spread
#: over the passes (those its pass changed: after every pass)
CHECK_ALL_EVERY = timedelta(seconds=60)


@dataclass(frozen=True)
class PassWork:
    """What every provider's part of one pass shares: the pass's time, the environment each
    job's pass is handed, the zone cooldowns of the jobs held (read once) and the jobs whose
    instances are never reaped (those held, and those a lane is still at)."""

    now: datetime
    env: PassEnv
    cooldowns: dict[str, dict[tuple[str, str], datetime]]
    owned: set[str]


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
        pass_interval_s: float = 5.0,
        failpoints: Failpoints | None = None,
        pace_gc: bool = False,
    ) -> None:
        self.store = store
        #: the catalog the offers come from; live prices stored by `catalog refresh` and the
        #: daemon's price refresh are laid over it (again each pass they change)
        self.base_catalog = catalog or builtin_catalog()
        self.catalog = self.base_catalog
        self._prices_mark: Any = None
        #: the newest stored spot quote per provider and (region, zone, type): the price of a
        #: running instance where its adapter reads none live (control.pricewatch)
        self._stored_spot: dict[str, dict[PriceKey, float]] = {}
        #: provider key -> (when its running prices were read, each job's prices then)
        self._spot_read: dict[str, tuple[datetime, dict[str, dict[PriceKey, float]]]] = {}
        self.provider_factory = provider_factory
        self.clock = clock
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self.lease = lease
        self.only_jobs = set(job_ids) if job_ids is not None else None
        self._providers: dict[str, Provider] = {}
        self._policies: dict[str, Policy] = {}
        self._catalogs: dict[str, Catalog] = {}
        self._feed = InterruptionFeed(store)
        self._swept: dict[str, datetime] = {}  # provider -> last placement-group sweep
        self._plans: dict[tuple[Any, ...], Plan] = {}
        #: provider key -> (read at, the capacity the account holds): read at most once a pass
        self._held: dict[str, tuple[datetime, tuple[Reservation, ...]]] = {}
        #: how soon the next pass comes (the driver's loop: the daemon's reconcile_interval,
        #: ``up``'s one second): the step decide() is told
        self.pass_interval_s = pass_interval_s
        #: when the last pass began (this process's clock): a pass that comes late (a loaded
        #: machine, a slow store) makes decide() plan for a longer step (see :meth:`step_s`)
        self._pass_at: datetime | None = None
        self._gap_s = 0.0
        self.failpoints = failpoints or installed()
        self.batch = PassBatch()
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
        self._keys: dict[str, tuple[Any, str, str]] = {}  # job id -> (options, provider, key)
        #: probe results and the clouds' availability priors: data for the planner and decide()
        self.measured, self.priors = figures(store)
        self.notify = Router()  # the policies' own targets; the daemon adds its defaults
        self.reference = OnDemandReference(self.catalog_for)  # the ledger's, kept at launch
        #: run the cheap invariants (provisioner.control.invariants) after every pass
        self.check_invariants = True
        self._checked_to: float | None = None  # the end of the last pass's turns (seconds)
        #: calls to the jobs' remote checkpoint stores, bounded so a slow one holds only its job
        self.effects = Effects()
        #: providers' parts of the pass run side by side when there are several, and one that
        #: hangs is left to finish while the next passes go on without it
        self._lanes = ProviderLanes(patience_s=max(2.0, pass_interval_s))
        #: the daemon's: the garbage collector paced by the passes (provisioner.control.heap)
        self.gc = GcPacer(pace_gc)
        #: one job's pass, its sub-reconcilers as fields (provisioner.control.jobpass.runner)
        self.runner = JobRunner()
        self.refresh_prices()

    def notice_reported(self) -> bool:
        """Whether an agent reported a new notice on a local store (jobpass.progress)."""
        from provisioner.control.jobpass.progress import local_notice

        memos = list(self._memos.values())  # the pass's thread may change the dict meanwhile
        return any(m.progress_mtime is not None and local_notice(m) for m in memos)

    # -- offers and candidates -------------------------------------------------------------

    def refresh_prices(self) -> bool:
        """Lay the store's prices over the catalog when they changed since last read (one
        small query when they did not); True when they changed. Plans made on the old
        prices are dropped."""
        try:
            mark = self.store.prices_mark()
        except Exception as exc:  # a store hiccup: plan on the prices we have
            log.warning("cannot read stored prices: %s", describe(exc))
            return False
        if mark == self._prices_mark:
            return False
        self._prices_mark = mark
        rows = self.store.prices()
        self._stored_spot = pricewatch.stored_quotes(rows)
        self.catalog = self.base_catalog.with_prices(rows)
        self._catalogs.clear()
        self._plans.clear()
        return True

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
        self,
        job: JobRow,
        policy: Policy,
        cooled: frozenset[tuple[str, str]],
        now: datetime,
        short: frozenset[tuple[tuple[str, str, str, str], int]] = frozenset(),
    ) -> Plan:
        """The plan behind a job's candidates (with its rejections, stored with a launch),
        shared by jobs with the same policy, provider and cooldowns within a minute (planning
        is pure, so sharing is exact)."""
        from provisioner.control.inputs import candidate_plan

        measured, risks = self.measured.get(now), self.priors.get(now)
        held = self.held_for(job, now) if policy.allows_reserved else ()
        key = (
            self._provider_key(job) + "\0" + job.policy_yaml,
            cooled,
            short,
            (int(now.timestamp() // 60), self.measured.version, self.priors.version),
            tuple((r.id, r.free) for r in held),
        )
        got = self._plans.get(key)
        if got is None:
            if len(self._plans) > 10_000:
                self._plans.clear()
            prov = self.provider_for(job)
            changeover = float(getattr(prov, "changeover_hours", CHANGEOVER_H))
            got = candidate_plan(
                policy, self.catalog_for(job), cooled, now, measured, short, risks, held,
                changeover,
            )  # fmt: skip
            self._plans[key] = got
        return got

    def held_for(self, job: JobRow, now: datetime) -> tuple[Reservation, ...]:
        """The capacity the account of the job's provider holds (HeldCapacity), read at most
        once a pass; for the sim, each under the cloud its zone mimics (as its offers). A
        provider without the capability, or one that fails to answer, holds none now."""
        key = self._provider_key(job)
        got = self._held.get(key)
        if got is not None and (now - got[0]).total_seconds() < max(1.0, self.step_s()):
            return got[1]
        prov: Any = self.provider_for(job)
        found: tuple[Reservation, ...] = ()
        if isinstance(prov, HeldCapacity):
            prov = cast(Any, prov)
            try:
                listed = prov.reservations()
            except ProviderError as exc:
                log.info("job %s: held capacity not listed: %s", job.id, describe(exc))
                listed = []
            if job.provider == "sim":
                from dataclasses import replace

                listed = [replace(r, provider=prov.zone_cloud(r.zone)) for r in listed]
            found = tuple(listed)
        self._held[key] = (now, found)
        return found

    def _provider_key(self, job: JobRow) -> str:
        """Which configured provider a job runs on (its name and options), worked out once
        per row read: every decision asks (its plan is shared by this key)."""
        known = self._keys.get(job.id)
        if known is not None and known[0] is job.provider_options and known[1] == job.provider:
            return known[2]
        key = job.provider + ":" + json.dumps(job.provider_options, sort_keys=True)
        if len(self._keys) > 1_000_000:
            self._keys.clear()
        self._keys[job.id] = (job.provider_options, job.provider, key)
        return key

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
        self.effects.close()
        self._lanes.close()
        self.gc.close()
        for p in self._providers.values():
            try:
                p.close()
            except Exception:  # closing is best effort
                log.debug("provider close failed", exc_info=True)

    # -- one pass ---------------------------------------------------------------------------

    def env(self) -> PassEnv:
        """What each job's pass is handed (settings re-read: a daemon reload changes them)."""
        return PassEnv(
            store=self.store,
            owner=self.owner,
            lease=self.lease,
            clock=self.clock,
            plan_for=self.plan_for,
            batch=self.batch,
            measured=self.measured,
            priors=self.priors,
            failpoints=self.failpoints,
            interval_s=self.step_s(),
            decide_every=self.decide_every,
            progress_every=self.progress_every,
            notify=self.notify,
            reference=self.reference,
            effects=self.effects,
        )

    def step_s(self) -> float:
        """How soon decide() is told the next pass comes: the configured interval, or the gap
        the last pass came after where it came later (at most ten intervals), so that what
        an instance bills until the next pass (the budget's stop) is not underestimated."""
        late = min(self._gap_s, 10.0 * self.pass_interval_s)
        return max(self.pass_interval_s, late)

    @paced
    def run_pass(self) -> PassReport:
        """One pass over the jobs this replica holds, in its steps: claim them
        (:meth:`_claim`), read the rows that moved (:meth:`_read_moved`), run each
        provider's part (:meth:`observe_and_step`: list, interruptions, each job's pass,
        reap; a lane per provider), then write the pass's batch, tell stalled stores and
        check the cheap invariants (:meth:`_end_pass`)."""
        t0 = time.perf_counter()
        now = self._mark_pass()
        report = PassReport(step_s=self.pass_interval_s)
        self.effects.begin_pass()
        self.refresh_prices()
        env = self.env()
        claimed, busy = self._claim(now, report)
        self._read_moved(claimed, busy)
        # (id, memo) pairs: ids are read from here, not the rows (an ORM read costs 20 plain)
        held = [
            (jid, m)
            for jid in claimed
            if jid not in busy and (m := self._memos.get(jid)) is not None and m.job is not None
        ]
        ids = [jid for jid, _ in held]
        owned = set(ids) | busy  # never reaped: the busy ones' instances are theirs
        report.jobs = len(held)
        # Observe: one list() per provider (configured once) per pass.
        by_provider: dict[str, list[tuple[str, JobMemo]]] = {}
        for jid, m in held:
            by_provider.setdefault(m.provider_key, []).append((jid, m))
        work = PassWork(now, env, self.store.cooldowns_for(ids, now), owned)
        self._lanes.run(by_provider, functools.partial(self.observe_and_step, work), report)
        self._end_pass(held, now, report)
        report.seconds = time.perf_counter() - t0
        return report

    def _mark_pass(self) -> datetime:
        """The pass's time; how late it came after the last one (see :meth:`step_s`)."""
        now = self.clock()
        if self._pass_at is not None:
            self._gap_s = max(0.0, (now - self._pass_at).total_seconds())
        self._pass_at = now
        return now

    def _claim(self, now: datetime, report: PassReport) -> tuple[dict[str, int], set[str]]:
        """Claim this replica's jobs (their versions, by id) and the jobs a provider's lane
        is still at from the last pass (busy); forget the memos of the jobs no longer held
        (released, taken over, finished)."""
        claimed = self.store.claim(
            self.owner, now, self.lease, limit=self.claim_limit(now), job_ids=self.only_jobs
        )
        busy = self._lanes.busy_jobs(report)  # a provider still at the last pass's work
        for gone in set(self._memos) - set(claimed) - busy:  # released, taken over, finished
            del self._memos[gone]
            self._keys.pop(gone, None)
        self.effects.forget(set(claimed))
        return claimed, busy

    def _read_moved(self, claimed: dict[str, int], busy: set[str]) -> None:
        """Rows are read again only where they changed (their version moved) since last pass:
        this process writes the jobs it holds, so its copies stay current in between."""
        stale = [
            j
            for j, v in claimed.items()
            if (j not in self._memos or self._memos[j].version != v) and j not in busy
        ]
        if not stale:
            return
        fresh = self.store.jobs_by_id(stale, states=ACTIVE_STATES)
        fresh_attempts = self.store.attempts_for([j.id for j in fresh])
        for j in fresh:
            memo = self._memos.setdefault(j.id, JobMemo())
            memo.job, memo.version, memo.attempts = j, j.version, fresh_attempts[j.id]
            memo.provider_key, memo.policy = self._provider_key(j), None
        for jid in set(stale) - {j.id for j in fresh}:
            self._memos.pop(jid, None)

    def _end_pass(self, held: list[tuple[str, JobMemo]], now: datetime, report: PassReport) -> None:
        """Write the pass's batch, tell the stores that stalled or answered again, and check
        the cheap invariants on the store as the pass left it."""
        self._flush()
        self._tell_stalls(now)
        report.waited = dict(self.effects.waited)
        if self.check_invariants:  # the cheap promises, on the store as this pass left it
            checked = [(j, m) for j, m in held if j not in self._lanes.jobs()]
            report.violations = check_pass(self.store, self._to_check(checked, now), now)

    def observe_and_step(
        self, work: PassWork, key: str, pairs: list[tuple[str, JobMemo]], report: PassReport
    ) -> None:
        """One provider's part of the pass: list, interruptions, each job's step, reap."""
        group: list[JobRow] = [m.job for _, m in pairs if m.job is not None]
        prov = self._set_up(group, work.now, report)
        if prov is None:
            return
        seen = self._list(key, prov, group, work.now, report)
        if seen is None:
            return
        self._unblock(group, work.now)
        by_job: dict[str, list[Instance]] = {}
        for inst in seen:
            if inst.job_id:
                by_job.setdefault(inst.job_id, []).append(inst)
        notices = self._interruptions(key, prov, by_job, work.now, report)
        prices = self._spot_prices(key, prov, pairs, by_job, report, work.now)
        for jid, memo in pairs:
            job = memo.job
            if job is None:
                continue
            ps = self._pass_state(work, prov, jid, memo, notices, prices, report)
            if ps is not None:
                self._step_job(ps, by_job.get(jid, []), report)
        try:
            self._reap(prov, seen, work.owned, work.now, report)
        except ProviderError as exc:
            report.errors += 1
            log.warning("reaping at %s failed: %s", key.split(":")[0], exc)

    def _set_up(self, group: list[JobRow], now: datetime, report: PassReport) -> Provider | None:
        """The jobs' provider, made once; None where it cannot be (its jobs blocked)."""
        try:
            return self.provider_for(group[0])
        except Exception as exc:  # unknown provider, SDK missing, bad options, credentials
            if is_store_error(exc):
                raise
            report.errors += 1
            self._block(group, f"cannot set up {group[0].provider}: {describe(exc)}", now)
            return None

    def _list(
        self, key: str, prov: Provider, group: list[JobRow], now: datetime, report: PassReport
    ) -> list[Instance] | None:
        """Our instances at the provider (one call per provider and pass); None where the
        call failed (its jobs blocked when the failure will not pass by itself)."""
        try:
            seen = prov.list({TAG_MANAGED: "true"})
            report.provider_calls += 1
            return seen
        except ProviderError as exc:
            report.errors += 1
            report.provider_errors[(exc.provider or key.split(":")[0], exc.kind.value)] += 1
            log.warning("listing instances at %s failed: %s", key.split(":")[0], exc)
            if exc.kind in (ErrorKind.AUTH, ErrorKind.INVALID):  # will not pass by itself
                why = f"{group[0].provider} refuses ({exc.kind.value} {exc.code})"
                self._block(group, f"{why}: {describe(exc)}", now, same=why)
            return None

    def _pass_state(
        self,
        work: PassWork,
        prov: Provider,
        jid: str,
        memo: JobMemo,
        notices: dict[str, list[Any]],
        prices: dict[str, dict[PriceKey, float]],
        report: PassReport,
    ) -> PassState | None:
        """The job's pass state; None where its policy does not parse (the job fails, alone:
        the others go on)."""
        job = memo.job
        assert job is not None
        try:  # parsed once per row read (the memo's copy goes when the row moves)
            policy = memo.policy = memo.policy or self.policy_of(job)
        except PolicyError as exc:  # this job's alone: the others go on
            report.errors += 1
            memo.forget()
            with contextlib.suppress(Exception):
                fail_unparseable(self.store, job, exc, work.now, self.notify)
            return None
        return PassState(
            work.env,
            job,
            policy,
            prov,
            memo.attempts,
            work.now,
            cooled=work.cooldowns.get(job.id, {}),
            memo=memo,
            interruptions=notices.get(jid, []),
            spot_prices=prices.get(jid) or {},
            report=report,
        )

    def _step_job(self, ps: PassState, seen: list[Instance], report: PassReport) -> None:
        """One job's pass; its trouble is its own (recorded as an event where the store
        answers), never the other jobs'."""
        job, memo, now = ps.job, ps.memo, ps.now
        try:
            self.runner.step(ps, seen, report)
        except Pending:  # a slow store: this job goes on next pass (stall told below)
            memo.forget()
        except GuardViolation as exc:
            report.errors += 1
            job_log(job).error("job %s: refused a launch that breaks a rule: %s", job.id, exc)
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
                job_log(job).warning("job %s: the store is unavailable (%s)", job.id, describe(exc))
                return
            job_log(job).exception("job %s: step failed; the next pass retries", job.id)
            with contextlib.suppress(Exception):
                self.store.add_event(job.id, "error", f"step failed: {exc!r}", at=now)

    def _spot_prices(
        self,
        key: str,
        prov: Provider,
        pairs: list[tuple[str, JobMemo]],
        by_job: dict[str, list[Instance]],
        report: PassReport,
        now: datetime,
    ) -> dict[str, dict[PriceKey, float]]:
        """The price now of each job's running spot instances that the daemon holds to their
        cap (``bid_cap.enforce: daemon``): one read per provider every
        :data:`~provisioner.control.pricewatch.READ_EVERY` at most (the last read's prices
        stand in between)."""
        last = self._spot_read.get(key)
        if last is not None and now - last[0] < pricewatch.READ_EVERY:
            return last[1]
        want: dict[str, list[PriceKey]] = {}
        for jid, memo in pairs:
            job, live = memo.job, by_job.get(jid)
            if job is None or not live or not memo.attempts:
                continue
            try:
                policy = memo.policy = memo.policy or self.policy_of(job)
            except PolicyError:  # the job's step says so
                continue
            offer = placement_of(memo.attempts[-1]).offer
            keys = pricewatch.watched(prov, policy, offer, live)
            if keys:
                want[jid] = keys
        found: dict[str, dict[PriceKey, float]] = {}
        if want:
            stored = self._stored_spot.get(key.split(":")[0], {})
            read = pricewatch.read(prov, [k for ks in want.values() for k in ks], stored)
            report.provider_calls += 1
            found = {jid: {k: read[k] for k in ks if k in read} for jid, ks in want.items()}
        self._spot_read[key] = (now, found)
        return found

    def _tell_stalls(self, now: datetime) -> None:
        """A ``store-slow`` event on each job whose store stopped answering (once per stall),
        and ``store-answered`` when it answers again."""
        for st in self.effects.take_stalls():
            kind = "store-answered" if st.ended else "store-slow"
            if st.ended:
                msg = f"{st.where} answered again after {st.waited_s:.0f} s"
            else:
                msg = (
                    f"{st.where} has not answered for {st.waited_s:.0f} s ({st.what}): the "
                    "job goes on with what was last read from it"
                )
            try:
                self.store.add_event(st.job_id, kind, msg, at=now, waited_s=round(st.waited_s, 1))
            except Exception as exc:  # the store itself may be the trouble
                log.warning("job %s: %s (not recorded: %s)", st.job_id, msg, describe(exc))

    def _to_check(self, held: list[tuple[str, JobMemo]], now: datetime) -> list[str]:
        """The jobs whose promises are checked after this pass: those whose pass did more
        than find them as they were (a job left steady wrote nothing: what held after its
        last change holds still), and every job held once per :data:`CHECK_ALL_EVERY`,
        spread over the passes: each job's turn comes at a moment of that period fixed by
        its id (as :meth:`~provisioner.control.jobpass.state.PassState.due` spreads periodic
        work), and a pass checks the jobs whose turn came since the pass before it (a new
        process: since one pass interval ago), about jobs x interval / period of them, never
        all at once."""
        every = CHECK_ALL_EVERY.total_seconds()
        end = now.timestamp()
        start = self._checked_to if self._checked_to is not None else end - self.pass_interval_s
        self._checked_to = end
        if end - start >= every:
            return [jid for jid, _ in held]
        out = []
        for jid, m in held:
            if m.steady is not None:
                phase = m.phase
                if phase is None:
                    phase = m.phase = phase_of(jid)
                shift = phase * every
                if (end + shift) // every == (start + shift) // every:
                    continue  # steady, and its turn is not in this pass
            out.append(jid)
        return out

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

    def _flush(self) -> None:
        rows, cols, events = self.batch.take()
        try:
            self.store.write_pass(rows, cols, events)
        except Exception:  # bookkeeping only: the next pass writes it again
            log.exception("writing instance states, spend and progress failed")
            for m in self._memos.values():
                m.instances.clear()
            for jid in {e["job_id"] for e in events}:  # read again: its events come again
                if (lost := self._memos.get(jid)) is not None:
                    lost.forget()
                    lost.first_progress = None

    def reap_orphans(self, provider: str, options: dict[str, Any]) -> int:
        """List one provider's managed instances and reap those whose job is finished or
        unknown (the daemon's periodic reaping, for providers that no active job uses)."""
        probe = JobRow(provider=provider, provider_options=dict(options))
        prov = self.provider_for(probe)
        report = PassReport()
        seen = prov.list({TAG_MANAGED: "true"})
        self._reap(prov, seen, set(), self.clock(), report)
        return report.reaped

    def sweep_job_groups(self, job_id: str, within_s: float = 120.0) -> list[str]:
        """Delete a finished job's placement groups once its nodes are gone (in-process
        supervision's last step); the ids still there after ``within_s`` are returned."""
        job = self.store.job(job_id)
        if job is None:
            return []
        prov = self.provider_for(job)
        return sweep_job_groups(
            self.store, prov, job_id, self.clock, self.failpoints, within_s=within_s
        )

    def _interruptions(
        self,
        key: str,
        prov: Provider,
        by_job: dict[str, list[Instance]],
        now: datetime,
        report: PassReport,
    ) -> dict[str, list[Any]]:
        return self._feed.collect(key, prov, by_job, now, report)

    def _reap(
        self,
        prov: Provider,
        seen: list[Instance],
        owned: set[str],
        now: datetime,
        report: PassReport,
    ) -> None:
        reap(self.store, prov, seen, owned, now, report, self.failpoints)
        key = type(prov).__name__ + ":" + str(id(prov))
        last = self._swept.get(key)
        if last is not None and (now - last).total_seconds() < SWEEP_EVERY_S:
            return
        self._swept[key] = now
        try:
            sweep_groups(self.store, prov, seen, now, report, self.failpoints)
        except ProviderError as exc:  # listing groups failed: the next sweep
            report.errors += 1
            log.warning("sweeping placement groups failed: %s", exc)


__all__ = ["ErrorKind", "GuardViolation", "InstanceState", "LaunchRequest", "PassReport",
           "Reconciler", "attempt_row", "billed_cost", "cancel_job", "default_provider_factory",
           "guard_launch", "instance_row", "resolve_checkpoint_uri"]  # fmt: skip
