"""What one job's pass works with: the environment handed in, the memo kept between
passes, and the pass-state value every sub-reconciler reads and changes
(:class:`PassState`: the job's row, its attempts, the instances seen, its progress, the
pending updates, the PassReport, the pass's clock), with the helpers they share (events,
cooldowns, spend, attempts).

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
from provisioner.control.failpoints import Failpoints
from provisioner.control.records import (
    PassBatch,
    PassReport,
    attempt_cost,
    instance_doc,
    job_checkpoint_uri,
)
from provisioner.control.store import AttemptRow, JobRow, Store
from provisioner.core import gang
from provisioner.core.models import Instance, WheelLink
from provisioner.core.states import AttemptState, Cause, check_attempt
from provisioner.core.timefmt import utc
from provisioner.core.views import BOOT_S, CHANGEOVER_H, cooldowns_in_force
from provisioner.errors import ControlError

if TYPE_CHECKING:
    from provisioner.core.planner import Plan

log = logging.getLogger("provisioner.control.reconciler")

Clock = Callable[[], datetime]
Location = tuple[str, str]


@dataclass
class PassEnv:
    """What one job's pass needs from outside, handed in by the reconciler."""

    store: Store
    owner: str  # this replica (leases are renewed in its name)
    lease: timedelta
    clock: Clock  # the real time, read only to renew a lease right before a launch
    plan_for: Callable[..., Plan]  # (job, policy, cooled locations, now[, gang shortfalls])
    batch: PassBatch  # rows written at the end of the pass
    measured: (
        Any  # provisioner.control.jobpass.probes.MeasuredFigures (probe figures for the planner)
    )
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

    def __init__(self, base: logging.Logger, ps: PassState) -> None:
        super().__init__(base, {})
        self.ps = ps

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        r = self.ps
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
    evenly over the passes (see :meth:`PassState.due`)."""
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
    #: the progress document last parsed, and its typed record (jobpass.progress.record_of)
    record: tuple[Any, Any] | None = None
    #: notices the agents reported, by instance, kept while their attempt runs
    notices: dict[str, Any] = field(default_factory=dict)
    recalled: frozenset[str] = frozenset()  # instances whose notice events were looked up
    watch: dict[str, Any] = field(default_factory=dict)  # what jobpass.probes saw
    #: what a pass that only waited saw (job row, attempts, instances, progress fields): the
    #: next pass that sees the same skips what cannot change (see jobpass.steady.unchanged)
    steady: tuple[Any, ...] | None = None
    # what jobpass.alerts told already (the store has it too; this saves a query)
    first_progress: int | None = None  # the attempt whose first progress has an event
    restart_told: int = 0  # restarts with a `restarted` event
    budget_level: float | None = None  # the highest budget level told
    exhausted: str | None = None  # `no-capacity` or `price-cap` told since the last launch

    def forget(self) -> None:
        """Read the job, decide and read progress afresh next pass (after an error)."""
        self.fingerprint = self.decided_at = self.progress_at = None
        self.job = self.version = self.steady = self.policy = None


@dataclass(frozen=True)
class Result:
    """What one sub-reconciler's turn came to: ``settled`` when the job's pass is over (its
    updates written; the later sub-reconcilers have nothing to do this pass)."""

    settled: bool = False

    def merge(self, other: Result) -> Result:
        return Result(settled=self.settled or other.settled)


GO_ON = Result()
SETTLED = Result(settled=True)


@dataclass(eq=False)
class PassState:
    """One job's pass as a value: what was handed in (the environment, the job's row, its
    policy, provider and attempts, the pass's time, the cooldowns, interruptions and spot
    prices read for it), what the sub-reconcilers found and leave for the next ones (the
    instances seen, the progress, the pending updates of the job's row, the plan, what was
    launched), and the :class:`PassReport` the pass adds to. The helpers every part uses
    (events, cooldowns, spend, ending an attempt) are its methods."""

    env: PassEnv
    job: JobRow
    policy: Policy
    provider: Provider
    attempts: list[AttemptRow]
    now: datetime
    #: the job's zone cooldowns as the reconciler read them (None: read when first asked)
    cooled: dict[Location, datetime] | None = None
    memo: JobMemo = field(default_factory=JobMemo)
    interruptions: list[Any] = field(default_factory=list)
    #: the price now of this job's running spot instances held to the cap by the daemon
    #: (provisioner.control.pricewatch; empty: none is)
    spot_prices: dict[tuple[str, str, str], float] = field(default_factory=dict)
    report: PassReport = field(default_factory=PassReport)
    seen: list[Instance] = field(default_factory=list)  # the instances, as decide() sees them
    progress: dict[str, Any] | None = None  # the agent's record, as read this pass
    updates: dict[str, Any] = field(default_factory=dict)  # the job row's, not yet written
    steady: tuple[Any, ...] | None = None  # what the last pass that only waited saw
    stop_due: bool = False  # a policy stop or a price over the cap: decide now
    sent: list[Instance] = field(default_factory=list)  # instances launched by this step
    members: dict[str, tuple[str, ...]] = field(default_factory=dict)  # a gang's unit -> nodes
    plan: Plan | None = None  # the plan decide() chose from this step
    restart_check: bool = False  # a restart may be complete: see alerts.note_restart
    nodes_up: int = 0  # how many nodes of the last gang torn down had come up
    wheel: WheelLink | None = None  # the agent's wheel as this pass linked it
    _log: JobLog | None = field(default=None, init=False, repr=False)
    _now_ts: float = field(default=0.0, init=False, repr=False)

    def __post_init__(self) -> None:
        self._now_ts = self.now.timestamp()  # due() asks for it a few times per job per pass
        self.interruptions = list(self.interruptions or [])
        self.spot_prices = dict(self.spot_prices or {})
        self.cooled = None if self.cooled is None else dict(self.cooled)

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

    @property
    def current(self) -> AttemptRow | None:
        return self.attempts[-1] if self.attempts else None

    def live(self) -> list[Instance]:
        """The instances seen that are alive."""
        return [i for i in self.seen if i.state.alive]

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

    @property
    def store(self) -> Store:
        return self.env.store

    def checkpoint_uri(self) -> str:
        # as submitted (absolute), else the policy's relative to where the job was submitted
        # (the daemon runs elsewhere)
        return job_checkpoint_uri(self.job, self.policy)

    def cooldowns(self) -> dict[tuple[str, str], datetime]:
        """The job's zone cooldowns in force now (read once per pass, kept up to date here)."""
        if self.cooled is None:
            self.cooled = self.store.cooldowns(self.job.id, self.now)
        return cooldowns_in_force(self.cooled, self.now)

    def cool_down(self, provider: str, location: str, until: datetime, reason: str) -> None:
        self.store.cool_down(self.job.id, provider, location, until, reason)
        if self.cooled is not None:
            self.cooled[(provider, location)] = until

    def record_instances(self, seen: list[Instance]) -> None:
        """Instance rows for the store, only where something changed since last recorded."""
        for inst in seen:
            key = (inst.state, inst.raw_state, inst.state_reason, inst.price_per_hour)
            if self.memo.instances.get(inst.id) != key:
                self.env.batch.instance(instance_doc(inst, self.now))
                self.memo.instances[inst.id] = key

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
