"""One job's part of a reconcile pass: observe, record, decide, act.

The reconciler (which batches provider calls across jobs) hands each job a
:class:`~provisioner.control.jobbase.PassEnv` and what it observed; this module records the
observations (instance states, an unrecorded launch adopted, a preempted or lost attempt),
builds decide()'s inputs (:mod:`provisioner.control.inputs`), calls
:func:`provisioner.core.decide.decide` and carries out its actions, and nothing else: cancel,
finish, fail, backoff, cooldowns and launches are all decide()'s (see its module docstring
for the actions). Calls point one way: reconciler -> jobpass -> launching, progress, jobbase
-> inputs, records, guard, failpoints.

Crash safety: every effect can be repeated. A launch writes its attempt row (with the
(job, attempt) token) before the cloud call; a pass that finds the row still ``launching``
adopts the instance carrying the attempt's tag, or, when there is none, sends the same launch
again (same token: the provider returns the instance it may have started). Restarts are
counted from the attempts, so a crash between two writes never loses one.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from providers.base import ErrorKind, ProviderError
from provisioner.control import alerts, inputs
from provisioner.control.groups import sweep_groups
from provisioner.control.jobbase import JobMemo, LeaseLost, PassEnv
from provisioner.control.launching import Launching
from provisioner.control.pricewatch import price_key
from provisioner.control.progress import ProgressReading
from provisioner.control.records import PassReport
from provisioner.control.store import PREEMPTED_ROW, AttemptRow
from provisioner.core import decide as d
from provisioner.core.decide.pricecap import running_cap
from provisioner.core.models import TAG_JOB, TAG_MANAGED, Instance, InstanceState
from provisioner.core.reserved import block_notices
from provisioner.core.rules import EPS_USD
from provisioner.core.states import (
    LIVE_ATTEMPT_STATES,
    AttemptState,
    Cause,
    JobState,
    attempt_end,
    counts_as_restart,
    job_after,
)
from provisioner.core.timefmt import parse_time, utc
from provisioner.probe.watch import gpu_idle_since, probe_below, watch

#: decide() calls per pass (a launch refused for capacity, or a new cooldown, asks again).
MAX_LAUNCH_TRIES_PER_PASS = 5

__all__ = ["JobMemo", "JobRunner", "LeaseLost", "PassEnv"]


class JobRunner(Launching, ProgressReading):
    """One job's pass: :meth:`step` with the instances the provider listed for it."""

    def step(self, seen: list[Instance], report: PassReport) -> None:
        try:
            self._step(seen, report)
            # level-triggered: a restart not yet told (this process's memo) is looked at,
            # whatever events this process wrote (one killed between a replacement's record
            # and its event left it to the next)
            if self.restart_check or self.memo.restart_told < self.job.restarts:
                alerts.note_restart(self)
        except LeaseLost as exc:
            self.drop_queued()
            self.memo.forget()
            self.log.warning("job %s: %s; leaving it to its new owner", self.job.id, exc)
        except BaseException:  # the pass forgets the job: what it queued is told again
            self.drop_queued()
            raise

    def _step(self, seen: list[Instance], report: PassReport) -> None:
        job, memo = self.job, self.memo
        steady, memo.steady = memo.steady, None
        self.record_instances(seen)
        seen = self.fold(seen)  # a gang: one unit per attempt, as decide() sees it
        live = [i for i in seen if i.state.alive]
        reads = self.memo.progress_at
        progress = self.progress_for(live)
        report.progress_reads += self.memo.progress_at is not reads
        record = self.record_of(progress)
        self.take_reported_notice(record)  # the notice the agent saw, on any cloud
        # a capacity block's end, known from the launch (the instance's tags): a notice
        ending = block_notices(live, self.interruptions, self.now)
        if ending:
            self.interruptions = inputs.merged(self.interruptions, ending)
            for it in ending:
                self._note_block_end(it)
        updates: dict[str, Any] = {}
        if progress:
            self.note_checkpoint(progress)
            alerts.note_first_progress(self, progress)
        if progress and progress != job.progress and self.progress_worth_writing(progress):
            updates["progress"] = progress

        # The attempt's probe and idle GPUs, recorded; what the policy says of them
        # (replace an instance under the probe floor, stop a job idle too long) is decide()'s.
        if not job.cancel_requested:
            watch(self, progress)
        stop_due = self.policy_stop_due(progress) or self.over_cap(live)
        if stop_due:
            steady = None  # decide now, whatever was decided before
        if steady is not None and self._unchanged(steady, seen, progress):
            # what the last pass saw, and it only waited: nothing to record, no decision due
            memo.steady = steady
            self.settle(updates)
            return
        seen = self.observe_attempt(seen, progress, report)
        self.end_replaced(seen, report)
        seen = self.stop_leftovers(seen, report)
        live = [i for i in seen if i.state.alive]

        # Restarts are the preempted attempts: counted, never incremented, so a crash between
        # ending an attempt and writing the job loses none.
        restarts = self.restarts_so_far()
        if restarts != job.restarts:
            job.restarts = restarts
            updates["restarts"] = restarts

        # Decide and act. Unchanged inputs since a decision that only waited: decide again
        # only when due (once per ``decide_every``; what changes with time alone: slack,
        # spend against the budget), and only while an instance runs the job.
        waits = bool(live) and self.env.decide_every > timedelta(0) and not stop_due
        fp = self.fingerprint(seen, progress) if waits else None
        if fp is not None and memo.decided_at is None and self.running_as_recorded(live):
            # First sight of a job that runs as its store says (a restart, a takeover): it was
            # decided before; its turn comes within ``decide_every``, like every other's.
            memo.fingerprint, memo.decided_at = fp, self.now
        if (
            fp is not None
            and fp == memo.fingerprint
            and not self.due(memo.decided_at, self.env.decide_every)
        ):
            if self.running_as_recorded(live) and self._cooldowns == {}:
                memo.steady = self._steady_key(seen, progress)
            self.settle(updates)
            return
        memo.fingerprint = None
        actions: list[d.Action] = []
        for _ in range(MAX_LAUNCH_TRIES_PER_PASS):
            report.decisions += 1
            actions = self.decide(seen, progress)
            if not self.act(actions, report, updates):
                break
            seen = self.without_terminated(seen)
            restarts = self.restarts_so_far()
            if restarts != job.restarts:  # a preempted instance cleaned up: decide knows
                job.restarts = updates["restarts"] = restarts
        memo.decided_at = self.now
        alerts.note_exhausted(self, actions, seen)
        if fp is not None and all(isinstance(a, d.Wait) for a in actions):
            memo.fingerprint = self.fingerprint(seen, progress)

    # -- observing ----------------------------------------------------------------------------

    def observe_attempt(
        self, seen: list[Instance], progress: dict[str, Any] | None, report: PassReport
    ) -> list[Instance]:
        """Record what became of the current attempt: an unrecorded launch adopted (or sent
        again), an instance preempted or gone. Returns the instances seen, with any sent."""
        cur, job = self.current, self.job
        live = [i for i in seen if i.state.alive]
        # Heal an attempt whose launch was sent but never recorded: adopt the tagged instance;
        # where there is none, the launch may never have left: send it again (same token).
        if cur is not None and cur.state == "launching" and not job.cancel_requested:
            mine = [i for i in live if i.attempt == cur.attempt]
            if self.policy.resources.nodes > 1:
                mine = []  # a gang: every node's launch again (same tokens), never part of one
            if mine:
                found = mine[0]
                at = found.launched_at or self.now
                self.store.update_attempt(
                    job.id, cur.attempt, instance_id=found.id, state="running", launched_at=at
                )
                cur.instance_id, cur.state, cur.launched_at = found.id, "running", at
                self.event(
                    "adopted",
                    f"adopted instance {found.id} of attempt {cur.attempt} "
                    "(launch was not recorded)",
                    instance=found.id,
                )
                self.env.failpoints.hit("after-adopt")
            else:
                self.resend(cur, report)
                known = {i.id for i in seen}
                seen = [*seen, *[i for i in self._sent if i.id not in known]]
        if cur is None or cur.state != "running":
            return seen
        inst = next((i for i in seen if i.id == cur.instance_id), None)
        if inst is None and cur.instance_id:
            try:
                inst = self.provider.get(cur.instance_id)
                report.provider_calls += 1
            except ProviderError as exc:
                if exc.kind is not ErrorKind.NOT_FOUND:
                    raise
                inst = None
        if inst is not None and inst.state.alive:
            return seen
        p = progress or {}
        # A spot instance in no list that no terminate of ours (in the store) explains was
        # reclaimed and released: level-triggered, so a restarted daemon reads it the same.
        released = (
            inst is None
            and cur.market == "spot"
            and bool(cur.instance_id)
            and not self.store.has_event(job.id, "terminate", cur.instance_id or "")
        )
        if p.get("state") == "done" and p.get("attempt", cur.attempt) <= cur.attempt:
            self.end_attempt(cur, AttemptState.ENDED, "job finished", Cause.JOB_DONE)
        elif released or (inst is not None and inst.state is InstanceState.PREEMPTED):
            why = inst.state_reason if inst else "spot instance released"
            shown = why or (inst.raw_state if inst else "")
            self.preempted(
                cur,
                f"attempt {cur.attempt} on {cur.provider}:{cur.zone} preempted"
                f" ({shown}); the zone is cooled down for {self.policy.restart.zone_cooldown}",
                why or "preempted",
                report,
            )
        else:
            reason = "instance gone" if inst is None else f"instance {inst.state.value}"
            self.end_attempt(cur, AttemptState.ENDED, reason, Cause.INSTANCE_LOST)
            self.event("lost", f"attempt {cur.attempt}: {reason}", instance=cur.instance_id)
        return seen

    def stop_leftovers(self, seen: list[Instance], report: PassReport) -> list[Instance]:
        """Capacity of an attempt that has ended (say a gang's nodes, started by a launch
        sent again after a crash, whose attempt then failed on a throttled call): stopped,
        recorded first, never taken for the job's instance. Returns what was seen, those
        shown terminated."""
        ended = {a.attempt for a in self.attempts if a.state not in LIVE_ATTEMPT_STATES}
        left = [i for i in seen if i.state.alive and i.attempt in ended and i.job_id == self.job.id]
        if not left:
            return seen
        ids = [i.id for i in left]
        why = "its attempt has ended: capacity left over"
        for iid in ids:
            self.event("terminate", f"terminated {iid}: {why}")
        self.provider.terminate(ids)
        self.store.end_instances(self.provider.name, ids, self.now, why, self.job.id)
        report.provider_calls += 1
        report.terminations += len(ids)
        gone = set(ids)
        return [replace(i, state=InstanceState.TERMINATED) if i.id in gone else i for i in seen]

    def preempted(self, a: AttemptRow, message: str, why: str, report: PassReport) -> None:
        """An attempt the cloud took back: its ``preempted`` event (once, whatever crash
        comes between the writes: the event goes first, and a pass that finds the attempt
        still running and its instance gone comes here again), its instance rows ended as
        preempted, then the attempt ended (a restart)."""
        self.tell_preempted(a, message)
        self.env.failpoints.hit("after-preempted")
        if a.instance_id:
            gone = self.expand([a.instance_id])
            self.store.end_instances(
                self.provider.name, gone, self.now, why, self.job.id, state=PREEMPTED_ROW
            )
        self.end_attempt(a, AttemptState.PREEMPTED, why, Cause.PREEMPTED)
        report.restarts += 1

    def tell_preempted(self, a: AttemptRow, message: str) -> None:
        """The ``preempted`` event of attempt ``a``, unless it has one already (a process
        killed between the event and the attempt's end wrote it); a restart may be complete
        either way (:func:`provisioner.control.alerts.note_restart` looks this pass)."""
        if not self.store.has_event(self.job.id, "preempted", f"attempt {a.attempt} on "):
            self.event("preempted", message, zone=a.zone, instance=a.instance_id)
        self.restart_check = True

    def end_replaced(self, seen: list[Instance], report: PassReport) -> None:
        """End the earlier attempts still recorded running whose instance is gone: one
        replaced after a notice (overlap), taken by the cloud or terminated by a pass that
        died before it wrote so. Preempted when it had a notice (a restart), else ended."""
        alive = {i.id for i in seen if i.state.alive}
        for a in self.attempts[:-1]:
            if a.state != "running" or not a.instance_id or a.instance_id in alive:
                continue
            inst = next((i for i in seen if i.id == a.instance_id), None)
            noticed = self.store.has_event(self.job.id, "notice", a.instance_id)
            if noticed or (inst is not None and inst.state is InstanceState.PREEMPTED):
                cur = self.current
                took = (
                    f"; attempt {cur.attempt} took over"
                    if cur is not None and cur is not a and cur.state == "running"
                    else ""
                )
                self.preempted(
                    a,
                    f"attempt {a.attempt} on {a.provider}:{a.zone} gone after its notice{took}",
                    "replaced after an interruption notice",
                    report,
                )
            else:
                self.end_attempt(a, AttemptState.ENDED, "instance gone", Cause.INSTANCE_LOST)

    def fingerprint(self, seen: list[Instance], progress: dict[str, Any] | None) -> tuple[Any, ...]:
        """Everything decide() reads that changes other than with the clock."""
        cur, job = self.current, self.job
        p = progress or {}
        iid = None if cur is None else cur.instance_id
        shown = [
            (i.id, i.state.value, i.market.value)
            for i in seen
            if i.state.alive or (cur is not None and i.id == iid)
        ]
        if len(shown) > 1:
            shown.sort()
        notes = self.interruptions
        return (
            job.state,
            job.restarts,
            job.cancel_requested,
            None if cur is None else (cur.attempt, cur.state, iid, cur.launched_at, cur.ended_at),
            tuple(shown),
            tuple(sorted((x.instance_id, x.kind) for x in notes)) if notes else (),
            (p.get("state"), p.get("attempt"), p.get("last_checkpoint"), p.get("total_steps")),
            tuple(sorted(self.cooldowns())),
        )

    def _steady_key(self, seen: list[Instance], progress: dict[str, Any] | None) -> tuple[Any, ...]:
        p = progress or {}
        fields = (p.get("state"), p.get("attempt"), p.get("last_checkpoint"), p.get("total_steps"))
        return (self.job, self.attempts, len(self.attempts), tuple(seen), fields)

    def _unchanged(
        self, steady: tuple[Any, ...], seen: list[Instance], progress: dict[str, Any] | None
    ) -> bool:
        """Whether this pass sees what the last one saw when it only waited (its fingerprint
        matched, the job ran as recorded, no cooldown, no interruption): the same job row and
        attempts (a write re-reads the row; any other step clears the memo), the same
        instances, field for field, the same progress fields that decide() reads, and no
        decision due. Then the observation and the fingerprint would come out the same."""
        job, attempts, n, instances, fields = steady
        cur = self.current
        p = progress or {}
        return (
            job is self.job
            and attempts is self.attempts
            and n == len(attempts)
            and cur is not None
            and cur.state == "running"
            and not self.interruptions
            and self._cooldowns == {}
            and self.env.decide_every > timedelta(0)
            and instances == tuple(seen)
            and fields
            == (p.get("state"), p.get("attempt"), p.get("last_checkpoint"), p.get("total_steps"))
            and not self.due(self.memo.decided_at, self.env.decide_every)
        )

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

    def without_terminated(self, seen: list[Instance]) -> list[Instance]:
        """The instances seen, those terminated this pass shown as such (decide again)."""
        gone = {a.instance_id for a in self.attempts if a.state != "running" and a.instance_id}
        return [
            replace(i, state=InstanceState.TERMINATED) if i.id in gone and i.state.alive else i
            for i in seen
        ]

    # -- deciding and acting --------------------------------------------------------------------

    def over_cap(self, live: list[Instance]) -> bool:
        """Whether a running spot instance's price read this pass passed its cap (the daemon
        holds it there: provisioner.control.pricewatch): decide now, whatever was decided."""
        cur = self.current
        if not self.spot_prices or cur is None:
            return False
        cap = running_cap(self.policy, inputs.placement_of(cur))
        return any(self.spot_prices.get(price_key(i), 0.0) > cap + EPS_USD for i in live)

    def policy_stop_due(self, progress: dict[str, Any] | None) -> bool:
        """Whether decide() has a policy stop to make now: the probe floor or idle GPUs."""
        if probe_below(self):
            return True
        idle, since = self.policy.idle, gpu_idle_since(self, progress)
        return idle is not None and since is not None and self.now - since >= idle.duration

    def _note_block_end(self, it: Any) -> None:
        """A capacity block's end, recorded once as the instance's ``notice`` event."""
        if it.kind != "notice" or self.store.has_event(self.job.id, "notice", it.instance_id):
            return
        self.store.add_event(
            self.job.id,
            "notice",
            f"{it.instance_id} in {it.zone}: {it.raw} (known since its launch); the agent "
            "checkpoints and the job moves on before the end",
            at=it.at,
            instance=it.instance_id,
            deadline=it.deadline.isoformat() if it.deadline else None,
        )

    def decide(self, seen: list[Instance], progress: dict[str, Any] | None) -> list[d.Action]:
        """decide()'s answer for this job now, on inputs built from what was observed."""
        job, policy, now = self.job, self.policy, self.now
        cooldowns = self.cooldowns()
        view = inputs.job_view(
            job,
            policy,
            self.attempts,
            seen,
            progress,
            record=self.record_of(progress),
            spent_usd=self.spent(),
            cooldowns=cooldowns,
            interval_s=self.env.interval_s,
            boot_s=self.boot_s,
            changeover_h=self.changeover_h,
            probe_below=probe_below(self),
            gpu_idle_since=gpu_idle_since(self, progress),
        )
        # kept: a launch stores the plan it was chosen from (see inputs.plan_digest)
        cooled = frozenset(cooldowns)
        if policy.resources.nodes > 1:  # where a gang lately came up short (gang_capacity)
            short = inputs.gang_shortfalls(self.attempts, now)
            plan = self.plan = self.env.plan_for(job, policy, cooled, now, short)
        else:
            plan = self.plan = self.env.plan_for(job, policy, cooled, now)
        risks = None if self.env.priors is None else self.env.priors.get(now)
        obs = inputs.observations(
            job,
            self.attempts,
            seen,
            self.interruptions,
            plan,
            now,
            self.record_of(progress),
            risks,
            self.spot_prices,
        )
        return d.decide(view, obs, now)

    def act(self, actions: list[d.Action], report: PassReport, updates: dict[str, Any]) -> bool:
        """Carry out decide()'s actions, in order; True when decide() is to be asked again (a
        launch refused for capacity or price, or a new cooldown that changes the candidates).
        The job's new state is the transition table's (:func:`provisioner.core.states.job_after`)
        for what was carried out; nothing here picks one."""
        job = self.job
        retry = False
        final: d.Final | None = None
        refused: Cause | None = None
        ended: Cause | None = None
        waited: Cause | None = None
        ending = any(isinstance(a, d.FINAL) for a in actions)
        for i, action in enumerate(actions):
            if isinstance(action, d.Terminate):
                self.terminate(action, report, finishing=ending)
                ended = action.cause
            elif isinstance(action, d.CoolDown):
                before = self.cooldowns().get((action.provider, action.location))
                if before is None or before < action.until:
                    self.cool_down(action.provider, action.location, action.until, action.reason)
                    if any(isinstance(a, d.Launch) for a in actions[i + 1 :]):
                        retry = True  # plan again without the zone
                        break
            elif isinstance(action, d.Launch):
                if not self.launch(action.placement, action.reason, report):
                    cur = self.current
                    refused = Cause.parse(cur.end_cause if cur is not None else None)
                    if refused is Cause.UNKNOWN:
                        refused = Cause.LAUNCH_REFUSED
                    retry = True
            elif isinstance(action, d.Wait | d.Backoff):
                waited = action.cause
                if isinstance(action, d.Backoff):
                    self.log.info("job %s: %s", job.id, action.reason)
            elif isinstance(action, d.FINAL):
                final = action
        running = any(a.state == AttemptState.RUNNING for a in self.attempts)
        step = job_after(
            JobState(job.state),
            final=None if final is None else final.cause,
            running=running and final is None,
            refused=refused,
            ended=ended,
            waited=waited,
        )
        if final is not None:
            self.end_job(final, report, updates)
        state = step.after.value
        if step.changed:
            updates["cause"] = step.cause.value
        if state == job.state and set(updates) <= {"progress"}:
            self.settle(updates)
            updates.clear()
            return retry
        spent = self.spent()
        self.write_queued()
        self.store.update_job(job.id, at=self.now, state=state, spent_usd=spent, **updates)
        job.state, job.spent_usd = state, spent
        updates.clear()
        if final is None:
            alerts.note_budget(self, spent)
        return retry

    def restarts_so_far(self) -> int:
        """Restarts are counted from the attempts (never incremented: a crash between ending
        an attempt and writing the job loses none): preempted ones, and those whose command
        exited with a code the policy restarts on."""
        return sum(1 for a in self.attempts if counts_as_restart(a.state, a.end_cause))

    def _checkpoint_note(self, a: AttemptRow) -> str:
        """Whether a checkpoint got in after the notice of the attempt under it, as the
        agents reported (the newest checkpoint's upload time, or the checkpoint events this
        job's passes wrote from their records): what the ``preempted`` event says, never
        "in" when none was."""
        p = self.memo.progress or {}
        notice = next(
            (x.at for x in self.interruptions if x.instance_id == a.instance_id), None
        ) or (a.launched_at or self.now)
        notice = utc(notice)
        at = parse_time(p.get("last_checkpoint_at"))
        mine = p.get("last_checkpoint_attempt") in (a.attempt, None)
        if at is not None and at >= notice and p.get("last_checkpoint") and mine:
            return f"its checkpoint {p.get('last_checkpoint')} is in"
        newer = [
            e
            for e in self.store.events(self.job.id)
            if e.kind == "checkpoint"
            and utc(e.at) >= notice
            and (e.data or {}).get("attempt") in (a.attempt, None)  # its own, not its successor's
        ]
        if newer:
            return f"its checkpoint {(newer[-1].data or {}).get('checkpoint') or ''} is in"
        last = p.get("last_checkpoint")
        return "no checkpoint since its notice; " + (
            f"resuming from {last}" if last else "no checkpoint yet: the job starts over"
        )

    def terminate(self, action: d.Terminate, report: PassReport, *, finishing: bool) -> None:
        """Stop an instance and end its attempt: its bill stops here, whatever comes next.
        Recorded first: an instance gone later is ours, not a preemption, even when this
        process dies right after the call."""
        ids = self.expand([action.instance_id])
        if action.cause is Cause.SETUP_FAILED:  # what the setup said last, for the user
            failure = (self.memo.progress or {}).get("setup_error") or {}
            tail = [str(t) for t in failure.get("tail") or []][-10:]
            self.event(
                "setup-failed",
                "\n".join([f"attempt {self.job.attempt}: {action.reason}", *tail]),
                instance=action.instance_id,
                stage=failure.get("stage"),
                tail=tail,
            )
        for iid in ids:  # a gang's unit: every node (each recorded, so none reads as preempted)
            self.event("terminate", f"terminated {iid}: {action.reason}")
        self.provider.terminate(ids)
        self.store.end_instances(self.provider.name, ids, self.now, action.reason)
        report.provider_calls += 1
        report.terminations += 1
        self.env.failpoints.hit("after-finish-terminate" if finishing else "after-terminate")
        for a in self.attempts:
            if a.instance_id == action.instance_id and a.state in LIVE_ATTEMPT_STATES:
                preempted = action.cause is Cause.PREEMPTED
                cooled = f"the zone is cooled down for {self.policy.restart.zone_cooldown}"
                if preempted and a is not self.current:  # overlap: told before it ends
                    self.tell_preempted(
                        a,
                        f"attempt {a.attempt} on {a.provider}:{a.zone} under notice: "
                        f"{self._checkpoint_note(a)}; attempt {self.job.attempt} takes over; "
                        f"{cooled}",
                    )
                elif preempted:  # the cloud took it (a gang's node, say) while it still listed
                    self.tell_preempted(
                        a,
                        f"attempt {a.attempt} on {a.provider}:{a.zone} preempted "
                        f"({action.reason}); {cooled}",
                    )
                self.end_attempt(a, attempt_end(action.cause), action.reason, action.cause)
                if action.cause is Cause.PROBE_BELOW_FLOOR:
                    self.event(
                        "probe-below",
                        f"attempt {a.attempt}: terminated {a.instance_id} ({a.instance_type}): "
                        f"{action.reason}; {a.provider}:{a.zone} cooled down for "
                        f"{self.policy.restart.zone_cooldown}",
                        instance=a.instance_id,
                        zone=a.zone,
                    )
                if preempted and a is not self.current:  # overlap: the replacement runs
                    report.restarts += 1

    def end_job(self, action: d.Final, report: PassReport, updates: dict[str, Any]) -> None:
        """A final action: the job's open attempts end, and its reason is set. What people
        hear of it comes in order: a restart completed in this pass, the budget level spend
        reached, then the end itself."""
        live = [a for a in self.attempts if a.state in LIVE_ATTEMPT_STATES]
        ids = self.expand([a.instance_id for a in live if a.instance_id])
        if ids and not isinstance(action, d.Finish):  # decide() stops what it sees; the rest
            for iid in ids:  # recorded first (see terminate)
                self.event("terminate", f"terminated {iid}: {action.reason}")
            self.provider.terminate(ids)
            self.store.end_instances(self.provider.name, ids, self.now, action.reason)
            report.provider_calls += 1
        alerts.note_restart(self)  # a replacement that ran before the end is still a restart
        why = {d.Finish: "job finished", d.Cancel: "cancelled"}.get(type(action))
        for a in live:
            cause = action.cause if action.cause is Cause.CANCELLED else Cause.JOB_ENDED
            self.end_attempt(a, AttemptState.ENDED, why or "job ended: " + action.reason, cause)
        updates["reason"] = action.reason
        report.finished += 1
        if any(a.nodes > 1 for a in self.attempts):
            self._sweep_groups(report)
        spent = self.spent()
        alerts.note_budget(self, spent)
        if isinstance(action, d.Finish):
            updates["result"] = self.read_result(self.memo.progress or {})
            text, figures = alerts.success_message(self, action.reason, spent)
            self.event(action.state.value, text, **figures)
        else:
            self.event(action.state.value, self._final_message(action, spent))

    def _final_message(self, action: d.Final, spent: float) -> str:
        if isinstance(action, d.Cancel):
            n = sum(1 for a in self.attempts if a.end_cause == Cause.CANCELLED)
            return f"cancelled; terminated {n} instance(s); checkpoints kept"
        if isinstance(action, d.Stop):
            return f"{action.reason}; checkpoints kept"
        return action.reason

    def _sweep_groups(self, report: PassReport) -> None:
        """A gang job's end: its placement groups go now where the cloud lets (its nodes
        already gone); those still in use go at a later sweep (provisioner.control.groups)."""
        try:
            seen = self.provider.list({TAG_MANAGED: "true", TAG_JOB: self.job.id})
            report.provider_calls += 1
            sweep_groups(
                self.store, self.provider, seen, self.now, report, self.env.failpoints, self.job.id
            )
        except ProviderError as exc:
            self.log.info("job %s: placement groups left to the sweep: %s", self.job.id, exc)
