"""The drill against a cloud's fake: the real adapter, the fake's API, fake VMs running the real
agent (tests/fake_vms.py), and the drill's own runner, as ``provisioner drill`` runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from provisioner.core.catalog import Catalog
from provisioner.core.models import TAG_JOB, Offer
from provisioner.drill.ledger import Ledger
from provisioner.drill.runner import Drill, prepare
from provisioner.drill.steps import DrillReport, Outcome
from provisioner.drill.target import DrillTarget
from tests.e2e_util import REPO
from tests.fake_vms import Hypervisor
from tests.waiting import until

#: the environment variables a cloud's SDK reads credentials or profiles from
CLOUD_ENV = ("AWS_", "GOOGLE_", "CLOUDSDK_", "AZURE_", "ALIBABA_CLOUD_", "TENCENTCLOUD_")
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
    gpu: str | None = None,
) -> tuple[DrillReport, Ledger]:
    """Run one drill of ``name`` against ``provider`` (the adapter on the fake) with ``hv``
    booting what the fake holds; the job is paced for a test (a step 0.2 s). ``offers`` are
    the catalog's (unused with ``gpu="none"``: the CPU drill has its own)."""
    target = DrillTarget(
        provider=name,
        max_cost=1.0,
        state_dir=tmp_path / "state",
        region=region,
        gpu=gpu,
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


def drill_ledger(state: Path) -> Ledger | None:
    """The one drill's ledger under ``state`` (None: not written yet, or half written)."""
    found = list((state / "drills").glob("*/ledger.json"))
    if not found:
        return None
    try:
        return Ledger.load(found[0])
    except ValueError:
        return None


def kill_mid_drill_then_clean(
    tmp_path: Path,
    provider: str,
    hv: Hypervisor,
    *,
    region: str,
    options: list[str],
    env: dict[str, str] | None = None,
    extra: list[str] | None = None,
    halfway: Callable[[Ledger], bool],
    left: Callable[[Ledger], None],
) -> Ledger:
    """``provisioner drill --provider <provider>`` in its own process (as the user runs it),
    with ``hv`` booting what the cloud's fake holds; once ``halfway(ledger)`` holds, the drill
    is killed with SIGKILL (no cleanup of its own); ``left(ledger)`` asserts what the kill left
    at the fake; then ``provisioner drill --cleanup`` must say everything is deleted, the
    drill's objects must be gone and its ledger marked cleaned. Returns the ledger (the
    caller then asks the fake that nothing of the drill's is left)."""
    mine = {k: v for k, v in os.environ.items() if not k.startswith(CLOUD_ENV)}
    child_env = dict(
        mine,  # no credentials of the machine's: only what the test gives
        PYTHONPATH=str(REPO),
        NO_COLOR="1",
        XDG_CONFIG_HOME=str(tmp_path / "config"),  # no providers.yaml of the user's
        **(env or {}),
    )
    state = tmp_path / "state"
    args = [sys.executable, "-m", "provisioner", "drill", "--state-dir", str(state)]
    drill = subprocess.Popen(
        [
            *args,
            "--provider",
            provider,
            "--max-cost",
            "1",
            "--region",
            region,
            "--step-seconds",
            "0.3",  # the job, paced for a test (a real drill's outlasts the notice)
            "--checkpoint-uri",
            f"file://{tmp_path / 'ck'}",
            *(extra or []),
            *[x for o in [f"package_spec={PACKAGE}", *options] for x in ("-o", o)],
        ],
        cwd=REPO,
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    hv.thread.start()
    try:

        def far_enough() -> bool:
            ledger = drill_ledger(state)
            return drill.poll() is not None or (ledger is not None and halfway(ledger))

        assert until(far_enough, 150, every=0.1)
        assert drill.poll() is None, drill.communicate()[0]
        drill.send_signal(signal.SIGKILL)
        drill.communicate(timeout=30)
        ledger = drill_ledger(state)
        assert ledger is not None and not ledger.cleaned
        ck = tmp_path / "ck" / ledger.job_id
        assert ck.exists(), "the drill's objects are in the store"
        left(ledger)

        done = subprocess.run(
            [*args, "--cleanup"],
            cwd=REPO,
            env=child_env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"{ledger.drill_id} ({provider}): everything deleted" in done.stdout, done.stdout
        assert not ck.exists(), "the drill's objects are deleted"
        reloaded = Ledger.load(ledger.path or Path())
        assert reloaded.cleaned and all(r.deleted for r in reloaded.resources), reloaded.resources
        return reloaded
    finally:
        if drill.poll() is None:
            drill.kill()
            drill.communicate(timeout=30)
        hv.close()
