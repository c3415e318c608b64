"""May this placement be launched for this job now: the one predicate ``plan`` and the daemon
share, and the invariant that holds them to it (pure: time, spend and billing are passed in).

The rules, each under the planner's reason name (:data:`SHARED_RULES`, in the planner's order):
the policy's own (:func:`policy_refusal`: market, residency, bid cap, hourly budget), the total
budget (:func:`budget_refusal`) and the time windows (:func:`window_refusal`). The planner's
masks (:mod:`provisioner.core.planner`, when it judges launches: ``PlanContext.pacing``) are
the vectorised form of these functions, decide() filters its launches with
:func:`budget_refusal` and the launch guard (:mod:`provisioner.control.guard`) with its own
:func:`provisioner.core.rules.launch_violation`, which refuses a launch whose least charge is
more than what is left.

What a launch costs at least (:func:`first_charge_usd`): the cloud bills it its minimum (or
first increment), and the daemon cannot stop it before its next pass (``Standing.step_s``), so
its least charge is the billed time of one pass at its hourly cost, every node of a gang. What
it costs for the job (:func:`launch_cost_usd`): that, or the work left on its hardware
(:func:`hours_left`: the planner's whole-job estimate times the share of the work left, else
the job's own hours left; plus the changeover) at its hourly cost, whichever is more. A launch
fits when what is spent, what is still to be billed whatever is launched (``committed_usd``:
a switch's overlap, an instance draining under a notice) and its cost are within
``budget.max_total``.

Spend is billed between passes too: :func:`next_pass_usd` is what the instances alive now add
by the next pass, so that the budget is found exhausted at the pass *before* the bill would pass
the cap (a billing increment starts, or a second-billed instance runs on).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from policies.model import Policy
from provisioner.core.billing import PER_SECOND, Billing
from provisioner.core.models import Instance, Market, Placement
from provisioner.core.rules import (
    EPS_USD,
    budget_spent,
    hourly_cost,
    launch_price,
    over_hourly_budget,
    residency_violation,
    spot_cap,
)
from provisioner.core.views import CHANGEOVER_H, JobView

if TYPE_CHECKING:
    from numpy.typing import NDArray

#: the rules plan and the daemon both judge a launch by, in the planner's order
SHARED_RULES = (
    "provider",
    "residency",
    "denied_region",
    "market",
    "bid_cap",
    "budget_hourly",
    "budget_total",
    "window",
)
#: the daemon's default pass interval (``reconcile_interval``): how soon a launch can be stopped
DEFAULT_STEP_S = 5.0
#: slack on money comparisons (float noise, never a margin): the one the rules have used
EPS_TOTAL = 1e-9


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a placement may not be launched now: the rule (the planner's reason name) and why."""

    rule: str
    why: str


@dataclass(frozen=True, slots=True)
class Standing:
    """The job's side of a launch decision now.

    ``spent_usd``: billed so far (running attempts to now); ``work_left``: the share of the
    work left (1: none done); ``work_left_h``: the work left in the job's own hours
    (``job.compute_hours`` less what is done; None: not sized), used where a placement has no
    estimate of its own; ``changeover_h``: launch, setup and restore of a new instance;
    ``committed_usd``: what is still to be billed whatever is launched; ``step_s``: how soon
    the next pass can stop a launch; ``billing``: each cloud's billing rule (absent: per
    second, no minimum)."""

    spent_usd: float = 0.0
    work_left: float = 1.0
    work_left_h: float | None = None
    changeover_h: float = CHANGEOVER_H
    committed_usd: float = 0.0
    step_s: float = DEFAULT_STEP_S
    billing: Mapping[str, Billing] = field(default_factory=dict)

    @classmethod
    def for_policy(
        cls,
        policy: Policy,
        billing: Mapping[str, Billing] | None = None,
        step_s: float = DEFAULT_STEP_S,
        spent_usd: float = 0.0,
    ) -> Standing:
        """A job not started yet under ``policy`` (what ``plan`` and ``up`` judge)."""
        return cls(
            spent_usd=spent_usd,
            work_left_h=policy.job.compute_hours,
            step_s=step_s,
            billing=billing or {},
        )

    @classmethod
    def of(cls, job: JobView, committed_usd: float = 0.0) -> Standing:
        """The job as decide() sees it."""
        total = job.work_total_h
        left_h = None if total is None else max(0.0, total - job.work_done_h)
        share = 1.0 if not total else max(0.0, 1.0 - job.work_done_h / total)
        return cls(
            spent_usd=job.spent_usd,
            work_left=share,
            work_left_h=left_h,
            changeover_h=job.changeover_h,
            committed_usd=committed_usd,
            step_s=job.step_h * 3600.0,
            billing=job.billing,
        )


def billing_of(billing: Mapping[str, Billing], provider: str) -> Billing:
    """``provider``'s billing rule (per second, no minimum where none is known)."""
    return billing.get(provider) or PER_SECOND


def first_charge_usd(p: Placement, s: Standing) -> float:
    """The least a launch of ``p`` is billed: its cloud's minimum or first increment, or one
    pass (the soonest it can be stopped), whichever bills more; every node."""
    secs = billing_of(s.billing, p.offer.provider).billed_seconds(s.step_s)
    return hourly_cost(p) * secs / 3600.0


def hours_left(p: Placement, s: Standing) -> float | None:
    """The hours ``p`` would run for the job: the work left on its hardware (the planner's
    estimate of the whole job there times the share left, else the job's own hours left) and
    the changeover; None where the work is not sized."""
    if p.est_hours is not None:
        h = p.est_hours * s.work_left
    elif s.work_left_h is not None:
        h = s.work_left_h
    else:
        return None
    return max(0.0, h) + s.changeover_h


def launch_cost_usd(p: Placement, s: Standing) -> float:
    """What a launch of ``p`` costs the job at least (see the module docstring)."""
    first = first_charge_usd(p, s)
    h = hours_left(p, s)
    return first if h is None else max(first, hourly_cost(p) * h)


def budget_refusal(policy: Policy, p: Placement, s: Standing) -> Refusal | None:
    """Whether ``budget.max_total`` leaves room for a launch of ``p`` (None: it does)."""
    cap = policy.budget.max_total
    if cap is None:
        return None
    if budget_spent(policy, s.spent_usd):
        return Refusal("budget_total", f"budget.max_total ${cap:.4g} is spent")
    need = s.committed_usd + launch_cost_usd(p, s)
    if s.spent_usd + need <= cap + EPS_TOTAL:
        return None
    left = cap - s.spent_usd
    first = first_charge_usd(p, s)
    what = "its least charge" if need - s.committed_usd <= first + EPS_USD else "the work left"
    return Refusal(
        "budget_total",
        f"needs ${need:.4g} ({what}) of the ${left:.4g} left of budget.max_total ${cap:.4g}",
    )


def over_budget(
    policy: Policy, s: Standing, hourly: NDArray, hours: NDArray, first_s: NDArray
) -> NDArray:
    """Which of a plan's rows (hourly price, estimated hours, least billed seconds each) the
    budget leaves no room for: :func:`budget_refusal` over arrays, with the same arithmetic
    (kept beside it so that the two never drift; the planner calls this one)."""
    import numpy as np

    cap = policy.budget.max_total
    assert cap is not None
    if budget_spent(policy, s.spent_usd):
        return np.ones(len(hourly), dtype=bool)
    first = hourly * first_s / 3600.0
    fallback = np.nan if s.work_left_h is None else s.work_left_h
    with np.errstate(invalid="ignore"):
        h = np.where(np.isnan(hours), fallback, hours * s.work_left)
        h = np.maximum(0.0, h) + s.changeover_h
        work = hourly * h
        cost = np.where(np.isnan(work), first, np.maximum(first, work))
        need = s.committed_usd + cost
        return ~(s.spent_usd + need <= cap + EPS_TOTAL)


def window_refusal(policy: Policy, now: datetime) -> Refusal | None:
    """Outside every one of the policy's time windows (None: inside one, or none set)."""
    if not policy.windows:
        return None
    from policies.cron import in_window, next_window_start

    wins = [(w.cron, w.duration) for w in policy.windows]
    if in_window(wins, now):
        return None
    nxt = next_window_start(wins, now)
    return Refusal("window", f"outside the time windows; next opens {nxt or 'never'}")


def policy_refusal(policy: Policy, p: Placement) -> Refusal | None:
    """The policy's own rules for ``p`` (:func:`provisioner.core.rules.launchable`, named)."""
    o = p.offer
    if (p.market is Market.SPOT and not policy.allows_spot) or (
        p.market is Market.ON_DEMAND and not policy.allows_on_demand
    ):
        return Refusal("market", f"the policy excludes {p.market.value}")
    where = residency_violation(policy, o.provider, o.region)
    if where is not None:
        return Refusal(where, f"{o.provider}:{o.region} is outside the policy's residency")
    if o.price_for(p.market) is None:
        return Refusal("market", f"no {p.market.value} price")
    price = launch_price(p)
    if p.market is Market.SPOT and price > spot_cap(policy, p) + EPS_USD:
        return Refusal("bid_cap", f"spot ${price:.4g}/h is above the bid cap")
    if over_hourly_budget(policy, price * p.nodes):
        return Refusal("budget_hourly", f"${price * p.nodes:.4g}/h is above max_price_per_hour")
    return None


def launch_refusal(policy: Policy, p: Placement, s: Standing, now: datetime) -> Refusal | None:
    """May ``p`` be launched for a job in standing ``s`` now: the first shared rule it breaks,
    or None. The one predicate; the planner's masks are its vectorised form."""
    return policy_refusal(policy, p) or budget_refusal(policy, p, s) or window_refusal(policy, now)


# -- spend between passes and the overlap still to be billed --------------------------------


def _price(job: JobView, inst: Instance) -> float:
    if inst.price_per_hour is not None:
        return inst.price_per_hour
    cur = job.current
    if cur is not None and cur.instance_id == inst.id:
        return launch_price(cur.placement)
    return 0.0


def billed_between(job: JobView, inst: Instance, now: datetime, until: datetime) -> float:
    """What ``inst`` adds to the bill from ``now`` to ``until`` if it runs on (every node of
    a gang's unit): its cloud's billed time at ``until`` less that at ``now``."""
    if inst.launched_at is None or until <= now:
        return 0.0
    rule = billing_of(job.billing, inst.provider)
    age = max(0.0, (now - inst.launched_at).total_seconds())
    more = rule.billed_seconds(age + (until - now).total_seconds()) - rule.billed_seconds(age)
    return _price(job, inst) * max(0, more) / 3600.0 * job.policy.resources.nodes


def next_pass_usd(job: JobView, alive: Iterable[Instance], now: datetime) -> float:
    """What the live instances add to the bill by the next pass (``job.step_h`` on)."""
    until = now + timedelta(hours=job.step_h)
    return sum(billed_between(job, i, now, until) for i in alive)


def draining_usd(
    job: JobView, alive: Sequence[Instance], deadlines: Mapping[str, datetime], now: datetime
) -> float:
    """What instances under a notice still bill until their capacity goes (``deadlines``:
    instance id -> when): spent whatever is launched beside them."""
    return sum(billed_between(job, i, now, deadlines[i.id]) for i in alive if i.id in deadlines)


# -- the invariant ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlanRow:
    """One candidate as the planner judged it: the placement (offer and market, with its
    whole-job estimate) and the planner's reason for rejecting it (None: eligible)."""

    placement: Placement
    reason: str | None


def plan_daemon_disagreements(
    job: JobView, plan_rows: Sequence[PlanRow], now: datetime, committed_usd: float = 0.0
) -> list[str]:
    """Where ``plan`` and the daemon disagree for ``job`` now (empty: they agree). Each row
    that the planner judged by a shared rule (eligible, or rejected under one of
    :data:`SHARED_RULES`) must be eligible exactly when the daemon's predicate
    (:func:`launch_refusal` with the job's :meth:`Standing.of`) lets it be launched, and a row
    rejected must be rejected for the same rule. Rows the planner rejected for what only it
    judges (hardware, latency, the deadline estimate, quotas, cooldowns, capacity) are not
    compared: the daemon never sees them as candidates."""
    s = Standing.of(job, committed_usd)
    out: list[str] = []
    for row in plan_rows:
        if row.reason is not None and row.reason not in SHARED_RULES:
            continue
        p = row.placement
        got = launch_refusal(job.policy, p, s, now)
        o = p.offer
        name = f"{o.provider}:{o.location} {o.instance_type} {p.market.value}"
        if row.reason is None and got is not None:
            out.append(
                f"{name}: plan lists it eligible; the daemon refuses it ({got.rule}: {got.why})"
            )
        elif row.reason is not None and got is None:
            out.append(f"{name}: plan rejects it ({row.reason}); the daemon would launch it")
        elif row.reason is not None and got is not None and got.rule != row.reason:
            out.append(f"{name}: plan rejects it for {row.reason}, the daemon for {got.rule}")
    return out
