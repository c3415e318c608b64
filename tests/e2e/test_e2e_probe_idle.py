"""End to end on the sim: the probe floor and the idle-GPU policy with real agents.

The sim has no GPU, so it simulates one: a sandbox's probe reports its instance type's
``gpu_speed`` (the share of its datasheet), and the agent's utilisation samples come from a
file the job writes (the example job's ``--idle-after`` mode stops "using its GPU").
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from policies import parse_policy
from providers.sim import SimProvider
from provisioner.api import Job, submit
from provisioner.control.reconciler import Reconciler
from provisioner.control.store import Store
from provisioner.control.store.probes import measured, probes
from tests.e2e_util import write_policy

pytestmark = pytest.mark.e2e

ZONES = {"eu-west-1a": "aws", "europe-west4-a": "gcp"}
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def sim_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "sim"
    yield d
    SimProvider(d).shutdown_server(terminate_all=True)


def options(sim_dir: Path, **extra: object) -> dict[str, object]:
    return {
        "state_dir": str(sim_dir),
        "mimic": ZONES,
        "seconds_per_hour": 3600,
        "mtbp_hours": None,
        "idle_exit_s": 120,
        **extra,
    }


def idle_policy(path: Path, ckpt: Path, action: str, idle_seconds: float) -> Path:
    path.write_text(f"""
name: idle-e2e
job:
  command: ["{sys.executable}", "-m", "examples.train", "--steps", "200", "--step-seconds",
            "0.02", "--idle-after", "20", "--idle-seconds", "{idle_seconds}"]
resources: {{min_vram_gb: 16}}
market: spot
bid_cap: {{max_spot_price_per_gpu_hour: 3.0}}
residency: {{allow: [EEA]}}
checkpoint: {{uri: "file://{ckpt}", interval: 30s, grace: 20s}}
idle: {{threshold_pct: 10, duration: 3s, action: {action}}}
""")
    return path


def test_a_job_that_stops_using_its_gpu_is_reported_and_stopped(
    tmp_path: Path, sim_dir: Path
) -> None:
    policy = idle_policy(tmp_path / "p.yaml", tmp_path / "ck", "stop", idle_seconds=600)
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    _, job_id = submit(
        policy,
        provider="sim",
        provider_defaults=False,
        provider_options=options(sim_dir),
        store=store,
    )
    job = Job(store, job_id)
    assert job.wait(timeout=120, poll_s=0.5) == "stopped"
    row = job.refresh()
    assert row.reason.startswith("stopped: GPU idle for") and "idle.action: stop" in row.reason
    kinds = [e.kind for e in store.events(job_id)]
    assert kinds.count("idle") == 1 and "stopped" in kinds
    idle = next(e for e in store.events(job_id) if e.kind == "idle")
    assert "every GPU under 10% utilisation" in idle.message
    (attempt,) = store.attempts(job_id)
    assert attempt.state == "ended" and attempt.end_reason.startswith("stopped: GPU idle")
    sim = SimProvider(**options(sim_dir))  # type: ignore[arg-type]
    assert sim.get(attempt.instance_id or "").state.alive is False  # the instance went
    assert (row.progress or {}).get("step", 0) < 200  # it never finished: stopped while idle


def test_report_only_tells_once_and_the_job_finishes(tmp_path: Path, sim_dir: Path) -> None:
    policy = idle_policy(tmp_path / "p.yaml", tmp_path / "ck", "report", idle_seconds=6)
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    _, job_id = submit(
        policy,
        provider="sim",
        provider_defaults=False,
        provider_options=options(sim_dir),
        store=store,
    )
    assert Job(store, job_id).wait(timeout=150, poll_s=0.5) == "succeeded"
    events = store.events(job_id)
    assert [e.kind for e in events].count("idle") == 1
    assert any(e.kind == "probe" and "nothing measured" in e.message for e in events)


def test_a_node_measured_under_the_floor_is_replaced_and_its_type_avoided(
    tmp_path: Path, sim_dir: Path
) -> None:
    extra = "resources:\n  min_vram_gb: 16\n  min_measured_fraction: 0.8\n"
    policy = write_policy(tmp_path / "p.yaml", steps=120, ckpt=tmp_path / "ck", extra="")
    text = policy.read_text().replace("resources:\n  min_vram_gb: 16\n", extra)
    policy.write_text(text)
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    opts = options(sim_dir)
    _, job_id = submit(
        policy, provider="sim", provider_defaults=False, provider_options=opts, store=store
    )
    # the type the planner picks first is made slow: its simulated GPUs deliver half
    rec = Reconciler(store)
    row = store.job(job_id)
    assert row is not None
    first = rec.candidates(row, parse_policy(text), frozenset(), datetime.now(UTC))[0]
    slow_type = first.offer.instance_type
    rec.close()
    # (in the job's provider options: every client of the sim sends its options to the server)
    store.update_job(
        job_id, at=datetime.now(UTC), provider_options={**opts, "gpu_speed": {slow_type: 0.5}}
    )

    job = Job(store, job_id)
    assert job.wait(timeout=150, poll_s=0.5) == "succeeded", job.refresh().reason
    attempts = store.attempts(job_id)
    assert attempts[0].instance_type == slow_type
    assert attempts[0].state == "ended" and attempts[0].end_reason.startswith("probe: 50% of")
    assert "min_measured_fraction 80%" in attempts[0].end_reason
    later = [a for a in attempts[1:] if a.state != "failed"]
    assert later and all(a.instance_type != slow_type for a in later)
    below = [e for e in store.events(job_id) if e.kind == "probe-below"]
    assert len(below) == 1 and "cooled down" in below[0].message
    rows = {r.attempt: r for r in probes(store, job_id)}
    assert rows[1].verdict == "below" and rows[1].fraction == 0.5 and rows[1].backend == "sim"
    m = measured(store)
    (key,) = m
    assert key[1] == slow_type and m[key].runs == 1 and m[key].fraction == 0.5


def test_a_crash_between_the_probe_row_and_the_termination_is_finished_next_pass(
    tmp_path: Path, sim_dir: Path
) -> None:
    """The controller dies (as SIGKILL would) right after recording a probe under the floor;
    a fresh one (no memory of it) terminates the node and moves on, once. (The job is long
    enough not to finish while the dead process still holds its lease: a job whose command
    completed is finished, not replaced.)"""
    extra = "resources:\n  min_vram_gb: 16\n  min_measured_fraction: 0.8\n"
    policy = write_policy(tmp_path / "p.yaml", steps=400, ckpt=tmp_path / "ck", extra="")
    text = policy.read_text().replace("resources:\n  min_vram_gb: 16\n", extra)
    policy.write_text(text)
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Store(url)
    opts = options(sim_dir)
    _, job_id = submit(
        policy, provider="sim", provider_defaults=False, provider_options=opts, store=store
    )
    rec = Reconciler(store)
    row = store.job(job_id)
    assert row is not None
    slow_type = rec.candidates(row, parse_policy(text), frozenset(), datetime.now(UTC))[0]
    rec.close()
    store.update_job(
        job_id,
        at=datetime.now(UTC),
        provider_options={**opts, "gpu_speed": {slow_type.offer.instance_type: 0.5}},
    )
    code = (
        "from tests.crash_daemon import install_from_env; install_from_env(); "
        "from provisioner.api import Job; from provisioner.control.store import Store; "
        f"Job(Store({url!r}), {job_id!r}).wait(timeout=90, poll_s=0.5)"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO), PROVISIONER_CRASH_AT="after-probe-row")
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert res.returncode == 137, res.stderr[-2000:]
    (first,) = store.attempts(job_id)
    assert first.state == "running"  # the crash left it so, with its probe row written
    assert [r.verdict for r in probes(store, job_id)] == ["below"]
    sim = SimProvider(**opts)  # type: ignore[arg-type]
    assert sim.get(first.instance_id or "").state.alive

    job = Job(store, job_id)
    assert job.wait(timeout=150, poll_s=0.5) == "succeeded", job.refresh().reason
    attempts = store.attempts(job_id)
    assert attempts[0].end_reason.startswith("probe: 50% of")
    assert sim.get(first.instance_id or "").state.alive is False
    assert [e.kind for e in store.events(job_id)].count("probe-below") == 1
    assert len([r for r in probes(store, job_id) if r.attempt == 1]) == 1
