"""decide()'s gate: the rules that stop the job or make it wait whatever the market.

In order: a cancel request; the agent's report (the command exited 0: the job is done; it
exited non-zero: the job fails, or is restarted where ``restart.on_exit_codes`` says; its setup
failed); the policy's own stops of a running attempt (a probe under
``resources.min_measured_fraction``, GPUs idle for ``idle.duration``); a launch backoff; the
total budget (judged with what live instances bill by the next pass, before a notice's wait:
an instance under notice bills until it goes); an interruption notice (wait for the
checkpoint); the work covered by checkpoints; the time windows; an attempt not reported yet;
restarts exhausted. Each action names its :class:`~provisioner.core.states.Cause`. Pure, like
:mod:`provisioner.core.decide`, which calls :func:`gate` first and the strategy after.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from policies.model import Policy
from provisioner.core import admission as adm
from provisioner.core import strategies as st
from provisioner.core.actions import (
    Action,
    Backoff,
    Cancel,
    CoolDown,
    Fail,
    Finish,
    Stop,
    Terminate,
    Wait,
)
from provisioner.core.models import Instance
from provisioner.core.rules import budget_spent
from provisioner.core.states import AgentState, Cause
from provisioner.core.views import AgentReport, JobView, Location, Observations

#: Hold-off after a launch failure that the next offer would not cure (doubling, capped).
BACKOFF_FIRST, BACKOFF_MAX = timedelta(seconds=5), timedelta(minutes=5)
#: An agent whose report is older than this is taken for gone (it writes every 5 s).
AGENT_SILENT = timedelta(minutes=10)


def stop_all(alive: Sequence[Instance], reason: str, cause: Cause) -> list[Action]:
    return [Terminate(i.id, reason, cause) for i in alive]


@dataclass
class Situation:
    """The job's situation after triage: the instance kept, actions so far, cooldowns."""

    actions: list[Action]
    keep: Instance | None
    cooled: dict[Location, datetime]
    notice_until: datetime | None = None
    #: make before break: the instance still working until the current attempt takes over
    handing_over: Instance | None = None


def _backoff(job: JobView, now: datetime) -> Backoff | None:
    """Hold off launches after ``launch_failures`` that another offer would not cure: 5 s
    after the first, doubling to 5 min (capacity, price and quota failures move on to the next
    offer at once and are not counted by the caller)."""
    n = job.launch_failures
    if n <= 0:
        return None
    wait = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** min(n - 1, 30))
    until = (job.last_launch_failure_at or now) + wait
    if until <= now:
        return None
    secs = (until - now).total_seconds()
    return Backoff(until, f"{n} launch failure(s); next try in {secs:.0f} s")


def _agent_still_working(agent: AgentReport, now: datetime) -> bool:
    """The checkpoints cover the work, but the agent still reports (recently) a command that
    has not exited: its output is not up yet."""
    if agent.state in (AgentState.DONE, AgentState.FAILED) or agent.updated_at is None:
        return False
    return now - agent.updated_at <= AGENT_SILENT


#: setup failures (any) after which the job fails: a VM that never gets the job going
SETUP_FAILURES_MAX = 3


def _setup_failed(job: JobView, agent: AgentReport, t: Situation) -> list[Action] | None:
    """The current attempt's agent could not start the job (code, secrets, image, setup): its
    instance goes (not a preemption: no restart counted, no zone cooled) and the next pass
    launches again; the same failure as an earlier attempt's, or a third one, fails the job."""
    cur = job.current
    if agent.state != AgentState.SETUP_FAILED or cur is None or agent.attempt != cur.attempt:
        return None
    if t.keep is None or t.keep.id != cur.instance_id:
        return None  # already ended: the next launch is the normal flow's
    fp, what = agent.setup_fingerprint, agent.setup_message or "setup failed"
    stop = [*t.actions, Terminate(t.keep.id, f"setup failed ({fp}): {what}", Cause.SETUP_FAILED)]
    if fp and fp in job.setup_failures:
        why = f"setup failed the same way on two attempts: {what}"
        return [*stop, Fail(why, Cause.SETUP_FAILED)]
    if len(job.setup_failures) + 1 >= SETUP_FAILURES_MAX:
        why = f"setup failed on {SETUP_FAILURES_MAX} attempts; last: {what}"
        return [*stop, Fail(why, Cause.SETUP_FAILED)]
    return stop


def _exited(
    job: JobView, agent: AgentReport, t: Situation, every: list[Instance]
) -> list[Action] | None:
    """The current attempt's command exited non-zero (not on a notice: the agent reports that
    ``interrupted``): the job fails and every instance of it stops, in this pass; where the
    exit code is one of ``restart.on_exit_codes``, the attempt's instance stops and the job is
    launched again (a restart, counted against ``restart.max_restarts``)."""
    cur = job.current
    if agent.state != AgentState.FAILED:
        return None
    if cur is not None and agent.attempt is not None and agent.attempt != cur.attempt:
        return None  # an earlier attempt's record, already acted on
    code = agent.exit_code
    restart = job.policy.restart
    if code is not None and code in restart.on_exit_codes:
        if cur is None or t.keep is None or t.keep.id != cur.instance_id:
            return None  # its instance already went: the normal flow launches again
        if job.restarts >= restart.max_restarts:
            why = (
                f"job exited {code}; restarts exhausted ({job.restarts} of {restart.max_restarts})"
            )
            return [
                *t.actions,
                *stop_all(every, why, Cause.RESTARTS_EXHAUSTED),
                Fail(why, Cause.RESTARTS_EXHAUSTED),
            ]
        why = f"job exited {code}: restarting it (restart.on_exit_codes)"
        return [*t.actions, Terminate(t.keep.id, why, Cause.EXIT_RESTART)]
    why = f"job exited {code}" if code is not None else "job failed"
    return [*t.actions, *stop_all(every, why, Cause.JOB_EXITED), Fail(why, Cause.JOB_EXITED)]


def _policy_stops(
    job: JobView, t: Situation, now: datetime, every: list[Instance]
) -> list[Action] | None:
    """The policy's own stops of a running attempt: its probe measured under
    ``resources.min_measured_fraction`` (its instance goes, its zone cools down, the job is
    launched again elsewhere), or its GPUs idle for ``idle.duration`` with ``idle.action:
    stop`` (the job ends ``stopped``, its checkpoints kept)."""
    cur = job.current
    if cur is None or t.keep is None or t.keep.id != cur.instance_id:
        return None
    idle = job.policy.idle
    since = job.gpu_idle_since
    if (
        idle is not None
        and idle.action == "stop"
        and since is not None
        and now - since >= idle.duration
    ):
        span = int((now - since).total_seconds())
        why = f"stopped: GPU idle for {span // 60}m{span % 60:02d}s (policy idle.action: stop)"
        return [*t.actions, *stop_all(every, why, Cause.GPU_IDLE), Stop(why, Cause.GPU_IDLE)]
    if job.probe_below:
        loc = (cur.placement.offer.provider, cur.placement.offer.location)
        until = now + job.policy.restart.zone_cooldown
        acts = [*t.actions, Terminate(t.keep.id, job.probe_below, Cause.PROBE_BELOW_FLOOR)]
        if job.policy.restart.zone_cooldown > timedelta(0):
            acts.append(CoolDown(loc[0], loc[1], until, job.probe_below))
        return acts
    return None


def gate(job: JobView, obs: Observations, now: datetime, t: Situation) -> list[Action] | None:
    """The rules that stop the job or make it wait whatever the market; None: none applies."""
    policy = job.policy
    alive = [x for x in (t.keep, t.handing_over) if x is not None]
    every = [i for i in obs.instances if i.job_id in (None, job.id) and i.state.alive]
    if job.cancel_requested:
        why = "cancelled by the user"
        return [*stop_all(every, why, Cause.CANCELLED), Cancel(why, Cause.CANCELLED)]
    agent = job.agent or AgentReport()
    if agent.state == AgentState.DONE:
        why = "the job's command completed"
        return [*stop_all(every, "job finished", Cause.JOB_DONE), Finish(why, Cause.JOB_DONE)]
    for rule in (
        _exited(job, agent, t, every),
        _setup_failed(job, agent, t),
        _policy_stops(job, t, now, every),
    ):
        if rule is not None:
            return rule
    backoff = _backoff(job, now)
    if backoff is not None and t.keep is None:
        return [*t.actions, backoff]
    # the budget before a notice's wait: an instance under notice bills until it goes
    cap = policy.budget.max_total
    if budget_spent(policy, job.spent_usd + adm.next_pass_usd(job, every, now)):
        what = f"spent {_usd(job.spent_usd)} of {_usd(cap or 0.0)}"
        return t.actions + budget_out(policy, alive, what)
    if t.notice_until is not None:
        return [
            *t.actions,
            Wait(
                t.notice_until,
                "interruption notice: the job checkpoints, then it goes",
                Cause.NOTICE,
            ),
        ]
    total = job.work_total_h
    if total is not None and job.work_done_h >= total - st.EPS_H:
        if alive and _agent_still_working(agent, now):
            return [
                *t.actions,
                Wait(None, "the last checkpoint is in: waiting for the job to exit"),
            ]
        stop = stop_all(alive, "job complete", Cause.JOB_DONE)
        return [*t.actions, *stop, Finish("all work done", Cause.JOB_DONE)]
    if policy.windows:
        from policies.cron import in_window, next_window_start

        wins = [(w.cron, w.duration) for w in policy.windows]
        if not in_window(wins, now):
            nxt = next_window_start(wins, now)
            stop = stop_all(alive, "outside the policy's time windows", Cause.OUTSIDE_WINDOW)
            when = nxt.isoformat() if nxt else "never"
            why = f"outside the time windows; next opens {when}"
            return [*t.actions, *stop, Wait(nxt, why, Cause.OUTSIDE_WINDOW)]
    cur = job.current
    if t.keep is None and cur is not None and cur.instance_id is None and cur.state is None:
        return [*t.actions, Wait(None, f"attempt {cur.attempt} launched, not reported yet")]
    limit = policy.restart.max_restarts
    if t.keep is None and job.restarts >= limit:
        why = f"restarts exhausted ({job.restarts} of {limit})"
        return [*t.actions, Fail(why, Cause.RESTARTS_EXHAUSTED)]
    return None


def _usd(x: float) -> str:
    """Money as people read it: cents, and four decimals under a dollar (a small budget would
    read "$0.00 of $0.00")."""
    return f"${x:.2f}" if abs(x) >= 1 else f"${x:.4f}"


def budget_out(
    policy: Policy, alive: Sequence[Instance], what: str, cause: Cause = Cause.BUDGET_EXHAUSTED
) -> list[Action]:
    if policy.budget.on_exhausted == "stop":
        stop = stop_all(alive, f"budget exhausted: {what}", cause)
        return [*stop, Fail(f"budget exhausted: {what}", cause)]
    stop = stop_all(alive, f"budget exhausted: {what}", Cause.BUDGET_PAUSED)
    return [*stop, Wait(None, f"budget exhausted: {what}; paused", Cause.BUDGET_PAUSED)]
