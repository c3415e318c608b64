"""Azure availability priors: Spot eviction rates per VM size and region, from Resource Graph.

Azure Resource Graph's ``SpotResources`` table holds one row per size and location of type
``microsoft.compute/skuspotevictionrate/location`` with ``properties.evictionRate`` a band of
percent (``0-5``, ``5-10``, ``10-15``, ``15-20``, ``20+``)
(https://learn.microsoft.com/azure/virtual-machines/spot-vms#azure-resource-graph). Read with
the official ``azure-mgmt-resourcegraph`` SDK (``ResourceGraphClient.resources``, REST
``POST /providers/Microsoft.ResourceGraph/resources?api-version=2021-03-01``), over the
adapter's subscription, paged by ``$skipToken``. The subscription's Reader role is enough.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Iterable
from datetime import UTC, datetime
from functools import partial
from typing import Any

from providers.azure.client import AzureClient
from providers.base import ProviderUnavailable
from provisioner.core.zone_priors import EVICTION_RATE, ZonePrior, eviction_risk


def eviction_query(locations: Iterable[str], sizes: Iterable[str]) -> str:
    """The Kusto query of the eviction rates of ``sizes`` in ``locations`` (either empty: all)."""

    def quoted(values: Iterable[str]) -> str:
        return ", ".join("'" + v.replace("'", "") + "'" for v in values)

    lines = [
        "SpotResources",
        "| where type =~ 'microsoft.compute/skuspotevictionrate/location'",
        "| extend sku = tostring(sku.name), location = tostring(location)",
        "| extend rate = tostring(properties.evictionRate)",
    ]
    locs, names = [x.lower() for x in locations], [x.lower() for x in sizes]
    if locs:
        lines.append(f"| where location in~ ({quoted(locs)})")
    if names:
        lines.append(f"| where sku in~ ({quoted(names)})")
    lines.append("| project sku, location, rate")
    return "\n".join(lines)


class AzurePriors:
    """The Spot eviction rate of each GPU size per location (Resource Graph, its client made
    on first use)."""

    def __init__(self, client: AzureClient) -> None:
        self.client = client
        self._graph: Any = None
        self._lock = threading.Lock()

    @property
    def graph(self) -> Any:
        with self._lock:
            if self._graph is None:
                try:
                    from azure.mgmt.resourcegraph import ResourceGraphClient
                except ImportError as exc:  # an install from before the extra had it
                    raise ProviderUnavailable(
                        "azure: Resource Graph needs azure-mgmt-resourcegraph: "
                        "pip install 'provisioner[azure]'"
                    ) from exc

                kw = self.client.client_kwargs()
                kw.pop("polling_interval", None)
                self._graph = ResourceGraphClient(self.client.credential, **kw)
            return self._graph

    def priors(
        self, regions: Iterable[str] | None = None, instance_types: Iterable[str] = ()
    ) -> builtins.list[ZonePrior]:
        from azure.mgmt.resourcegraph.models import QueryRequest, QueryRequestOptions

        locations = list(regions or self.client.locations)
        query = eviction_query(locations, instance_types)
        graph, token = self.graph, None
        rows: builtins.list[dict[str, Any]] = []
        while True:
            request = QueryRequest(
                subscriptions=[self.client.subscription_id],
                query=query,
                options=QueryRequestOptions(skip_token=token, result_format="objectArray"),
            )
            answer: Any = self.client.call(
                "Resource Graph SpotResources", partial(graph.resources, request)
            )
            rows.extend(answer.data or [])
            token = answer.skip_token
            if not token:
                break
        now = datetime.now(UTC)
        out: builtins.list[ZonePrior] = []
        by_name = {s.lower(): s for s in instance_types}
        locs = {x.lower() for x in locations}
        for row in rows:
            label = str(row.get("rate") or "")
            risk = eviction_risk(label)
            sku = str(row.get("sku") or "")
            where = str(row.get("location") or "").lower()
            if (
                risk is None
                or (locs and where not in locs)
                or (by_name and sku.lower() not in by_name)
            ):
                continue
            out.append(
                ZonePrior(
                    provider="azure",
                    region=where,
                    zone="",
                    instance_type=by_name.get(sku.lower(), sku),
                    kind=EVICTION_RATE,
                    value=risk,
                    label=label,
                    at=now,
                )
            )
        return out

    def close(self) -> None:
        with self._lock:
            graph, self._graph = self._graph, None
        if graph is not None:
            graph.close()
