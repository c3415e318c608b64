"""What one job's pass works with: the environment handed in, the memo kept between
passes, and the helpers every part of the pass uses (events, spend, cooldowns, attempts).

:class:`PassEnv` is everything a job's pass needs from outside, passed in by the reconciler
(never reached for): the store, the lease, the clock, the planner (with its cache), the
pass's batched writes, probe figures, failpoints and the decision interval.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from policies.model import Policy
from providers.base import Provider
from provisioner.control.alerts import note_budget
from provisioner.control.failpoints import Failpoints
from provisioner.control.records import (
    PassBatch,
    attempt_cost,
    instance_doc,
    job_checkpoint_uri,
)
from provisioner.control.store import AttemptRow, JobRow, Store
from provisioner.core import gang
from provisioner.core.models import Instance
from provisioner.core.states import AttemptState, Cause, check_attempt
from provisioner.core.timefmt import utc
from provisioner.core.views import BOOT_S, CHANGEOVER_H, cooldowns_in_force
from provisioner.errors import ControlError

if TYPE_CHECKING:
    from provisioner.core.planner import Plan

log = logging.getLogger("provisioner.control.reconciler")

Clock = Callable[[], datetime]
Location = tuple[str, str]
#: A running job's spend is written to its row when it moved by this much (batched per pass),
SPEND_STEP_USD = 0.001
#: ...and, where the reconciler reads progress on a beat (the daemon), weighed at most this
#: often: at 10,000 jobs a write per job per pass was most of the pass's store time, and
#: billing every attempt every pass a good part of its CPU. A job's first spend,
#: and every spend written with another change (launch, preemption, end), goes at once; the
#: bill itself is the attempts' (their cost is written when each ends), never this column.
SPEND_ROW_EVERY = timedelta(seconds=30)


@dataclass
class PassEnv:
    """What one job's pass needs from outside, handed in by the reconciler."""

    store: Store
    owner: str  # this replica (leases are renewed in its name)
    lease: timedelta
    clock: Clock  # the real time, read only to renew a lease right before a launch
    plan_for: Callable[..., Plan]  # (job, policy, cooled locations, now[, gang shortfalls])
    batch: PassBatch  # rows written at the end of the pass
    measured: Any  # provisioner.probe.watch.MeasuredFigures (probe figures for the planner)
    priors: Any = None  # provisioner.control.priorfigures.PriorFigures (availability priors)
    failpoints: Failpoints = field(default_factory=Failpoints)
    interval_s: float = 5.0  # how soon the next pass comes: decide()'s step
    decide_every: timedelta = timedelta(0)
    progress_every: timedelta = timedelta(0)
    notify: Any = None  # provisioner.control.notify.route.Router: who hears of which event
    reference: Any = None  # (job, policy, now) -> the cheapest on-demand placement allowed
    #: bounded calls to the jobs' remote stores (provisioner.control.effects.Effects); None:
    #: called in the pass's own thread (tests, one-shot tools)
    effects: Any = None


class JobLog(logging.LoggerAdapter):
    """Log records carrying the job, its attempt, instance, provider and zone (the JSON
    formatter's fields, :mod:`provisioner.logs`)."""

    def __init__(self, base: logging.Logger, runner: JobPassBase) -> None:
        super().__init__(base, {})
        self.runner = runner

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        r = self.runner
        cur = r.current
        extra: dict[str, Any] = {"job": r.job.id, "provider": r.job.provider}
        if cur is not None:
            extra.update(attempt=cur.attempt, instance=cur.instance_id, zone=cur.zone)
        kwargs["extra"] = {**extra, **(kwargs.get("extra") or {})}
        return msg, kwargs


def job_log(job: JobRow) -> logging.LoggerAdapter:
    """A logger whose records carry the job's id and provider (for the reconciler's notes)."""
    return logging.LoggerAdapter(log, {"job": job.id, "provider": job.provider})


def phase_of(job_id: str) -> float:
    """A job's place in periodic work, in [0, 1), fixed by its id: the jobs' turns spread
    evenly over the passes (see :meth:`JobPassBase.due`)."""
    return (zlib.crc32(job_id.encode()) % 10_000) / 10_000.0


class LeaseLost(ControlError, RuntimeError):
    """Another replica holds the job now: this one must not act on it."""


@dataclass
class JobMemo:
    """What a reconciler remembers of one job between passes (memory only: a restarted daemon
    starts afresh, which costs only the work the memo saves)."""

    fingerprint: tuple[Any, ...] | None = None  # the inputs of the last decision that waited
    decided_at: datetime | None = None
    progress: dict[str, Any] | None = None
    progress_at: datetime | None = None
    live: frozenset[str] = frozenset()  # live instances when progress was read
    instances: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # recorded states
    checkpoints: Any = None  # the job's CheckpointStore (fsspec filesystem resolved once)
    progress_file: str | None = None  # its progress.json, where the store is a local path
    progress_mtime: int | None = None  # that file's st_mtime_ns when last read (a change: read)
    job: JobRow | None = None  # the job's row as this process last read and wrote it
    version: int | None = None  # its version when read (another writer moves it)
    attempts: list[AttemptRow] = field(default_factory=list)
    provider_key: str = ""  # which configured provider the job runs on
    policy: Policy | None = None  # the job's policy, parsed from the row as read
    progress_written_at: datetime | None = None  # when the job row's progress was last queued
    spend_checked_at: datetime | None = None  # when the running spend was last weighed
    phase: float | None = None  # this job's place in periodic work, in [0, 1) (see due)
    checkpoint: str | None = None  # the newest checkpoint an event was written for
    warned: int | None = None  # the attempt whose checkpoint-warning has an event
    #: the progress document last parsed, and its typed record (control.progress.record_of)
    record: tuple[Any, Any] | None = None
    #: notices the agents reported, by instance, kept while their attempt runs
    notices: dict[str, Any] = field(default_factory=dict)
    recalled: frozenset[str] = frozenset()  # instances whose notice events were looked up
    watch: dict[str, Any] = field(default_factory=dict)  # what provisioner.probe.watch saw
    #: what a pass that only waited saw (job row, attempts, instances, progress fields): the
    #: next pass that sees the same skips what cannot change (see JobRunner._unchanged)
    steady: tuple[Any, ...] | None = None
    # what provisioner.control.alerts told already (the store has it too; this saves a query)
    first_progress: int | None = None  # the attempt whose first progress has an event
    restart_told: int = 0  # restarts with a `restarted` event
    budget_level: float | None = None  # the highest budget level told
    exhausted: str | None = None  # `no-capacity` or `price-cap` told since the last launch

    def forget(self) -> None:
        """Read the job, decide and read progress afresh next pass (after an error)."""
        self.fingerprint = self.decided_at = self.progress_at = None
        self.job = self.version = self.steady = self.policy = None


class JobPassBase:
    """The state of one job's pass and the helpers its parts share."""

    def __init__(
        self,
        env: PassEnv,
        job: JobRow,
        policy: Policy,
        provider: Provider,
        attempts: list[AttemptRow],
        now: datetime,
        *,
        cooldowns: dict[Location, datetime] | None = None,
        memo: JobMemo | None = None,
        interruptions: list[Any] | None = None,
        spot_prices: dict[tuple[str, str, str], float] | None = None,
    ) -> None:
        self.env = env
        self.store = env.store
        self.job = job
        self.policy = policy
        self.provider = provider
        self.attempts = attempts
        self.now = now
        self._now_ts = now.timestamp()  # due() asks for it a few times per job per pass
        self.interruptions: list[Any] = list(interruptions or [])
        #: the price now of this job's running spot instances held to the cap by the daemon
        #: (provisioner.control.pricewatch; empty: none is)
        self.spot_prices = dict(spot_prices or {})
        self._cooldowns = None if cooldowns is None else dict(cooldowns)
        self.memo = memo or JobMemo()
        self._sent: list[Instance] = []  # instances launched by this step
        self.members: dict[str, tuple[str, ...]] = {}  # a gang's unit id -> its nodes' ids
        self.plan: Plan | None = None  # the plan decide() chose from this step
        self.restart_check = False
        self._log: JobLog | None = None

    @property
    def log(self) -> JobLog:
        """The job's logger (made when first used: most passes log nothing)."""
        if self._log is None:
            self._log = JobLog(log, self)
        return self._log

    @property
    def changeover_h(self) -> float:
        """Launch to restored work on this job's provider, in hours (``JobView.changeover_h``):
        the provider's where it says (the sim's ``changeover_s`` option), else the project's
        assumed :data:`provisioner.core.views.CHANGEOVER_H`."""
        return float(getattr(self.provider, "changeover_hours", CHANGEOVER_H))

    @property
    def boot_s(self) -> float:
        """How long the provider's replacement takes from its launch to a running agent: a
        notice at least this long is overlapped (``JobView.boot_s``)."""
        return float(getattr(self.provider, "boot_seconds", BOOT_S))

    # -- helpers --------------------------------------------------------------------------------

    def fold(self, seen: list[Instance]) -> list[Instance]:
        """A gang job's instances as decide() sees them: one unit per attempt
        (:mod:`provisioner.core.gang`), its members kept for :meth:`expand`; the
        interruptions of any node become the unit's. Other jobs' instances pass unchanged."""
        nodes = self.policy.resources.nodes
        if nodes <= 1:
            return seen
        leaders = {a.attempt: a.instance_id for a in self.attempts if a.instance_id}
        cur = self.current
        young = gang.young_attempts(
            cur.attempt if cur else None, utc(cur.launched_at) if cur else None, self.now
        )
        g = gang.fold(seen, self.interruptions, nodes, self.now, leaders, young)
        self.members.update(g.members)
        self.interruptions = list(g.interruptions)
        return list(g.units)

    def expand(self, instance_ids: list[str]) -> list[str]:
        """The instances to stop for ``instance_ids``: every node of a gang's unit."""
        out: list[str] = []
        for iid in instance_ids:
            out.extend(self.members.get(iid, (iid,)))
        return out

    @property
    def current(self) -> AttemptRow | None:
        return self.attempts[-1] if self.attempts else None

    def queue_event(self, kind: str, message: str, at: datetime, **data: Any) -> None:
        """An event of the job that tells of what the pass's batch writes (no notification):
        written with the batch at the end of the pass, in its transaction, or before anything
        else of the job that is written sooner (:meth:`write_queued`)."""
        self.env.batch.event(self.job.id, kind, message, at, **data)

    def write_queued(self) -> None:
        """The job's queued events, written now: before another of its events (they keep
        their order) and before its row is written outside the batch (a progress row never
        commits before the event that tells of it)."""
        queued = self.env.batch.events_of(self.job.id)
        if queued:
            self.store.add_events(queued)

    def drop_queued(self) -> None:
        """Forget the job's queued events (its step did not finish: the progress row they tell
        of may not be written); its next pass finds what they told and queues them again."""
        if self.env.batch.events_of(self.job.id):
            self.memo.first_progress = None

    def event(self, kind: str, message: str, **data: Any) -> None:
        """An event of the job; the outbox rows of the notifications it sends (the router's
        answer) go in its transaction."""
        self.write_queued()
        self.log.info("job %s: %s", self.job.id, message, extra={"event": kind})
        router = self.env.notify
        notice = None
        if router is not None:
            notice = router.notice(
                self.job.id, self.job.name, self.policy.notify, kind, message, data
            )
        self.store.add_event(self.job.id, kind, message, at=self.now, notify=notice, **data)
        if kind in ("preempted", "launch"):
            self.restart_check = True  # a restart may be complete: see alerts.note_restart
            if kind == "launch":
                self.memo.exhausted = None

    def checkpoint_uri(self) -> str:
        # as submitted (absolute), else the policy's relative to where the job was submitted
        # (the daemon runs elsewhere)
        return job_checkpoint_uri(self.job, self.policy)

    def cooldowns(self) -> dict[tuple[str, str], datetime]:
        """The job's zone cooldowns in force now (read once per pass, kept up to date here)."""
        if self._cooldowns is None:
            self._cooldowns = self.store.cooldowns(self.job.id, self.now)
        return cooldowns_in_force(self._cooldowns, self.now)

    def cool_down(self, provider: str, location: str, until: datetime, reason: str) -> None:
        self.store.cool_down(self.job.id, provider, location, until, reason)
        if self._cooldowns is not None:
            self._cooldowns[(provider, location)] = until

    def record_instances(self, seen: list[Instance]) -> None:
        """Instance rows for the store, only where something changed since last recorded."""
        for inst in seen:
            key = (inst.state, inst.raw_state, inst.state_reason, inst.price_per_hour)
            if self.memo.instances.get(inst.id) != key:
                self.env.batch.instance(instance_doc(inst, self.now))
                self.memo.instances[inst.id] = key

    def note_spend(self) -> None:
        """Queue the job's running spend for the pass's batched write when it moved (on the
        daemon's beat: once per ``SPEND_ROW_EVERY`` at most, see there)."""
        memo = self.memo
        if (
            memo.spend_checked_at is not None
            and self.env.progress_every > timedelta(0)
            and not self.due(memo.spend_checked_at, SPEND_ROW_EVERY)
        ):
            return
        spent = self.spent()
        if spent > 0.0:  # weighed once per beat from the first spend on, which goes at once
            memo.spend_checked_at = self.now
            note_budget(self, spent)
        if abs(spent - self.job.spent_usd) >= SPEND_STEP_USD:
            self.env.batch.job(self.job.id, spent_usd=spent)
            self.job.spent_usd = spent

    def settle(self, updates: dict[str, Any]) -> None:
        """Write what changed of the job: its progress and spend with the pass's batch (they
        change all the time and decide nothing here), anything else at once."""
        if set(updates) <= {"progress"}:
            if "progress" in updates:
                self.job.progress = updates["progress"]
                self.memo.progress_written_at = self.now
                self.env.batch.job(self.job.id, progress=updates["progress"])
            self.note_spend()
        else:
            spent = self.spent()
            self.write_queued()
            self.store.update_job(self.job.id, at=self.now, spent_usd=spent, **updates)
            self.job.spent_usd = spent
            note_budget(self, spent)

    def due(self, last: datetime | None, every: timedelta) -> bool:
        """Whether periodic work done at ``last`` is due again: once per ``every``, at a
        moment fixed by the job's id, so that the jobs' turns spread evenly over the passes
        (each pass does about jobs x interval / every of them, not all at once)."""
        if last is None:
            return True
        e = every.total_seconds()
        if e <= 0:
            return True
        phase = self.memo.phase
        if phase is None:
            phase = self.memo.phase = phase_of(self.job.id)
        shift = phase * e
        return (self._now_ts + shift) // e != (last.timestamp() + shift) // e

    def spent(self) -> float:
        """The job's spend so far: ended attempts as billed, running ones billed to now."""
        total = 0.0
        for a in self.attempts:
            at = a.launched_at
            if at is not None and a.state == "running":
                total += attempt_cost(a, self.now, self.job.provider_options)
            else:
                total += a.cost_usd
        return total

    def end_attempt(self, a: AttemptRow, state: AttemptState, reason: str, cause: Cause) -> None:
        """End an attempt (its bill stops now), as the transition table allows."""
        check_attempt(AttemptState(a.state), state, cause)
        cost = attempt_cost(a, self.now, self.job.provider_options)
        self.store.update_attempt(
            self.job.id,
            a.attempt,
            state=state.value,
            ended_at=self.now,
            end_reason=reason,
            end_cause=cause.value,
            cost_usd=cost,
        )
        a.state, a.ended_at, a.end_reason, a.cost_usd = state.value, self.now, reason, cost
        a.end_cause = cause.value
