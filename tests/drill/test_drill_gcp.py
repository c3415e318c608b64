"""The drill on GCP through its HTTP fake: ``instances.simulateMaintenanceEvent`` is on the wire
for the drill's Spot VM; the fake then plays Compute Engine's order for a Spot VM: the
preemption notice (``instance/preempted`` TRUE on the VM's metadata server), the preemption
at its end (shortened). Every step holds, and nothing is left at the fake."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.cloud.compute_v1")

CONTRACT = Path(__file__).resolve().parents[1] / "contract"
if str(CONTRACT) not in sys.path:
    sys.path.insert(0, str(CONTRACT))

from harness import CONTRACT_RETRY  # noqa: E402
from harness_gcp import PROJECT, make_harness  # noqa: E402

from provisioner.core.models import Offer  # noqa: E402
from tests.drill_util import assert_every_step_held, assert_nothing_left, drill_on_fake  # noqa: E402
from tests.fake_vms import Hypervisor, MetadataServer  # noqa: E402

pytestmark = pytest.mark.e2e
REGION = "us-central1"
ZONES = [f"{REGION}-{z}" for z in "abc"]
NOTICE_S = 5.0  # about 30 s on GCP; shortened


def offers() -> list[Offer]:
    return [
        Offer("gcp", REGION, zone, "g2-standard-4", "L4", 1, 4, 16.0, 0.706832, spot)
        for zone, spot in zip(ZONES, (0.39, 0.40, 0.41), strict=True)
    ]


def vms(server: Any, meta: MetadataServer, root: Path) -> Hypervisor:
    def running() -> dict[str, str]:
        return {
            i["name"]: i["zone"].rsplit("/", 1)[-1]
            for i in server.instances()
            if i.get("status") == "RUNNING"
        }

    def script(name: str) -> str:
        items = (server.instance(name) or {}).get("metadata", {}).get("items", [])
        return next(str(i["value"]) for i in items if i["key"] == "startup-script")

    return Hypervisor(running, script, meta, root)


def test_the_gcp_drill_preempts_through_simulate_maintenance_event_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.oauth2.credentials import Credentials

    from providers.gcp import GCPProvider

    with make_harness() as harness:
        server = harness.server
        provider = GCPProvider(
            project=PROJECT,
            zones=ZONES,
            endpoint=server.endpoint,
            credentials=Credentials(token=harness.secret),
            retry=CONTRACT_RETRY,
        )
        monkeypatch.setattr(provider, "boot_seconds", 2.0, raising=False)
        meta = MetadataServer("gcp")
        hv = vms(server, meta, tmp_path / "vms")

        def preempt_later(name: str, zone: str) -> None:  # Compute Engine's order
            meta.deadlines[name] = time.time() + NOTICE_S

            def at_the_end() -> None:
                time.sleep(NOTICE_S + 0.5)
                if name in hv.running():
                    hv.power_off(name)
                    server.preempt(name, zone)

            threading.Thread(target=at_the_end, daemon=True).start()

        server.on_maintenance_event = preempt_later
        report, ledger = drill_on_fake(tmp_path, "gcp", provider, offers(), hv, region=REGION)

        assert_every_step_held(report)
        calls = [r for r in server.requests if r.path.endswith("/simulateMaintenanceEvent")]
        [call] = calls
        first = report.to_json()["steps"][0]["detail"].split(":")[0].rsplit("/", 1)[-1]
        assert call.method == "POST"
        assert call.path.startswith(f"/compute/v1/projects/{PROJECT}/zones/")
        assert call.path.endswith(f"/instances/{first}/simulateMaintenanceEvent")
        assert report.wire[0]["instance"] == first
        assert_nothing_left(provider, ledger)
        assert server.instances() == [], "no instance left at the fake"
