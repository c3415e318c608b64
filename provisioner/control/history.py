"""What the daemon records for the dashboard (the writers; the dashboard reads them back in
:mod:`provisioner.dashboard.history`), as store events with no job (``job_id`` NULL):

- ``dashboard``: the address a replica serves the page on (``provisioner up`` prints it while
  that replica is alive);
- ``prices``: one per price refresh of a provider, with the cheapest spot and on-demand price
  per GPU-hour for each GPU model. The ``prices`` table keeps only the newest quote per offer;
  these events are the price history the page charts (a few hundred bytes per refresh, where a
  copy of every quote would be thousands of rows an hour).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from functools import lru_cache
from typing import Any

from provisioner.control.store import Store

KIND_ADDRESS = "dashboard"
KIND_PRICES = "prices"


@lru_cache(maxsize=1)
def _gpu_of_type() -> tuple[dict[tuple[str, str], tuple[str, int]], dict[str, tuple[str, int]]]:
    """(provider, instance type) -> (GPU, count) from the built-in catalog, and by type alone
    (the sim quotes the instance types of the clouds it mimics)."""
    from provisioner.catalog_files import builtin_catalog

    by_key: dict[tuple[str, str], tuple[str, int]] = {}
    by_type: dict[str, tuple[str, int]] = {}
    for o in builtin_catalog().offers:
        by_key.setdefault((o.provider, o.instance_type), (o.gpu, o.gpu_count))
        by_type.setdefault(o.instance_type, (o.gpu, o.gpu_count))
    return by_key, by_type


def cheapest_by_gpu(quotes: Iterable[Any]) -> dict[str, dict[str, float | int | None]]:
    """``{gpu: {"spot": $/GPU-h, "on_demand": $/GPU-h, "offers": n}}``: the cheapest price per
    GPU-hour of each GPU model among the quotes (types the catalog does not know are left out)."""
    by_key, by_type = _gpu_of_type()
    out: dict[str, dict[str, float | int | None]] = {}
    for q in quotes:
        found = by_key.get((q.provider, q.instance_type)) or by_type.get(q.instance_type)
        if found is None:
            continue
        gpu, count = found
        row = out.setdefault(gpu, {"spot": None, "on_demand": None, "offers": 0})
        row["offers"] = int(row["offers"] or 0) + 1
        for key, price in (("spot", q.spot_price), ("on_demand", q.on_demand_price)):
            if price is None or price <= 0:
                continue
            per_gpu = round(float(price) / max(1, count), 6)
            old = row[key]
            if old is None or per_gpu < float(old):
                row[key] = per_gpu
    return out


def record_price_refresh(store: Store, provider: str, quotes: list[Any], at: datetime) -> None:
    """One ``prices`` event for a refresh of ``provider``'s quotes."""
    store.add_event(
        None,
        KIND_PRICES,
        f"refreshed {len(quotes)} prices from {provider}",
        at=at,
        provider=provider,
        quotes=len(quotes),
        cheapest=cheapest_by_gpu(quotes),
    )


def record_address(store: Store, owner: str, url: str, at: datetime) -> None:
    """Where replica ``owner`` serves the dashboard (never with its token)."""
    store.add_event(None, KIND_ADDRESS, f"dashboard at {url}", at=at, owner=owner, url=url)
