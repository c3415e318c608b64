"""A drill on AWS (moto's server) killed half-way, after it made its FIS experiment template,
the role FIS assumes and its instance: ``provisioner drill --cleanup`` finds the drill's ledger
and deletes all of it, and moto is left with nothing of the drill's.

The drill runs as the user runs it: ``provisioner drill --provider aws`` in its own process,
pointed at moto by provider options; this test's "hypervisor" boots the instances moto holds
(the real agent, tests/fake_vms.py), so the job runs and the drill gets as far as the
interruption before it is killed with SIGKILL (no cleanup of its own)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("boto3")
pytest.importorskip("moto")

CONTRACT = Path(__file__).resolve().parent / "contract"
if str(CONTRACT) not in sys.path:
    sys.path.insert(0, str(CONTRACT))

from harness_aws import ACCESS_KEY, REGION, SECRET, make_harness  # noqa: E402

from provisioner.core.models import TAG_MANAGED  # noqa: E402
from provisioner.drill.ledger import Ledger  # noqa: E402
from tests.drill_util import PACKAGE  # noqa: E402
from tests.e2e_util import REPO  # noqa: E402
from tests.fake_vms import Hypervisor, MetadataServer  # noqa: E402
from tests.waiting import until  # noqa: E402

pytestmark = pytest.mark.e2e


def test_a_killed_aws_drill_leaves_nothing_after_cleanup(tmp_path: Path) -> None:
    with make_harness() as harness:
        provider = harness.provider()
        ec2 = provider.client(REGION)
        env = dict(
            os.environ,
            PYTHONPATH=str(REPO),
            NO_COLOR="1",
            AWS_ACCESS_KEY_ID=ACCESS_KEY,
            AWS_SECRET_ACCESS_KEY=SECRET,
        )
        env.pop("AWS_PROFILE", None)
        state = tmp_path / "state"
        options = [
            f"endpoint={harness.endpoint}",
            f"image={harness._moto_image()}",
            f"package_spec={PACKAGE}",
        ]
        args = [sys.executable, "-m", "provisioner", "drill", "--state-dir", str(state)]
        drill = subprocess.Popen(
            [
                *args,
                "--provider",
                "aws",
                "--max-cost",
                "1",
                "--region",
                REGION,
                "--step-seconds",
                "0.3",  # the job, paced for a test (a real drill's outlasts the notice)
                "--checkpoint-uri",
                f"file://{tmp_path / 'ck'}",
                *[x for o in options for x in ("-o", o)],
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

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

        hv = Hypervisor(running, script, MetadataServer("aws"), tmp_path / "vms")
        hv.thread.start()
        try:

            def interrupted() -> bool:
                ledgers = list((state / "drills").glob("*/ledger.json"))
                if not ledgers:
                    return False
                try:
                    kinds = {r.kind for r in Ledger.load(ledgers[0]).resources}
                except ValueError:
                    return False
                return "fis-experiment" in kinds or drill.poll() is not None

            assert until(interrupted, 150, every=0.3)
            assert drill.poll() is None, drill.communicate()[0]
            drill.send_signal(signal.SIGKILL)
            drill.communicate(timeout=30)
            ledger = Ledger.load(next((state / "drills").glob("*/ledger.json")))
            assert not ledger.cleaned
            # what the kill left: the instance, the FIS template, the role, the objects
            assert running(), "the drill's instance is still running"
            fis = provider._new_client("fis", REGION, provider.endpoint)
            iam = provider._new_client("iam", REGION, provider.endpoint)
            assert fis.list_experiment_templates()["experimentTemplates"]
            assert [
                r
                for r in iam.list_roles()["Roles"]
                if r["RoleName"].startswith("provisioner-drill-")
            ]
            ck = tmp_path / "ck" / ledger.job_id
            assert ck.exists()

            done = subprocess.run(
                [*args, "--cleanup"], cwd=REPO, env=env, capture_output=True, text=True, timeout=240
            )
            assert done.returncode == 0, done.stdout + done.stderr
            assert f"{ledger.drill_id} (aws): everything deleted" in done.stdout
            assert until(lambda: not running(), 10)
            assert fis.list_experiment_templates()["experimentTemplates"] == []
            assert not [
                r
                for r in iam.list_roles()["Roles"]
                if r["RoleName"].startswith("provisioner-drill-")
            ]
            assert not ck.exists()
            assert Ledger.load(ledger.path or Path()).cleaned
        finally:
            if drill.poll() is None:
                drill.kill()
                drill.communicate(timeout=30)
            hv.close()
