"""What an adapter may do beyond the one interface (:class:`providers.base.Provider`).

Every adapter launches, gets, lists, terminates and reports interruptions. The rest is
optional, declared here as runtime-checkable protocols: an adapter has a capability when it
has the protocol's methods (nothing to register, no flag to keep in step), and the code that
needs one asks ``isinstance(provider, LivePrices)`` and says what it does without it.

- :class:`LivePrices`: quotes spot and on-demand prices live from the cloud (the daemon's price
  refresh and ``provisioner catalog refresh`` use it; without it the catalog's prices stand).
- :class:`SpotPricesNow`: reads the spot price in effect now for a few (region, zone, type)s:
  the daemon's check of running instances against their bid cap under ``bid_cap.enforce:
  daemon`` (AWS DescribeSpotPriceHistory, the sim's market); without it the daemon reads the
  latest stored quote (the daemon's price refresh).
- :class:`ListsOffers`: lists its GPU offers itself (the sim's offers are its market; for a
  cloud the catalog is what the planner reads, and an adapter's list is a cross-check).
- :class:`PlacementGroups`: places a gang of instances close together (issue 10: AWS cluster
  placement groups, GCP compact placement policies, Azure proximity placement groups, Alibaba
  deployment sets, Tencent placement groups; the sim keeps a record of its own). A gang's
  launches name the group (``LaunchRequest.placement_group``); the reconciler deletes it with
  the gang and sweeps groups whose gang is gone (found by tag).
- :class:`Commitments`: quotes commitment prices (issue 11: AWS Savings Plans and Reserved
  Instances, GCP committed-use discounts, Azure reservations, Alibaba subscriptions, Tencent
  monthly prepaid). AWS (the Price List API's Reserved terms, providers/aws/commitments.py)
  and Azure (the Retail Prices API's reservations, providers/azure/commitments.py) implement
  it; a quote converts to a row of provisioner/data/commitments.csv
  (:meth:`CommitmentQuote.as_commitment`).

- :class:`Quotas`: reads the account's GPU quotas (AWS Service Quotas, GCP regional quotas,
  Azure usages, Alibaba account attributes, Tencent account quota); ``provisioner quotas --refresh`` caches them in the store and ``plan`` rejects
  offers beyond what is left (provisioner/core/quotas.py).

- :class:`Priors`: reads what the cloud says of a zone's spot capacity (AWS Spot placement
  scores and price history, Azure Resource Graph eviction rates, Alibaba DescribeSpotAdvice);
  ``provisioner priors --refresh`` caches them and the planner, decide() and the estimate
  use them (provisioner/core/zone_priors.py). GCP and Tencent publish no such figures.

- :class:`HeldCapacity`: lists the capacity the account holds (AWS DescribeCapacityReservations,
  capacity blocks included; GCP reservations; Azure capacity reservation groups; Alibaba
  private pools) with what is free in each; the planner ranks a ``reserved`` market from it
  and launches into one with the cloud's targeting (``LaunchRequest.reservation``).
- :class:`BooksCapacity`: lists capacity that can be booked for a date range with its price
  (AWS DescribeCapacityBlockOfferings, GCP calendar-mode future reservations) and buys one
  (``provisioner reserve``; only with ``--yes`` and a ``--max-price``).

A protocol with no members would match every object, so each one names at least one method.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from policies.profile import HOURS_PER_MONTH
from providers.base import PriceQuote
from provisioner.core.models import Offer, Reservation
from provisioner.core.quotas import Quota
from provisioner.core.tco import Commitment
from provisioner.core.zone_priors import ZonePrior


@runtime_checkable
class LivePrices(Protocol):
    """An adapter that quotes live prices (USD per instance-hour, converted where the account
    bills in another currency)."""

    def prices(self, regions: Iterable[str] | None = None) -> builtins.list[PriceQuote]:
        """Live spot and on-demand prices of the GPU types in ``regions`` (default: the
        adapter's own)."""
        ...


#: (region, zone, instance type): where a running spot instance's price is read
PriceKey = tuple[str, str, str]


@runtime_checkable
class SpotPricesNow(Protocol):
    """An adapter that reads the spot price in effect now, for a few running instances."""

    def spot_prices_now(self, keys: Iterable[PriceKey]) -> dict[PriceKey, float]:
        """USD per instance-hour now for each key it can price (a key left out: unknown)."""
        ...


@runtime_checkable
class Priors(Protocol):
    """An adapter that reads the cloud's availability priors (placement scores, eviction
    rates, interruption rates) per zone or region and instance type."""

    def priors(
        self, regions: Iterable[str] | None = None, instance_types: Iterable[str] = ()
    ) -> builtins.list[ZonePrior]:
        """The priors of ``instance_types`` (Azure, Alibaba: none given, all the cloud has) in
        ``regions`` (default: the adapter's own), as read now."""
        ...


@runtime_checkable
class Quotas(Protocol):
    """An adapter that reads the account's GPU quotas from the cloud."""

    def quotas(self, regions: Iterable[str] | None = None) -> builtins.list[Quota]:
        """The GPU quotas in ``regions`` (default: the adapter's own), as read now."""
        ...


@runtime_checkable
class ListsOffers(Protocol):
    """An adapter that lists its GPU offers (instance types per zone) from the cloud."""

    def offers(self, regions: Iterable[str] | None = None) -> builtins.list[Offer]:
        """GPU instance types (from the cloud's API where it has one, else the catalog)."""
        ...


@dataclass(frozen=True, slots=True)
class PlacementGroup:
    """A placement construct as the cloud reports it. ``id`` is what the adapter's
    ``ensure_placement_group`` returned: opaque to the core, enough for the adapter to find
    and delete it (adapters whose ids are per region encode the region in it)."""

    id: str
    name: str
    region: str
    tags: dict[str, str]


@runtime_checkable
class PlacementGroups(Protocol):
    """An adapter that can place a gang of instances close together (issue 10).

    ``ensure_placement_group`` creates the cloud's construct idempotently (same ``name``, same
    group: a crash and a second call never make two), tagged with ``tags`` (the job and
    attempt tags of the gang, :data:`provisioner.core.models.TAG_JOB` ...) so that the
    reconciler finds it again; the gang's launches carry the id it returned
    (``LaunchRequest.placement_group``); ``delete_placement_group`` removes it once the gang's
    instances are gone (an unknown or already-gone group is not an error; a group still in use
    raises ProviderError, and the caller tries again at a later pass);
    ``list_placement_groups`` finds the groups carrying all of ``tags``.
    """

    def ensure_placement_group(
        self, name: str, region: str, zone: str, tags: Mapping[str, str]
    ) -> str:
        """The id of the group ``name`` in ``region`` (``zone`` where the cloud ties a group to
        one: GCP, Azure, Tencent take it as a hint), created if it is not there."""
        ...

    def delete_placement_group(self, group_id: str) -> None:
        """Delete the group; unknown or already-gone ids are not an error."""
        ...

    def list_placement_groups(
        self, tags: Mapping[str, str] | None = None
    ) -> builtins.list[PlacementGroup]:
        """The groups this tool made (``provisioner-managed``) carrying all of ``tags``."""
        ...


@dataclass(frozen=True, slots=True)
class CommitmentQuote:
    """The price of one commitment offer for one instance type (USD; issue 11)."""

    provider: str
    region: str
    instance_type: str
    kind: str  # the option, as commitments.csv names it: "reserved-instance", "reservation", ...
    term_months: int  # 12, 36, ...
    upfront: float  # USD paid at the start
    per_hour: float  # USD per instance-hour on top of the upfront payment
    at: datetime  # when it was quoted
    source: str = ""  # where the price comes from (an API, or the catalog's source)
    payment: str = ""  # upfront: "all", "partial" or "no" (monthly or hourly), as commitments.csv

    def as_commitment(self) -> Commitment | None:
        """The row of commitments.csv this quote is (its ``hourly`` the effective rate over the
        term, upfront included); None for a term that file has no column for (not 1 or 3
        years) or a quote without a price."""
        term = {12: "1y", 36: "3y"}.get(self.term_months)
        if term is None or self.payment not in ("all", "partial", "no"):
            return None
        if not (self.upfront > 0 or self.per_hour > 0):
            return None
        hourly = self.per_hour + self.upfront / (self.term_months * HOURS_PER_MONTH)
        return Commitment(
            self.provider,
            self.region,
            self.instance_type,
            term,
            self.kind,
            self.payment,
            hourly,
            self.upfront,
            self.source,
            self.at.date().isoformat(),
        )


@runtime_checkable
class Commitments(Protocol):
    """An adapter that quotes the cloud's commitment offers live (issue 11)."""

    def commitment_prices(
        self, regions: Iterable[str] | None = None
    ) -> builtins.list[CommitmentQuote]:
        """Commitment offers for the GPU types in ``regions`` (default: the adapter's own)."""
        ...


@runtime_checkable
class HeldCapacity(Protocol):
    """An adapter that lists the capacity the account holds (reservations, capacity blocks)."""

    def reservations(self, regions: Iterable[str] | None = None) -> builtins.list[Reservation]:
        """Active and booked-ahead reservations of GPU types in ``regions`` (default: the
        adapter's own), each with what is free in it now; ended ones are left out."""
        ...


@dataclass(frozen=True, slots=True)
class CapacityOffering:
    """Capacity that can be booked for a date range, at a price (USD)."""

    provider: str
    id: str  # what :meth:`BooksCapacity.book` takes
    region: str
    zone: str
    instance_type: str
    count: int  # instances
    starts_at: datetime
    ends_at: datetime
    upfront_usd: float  # the whole booking, paid at purchase
    currency: str = "USD"
    kind: str = "capacity-block"  # ReservationKind value of what it becomes

    @property
    def hours(self) -> float:
        return (self.ends_at - self.starts_at).total_seconds() / 3600.0

    @property
    def usd_per_instance_hour(self) -> float:
        h = self.hours * self.count
        return self.upfront_usd / h if h > 0 else 0.0


@runtime_checkable
class BooksCapacity(Protocol):
    """An adapter that can book capacity ahead (AWS Capacity Blocks, GCP calendar mode)."""

    def capacity_offerings(
        self,
        instance_type: str,
        count: int,
        hours: int,
        start_after: datetime | None = None,
        regions: Iterable[str] | None = None,
    ) -> builtins.list[CapacityOffering]:
        """Bookable capacity for ``count`` instances of ``instance_type`` for ``hours``."""
        ...

    def book(self, offering: CapacityOffering) -> Reservation:
        """Buy ``offering``: money is spent. Callers ask the user first (``--yes``)."""
        ...


__all__ = [
    "BooksCapacity",
    "CapacityOffering",
    "CommitmentQuote",
    "Commitments",
    "HeldCapacity",
    "ListsOffers",
    "LivePrices",
    "PlacementGroup",
    "PlacementGroups",
]
