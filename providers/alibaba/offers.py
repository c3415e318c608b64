"""Alibaba ECS offers and prices: GPU types, zones in stock, spot price history, the bid.

- **offers**: ``DescribeInstanceTypes`` (``MinimumGPUAmount=1``; vGPU slices left out) and
  ``DescribeAvailableResource`` (zones with the type in stock), one offer per (zone, type),
  priced from the catalog where it knows the type.
- **prices**: ``DescribeSpotPriceHistory`` per GPU type (``SpotPrice``; ``OriginPrice`` is the
  pay-as-you-go price), the newest point per zone, converted to USD from the ``Currency`` the
  answer names.
- **bid**: ``SpotPriceLimit`` is the USD cap in the account's currency, rounded *down* to the
  3 decimals ECS takes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta
from functools import partial
from typing import Any

from providers._common import cap_decimal, now_utc
from providers._regional import catalog_offers
from providers.alibaba.client import AlibabaClient, nested, parse_time
from providers.alibaba.errors import NAME
from providers.base import ErrorKind, PriceQuote, ProviderError
from provisioner.core.models import Offer

#: ``SpotPriceLimit`` "can be accurate to three decimal places" (RunInstances reference)
PRICE_DECIMALS = 3


def gpu_model(spec: str) -> str:
    """``"NVIDIA A10"`` -> ``"A10"`` (the canonical name where the GPU table knows it)."""
    try:
        from policies.gpus import canonical_gpu

        known = canonical_gpu(spec)
        if known:
            return known
    except Exception:  # the table is optional here; fall back to the cloud's own spelling
        pass
    name = spec.strip()
    for prefix in ("NVIDIA ", "Nvidia ", "nvidia ", "Tesla "):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    return name.replace(" ", "-")


def is_vgpu(itype: Mapping[str, Any]) -> bool:
    """A slice of a GPU (vgn5i, vgn6i, sgn7i, ... or a ``GPUSpec`` like ``NVIDIA A10*1/12``)."""
    family = str(itype.get("InstanceTypeFamily") or itype.get("InstanceTypeId") or "")
    name = family.removeprefix("ecs.")
    return name.startswith(("vgn", "sgn")) or "/" in str(itype.get("GPUSpec") or "")


class AlibabaPricing:
    """What ECS sells, where, and at what price."""

    def __init__(self, client: AlibabaClient) -> None:
        self.client = client

    def _spot_history(self, region: str, itype: str, zone: str | None = None) -> dict[str, Any]:
        """``DescribeSpotPriceHistory`` (the last 3 hours, every page: ``Offset`` from each
        answer's ``NextOffset``) as one answer; notes the currency it names."""
        models = self.client.models()
        client = self.client.ecs(region)
        start = (now_utc() - timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
        points: list[Any] = []
        offset = 0
        while True:
            req = models.DescribeSpotPriceHistoryRequest(
                region_id=region,
                instance_type=itype,
                zone_id=zone or None,
                network_type="vpc",
                ostype="linux",
                start_time=start,
                offset=offset or None,
            )
            body = self.client.body(
                self.client.call(
                    "DescribeSpotPriceHistory", partial(client.describe_spot_price_history, req)
                )
            )
            self.client.account.observe(body.get("Currency"))
            page = nested(body, "SpotPrices", "SpotPriceType")
            points.extend(page)
            nxt = int(body.get("NextOffset") or 0)
            if not page or nxt <= offset:
                body["SpotPrices"] = {"SpotPriceType": points}
                return body
            offset = nxt

    def spot_price_limit(self, cap_usd: float, region: str, offer: Offer) -> float:
        """``SpotPriceLimit`` for a USD cap: in the account's currency, rounded down to 3 places.

        Asks the cloud for the type's price history first when no answer has named the
        account's currency yet; refuses (INVALID) while the currency or its rate is unknown.
        """
        if self.client.account.reported is None:
            self._spot_history(region, offer.instance_type, offer.zone)
        code, rate = self.client.account.for_launch()
        limit = cap_decimal(cap_usd, PRICE_DECIMALS, usd_per_unit=rate)
        if limit <= 0:
            raise ProviderError(
                ErrorKind.PRICE_TOO_LOW,
                "BidCapBelowMinimum",
                f"the cap {cap_usd!r} USD/h is below 0.001 {code}/h, the smallest bid Alibaba takes",
                provider=NAME,
            )
        return float(limit)

    def _gpu_types(self, region: str) -> list[dict[str, Any]]:
        models = self.client.models()
        client = self.client.ecs(region)
        out: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            req = models.DescribeInstanceTypesRequest(
                minimum_gpuamount=1, max_results=self.client.page, next_token=token
            )
            if self.client.instance_types:
                req.instance_types = list(self.client.instance_types)
            body = self.client.body(
                self.client.call(
                    "DescribeInstanceTypes", partial(client.describe_instance_types, req)
                )
            )
            out.extend(
                t
                for t in nested(body, "InstanceTypes", "InstanceType")
                if int(t.get("GPUAmount") or 0) > 0 and not is_vgpu(t)
            )
            token = body.get("NextToken") or None
            if not token:
                return out

    def _zones_in_stock(self, region: str) -> dict[str, list[str]]:
        """Instance type -> zones where pay-as-you-go/spot capacity is in stock."""
        models = self.client.models()
        client = self.client.ecs(region)
        req = models.DescribeAvailableResourceRequest(
            region_id=region,
            destination_resource="InstanceType",
            instance_charge_type="PostPaid",
            spot_strategy="SpotAsPriceGo",
        )
        body = self.client.body(
            self.client.call(
                "DescribeAvailableResource", lambda: client.describe_available_resource(req)
            )
        )
        zones: dict[str, list[str]] = {}
        for zone in nested(body, "AvailableZones", "AvailableZone"):
            if zone.get("Status", "Available") != "Available":
                continue
            for res in nested(zone, "AvailableResources", "AvailableResource"):
                for sup in nested(res, "SupportedResources", "SupportedResource"):
                    if sup.get("Status") == "Available":
                        zones.setdefault(sup.get("Value", ""), []).append(zone.get("ZoneId", ""))
        return zones

    def offers(self, regions: Iterable[str] | None = None) -> list[Offer]:
        known = {(o.region, o.zone, o.instance_type): o for o in catalog_offers(NAME)}
        out: list[Offer] = []
        for region in list(regions or self.client.regions):
            types = self._gpu_types(region)
            zones = self._zones_in_stock(region)
            for t in types:
                itype = t.get("InstanceTypeId", "")
                for zone in zones.get(itype) or [""]:
                    ref = known.get((region, zone, itype)) or known.get((region, "", itype))
                    out.append(
                        Offer(
                            provider=NAME,
                            region=region,
                            zone=zone,
                            instance_type=itype,
                            gpu=gpu_model(str(t.get("GPUSpec") or "")),
                            gpu_count=int(t.get("GPUAmount") or 0),
                            vcpus=float(t.get("CpuCoreCount") or 0),
                            memory_gib=float(t.get("MemorySize") or 0),
                            price=ref.price if ref else None,
                            spot_price=ref.spot_price if ref else None,
                            price_date=ref.price_date if ref else "",
                            interruption_band=ref.interruption_band if ref else "",
                        )
                    )
        return out

    def prices(self, regions: Iterable[str] | None = None) -> list[PriceQuote]:
        out: list[PriceQuote] = []
        for region in list(regions or self.client.regions):
            types = self.client.instance_types or [
                t.get("InstanceTypeId", "") for t in self._gpu_types(region)
            ]
            for itype in types:
                body = self._spot_history(region, itype)
                currency = body.get("Currency")
                newest: dict[str, dict[str, Any]] = {}
                for point in nested(body, "SpotPrices", "SpotPriceType"):
                    zone = point.get("ZoneId", "")
                    if zone not in newest or str(point.get("Timestamp", "")) >= str(
                        newest[zone].get("Timestamp", "")
                    ):
                        newest[zone] = point
                for zone, point in sorted(newest.items()):
                    spot = point.get("SpotPrice")
                    origin = point.get("OriginPrice")
                    out.append(
                        PriceQuote(
                            provider=NAME,
                            region=region,
                            zone=zone,
                            instance_type=point.get("InstanceType") or itype,
                            spot_price=self.client.to_usd(
                                None if spot is None else float(spot), currency
                            ),
                            on_demand_price=self.client.to_usd(
                                None if origin is None else float(origin), currency
                            ),
                            at=parse_time(point.get("Timestamp")) or now_utc(),
                            on_demand_at=now_utc() if origin is not None else None,
                            currency=str(currency or self.client.account.code or ""),
                            usd_per_unit=self.client.account.usd_per_unit(currency) or 0.0,
                        )
                    )
        return out
