"""A drill killed half-way on GCP, Azure, Alibaba and Tencent (their HTTP fakes), as
tests/drill/test_drill_kill_aws.py does on moto: ``provisioner drill --provider P`` in its own
process, pointed at the fake by provider options, is killed with SIGKILL once it has sent the
interruption (GCP simulateMaintenanceEvent, Azure simulateEviction, the substitute notice
written to the store on Alibaba and Tencent); the fake still holds the drill's instance and
the store its objects. ``provisioner drill --cleanup`` then finds the drill's ledger and
deletes all of it, and the fake is asked to prove nothing of the drill's is left: no instance,
no disk or NIC where the cloud keeps them apart, no placement group, no object.

The fakes here do not play the cloud's part after the interruption call (no notice served,
no preemption): the drill is killed while it waits for the notice, with its instance running.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

CONTRACT = Path(__file__).resolve().parents[1] / "contract"
if str(CONTRACT) not in sys.path:
    sys.path.insert(0, str(CONTRACT))

from provisioner.agent.notices import SUBSTITUTE_NOTICE  # noqa: E402
from provisioner.drill.ledger import Ledger  # noqa: E402
from tests.drill_util import kill_mid_drill_then_clean  # noqa: E402
from tests.fake_vms import MetadataServer  # noqa: E402

pytestmark = pytest.mark.e2e


def test_a_killed_gcp_drill_leaves_nothing_after_cleanup(tmp_path: Path) -> None:
    pytest.importorskip("google.cloud.compute_v1")
    pytest.importorskip("cryptography")
    from fakes.gcp_secrets import GcpSecretsFake
    from fakes.gcp_server import GCPServer

    from tests.drill.test_drill_gcp import REGION, ZONES, vms

    project = "provisioner-drill"
    # the token endpoint a service-account key names; the Compute fake takes its bearer
    with GcpSecretsFake() as oauth, GCPServer(project) as server:
        key = oauth.service_account_file(tmp_path / "sa.json", project=project)
        sent: list[str] = []
        server.on_maintenance_event = lambda name, _zone: sent.append(name)  # no notice
        hv = vms(server, MetadataServer("gcp"), tmp_path / "vms")

        def left(_ledger: Ledger) -> None:
            assert [i["name"] for i in server.instances()] == sent, server.instances()

        kill_mid_drill_then_clean(
            tmp_path,
            "gcp",
            hv,
            region=REGION,
            options=[
                f"project={project}",
                f"zones=[{','.join(ZONES)}]",
                f"endpoint={server.endpoint}",
                f"credentials={key}",
            ],
            halfway=lambda _ledger: bool(sent),
            left=left,
        )
        assert server.instances() == [], "no instance left at the fake"
        assert not server._state.policies, "no placement policy left at the fake"


def test_a_killed_azure_drill_leaves_nothing_after_cleanup(tmp_path: Path) -> None:
    pytest.importorskip("azure.mgmt.compute")
    pytest.importorskip("azure.mgmt.network")
    from harness_azure import REGION, TOKEN, make_harness

    from tests.e2e.test_e2e_azure_notice import vms

    with make_harness() as harness:
        server = harness.server
        sent: list[str] = []
        server.on_simulate_eviction = sent.append  # no Preempt event, no eviction
        hv = vms(server, MetadataServer("azure"), tmp_path / "vms")

        def left(_ledger: Ledger) -> None:
            assert [n.lower() for n in server._state.vms] == sent, list(server._state.vms)
            assert server._state.nics, "the VM's NIC is there"

        kill_mid_drill_then_clean(
            tmp_path,
            "azure",
            hv,
            region=REGION,
            options=[
                f"subscription_id={server.subscription_id}",
                f"resource_group={server.resource_group}",
                f"location={REGION}",
                f"subnet_id={server.subnet_id}",
                f"endpoint={server.endpoint}",
                f"credentials={TOKEN}",
                "ssh_public_key='ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKey drill@test'",
                "polling_interval=0",
            ],
            halfway=lambda _ledger: bool(sent),
            left=left,
        )
        assert not server._state.vms, "no VM left at the fake"
        assert not server._state.nics, "no NIC left at the fake"
        assert not server._state.ppgs, "no placement group left at the fake"


def _notice_written(tmp_path: Path) -> Any:
    """Whether the substitute notice is in the store (for whichever attempt launched first)."""

    def written(ledger: Ledger) -> bool:
        notice = SUBSTITUTE_NOTICE.format(attempt="*")
        return any((tmp_path / "ck" / ledger.job_id).glob(notice))

    return written


def test_a_killed_alibaba_drill_leaves_nothing_after_cleanup(tmp_path: Path) -> None:
    pytest.importorskip("alibabacloud_ecs20140526")
    from harness_alibaba import IMAGE, KEY_ID, SECRET, make_harness

    from tests.drill.test_drill_substitute import alibaba_vms

    with make_harness() as harness:
        server = harness.server
        hv = alibaba_vms(server, MetadataServer("alibaba"), tmp_path / "vms")

        def left(_ledger: Ledger) -> None:
            assert [i for i in server.instances().values() if i["Status"] == "Running"]

        kill_mid_drill_then_clean(
            tmp_path,
            "alibaba",
            hv,
            region=server.region,
            options=[
                f"region={server.region}",
                f"endpoint={server.endpoint}",
                f"image_id={IMAGE}",
                "vswitch_id=vsw-bp1fakevswitch0001",
                "security_group_id=sg-bp1fakegroup00001",
            ],
            env={"ALIBABA_CLOUD_ACCESS_KEY_ID": KEY_ID, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET},
            extra=["--gpu", "T4"],  # one the fake sells
            halfway=_notice_written(tmp_path),
            left=left,
        )
        assert server.instances() == {}, "no instance left at the fake"
        assert not server._sets, "no deployment set left at the fake"


def test_a_killed_tencent_drill_leaves_nothing_after_cleanup(tmp_path: Path) -> None:
    pytest.importorskip("tencentcloud.cvm")
    from harness_tencent import IMAGE, SECRET_ID, SECRET_KEY, make_harness

    from tests.drill.test_drill_substitute import tencent_vms

    def alive(server: Any) -> list[str]:
        return [
            iid
            for iid, i in server.instances().items()
            if i["InstanceState"] in ("PENDING", "RUNNING")
        ]

    with make_harness() as harness:
        server = harness.server
        hv = tencent_vms(server, MetadataServer("tencent"), tmp_path / "vms")
        kill_mid_drill_then_clean(
            tmp_path,
            "tencent",
            hv,
            region=server.region,
            options=[
                f"region={server.region}",
                f"endpoint={server.endpoint}",
                f"image_id={IMAGE}",
                "vpc_id=vpc-fake0001",
                "subnet_id=subnet-fake0001",
                "security_group_ids=[sg-fake0001]",
                "currency=USD",
            ],
            env={"TENCENTCLOUD_SECRET_ID": SECRET_ID, "TENCENTCLOUD_SECRET_KEY": SECRET_KEY},
            halfway=_notice_written(tmp_path),
            left=lambda _ledger: alive(server) or pytest.fail("the drill's instance is gone"),
        )
        assert alive(server) == [], "no instance left running at the fake"
        assert not server._groups, "no placement group left at the fake"
