"""The ledger on the dashboard: a job's attempts against on-demand (its page) and what spot
saved over the whole store (the jobs page), from :mod:`provisioner.control.ledger`."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import Any

#: the store-wide figure is kept this long (it reads every attempt's columns)
STORE_TTL_S = 10.0
_cache: dict[str, tuple[float, dict[str, Any]]] = {}
_lock = threading.Lock()


def job_ledger(store: Any, job_id: str, now: datetime) -> dict[str, Any]:
    """One job's ledger: its totals and each attempt's figures."""
    from provisioner.control import ledger

    rows = ledger.store_ledgers(store, [job_id], now)[job_id]
    return {
        "totals": ledger.totals(rows).as_dict(),
        "attempts": [ledger.attempt_doc(a) for a in rows if a.start is not None],
    }


def store_savings(store: Any, now: datetime) -> dict[str, Any]:
    """What spot saved over every attempt in the store (kept ``STORE_TTL_S``)."""
    from provisioner.control import ledger

    key = str(store.url)
    with _lock:
        hit = _cache.get(key)
        if hit is not None and time.monotonic() - hit[0] < STORE_TTL_S:
            return hit[1]
    t = ledger.store_savings(store, now)
    doc = {
        "billed_usd": round(t.billed_usd, 6),
        "on_demand_usd": round(t.on_demand_usd, 6) if t.priced else None,
        "saved_usd": round(t.saved_usd, 6) if t.priced else None,
        "saved_pct": None if t.saved_pct is None else round(t.saved_pct, 2),
        "attempts_without_on_demand_price": t.unpriced,
    }
    with _lock:
        _cache[key] = (time.monotonic(), doc)
    return doc
