"""What the daemon records for the dashboard, read back: store events with no job (``job_id``
NULL), written by :mod:`provisioner.control.history` (re-exported here):

- ``dashboard``: the address a replica serves the page on (``provisioner up`` prints it while
  that replica is alive);
- ``prices``: one per price refresh of a provider, with the cheapest spot and on-demand price
  per GPU-hour for each GPU model. The ``prices`` table keeps only the newest quote per offer;
  these events are the price history the page charts (a few hundred bytes per refresh, where a
  copy of every quote would be thousands of rows an hour).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select

from provisioner.control.history import (
    KIND_ADDRESS,
    KIND_PRICES,
    cheapest_by_gpu,
    record_address,
    record_price_refresh,
)
from provisioner.control.store import EventRow, Store
from provisioner.core.timefmt import utc

__all__ = [
    "KIND_ADDRESS",
    "KIND_PRICES",
    "cheapest_by_gpu",
    "dashboard_url",
    "price_history",
    "record_address",
    "record_price_refresh",
]


def dashboard_url(store: Store, now: datetime) -> str | None:
    """The address of the page served by a live daemon replica on this store, if any."""
    from provisioner.control.store import live_replicas

    live = set(live_replicas(store, now))
    if not live:
        return None
    with store.session() as s:
        rows = s.execute(
            select(EventRow.data)
            .where(EventRow.job_id.is_(None), EventRow.kind == KIND_ADDRESS)
            .order_by(EventRow.id.desc())
            .limit(50)
        ).all()
    for (data,) in rows:
        if isinstance(data, dict) and data.get("owner") in live and data.get("url"):
            return str(data["url"])
    return None


def price_history(store: Store, limit: int = 2000) -> list[dict[str, Any]]:
    """The newest ``limit`` price refreshes, oldest first: ``{at, provider, quotes, cheapest}``."""
    with store.session() as s:
        rows = s.execute(
            select(EventRow.at, EventRow.data)
            .where(EventRow.job_id.is_(None), EventRow.kind == KIND_PRICES)
            .order_by(EventRow.id.desc())
            .limit(limit)
        ).all()
    out: list[dict[str, Any]] = []
    for at, data in reversed(rows):
        d = data if isinstance(data, dict) else {}
        out.append(
            {
                "at": utc(at),
                "provider": str(d.get("provider", "")),
                "quotes": int(d.get("quotes") or 0),
                "cheapest": d.get("cheapest") if isinstance(d.get("cheapest"), dict) else {},
            }
        )
    return out
