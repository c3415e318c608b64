"""A sustained workload placed by the planner and costed every way the policy allows.

:func:`compare` narrows the policy to each phase of the profile, plans it with the same
:func:`provisioner.core.planner.plan_offers` as ``provisioner plan`` (residency, bid cap,
hourly budget, capacity), keeps the regions where every phase can be placed, and costs each
with the model of :mod:`provisioner.core.tco`. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from policies.gpus import canonical_gpu
from policies.model import Policy
from policies.profile import Phase, Profile
from provisioner.core.catalog import BAND_RISK, Catalog
from provisioner.core.models import Market, Placement
from provisioner.core.planner import PlanContext, plan_offers
from provisioner.core.tco import (
    TERM_MONTHS,
    Commitment,
    Leg,
    Option,
    committed,
    pay_per_use,
    spot_share,
)

# -- placing the phases with the planner -----------------------------------------------------


def _divisors_desc(n: int) -> list[int]:
    return [k for k in range(n, 0, -1) if n % k == 0]


def phase_gpus(policy: Policy, phase: Phase) -> list[str]:
    """The phase's GPU models that the policy's ``resources.gpus`` (if any) allows."""
    if policy.resources.gpus is None:
        return phase.gpus
    allowed = {canonical_gpu(g) for g in policy.resources.gpus}
    return [g for g in phase.gpus if canonical_gpu(g) in allowed]


def phase_policy(policy: Policy, phase: Phase, gpus_per_instance: int) -> Policy:
    """The policy narrowed to one phase: its GPUs (those the policy allows),
    ``gpus_per_instance`` per instance, and no job-sized rules (deadline, total budget: a
    sustained workload is costed over months)."""
    res = policy.resources.model_copy(
        update={
            "gpus": phase_gpus(policy, phase),
            "gpu_count": gpus_per_instance,
            "workload": None,
        }
    )
    job = policy.job.model_copy(update={"compute_hours": None})
    budget = policy.budget.model_copy(update={"max_total": None})
    return policy.model_copy(
        update={"resources": res, "job": job, "budget": budget, "deadline": None, "windows": []}
    )


@dataclass(frozen=True)
class RegionLegs:
    provider: str
    region: str
    legs: list[Leg]


def place_phases(
    profile: Profile, policy: Policy, catalog: Catalog, context: PlanContext
) -> tuple[list[RegionLegs], dict[str, int]]:
    """Per (provider, region) where every phase can be placed under the policy: the cheapest
    instance type for each phase (instances whose GPUs divide the phase's count; where a
    region has none, one larger instance, over-provisioned). Also the planner's rejections,
    summed over the phases' plans."""
    ctx = replace(context, pacing=False)
    per_region: dict[tuple[str, str], dict[str, Leg]] = {}
    rejected: dict[str, int] = {}
    for phase in profile.phases:
        best: dict[tuple[str, str], Leg] = {}
        if not phase_gpus(policy, phase):
            continue  # the policy allows none of its GPUs: no region can place it
        exact = _divisors_desc(phase.count)
        larger = [k for k in (2, 4, 8, 16) if k > phase.count]
        for k in exact + larger:
            if k > phase.count and best and len(best) >= len(_regions_with(catalog)):
                break
            plan = plan_offers(phase_policy(policy, phase, k), catalog, ctx, top=None)
            for reason, count in plan.rejected.items():
                rejected[reason] = rejected.get(reason, 0) + count
            by_type: dict[tuple[str, str, str], list[Placement]] = {}
            for pl in plan.placements:
                o = pl.offer
                by_type.setdefault((o.provider, o.region, o.instance_type), []).append(pl)
            for (prov, reg, itype), pls in by_type.items():
                od = [p.price_per_hour for p in pls if p.market is Market.ON_DEMAND]
                spot = [p for p in pls if p.market is Market.SPOT]
                sp = min(spot, key=lambda p: p.price_per_hour) if spot else None
                risk = BAND_RISK.get(sp.offer.interruption_band) if sp else None
                leg = Leg(
                    phase,
                    itype,
                    k,
                    max(phase.count // k, 1),
                    min(od) if od else None,
                    sp.price_per_hour if sp else None,
                    spot_share(risk),
                )
                key = (prov, reg)
                if k > phase.count and key in best and best[key].gpus_per_instance <= phase.count:
                    continue  # an exact fit exists here: no over-provisioning
                if key not in best or _leg_cost(leg) < _leg_cost(best[key]):
                    best[key] = leg
        for key, leg in best.items():
            per_region.setdefault(key, {})[phase.name] = leg
    out = [
        RegionLegs(p, r, [legs[ph.name] for ph in profile.phases])
        for (p, r), legs in sorted(per_region.items())
        if len(legs) == len(profile.phases)
    ]
    return out, rejected


def _regions_with(catalog: Catalog) -> set[tuple[str, str]]:
    return {(o.provider, o.region) for o in catalog.offers}


def _leg_cost(leg: Leg) -> float:
    prices = [p for p in (leg.on_demand, leg.spot_blend) if p is not None]
    return leg.instances * min(prices) if prices else math.inf


# -- the whole comparison --------------------------------------------------------------------


@dataclass(frozen=True)
class TcoResult:
    profile: Profile
    policy: Policy
    regions: list[RegionLegs]
    options: list[Option]  # eligible, cheapest total first
    rejected: dict[str, int]  # planner rejections (candidates), and "budget_total" (options)
    assumptions: tuple[str, ...]
    notes: tuple[str, ...] = ()

    @property
    def best(self) -> Option | None:
        return self.options[0] if self.options else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile.name,
            "policy": self.policy.name,
            "horizon_months": self.profile.horizon_months,
            "currency": "USD",
            "phases": [
                {
                    "name": p.name,
                    "gpus": [canonical_gpu(g) or g for g in p.gpus],
                    "count": p.count,
                    "hours_per_day": p.daily_hours,
                    "days_per_week": p.days_per_week,
                    "utilisation": round(p.utilisation, 4),
                }
                for p in self.profile.phases
            ],
            "regions": [
                {
                    "provider": r.provider,
                    "region": r.region,
                    "legs": [leg.as_dict() for leg in r.legs],
                }
                for r in self.regions
            ],
            "options": [o.as_dict() for o in self.options],
            "best": self.best.as_dict() if self.best else None,
            "rejected": self.rejected,
            "assumptions": list(self.assumptions),
            "notes": list(self.notes),
        }


ASSUMPTIONS = (
    "a month is 730 hours; prices are list prices in USD, without taxes or egress",
    "spot with fallback: the expected spot share is 1 - the zone's monthly interruption band "
    "(its midpoint; 10% where the cloud publishes no band); the rest runs on on-demand",
    "a commitment covers the peak of an instance type's concurrent instances 24/7 (phases whose "
    "daily windows do not overlap share them) and is paid whether used or not",
    "a phase without a commitment offer for its instance type runs on-demand in that option",
    "commitments renew at the same price at each term's end; a term running past the horizon is "
    "still owed (owed after)",
    "commitment prices come from the offline file provisioner/data/commitments.csv (see its "
    "source column: real prices for AWS and GCP, published discount rates elsewhere)",
)


def compare(
    profile: Profile,
    policy: Policy,
    catalog: Catalog,
    commitments: Iterable[Commitment],
    context: PlanContext,
) -> TcoResult:
    """Every option the policy allows, in every region it allows, cheapest total first."""
    regions, rejected = place_phases(profile, policy, catalog, context)
    horizon = profile.horizon_months
    allowed = {(r.provider, r.region) for r in regions}
    grouped: dict[tuple[str, str], dict[tuple[str, str, str], dict[str, Commitment]]] = {}
    for c in commitments:
        if (c.provider, c.region) in allowed and c.term in TERM_MONTHS:
            grouped.setdefault((c.provider, c.region), {}).setdefault(
                (c.option, c.term, c.payment), {}
            )[c.instance_type] = c
    options: list[Option] = []
    for r in regions:
        if policy.allows_on_demand and all(leg.on_demand is not None for leg in r.legs):
            options.append(pay_per_use(r.provider, r.region, r.legs, "on-demand", horizon))
        if (
            policy.allows_spot
            and policy.allows_on_demand
            and all(leg.spot_blend is not None for leg in r.legs)
        ):
            options.append(pay_per_use(r.provider, r.region, r.legs, "spot+fallback", horizon))
        if not policy.allows_on_demand:
            continue  # commitments are reserved capacity, like on-demand
        for (_opt, _term, _pay), by_type in sorted(grouped.get((r.provider, r.region), {}).items()):
            opt = committed(r.provider, r.region, r.legs, by_type, horizon)
            if opt is not None:
                options.append(opt)
    cap = policy.budget.max_total
    if cap is not None:
        over = [o for o in options if o.total > cap]
        if over:
            rejected["budget_total"] = rejected.get("budget_total", 0) + len(over)
        options = [o for o in options if o.total <= cap]
    options.sort(key=lambda o: (o.total, o.provider, o.region, o.label))
    notes: list[str] = []
    if not policy.allows_on_demand:
        notes.append(
            "the policy allows spot only: on-demand, spot with on-demand fallback and "
            "commitments (reserved capacity) are all outside it; use spot-then-on-demand"
        )
    for phase in profile.phases:
        if not phase_gpus(policy, phase):
            notes.append(
                f"phase {phase.name}: none of its GPUs ({', '.join(phase.gpus)}) is in the "
                "policy's resources.gpus"
            )
    if not regions:
        notes.append("no region the policy allows can place every phase")
    return TcoResult(profile, policy, regions, options, rejected, ASSUMPTIONS, tuple(notes))
