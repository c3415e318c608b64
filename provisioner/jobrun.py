"""One job's part of a reconcile pass: observe, record, decide, act.

Kept apart from :mod:`provisioner.reconciler` (which batches provider calls across jobs) so
that the per-job rules read top to bottom.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from policies.model import Policy
from providers.base import ErrorKind, Provider, ProviderError
from provisioner.models import Instance, InstanceState, LaunchRequest, Market, Placement
from provisioner.store import AttemptRow, JobRow

if TYPE_CHECKING:
    from provisioner.reconciler import PassReport, Reconciler

log = logging.getLogger("provisioner.reconciler")

#: A job's own launch retries within one pass (capacity errors move to the next offer).
MAX_LAUNCH_TRIES_PER_PASS = 5
#: How long a zone that just answered "no capacity" is skipped by this job.
CAPACITY_COOLDOWN = timedelta(minutes=5)


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
    ) -> None:
        self.rec = rec
        self.store = rec.store
        self.job = job
        self.policy = policy
        self.provider = provider
        self.attempts = attempts
        self.now = now
        self.interruptions: list[Any] = []

    # -- helpers --------------------------------------------------------------------------------

    @property
    def current(self) -> AttemptRow | None:
        return self.attempts[-1] if self.attempts else None

    def event(self, kind: str, message: str, **data: Any) -> None:
        log.info("job %s: %s", self.job.id, message)
        self.store.add_event(self.job.id, kind, message, at=self.now, **data)

    def checkpoint_uri(self) -> str:
        from provisioner.reconciler import resolve_checkpoint_uri

        return resolve_checkpoint_uri(self.policy.checkpoint.uri)

    def read_progress(self) -> dict[str, Any] | None:
        from provisioner.agent.store import read_progress

        try:
            return read_progress(self.checkpoint_uri(), self.job.id)
        except Exception as exc:  # an unreachable checkpoint store must not stop the pass
            log.warning("job %s: cannot read progress: %s", self.job.id, exc)
            return None

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
        from provisioner.reconciler import billed_cost

        total = 0.0
        for a in self.attempts:
            if a.state in ("running",) and a.launched_at is not None:
                total += billed_cost(a.provider, a.price_per_hour, a.launched_at, self.now)
            else:
                total += a.cost_usd
        return total

    def end_attempt(self, a: AttemptRow, state: str, reason: str) -> None:
        from provisioner.reconciler import billed_cost

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
        from provisioner.reconciler import instance_row

        job = self.job
        for inst in seen:
            self.store.upsert_instance(instance_row(inst, self.now))
        live = [i for i in seen if i.state.alive]
        progress = self.read_progress()
        updates: dict[str, Any] = {}
        if progress and progress != job.progress:
            updates["progress"] = progress

        # Cancellation requested (provisioner down, Job.cancel()).
        if job.cancel_requested:
            if live:
                self.provider.terminate([i.id for i in live])
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

        cur = self.current
        # Heal an attempt whose launch was sent but never recorded: adopt the tagged instance.
        if cur is not None and cur.state == "launching":
            mine = [i for i in live if i.attempt == cur.attempt]
            if mine:
                inst = mine[0]
                self.store.update_attempt(
                    job.id,
                    cur.attempt,
                    instance_id=inst.id,
                    state="running",
                    launched_at=inst.launched_at or self.now,
                )
                cur.instance_id, cur.state, cur.launched_at = (
                    inst.id,
                    "running",
                    inst.launched_at or self.now,
                )
                self.event(
                    "adopted",
                    f"adopted instance {inst.id} of attempt {cur.attempt} (launch was not recorded)",
                )

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
            if inst is None or not inst.state.alive:
                if done:
                    self.end_attempt(cur, "ended", "job finished")
                elif inst is not None and inst.state is InstanceState.PREEMPTED:
                    self.end_attempt(cur, "preempted", inst.state_reason or "preempted")
                    until = self.now + self.policy.restart.zone_cooldown
                    self.store.cool_down(job.id, cur.provider, cur.zone, until, "preempted")
                    job.restarts += 1
                    updates["restarts"] = job.restarts
                    self.event(
                        "preempted",
                        f"attempt {cur.attempt} on {cur.provider}:{cur.zone} preempted"
                        f" ({inst.state_reason or inst.raw_state}); zone cooled down until {until:%H:%M:%S}",
                        zone=cur.zone,
                        instance=cur.instance_id,
                    )
                else:
                    reason = "instance gone" if inst is None else f"instance {inst.state.value}"
                    self.end_attempt(cur, "ended", reason)
                    self.event("lost", f"attempt {cur.attempt}: {reason}", instance=cur.instance_id)

        # Finished?
        if progress and progress.get("state") == "done":
            if live:
                self.provider.terminate([i.id for i in live])
                report.terminations += len(live)
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
        from provisioner.jobdecide import decide_for

        for _ in range(MAX_LAUNCH_TRIES_PER_PASS):
            actions = decide_for(self, Observed(seen, progress))
            if not self.act(actions, report, updates):
                break

    # -- acting -------------------------------------------------------------------------------

    def act(self, actions: list[Any], report: PassReport, updates: dict[str, Any]) -> bool:
        """Carry out decide()'s actions; True when a launch was refused and decide should
        be asked again (its cooldown is recorded)."""
        from provisioner import decide as d

        job = self.job
        state = job.state
        retry = False
        for action in actions:
            if isinstance(action, d.Terminate):
                self.provider.terminate([action.instance_id])
                report.terminations += 1
                self.event("terminate", f"terminated {action.instance_id}: {action.reason}")
            elif isinstance(action, d.CoolDown):
                self.store.cool_down(
                    job.id, action.provider, action.location, action.until, "decide"
                )
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
                    for a in live:
                        self.end_attempt(a, "ended", "job failed: " + action.reason)
        if any(a.state == "running" for a in self.attempts) and state in (
            "pending",
            "waiting",
            "recovering",
        ):
            state = "running"
        spent = self.spent()
        if state == job.state and not updates and abs(spent - job.spent_usd) < 1e-9:
            return retry
        self.store.update_job(job.id, state=state, spent_usd=spent, **updates)
        job.state, job.spent_usd = state, spent
        updates.clear()
        return retry

    def launch(self, placement: Placement, reason: str, report: PassReport) -> bool:
        """Launch one attempt on ``placement``: intent first, then the cloud call."""
        from provisioner.agent.spec import CLOUDS, AgentSpec
        from provisioner.reconciler import attempt_row, guard_launch

        job = self.job
        guard_launch(self.policy, placement, self.spent())
        attempt = (self.current.attempt if self.current else 0) + 1
        row = attempt_row(job, attempt, placement, self.now, reason)
        self.store.add_attempt(row)
        self.attempts.append(row)
        job.attempt = attempt
        o = placement.offer
        spec = AgentSpec.from_policy(
            self.policy,
            job_id=job.id,
            attempt=attempt,
            cloud=o.provider if o.provider in CLOUDS else "aws",
            checkpoint_uri=self.checkpoint_uri(),
        )
        req = LaunchRequest(
            job_id=job.id,
            attempt=attempt,
            offer=o,
            market=placement.market,
            bid_cap_per_hour=placement.bid_cap_per_hour
            if placement.market is Market.SPOT
            else None,
            image=self.policy.job.image,
            disk_gb=self.policy.job.disk_gb,
            job_spec=spec.to_dict(),
        )
        where = f"{o.provider}:{o.zone or o.region}"
        try:
            inst = self.provider.launch(req)
            report.provider_calls += 1
        except ProviderError as exc:
            report.provider_calls += 1
            self.end_attempt(row, "failed", f"{exc.kind.value}: {exc.code}")
            if exc.kind.try_next_offer:
                self.store.cool_down(
                    job.id, o.provider, o.zone or o.region, self.now + CAPACITY_COOLDOWN, exc.code
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
        launched = inst.launched_at or self.now
        self.store.update_attempt(
            job.id, attempt, instance_id=inst.id, state="running", launched_at=launched
        )
        row.instance_id, row.state, row.launched_at = inst.id, "running", launched
        from provisioner.reconciler import instance_row

        self.store.upsert_instance(instance_row(inst, self.now))
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
        )
        return True


def utc(dt: datetime | None) -> datetime | None:
    return None if dt is None else (dt if dt.tzinfo else dt.replace(tzinfo=UTC))
