"""Availability priors: what a cloud says of a zone's spot capacity before we have seen it (pure).

Three clouds publish such figures, each in its own unit (``provisioner priors --refresh`` reads
them and caches them in the store with when they were read):

* AWS ``GetSpotPlacementScores``: a score from 1 to 10 per zone (how likely a spot request of
  that type is to be fulfilled there now, :data:`PLACEMENT_SCORE`), and the zone's spot price
  history (``DescribeSpotPriceHistory``), kept as its coefficient of variation
  (:data:`PRICE_VOLATILITY`: a price that moves a lot is a market under pressure);
* Azure Resource Graph ``SpotResources``: the eviction rate band of a size in a region over
  the last days (``0-5`` ... ``20+`` percent, :data:`EVICTION_RATE`);
* Alibaba ``DescribeSpotAdvice``: the interruption rate of a type in a zone over the last 30
  days (a fraction, :data:`SPOT_ADVICE`).

Each reads as one number: a monthly interruption risk (:func:`risk`), the unit of the Spot
Advisor bands (:data:`provisioner.core.catalog.BAND_RISK`) that the planner's interruption
preference and the estimate's priors already use. A placement score is a fulfilment
likelihood, not an interruption rate: it maps onto the bands by its fifths (9-10 as ``<5%``
... 1-2 as ``>20%``), the scale on which a score of 5-6 sits at the planner's default risk.
A zone's price volatility alone sets no risk; it raises the zone's risk by up to half. A
placement score also says how much of the time the zone has capacity (:func:`score_share`),
which the estimate's prior uses for the zone's outages and its state now
(:func:`provisioner.simulate.priors.new_account_rates`).
:func:`zone_risks` folds a set of priors into one risk per (provider, zone or region, type);
a zone with no prior keeps what it had (its offer's band, else the default), so nothing
changes where no prior is known.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from provisioner.core.catalog import BAND_RISK
from provisioner.core.models import Offer
from provisioner.core.views import ZoneRisk

if TYPE_CHECKING:
    import numpy as np

PLACEMENT_SCORE = "placement_score"
PRICE_VOLATILITY = "price_volatility"
EVICTION_RATE = "eviction_rate"
SPOT_ADVICE = "spot_advice"
KINDS = (PLACEMENT_SCORE, PRICE_VOLATILITY, EVICTION_RATE, SPOT_ADVICE)

#: Azure's eviction rate bands (``properties.evictionRate``) -> monthly risk (the mid-points,
#: as the Spot Advisor bands; ``20+`` taken as 25%)
EVICTION_BANDS = {"0-5": 0.025, "5-10": 0.075, "10-15": 0.125, "15-20": 0.175, "20+": 0.25}
#: the most a zone's price volatility raises its risk (a factor of 1 + this)
VOLATILITY_CAP = 0.5


@dataclass(frozen=True, slots=True)
class ZonePrior:
    """One cloud figure for one instance type in one zone (or, Azure, a region)."""

    provider: str
    region: str
    zone: str  # "" where the figure is per region (Azure)
    instance_type: str
    kind: str  # one of KINDS
    value: float  # the score, coefficient of variation, band mid-point or rate
    label: str = ""  # the cloud's own text ("0-5", "0-5%") where it gives one
    at: datetime | None = None  # when it was read

    @property
    def location(self) -> str:
        return self.zone or self.region

    def as_dict(self, now: datetime | None = None) -> dict[str, Any]:
        age = None if self.at is None or now is None else (now - self.at).total_seconds()
        r = risk(self)
        return {
            "provider": self.provider,
            "region": self.region,
            "zone": self.zone,
            "instance_type": self.instance_type,
            "kind": self.kind,
            "value": self.value,
            "label": self.label,
            "risk": None if r is None else round(r, 4),
            "at": None if self.at is None else self.at.isoformat(),
            "age_s": None if age is None else round(age, 1),
        }


def score_risk(score: float) -> float:
    """A placement score (1-10) as a monthly risk: 9-10 ``<5%``, 7-8 ``5-10%``, 5-6
    ``10-15%``, 3-4 ``15-20%``, 1-2 ``>20%`` (the bands' mid-points)."""
    fifth = min(max(math.ceil(float(score) / 2.0), 1), 5)  # 1..5, 5 the best
    return (0.25, 0.175, 0.125, 0.075, 0.025)[fifth - 1]


def eviction_risk(label: str) -> float | None:
    """Azure's ``evictionRate`` text (``0-5``, ``20+``; a ``%`` is allowed) as a monthly risk."""
    return EVICTION_BANDS.get(label.strip().replace(" ", "").removesuffix("%"))


def risk(p: ZonePrior) -> float | None:
    """The monthly interruption risk one prior says (None: it sets none on its own)."""
    if p.kind == PLACEMENT_SCORE:
        return score_risk(p.value)
    if p.kind in (EVICTION_RATE, SPOT_ADVICE):
        return max(float(p.value), 0.0)
    return None


def volatility(prices: Iterable[float]) -> float | None:
    """The coefficient of variation of a zone's spot prices (None: fewer than two)."""
    xs = [float(x) for x in prices if x == x and x > 0]
    if len(xs) < 2:
        return None
    mean = sum(xs) / len(xs)
    var = sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)
    return math.sqrt(var) / mean if mean > 0 else None


Key = tuple[str, str, str]  # (provider, zone or region, instance type)


def zone_risks(priors: Iterable[ZonePrior]) -> dict[Key, ZoneRisk]:
    """One :class:`ZoneRisk` per (provider, zone or region, type): the mean of the risks its
    priors set (AWS's score, Azure's band, Alibaba's rate) times its volatility factor."""
    risks: dict[Key, list[float]] = {}
    factor: dict[Key, float] = {}
    names: dict[Key, list[str]] = {}
    shares: dict[Key, list[float]] = {}
    for p in priors:
        key = (p.provider, p.location, p.instance_type)
        names.setdefault(key, []).append(describe(p))
        if p.kind == PRICE_VOLATILITY:
            factor[key] = 1.0 + min(max(p.value, 0.0), VOLATILITY_CAP)
            continue
        if p.kind == PLACEMENT_SCORE:
            shares.setdefault(key, []).append(score_share(p.value))
        r = risk(p)
        if r is not None:
            risks.setdefault(key, []).append(r)
    out: dict[Key, ZoneRisk] = {}
    for key, labels in names.items():
        rs = risks.get(key)
        up = shares.get(key)
        out[key] = ZoneRisk(
            None if not rs else sum(rs) / len(rs),
            factor.get(key, 1.0),
            ", ".join(labels),
            None if not up else sum(up) / len(up),
        )
    return out


def score_share(score: float) -> float:
    """A placement score (1-10) as the share of the time the zone has spot capacity: the
    middle of its tenth, (s - 0.5) / 10 (a score is how likely a request is fulfilled now)."""
    return (min(max(float(score), 1.0), 10.0) - 0.5) / 10.0


def for_offer(risks: Mapping[Key, ZoneRisk], offer: Offer) -> ZoneRisk | None:
    """The zone's risk where one is known, else the region's (Azure's figures are per region)."""
    if offer.zone:
        hit = risks.get((offer.provider, offer.zone, offer.instance_type))
        if hit is not None:
            return hit
    return risks.get((offer.provider, offer.region, offer.instance_type))


def risk_column(
    base: np.ndarray, rows: np.ndarray, offers: Sequence[Offer], risks: Mapping[Key, ZoneRisk]
) -> np.ndarray:
    """The planner's interruption risk of candidate rows (``base``: their bands' risks, NaN
    where unknown) with each known prior applied; ``base`` itself where there are none."""
    if not risks:
        return base
    from provisioner.core.planner.planrows import DEFAULT_SPOT_RISK

    out = base.copy()
    for i, row in enumerate(rows):
        zr = for_offer(risks, offers[int(row)])
        if zr is not None:
            b = float(out[i])
            out[i] = zr.apply(DEFAULT_SPOT_RISK if b != b else b)
    return out


def prior_life_h(
    risks: Mapping[Key, ZoneRisk],
    offers: Sequence[Offer],
    life_h: float | None = None,
    default: float | None = None,
) -> list[float] | None:
    """The prior mean spot lifetime of each offer's zone for decide()'s availability model:
    ``life_h`` (default: its PRIOR_LIFE_H) where no prior is known (what it assumes today), scaled by the default risk
    over the zone's risk where one is (a zone at half the risk is expected to run twice as
    long). None where no offer has a prior."""
    if not risks:
        return None
    from provisioner.core.availability import PRIOR_LIFE_H
    from provisioner.core.planner.planrows import DEFAULT_SPOT_RISK

    life_h = PRIOR_LIFE_H if life_h is None else life_h
    default = DEFAULT_SPOT_RISK if default is None else default
    out: list[float] = []
    hit = False
    for o in offers:
        zr = for_offer(risks, o)
        if zr is None:
            out.append(life_h)
            continue
        hit = True
        out.append(life_h * default / max(zr.apply(default), 1e-6))
    return out if hit else None


def describe(p: ZonePrior) -> str:
    """``placement score 9``, ``eviction rate 0-5%``, ``30-day interruption rate 3%``."""
    if p.kind == PLACEMENT_SCORE:
        return f"placement score {p.value:g}"
    if p.kind == PRICE_VOLATILITY:
        return f"price volatility {p.value:.1%}"
    if p.kind == EVICTION_RATE:
        return f"eviction rate {(p.label or f'{p.value:.0%}').removesuffix('%')}%"
    return f"30-day interruption rate {p.label or f'{p.value:.1%}'}"


def band_of(r: float) -> str:
    """The Spot Advisor band a monthly risk falls in (for display)."""
    for band, mid in BAND_RISK.items():
        if r <= mid + 0.025 + 1e-9:
            return band
    return ">20%"
