"""Tencent CVM offers and prices: what is on sale per zone, the inquired price, the bid.

How ``DescribeZoneInstanceConfigInfos`` becomes offers and ``InquiryPriceRunInstances`` prices
is in the package notes (:mod:`providers.tencent`). ``MaxPrice`` is the USD cap in the
account's currency, rounded *down* to 4 places (:func:`price_text`).
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from providers._common import cap_decimal
from providers._regional import catalog_offers
from providers.base import ErrorKind, PriceQuote, ProviderError
from providers.tencent.client import POSTPAID, SPOTPAID, TencentClient
from providers.tencent.errors import NAME
from provisioner.core.models import Offer

#: Instance family -> GPU model, for types the catalog does not know (from Tencent's docs).
FAMILY_GPU: dict[str, str] = {
    "GN6": "P4",
    "GN6S": "P4",
    "GN7": "T4",
    "GN7VW": "T4",
    "GI3X": "T4",
    "GN8": "P40",
    "GN10X": "V100",
    "GN10XP": "V100-32GB",
    "GT4": "A100",
    "GNV4": "A10",
    "GNV4V": "A10",
    "PNV4": "A10",
    "HCCPNV4H": "A100",
    "HCCG5V": "A800",
}

#: decimals of ``MaxPrice`` (Tencent's examples: "1.50"; prices are quoted to 4 places)
PRICE_DECIMALS = 4


def price_text(value: float, usd_per_unit: float = 1.0) -> str:
    """A USD cap as Tencent's MaxPrice wants it: in the account's currency (``usd_per_unit``
    USD per unit), rounded *down* to 4 places, at least 2 shown (``"1.50"``)."""
    text = f"{cap_decimal(value, PRICE_DECIMALS, usd_per_unit=usd_per_unit):f}".rstrip("0")
    whole, _, frac = text.partition(".")
    return f"{whole}.{frac.ljust(2, '0')}"


def gpu_for(instance_type: str, family: str = "", hint: str = "") -> str:
    """The GPU model of a CVM type: catalog first, then the family table, then ``hint``."""
    for offer in catalog_offers(NAME):
        if offer.instance_type == instance_type and offer.gpu:
            return offer.gpu
    fam = (family or instance_type.split(".")[0]).upper()
    if fam in FAMILY_GPU:
        return FAMILY_GPU[fam]
    match = re.search(r"\b(A100|A10|A800|H800|H20|L20|L40|T4|V100|P40|P4)\b", hint or "")
    return match.group(1) if match else fam


def num(value: Any) -> float | None:
    try:
        return None if value is None or value == "" else float(value)
    except (TypeError, ValueError):
        return None


def unit_price(price: Any) -> float | None:
    """``ItemPrice``: the discounted hourly price, else the list hourly price."""
    if not isinstance(price, Mapping):
        return None
    discounted = num(price.get("UnitPriceDiscount"))
    return discounted if discounted else num(price.get("UnitPrice"))


class TencentPricing:
    """What CVM sells, where, and at what price."""

    def __init__(self, client: TencentClient) -> None:
        self.client = client

    def _zone_configs(self, region: str) -> builtins.list[dict[str, Any]]:
        """GPU rows of DescribeZoneInstanceConfigInfos for spot and pay-as-you-go."""
        body = self.client.request(
            region,
            "DescribeZoneInstanceConfigInfos",
            {"Filters": [{"Name": "instance-charge-type", "Values": [SPOTPAID, POSTPAID]}]},
        )
        self.client.observe_currency(body)
        rows = []
        for row in body.get("InstanceTypeQuotaSet") or ():
            gpus = num(row.get("GpuCount")) or num(row.get("Gpu")) or 0.0
            if gpus < 1:  # CPU types, and vGPU slices (a fraction of a card)
                continue
            if (
                self.client.instance_types
                and row.get("InstanceType") not in self.client.instance_types
            ):
                continue
            rows.append(row)
        return rows

    def offers(self, regions: Iterable[str] | None = None) -> builtins.list[Offer]:
        out: builtins.list[Offer] = []
        for region in builtins.list(regions or self.client.regions):
            merged: dict[tuple[str, str], dict[str, Any]] = {}
            for row in self._zone_configs(region):
                key = (str(row.get("Zone", "")), str(row.get("InstanceType", "")))
                entry = merged.setdefault(key, {"row": row, "on_sale": False})
                selling = row.get("Status", "SELL") == "SELL"
                entry["on_sale"] = entry["on_sale"] or selling
                price = self.client.to_usd(unit_price(row.get("Price")))
                if row.get("InstanceChargeType") == SPOTPAID:
                    entry["spot"] = price if selling else None
                else:
                    entry["price"] = price
            for (zone, itype), entry in sorted(merged.items()):
                if not entry["on_sale"]:
                    continue
                row = entry["row"]
                gpus = num(row.get("GpuCount")) or num(row.get("Gpu")) or 0.0
                out.append(
                    Offer(
                        provider=NAME,
                        region=region,
                        zone=zone,
                        instance_type=itype,
                        gpu=gpu_for(
                            itype,
                            str(row.get("InstanceFamily", "")),
                            f"{row.get('TypeName', '')} {row.get('Remark', '')}",
                        ),
                        gpu_count=round(gpus),
                        vcpus=float(num(row.get("Cpu")) or 0),
                        memory_gib=float(num(row.get("Memory")) or 0),
                        price=entry.get("price"),
                        spot_price=entry.get("spot"),
                        price_date=datetime.now(UTC).date().isoformat(),
                    )
                )
        return out

    def _inquire(self, region: str, zone: str, itype: str, charge: str) -> float | None:
        params: dict[str, Any] = {
            "Placement": {"Zone": zone},
            "ImageId": self.client.image_id,
            "InstanceChargeType": charge,
            "InstanceType": itype,
            "InstanceCount": 1,
        }
        if charge == SPOTPAID:
            params["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {"SpotInstanceType": "one-time"},
            }
        try:
            body = self.client.request(region, "InquiryPriceRunInstances", params)
        except ProviderError as exc:
            if exc.kind in (ErrorKind.CAPACITY, ErrorKind.INVALID):
                return None  # not sold (or not as spot) there: no quote
            raise
        self.client.observe_currency(body)
        return self.client.to_usd(unit_price((body.get("Price") or {}).get("InstancePrice")))

    def prices(self, regions: Iterable[str] | None = None) -> builtins.list[PriceQuote]:
        out: builtins.list[PriceQuote] = []
        for region in builtins.list(regions or self.client.regions):
            now = datetime.now(UTC)
            if not self.client.image_id:  # InquiryPriceRunInstances needs an image: use the listing
                out.extend(
                    PriceQuote(
                        provider=NAME,
                        region=region,
                        zone=o.zone,
                        instance_type=o.instance_type,
                        spot_price=o.spot_price,
                        on_demand_price=o.price,
                        at=now,
                        on_demand_at=datetime.now(UTC),
                        currency=self.client.account.code or "",
                        usd_per_unit=self.client.account.usd_per_unit() or 0.0,
                    )
                    for o in self.offers([region])
                )
                continue
            selling: dict[tuple[str, str], set[str]] = {}  # (zone, type) -> charge types on sale
            for r in self._zone_configs(region):
                key = (str(r.get("Zone", "")), str(r.get("InstanceType", "")))
                charges = selling.setdefault(key, set())
                if r.get("Status", "SELL") == "SELL":
                    charges.add(str(r.get("InstanceChargeType", "")))
            for (zone, itype), charges in sorted(selling.items()):
                if not charges:
                    continue
                spot = self._inquire(region, zone, itype, SPOTPAID) if SPOTPAID in charges else None
                od = self._inquire(region, zone, itype, POSTPAID) if POSTPAID in charges else None
                out.append(
                    PriceQuote(
                        provider=NAME,
                        region=region,
                        zone=zone,
                        instance_type=itype,
                        spot_price=spot,
                        on_demand_price=od,
                        at=datetime.now(UTC),
                        on_demand_at=datetime.now(UTC),
                        currency=self.client.account.code or "",
                        usd_per_unit=self.client.account.usd_per_unit() or 0.0,
                    )
                )
        return out
