"""GCP offers and prices.

Offers: GPU machine types (GPUs built in) and N1 hosts for attachable GPUs, per zone, from the
Compute API (two aggregated lists), priced from the catalog. Prices: from the Cloud Billing
Catalog's Compute Engine SKUs (vCPUs x core SKU + GiB x RAM SKU + GPUs x GPU SKU); the quotes
are kept and used to enforce bid caps at launch (GCP takes no bid).
"""

from __future__ import annotations

import builtins
import functools
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from providers._common import now_utc
from providers.base import ErrorKind, PriceQuote, ProviderError
from providers.gcp.client import BILLING_SERVICE, GCPClient
from providers.gcp.gpus import (
    ATTACHABLE,
    BUILTIN_GPU_FAMILIES,
    SHAPES,
    accelerator_type,
    gpu_name,
    has_builtin_gpus,
)
from provisioner.core.models import Offer

log = logging.getLogger("provisioner.providers.gcp")

_CORE_RAM = re.compile(
    r"^(?:Spot Preemptible |Preemptible )?([A-Z][0-9][A-Z]?) (?:Predefined )?Instance (Core|Ram) running in "
)
_GPU = re.compile(r"^Nvidia (.+?) GPU(?: attached to (?:Spot )?Preemptible VMs)? running in ")


class GCPOffers:
    """Offers (machine and accelerator types) and live prices (Cloud Billing Catalog SKUs)."""

    def __init__(self, client: GCPClient) -> None:
        self.client = client
        #: the last quote fetched for each (region, machine type)
        self.quotes: dict[tuple[str, str], PriceQuote] = {}

    def known_price_of(self, region: str, instance_type: str, spot: bool) -> float | None:
        quote = self.quotes.get((region, instance_type))
        if quote is None:
            return None
        return quote.spot_price if spot else quote.on_demand_price

    def known_price(self, offer: Offer) -> float | None:
        """The spot price this adapter knows for ``offer``: a live quote, else the offer's."""
        quote = self.quotes.get((offer.region, offer.instance_type))
        if (
            quote is not None
            and quote.spot_price is not None
            and has_builtin_gpus(offer.instance_type)
        ):
            return quote.spot_price
        return offer.spot_price

    def offers(self, regions: Iterable[str] | None = None) -> builtins.list[Offer]:
        """GPU machine types (GPUs built in) and N1 hosts for attachable GPUs, per zone.

        From the Compute API (two aggregated lists); prices from the catalog where it has the
        type. If the API cannot be read, the catalog's GCP offers are returned instead.
        """
        wanted = set(regions or self.client.regions)
        try:
            offers = self._offers_from_api(wanted)
        except ProviderError as err:
            if err.kind in (ErrorKind.AUTH, ErrorKind.INVALID, ErrorKind.NOT_FOUND):
                raise
            log.warning("gcp: machine types unavailable (%s); using the catalog", err.code)
            return [o for o in _catalog_offers() if not wanted or o.region in wanted]
        prices = {(o.region, o.instance_type): o for o in _catalog_offers()}
        out = []
        for o in offers:
            known = prices.get((o.region, o.instance_type))
            if known is not None and known.gpu_count == o.gpu_count:
                o = replace(
                    o,
                    price=known.price,
                    spot_price=known.spot_price,
                    price_date=known.price_date,
                )
            out.append(o)
        return out

    def _offers_from_api(self, wanted: set[str]) -> builtins.list[Offer]:
        from google.cloud import compute_v1

        c = self.client.clients()
        zones = set(self.client.zones)

        def keep(zone: str) -> bool:
            return (not zones or zone in zones) and (not wanted or zone.rsplit("-", 1)[0] in wanted)

        out: list[Offer] = []
        families = "|".join(BUILTIN_GPU_FAMILIES)
        request = compute_v1.AggregatedListMachineTypesRequest(
            project=self.client.project, filter=f'name eq "({families})-.*"'
        )
        for scope, scoped in self.client.aggregated(c.machine_types, request):
            zone = scope.rsplit("/", 1)[-1]
            if not keep(zone):
                continue
            for mt in scoped.machine_types:
                if not mt.accelerators:
                    continue
                acc = mt.accelerators[0]
                out.append(
                    Offer(
                        provider="gcp",
                        region=zone.rsplit("-", 1)[0],
                        zone=zone,
                        instance_type=mt.name,
                        gpu=gpu_name(acc.guest_accelerator_type),
                        gpu_count=acc.guest_accelerator_count,
                        vcpus=float(mt.guest_cpus),
                        memory_gib=round(mt.memory_mb / 1024, 2),
                        price=None,
                        spot_price=None,
                    )
                )
        request = compute_v1.AggregatedListAcceleratorTypesRequest(project=self.client.project)
        for scope, scoped in self.client.aggregated(c.accelerator_types, request):
            zone = scope.rsplit("/", 1)[-1]
            if not keep(zone):
                continue
            for at in scoped.accelerator_types:
                if at.name not in ATTACHABLE:
                    continue
                count = 1
                while count <= max(1, at.maximum_cards_per_instance):
                    cpus = min(8 * count, 96)
                    out.append(
                        Offer(
                            provider="gcp",
                            region=zone.rsplit("-", 1)[0],
                            zone=zone,
                            instance_type=f"n1-standard-{cpus}",
                            gpu=gpu_name(at.name),
                            gpu_count=count,
                            vcpus=float(cpus),
                            memory_gib=cpus * 3.75,
                            price=None,
                            spot_price=None,
                        )
                    )
                    count *= 2
        return out

    def prices(self, regions: Iterable[str] | None = None) -> builtins.list[PriceQuote]:
        """Spot and on-demand prices of GPU machine types, from Cloud Billing Catalog SKUs.

        A type's price is vCPUs x core SKU + GiB x RAM SKU + GPUs x GPU SKU of its family in
        its region; ``OnDemand`` SKUs give the on-demand price, ``Preemptible`` ones (Spot) the
        spot price. GCP spot prices are the same in every zone of a region, so quotes carry no
        zone. The quotes are kept and used to enforce bid caps at launch.
        """
        wanted = set(regions or self.client.regions)
        components: dict[tuple[str, str, str, str], float] = {}  # (region, usage, family|gpu, what)
        for sku in self._skus():
            parsed = parse_sku(sku)
            if parsed is None:
                continue
            usage, key, what, price = parsed
            for region in sku.get("serviceRegions") or ():
                if not wanted or region in wanted:
                    components[(region, usage, key, what)] = price
        at = now_utc()
        out: list[PriceQuote] = []
        for region in sorted({k[0] for k in components}):
            for itype, (cpus, gib, acc, count) in SHAPES.items():
                family = itype.split("-", 1)[0].upper()

                def total(
                    usage: str,
                    family: str = family,
                    cpus: int = cpus,
                    gib: float = gib,
                    acc: str = acc,
                    count: int = count,
                    region: str = region,
                ) -> float | None:
                    parts = (
                        components.get((region, usage, family, "core")),
                        components.get((region, usage, family, "ram")),
                        components.get((region, usage, acc, "gpu")),
                    )
                    if any(p is None for p in parts):
                        return None
                    core, ram, gpu = (float(p or 0.0) for p in parts)
                    return round(cpus * core + gib * ram + count * gpu, 6)

                spot, on_demand = total("Preemptible"), total("OnDemand")
                if spot is None and on_demand is None:
                    continue
                quote = PriceQuote(
                    "gcp", region, "", itype, spot, on_demand, at, at if on_demand else None
                )
                self.quotes[(region, itype)] = quote
                out.append(quote)
        return out

    def _skus(self) -> builtins.list[dict[str, Any]]:
        """Every Compute Engine SKU from the Cloud Billing Catalog (paged by nextPageToken)."""
        session = self._billing_session()
        url = f"{self.client.billing_endpoint}/v1/services/{BILLING_SERVICE}/skus"
        skus: list[dict[str, Any]] = []
        token = ""
        while True:
            params = {"currencyCode": "USD", "pageSize": "5000"}
            if token:
                params["pageToken"] = token
            page = self.client.call(
                "billing skus",
                functools.partial(_get_json, session, url, params, self.client.request_timeout),
            )
            skus.extend(page.get("skus") or ())
            token = page.get("nextPageToken") or ""
            if not token:
                return skus

    def _billing_session(self) -> Any:
        import requests

        if self.client.billing_api_key:  # as a header: a key in the URL would reach urllib3's logs
            session = requests.Session()
            session.headers["X-Goog-Api-Key"] = self.client.billing_api_key
            return session
        from google.auth.transport.requests import AuthorizedSession

        return AuthorizedSession(self.client.credentials)


def parse_sku(sku: Mapping[str, Any]) -> tuple[str, str, str, float] | None:
    """(usage, family or accelerator, core|ram|gpu, USD per unit-hour) of a VM SKU, or None."""
    usage = (sku.get("category") or {}).get("usageType", "")
    if usage not in ("OnDemand", "Preemptible"):
        return None
    desc = sku.get("description", "")
    m = _CORE_RAM.match(desc)
    if m:
        key, what = m.group(1), m.group(2).lower()
    else:
        g = _GPU.match(desc)
        if not g:
            return None
        try:
            key, what = accelerator_type(g.group(1)), "gpu"
        except ProviderError:
            return None
    try:
        info = sku["pricingInfo"][-1]["pricingExpression"]
        rates = info["tieredRates"]
        unit = rates[-1]["unitPrice"]
        price = int(unit.get("units") or 0) + int(unit.get("nanos") or 0) / 1e9
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return usage, key, what, price


def _get_json(session: Any, url: str, params: Mapping[str, str], timeout: float) -> dict[str, Any]:
    from google.api_core import exceptions as gexc

    response = session.get(url, params=dict(params), timeout=timeout)
    if response.status_code >= 400:
        raise gexc.from_http_response(response)
    data: dict[str, Any] = response.json()
    return data


def _catalog_offers() -> builtins.list[Offer]:
    try:
        from provisioner.catalog_files import builtin_catalog

        return builtin_catalog().filter(provider="gcp")
    except Exception as exc:  # the catalog is optional here
        log.debug("gcp: no catalog: %s", exc)
        return []
