"""The Python API's ``provisioner.plan()``: a policy (object or YAML path) planned against a
catalog (default: the built-in one) at the current time. The edges are here: the policy file
and the catalog are read, the clock is read, each cloud's billing rule is read from its facts
(:func:`launch_context`: the budget rule plan shares with the daemon needs what a launch is
billed at least); the ranking is the pure :func:`provisioner.core.planner.plan_offers`."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from policies.model import Policy
from provisioner.core.catalog import Catalog
from provisioner.core.models import Offer
from provisioner.core.planner import Plan, PlanContext, plan_offers
from provisioner.preflight import launch_context

__all__ = ["launch_context", "plan"]


def plan(
    policy_or_path: Policy | str | Any,
    catalog: Catalog | Iterable[Offer] | None = None,
    context: PlanContext | None = None,
    *,
    top: int | None = 10,
    estimate: bool = True,
) -> Plan:
    """Plan a policy (object or YAML path) against a catalog (default: built-in); without a
    context, planned as of now. ``estimate``: put the interruption-aware estimate
    (:mod:`provisioner.simulate.estimate`) on each placement."""
    from policies.loader import load_policy
    from provisioner.catalog_files import builtin_catalog

    policy = policy_or_path if isinstance(policy_or_path, Policy) else load_policy(policy_or_path)
    if catalog is None:
        cat = builtin_catalog()
    elif isinstance(catalog, Catalog):
        cat = catalog
    else:
        cat = Catalog.from_offers(catalog)
    ctx = context or launch_context(policy, cat, datetime.now(UTC))
    result = plan_offers(policy, cat, ctx, top=top)
    if not estimate:
        return result
    from provisioner.simulate.estimate import estimate_plan

    return estimate_plan(result, ctx.now)
