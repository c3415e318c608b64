"""Total cost of a sustained workload: spot with fallback, on-demand and commitments.

Pure: the profile, the policy, the catalog's offers and the commitment prices come in; the
options per cloud region, their cumulative cost month by month and their break-even
utilisation go out. No I/O, no clock (the planner's ``now`` is passed in).

The model (placement is :mod:`provisioner.core.planner.tco_plan`), per phase of the profile (``n`` instances used ``u`` of all hours, ``H`` = 730 h
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
from dataclasses import dataclass
from typing import Any

from policies.profile import HOURS_PER_MONTH, Phase
from provisioner.core.planner.planrows import DEFAULT_SPOT_RISK

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
