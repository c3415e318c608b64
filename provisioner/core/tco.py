"""Total cost of a sustained workload: spot with fallback, on-demand and commitments.

Pure: the profile, the policy, the catalog's offers and the commitment prices come in; the
options per cloud region, their cumulative cost month by month and their break-even
utilisation go out. No I/O, no clock (the planner's ``now`` is passed in).

The model, per phase of the profile (``n`` instances used ``u`` of all hours, ``H`` = 730 h
a month):

* on-demand: ``n · u · H · od`` a month;
* spot with on-demand fallback: ``n · u · H · (s · spot + (1 - s) · od)``, where the expected
  spot share ``s = 1 - r`` and ``r`` is the zone's monthly interruption band (its midpoint;
  10% where the cloud publishes none): the hours lost to interruptions are assumed to run
  on on-demand instead. Restart overheads are not counted (see ``provisioner plan``);
* a commitment (an effective hourly rate ``c`` per instance over the whole term, of which
  ``upfront`` is paid at the start of each term): ``n · (c · H - upfront / term_months)`` a
  month, plus ``n · upfront`` at the start of every term; it is paid whether used or not.
  A phase whose instance type has no such offer in the region runs on-demand in that option.
  A term that runs past the horizon is still owed: ``owed_after`` says how much.

Break-even utilisation of a commitment against a pay-per-use price ``p``: ``u* = c / p``;
above ``u*`` committing costs less (a value above 1 means it never does).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from policies.gpus import canonical_gpu
from policies.model import Policy
from policies.profile import HOURS_PER_MONTH, Phase, Profile
from provisioner.core.catalog import BAND_RISK, Catalog
from provisioner.core.models import Market, Placement
from provisioner.core.planner import DEFAULT_SPOT_RISK, PlanContext, plan_offers

TERM_MONTHS = {"1y": 12, "3y": 36}
PAYMENTS = ("all", "partial", "no")


@dataclass(frozen=True)
class Commitment:
    """One commitment offer for one instance type (a row of commitments.csv)."""

    provider: str
    region: str
    instance_type: str
    term: str  # "1y" or "3y"
    option: str  # the cloud's name: reserved-instance, savings-plan-compute, cud, ...
    payment: str  # all / partial / no (upfront)
    hourly: float  # effective USD per instance-hour over the term, upfront included
    upfront: float  # USD per instance paid at the start of the term
    source: str = ""
    date: str = ""

    @property
    def term_months(self) -> int:
        return TERM_MONTHS[self.term]

    @property
    def monthly(self) -> float:
        """What one instance costs each month besides the upfront payment."""
        if self.payment == "all":
            return 0.0  # all paid at the start (the rate's rounding aside)
        return max(self.hourly * HOURS_PER_MONTH - self.upfront / self.term_months, 0.0)


def break_even(commit_hourly: float, pay_per_use_hourly: float | None) -> float | None:
    """The utilisation above which the commitment costs less than paying per hour used."""
    if pay_per_use_hourly is None or pay_per_use_hourly <= 0:
        return None
    return commit_hourly / pay_per_use_hourly


def spot_share(band_risk: float | None) -> float:
    """Expected share of hours on spot (the rest falls back to on-demand): 1 - band risk."""
    r = DEFAULT_SPOT_RISK if band_risk is None or math.isnan(band_risk) else band_risk
    return min(max(1.0 - r, 0.0), 1.0)


@dataclass(frozen=True)
class Leg:
    """A phase placed in a region: ``instances`` of ``instance_type`` at these prices."""

    phase: Phase
    instance_type: str
    gpus_per_instance: int
    instances: int
    on_demand: float | None
    spot: float | None
    spot_share: float

    @property
    def spot_blend(self) -> float | None:
        """Expected price per hour of spot with on-demand fallback."""
        if self.spot is None:
            return None
        if self.on_demand is None:
            return self.spot
        return self.spot_share * self.spot + (1.0 - self.spot_share) * self.on_demand

    def as_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase.name,
            "instance_type": self.instance_type,
            "gpus_per_instance": self.gpus_per_instance,
            "over_provisioned": self.gpus_per_instance * self.instances > self.phase.count,
            "instances": self.instances,
            "utilisation": round(self.phase.utilisation, 4),
            "on_demand_per_hour": self.on_demand,
            "spot_per_hour": self.spot,
            "expected_spot_share": round(self.spot_share, 4),
            "spot_with_fallback_per_hour": None
            if self.spot_blend is None
            else round(self.spot_blend, 6),
        }


@dataclass(frozen=True)
class Option:
    """One way to buy the whole workload in one region, costed over the horizon."""

    provider: str
    region: str
    kind: str  # on-demand / spot+fallback / the commitment option's name
    term: str | None
    payment: str | None
    monthly: float  # recurring USD a month
    upfront_at: tuple[tuple[int, float], ...]  # (month, USD) upfront payments
    owed_after: float  # committed USD still due after the horizon
    horizon_months: int
    break_even_on_demand: tuple[float | None, ...] = ()  # per leg (commitments)
    break_even_spot: tuple[float | None, ...] = ()
    #: per leg: the share of the committed instances' hours its instance type is used
    utilisation: tuple[float | None, ...] = ()
    uncovered: tuple[str, ...] = ()  # phases with no such offer (run on-demand)
    sources: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        parts = [self.kind] + [
            p for p in (self.term, self.payment and f"{self.payment}-upfront") if p
        ]
        return " ".join(parts)

    def cumulative(self) -> list[float]:
        """Cumulative USD at the end of months 0..horizon (month 0: upfront payments only)."""
        out = []
        total = 0.0
        ups = dict(self.upfront_at)
        for m in range(self.horizon_months + 1):
            if m > 0:
                total += self.monthly
            total += ups.get(m, 0.0)
            out.append(total)
        return out

    @property
    def horizon_cost(self) -> float:
        return self.monthly * self.horizon_months + sum(v for _, v in self.upfront_at)

    @property
    def total(self) -> float:
        """Horizon cost plus what a commitment still owes after the horizon."""
        return self.horizon_cost + self.owed_after

    def as_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "region": self.region,
            "option": self.kind,
            "term": self.term,
            "payment": self.payment,
            "label": self.label,
            "monthly": round(self.monthly, 2),
            "upfront": [{"month": m, "usd": round(v, 2)} for m, v in self.upfront_at],
            "horizon_cost": round(self.horizon_cost, 2),
            "owed_after_horizon": round(self.owed_after, 2),
            "total": round(self.total, 2),
            "committed_utilisation": [_r(v) for v in self.utilisation],
            "break_even_utilisation_vs_on_demand": [_r(v) for v in self.break_even_on_demand],
            "break_even_utilisation_vs_spot": [_r(v) for v in self.break_even_spot],
            "phases_on_demand": list(self.uncovered),
            "sources": list(self.sources),
            "cumulative": [round(v, 2) for v in self.cumulative()],
        }


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def pay_per_use(provider: str, region: str, legs: list[Leg], kind: str, horizon: int) -> Option:
    """On-demand or spot with fallback for every leg."""
    monthly = 0.0
    for leg in legs:
        price = leg.on_demand if kind == "on-demand" else leg.spot_blend
        assert price is not None
        monthly += leg.instances * leg.phase.monthly_hours * price
    return Option(provider, region, kind, None, None, monthly, (), 0.0, horizon)


def committed(
    provider: str,
    region: str,
    legs: list[Leg],
    offers: Mapping[str, Commitment],
    horizon: int,
) -> Option | None:
    """The workload with every instance type that has an offer in ``offers`` (by instance
    type, one option/term/payment) committed 24/7 for the peak of its concurrent instances
    (phases in windows that do not overlap share them); other legs pay on-demand. None: no
    leg covered."""
    first = next(iter(offers.values()), None)
    if first is None:
        return None
    months = first.term_months
    monthly = 0.0
    upfront_each = 0.0
    committed_monthly = 0.0
    uncovered: list[str] = []
    by_type: dict[str, list[Leg]] = {}
    for leg in legs:
        if leg.instance_type in offers:
            by_type.setdefault(leg.instance_type, []).append(leg)
        else:
            monthly += leg.instances * leg.phase.monthly_hours * (leg.on_demand or 0.0)
            uncovered.append(leg.phase.name)
    if not by_type:
        return None
    be_od: list[float | None] = []
    be_spot: list[float | None] = []
    sources: list[str] = []
    used: dict[str, float] = {}
    for itype, group in by_type.items():
        c = offers[itype]
        n = peak_instances(group)
        used[itype] = sum(leg.instances * leg.phase.utilisation for leg in group) / n
        monthly += n * c.monthly
        committed_monthly += n * c.monthly
        upfront_each += n * c.upfront
        if c.source not in sources:
            sources.append(c.source)
    for leg in legs:
        offer = offers.get(leg.instance_type)
        be_od.append(None if offer is None else break_even(offer.hourly, leg.on_demand))
        be_spot.append(None if offer is None else break_even(offer.hourly, leg.spot_blend))
    starts = tuple((m, upfront_each) for m in range(0, horizon, months) if upfront_each > 0)
    last_start = ((horizon - 1) // months) * months
    owed = committed_monthly * (last_start + months - horizon)
    return Option(
        provider,
        region,
        first.option,
        first.term,
        first.payment,
        monthly,
        starts,
        owed,
        horizon,
        tuple(be_od),
        tuple(be_spot),
        tuple(used.get(leg.instance_type) for leg in legs),
        tuple(uncovered),
        tuple(sources),
    )


SLOTS = 24 * 12  # five-minute slots of a day


def peak_instances(legs: Iterable[Leg]) -> int:
    """The most instances in use at once: legs with a daily window add up only where their
    windows overlap; a leg given as hours a day (no window) is taken to overlap every other."""
    from policies.profile import window_bounds

    slots = [0] * SLOTS
    always = 0
    for leg in legs:
        if leg.phase.window is None:
            always += leg.instances
            continue
        start, length = window_bounds(leg.phase.window)
        for i in range(start // 5, (start + length) // 5):
            slots[i % SLOTS] += leg.instances
    return always + max(slots)


# -- placing the phases with the planner -----------------------------------------------------


def _divisors_desc(n: int) -> list[int]:
    return [k for k in range(n, 0, -1) if n % k == 0]


def phase_policy(policy: Policy, phase: Phase, gpus_per_instance: int) -> Policy:
    """The policy narrowed to one phase: its GPU, ``gpus_per_instance`` per instance, and no
    job-sized rules (deadline, total budget: a sustained workload is costed over months)."""
    res = policy.resources.model_copy(
        update={"gpus": phase.gpus, "gpu_count": gpus_per_instance, "workload": None}
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
    if not regions:
        notes.append("no region the policy allows can place every phase")
    return TcoResult(profile, policy, regions, options, rejected, ASSUMPTIONS, tuple(notes))
