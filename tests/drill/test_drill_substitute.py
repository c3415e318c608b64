"""The drill on Alibaba and Tencent through their HTTP fakes. Neither cloud has an API that
interrupts a spot instance, so the drill's substitute runs: the notice, in the cloud's own
``termination-time`` format, is written to the job's directory in the checkpoint store; the
real agent serves it to itself (provisioner.agent.notices) and checkpoints; the drill then
terminates the instance through the cloud's API (on the wire), as the cloud would at the
deadline. Every step holds, the substituted ones are labelled so, nothing is left."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any

import pytest

CONTRACT = Path(__file__).resolve().parents[1] / "contract"
if str(CONTRACT) not in sys.path:
    sys.path.insert(0, str(CONTRACT))

from provisioner.core.models import Offer  # noqa: E402
from tests.drill_util import assert_every_step_held, assert_nothing_left, drill_on_fake  # noqa: E402
from tests.fake_vms import Hypervisor, MetadataServer  # noqa: E402

pytestmark = pytest.mark.e2e


def alibaba_vms(server: Any, meta: MetadataServer, root: Path) -> Hypervisor:
    def running() -> dict[str, str]:
        return {
            iid: i["ZoneId"]
            for iid, i in server.instances().items()
            if i["Status"] in ("Pending", "Running") and not i["OperationLocks"]["LockReason"]
        }

    def script(iid: str) -> str:
        return base64.b64decode(server.user_data(iid)).decode()

    return Hypervisor(running, script, meta, root)


def tencent_vms(server: Any, meta: MetadataServer, root: Path) -> Hypervisor:
    def running() -> dict[str, str]:
        return {
            iid: i["Placement"]["Zone"]
            for iid, i in server.instances().items()
            if i["InstanceState"] in ("PENDING", "RUNNING")
        }

    def script(iid: str) -> str:
        return base64.b64decode(server.instances()[iid]["_UserData"]).decode()

    return Hypervisor(running, script, meta, root)


def test_the_alibaba_drill_runs_the_substitute_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("alibabacloud_ecs20140526")
    from harness_alibaba import make_harness

    with make_harness() as harness:
        server = harness.server
        provider = harness.provider()
        monkeypatch.setattr(provider, "boot_seconds", 2.0, raising=False)
        offers = [
            Offer("alibaba", server.region, z, "ecs.gn7i-c8g1.2xlarge", "A10", 1, 8, 30.0, 1.20, p)
            for z, p in (("cn-hangzhou-h", 0.36), ("cn-hangzhou-i", 0.40))
        ]
        hv = alibaba_vms(server, MetadataServer("alibaba"), tmp_path / "vms")
        report, ledger = drill_on_fake(
            tmp_path, "alibaba", provider, offers, hv, region=server.region
        )
        assert_every_step_held(report, substitute=True)
        old = report.to_json()["steps"][0]["detail"].split(":")[0]
        [call] = report.wire
        assert call["body"].endswith("Z") and "T" in call["body"], call  # ECS's ISO time
        deletes = [r.params for r in server.calls("DeleteInstances")]
        assert any(p.get("InstanceId.1") == old for p in deletes), deletes
        assert_nothing_left(provider, ledger)
        assert server.instances() == {}, "no instance left at the fake"


def test_the_tencent_drill_runs_the_substitute_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("tencentcloud.cvm")
    from harness_tencent import make_harness

    with make_harness() as harness:
        server = harness.server
        provider = harness.provider()
        monkeypatch.setattr(provider, "boot_seconds", 2.0, raising=False)
        offers = [
            Offer("tencent", server.region, z, "GN7.2XLARGE32", "T4", 1, 8, 32.0, 1.30, p)
            for z, p in (("ap-guangzhou-3", 0.41), ("ap-guangzhou-4", 0.45))
        ]
        hv = tencent_vms(server, MetadataServer("tencent"), tmp_path / "vms")
        report, ledger = drill_on_fake(
            tmp_path, "tencent", provider, offers, hv, region=server.region
        )
        assert_every_step_held(report, substitute=True)
        old = report.to_json()["steps"][0]["detail"].split(":")[0]
        [call] = report.wire
        assert "T" not in call["body"] and len(call["body"]) == 19, call  # CVM's Beijing time
        terminates = [r.params for r in server.calls("TerminateInstances")]
        assert any(old in (p.get("InstanceIds") or []) for p in terminates), terminates
        assert_nothing_left(provider, ledger)
        assert not [
            i for i in server.instances().values() if i["InstanceState"] in ("PENDING", "RUNNING")
        ], "no instance left running at the fake"
