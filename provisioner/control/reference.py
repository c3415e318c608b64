"""The ledger's on-demand reference for a launch: the cheapest on-demand placement the job's
policy allows at that moment, on the same offers the job is planned on (the catalog with the
stored live prices laid over it; for the sim, the sim's offers under the clouds they mimic).

The policy is planned as if its market were ``on-demand``: every other rule (GPUs, residency,
latency, hourly budget) still applies. Plans are kept a minute per (provider, policy), as the
reconciler keeps its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from policies.model import MarketChoice, Policy
from provisioner.control.store import JobRow
from provisioner.core.models import Placement


class OnDemandReference:
    def __init__(self, catalog_for: Callable[[JobRow], Any]) -> None:
        self.catalog_for = catalog_for
        self._cache: dict[tuple[str, str, int], Placement | None] = {}

    def __call__(self, job: JobRow, policy: Policy, now: datetime) -> Placement | None:
        from provisioner.control.inputs import candidate_plan

        key = (
            job.provider + json.dumps(job.provider_options, sort_keys=True),
            job.policy_yaml,
            int(now.timestamp() // 60),
        )
        if key in self._cache:
            return self._cache[key]
        if len(self._cache) > 1_000:
            self._cache.clear()
        od = policy.model_copy(update={"market": MarketChoice.ON_DEMAND})
        plan = candidate_plan(od, self.catalog_for(job), frozenset(), now)
        best = min(plan.placements, key=lambda p: p.price_per_hour, default=None)
        self._cache[key] = best
        return best
