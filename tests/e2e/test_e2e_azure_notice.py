"""End to end on Azure through its HTTP fake: the notice reaches the controller through the agent.

Azure serves a Spot eviction notice only to the VM (Scheduled Events on its metadata
endpoint); its API shows the VM deallocated or gone once evicted, never before. The fake
(tests/fakes/azure_server.py) plays ARM for the real SDK; a small "hypervisor" here boots each
VM the fake holds the way a real one would: it reads the VM's customData (our bootstrap
script), takes the job spec out of it and starts the node agent with it, pointed at a metadata
endpoint in Azure's format (the sim's metadata service). A ``Preempt`` event is served there
and the VM is evicted as Azure does it (tests/fake_vms.py, ``Evictions``): at once when its
agent approves the event, else at ``NotBefore``. The controller, which learns of the notice
from the agent's progress record alone, launches the replacement during the notice and
terminates the old VM once its checkpoint is in; the old agent would approve the event only
once the replacement has taken over, so the old VM is still there when the replacement is
launched and boots; the replacement resumes from the notice's checkpoint and the job ends
bit-identical.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("azure.mgmt.compute")
pytest.importorskip("azure.mgmt.network")

CONTRACT = Path(__file__).resolve().parents[1] / "contract"
if str(CONTRACT) not in sys.path:
    sys.path.insert(0, str(CONTRACT))

from harness_azure import REGION, make_harness  # noqa: E402

from provisioner.agent.store import step_of  # noqa: E402
from provisioner.control.reconciler import Reconciler  # noqa: E402
from provisioner.control.store import FINAL_STATES, Store  # noqa: E402
from provisioner.core.catalog import Catalog  # noqa: E402
from provisioner.core.models import Offer  # noqa: E402
from provisioner.core.timefmt import utc  # noqa: E402
from tests.e2e_util import reference_result, write_policy  # noqa: E402
from tests.fake_vms import Evictions, Hypervisor, MetadataServer  # noqa: E402

pytestmark = pytest.mark.e2e
STEPS = 400
NOTICE_S = 20.0  # Azure gives at least 30 s; shortened


def vms(server: Any, meta: MetadataServer, root: Path) -> Hypervisor:
    """The fake's VMs, booted: provisioned and not deallocated, their customData decoded."""

    def running() -> dict[str, str]:
        out = {}
        for name in list(server._state.vms):
            vm = server.vm(name)
            if vm is None or vm["properties"].get("provisioningState") != "Succeeded":
                continue
            raw = server._state.vms.get(name) or {}
            if raw.get("_power") and raw["_power"][0] != "PowerState/running":
                continue
            out[name] = ""
        return out

    def script(name: str) -> str:
        custom = server.custom_data(name)
        assert custom, "the customData is the bootstrap script"
        return base64.b64decode(custom).decode()

    return Hypervisor(running, script, meta, root)


def offers() -> list[Offer]:
    return [
        Offer(
            "azure",
            REGION,
            f"{REGION}-{z}",
            "Standard_NC4as_T4_v3",
            "T4",
            1,
            4,
            28.0,
            0.526,
            spot,
        )
        for z, spot in (("1", 0.20), ("2", 0.22), ("3", 0.25))
    ]


def test_the_replacement_starts_during_an_azure_notice_served_to_the_vm_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with make_harness() as harness:
        server = harness.server
        store = Store(f"sqlite:///{tmp_path / 's.db'}")
        policy = write_policy(tmp_path / "p.yaml", steps=STEPS, ckpt=tmp_path / "ck", allow="US")
        from provisioner.api import submit

        options = {
            "package_spec": "provisioner[azure] @ https://pkgs.example.com/provisioner-0.1.0-py3-none-any.whl"
        }
        _, job_id = submit(policy, provider="azure", provider_options=options, store=store)
        provider = harness.provider()
        # this test's "VMs" boot in about a second (a real one: a minute, BOOT_S)
        monkeypatch.setattr(provider, "boot_seconds", 2.0, raising=False)
        rec = Reconciler(
            store, catalog=Catalog.from_offers(offers()), provider_factory=lambda _n, _o: provider
        )
        meta = MetadataServer("azure")
        hv = vms(server, meta, tmp_path / "vms")

        def evict(name: str) -> None:  # Azure starts the Preempt event: the VM goes
            hv.power_off(name)
            if server.vm(name) is not None:  # not deleted by the controller meanwhile
                harness.preempt(name)

        evictions = Evictions(meta, evict)
        hv.thread.start()
        noticed: dict[str, float] = {}
        step_at_notice = 0
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
                    name = cur.instance_id.rsplit("/", 1)[-1].lower()
                    noticed[cur.instance_id] = time.time() + NOTICE_S
                    step_at_notice = int(prog["step"])
                    evictions.serve(name, noticed[cur.instance_id])
                time.sleep(0.3)  # this hand-driven controller's pass interval (a daemon's)
        finally:
            hv.close()
            rec.close()
        job = store.job(job_id)
        assert job is not None
        assert job.state == "succeeded", (job.state, job.reason)
        [(old, deadline)] = noticed.items()
        assert api_notices == [], "Azure's API reports no notice: the agent's record carried it"
        atts = [a for a in store.attempts(job_id) if a.state != "failed"]
        first, second = atts[0], atts[1]
        assert first.instance_id == old and first.state == "preempted"
        # Launch(replaces=old): launched during the notice, in another zone, told to wait
        assert second.launched_at is not None
        assert utc(second.launched_at).timestamp() < deadline
        assert second.zone != first.zone
        second_name = (second.instance_id or "").rsplit("/", 1)[-1].lower()
        assert hv.specs[second_name]["handover_from"] == first.attempt
        # overlap on notice: the old VM was still there when its replacement was launched and
        # booted (its agent did not approve the event, which Azure starts at once, before then)
        first_name = old.rsplit("/", 1)[-1].lower()
        assert hv.specs[first_name]["overlap_notice_s"] == 2.0  # the agent knew it (boot_s)
        gone = hv.gone[first_name]
        assert utc(second.launched_at).timestamp() < gone
        assert hv.booted[second_name] < gone
        events = store.events(job_id)
        launch = next(
            e for e in events if e.kind == "launch" and f"attempt {second.attempt}:" in e.message
        )
        assert f"overlapping the notice of {old}" in launch.message
        [notice] = [e for e in events if e.kind == "notice"]
        assert "reported by its agent" in notice.message and "Preempt" in notice.message
        # the replacement resumed from the checkpoint taken on the notice: attempt 1's last
        ck_first = [
            e.data.get("checkpoint")
            for e in events
            if e.kind == "checkpoint" and e.data.get("attempt") == first.attempt
        ]
        resumed = json.loads((tmp_path / "ck" / job_id / "progress.json").read_text())
        assert resumed["attempt"] == second.attempt
        assert resumed["resumed_from"] == ck_first[-1]
        assert (step_of(ck_first[-1]) or 0) >= step_at_notice  # no work lost to the notice
        assert job.result["params_sha256"] == reference_result(STEPS)["params_sha256"]
        assert job.result["final_loss"] == reference_result(STEPS)["final_loss"]
        assert not hv.running(), "no VM left running"
