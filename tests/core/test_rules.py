"""The planner's vectorised masks agree with the scalar rules of :mod:`provisioner.core.rules`.

hypothesis draws a policy (providers, jurisdictions allowed and denied, region lists, bid caps
in all three forms, an hourly and a total budget, the market) and a catalog over known and
unknown regions; for every (offer, market) with a price, the first scalar rule it breaks
(residency, bid cap, hourly budget, total budget) must be the planner's rejection reason, and
the offers no rule rejects must be exactly the planner's placements, each with the scalar bid
cap. The same rules are what decide() filters its candidates with and what the launch guard
refuses.
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.model import Policy
from provisioner.control.guard import GuardViolation, guard_launch
from provisioner.core import admission, rules
from provisioner.core.catalog import Catalog
from provisioner.core.models import Market, Offer, Placement
from provisioner.core.planner import PlanContext, plan_offers

NOW = datetime(2026, 3, 1, tzinfo=UTC)
REGIONS = [
    ("aws", "us-east-1"),
    ("aws", "eu-west-1"),
    ("aws", "eu-central-1"),
    ("aws", "ap-northeast-1"),
    ("gcp", "europe-west4"),
    ("gcp", "us-central1"),
    ("azure", "westeurope"),
    ("aws", "nowhere-9"),  # unknown: no jurisdiction can be shown
]
JURISDICTIONS = ["EU", "US", "GDPR", "JP", "EEA", "AMER", "DE"]


def maybe(strategy: st.SearchStrategy[float]) -> st.SearchStrategy[float | None]:
    return st.one_of(st.none(), strategy)


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    region_specs = [r for _p, r in REGIONS] + [f"{p}:{r}" for p, r in REGIONS]
    doc = {
        "name": "rules",
        "resources": {"gpus": ["A10G"], "gpu_count": 1},
        "job": {"command": ["true"], "compute_hours": 4.0, "reference_gpu": "A10G"},
        "market": draw(st.sampled_from(["spot", "on-demand", "spot-then-on-demand"])),
        "residency": {
            "providers": draw(st.sampled_from([[], ["aws"], ["aws", "gcp"]])),
            "allow": draw(st.lists(st.sampled_from(JURISDICTIONS), max_size=2, unique=True)),
            "deny": draw(st.lists(st.sampled_from(JURISDICTIONS), max_size=1, unique=True)),
            "allow_regions": draw(st.lists(st.sampled_from(region_specs), max_size=3)),
            "deny_regions": draw(st.lists(st.sampled_from(region_specs), max_size=2)),
        },
        "bid_cap": {
            k: v
            for k, v in {
                "max_spot_price_per_hour": draw(maybe(st.floats(0.05, 3.0))),
                "max_spot_price_per_gpu_hour": draw(maybe(st.floats(0.05, 3.0))),
                "max_fraction_of_on_demand": draw(maybe(st.floats(0.05, 1.0))),
            }.items()
            if v is not None
        },
        "budget": {
            k: v
            for k, v in {
                "max_price_per_hour": draw(maybe(st.floats(0.1, 4.0))),
                "max_total": draw(maybe(st.floats(0.5, 20.0))),
            }.items()
            if v is not None
        },
    }
    return Policy.model_validate(doc)


@st.composite
def catalogs(draw: st.DrawFn) -> list[Offer]:
    out = []
    for i, (provider, region) in enumerate(REGIONS):
        od = draw(maybe(st.floats(0.2, 4.0)))
        spot = draw(maybe(st.floats(0.02, 3.0)))
        if od is None and spot is None:
            od = 1.0
        out.append(
            Offer(provider, region, f"{region}-z{i}", "g5.xlarge", "A10G", 1, 4, 16, od, spot)
        )
    return out


def scalar_reason(policy: Policy, o: Offer, market: Market, pacing: bool) -> str | None:
    """The planner's rejection reason by the scalar rules, in the planner's order."""
    price = o.price_for(market)
    why = rules.residency_violation(policy, o.provider, o.region)
    if why is not None:
        return why
    if price is None:
        return "market"
    if market is Market.SPOT and rules.over_bid_cap(policy, price, o.gpu_count, o.price):
        return "bid_cap"
    if rules.over_hourly_budget(policy, price):
        return "budget_hourly"
    # the one budget rule (provisioner.core.admission): the work on this GPU (the reference
    # one: its hours are the policy's) and the changeover, or the least charge, whichever is more
    hours = policy.job.compute_hours
    p = Placement(o, market, price, None, score=0.0, est_hours=hours)
    if pacing and admission.budget_refusal(policy, p, admission.Standing()) is not None:
        return "budget_total"
    return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=policies(), offers=catalogs(), pacing=st.booleans())
def test_the_planner_s_masks_are_the_scalar_rules(
    policy: Policy, offers: list[Offer], pacing: bool
) -> None:
    plan = plan_offers(
        policy, Catalog.from_offers(offers), PlanContext(now=NOW, pacing=pacing), top=None
    )
    markets = [m for m, ok in ((Market.SPOT, policy.allows_spot), (Market.ON_DEMAND, policy.allows_on_demand)) if ok]  # fmt: skip
    expected: Counter[str] = Counter()
    eligible = set()
    for o in offers:
        for m in markets:
            why = scalar_reason(policy, o, m, pacing)
            if why is None:
                eligible.add((o.zone, m))
            else:
                expected[why] += 1
    assert plan.rejected == dict(expected)
    assert {(p.offer.zone, p.market) for p in plan.placements} == eligible
    for p in plan.placements:
        assert rules.launchable(policy, p) is None
        if p.market is Market.SPOT:
            cap = rules.policy_spot_cap(policy, p.offer.gpu_count, p.offer.price)
            assert (p.bid_cap_per_hour is None) == math.isinf(cap)
            if p.bid_cap_per_hour is not None:
                assert p.bid_cap_per_hour == pytest.approx(cap)
        guard_launch(policy, p, 0.0)  # what the planner offers, the guard lets through


@settings(max_examples=200, deadline=None)
@given(policy=policies(), offers=catalogs())
def test_the_guard_refuses_exactly_what_the_rules_refuse(
    policy: Policy, offers: list[Offer]
) -> None:
    for o in offers:
        for m in (Market.SPOT, Market.ON_DEMAND):
            price = o.price_for(m)
            if price is None:
                continue
            p = Placement(o, m, price, None, score=0.0)
            why = rules.launch_violation(policy, p, 0.0)
            if why is None:
                guard_launch(policy, p, 0.0)
            else:
                with pytest.raises(GuardViolation):
                    guard_launch(policy, p, 0.0)
            if rules.launchable(policy, p) is not None:
                assert why is not None


@pytest.mark.parametrize(
    "budget, bid",
    [
        ({"max_price_per_hour": 0.9999999999999999}, {}),  # hypothesis found it: 1e-16 under
        ({}, {"max_spot_price_per_hour": 0.9999999999999999}),
    ],
)
def test_a_price_at_a_cap_within_the_rules_tolerance_is_judged_alike(
    budget: dict[str, float], bid: dict[str, float]
) -> None:
    """The planner's masks take the scalar rules' tolerance (``rules.EPS_USD``): a price a
    float's width over a cap was eligible to the daemon and refused by the plan."""
    doc = {
        "name": "edge",
        "resources": {"gpus": ["A10G"], "gpu_count": 1},
        "job": {"command": ["true"], "compute_hours": 4.0, "reference_gpu": "A10G"},
        "market": "spot",
        "bid_cap": bid,
        "budget": budget,
    }
    policy = Policy.model_validate(doc)
    o = Offer("aws", "us-east-1", "us-east-1a", "g5.xlarge", "A10G", 1, 4, 16, 2.0, 1.0)
    assert scalar_reason(policy, o, Market.SPOT, False) is None
    plan = plan_offers(policy, Catalog.from_offers([o]), PlanContext(now=NOW), top=None)
    assert [(p.offer.zone, p.market) for p in plan.placements] == [("us-east-1a", Market.SPOT)]
    over = Offer("aws", "us-east-1", "us-east-1a", "g5.xlarge", "A10G", 1, 4, 16, 2.0, 1.0 + 1e-9)
    assert scalar_reason(policy, over, Market.SPOT, False) is not None
    assert plan_offers(policy, Catalog.from_offers([over]), PlanContext(now=NOW)).placements == []
