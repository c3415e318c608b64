"""The planner with measured figures: a type its probes found slower than its datasheet loses
its place in the TFLOPS-per-dollar ranking and its estimated hours grow."""

from __future__ import annotations

from datetime import UTC, datetime

from policies import parse_policy
from provisioner.core.catalog import Catalog
from provisioner.core.models import Offer
from provisioner.core.planner import PlanContext, plan_offers
from provisioner.probe.measured import Measured, ProbeFact, summarise

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)

# Two on-demand offers for one A100: by datasheet, the p4-ish type gives more TFLOPS per dollar.
OFFERS = [
    Offer("aws", "us-east-1", "us-east-1a", "fast.a100", "A100", 1, 12, 85, 3.0, None, "2026-12-01"),
    Offer("gcp", "us-central1", "us-central1-a", "a2-highgpu-1g", "A100", 1, 12, 85, 3.3, None, "2026-12-01"),
]  # fmt: skip
POLICY = """
market: on-demand
preferences: {price: 0, interruption_risk: 0, tflops_per_dollar: 1}
job: {compute_hours: 10, reference_gpu: A100}
"""


def plan(policy: str = POLICY, measured: dict | None = None):  # type: ignore[no-untyped-def]
    return plan_offers(
        parse_policy(policy),
        Catalog.from_offers(OFFERS),
        PlanContext(now=NOW, measured=measured or {}),
        top=None,
    )


def slow(fraction: float, runs: int = 6) -> dict:  # type: ignore[type-arg]
    facts = [
        ProbeFact("aws", "fast.a100", "A100", fraction + d, 312 * (fraction + d), "bf16", NOW)
        for d in (-0.01, 0.0, 0.01)[: min(3, runs)]
    ] + [ProbeFact("aws", "fast.a100", "A100", fraction, None, "bf16", NOW)] * max(0, runs - 3)
    return summarise(facts)


def test_measurements_that_say_a_type_is_slow_change_the_ranking() -> None:
    by_sheet = plan()
    assert [p.offer.instance_type for p in by_sheet.placements] == ["fast.a100", "a2-highgpu-1g"]
    first = by_sheet.placements[0]
    assert first.est_hours == 10.0  # the datasheet's A100 is the reference
    assert not any("measured" in r for r in first.reasons)

    measured = slow(0.6)
    m = measured[("aws", "fast.a100", "A100")]
    assert isinstance(m, Measured) and m.runs == 6 and m.fraction == 0.6
    got = plan(measured=measured)
    assert [p.offer.instance_type for p in got.placements] == ["a2-highgpu-1g", "fast.a100"]
    aws = next(p for p in got.placements if p.offer.instance_type == "fast.a100")
    assert aws.est_hours == 10.0 / 0.6  # the job takes longer on the slow card
    assert aws.tflops_per_dollar == 312 * 0.6 / 3.0
    note = next(r for r in aws.reasons if r.startswith("measured"))
    assert note == "measured 62 TFLOPS/$ over 6 run(s) (60% of datasheet, 104)"
    gcp = next(p for p in got.placements if p.offer.instance_type == "a2-highgpu-1g")
    assert gcp.est_hours == 10.0 and not any("measured" in r for r in gcp.reasons)


def test_a_type_measured_close_to_its_datasheet_keeps_its_place() -> None:
    got = plan(measured=slow(0.97))
    assert [p.offer.instance_type for p in got.placements] == ["fast.a100", "a2-highgpu-1g"]


def test_min_measured_fraction_rejects_a_type_measured_below_it() -> None:
    policy = POLICY + "resources: {min_measured_fraction: 0.8}\n"
    got = plan(policy, measured=slow(0.6))
    assert [p.offer.instance_type for p in got.placements] == ["a2-highgpu-1g"]
    assert got.rejected == {"measured": 1}
    assert got.eligible + sum(got.rejected.values()) == got.candidates
    # not measured: not rejected (no probe yet is no evidence)
    assert plan(policy).eligible == 2


def test_summary_is_the_median_and_ignores_runs_without_a_figure() -> None:
    facts = [
        ProbeFact("aws", "t", "H100", f, None, "bf16", NOW) for f in (0.9, 0.5, 0.95, None, 0.0)
    ]
    m = summarise(facts)[("aws", "t", "H100")]
    assert m.runs == 3 and m.fraction == 0.9 and m.lowest == 0.5
