"""The last check before a launch reaches a cloud.

Money and residency are re-checked on the exact launch about to be sent, whatever decide()
said: the rules are those of :mod:`provisioner.core.rules` (the ones decide() and the planner
apply), and a launch that breaks one raises :class:`GuardViolation` instead of being sent.
"""

from __future__ import annotations

from policies.model import Policy
from provisioner.core.models import Placement
from provisioner.core.rules import launch_violation


class GuardViolation(RuntimeError):
    """A launch that would break a money or residency rule: a bug upstream, never sent."""


def guard_launch(policy: Policy, placement: Placement, spent_usd: float) -> None:
    """Raise :class:`GuardViolation` when the launch breaks a rule."""
    why = launch_violation(policy, placement, spent_usd)
    if why is not None:
        raise GuardViolation(why)
