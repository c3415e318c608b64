"""One job's part of a reconcile pass: observe, record, decide, act.

Kept apart from :mod:`provisioner.control.reconciler` (which batches provider calls across jobs) so
that the per-job rules read top to bottom.

Crash safety: every effect can be repeated. A launch writes its attempt row (with the
(job, attempt) token) before the cloud call; a pass that finds the row still ``launching``
adopts the instance carrying the attempt's tag, or, when there is none, sends the same launch
again (same token: the provider returns the instance it may have started). Restarts are
counted from the attempts, so a crash between two writes never loses one.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from policies.model import Policy
from providers.base import ErrorKind, Provider, ProviderError
from provisioner.control.store import AttemptRow, JobRow
from provisioner.core.models import Instance, InstanceState, LaunchRequest, Market, Placement

if TYPE_CHECKING:
    from provisioner.control.reconciler import PassReport, Reconciler
    from provisioner.core.planner import Plan

log = logging.getLogger("provisioner.control.reconciler")

#: A job's own launch retries within one pass (capacity errors move to the next offer).
MAX_LAUNCH_TRIES_PER_PASS = 5
#: How long a zone that just answered "no capacity" is skipped by this job.
CAPACITY_COOLDOWN = timedelta(minutes=5)
#: Launch failures that send the job to its next offer at once (end_reason prefixes).
MOVE_ON = ("capacity", "price-too-low", "quota")
#: Hold-off after a launch failure that the next offer would not cure (doubling, capped).
BACKOFF_FIRST, BACKOFF_MAX = timedelta(seconds=5), timedelta(minutes=5)
#: A running job's row gets its progress (step counts) at least this often.
PROGRESS_ROW_EVERY = timedelta(seconds=60)
#: An agent whose progress is older than this is taken for gone (it writes every 5 s).
AGENT_SILENT = timedelta(minutes=10)
#: A running job's spend is written to its row when it moved by this much (batched per pass).
SPEND_STEP_USD = 0.001


#: Test-only crash points (``PROVISIONER_CRASH_AT``), in the order a launch meets them.
CRASH_POINTS = (
    "after-attempt-row",  # intent written, launch not sent
    "after-launch-call",  # the cloud started the instance, nothing recorded
    "after-instance-record",  # attempt running, launch event and job state not written
    "after-adopt",  # an unrecorded launch adopted
    "after-terminate",  # decide()'s terminate sent, what follows not done
    "after-preempted",  # attempt ended as preempted, job not updated
    "after-finish-terminate",  # a finished job's instance terminated, job not marked
    "after-reap",  # orphans terminated, events not written
    "after-probe-row",  # a probe under the policy's floor recorded, its instance not terminated
)
_crash_hits = 0


def crash_point(name: str) -> None:
    """Exit at once, as SIGKILL would (status 137, nothing flushed or cleaned up), when
    ``PROVISIONER_CRASH_AT`` names this point (comma-separated, or ``any``) and
    ``PROVISIONER_CRASH_SKIP`` (default 0) earlier matching hits have passed. For the
    crash-safety tests only: unset, it costs one environment lookup."""
    global _crash_hits
    wanted = os.environ.get("PROVISIONER_CRASH_AT")
    if not wanted:
        return
    names = wanted.split(",")
    if name not in names and "any" not in names:
        return
    _crash_hits += 1
    if _crash_hits > int(os.environ.get("PROVISIONER_CRASH_SKIP") or 0):
        sys.stderr.write(f"provisioner: crash point {name}: exiting 137\n")
        sys.stderr.flush()
        os._exit(137)


class LeaseLost(RuntimeError):
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
    job: JobRow | None = None  # the job's row as this process last read and wrote it
    version: int | None = None  # its version when read (another writer moves it)
    attempts: list[AttemptRow] = field(default_factory=list)
    provider_key: str = ""  # which configured provider the job runs on
    progress_written_at: datetime | None = None  # when the job row's progress was last queued
    phase: float | None = None  # this job's place in periodic work, in [0, 1) (see due)
    checkpoint: str | None = None  # the newest checkpoint an event was written for
    watch: dict[str, Any] = field(default_factory=dict)  # what provisioner.probe.watch saw

    def forget(self) -> None:
        """Read the job, decide and read progress afresh next pass (after an error)."""
        self.fingerprint = self.decided_at = self.progress_at = None
        self.job = self.version = None


@dataclass
class Observed:
    """What this pass saw of one job."""

    instances: list[Instance]
    progress: dict[str, Any] | None


class JobRunner:
    def __init__(
        self,
        rec: Reconciler,
        job: JobRow,
        policy: Policy,
        provider: Provider,
        attempts: list[AttemptRow],
        now: datetime,
        *,
        cooldowns: dict[tuple[str, str], datetime] | None = None,
        memo: JobMemo | None = None,
    ) -> None:
        self.rec = rec
        self.store = rec.store
        self.job = job
        self.policy = policy
        self.provider = provider
        self.attempts = attempts
        self.now = now
        self.interruptions: list[Any] = []
        self._cooldowns = None if cooldowns is None else dict(cooldowns)
        self.memo = memo or JobMemo()
        self._sent: list[Instance] = []  # instances launched by this step
        self.plan: Plan | None = None  # the plan decide() chose from this step

    # -- helpers --------------------------------------------------------------------------------

    @property
    def current(self) -> AttemptRow | None:
        return self.attempts[-1] if self.attempts else None

    def event(self, kind: str, message: str, **data: Any) -> None:
        log.info("job %s: %s", self.job.id, message)
        self.store.add_event(self.job.id, kind, message, at=self.now, **data)

    def checkpoint_uri(self) -> str:
        from provisioner.control.reconciler import resolve_checkpoint_uri

        # relative to where the job was submitted (the daemon runs elsewhere)
        return resolve_checkpoint_uri(self.policy.checkpoint.uri, self.job.workdir)

    def read_progress(self) -> dict[str, Any] | None:
        from provisioner.agent.store import CheckpointStore

        try:
            store = self.memo.checkpoints
            if store is None:
                store = self.memo.checkpoints = CheckpointStore(self.checkpoint_uri(), self.job.id)
            if store.local:  # the same file, without fsspec's per-call overhead (10,000 jobs)
                try:
                    doc = json.loads(Path(store.path("progress.json")).read_bytes())
                except (OSError, ValueError):
                    return None
                return doc if isinstance(doc, dict) else None
            got: dict[str, Any] | None = store.read_json("progress.json")
            return got
        except Exception as exc:  # an unreachable checkpoint store must not stop the pass
            log.warning("job %s: cannot read progress: %s", self.job.id, exc)
            return None

    def progress_for(self, live: list[Instance]) -> dict[str, Any] | None:
        """The job's progress: read again when the memo's copy is older than the reconciler's
        ``progress_every`` (see :meth:`due`), when the live instances changed, or when
        none is live."""
        memo, every = self.memo, self.rec.progress_every
        ids = frozenset(i.id for i in live)
        fresh = (
            memo.progress_at is not None
            and ids
            and ids == memo.live
            and not self.due(memo.progress_at, every)
        )
        if not fresh:
            memo.progress, memo.progress_at, memo.live = self.read_progress(), self.now, ids
        return memo.progress

    def cooldowns(self) -> dict[tuple[str, str], datetime]:
        """The job's zone cooldowns in force now (read once per pass, kept up to date here)."""
        if self._cooldowns is None:
            self._cooldowns = self.store.cooldowns(self.job.id, self.now)
        return {k: v for k, v in self._cooldowns.items() if v >= self.now}

    def cool_down(self, provider: str, location: str, until: datetime, reason: str) -> None:
        self.store.cool_down(self.job.id, provider, location, until, reason)
        if self._cooldowns is not None:
            self._cooldowns[(provider, location)] = until

    def record_instances(self, seen: list[Instance]) -> None:
        """Instance rows for the store, only where something changed since last recorded."""
        from provisioner.control.reconciler import instance_row

        for inst in seen:
            key = (inst.state, inst.raw_state, inst.state_reason, inst.price_per_hour)
            if self.memo.instances.get(inst.id) != key:
                self.rec.record_instance(instance_row(inst, self.now))
                self.memo.instances[inst.id] = key

    def note_spend(self) -> None:
        """Queue the job's running spend for the pass's batched write when it moved."""
        spent = self.spent()
        if abs(spent - self.job.spent_usd) >= SPEND_STEP_USD:
            self.rec.record_job(self.job.id, spent_usd=spent)
            self.job.spent_usd = spent

    def progress_worth_writing(self, progress: dict[str, Any]) -> bool:
        """Whether the job row's copy of the progress is to be replaced: at once when its state,
        attempt or checkpoint moved (or the reconciler reads progress every pass, as ``up``
        does); a step count alone, once per ``PROGRESS_ROW_EVERY`` (10,000 agents report
        every 5 s: their steps are for display, the store need not follow each one)."""
        old = self.job.progress or {}
        if self.rec.progress_every <= timedelta(0) or any(
            progress.get(k) != old.get(k) for k in ("state", "attempt", "last_checkpoint")
        ):
            return True
        return self.due(self.memo.progress_written_at, PROGRESS_ROW_EVERY)

    def settle(self, updates: dict[str, Any]) -> None:
        """Write what changed of the job: its progress and spend with the pass's batch (they
        change all the time and decide nothing here), anything else at once."""
        if set(updates) <= {"progress"}:
            if "progress" in updates:
                self.job.progress = updates["progress"]
                self.memo.progress_written_at = self.now
                self.rec.record_job(self.job.id, progress=updates["progress"])
            self.note_spend()
        else:
            spent = self.spent()
            self.store.update_job(self.job.id, spent_usd=spent, **updates)
            self.job.spent_usd = spent

    def fingerprint(self, seen: list[Instance], progress: dict[str, Any] | None) -> tuple[Any, ...]:
        """Everything decide() reads that changes other than with the clock."""
        cur = self.current
        p = progress or {}
        return (
            self.job.state,
            self.job.restarts,
            None
            if cur is None
            else (cur.attempt, cur.state, cur.instance_id, cur.launched_at, cur.ended_at),
            tuple(
                sorted(
                    (i.id, i.state.value, i.market.value)
                    for i in seen
                    if i.state.alive or (cur is not None and i.id == cur.instance_id)
                )
            ),
            tuple(sorted((x.instance_id, x.kind) for x in self.interruptions)),
            (p.get("state"), p.get("attempt"), p.get("last_checkpoint"), p.get("total_steps")),
            tuple(sorted(self.cooldowns())),
        )

    def note_checkpoint(self, progress: dict[str, Any]) -> None:
        """A ``checkpoint`` event, at the agent's upload time, for each new checkpoint seen
        (the timeline of ``provisioner logs`` and the dashboard)."""
        ck = progress.get("last_checkpoint")
        if not ck or ck == self.memo.checkpoint:
            return
        self.memo.checkpoint = ck
        if ck == (self.job.progress or {}).get("last_checkpoint"):
            return  # recorded before (this process or the one before it)
        try:
            at = utc(datetime.fromisoformat(str(progress.get("last_checkpoint_at"))))
        except ValueError:
            at = None
        step = progress.get("last_checkpoint_step")
        self.store.add_event(
            self.job.id,
            "checkpoint",
            f"checkpoint {ck} in the checkpoint store"
            + (f" (step {step})" if step is not None else "")
            + f", attempt {progress.get('attempt', '?')}",
            at=at or self.now,
            checkpoint=ck,
            attempt=progress.get("attempt"),
        )

    def due(self, last: datetime | None, every: timedelta) -> bool:
        """Whether periodic work done at ``last`` is due again: once per ``every``, at a
        moment fixed by the job's id, so that the jobs' turns spread evenly over the passes
        (each pass does about jobs x interval / every of them, not all at once)."""
        if last is None or every <= timedelta(0):
            return True
        if self.memo.phase is None:
            self.memo.phase = (zlib.crc32(self.job.id.encode()) % 10_000) / 10_000.0
        e = every.total_seconds()
        shift = self.memo.phase * e
        return (self.now.timestamp() + shift) // e != (last.timestamp() + shift) // e

    def read_result(self, progress: dict[str, Any]) -> dict[str, Any]:
        """The job's output/result.json from the checkpoint store, else its last progress."""
        from provisioner.agent.store import CheckpointStore

        try:
            doc = CheckpointStore(self.checkpoint_uri(), self.job.id).read_json(
                "output/result.json"
            )
        except Exception:
            doc = None
        return doc or {
            k: progress.get(k) for k in ("step", "total_steps", "last_checkpoint", "job")
        }

    def spent(self) -> float:
        from provisioner.control.reconciler import billed_cost

        total = 0.0
        for a in self.attempts:
            if a.state in ("running",) and a.launched_at is not None:
                total += billed_cost(a.provider, a.price_per_hour, a.launched_at, self.now)
            else:
                total += a.cost_usd
        return total

    def end_attempt(self, a: AttemptRow, state: str, reason: str) -> None:
        from provisioner.control.reconciler import billed_cost

        cost = (
            billed_cost(a.provider, a.price_per_hour, a.launched_at, self.now)
            if a.launched_at
            else 0.0
        )
        self.store.update_attempt(
            self.job.id, a.attempt, state=state, ended_at=self.now, end_reason=reason, cost_usd=cost
        )
        a.state, a.ended_at, a.end_reason, a.cost_usd = state, self.now, reason, cost

    # -- the step ------------------------------------------------------------------------------

    def step(self, seen: list[Instance], report: PassReport) -> None:
        try:
            self._step(seen, report)
        except LeaseLost as exc:
            self.memo.forget()
            log.warning("job %s: %s; leaving it to its new owner", self.job.id, exc)

    def _step(self, seen: list[Instance], report: PassReport) -> None:
        job = self.job
        self.record_instances(seen)
        live = [i for i in seen if i.state.alive]
        reads = self.memo.progress_at
        progress = self.progress_for(live)
        report.progress_reads += self.memo.progress_at is not reads
        updates: dict[str, Any] = {}
        if progress:
            self.note_checkpoint(progress)
        if progress and progress != job.progress and self.progress_worth_writing(progress):
            updates["progress"] = progress

        # Cancellation requested (provisioner down, Job.cancel()).
        if job.cancel_requested:
            if live:
                self.provider.terminate([i.id for i in live])
                report.provider_calls += 1
                report.terminations += len(live)
            for a in self.attempts:
                if a.state in ("launching", "running"):
                    self.end_attempt(a, "ended", "cancelled")
            self.store.update_job(
                job.id,
                state="cancelled",
                reason="cancelled by the user",
                spent_usd=self.spent(),
                **updates,
            )
            self.event(
                "cancelled", f"cancelled; terminated {len(live)} instance(s); checkpoints kept"
            )
            report.finished += 1
            return

        # The attempt's probe (recorded; under the policy's floor: replaced) and idle GPUs.
        from provisioner.probe.watch import watch

        if watch(self, progress, live, report):
            self.settle(updates)
            return

        cur = self.current
        # Heal an attempt whose launch was sent but never recorded: adopt the tagged instance;
        # where there is none, the launch may never have left: send it again (same token).
        if cur is not None and cur.state == "launching":
            mine = [i for i in live if i.attempt == cur.attempt]
            if mine:
                found = mine[0]
                self.store.update_attempt(
                    job.id,
                    cur.attempt,
                    instance_id=found.id,
                    state="running",
                    launched_at=found.launched_at or self.now,
                )
                cur.instance_id, cur.state, cur.launched_at = (
                    found.id,
                    "running",
                    found.launched_at or self.now,
                )
                self.event(
                    "adopted",
                    f"adopted instance {found.id} of attempt {cur.attempt} "
                    "(launch was not recorded)",
                    instance=found.id,
                )
                crash_point("after-adopt")
            else:
                self.resend(cur, report)
                known = {i.id for i in seen}
                seen = [*seen, *[i for i in self._sent if i.id not in known]]
                live = [i for i in seen if i.state.alive]

        # The running attempt: still there? preempted? gone?
        if cur is not None and cur.state == "running":
            inst = next((i for i in seen if i.id == cur.instance_id), None)
            if inst is None and cur.instance_id:
                try:
                    inst = self.provider.get(cur.instance_id)
                    report.provider_calls += 1
                except ProviderError as exc:
                    if exc.kind is not ErrorKind.NOT_FOUND:
                        raise
                    inst = None
            done = bool(
                progress
                and progress.get("state") == "done"
                and progress.get("attempt", cur.attempt) <= cur.attempt
            )
            # A spot instance in no list that no terminate of ours (in the store) explains was
            # reclaimed and released: level-triggered, so a restarted daemon reads it the same.
            released = (
                inst is None
                and cur.market == "spot"
                and bool(cur.instance_id)
                and not self.store.has_event(job.id, "terminate", cur.instance_id or "")
            )
            if inst is None or not inst.state.alive:
                if done:
                    self.end_attempt(cur, "ended", "job finished")
                elif released or (inst is not None and inst.state is InstanceState.PREEMPTED):
                    why = inst.state_reason if inst else "spot instance released"
                    shown = why or (inst.raw_state if inst else "")
                    self.end_attempt(cur, "preempted", why or "preempted")
                    report.restarts += 1
                    crash_point("after-preempted")
                    until = self.now + self.policy.restart.zone_cooldown
                    self.cool_down(cur.provider, cur.zone, until, "preempted")
                    self.event(
                        "preempted",
                        f"attempt {cur.attempt} on {cur.provider}:{cur.zone} preempted"
                        f" ({shown}); zone cooled down until {until:%H:%M:%S}",
                        zone=cur.zone,
                        instance=cur.instance_id,
                    )
                else:
                    reason = "instance gone" if inst is None else f"instance {inst.state.value}"
                    self.end_attempt(cur, "ended", reason)
                    self.event("lost", f"attempt {cur.attempt}: {reason}", instance=cur.instance_id)

        # Restarts are the preempted attempts: counted, never incremented, so a crash between
        # ending an attempt and writing the job loses none.
        restarts = sum(1 for a in self.attempts if a.state == "preempted")
        if restarts != job.restarts:
            job.restarts = restarts
            updates["restarts"] = restarts

        # Finished?
        if progress and progress.get("state") == "done":
            if live:
                self.provider.terminate([i.id for i in live])
                report.provider_calls += 1
                report.terminations += len(live)
                crash_point("after-finish-terminate")
            for a in self.attempts:
                if a.state in ("launching", "running"):
                    self.end_attempt(a, "ended", "job finished")
            self.store.update_job(
                job.id,
                state="succeeded",
                reason="finished",
                result=self.read_result(progress),
                spent_usd=self.spent(),
                **updates,
            )
            self.event(
                "finished",
                f"job finished after {job.restarts} restart(s); spent ${self.spent():.4f}",
            )
            report.finished += 1
            return
        if progress and progress.get("state") == "failed" and not live:
            self.store.update_job(
                job.id,
                state="failed",
                reason=f"job exited {progress.get('exit_code')}",
                spent_usd=self.spent(),
                **updates,
            )
            self.event("failed", f"job command failed (exit {progress.get('exit_code')})")
            report.finished += 1
            return

        # Decide and act; a launch refused for capacity or price moves on to the next offer.
        # Unchanged inputs since a decision that only waited: decide again only when due (once
        # per ``decide_every``; what changes with time alone: slack, spend against the budget)
        from provisioner.control.inputs import decide_for
        from provisioner.core import decide as d

        memo = self.memo
        wait = None if live else self.launch_backoff()
        if wait is not None:
            self.settle(updates)
            log.info("job %s: launch failures; next try in %.0f s", job.id, wait.total_seconds())
            return
        # (only while an instance runs the job: a job waiting for capacity tries every pass)
        steady = bool(live) and self.rec.decide_every > timedelta(0)
        fp = self.fingerprint(seen, progress) if steady else None
        if fp is not None and memo.decided_at is None and self.running_as_recorded(live):
            # First sight of a job that runs as its store says (a restart, a takeover): it was
            # decided before; its turn comes within ``decide_every``, like every other's.
            memo.fingerprint, memo.decided_at = fp, self.now
        if (
            fp is not None
            and fp == memo.fingerprint
            and not self.due(memo.decided_at, self.rec.decide_every)
        ):
            self.settle(updates)
            return
        memo.fingerprint = None
        actions: list[Any] = []
        for _ in range(MAX_LAUNCH_TRIES_PER_PASS):
            report.decisions += 1
            actions = self.hold_finish(decide_for(self, Observed(seen, progress)), live, progress)
            if not self.act(actions, report, updates):
                break
        memo.decided_at = self.now
        if fp is not None and all(isinstance(a, d.Wait) for a in actions):
            memo.fingerprint = self.fingerprint(seen, progress)

    # -- acting -------------------------------------------------------------------------------

    def running_as_recorded(self, live: list[Instance]) -> bool:
        """One live instance, the current attempt's, running, and no interruption for it."""
        cur = self.current
        return (
            cur is not None
            and cur.state == "running"
            and len(live) == 1
            and live[0].id == cur.instance_id
            and not self.interruptions
        )

    def launch_backoff(self) -> timedelta | None:
        """How long to hold off the next launch after launches that failed for reasons another
        offer does not cure (auth, invalid request, transient errors past their retries):
        5 s after the first, doubling to 5 min. Capacity, price and quota failures move on
        to the next offer at once and do not count. None: launch when decide() says so."""
        n, last = 0, None
        for a in reversed(self.attempts):
            if a.state != "failed":
                break
            if a.end_reason.startswith(MOVE_ON):
                continue
            n += 1
            last = last or a
        if last is None:
            return None
        wait = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (n - 1))
        left = (utc(last.ended_at) or self.now) + wait - self.now
        return left if left > timedelta(0) else None

    def hold_finish(
        self, actions: list[Any], live: list[Instance], progress: dict[str, Any] | None
    ) -> list[Any]:
        """decide() finishes a job when its checkpoints cover all the work; here the job is
        done when its command has exited (the agent says ``done``), after its output went up.
        While an instance still runs it and its agent reports (recently), wait for that."""
        from provisioner.core import decide as d

        if not live or not any(isinstance(a, d.Finish) for a in actions):
            return actions
        p = progress or {}
        if p.get("state") in ("done", "failed"):
            return actions
        try:
            updated = datetime.fromisoformat(str(p.get("updated_at")))
        except ValueError:
            return actions
        if self.now - (utc(updated) or self.now) > AGENT_SILENT:
            return actions  # the agent is gone: believe the checkpoints
        return [d.Wait(None, "the last checkpoint is in: waiting for the job to exit")]

    def act(self, actions: list[Any], report: PassReport, updates: dict[str, Any]) -> bool:
        """Carry out decide()'s actions; True when a launch was refused and decide should
        be asked again (its cooldown is recorded)."""
        from provisioner.core import decide as d

        job = self.job
        state = job.state
        retry = False
        for action in actions:
            if isinstance(action, d.Terminate):
                # recorded first: an instance gone later is ours, not a preemption, even when
                # this process dies right after the call
                self.event("terminate", f"terminated {action.instance_id}: {action.reason}")
                self.provider.terminate([action.instance_id])
                report.provider_calls += 1
                report.terminations += 1
                crash_point("after-terminate")
            elif isinstance(action, d.CoolDown):
                self.cool_down(action.provider, action.location, action.until, "decide")
            elif isinstance(action, d.Launch):
                if self.launch(action.placement, action.reason, report):
                    state = "running"
                else:
                    state = "recovering"
                    retry = True
            elif isinstance(action, d.Wait):
                if not any(a.state == "running" for a in self.attempts):
                    state = "waiting"
            elif isinstance(action, d.Finish):
                state = "succeeded"
                for a in self.attempts:
                    if a.state in ("launching", "running"):
                        self.end_attempt(a, "ended", "job finished")
                updates["reason"] = action.reason
                updates["result"] = self.read_result(self.memo.progress or {})
                self.event("finished", action.reason)
            elif isinstance(action, d.Fail):
                state = "failed"
                updates["reason"] = action.reason
                self.event("failed", action.reason)
                live = [
                    a
                    for a in self.attempts
                    if a.state in ("launching", "running") and a.instance_id
                ]
                if live:
                    self.provider.terminate([a.instance_id for a in live if a.instance_id])
                    report.provider_calls += 1
                    for a in live:
                        self.end_attempt(a, "ended", "job failed: " + action.reason)
        if any(a.state == "running" for a in self.attempts) and state in (
            "pending",
            "waiting",
            "recovering",
        ):
            state = "running"
        if state == job.state and set(updates) <= {"progress"}:
            self.settle(updates)
            updates.clear()
            return retry
        spent = self.spent()
        self.store.update_job(job.id, state=state, spent_usd=spent, **updates)
        job.state, job.spent_usd = state, spent
        updates.clear()
        return retry

    def launch(self, placement: Placement, reason: str, report: PassReport) -> bool:
        """Launch one attempt on ``placement``: intent first, then the cloud call."""
        from provisioner.control.reconciler import attempt_row, guard_launch

        job = self.job
        guard_launch(self.policy, placement, self.spent())
        self.fence(f"launching attempt {job.attempt + 1}")
        attempt = (self.current.attempt if self.current else 0) + 1
        row = attempt_row(job, attempt, placement, self.now, reason)
        self.store.add_attempt(row)
        self.attempts.append(row)
        job.attempt = attempt
        crash_point("after-attempt-row")
        return self._send(row, placement, reason, report)

    def fence(self, what: str) -> None:
        """Renew the job's lease right before a launch; raise LeaseLost if another replica
        claimed the job since this pass began (a pass that outran its lease)."""
        until = self.rec.clock() + self.rec.lease
        if not self.store.renew_lease(self.job.id, self.rec.owner, until):
            raise LeaseLost(f"another replica holds the job; not {what}")

    def resend(self, row: AttemptRow, report: PassReport) -> bool:
        """Send an attempt's launch again: its row was written but no instance carries its tag
        (the process that wrote it died before or during the call). Same token, so a cloud
        that did start it returns that instance instead of a second one."""
        from provisioner.control.inputs import placement_of
        from provisioner.control.reconciler import guard_launch

        placement = placement_of(row)
        try:
            guard_launch(self.policy, placement, self.spent())
        except Exception:
            self.end_attempt(row, "failed", "guard: launch refused on resend")
            raise
        self.fence(f"resending attempt {row.attempt}")
        self.event(
            "relaunch",
            f"attempt {row.attempt}: no instance carries its tag; sending its launch again "
            f"(token {row.token})",
        )
        return self._send(row, placement, row.reason, report)

    def _request(self, row: AttemptRow, placement: Placement) -> LaunchRequest:
        from provisioner.agent.spec import CLOUDS, AgentSpec

        o = placement.offer
        spec = AgentSpec.from_policy(
            self.policy,
            job_id=self.job.id,
            attempt=row.attempt,
            cloud=o.provider if o.provider in CLOUDS else "aws",
            checkpoint_uri=self.checkpoint_uri(),
        )
        return LaunchRequest(
            job_id=self.job.id,
            attempt=row.attempt,
            offer=o,
            market=placement.market,
            bid_cap_per_hour=placement.bid_cap_per_hour
            if placement.market is Market.SPOT
            else None,
            image=self.policy.job.image,
            disk_gb=self.policy.job.disk_gb,
            extra_tags=dict(self.policy.tags),
            job_spec=spec.to_dict(),
        )

    def _send(self, row: AttemptRow, placement: Placement, reason: str, report: PassReport) -> bool:
        """The cloud call of an attempt whose row is written; records what came back."""
        from provisioner.control.inputs import plan_digest
        from provisioner.control.reconciler import instance_row

        job, attempt, o = self.job, row.attempt, placement.offer
        req = self._request(row, placement)
        where = f"{o.provider}:{o.zone or o.region}"
        t0 = time.perf_counter()
        try:
            inst = self.provider.launch(req)
            report.provider_calls += 1
        except ProviderError as exc:
            report.provider_calls += 1
            if exc.kind.try_next_offer or exc.kind is ErrorKind.QUOTA:  # raised ones: the pass
                report.provider_errors[(exc.provider or self.job.provider, exc.kind.value)] += 1
            self.end_attempt(row, "failed", f"{exc.kind.value}: {exc.code}")
            if exc.kind.try_next_offer or exc.kind is ErrorKind.QUOTA:
                self.cool_down(
                    o.provider, o.zone or o.region, self.now + CAPACITY_COOLDOWN, exc.code
                )
                self.event(
                    "launch-failed",
                    f"attempt {attempt} on {where} {o.instance_type} {placement.market.value}: "
                    f"{exc.kind.value} ({exc.code}); trying the next offer",
                    zone=o.zone,
                    code=exc.code,
                )
                return False
            raise
        report.launch_seconds.append(time.perf_counter() - t0)
        crash_point("after-launch-call")
        launched = inst.launched_at or self.now
        self.store.update_attempt(
            job.id, attempt, instance_id=inst.id, state="running", launched_at=launched
        )
        row.instance_id, row.state, row.launched_at = inst.id, "running", launched
        self.store.upsert_instance(instance_row(inst, self.now))
        self.memo.instances[inst.id] = (
            inst.state,
            inst.raw_state,
            inst.state_reason,
            inst.price_per_hour,
        )
        self._sent = [*self._sent, inst]
        crash_point("after-instance-record")
        report.launches += 1
        cap = f", bid cap ${placement.bid_cap_per_hour:.4f}/h" if placement.bid_cap_per_hour else ""
        self.event(
            "launch",
            f"attempt {attempt}: {where} {o.instance_type} ({o.gpu_count}x {o.gpu}) "
            f"{placement.market.value} ${placement.price_per_hour:.4f}/h{cap} -> {inst.id}; why: {reason}",
            zone=o.zone,
            instance=inst.id,
            market=placement.market.value,
            price=placement.price_per_hour,
            billing=_billing(self.provider),
            attempt=attempt,
            plan=None if self.plan is None else plan_digest(self.plan, placement),
        )
        return True


def _billing(provider: object) -> dict[str, object]:
    """The account currency and USD rate the provider billed this launch in (for ``cost``)."""
    try:
        info = provider.account_billing()  # type: ignore[attr-defined]
    except Exception:  # an adapter without it (or failing to say): USD, as the planner assumes
        return {"currency": "USD", "usd_per_unit": 1.0}
    return {"currency": info.get("currency"), "usd_per_unit": info.get("usd_per_unit")}


def utc(dt: datetime | None) -> datetime | None:
    return None if dt is None else (dt if dt.tzinfo else dt.replace(tzinfo=UTC))
