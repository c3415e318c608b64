"""``provisioner drill --dry-run``: the API calls in order and the permissions, per cloud, with
nothing done; and the drill's own policy (its price cap from --max-cost)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from policies.model import Policy
from provisioner.cli import cli
from provisioner.drill.interrupters import fis_template, substitute_notice_text
from provisioner.drill.target import DrillTarget, policy_doc

CLOUDS = ("aws", "gcp", "azure", "alibaba", "tencent")


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["drill", *args])
    return result.exit_code, result.output


def test_the_aws_dry_run_lists_the_fis_calls_and_an_iam_policy(tmp_path: Path) -> None:
    code, out = run(
        "--provider",
        "aws",
        "--dry-run",
        "--checkpoint-uri",
        "s3://ck-bucket/drills",
        "--state-dir",
        str(tmp_path),
    )
    assert code == 0, out
    lines = out.splitlines()
    order = [
        next(i for i, line in enumerate(lines) if what in line)
        for what in (
            "ec2:RunInstances (spot",
            "iam:CreateRole",
            "fis:CreateExperimentTemplate",
            "fis:StartExperiment",
            "ec2:TerminateInstances",
            "fis:StopExperiment, fis:DeleteExperimentTemplate",
            "iam:DeleteRole",
        )
    ]
    assert order == sorted(order), "the calls come in the order the drill makes them"
    assert "aws:ec2:send-spot-instance-interruptions" in out
    start = out.index("caller_policy (IAM policy document):") + len(
        "caller_policy (IAM policy document):"
    )
    doc = json.JSONDecoder().raw_decode(out[start:].lstrip())[0]
    actions = {a for s in doc["Statement"] for a in s["Action"]}
    assert {
        "fis:CreateExperimentTemplate",
        "fis:StartExperiment",
        "iam:PassRole",
        "ec2:RunInstances",
        "ec2:TerminateInstances",
    } <= actions
    assert any(s["Resource"] == "arn:aws:s3:::ck-bucket" for s in doc["Statement"])
    assert not (tmp_path / "drills").exists(), "a dry run makes nothing"


@pytest.mark.parametrize("cloud", CLOUDS)
def test_every_cloud_has_calls_and_permissions_for_caller_and_vm(cloud: str) -> None:
    code, out = run("--provider", cloud, "--dry-run", "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["calls"] and doc["caller_permissions"] and doc["vm_permissions"]
    whos = {c["who"] for c in doc["calls"]}
    assert {"caller", "vm"} <= whos
    text = json.dumps(doc)
    wanted = {
        "aws": "fis:StartExperiment",
        "gcp": "simulateMaintenanceEvent",
        "azure": "Microsoft.Compute/virtualMachines/simulateEviction/action",
        "alibaba": "substitute",
        "tencent": "substitute",
    }[cloud]
    assert wanted in text
    if cloud in ("alibaba", "tencent"):
        assert "API reference" in text, "says which documentation shows no interruption API"


def test_a_drill_without_provider_or_with_no_cost_is_refused(tmp_path: Path) -> None:
    code, out = run("--max-cost", "1", "--state-dir", str(tmp_path))
    assert code == 2 and "--provider is required" in out
    code, out = run("--provider", "sim", "--max-cost", "0", "--state-dir", str(tmp_path))
    assert code == 2 and "more than 0" in out
    code, out = run("--provider", "aws", "--max-cost", "1", "--state-dir", str(tmp_path))
    assert code == 2 and "--checkpoint-uri is required on aws" in out
    assert not (tmp_path / "drills").exists(), "nothing was made"


def test_the_drills_policy_caps_the_price_by_max_cost(tmp_path: Path) -> None:
    target = DrillTarget(provider="aws", max_cost=2.0, state_dir=tmp_path, region="us-east-1")
    doc = policy_doc(target, "s3://b/p", None)
    policy = Policy.model_validate(doc)  # a valid policy
    # two instances for the whole 30-minute limit: an hour of billing at most
    assert policy.bid_cap.max_spot_price_per_hour == pytest.approx(2.0)
    assert policy.budget.max_total == 2.0
    assert policy.market.value == "spot" and policy.residency.allow_regions == ["us-east-1"]
    # the job outlasts three of AWS's two-minute notices
    assert target.steps * target.pace() >= 3 * 120


def test_the_fis_template_names_one_instance_and_the_spot_action() -> None:
    t = fis_template("drill-1", "arn:aws:iam::1:role/r", "arn:aws:ec2:us-east-1:1:instance/i-1")
    [action] = t["actions"].values()
    assert action["actionId"] == "aws:ec2:send-spot-instance-interruptions"
    assert t["targets"]["SpotInstances"]["resourceArns"] == ["arn:aws:ec2:us-east-1:1:instance/i-1"]


def test_the_substitute_notice_is_in_each_clouds_format() -> None:
    from datetime import UTC, datetime

    from providers.facts import cloud_facts

    at = datetime(2026, 12, 6, 20, 0, 5, tzinfo=UTC)
    for cloud in ("alibaba", "tencent"):
        text = substitute_notice_text(cloud, at)
        reading = cloud_facts(cloud).notice.parse(200, text)
        assert reading is not None and reading.deadline == at, (cloud, text)


def test_getting_started_says_what_each_failed_step_means() -> None:
    from provisioner.drill.steps import MEANING

    doc = (Path(__file__).resolve().parents[2] / "docs" / "getting-started.md").read_text()
    for name, (proves, fails) in MEANING.items():
        row = next(line for line in doc.splitlines() if line.startswith(f"| `{name.value}` |"))
        assert row == f"| `{name.value}` | {proves} | {fails} |", row


def test_a_drill_with_nothing_under_its_cap_is_refused_with_what_to_change(tmp_path: Path) -> None:
    code, out = run("--provider", "sim", "--max-cost", "0.001", "--state-dir", str(tmp_path))
    assert code == 3, out
    assert "nothing eligible" in out and "raise --max-cost" in out
    assert "left behind" not in out


def test_cleanup_says_what_it_could_not_delete_and_keeps_the_ledger(tmp_path: Path) -> None:
    from providers.base import ErrorKind, ProviderError
    from provisioner.drill.cleanup import clean
    from provisioner.drill.ledger import Ledger, open_ledgers

    ledger = Ledger.create(
        tmp_path,
        drill_id="drill-gone",
        provider="aws",
        region="us-east-1",
        job_id="drill-gone",
        checkpoint_uri=f"file://{tmp_path / 'ck'}",
        store_url=f"sqlite:///{tmp_path / 's.db'}",
    )
    (tmp_path / "ck" / "drill-gone").mkdir(parents=True)

    def unreachable(_name: str, _options: dict[str, object]) -> object:
        raise ProviderError(ErrorKind.AUTH, "ExpiredToken", "the token has expired", provider="aws")

    left = clean(ledger, unreachable)
    assert len(left) == 1 and "cannot reach the provider" in left[0] and "drill-gone" in left[0]
    assert not (tmp_path / "ck" / "drill-gone").exists(), "the objects it could reach are gone"
    assert [x.drill_id for x in open_ledgers(tmp_path)] == ["drill-gone"], "kept for a retry"
