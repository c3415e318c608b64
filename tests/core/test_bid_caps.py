"""One bid-cap formula (:func:`provisioner.core.rules.bid_caps`), two callers: the planner's
columns (:func:`provisioner.core.rules.spot_caps`, inside ``plan_offers``) and the daemon's
scalar route (:func:`provisioner.core.rules.policy_spot_cap`, ``fixed_spot_cap``, ``spot_cap``:
decide() and the launch guard). On many seeded random policies and offers, both give the same
caps, to the bit."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime
from typing import Any

import numpy as np

from policies.model import Policy
from provisioner.core import rules
from provisioner.core.catalog import Catalog
from provisioner.core.models import Market, Offer, Placement
from provisioner.core.planner import PlanContext, plan_offers

NOW = datetime(2026, 3, 1, tzinfo=UTC)
ZONES = [
    ("aws", "us-east-1"),
    ("aws", "eu-west-1"),
    ("gcp", "us-central1"),
    ("azure", "westeurope"),
]


def _policy(rng: random.Random, gpu_count: int = 1) -> Policy:
    def maybe(lo: float, hi: float) -> float | None:
        return None if rng.random() < 0.35 else round(rng.uniform(lo, hi), rng.choice([2, 6]))

    caps = {
        "max_spot_price_per_hour": maybe(0.05, 6.0),
        "max_spot_price_per_gpu_hour": maybe(0.05, 3.0),
        "max_fraction_of_on_demand": maybe(0.05, 1.0),
    }
    doc: dict[str, Any] = {
        "name": "caps",
        "resources": {"gpus": ["A10G"], "gpu_count": gpu_count},
        "job": {"command": ["true"]},
        "market": "spot",
        "bid_cap": {k: v for k, v in caps.items() if v is not None},
    }
    return Policy.model_validate(doc)


def _scalar(policy: Policy, gpu_count: int, od: float) -> float:
    return rules.policy_spot_cap(policy, gpu_count, None if math.isnan(od) else od)


def test_the_columns_and_the_scalar_route_give_the_same_caps() -> None:
    rng = random.Random(20261207)
    for _ in range(400):
        policy = _policy(rng)
        n = rng.randint(1, 40)
        gpus = np.asarray([rng.choice([1, 2, 4, 8]) for _ in range(n)], dtype=np.int64)
        od = np.asarray(
            [math.nan if rng.random() < 0.2 else rng.uniform(0.1, 40.0) for _ in range(n)]
        )
        col = rules.spot_caps(policy, gpus, od)
        one = np.asarray([_scalar(policy, int(g), float(o)) for g, o in zip(gpus, od, strict=True)])
        assert col.dtype == np.float64 and col.shape == (n,)
        assert np.array_equal(col, one), (policy.bid_cap, gpus, od, col, one)
        fixed = np.asarray([rules.fixed_spot_cap(policy, int(g)) for g in gpus])
        shareless = rules.bid_caps(policy.bid_cap, gpus, od, rules.array_ops(), share=False)
        assert np.array_equal(shareless, fixed)


def test_the_planner_s_caps_are_the_daemon_s() -> None:
    """Every spot placement the planner makes carries the cap decide() and the guard compute
    for it (to the bit), and every spot offer it rejects for its bid is over that cap."""
    rng = random.Random(7)
    for _ in range(150):
        gpu_count = rng.choice([1, 4])
        policy = _policy(rng, gpu_count)
        offers = []
        for i in range(rng.randint(1, 12)):
            provider, region = rng.choice(ZONES)
            od = None if rng.random() < 0.2 else round(rng.uniform(0.2, 30.0), 4)
            spot = round(rng.uniform(0.02, 20.0), 4)
            offers.append(
                Offer(
                    provider, region, f"{region}-z{i}", f"t{i}", "A10G", gpu_count, 8, 64, od, spot
                )
            )
        plan = plan_offers(policy, Catalog.from_offers(offers), PlanContext(now=NOW), top=None)
        for p in plan.placements:
            assert p.market is Market.SPOT
            bare = Placement(p.offer, p.market, p.price_per_hour, None, score=0.0)
            cap = rules.spot_cap(policy, bare)
            assert p.bid_cap_per_hour == (cap if math.isfinite(cap) else None)
            assert rules.launchable(policy, p) is None
        shown = {p.offer.instance_type for p in plan.placements}
        for o in offers:
            if o.instance_type in shown:
                continue
            cap = rules.policy_spot_cap(policy, o.gpu_count, o.price)
            assert o.spot_price is not None and o.spot_price > cap
        assert plan.rejected.get("bid_cap", 0) == sum(o.instance_type not in shown for o in offers)
