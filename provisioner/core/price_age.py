"""Which price a plan ranks an offer by, where it comes from and how old it is (pure).

Two sources can price an offer: the catalog's row (a date, ``price_date``: the built-in
catalog's or a user's file) and a live quote that ``provisioner catalog refresh`` stored (the
time it was read: the price in effect then, however long ago the cloud last changed it).
:func:`freshest` takes, per offer, whichever is newer, and says so in a :class:`PriceOrigin`:
the plan shows each price's source and age, and warns when the price it would launch on is
older than :data:`STALE_DAYS`. A quote for a zone (or region) the catalog has no row of its
type in is planned as an offer of its own (:func:`quoted_offers`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

if TYPE_CHECKING:
    from provisioner.core.models import Offer

#: a price older than this many days is shown with its age, and warned about when it is the
#: price of the plan's first placement (spot prices move daily; list prices a few times a year)
STALE_DAYS = 30

LIVE = "live"  # a quote `provisioner catalog refresh` stored
CATALOG = "catalog"  # the catalog's row

OfferKey = tuple[str, str, str, str]  # provider, region, zone, instance type
PriceKey = tuple[str, str, str, str, str]  # the offer's key and the market ("spot", "on-demand")


def offer_key(o: Offer) -> OfferKey:
    return (o.provider, o.region, o.zone, o.instance_type)


def price_key(o: Offer, market: str) -> PriceKey:
    """The key of an offer's price in one market (``Market.value``)."""
    return (o.provider, o.region, o.zone, o.instance_type, market)


@dataclass(frozen=True, slots=True)
class PriceOrigin:
    """Where an offer's price comes from and when it was true (None: undated)."""

    source: str  # LIVE or CATALOG
    at: datetime | None  # a live quote: when it was read; a catalog row: its date
    #: a live quote: when the cloud last changed the price, where it says
    changed: datetime | None = None

    def age(self, now: datetime) -> timedelta | None:
        return None if self.at is None else max(now - self.at, timedelta(0))

    def stale(self, now: datetime, days: float = STALE_DAYS) -> bool:
        age = self.age(now)
        return age is not None and age > timedelta(days=days)

    def describe(self, now: datetime) -> str:
        """``live, 12 min old`` / ``catalog of 2024-06-30, 523 days old`` / ``catalog, undated``."""
        if self.at is None:
            return f"{self.source}, undated"
        what = "live" if self.source == LIVE else f"catalog of {self.at:%Y-%m-%d}"
        text = f"{what}, {age_text(self.age(now) or timedelta(0))} old"
        if self.changed is not None and self.at - self.changed >= timedelta(days=1):
            text += f", unchanged since {self.changed:%Y-%m-%d}"
        return text

    def as_dict(self, now: datetime) -> dict[str, Any]:
        age = self.age(now)
        return {
            "price_source": self.source,
            "price_at": None if self.at is None else self.at.isoformat(),
            "price_age_days": None if age is None else round(age.total_seconds() / 86400, 4),
            "price_changed_at": None if self.changed is None else self.changed.isoformat(),
        }


def age_text(age: timedelta) -> str:
    s = age.total_seconds()
    if s < 3600:
        return f"{max(s / 60, 0):.0f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{int(s // 86400)} days"


def catalog_time(price_date: str) -> datetime | None:
    """A catalog row's ``price_date`` (``2024-06-30`` or an ISO time) as an aware UTC time."""
    text = (price_date or "").strip()
    if not text:
        return None
    try:
        if len(text) == 10:
            d = date.fromisoformat(text)
            return datetime(d.year, d.month, d.day, tzinfo=UTC)
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _aware(t: datetime | None) -> datetime | None:
    if t is None:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


class Offers(Protocol):
    """What :func:`freshest` reads of a catalog: its offers and sources, in a dataclass that
    :func:`dataclasses.replace` builds anew. :class:`provisioner.core.catalog.Catalog` is one;
    it prices itself with :func:`freshest`, so this module names it by its shape."""

    __dataclass_fields__: ClassVar[dict[str, Any]]
    offers: list[Offer]
    sources: list[str]


C = TypeVar("C", bound=Offers)


def freshest(catalog: C, quotes: Iterable[Any]) -> tuple[C, dict[PriceKey, PriceOrigin]]:
    """The catalog with each offer priced by its freshest source, and each price's origin
    (by :func:`price_key`: a quote may carry the spot price and not the on-demand one).

    A stored quote (``provider, region, zone, instance_type, spot_price, on_demand_price,
    at``; an empty zone covers the region's zones) is the price in effect when it was read
    (``at``): it replaces the catalog's prices it carries when it is at least as new as the
    catalog's row (or the row is undated); an older quote leaves the row as it is. A quote
    for a place the catalog has no row of its type in (a zone of a region, or a region of a
    cloud whose rows are regional) is an offer of its own (:func:`quoted_offers`)."""
    table = _newest(quotes)
    origins: dict[PriceKey, PriceOrigin] = {}
    out = []
    used: set[OfferKey] = set()
    changed = False
    for o in catalog.offers:
        row = PriceOrigin(CATALOG, catalog_time(o.price_date))
        key = offer_key(o)
        if key not in table:
            key = (o.provider, o.region, "", o.instance_type)
        q: Any = table.get(key)
        if q is not None:
            used.add(key)
        q_at = _aware(getattr(q, "at", None)) if q is not None else None
        newer = q_at is not None and (row.at is None or q_at >= row.at)
        spot = newer and q.spot_price is not None
        on_demand = newer and q.on_demand_price is not None
        if spot or on_demand:
            o = replace(
                o,
                spot_price=q.spot_price if spot else o.spot_price,
                price=q.on_demand_price if on_demand else o.price,
                price_date=q_at.date().isoformat() if q_at else o.price_date,
            )
            changed = True
        live = _live(q, q_at)
        origins[(*offer_key(o), "spot")] = live if spot else row
        origins[(*offer_key(o), "on-demand")] = live if on_demand else row
        out.append(o)
    extra = quoted_offers(catalog.offers, [q for k, q in table.items() if k not in used])
    for o, q, template in extra:
        live = _live(q, _aware(q.at))
        row = PriceOrigin(CATALOG, catalog_time(template.price_date))
        origins[(*offer_key(o), "spot")] = live
        origins[(*offer_key(o), "on-demand")] = live if q.on_demand_price is not None else row
        out.append(o)
    if not changed and not extra:
        return catalog, origins
    # a catalog of the same kind (built by its constructor: its columns are built anew)
    return replace(catalog, offers=out, sources=[*catalog.sources, "live prices"]), origins


def _newest(quotes: Iterable[Any]) -> dict[OfferKey, Any]:
    """The newest quote (by ``at``) per (provider, region, zone, type)."""
    table: dict[OfferKey, Any] = {}
    oldest = datetime.min.replace(tzinfo=UTC)
    for quote in quotes:
        key = (quote.provider, quote.region, quote.zone or "", quote.instance_type)
        held = table.get(key)
        if held is None or (_aware(quote.at) or oldest) > (_aware(held.at) or oldest):
            table[key] = quote
    return table


def _live(q: Any, at: datetime | None) -> PriceOrigin:
    return PriceOrigin(LIVE, at, _aware(getattr(q, "changed_at", None)) if q is not None else None)


def quoted_offers(offers: Iterable[Offer], quotes: Iterable[Any]) -> list[tuple[Offer, Any, Offer]]:
    """Offers for quotes that price a place the catalog has no row of the type in: (the new
    offer, its quote, the row it was made from).

    What the type is (GPUs, vCPUs, memory) comes from a row of the same type: one of the same
    region where there is one (its on-demand price and interruption band too, where the quote
    has no on-demand price: both are the region's), else one of another region (no on-demand
    price nor band then, unless the quote has the price). A quote with a zone becomes an offer
    in that zone; a regional quote (no zone) becomes a regional offer only where the type's
    rows are regional too (a cloud whose launches name no zone). A quote with no spot price,
    or for a type the catalog lacks, makes none."""
    same_region: dict[tuple[str, str, str], Offer] = {}
    anywhere: dict[tuple[str, str], Offer] = {}
    for o in offers:
        same_region.setdefault((o.provider, o.region, o.instance_type), o)
        anywhere.setdefault((o.provider, o.instance_type), o)
    out: list[tuple[Offer, Any, Offer]] = []
    for q in quotes:
        zone = q.zone or ""
        local = same_region.get((q.provider, q.region, q.instance_type))
        template = local or anywhere.get((q.provider, q.instance_type))
        if template is None or q.spot_price is None or (not zone and template.zone):
            continue
        at = _aware(q.at)
        on_demand = q.on_demand_price
        if on_demand is None and local is not None:
            on_demand = local.price
        offer = replace(
            template,
            region=q.region,
            zone=zone,
            spot_price=q.spot_price,
            price=on_demand,
            price_date=at.date().isoformat() if at else "",
            interruption_band=local.interruption_band if local is not None else "",
        )
        out.append((offer, q, template))
    return out


def summary(
    origins: Mapping[PriceKey, PriceOrigin], keys: Iterable[PriceKey], now: datetime
) -> str:
    """``3 live (12 min to 2.0 h old), 7 from the catalog (2024-06-30 to 2026-11-30)``."""
    live: list[PriceOrigin] = []
    cat: list[PriceOrigin] = []
    for k in keys:
        o = origins.get(k)
        if o is None:
            continue
        (live if o.source == LIVE else cat).append(o)
    parts = []
    if live:
        ages = sorted(a for a in (o.age(now) for o in live) if a is not None)
        span = (
            age_text(ages[0])
            if ages[0] == ages[-1]
            else f"{age_text(ages[0])} to {age_text(ages[-1])}"
        )
        parts.append(f"{len(live)} live from `catalog refresh` ({span} old)")
    if cat:
        dates = sorted(f"{o.at:%Y-%m-%d}" for o in cat if o.at is not None)
        when = ""
        if dates:
            when = f" of {dates[0]}" if dates[0] == dates[-1] else f" of {dates[0]} to {dates[-1]}"
        parts.append(f"{len(cat)} from the catalog{when}")
    return ", ".join(parts)
