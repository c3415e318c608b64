"""The drill against a cloud's fake: the real adapter, the fake's API, fake VMs running the real
agent (tests/fake_vms.py), and the drill's own runner, as ``provisioner drill`` runs it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from provisioner.core.catalog import Catalog
from provisioner.core.models import TAG_JOB, Offer
from provisioner.drill.ledger import Ledger
from provisioner.drill.runner import Drill, prepare
from provisioner.drill.steps import DrillReport, Outcome
from provisioner.drill.target import DrillTarget
from tests.fake_vms import Hypervisor

PACKAGE = "provisioner[all] @ https://pkgs.example.com/provisioner-0.1.0-py3-none-any.whl"


def drill_on_fake(
    tmp_path: Path,
    name: str,
    provider: Any,
    offers: list[Offer],
    hv: Hypervisor,
    *,
    region: str,
    options: dict[str, Any] | None = None,
) -> tuple[DrillReport, Ledger]:
    """Run one drill of ``name`` against ``provider`` (the adapter on the fake) with ``hv``
    booting what the fake holds; the job is paced for a test (a step 0.2 s)."""
    target = DrillTarget(
        provider=name,
        max_cost=1.0,
        state_dir=tmp_path / "state",
        region=region,
        checkpoint_uri=f"file://{tmp_path / 'ck'}",
        provider_options={"package_spec": PACKAGE, **(options or {})},
        step_seconds=0.2,
        timeout_s=150,
        python=sys.executable,
    )
    ledger = prepare(target)
    hv.thread.start()
    lines: list[str] = []
    try:
        report = Drill(
            target,
            ledger,
            provider_factory=lambda _n, _o: provider,
            catalog=Catalog.from_offers(offers),
            say=lines.append,
            pass_interval_s=0.3,
        ).run()
    finally:
        hv.close()
    assert report.passed, (report.stopped, lines, report.to_json())
    return report, ledger


def assert_every_step_held(report: DrillReport, *, substitute: bool = False) -> None:
    for s in report.steps:
        assert s.outcome is Outcome.HELD and s.at_s is not None, s
    subs = {s.name.value for s in report.steps if s.substitute}
    assert subs == ({"interrupt", "notice"} if substitute else set()), subs
    assert report.leftovers == []


def assert_nothing_left(provider: Any, ledger: Ledger) -> None:
    alive = [i for i in provider.list({TAG_JOB: ledger.job_id}) if i.state.alive]
    assert alive == [], alive
    ck = Path(ledger.checkpoint_uri.removeprefix("file://")) / ledger.job_id
    assert not ck.exists()
    reloaded = Ledger.load(ledger.path or Path())
    assert reloaded.cleaned and all(r.deleted for r in reloaded.resources), reloaded.resources
