from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import parse_policy
from policies.model import Policy
from provisioner.core.catalog import Catalog
from provisioner.core.models import Market, Offer
from provisioner.core.planner import PlanContext, plan_offers
from provisioner.core.regions import estimate_rtt_ms, great_circle_km, regions

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def offer(
    provider: str = "aws",
    region: str = "eu-central-1",
    zone: str = "eu-central-1a",
    itype: str = "g5.xlarge",
    gpu: str = "A10G",
    count: int = 1,
    price: float | None = 1.0,
    spot: float | None = 0.4,
    band: str = "",
) -> Offer:
    return Offer(provider, region, zone, itype, gpu, count, 4, 16, price, spot, "2026-11-30", band)


def run(policy_yaml: str, offers: list[Offer], **ctx: object) -> object:
    return plan_offers(
        parse_policy(policy_yaml),
        Catalog.from_offers(offers),
        PlanContext(now=NOW, **ctx),
        top=None,
    )  # type: ignore[arg-type]


def test_cheapest_eligible_first_and_rejections_add_up() -> None:
    offers = [
        offer(spot=0.5),
        offer(zone="eu-central-1b", spot=0.3),
        offer(region="us-east-1", zone="us-east-1a", spot=0.1),  # outside EEA
        offer(gpu="T4", itype="g4dn.xlarge", spot=0.05),  # 16 GB: too small
        offer(zone="eu-central-1c", spot=None),  # no spot market
    ]
    p = run("market: spot\nresidency: {allow: [EEA]}\nresources: {min_vram_gb: 20}\n", offers)
    assert [pl.offer.zone for pl in p.placements] == ["eu-central-1b", "eu-central-1a"]
    assert p.rejected == {"vram": 1, "residency": 1, "market": 1}
    assert p.eligible + sum(p.rejected.values()) == p.candidates == len(offers)


def test_bid_cap_per_gpu_and_fraction_take_the_tightest() -> None:
    offers = [
        offer(count=4, itype="g5.12xlarge", price=5.0, spot=2.2),  # per-GPU 0.55
        offer(count=4, itype="g5.12xlarge", zone="eu-central-1b", price=5.0, spot=1.9),
    ]
    pol = "market: spot\nresources: {gpu_count: 4}\nbid_cap: {max_spot_price_per_gpu_hour: 0.5, max_fraction_of_on_demand: 0.45}\n"
    p = run(pol, offers)
    assert len(p.placements) == 1
    best = p.placements[0]
    assert best.offer.zone == "eu-central-1b"
    assert best.bid_cap_per_hour == pytest.approx(2.0)  # min(0.5*4, 0.45*5=2.25)
    assert p.rejected == {"bid_cap": 1}


def test_spot_then_on_demand_ranks_both_markets() -> None:
    p = run("market: spot-then-on-demand\n", [offer(price=1.0, spot=0.3)])
    assert [pl.market for pl in p.placements] == [Market.SPOT, Market.ON_DEMAND]
    assert p.placements[1].bid_cap_per_hour is None


def test_budget_hourly_applies_to_every_market() -> None:
    p = run(
        "market: spot-then-on-demand\nbudget: {max_price_per_hour: 0.5}\n",
        [offer(price=1.0, spot=0.3)],
    )
    assert [pl.market for pl in p.placements] == [Market.SPOT]
    assert p.rejected == {"budget_hourly": 1}


def test_denied_and_allowed_regions() -> None:
    offers = [
        offer(),
        offer(region="eu-west-1", zone="eu-west-1a"),
        offer(provider="gcp", region="europe-west4", zone=""),
    ]
    p = run(
        "residency: {deny_regions: [eu-west-1], allow_regions: ['aws:eu-central-1', 'aws:eu-west-1']}\nmarket: spot\n",
        offers,
    )
    assert {pl.offer.region for pl in p.placements} == {"eu-central-1"}
    assert p.rejected == {"denied_region": 2}


def test_provider_restriction() -> None:
    p = run(
        "residency: {providers: [gcp]}\nmarket: spot\n",
        [offer(), offer(provider="gcp", region="europe-west4", zone="")],
    )
    assert [pl.offer.provider for pl in p.placements] == ["gcp"]
    assert p.rejected == {"provider": 1}


def test_mainland_china_residency() -> None:
    offers = [
        offer(provider="alibaba", region="cn-hangzhou", zone="cn-hangzhou-h"),
        offer(provider="alibaba", region="cn-hongkong", zone="cn-hongkong-b"),
        offer(provider="tencent", region="ap-guangzhou", zone="ap-guangzhou-3"),
    ]
    p = run("residency: {allow: [CN-mainland]}\nmarket: spot\n", offers)
    assert {pl.offer.region for pl in p.placements} == {"cn-hangzhou", "ap-guangzhou"}


def test_unknown_region_never_passes_a_residency_rule() -> None:
    p = run("residency: {allow: [EU]}\nmarket: spot\n", [offer(region="mars-north-1", zone="")])
    assert p.placements == [] and p.rejected == {"residency": 1}


def test_latency_target_and_limit() -> None:
    offers = [offer(), offer(region="ap-southeast-1", zone="ap-southeast-1a", spot=0.1)]
    pol = "market: spot\nlatency: {targets: [{lat: 50.11, lon: 8.68}], max_rtt_ms: 40}\n"
    p = run(pol, offers)
    assert [pl.offer.region for pl in p.placements] == ["eu-central-1"]
    assert p.placements[0].est_rtt_ms is not None and p.placements[0].est_rtt_ms < 10
    assert p.rejected == {"latency": 1}


def test_measured_rtt_overrides_the_estimate() -> None:
    pol = "market: spot\nlatency: {targets: [{lat: 50.11, lon: 8.68}], max_rtt_ms: 40, measured: {'aws:eu-central-1': 55}}\n"
    p = run(pol, [offer()])
    assert p.rejected == {"latency": 1}


def test_rtt_model() -> None:
    fra = regions()[("aws", "eu-central-1")]
    sin = regions()[("aws", "ap-southeast-1")]
    km = great_circle_km(fra.lat, fra.lon, sin.lat, sin.lon)
    assert 10_000 < km < 10_500
    assert estimate_rtt_ms(km) == pytest.approx(2 + 2 * km * 1.5 / 200)


def test_workload_sizes_vram_and_excludes_small_gpus() -> None:
    offers = [offer(), offer(gpu="T4", itype="g4dn.xlarge"), offer(gpu="A100-80GB", itype="p4de")]
    p = run(
        "market: spot\nresources: {workload: {parameters_b: 7, method: lora, batch_size: 4}}\n",
        offers,
    )
    assert p.required_vram_gb is not None and 18 < p.required_vram_gb < 24
    assert {pl.offer.gpu for pl in p.placements} == {"A10G", "A100-80GB"}
    assert p.rejected == {"vram": 1}


def test_duration_deadline_and_total_budget() -> None:
    offers = [
        offer(gpu="T4", itype="g4dn.xlarge", spot=0.2),
        offer(gpu="A100", itype="p4", spot=1.0),
    ]
    # 24 h on an A100; a T4 is ~4.8x slower (bf16 312 vs 65 TFLOPS)
    pol = "market: spot\njob: {compute_hours: 24, reference_gpu: A100}\ndeadline: 48h\n"
    p = run(pol, offers, submitted_at=NOW)
    assert [pl.offer.gpu for pl in p.placements] == ["A100"]
    assert p.placements[0].est_hours == pytest.approx(24)
    assert p.placements[0].est_job_cost == pytest.approx(24.0)
    assert p.rejected == {"deadline": 1}
    p2 = run("market: spot\njob: {compute_hours: 24}\nbudget: {max_total: 20}\n", offers)
    assert p2.placements == [] and p2.rejected == {"budget_total": 2}


def test_cooldown_and_unavailable_from_context() -> None:
    offers = [offer(), offer(zone="eu-central-1b"), offer(zone="eu-central-1c")]
    p = run(
        "market: spot\n",
        offers,
        cooldown=frozenset({("aws", "eu-central-1a")}),
        unavailable=frozenset({("aws", "eu-central-1b", "g5.xlarge")}),
    )
    assert [pl.offer.zone for pl in p.placements] == ["eu-central-1c"]
    assert p.rejected == {"cooldown": 1, "unavailable": 1}


def test_interruption_risk_breaks_price_ties() -> None:
    offers = [offer(spot=0.40, band=">20%"), offer(zone="eu-central-1b", spot=0.41, band="<5%")]
    p = run("market: spot\npreferences: {price: 1, interruption_risk: 0.5}\n", offers)
    assert p.placements[0].offer.zone == "eu-central-1b"


def test_gpu_list_and_exclusions() -> None:
    offers = [offer(), offer(gpu="L4", itype="g6.xlarge"), offer(gpu="T4", itype="g4dn.xlarge")]
    p = run("market: spot\nresources: {gpus: [A10G, L4], exclude_gpus: [l4]}\n", offers)
    assert [pl.offer.gpu for pl in p.placements] == ["A10G"]
    assert p.rejected == {"gpu_model": 2}


# -- property: no placement ever breaks a money or residency rule ------------------------

REGION_KEYS = sorted(regions())


@st.composite
def catalogs(draw: st.DrawFn) -> list[Offer]:
    n = draw(st.integers(1, 40))
    out = []
    for _ in range(n):
        provider, region = draw(st.sampled_from(REGION_KEYS))
        price = draw(st.one_of(st.none(), st.floats(0.01, 100, allow_nan=False)))
        spot = draw(st.one_of(st.none(), st.floats(0.001, 100, allow_nan=False)))
        out.append(
            Offer(
                provider,
                region,
                draw(st.sampled_from(["", region + "-a", region + "-b"])),
                draw(st.sampled_from(["x.small", "x.large", "x.huge"])),
                draw(
                    st.sampled_from(
                        ["T4", "A10G", "L4", "A100", "A100-80GB", "H100", "V100", "MI300X"]
                    )
                ),
                draw(st.sampled_from([1, 2, 4, 8])),
                8,
                64,
                price,
                spot,
                "",
                draw(st.sampled_from(["", "<5%", "5-10%", ">20%"])),
            )
        )
    return out


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    allow = draw(
        st.lists(
            st.sampled_from(["EU", "EEA", "GDPR", "CN-mainland", "US", "DE", "JP", "SG"]),
            max_size=3,
            unique=True,
        )
    )
    deny = draw(st.lists(st.sampled_from(["US", "CN-mainland", "FR"]), max_size=1))
    doc = {
        "market": draw(st.sampled_from(["spot", "on-demand", "spot-then-on-demand"])),
        "resources": {"gpu_count": draw(st.sampled_from([1, 2, 4, 8]))},
        "residency": {"allow": allow, "deny": deny},
        "bid_cap": {
            k: v
            for k, v in {
                "max_spot_price_per_hour": draw(st.one_of(st.none(), st.floats(0.01, 50))),
                "max_spot_price_per_gpu_hour": draw(st.one_of(st.none(), st.floats(0.01, 10))),
                "max_fraction_of_on_demand": draw(st.one_of(st.none(), st.floats(0.05, 1))),
            }.items()
            if v is not None
        },
        "budget": {
            k: v
            for k, v in {
                "max_price_per_hour": draw(st.one_of(st.none(), st.floats(0.05, 60)))
            }.items()
            if v is not None
        },
    }
    return Policy.model_validate(doc)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=policies(), offers=catalogs())
def test_no_placement_breaks_residency_bid_cap_or_budget(
    policy: Policy, offers: list[Offer]
) -> None:
    p = plan_offers(policy, Catalog.from_offers(offers), PlanContext(now=NOW), top=None)
    allow, deny = set(policy.residency.allow), set(policy.residency.deny)
    bid, budget = policy.bid_cap, policy.budget
    assert p.eligible + sum(p.rejected.values()) == p.candidates
    for pl in p.placements:
        o = pl.offer
        reg = regions().get((o.provider, o.region))
        if allow or deny:
            assert reg is not None
        if allow:
            assert reg is not None and (reg.jurisdictions & allow or reg.country in allow)
        if deny:
            assert reg is not None and not (reg.jurisdictions & deny) and reg.country not in deny
        price = o.price_for(pl.market)
        assert price is not None and pl.price_per_hour == price
        if budget.max_price_per_hour is not None:
            assert price <= budget.max_price_per_hour
        if pl.market is Market.SPOT:
            if bid.max_spot_price_per_hour is not None:
                assert price <= bid.max_spot_price_per_hour
            if bid.max_spot_price_per_gpu_hour is not None:
                assert price <= bid.max_spot_price_per_gpu_hour * o.gpu_count + 1e-12
            if bid.max_fraction_of_on_demand is not None:
                assert (
                    o.price is not None and price <= bid.max_fraction_of_on_demand * o.price + 1e-12
                )
            if pl.bid_cap_per_hour is not None:
                assert price <= pl.bid_cap_per_hour
        else:
            assert policy.allows_on_demand
        assert o.gpu_count == policy.resources.gpu_count
