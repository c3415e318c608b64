"""The planner on gangs (issue 10): N offers in one zone, priced per gang-hour, the whole gang
held to the budgets, and each rejection explained (interconnect, gang capacity)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from policies import parse_policy
from provisioner.catalog_files import builtin_catalog
from provisioner.core.catalog import Catalog
from provisioner.core.models import Market, Offer
from provisioner.core.network import NetworkFacts
from provisioner.core.planner import Plan, PlanContext, plan_offers

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)

NET = {
    ("aws", "p4d.24xlarge"): NetworkFacts("aws", "p4d.24xlarge", 400, "efa", "nvswitch"),
    ("aws", "g5.48xlarge"): NetworkFacts("aws", "g5.48xlarge", 100, "efa", "pcie"),
    ("aws", "p3.16xlarge"): NetworkFacts("aws", "p3.16xlarge", 25, "", "nvlink"),
}


def offer(itype: str, zone: str, od: float, spot: float | None, gpu: str = "A100") -> Offer:
    return Offer("aws", "us-east-1", zone, itype, gpu, 8, 96, 1152, od, spot)


OFFERS = [
    offer("p4d.24xlarge", "us-east-1a", 32.77, 9.0),
    offer("p4d.24xlarge", "us-east-1b", 32.77, 11.0),
    offer("g5.48xlarge", "us-east-1a", 16.29, 5.0, gpu="A10G"),
    offer("p3.16xlarge", "us-east-1a", 24.48, 7.0, gpu="V100"),
]


def plan(yaml: str, **ctx: object) -> Plan:
    catalog = Catalog(OFFERS, ["<memory>"], NET)
    return plan_offers(parse_policy(yaml), catalog, PlanContext(now=NOW, **ctx), top=None)  # type: ignore[arg-type]


def examples(p: Plan, reason: str) -> list[str]:
    rej = p.rejections.get(reason)
    return list(rej.examples) if rej else []


GANG = "name: g\njob: {compute_hours: 64}\nmarket: spot\nresources:\n  gpu_count: 8\n  nodes: 4\n"


def test_a_gang_is_priced_per_gang_hour_and_its_hours_split_over_the_nodes() -> None:
    solo = plan("name: g\njob: {compute_hours: 64}\nmarket: spot\nresources: {gpu_count: 8}\n")
    four = plan(GANG)
    p4d = next(
        p
        for p in four.placements
        if p.offer.zone == "us-east-1a" and "p4d" in p.offer.instance_type
    )
    assert p4d.nodes == 4
    assert p4d.price_per_hour == pytest.approx(9.0)  # per node, as every cloud bills
    assert p4d.gang_price_per_hour == pytest.approx(36.0)
    one = next(p for p in solo.placements if p.offer is p4d.offer or p.offer == p4d.offer)
    assert p4d.est_hours is not None and one.est_hours is not None
    assert p4d.est_hours == pytest.approx(one.est_hours / 4)
    assert any("gang of 4" in r for r in p4d.reasons), p4d.reasons
    assert p4d.as_dict()["nodes"] == 4
    assert p4d.as_dict()["gang_price_per_hour"] == pytest.approx(36.0)


def test_the_hourly_budget_holds_for_the_whole_gang() -> None:
    # 4 x 9.0 = 36/h for p4d in 1a, 44/h in 1b, 20/h for g5, 28/h for p3: a 30/h budget keeps
    # only the g5 and p3 gangs, though every node's own price is below it
    p = plan(GANG + "budget: {max_price_per_hour: 30}\n")
    assert {pl.offer.instance_type for pl in p.placements} == {"g5.48xlarge", "p3.16xlarge"}
    assert p.rejected.get("budget_hourly") == 2
    assert all(pl.gang_price_per_hour <= 30 for pl in p.placements)


def test_the_bid_cap_stays_per_node_and_per_gpu() -> None:
    p = plan(GANG + "bid_cap: {max_spot_price_per_gpu_hour: 1.2}\n")
    # 8 GPUs x 1.2 = 9.6/h per node: the 9.0 p4d, 5.0 g5, 7.0 p3 pass, the 11.0 p4d does not
    assert "us-east-1b" not in {pl.offer.zone for pl in p.placements}
    for pl in p.placements:
        assert pl.market is Market.SPOT
        assert pl.bid_cap_per_hour is not None and pl.bid_cap_per_hour <= 9.6 + 1e-9


def test_interconnect_rejections_say_why() -> None:
    yaml = GANG + (
        "  interconnect:\n    intra_node: nvswitch\n    fabric: efa\n    min_network_gbps: 200\n"
    )
    p = plan(yaml)
    assert {pl.offer.instance_type for pl in p.placements} == {"p4d.24xlarge"}
    assert p.rejected.get("interconnect") == 2
    texts = " | ".join(examples(p, "interconnect"))
    assert "not NVSwitch" in texts, texts


def test_fabric_and_bandwidth_apply_only_to_gangs() -> None:
    solo = plan(
        "name: s\njob: {compute_hours: 8}\nmarket: spot\nresources:\n  gpu_count: 8\n  interconnect:\n"
        "    fabric: efa\n    min_network_gbps: 200\n"
    )
    assert "interconnect" not in solo.rejected  # one node: no network between nodes to ask of


def test_unknown_gpu_links_are_rejected_when_nvlink_is_asked() -> None:
    catalog = Catalog([*OFFERS, offer("p9.unknown", "us-east-1a", 30.0, 8.0)], ["m"], NET)
    p = plan_offers(
        parse_policy(GANG + "  interconnect: {intra_node: nvlink}\n"),
        catalog,
        PlanContext(now=NOW),
        top=None,
    )
    assert "p9.unknown" not in {pl.offer.instance_type for pl in p.placements}
    assert "GPU links unknown" in " ".join(examples(p, "interconnect"))


def test_a_zone_short_of_nodes_is_rejected_with_the_count() -> None:
    p = plan(GANG, node_capacity={("aws", "us-east-1a", "p4d.24xlarge", "spot"): 2})
    placed = {(pl.offer.zone, pl.offer.instance_type, pl.market.value) for pl in p.placements}
    assert ("us-east-1a", "p4d.24xlarge", "spot") not in placed
    assert p.rejected.get("gang_capacity") == 1
    assert "only 2 of 4 nodes of p4d.24xlarge spot in us-east-1a" in " ".join(
        examples(p, "gang_capacity")
    )
    # enough nodes there: not rejected
    ok = plan(GANG, node_capacity={("aws", "us-east-1a", "p4d.24xlarge", "spot"): 4})
    assert "gang_capacity" not in ok.rejected


def test_spot_short_of_nodes_leaves_on_demand_in_the_zone_open() -> None:
    """A gang refused on spot in a zone may still fall back to on-demand there (it was
    rejected on both markets, so a gang could not fall back where spot had just failed)."""
    both = GANG.replace("market: spot", "market: spot-then-on-demand")
    p = plan(both, node_capacity={("aws", "us-east-1a", "p4d.24xlarge", "spot"): 0})
    placed = {(pl.offer.zone, pl.offer.instance_type, pl.market.value) for pl in p.placements}
    assert ("us-east-1a", "p4d.24xlarge", "spot") not in placed
    assert ("us-east-1a", "p4d.24xlarge", "on-demand") in placed


def test_the_multinode_example_policy_ranks_gangs() -> None:
    from policies import load_policy

    policy = load_policy("policies/multinode-pretrain.yaml")
    p = plan_offers(policy, builtin_catalog(), PlanContext(now=NOW), top=10)
    assert policy.resources.nodes == 4
    assert p.placements, p.rejected
    for pl in p.placements:
        assert pl.nodes == 4
        assert pl.gang_price_per_hour == pytest.approx(pl.price_per_hour * 4)
    assert p.rejected.get("interconnect", 0) > 0


def test_the_cost_estimate_bills_every_node_and_a_gang_is_taken_back_sooner() -> None:
    from dataclasses import replace

    from provisioner.simulate.estimate import band_rates, estimate_placements, gang_rates

    four = plan(GANG.replace("market: spot", "market: spot-then-on-demand"))
    p4d = next(p for p in four.placements if p.offer.zone == "us-east-1a")
    assert p4d.est_hours is not None
    solo = replace(p4d, nodes=1)
    [g, s] = estimate_placements([p4d, solo], four.policy, None)
    assert g.estimate is not None and s.estimate is not None
    # at least every node paid for the gang's hours of work
    assert g.estimate.mean_usd >= p4d.price_per_hour * 4 * p4d.est_hours
    assert g.estimate.mean_usd > 3.5 * s.estimate.mean_usd
    assert "gang of 4" in g.estimate.prior
    r = band_rates("")
    assert gang_rates(r, 4).up_h == pytest.approx(r.up_h / 4)
    assert gang_rates(r, 4).down_h == r.down_h
    assert gang_rates(r, 1) is r
    od = next(p for p in four.placements if p.market is Market.ON_DEMAND)
    [e] = estimate_placements([od], four.policy, None)
    assert e.estimate is not None
    assert e.estimate.mean_usd == pytest.approx(
        od.price_per_hour * 4 * e.estimate.on_demand_h, rel=1e-9
    )


def test_tencent_placement_groups_only_spread_so_a_placement_group_gang_goes_elsewhere() -> None:
    """Tencent's placement groups keep instances apart, never together: a gang that asks for
    a placement group is not placed there (interconnect, saying why); one that accepts
    ``same-zone`` may be, with a note that it has no proximity guarantee."""
    yaml = (
        "name: g\njob: {compute_hours: 8}\nmarket: spot-then-on-demand\nresources:\n"
        "  gpu_count: 1\n  nodes: 2\n  gpus: [T4, V100, A10, V100-32GB]\n"
        "residency:\n  providers: [tencent]\n"
    )
    catalog = builtin_catalog()
    grouped = plan_offers(parse_policy(yaml), catalog, PlanContext(now=NOW), top=None)
    assert grouped.placements == []
    texts = " | ".join(examples(grouped, "interconnect"))
    assert "only spread instances apart" in texts and "same-zone" in texts, texts
    zonal = yaml.replace("resources:\n", "resources:\n  interconnect: {inter_node: same-zone}\n")
    same_zone = plan_offers(parse_policy(zonal), catalog, PlanContext(now=NOW), top=None)
    assert same_zone.placements and {p.offer.provider for p in same_zone.placements} == {"tencent"}
    assert any("no proximity guarantee" in n for n in same_zone.notes), same_zone.notes
