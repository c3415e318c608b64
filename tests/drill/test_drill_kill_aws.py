"""A drill on AWS (moto's server) killed half-way, after it made its FIS experiment template,
the role FIS assumes and its instance: ``provisioner drill --cleanup`` finds the drill's ledger
and deletes all of it, and moto is left with nothing of the drill's.

The drill runs as the user runs it: ``provisioner drill --provider aws`` in its own process,
pointed at moto by provider options; this test's "hypervisor" boots the instances moto holds
(the real agent, tests/fake_vms.py), so the job runs and the drill gets as far as the
interruption before it is killed with SIGKILL (no cleanup of its own)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("boto3")
pytest.importorskip("moto")

CONTRACT = Path(__file__).resolve().parents[1] / "contract"
if str(CONTRACT) not in sys.path:
    sys.path.insert(0, str(CONTRACT))

from harness_aws import ACCESS_KEY, REGION, SECRET, make_harness  # noqa: E402

from provisioner.core.models import TAG_MANAGED  # noqa: E402
from provisioner.drill.ledger import Ledger  # noqa: E402
from tests.drill_util import kill_mid_drill_then_clean  # noqa: E402
from tests.fake_vms import Hypervisor, MetadataServer  # noqa: E402
from tests.waiting import until  # noqa: E402

pytestmark = pytest.mark.e2e


def test_a_killed_aws_drill_leaves_nothing_after_cleanup(tmp_path: Path) -> None:
    with make_harness() as harness:
        provider = harness.provider()
        ec2 = provider.client.ec2(REGION)
        fis = provider.client.new_client("fis", REGION, provider.client.endpoint)
        iam = provider.client.new_client("iam", REGION, provider.client.endpoint)

        def running() -> dict[str, str]:
            pages = ec2.describe_instances(
                Filters=[{"Name": f"tag:{TAG_MANAGED}", "Values": ["true"]}]
            )
            return {
                i["InstanceId"]: i["Placement"]["AvailabilityZone"]
                for r in pages["Reservations"]
                for i in r["Instances"]
                if i["State"]["Name"] in ("pending", "running")
            }

        def script(iid: str) -> str:
            import base64

            attr = ec2.describe_instance_attribute(InstanceId=iid, Attribute="userData")
            return base64.b64decode(attr["UserData"]["Value"]).decode()

        def roles() -> list[str]:
            names = [r["RoleName"] for r in iam.list_roles()["Roles"]]
            return [n for n in names if n.startswith("provisioner-drill-")]

        def left(_ledger: Ledger) -> None:  # the instance, the FIS template, the role
            assert running(), "the drill's instance is still running"
            assert fis.list_experiment_templates()["experimentTemplates"]
            assert roles()

        env = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET}
        kill_mid_drill_then_clean(
            tmp_path,
            "aws",
            Hypervisor(running, script, MetadataServer("aws"), tmp_path / "vms"),
            region=REGION,
            options=[f"endpoint={harness.endpoint}", f"image={harness._moto_image()}"],
            env=env,
            halfway=lambda ledger: "fis-experiment" in {r.kind for r in ledger.resources},
            left=left,
        )
        assert until(lambda: not running(), 10)
        assert fis.list_experiment_templates()["experimentTemplates"] == []
        assert roles() == []
