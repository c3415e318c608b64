"""End to end on AWS through moto's server: the job survives a spot preemption.

moto plays EC2 (the real boto3 adapter launches spot instances there, with the bid cap on the
wire, and moto reports the termination with ``Server.SpotInstanceTermination``). moto runs no
VMs, so a small "hypervisor" here boots each instance the way a real one would: it reads the
instance's user data (our bootstrap script), takes the job spec out of it, and starts the node
agent with it, pointed at an IMDSv2 metadata endpoint in AWS's format served by the sim's
metadata service. A preemption serves the notice there first, then kills the "VM" and
terminates the instance in moto. EC2's API reports nothing during the notice (as the real one
without an EventBridge rule): the controller learns of it from the agent's progress record.
"""

from __future__ import annotations

import base64
import json
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("boto3")
pytest.importorskip("moto")

CONTRACT = Path(__file__).resolve().parents[1] / "contract"
if str(CONTRACT) not in sys.path:
    sys.path.insert(0, str(CONTRACT))

from harness_aws import REGION, make_harness  # noqa: E402

from provisioner.control.reconciler import Reconciler  # noqa: E402
from provisioner.control.store import FINAL_STATES, Store  # noqa: E402
from provisioner.core.catalog import Catalog  # noqa: E402
from provisioner.core.models import TAG_JOB, Offer  # noqa: E402
from provisioner.core.timefmt import utc  # noqa: E402
from tests.e2e_util import reference_result, write_policy  # noqa: E402
from tests.fake_vms import Hypervisor, MetadataServer  # noqa: E402

pytestmark = pytest.mark.e2e
STEPS = 400


def vms(ec2: Any, job_id: str, meta: MetadataServer, root: Path) -> Hypervisor:
    """The job's instances in moto, booted: their user data decoded, their zones."""

    def running() -> dict[str, str]:
        out = {}
        pages = ec2.describe_instances(Filters=[{"Name": f"tag:{TAG_JOB}", "Values": [job_id]}])
        for res in pages["Reservations"]:
            for i in res["Instances"]:
                if i["State"]["Name"] in ("pending", "running"):
                    out[i["InstanceId"]] = i["Placement"]["AvailabilityZone"]
        return out

    def script(iid: str) -> str:
        attr = ec2.describe_instance_attribute(InstanceId=iid, Attribute="userData")
        return base64.b64decode(attr["UserData"]["Value"]).decode()

    return Hypervisor(running, script, meta, root)


def offers() -> list[Offer]:
    return [
        Offer(
            "aws",
            REGION,
            f"{REGION}{z}",
            "g5.xlarge",
            "A10G",
            1,
            4,
            16,
            1.006,
            spot,
            "2026-11-30",
            "5-10%",
        )
        for z, spot in (("a", 0.40), ("b", 0.45), ("c", 0.50))
    ]


def test_job_survives_a_spot_preemption_on_aws_through_moto(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with make_harness() as harness:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAPROVISIONERTEST")
        store = Store(f"sqlite:///{tmp_path / 's.db'}")
        policy = write_policy(tmp_path / "p.yaml", steps=STEPS, ckpt=tmp_path / "ck", allow="US")
        from provisioner.api import submit

        options = {
            "region": REGION,
            "package_spec": "provisioner[aws] @ https://pkgs.example.com/provisioner-0.1.0-py3-none-any.whl",
        }
        _, job_id = submit(
            policy, provider="aws", provider_defaults=False, provider_options=options, store=store
        )
        provider = harness.provider()
        rec = Reconciler(
            store, catalog=Catalog.from_offers(offers()), provider_factory=lambda _n, _o: provider
        )
        meta = MetadataServer("aws")
        hv = vms(provider.client.ec2(REGION), job_id, meta, tmp_path / "vms")
        hv.thread.start()
        preempted: list[str] = []
        try:
            end = time.monotonic() + 150
            while time.monotonic() < end:
                rec.run_pass()
                job = store.job(job_id)
                assert job is not None
                if job.state in FINAL_STATES:
                    break
                atts = store.attempts(job_id)
                cur = atts[-1] if atts else None
                prog = job.progress or {}
                if (
                    not preempted
                    and cur
                    and cur.state == "running"
                    and cur.instance_id
                    and prog.get("attempt") == cur.attempt
                    and (prog.get("step") or 0) > 40
                ):
                    iid = cur.instance_id
                    meta.deadlines[iid] = time.time() + 4  # the two-minute warning, shortened
                    preempted.append(iid)

                    def reclaim(iid: str = iid) -> None:
                        time.sleep(4.5)  # behaviour under test: reclaimed after its notice
                        hv.power_off(iid)
                        harness.preempt(iid)

                    threading.Thread(target=reclaim, daemon=True).start()
                time.sleep(0.5)  # this hand-driven controller's pass interval (a daemon's)
        finally:
            hv.close()
            rec.close()
        job = store.job(job_id)
        assert job is not None and job.state == "succeeded", (
            job.state if job else None,
            job.reason if job else None,
        )
        atts = [a for a in store.attempts(job_id) if a.state != "failed"]
        assert atts[0].state == "preempted" and atts[0].instance_id == preempted[0]
        assert atts[1].zone != atts[0].zone
        assert atts[0].market == "spot" and atts[0].bid_cap_per_hour is not None
        # on the wire: spot with no MaxPrice (AWS's default, bid_cap.enforce: daemon: the
        # daemon holds the cap), and the job spec in the user data
        runs = harness.launch_requests()
        assert runs[0]["InstanceMarketOptions.MarketType"] == "spot"
        assert "InstanceMarketOptions.SpotOptions.MaxPrice" not in runs[0]
        assert hv.specs[preempted[0]]["job_id"] == job_id
        # the agent checkpointed on the notice: the second attempt resumed from it
        resumed = json.loads((tmp_path / "ck" / job_id / "progress.json").read_text())[
            "resumed_from"
        ]
        assert resumed, "attempt 2 resumed from the checkpoint taken on the notice"
        assert job.result["params_sha256"] == reference_result(STEPS)["params_sha256"]
        assert not hv.running(), "no instance left running in EC2"
        kinds = [e.kind for e in store.events(job_id)]
        assert "preempted" in kinds and kinds.count("launch") >= 2


def test_the_replacement_starts_during_the_notice_on_aws_through_moto(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EC2's API (moto's, like the real one without an EventBridge rule) says nothing during
    the two-minute warning: the notice reaches the controller through the agent. The agent
    reads it from IMDS, checkpoints and reports it; the controller launches the replacement
    during the notice (overlap), which resumes from the notice's checkpoint; the old instance
    goes once that checkpoint is in; the result is bit-identical."""
    with make_harness() as harness:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAPROVISIONERTEST")
        store = Store(f"sqlite:///{tmp_path / 's.db'}")
        policy = write_policy(tmp_path / "p.yaml", steps=STEPS, ckpt=tmp_path / "ck", allow="US")
        from provisioner.api import submit

        options = {
            "region": REGION,
            "package_spec": "provisioner[aws] @ https://pkgs.example.com/provisioner-0.1.0-py3-none-any.whl",
        }
        _, job_id = submit(policy, provider="aws", provider_options=options, store=store)
        provider = harness.provider()
        # this test's "VMs" boot in about a second (a real one: a minute, BOOT_S)
        monkeypatch.setattr(provider, "boot_seconds", 2.0, raising=False)
        rec = Reconciler(
            store, catalog=Catalog.from_offers(offers()), provider_factory=lambda _n, _o: provider
        )
        meta = MetadataServer("aws")
        hv = vms(provider.client.ec2(REGION), job_id, meta, tmp_path / "vms")
        hv.thread.start()
        noticed: dict[str, float] = {}
        api_notices: list[str] = []
        try:
            end = time.monotonic() + 150
            while time.monotonic() < end:
                rec.run_pass()
                api_notices += [
                    x.instance_id
                    for x in provider.interruptions(datetime.now(UTC) - timedelta(minutes=5))
                    if x.kind == "notice"
                ]
                job = store.job(job_id)
                assert job is not None
                if job.state in FINAL_STATES:
                    break
                atts = store.attempts(job_id)
                cur = atts[-1] if atts else None
                prog = job.progress or {}
                if (
                    not noticed
                    and cur
                    and cur.state == "running"
                    and cur.instance_id
                    and prog.get("attempt") == cur.attempt
                    and (prog.get("step") or 0) > 40
                ):
                    iid = cur.instance_id
                    noticed[iid] = meta.deadlines[iid] = time.time() + 20  # the warning, shortened

                    def reclaim(iid: str = iid) -> None:  # at the deadline, if still there
                        time.sleep(20.5)  # behaviour under test: reclaimed at its deadline
                        if iid in hv.running():
                            hv.power_off(iid)
                            harness.preempt(iid)

                    threading.Thread(target=reclaim, daemon=True).start()
                time.sleep(0.3)  # this hand-driven controller's pass interval (a daemon's)
        finally:
            hv.close()
            rec.close()
        job = store.job(job_id)
        assert job is not None and job.state == "succeeded", (job.state, job.reason)
        [(old, deadline)] = noticed.items()
        assert api_notices == [], "EC2's API reports no notice: the agent's record carried it"
        atts = [a for a in store.attempts(job_id) if a.state != "failed"]
        first, second = atts[0], atts[1]
        assert first.instance_id == old and first.state == "preempted"
        assert first.end_cause == "preempted", (first.end_cause, first.end_reason)
        told = [e.message for e in store.events(job_id) if e.kind == "preempted"]
        assert len(told) == 1 and "is in" in told[0], told  # its checkpoint landed
        # Launch(replaces=old): launched during the notice, in another zone, told to wait
        assert second.launched_at is not None
        assert utc(second.launched_at).timestamp() < deadline
        assert second.zone != first.zone
        assert hv.specs[second.instance_id or ""]["handover_from"] == first.attempt
        events = store.events(job_id)
        launch = next(
            e for e in events if e.kind == "launch" and f"attempt {second.attempt}:" in e.message
        )
        assert f"overlapping the notice of {old}" in launch.message
        [notice] = [e for e in events if e.kind == "notice"]
        assert "reported by its agent" in notice.message and old in notice.message
        # the replacement resumed from the checkpoint taken on the notice: attempt 1's last
        ck = [e.data.get("checkpoint") for e in events if e.kind == "checkpoint"]
        ck_first = [
            e.data.get("checkpoint")
            for e in events
            if e.kind == "checkpoint" and e.data.get("attempt") == first.attempt
        ]
        resumed = json.loads((tmp_path / "ck" / job_id / "progress.json").read_text())
        assert resumed["attempt"] == second.attempt
        assert resumed["resumed_from"] == ck_first[-1] and ck_first[-1] in ck
        assert job.result["params_sha256"] == reference_result(STEPS)["params_sha256"]
        assert job.result["final_loss"] == reference_result(STEPS)["final_loss"]
        assert not hv.running(), "no instance left running in EC2"
