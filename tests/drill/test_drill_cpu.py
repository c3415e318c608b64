"""``provisioner drill --gpu none``: the drill on one small CPU instance type with spot per cloud
(provisioner/drill/cpu.py), placed by the drill's own controller on its own CPU offers; the
normal planner still places GPU offers only. The sim's whole drill passes every step; the dry
run names the type; ``--max-cost`` bounds it (the AWS drill on moto: tests/drill/test_drill_aws.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from policies.model import Policy
from provisioner.cli import cli
from provisioner.core.catalog import Catalog
from provisioner.core.models import Market
from provisioner.core.planner import PlanContext, plan_offers
from provisioner.drill.cpu import CPU_TYPES, cpu_offers, cpu_plan
from provisioner.drill.steps import StepName
from provisioner.drill.target import DrillTarget, policy_doc

CLOUDS = ("aws", "gcp", "azure", "alibaba", "tencent")


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["drill", *args])
    return result.exit_code, result.output


def test_each_cloud_has_one_small_cpu_type_with_its_price_sources() -> None:
    assert set(CPU_TYPES) == set(CLOUDS)
    for cloud, t in CPU_TYPES.items():
        assert t.cloud == cloud and t.vcpus <= 2 and t.memory_gib <= 8 and t.source
        for o in cpu_offers(cloud, None):
            assert (o.gpu, o.gpu_count, o.provider, o.region) == ("", 0, cloud, t.region)
            assert o.zone in t.zones and o.instance_type == t.instance_type
            # an unknown spot price is bounded by the on-demand one
            assert o.spot_price == (t.spot if t.spot is not None else t.on_demand)
    assert CPU_TYPES["gcp"].spot == 0.040212  # the shared data's figure, as the comment says
    zones = {o.zone for o in cpu_offers("gcp", "europe-west4")}
    assert zones == {"europe-west4-a", "europe-west4-b", "europe-west4-c"}


@pytest.mark.parametrize("cloud", CLOUDS)
def test_the_dry_run_names_the_cpu_type(cloud: str) -> None:
    code, out = run("--provider", cloud, "--gpu", "none", "--dry-run")
    assert code == 0, out
    [line] = [x for x in out.splitlines() if x.startswith("instance: ")]
    assert CPU_TYPES[cloud].instance_type in line and "no GPU" in line and "spot" in line
    code, out = run("--provider", cloud, "--gpu", "none", "--dry-run", "--json")
    assert code == 0 and json.loads(out)["instance_type"] == CPU_TYPES[cloud].instance_type


def test_the_aws_dry_run_without_gpu_none_names_no_cpu_type() -> None:
    code, out = run("--provider", "aws", "--dry-run")
    assert code == 0 and "m5.large" not in out and "cheapest spot GPU" in out


def test_the_cpu_plan_is_spot_cheapest_first_under_the_cap() -> None:
    offers = cpu_offers("aws", None)
    plan = cpu_plan(None, offers, 1.0, frozenset({("aws", "us-east-1a")}))
    assert [p.offer.zone for p in plan.placements] == ["us-east-1b", "us-east-1c"]
    for p in plan.placements:
        assert p.market is Market.SPOT and p.bid_cap_per_hour == 1.0
        assert p.price_per_hour == CPU_TYPES["aws"].spot
    assert plan.rejected == {"cooldown": 1}
    under = cpu_plan(None, offers, 0.01, frozenset())
    assert under.placements == [] and under.rejected == {"price_cap": 3}
    # a type with no price known here: the cap is what it may cost, and it is placed
    [first, *_] = cpu_plan(None, cpu_offers("tencent", None), 0.05, frozenset()).placements
    assert first.price_per_hour == 0.05 and "at most the cap" in first.reasons[0]


def test_the_normal_planner_still_places_no_cpu_offer(tmp_path: Path) -> None:
    """The CPU offers exist only in the drill's list; given to the planner with the drill's own
    policy they are rejected (a policy asks for a GPU): its rules are not weakened."""
    target = DrillTarget(provider="aws", max_cost=1.0, state_dir=tmp_path, gpu="none")
    policy = Policy.model_validate(policy_doc(target, "s3://b/p", None))
    now = datetime(2026, 12, 6, tzinfo=UTC)
    plan = plan_offers(policy, Catalog.from_offers(cpu_offers("aws", None)), PlanContext(now=now))
    assert plan.placements == [] and plan.rejected


def test_the_cpu_drills_policy_keeps_the_cap_and_budget_and_drops_gpu_rules(
    tmp_path: Path,
) -> None:
    user = {
        "name": "mine",
        "job": {"command": ["true"]},
        "resources": {"gpus": ["A100"], "min_vram_gb": 40},
        "bid_cap": {"max_spot_price_per_gpu_hour": 0.5, "max_fraction_of_on_demand": 0.4},
    }
    target = DrillTarget(provider="aws", max_cost=2.0, state_dir=tmp_path, gpu="none")
    policy = Policy.model_validate(policy_doc(target, "s3://b/p", user))
    assert policy.resources.gpus is None and policy.resources.min_vram_gb is None
    assert policy.bid_cap.max_spot_price_per_hour == pytest.approx(2.0)
    assert policy.bid_cap.max_spot_price_per_gpu_hour is None
    assert policy.bid_cap.max_fraction_of_on_demand is None
    assert policy.budget.max_total == 2.0 and policy.market.value == "spot"


def test_max_cost_bounds_the_cpu_drill(tmp_path: Path) -> None:
    code, out = run(
        "--provider", "sim", "--gpu", "none", "--max-cost", "0.001", "--state-dir", str(tmp_path)
    )  # fmt: skip
    assert code == 3, out
    assert "nothing eligible" in out and "m5.large" in out and "raise --max-cost" in out
    assert "left behind" not in out


@pytest.mark.e2e
def test_the_cpu_sim_drill_passes_every_step_and_leaves_nothing(tmp_path: Path) -> None:
    from tests.drill.test_drill_sim import cli as drill_cli
    from tests.drill.test_drill_sim import ledger_of, nothing_left, sandbox_pids

    proc = drill_cli(
        "--provider", "sim", "--gpu", "none", "--max-cost", "1", "--state-dir", str(tmp_path),
        "--json",
    )  # fmt: skip
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    doc = json.loads(out)
    assert doc["passed"] is True and not doc["stopped"], doc
    assert [s["step"] for s in doc["steps"]] == [n.value for n in StepName]
    assert all(s["outcome"] == "held" for s in doc["steps"]), doc["steps"]
    launch = doc["steps"][0]["detail"]
    assert " m5.large (CPU) spot $0.0326/h" in launch, launch
    assert 0 < doc["cost_usd"] <= 1 and doc["left_behind"] == []
    ledger = ledger_of(tmp_path)
    assert "# --gpu none" in (ledger.directory / "policy.yaml").read_text()
    nothing_left(tmp_path, ledger, sandbox_pids(ledger))
