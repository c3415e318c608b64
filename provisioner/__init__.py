"""provisioner: keep long GPU jobs on the cheapest eligible capacity, through interruptions.

Python API (imported lazily, so ``import provisioner`` is cheap and loads no cloud SDK)::

    import provisioner
    plan = provisioner.plan("policies/spot-finetune.yaml")
    for p in plan.placements: ...
    catalog = provisioner.Catalog.load()            # the built-in catalog
    job = provisioner.up("policies/spot-finetune.yaml", provider="sim")
    job.wait()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "Catalog": ("provisioner.catalog_files", "Catalog"),
    "plan": ("provisioner.planning", "plan"),
    "Plan": ("provisioner.core.planner", "Plan"),
    "PlanContext": ("provisioner.core.planner", "PlanContext"),
    "Policy": ("policies.model", "Policy"),
    "load_policy": ("policies.loader", "load_policy"),
    "PolicyError": ("policies.loader", "PolicyError"),
    "Offer": ("provisioner.core.models", "Offer"),
    "Placement": ("provisioner.core.models", "Placement"),
    "Market": ("provisioner.core.models", "Market"),
    "up": ("provisioner.api", "up"),
    "Job": ("provisioner.api", "Job"),
    "JobFailed": ("provisioner.api", "JobFailed"),
    "Refused": ("provisioner.preflight", "Refused"),
    "NothingEligible": ("provisioner.preflight", "NothingEligible"),
}

__all__ = [*_LAZY, "__version__"]

if TYPE_CHECKING:
    from policies.loader import PolicyError, load_policy
    from policies.model import Policy
    from provisioner.api import Job, JobFailed, up
    from provisioner.catalog_files import Catalog
    from provisioner.core.models import Market, Offer, Placement
    from provisioner.core.planner import Plan, PlanContext
    from provisioner.planning import plan
    from provisioner.preflight import NothingEligible, Refused


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'provisioner' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(target[0]), target[1])
    globals()[name] = value
    return value
