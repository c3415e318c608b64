"""The drill on Azure through its HTTP fake: ``simulateEviction`` is on the wire for the drill's
Spot VM; the fake then plays Azure's order (tests/fake_vms.py ``Evictions``): the ``Preempt``
scheduled event served to the VM, the eviction when the agent approves it or at ``NotBefore``.
Every step holds, and nothing is left at the fake: no VM, no NIC, no object."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("azure.mgmt.compute")
pytest.importorskip("azure.mgmt.network")

CONTRACT = Path(__file__).resolve().parents[1] / "contract"
if str(CONTRACT) not in sys.path:
    sys.path.insert(0, str(CONTRACT))

from harness_azure import REGION, make_harness  # noqa: E402

from tests.drill_util import assert_every_step_held, assert_nothing_left, drill_on_fake  # noqa: E402
from tests.e2e.test_e2e_azure_notice import offers, vms  # noqa: E402
from tests.fake_vms import Evictions, MetadataServer  # noqa: E402

pytestmark = pytest.mark.e2e
NOTICE_S = 6.0  # Azure gives at least 30 s; shortened


def test_the_azure_drill_evicts_through_simulate_eviction_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with make_harness() as harness:
        server = harness.server
        provider = harness.provider()
        monkeypatch.setattr(provider, "boot_seconds", 2.0, raising=False)
        meta = MetadataServer("azure")
        hv = vms(server, meta, tmp_path / "vms")

        def evict(name: str) -> None:  # the Preempt event starts: the VM goes
            hv.power_off(name)
            if server.vm(name) is not None:
                server.preempt(name)

        evictions = Evictions(meta, evict)
        server.on_simulate_eviction = lambda name: evictions.serve(name, time.time() + NOTICE_S)
        report, ledger = drill_on_fake(tmp_path, "azure", provider, offers(), hv, region=REGION)

        assert_every_step_held(report)
        calls = [r for r in server.requests if r.path.endswith("/simulateEviction")]
        [call] = calls
        first = report.to_json()["steps"][0]["detail"].split(":")[0]
        assert call.method == "POST"
        assert call.path.lower().endswith(
            f"/virtualmachines/{first.rsplit('/', 1)[-1].lower()}/simulateeviction"
        )
        assert f"/resourceGroups/{server.resource_group}/" in call.path
        assert report.wire[0]["call"] == "Microsoft.Compute/virtualMachines/simulateEviction"
        assert_nothing_left(provider, ledger)
        assert not server._state.vms, "no VM left at the fake"
        assert not server._state.nics, "no NIC left at the fake"
        assert not server._state.ppgs, "no placement group left at the fake"
