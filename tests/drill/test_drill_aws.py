"""The drill on AWS through moto's server: the FIS experiment is on the wire (its template
naming the spot instance and ``aws:ec2:send-spot-instance-interruptions``), EC2 (the test, as
FIS would) serves the two-minute notice at IMDS, shortened, and reclaims the instance at its
end; every step holds and nothing is left in moto: no instance, no FIS template, no role."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("boto3")
pytest.importorskip("moto")

CONTRACT = Path(__file__).resolve().parents[1] / "contract"
if str(CONTRACT) not in sys.path:
    sys.path.insert(0, str(CONTRACT))

from harness_aws import REGION, make_harness  # noqa: E402

from provisioner.core.models import TAG_JOB  # noqa: E402
from tests.drill_util import assert_every_step_held, assert_nothing_left, drill_on_fake  # noqa: E402
from tests.e2e.test_e2e_aws_moto import offers, vms  # noqa: E402
from tests.fake_vms import MetadataServer  # noqa: E402

pytestmark = pytest.mark.e2e
NOTICE_S = 4.0  # the two-minute warning, shortened


def aws_drill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, harness: Any, gpu: str | None = None
) -> tuple[Any, Any, list[tuple[str, dict[str, Any]]], Any]:
    """One drill on moto, FIS's side played by the test: (report, ledger, the FIS and IAM
    calls on the wire, the adapter)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAPROVISIONERTEST")
    provider = harness.provider()
    monkeypatch.setattr(provider, "boot_seconds", 2.0, raising=False)
    meta = MetadataServer("aws")
    hv = vms(provider.client.ec2(REGION), "", meta, tmp_path / "vms")
    wire: list[tuple[str, dict[str, Any]]] = []

    def fis_acts(instance_id: str) -> None:  # what EC2 does once FIS sends the interruption
        meta.deadlines[instance_id] = time.time() + NOTICE_S
        time.sleep(NOTICE_S + 0.5)
        if instance_id in hv.running():
            hv.power_off(instance_id)
            harness.preempt(instance_id)

    def record(request: Any, event_name: str, **_: Any) -> None:
        op = event_name.rsplit(".", 1)[-1]
        body = request.body or b"{}"
        text = body.decode() if isinstance(body, bytes) else str(body)
        doc = json.loads(text) if text.strip().startswith("{") else {"form": text}
        wire.append((op, doc))
        if op == "StartExperiment":
            [(_, template)] = [w for w in wire if w[0] == "CreateExperimentTemplate"]
            [arn] = template["targets"]["SpotInstances"]["resourceArns"]
            iid = arn.rsplit("/", 1)[-1]
            threading.Thread(target=fis_acts, args=(iid,), daemon=True).start()

    provider.client.session.events.register("before-send.fis", record)
    provider.client.session.events.register("before-send.iam", record)
    # the hypervisor boots every instance of the drill's job (found by its tag)
    hv.running = _tagged_running(provider)
    report, ledger = drill_on_fake(tmp_path, "aws", provider, offers(), hv, region=REGION, gpu=gpu)
    return report, ledger, wire, provider


def assert_fis_cleaned(wire: list[tuple[str, dict[str, Any]]], provider: Any) -> None:
    """The template and the role are gone from moto."""
    ops = [op for op, _ in wire]
    assert "DeleteExperimentTemplate" in ops and "DeleteRole" in ops
    fis = provider.client.new_client("fis", REGION, provider.client.endpoint)
    assert fis.list_experiment_templates()["experimentTemplates"] == []
    iam = provider.client.new_client("iam", REGION, provider.client.endpoint)
    names = [r["RoleName"] for r in iam.list_roles()["Roles"]]
    assert not [n for n in names if n.startswith("provisioner-drill-")]


def test_the_aws_drill_interrupts_through_fis_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with make_harness() as harness:
        report, ledger, wire, provider = aws_drill(tmp_path, monkeypatch, harness)

        assert_every_step_held(report)
        ops = [op for op, _ in wire]
        assert ops.index("CreateExperimentTemplate") < ops.index("StartExperiment")
        [(_, template)] = [w for w in wire if w[0] == "CreateExperimentTemplate"]
        [action] = template["actions"].values()
        assert action["actionId"] == "aws:ec2:send-spot-instance-interruptions"
        assert action["parameters"] == {"durationBeforeInterruption": "PT2M"}
        first = report.to_json()["steps"][0]["detail"].split(":")[0]
        assert template["targets"]["SpotInstances"]["resourceArns"][0].endswith(f"/{first}")
        assert template["roleArn"].endswith(f"role/provisioner-drill-{ledger.drill_id}")
        [call] = report.wire
        assert call["call"] == "fis:StartExperiment"
        # cleanup: the template and the role are gone from moto, as the instances and objects
        assert_fis_cleaned(wire, provider)
        assert_nothing_left(provider, ledger)


def test_the_aws_cpu_drill_runs_on_m5_large_spot_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--gpu none``: the drill's own CPU offer (m5.large), launched as spot, interrupted
    through FIS, replaced, resumed; the same steps hold and nothing is left."""
    with make_harness() as harness:
        report, ledger, wire, provider = aws_drill(tmp_path, monkeypatch, harness, gpu="none")

        assert_every_step_held(report)
        launch = report.to_json()["steps"][0]["detail"]
        assert " m5.large (CPU) spot $" in launch, launch
        ec2 = provider.client.ec2(REGION)
        pages = ec2.describe_instances(
            Filters=[{"Name": f"tag:{TAG_JOB}", "Values": [ledger.job_id]}]
        )
        launched = [i for r in pages["Reservations"] for i in r["Instances"]]
        assert len(launched) == 2, launched  # the interrupted one and its replacement
        for i in launched:
            assert i["InstanceType"] == "m5.large"
            assert i.get("InstanceLifecycle") == "spot", i
        [call] = report.wire
        assert call["call"] == "fis:StartExperiment"
        assert_fis_cleaned(wire, provider)
        assert_nothing_left(provider, ledger)


def _tagged_running(provider: Any) -> Any:
    from provisioner.core.models import TAG_MANAGED

    ec2 = provider.client.ec2(REGION)

    def running() -> dict[str, str]:
        out = {}
        pages = ec2.describe_instances(Filters=[{"Name": f"tag:{TAG_MANAGED}", "Values": ["true"]}])
        for res in pages["Reservations"]:
            for i in res["Instances"]:
                if i["State"]["Name"] in ("pending", "running"):
                    out[i["InstanceId"]] = i["Placement"]["AvailabilityZone"]
        return out

    return running
