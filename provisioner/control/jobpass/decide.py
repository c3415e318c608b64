"""One job's decision: decide()'s inputs built from what the pass observed
(:mod:`provisioner.control.inputs`), :func:`provisioner.core.decide.decide` called, and its
actions carried out (:mod:`provisioner.control.jobpass.act`), again while a launch is
refused or a new cooldown changes the candidates. Unchanged inputs since a decision that
only waited: decided again only when due (once per ``decide_every``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from provisioner.control import inputs
from provisioner.control.jobpass import alerts
from provisioner.control.jobpass.act import carry_out
from provisioner.control.jobpass.attempts import restarts_so_far, without_terminated
from provisioner.control.jobpass.probes import gpu_idle_since, probe_below
from provisioner.control.jobpass.progress import record_of
from provisioner.control.jobpass.settle import settle
from provisioner.control.jobpass.state import SETTLED, PassState, Result
from provisioner.control.jobpass.steady import fingerprint, running_as_recorded, steady_key
from provisioner.core import decide as d
from provisioner.core.models import Instance

#: decide() calls per pass (a launch refused for capacity, or a new cooldown, asks again).
MAX_LAUNCH_TRIES_PER_PASS = 5


class Decide:
    """Decide and act, unless the job only waits and no decision is due; the job's updates
    are written either way."""

    def reconcile(self, ps: PassState) -> Result:
        memo, live = ps.memo, ps.live()
        # Decide and act. Unchanged inputs since a decision that only waited: decide again
        # only when due (once per ``decide_every``; what changes with time alone: slack,
        # spend against the budget), and only while an instance runs the job.
        waits = bool(live) and ps.env.decide_every > timedelta(0) and not ps.stop_due
        fp = fingerprint(ps, ps.seen, ps.progress) if waits else None
        if fp is not None and memo.decided_at is None and running_as_recorded(ps, live):
            # First sight of a job that runs as its store says (a restart, a takeover): it was
            # decided before; its turn comes within ``decide_every``, like every other's.
            memo.fingerprint, memo.decided_at = fp, ps.now
        if (
            fp is not None
            and fp == memo.fingerprint
            and not ps.due(memo.decided_at, ps.env.decide_every)
        ):
            if running_as_recorded(ps, live) and ps.cooled == {}:
                memo.steady = steady_key(ps, ps.seen, ps.progress)
            settle(ps, ps.updates)
            return SETTLED
        memo.fingerprint = None
        actions = decide_and_act(ps)
        memo.decided_at = ps.now
        alerts.note_exhausted(ps, actions, ps.seen)
        if fp is not None and all(isinstance(a, d.Wait) for a in actions):
            memo.fingerprint = fingerprint(ps, ps.seen, ps.progress)
        return SETTLED


def decide_and_act(ps: PassState) -> list[d.Action]:
    """decide() and its actions carried out, again (up to MAX_LAUNCH_TRIES_PER_PASS times)
    while it is to be asked again; its last answer."""
    job, report, updates = ps.job, ps.report, ps.updates
    actions: list[d.Action] = []
    for _ in range(MAX_LAUNCH_TRIES_PER_PASS):
        report.decisions += 1
        actions = decide(ps, ps.seen, ps.progress)
        if not carry_out(ps, actions, report, updates):
            break
        ps.seen = without_terminated(ps, ps.seen)
        restarts = restarts_so_far(ps)
        if restarts != job.restarts:  # a preempted instance cleaned up: decide knows
            job.restarts = updates["restarts"] = restarts
    return actions


def decide(ps: PassState, seen: list[Instance], progress: dict[str, Any] | None) -> list[d.Action]:
    """decide()'s answer for this job now, on inputs built from what was observed."""
    job, policy, now = ps.job, ps.policy, ps.now
    cooldowns = ps.cooldowns()
    view = inputs.job_view(
        job,
        policy,
        ps.attempts,
        seen,
        progress,
        record=record_of(ps, progress),
        spent_usd=ps.spent(),
        cooldowns=cooldowns,
        interval_s=ps.env.interval_s,
        boot_s=ps.boot_s,
        changeover_h=ps.changeover_h,
        probe_below=probe_below(ps),
        gpu_idle_since=gpu_idle_since(ps, progress),
    )
    # kept: a launch stores the plan it was chosen from (see inputs.plan_digest)
    cooled = frozenset(cooldowns)
    if policy.resources.nodes > 1:  # where a gang lately came up short (gang_capacity)
        short = inputs.gang_shortfalls(ps.attempts, now)
        plan = ps.plan = ps.env.plan_for(job, policy, cooled, now, short)
    else:
        plan = ps.plan = ps.env.plan_for(job, policy, cooled, now)
    risks = None if ps.env.priors is None else ps.env.priors.get(now)
    obs = inputs.observations(
        job,
        ps.attempts,
        seen,
        ps.interruptions,
        plan,
        now,
        record_of(ps, progress),
        risks,
        ps.spot_prices,
    )
    return d.decide(view, obs, now)
