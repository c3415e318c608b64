"""End to end on the sim provider: a real job survives preemptions in two clouds' formats.

Two sim zones mimic two clouds (AWS and GCP), each serving its own interruption notice
format on the instance's metadata endpoint (and, as neither cloud's API does, reporting no
notice through the API). The job is preempted once in each; the agent checkpoints on each
notice and reports it, the reconciler launches the replacement in the other zone, and the job
ends bit-identical to an uninterrupted run.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from providers.sim import SimProvider
from provisioner.api import Job, submit
from provisioner.control.store import Store
from tests.e2e_util import reference_result, write_policy
from tests.waiting import until

pytestmark = pytest.mark.e2e

ZONES = {"eu-west-1a": "aws", "europe-west4-a": "gcp"}
STEPS = 1000  # long enough to outlast the first zone's cooldown (GCP's notice: 30 s)


@pytest.fixture
def sim_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "sim"
    yield d
    SimProvider(d).shutdown_server(terminate_all=True)


def test_job_survives_preemptions_in_two_notice_formats(tmp_path: Path, sim_dir: Path) -> None:
    policy = write_policy(tmp_path / "p.yaml", steps=STEPS, ckpt=tmp_path / "ck")
    options = {
        "state_dir": str(sim_dir),
        "mimic": ZONES,
        "seconds_per_hour": 60,
        "mtbp_hours": None,
        "preempt_first_after_s": 6,
        "demo_outage_s": 8,
        "idle_exit_s": 120,
    }
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    _, job_id = submit(
        policy, provider="sim", provider_defaults=False, provider_options=options, store=store
    )
    job = Job(store, job_id)
    sim = SimProvider(**options)  # the same server: to take the second zone's capacity back

    def second_preemption() -> None:
        # once the job runs in a zone of the other cloud, take that capacity back too
        def resumed_elsewhere() -> str | None:
            atts = store.attempts(job_id)
            running = [a for a in atts if a.state == "running" and a.instance_id]
            # and once the first zone may take it back: GCP's notice names no time, so the
            # controller keeps that zone away for GCP's usual 30 s (the sim's notice is shorter)
            cooled = store.cooldowns(job_id, datetime.now(UTC))
            if any(a.state == "preempted" for a in atts) and running and not cooled:
                prog = job.refresh().progress or {}
                if prog.get("attempt") == running[-1].attempt and (prog.get("step") or 0) > 40:
                    return running[-1].instance_id
            return None

        if until(lambda: resumed_elsewhere() is not None, 120, every=0.3):
            iid = resumed_elsewhere()
            if iid:
                sim.preempt(iid)

    t = threading.Thread(target=second_preemption, daemon=True)
    t.start()
    state = job.wait(timeout=150, poll_s=0.5)
    t.join(timeout=5)
    assert state == "succeeded", job.refresh().reason

    attempts = [a for a in store.attempts(job_id) if a.state != "failed"]
    preempted = [a for a in attempts if a.state == "preempted"]
    assert len(preempted) >= 2, [(a.zone, a.state) for a in attempts]
    clouds_preempted = {ZONES[a.zone] for a in preempted}
    assert clouds_preempted == {"aws", "gcp"}, "one preemption in each cloud's format"
    for before, after in itertools.pairwise(attempts):
        if before.state == "preempted":
            assert after.zone != before.zone, "restarted in another zone"

    events = store.events(job_id)
    notices = [e for e in events if e.kind == "notice"]
    raw = " ".join(e.message for e in notices)
    assert "aws:" in raw and "gcp:" in raw, raw
    assert sum(e.kind == "preempted" for e in events) >= 2

    # checkpointed on the notices: every restart resumed from a checkpoint, none from scratch
    result = job.result
    assert result["params_sha256"] == reference_result(STEPS)["params_sha256"]
    assert result["final_loss"] == reference_result(STEPS)["final_loss"]

    # nothing left running, money accounted
    assert not [i for i in sim.list({"provisioner-job": job_id}) if i.state.alive]
    assert job.spent_usd > 0
    row = job.refresh()
    assert row.restarts >= 2
