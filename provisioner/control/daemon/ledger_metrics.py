"""The ledger's store-wide totals for Prometheus, refreshed on their own beat (the daemon's
``metrics.ledger_interval``), never inside a pass.

A finished job's figures no longer change: each is summed once and kept; active jobs are
summed again at every refresh. Every replica reports the same store-wide totals (take
``max`` across replicas, not ``sum``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from provisioner.control.ledger import Totals, store_ledgers, totals
from provisioner.control.store import FINAL_STATES, JobRow, chunked

log = logging.getLogger("provisioner.control.daemon")


class LedgerTotals:
    def __init__(self, store: Any) -> None:
        self.store = store
        self.done: dict[str, Totals] = {}
        self.totals: Totals | None = None

    def refresh(self, now: datetime) -> Totals:
        from sqlalchemy import select

        with self.store.session() as s:
            states = dict(s.execute(select(JobRow.id, JobRow.state)).all())
        for gone in set(self.done) - set(states):
            del self.done[gone]
        new_final = [j for j, st in states.items() if st in FINAL_STATES and j not in self.done]
        active = [j for j, st in states.items() if st not in FINAL_STATES]
        for chunk in chunked(new_final, 500):
            for j, rows in store_ledgers(self.store, list(chunk), now).items():
                self.done[j] = totals(rows)
        out = Totals()
        for t in self.done.values():
            out.add(t)
        for chunk in chunked(active, 500):
            for rows in store_ledgers(self.store, list(chunk), now).values():
                out.add(totals(rows))
        self.totals = out
        return out


class LedgerCollector:
    """Yields the latest totals as Prometheus counters (and the saving as a gauge: spot can
    cost more than on-demand, so it may go down)."""

    def __init__(self, source: LedgerTotals) -> None:
        self.source = source

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        t = self.source.totals
        if t is None:
            return
        for name, value, help_ in (
            ("billed_usd", t.billed_usd, "Billed by the attempts in the store (USD)"),
            (
                "on_demand_usd",
                t.on_demand_usd,
                "The same runs at the plan's on-demand price of the same type and zone (USD)",
            ),
            ("lost_work_usd", t.lost_work_usd, "Work re-done after interruptions, priced (USD)"),
            ("overlap_usd", t.overlap_usd, "Billed while two attempts of a job ran at once (USD)"),
            ("changeover_usd", t.changeover_usd, "Launch to the job running, priced (USD)"),
        ):
            yield CounterMetricFamily(f"provisioner_ledger_{name}", help_, value=value)
        yield GaugeMetricFamily(
            "provisioner_ledger_saved_usd",
            "On-demand reference minus billed, over the attempts with a reference (USD)",
            value=t.saved_usd,
        )
