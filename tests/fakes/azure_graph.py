"""Azure Resource Graph's ``resources`` query for the Azure fake: the ``SpotResources`` table's
Spot eviction rates.

``POST /providers/Microsoft.ResourceGraph/resources?api-version=2021-03-01`` with a JSON body
``{"subscriptions": [...], "query": "...", "options": {"$skipToken", "$top", "resultFormat"}}``
answers ``{"totalRecords", "count", "resultTruncated", "data": [...], "facets": [],
"$skipToken"?}`` (https://learn.microsoft.com/rest/api/azureresourcegraph/resourcegraph/resources/resources).
The fake runs no Kusto: it answers only a query over ``SpotResources`` that keeps the type
``microsoft.compute/skuspotevictionrate/location`` (anything else is ``BadRequest``, as a
query the service cannot run is), applies its ``where location in~ (...)`` and
``where sku in~ (...)`` lines, and gives each row's ``sku`` (``sku.name``), ``location`` and
``rate`` (``properties.evictionRate``), as the query's ``project`` asks.
"""

from __future__ import annotations

import re
from typing import Any

EVICTION_TYPE = "microsoft.compute/skuspotevictionrate/location"


def spot_row(size: str, location: str, rate: str) -> dict[str, Any]:
    """One ``SpotResources`` row as the service holds it."""
    return {
        "id": f"/providers/Microsoft.Compute/skuSpotEvictionRate/{size}/location/{location}",
        "name": size,
        "type": EVICTION_TYPE,
        "location": location,
        "sku": {"name": size},
        "properties": {"evictionRate": rate},
    }


def _listed(query: str, column: str) -> set[str] | None:
    m = re.search(rf"where\s+{column}\s+in~\s*\(([^)]*)\)", query, flags=re.IGNORECASE)
    if m is None:
        return None
    return {v.strip().strip("'\"").lower() for v in m.group(1).split(",") if v.strip()}


def answer(
    rows: list[dict[str, Any]], subscription_id: str, body: Any, page_size: int
) -> tuple[int, Any, dict[str, str]]:
    def bad(message: str) -> tuple[int, Any, dict[str, str]]:
        return 400, {"error": {"code": "BadRequest", "message": message}}, {}

    if not isinstance(body, dict) or not isinstance(body.get("query"), str):
        return bad("The request body must hold a query.")
    query = body["query"]
    if subscription_id not in (body.get("subscriptions") or []):
        return bad("No subscription in scope the caller can read.")
    if (
        not re.match(r"\s*spotresources\b", query, flags=re.IGNORECASE)
        or EVICTION_TYPE not in query.lower()
    ):
        return bad("Only SpotResources eviction rates are served by this fake.")
    locs, skus = _listed(query, "location"), _listed(query, "sku")
    data = [
        {
            "sku": r["sku"]["name"],
            "location": r["location"],
            "rate": r["properties"]["evictionRate"],
        }
        for r in rows
        if r["type"] == EVICTION_TYPE
        and (locs is None or r["location"].lower() in locs)
        and (skus is None or r["sku"]["name"].lower() in skus)
    ]
    options = body.get("options") or {}
    start = int(options.get("$skipToken") or 0)
    page = data[start : start + page_size]
    out: dict[str, Any] = {
        "totalRecords": len(data),
        "count": len(page),
        "resultTruncated": "false",
        "data": page,
        "facets": [],
    }
    if start + page_size < len(data):
        out["$skipToken"] = str(start + page_size)
    return 200, out, {}
