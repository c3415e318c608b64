"""The last check before a launch reaches a cloud.

Money and residency are re-checked on the exact launch about to be sent, whatever decide()
said: the rules are those of :mod:`provisioner.core.rules` (the ones decide() and the planner
apply), and a launch that breaks one raises :class:`GuardViolation` instead of being sent.
Among them: a launch whose least charge (its cloud's billing minimum, every node) is more than
what is left of ``budget.max_total`` (:func:`least_charge_usd`).
"""

from __future__ import annotations

from policies.model import Policy
from provisioner.core.models import Placement
from provisioner.core.rules import hourly_cost, launch_violation
from provisioner.core.views import MIN_STEP_S
from provisioner.errors import ControlError


class GuardViolation(ControlError, RuntimeError):
    """A launch that would break a money or residency rule: a bug upstream, never sent."""


def least_charge_usd(placement: Placement) -> float:
    """What the launch is billed however soon it is stopped: its cloud's minimum (or first
    increment, or the shortest pass: 1 s) at its hourly cost, every node (a cloud without
    facts: per second). decide() holds a launch to at least this (core.admission)."""
    from providers.facts import billing_for

    try:
        rule = billing_for(placement.offer.provider)
    except (ValueError, TypeError):
        from provisioner.core.billing import PER_SECOND

        rule = PER_SECOND
    return hourly_cost(placement) * rule.billed_seconds(MIN_STEP_S) / 3600.0


def guard_launch(policy: Policy, placement: Placement, spent_usd: float) -> None:
    """Raise :class:`GuardViolation` when the launch breaks a rule."""
    least = least_charge_usd(placement) if policy.budget.max_total is not None else 0.0
    why = launch_violation(policy, placement, spent_usd, least)
    if why is not None:
        raise GuardViolation(why)
