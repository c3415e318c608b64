"""Azure offers and prices.

Offers: the GPU sizes from the catalog (the Resource SKUs list is megabytes per call), with
live prices laid over once fetched. Prices: the public Retail Prices API, filtered by
``armSkuName`` a few sizes per query, every ``NextPageLink`` followed.
"""

from __future__ import annotations

import builtins
import functools
import json
import logging
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from providers._common import now_utc
from providers.azure.client import AzureClient
from providers.azure.errors import RetailError
from providers.base import PriceQuote
from provisioner.core.models import Offer

log = logging.getLogger("provisioner.providers.azure")

#: GPU sizes named in one Retail Prices query (an OData ``or`` list; keeps the URL short)
SKUS_PER_QUERY = 10
_SKU_NAME = re.compile(r"Standard_[A-Za-z0-9_]+")


class AzureOffers:
    """Offers (the catalog's GPU sizes) and live prices (the Retail Prices API).

    ``quotes``: the last quote fetched for each (region, size); offers and the instances'
    prices are read from them."""

    def __init__(self, client: AzureClient) -> None:
        self.client = client
        self.quotes: dict[tuple[str, str], PriceQuote] = {}

    def offers(self, regions: Iterable[str] | None = None) -> builtins.list[Offer]:
        """Azure GPU sizes from the catalog (the Resource SKUs list is megabytes per call),
        with live prices from :meth:`prices` laid over where this adapter has fetched them."""
        wanted = set(regions or self.client.locations)
        try:
            from provisioner.catalog_files import builtin_catalog

            rows = builtin_catalog().filter(provider="azure", regions=sorted(wanted) or None)
        except Exception as exc:  # the catalog is optional
            log.warning("azure: no catalog: %s", exc)
            return []
        out = []
        for o in rows:
            quote = self.quotes.get((o.region, o.instance_type))
            if quote is not None:
                o = replace(
                    o,
                    price=o.price if quote.on_demand_price is None else quote.on_demand_price,
                    spot_price=o.spot_price if quote.spot_price is None else quote.spot_price,
                    price_date=quote.at.date().isoformat(),
                )
            out.append(o)
        return out

    def gpu_sizes(self, region: str) -> builtins.list[str]:
        """The GPU sizes to price in ``region``: ``vm_sizes`` if given, else the catalog's."""
        if self.client.vm_sizes:
            return builtins.list(self.client.vm_sizes)
        try:
            from provisioner.catalog_files import builtin_catalog

            rows = builtin_catalog().filter(provider="azure", regions=[region])
        except Exception as exc:  # the catalog is optional
            log.warning("azure: no catalog to name the GPU sizes: %s", exc)
            return []
        return sorted({o.instance_type for o in rows})

    def price_filters(self, region: str) -> builtins.list[str]:
        """Retail Prices ``$filter`` expressions for ``region``'s GPU sizes, a few per query.

        Filtering on ``armSkuName`` keeps a refresh to a few pages (a region has thousands of
        VM meters); without any known GPU size the region's VM meters are read and filtered here.
        """
        base = (
            f"serviceName eq 'Virtual Machines' and priceType eq 'Consumption' "
            f"and armRegionName eq '{region}'"
        )
        sizes = [s for s in self.gpu_sizes(region) if _SKU_NAME.fullmatch(s)]
        if not sizes:
            log.warning("azure: no GPU sizes known for %s; reading all its VM meters", region)
            return [base]
        out = []
        for i in range(0, len(sizes), SKUS_PER_QUERY):
            skus = " or ".join(f"armSkuName eq '{s}'" for s in sizes[i : i + SKUS_PER_QUERY])
            out.append(f"{base} and ({skus})")
        return out

    def prices(self, regions: Iterable[str] | None = None) -> builtins.list[PriceQuote]:
        """Linux spot and pay-as-you-go prices of the GPU sizes (``Standard_N*``) from the
        public Retail Prices API, filtered by ``armSkuName``, following ``NextPageLink``."""
        out: list[PriceQuote] = []
        at = now_utc()
        for region in regions or self.client.locations:
            best: dict[str, dict[str, tuple[str, float]]] = {}
            items = (item for expr in self.price_filters(region) for item in self.retail(expr))
            for item in items:
                size = item.get("armSkuName") or ""
                meter = f"{item.get('meterName', '')} {item.get('skuName', '')}"
                if (
                    not size.startswith("Standard_N")
                    or "Windows" in item.get("productName", "")
                    or "Low Priority" in meter
                    or item.get("unitOfMeasure") != "1 Hour"
                ):
                    continue
                market = "spot" if "Spot" in meter else "on-demand"
                start = str(item.get("effectiveStartDate", ""))
                seen = best.setdefault(size, {})
                if market not in seen or start > seen[market][0]:
                    seen[market] = (
                        start,
                        float(item.get("retailPrice", item.get("unitPrice", 0.0))),
                    )
            for size, markets in sorted(best.items()):
                spot = markets.get("spot")
                od = markets.get("on-demand")
                quote = PriceQuote(
                    "azure",
                    region,
                    "",
                    size,
                    spot[1] if spot else None,
                    od[1] if od else None,
                    at,
                    at if od else None,  # live from the Retail Prices API
                )
                self.quotes[(region, size)] = quote
                out.append(quote)
        return out

    def retail(self, expr: str) -> Iterable[dict[str, Any]]:
        url: str | None = (
            f"{self.client.prices_endpoint}/api/retail/prices?$filter={urllib.parse.quote(expr)}"
        )
        while url:
            page: dict[str, Any] = self.client.call(
                "retail prices", functools.partial(self._get_json, url)
            )
            yield from page.get("Items") or ()
            url = page.get("NextPageLink") or None

    def _get_json(self, url: str) -> dict[str, Any]:
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.client.request_timeout) as response:
                data: dict[str, Any] = json.loads(response.read())
                return data
        except urllib.error.HTTPError as exc:
            try:
                body = json.loads(exc.read() or b"{}")
                err = body.get("Error") or body.get("error") or {}
                code, message = (
                    err.get("Code") or err.get("code") or "",
                    err.get("Message") or err.get("message") or "",
                )
            except ValueError:
                code, message = "", exc.reason
            raise RetailError(exc.code, code or f"HTTP{exc.code}", str(message)) from None
        except (urllib.error.URLError, TimeoutError) as exc:
            raise RetailError(None, "ConnectionError", str(exc)) from None
