"""AWS offers and prices.

Offers come from ``DescribeInstanceTypes`` (types with ``GpuInfo``) and
``DescribeInstanceTypeOfferings`` (the zones of each), priced from the catalog where it has the
type; live spot prices from ``DescribeSpotPriceHistory``, live on-demand prices from the Price
List Query API (``pricing`` ``GetProducts``), one query per GPU type, every page followed,
cached ``on_demand_ttl_s`` for the process's life.

A spot quote is the price in effect when it was read, and is dated so (``at``): asked from the
time of the read, the history answers the last change before it, dated by that change, which
may be months old for a price that has not moved; that date is kept too (``changed_at``).
"""

from __future__ import annotations

import builtins
import functools
import json
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from providers._common import now_utc, utc
from providers.aws.client import AWSClient, EC2Client
from providers.aws.errors import classify
from providers.base import PriceQuote, ProviderError, call_with_retries
from provisioner.core.models import Offer

log = logging.getLogger("provisioner.providers.aws")

#: the GetProducts filters besides instance type and region: Linux, shared tenancy, used
#: (not reserved-capacity) rows; rows with pre-installed software are left out when read
PRICING_FILTERS = (("operatingSystem", "Linux"), ("tenancy", "Shared"), ("capacitystatus", "Used"))


@dataclass(slots=True)
class _OnDemandCache:
    at: datetime
    prices: dict[str, float] = field(default_factory=dict)
    asked: set[str] = field(default_factory=set)


#: fetched on-demand prices by (pricing endpoint, region), kept for the process's life: the
#: daemon builds a provider for each price refresh, and the list changes monthly
_ON_DEMAND: dict[tuple[str | None, str], _OnDemandCache] = {}


def forget_on_demand_prices() -> None:
    """Drop the process's cached on-demand prices (a new Pricing endpoint can reuse a closed
    one's address: its answers must not be taken for the new one's)."""
    with _ON_DEMAND_LOCK:
        _ON_DEMAND.clear()


_ON_DEMAND_LOCK = threading.Lock()


class AWSOffers:
    """Offers (``DescribeInstanceTypes``) and live prices (spot history, Price List API).

    ``gpu_types``: the GPU instance types of each region as EC2 described them, asked once
    (reservations, commitments and quotas read them too)."""

    def __init__(self, client: AWSClient) -> None:
        self.client = client
        self.gpu_types: dict[str, list[dict[str, Any]]] = {}

    def on_demand_prices(
        self, region: str, types: Iterable[str]
    ) -> tuple[dict[str, float], datetime | None]:
        """Linux shared-tenancy on-demand USD/hour of ``types`` in ``region``, live from the
        Pricing API, and when they were fetched; (``{}``, None) where it cannot be reached.

        Fetched once per ``on_demand_ttl_s`` per region (types not yet asked are fetched
        then), so a refresh every few minutes costs no Pricing calls.
        """
        wanted = sorted(set(types))
        client = self.client.pricing_client()
        if client is None or not wanted:
            return {}, None
        now = now_utc()
        key = (self.client.pricing_endpoint, region)
        with _ON_DEMAND_LOCK:
            cache = _ON_DEMAND.get(key)
        if cache is None or (now - cache.at).total_seconds() >= self.client.on_demand_ttl_s:
            cache = _OnDemandCache(at=now)
        missing = [t for t in wanted if t not in cache.asked]
        if missing:
            try:
                for itype in missing:
                    price = call_with_retries(
                        functools.partial(_get_on_demand, client, region, itype),
                        classify,
                        policy=self.client.retry,
                        what=f"aws GetProducts ({itype}, {region})",
                    )
                    if price is not None:
                        cache.prices[itype] = price
                    cache.asked.add(itype)
            except ProviderError as err:
                log.warning(
                    "aws: on-demand prices for %s not live (Pricing API: %s %s); the "
                    "catalog's are used",
                    region,
                    err.kind.value,
                    err.code,
                )
                if not cache.asked:
                    return {}, None
            with _ON_DEMAND_LOCK:
                _ON_DEMAND[key] = cache
        return {t: cache.prices[t] for t in wanted if t in cache.prices}, cache.at

    def types_with_gpus(self, region: str) -> list[dict[str, Any]]:
        """The GPU instance types of ``region`` (``DescribeInstanceTypes``, asked once)."""
        if region not in self.gpu_types:

            def fetch(ec2: EC2Client) -> list[dict[str, Any]]:
                found: list[dict[str, Any]] = []
                for page in ec2.get_paginator("describe_instance_types").paginate(
                    **self.client.pages()
                ):
                    found.extend(t for t in page["InstanceTypes"] if _whole_gpus(t))
                return found

            self.gpu_types[region] = self.client.call(region, "DescribeInstanceTypes", fetch)
        return self.gpu_types[region]

    def _zones_of(self, region: str, types: builtins.list[str]) -> dict[str, builtins.list[str]]:
        """instance type -> the zones of ``region`` that offer it."""

        def fetch(ec2: EC2Client) -> dict[str, builtins.list[str]]:
            zones: dict[str, builtins.list[str]] = {}
            for i in range(0, len(types), 100):  # at most 200 values per filter
                pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
                    **self.client.pages(
                        LocationType="availability-zone",
                        Filters=[{"Name": "instance-type", "Values": types[i : i + 100]}],
                    )
                )
                for page in pages:
                    for row in page["InstanceTypeOfferings"]:
                        zones.setdefault(row["InstanceType"], []).append(row["Location"])
            return zones

        return self.client.call(region, "DescribeInstanceTypeOfferings", fetch)

    def offers(self, regions: Iterable[str] | None = None) -> builtins.list[Offer]:
        """One offer per GPU type and zone that offers it, priced from the catalog."""
        out: builtins.list[Offer] = []
        for region in regions or self.client.regions:
            types = self.types_with_gpus(region)
            zones = self._zones_of(region, [t["InstanceType"] for t in types])
            priced = CatalogPrices.for_region(region)
            with _ON_DEMAND_LOCK:
                cache = _ON_DEMAND.get((self.client.pricing_endpoint, region))
            live = cache.prices if cache and self.client.pricing_client() is not None else {}
            for t in types:
                itype = t["InstanceType"]
                # a type no zone offers cannot be launched here (unless EC2 named no zones)
                for zone in sorted(zones.get(itype, () if zones else [""])):
                    known = priced.find(zone, itype)
                    out.append(
                        Offer(
                            provider="aws",
                            region=region,
                            zone=zone,
                            instance_type=itype,
                            gpu=_gpu_name(t["GpuInfo"]["Gpus"][0]),
                            gpu_count=_whole_gpus(t),
                            vcpus=float(t.get("VCpuInfo", {}).get("DefaultVCpus", 0)),
                            memory_gib=round(t.get("MemoryInfo", {}).get("SizeInMiB", 0) / 1024, 2),
                            price=live.get(itype, known.price if known else None),
                            spot_price=known.spot_price if known else None,
                            price_date=cache.at.date().isoformat()
                            if cache and itype in live
                            else (known.price_date if known else ""),
                            interruption_band=known.interruption_band if known else "",
                        )
                    )
        return out

    def prices(self, regions: Iterable[str] | None = None) -> list[PriceQuote]:
        out: list[PriceQuote] = []
        for region in regions or self.client.regions:
            types = [t["InstanceType"] for t in self.types_with_gpus(region)]
            if not types:
                continue
            priced = CatalogPrices.for_region(region)

            # the history from now on: EC2 answers, for each zone and type, the last change
            # before the start time, the price in effect now, dated by when it changed
            read_at = now_utc()

            spot = self._spot_now(region, types, read_at)
            live, live_at = self.on_demand_prices(region, types)
            for (zone, itype), row in spot.items():
                od = live.get(itype)
                out.append(
                    PriceQuote(
                        provider="aws",
                        region=region,
                        zone=zone,
                        instance_type=itype,
                        spot_price=float(row["SpotPrice"]),
                        on_demand_price=od
                        if od is not None
                        else getattr(priced.find(zone, itype), "price", None),
                        at=read_at,
                        on_demand_at=live_at if od is not None else None,
                        changed_at=utc(row["Timestamp"]),
                    )
                )
        return out

    def _spot_now(
        self, region: str, types: list[str], read_at: datetime
    ) -> dict[tuple[str, str], Any]:
        """(zone, type) -> the newest DescribeSpotPriceHistory row from ``read_at`` on: EC2
        answers, for each zone and type, the last change before the start time, the price in
        effect then, dated by when it changed."""

        def fetch(ec2: EC2Client) -> dict[tuple[str, str], Any]:
            latest: dict[tuple[str, str], Any] = {}
            pages = ec2.get_paginator("describe_spot_price_history").paginate(
                **self.client.pages(
                    InstanceTypes=types, ProductDescriptions=["Linux/UNIX"], StartTime=read_at
                )
            )
            for page in pages:
                for row in page["SpotPriceHistory"]:
                    key = (row["AvailabilityZone"], row["InstanceType"])
                    if key not in latest or row["Timestamp"] > latest[key]["Timestamp"]:
                        latest[key] = row
            return latest

        return self.client.call(region, "DescribeSpotPriceHistory", fetch)

    def spot_prices_now(
        self, keys: Iterable[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], float]:
        """The spot price in effect now for each (region, zone, type): one
        DescribeSpotPriceHistory per region, from now on (EC2 answers the last change before
        the start time as the price in effect)."""
        wanted: dict[str, set[tuple[str, str, str]]] = {}
        for key in keys:
            wanted.setdefault(key[0], set()).add(key)
        out: dict[tuple[str, str, str], float] = {}
        for region, group in wanted.items():
            rows = self._spot_now(region, sorted({k[2] for k in group}), now_utc())
            for key in group:
                row = rows.get((key[1], key[2]))
                if row is not None:
                    out[key] = float(row["SpotPrice"])
        return out


def price_list_products(client: Any, region: str, itype: str) -> list[Mapping[str, Any]]:
    """The Price List API's products for Linux shared-tenancy ``itype`` in ``region``, every
    page (on-demand and Reserved terms both come in them)."""
    filters = [{"Type": "TERM_MATCH", "Field": "instanceType", "Value": itype}]
    filters.append({"Type": "TERM_MATCH", "Field": "regionCode", "Value": region})
    filters += [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in PRICING_FILTERS]
    pages = client.get_paginator("get_products").paginate(
        ServiceCode="AmazonEC2",
        Filters=filters,
        FormatVersion="aws_v1",
        PaginationConfig={"PageSize": 100},
    )
    return [
        json.loads(text) if isinstance(text, str) else text
        for page in pages
        for text in page.get("PriceList") or ()
    ]


def _get_on_demand(client: Any, region: str, itype: str) -> float | None:
    """The Linux shared-tenancy on-demand USD/hour of ``itype`` in ``region`` (every page:
    the plain row may come after the others)."""
    found = [
        price
        for doc in price_list_products(client, region, itype)
        if (price := _on_demand_of(doc)) is not None
    ]
    return min(found) if found else None


def _on_demand_of(doc: Mapping[str, Any]) -> float | None:
    """The hourly USD price of one price-list product (None: not the plain Linux row)."""
    attrs = (doc.get("product") or {}).get("attributes") or {}
    if attrs.get("preInstalledSw", "NA") != "NA" or attrs.get("operatingSystem") != "Linux":
        return None
    for term in ((doc.get("terms") or {}).get("OnDemand") or {}).values():
        for dim in (term.get("priceDimensions") or {}).values():
            usd = (dim.get("pricePerUnit") or {}).get("USD")
            if dim.get("unit") == "Hrs" and usd not in (None, ""):
                value = float(usd)
                if value > 0:
                    return value
    return None


def _whole_gpus(itype: Mapping[str, Any]) -> int:
    """How many whole GPUs a type has (0 for none, and for fractional types such as g6f)."""
    gpus = (itype.get("GpuInfo") or {}).get("Gpus") or []
    return sum(int(g.get("Count", 0)) for g in gpus)


def _gpu_name(gpu: Mapping[str, Any]) -> str:
    """EC2's GPU name in the project's canonical spelling (the raw name where unknown)."""
    raw = str(gpu.get("Name", ""))
    try:
        from policies.gpus import canonical_gpu
    except ImportError:
        return raw
    mem_gb = round(gpu.get("MemoryInfo", {}).get("SizeInMiB", 0) / 1024)
    for candidate in (f"{raw}-{mem_gb}GB" if mem_gb else "", raw):
        if candidate:
            name = canonical_gpu(candidate)
            if name:
                return name
    return raw


class CatalogPrices:
    """The catalog's AWS rows for one region, looked up by zone and type (empty without one)."""

    def __init__(self, rows: Iterable[Offer]) -> None:
        self.by_zone: dict[tuple[str, str], Offer] = {}
        self.by_type: dict[str, Offer] = {}
        for o in rows:
            self.by_zone[(o.zone, o.instance_type)] = o
            best = self.by_type.get(o.instance_type)
            if best is None or (o.spot_price or float("inf")) < (best.spot_price or float("inf")):
                self.by_type[o.instance_type] = o

    @classmethod
    def for_region(cls, region: str) -> CatalogPrices:
        try:
            from provisioner.catalog_files import builtin_catalog

            return cls(builtin_catalog().filter(provider="aws", regions=[region]))
        except Exception as exc:  # the catalog is optional here: offers still list the types
            log.debug("aws: no catalog prices for %s: %s", region, exc)
            return cls(())

    def find(self, zone: str, instance_type: str) -> Offer | None:
        """The zone's own row, else the region's cheapest-spot row for the type."""
        return self.by_zone.get((zone, instance_type)) or self.by_type.get(instance_type)
