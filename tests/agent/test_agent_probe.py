"""The agent's probe at start and its utilisation samples (real agent subprocesses; the
utilisation comes from NVML where there is one, here from a fake NVML module or the file the
sim gives its jobs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from provisioner.agent.spec import AgentSpec, SpecError
from provisioner.agent.store import CheckpointStore, read_progress
from provisioner.probe.idle import IdleTracker, UtilisationSource
from tests.fakes.nvml import FakeGPU, FakeNVML
from tests.waiting import until

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


def run_agent(spec: AgentSpec, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / f"spec-{spec.attempt}.json"
    spec.save(path)
    return subprocess.run(
        [PY, "-m", "provisioner.agent", "--spec", str(path)],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=120,
    )


def unreachable() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_agent_probes_the_node_before_the_job_and_stores_the_report(tmp_path: Path) -> None:
    store = f"file://{tmp_path}/store"
    spec = AgentSpec(
        job_id="p",
        attempt=3,
        checkpoint_uri=store,
        metadata_url=unreachable(),
        workdir=str(tmp_path / "w"),
        probe="quick",
        command=[PY, "-m", "examples.train", "--steps", "20", "--step-seconds", "0"],
    )
    res = run_agent(spec, tmp_path)
    assert res.returncode == 0, res.stderr
    progress = read_progress(store, "p")
    assert progress is not None and progress["state"] == "done"
    probe = progress["probe"]
    assert probe["state"] == "done" and probe["attempt"] == 3
    assert probe["path"] == "probes/attempt-3.json" and probe["backend"] == "numpy"
    report = CheckpointStore(store, "p").read_json("probes/attempt-3.json")
    assert report is not None
    fp32 = next(f for f in report["figures"] if f["name"] == "matmul_fp32")
    assert fp32["value"] > 0 and "1024x1024" in fp32["method"]  # the quick CPU size
    assert list((tmp_path / "w").glob("probe-*.json")) == []  # its temporary file is gone


def test_a_failed_probe_is_reported_and_the_job_runs_all_the_same(tmp_path: Path) -> None:
    store = f"file://{tmp_path}/store"
    spec = AgentSpec(
        job_id="q",
        attempt=1,
        checkpoint_uri=store,
        metadata_url=unreachable(),
        workdir=str(tmp_path / "w"),
        probe="file:no-such-report.json",
        command=[PY, "-c", "print('ran')"],
    )
    res = run_agent(spec, tmp_path)
    assert res.returncode == 0, res.stderr
    progress = read_progress(store, "q")
    assert progress is not None and progress["state"] == "done"
    assert progress["probe"]["state"] == "failed"
    assert "no-such-report.json" in progress["probe"]["error"]


def test_agent_reports_since_when_the_gpu_is_idle(tmp_path: Path) -> None:
    """A job that stops using its GPU (the example job's idle mode, reporting through the
    file the sim gives it): the agent's progress says since when every GPU is idle."""
    store = f"file://{tmp_path}/store"
    work = tmp_path / "w"
    work.mkdir()
    (work / "sim-probe.json").write_text(
        json.dumps({"backend": "sim", "summary": {"fraction": 0.9, "precision": "bf16"}})
    )
    spec = AgentSpec(
        job_id="i",
        attempt=1,
        checkpoint_uri=store,
        metadata_url=unreachable(),
        workdir=str(work),
        probe="file:sim-probe.json",
        gpu_source="file:sim-gpu.json",
        gpu_sample_s=0.2,
        progress_every_s=0.3,
        idle_threshold_pct=10,
        command=[PY, "-m", "examples.train", "--steps", "30", "--step-seconds", "0.01",
                 "--idle-after", "10", "--idle-seconds", "4"],
    )  # fmt: skip
    path = tmp_path / "spec.json"
    spec.save(path)
    proc = subprocess.Popen(
        [PY, "-m", "provisioner.agent", "--spec", str(path)],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        seen_busy = seen_idle = None
        p: dict[str, Any] = {}

        def idle_seen() -> bool:
            nonlocal p, seen_busy, seen_idle
            p = read_progress(store, "i") or {}
            idle = p.get("gpu_idle") or {}
            if p.get("state") == "running" and idle.get("utilization_pct") == 96.0:
                seen_busy = seen_busy or idle
            if idle.get("since"):
                seen_idle = idle
            return seen_idle is not None or proc.poll() is not None

        until(idle_seen, 60, every=0.1)
        assert seen_idle is not None, "the agent never reported the GPU idle"
        assert seen_idle["utilization_pct"] == 0.0 and seen_idle["threshold_pct"] == 10
        assert p["probe"]["fraction"] == 0.9 and p["probe"]["backend"] == "sim"
        assert p["gpu"] == [{"index": 0, "utilization_pct": 0.0}]
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    final = read_progress(store, "i") or {}
    assert final["state"] == "done" and final["gpu_idle"]["since"] is None  # busy again at the end


def test_utilisation_from_nvml_and_the_idle_clock() -> None:
    fake = FakeNVML([FakeGPU(utilization=3), FakeGPU(utilization=2)])
    src = UtilisationSource("nvml", Path("."), nvml=fake)
    track = IdleTracker(threshold_pct=5)
    track.observe(src.sample(), T0)
    assert track.since == T0 and track.last_pct == 3
    fake.gpus[1].utilization = 80  # one GPU busy: the node is not idle
    track.observe(src.sample(), T0 + timedelta(minutes=1))
    assert track.since is None and track.idle_for_s(T0 + timedelta(minutes=2)) == 0
    fake.gpus[1].utilization = 0
    track.observe(src.sample(), T0 + timedelta(minutes=2))
    track.observe(src.sample(), T0 + timedelta(minutes=3))
    assert track.since == T0 + timedelta(minutes=2)
    assert track.idle_for_s(T0 + timedelta(minutes=12)) == 600
    track.observe(None, T0 + timedelta(minutes=13))  # nothing known: the clock stops
    assert track.since is None
    assert UtilisationSource("nvml", Path("."), nvml=FakeNVML(fail_init=True)).sample() is None
    assert UtilisationSource("none", Path(".")).sample() is None


def test_spec_probe_fields_are_checked_and_set_from_the_policy() -> None:
    from policies import parse_policy

    base = {"job_id": "a", "attempt": 1, "command": ["x"], "checkpoint_uri": "file:///c"}
    with pytest.raises(SpecError, match="probe"):
        AgentSpec(**base, probe="fast")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="gpu_source"):
        AgentSpec(**base, gpu_source="smi")  # type: ignore[arg-type]
    spec = AgentSpec.from_dict({**base, "idle_threshold_pct": "7", "gpu_sample_s": "2"})
    assert spec.idle_threshold_pct == 7.0 and spec.gpu_sample_s == 2.0
    policy = parse_policy("idle: {threshold_pct: 8, duration: 2m, action: stop}\n")
    got = AgentSpec.from_policy(policy, job_id="j", attempt=1)
    assert got.probe == "quick" and got.idle_threshold_pct == 8 and got.gpu_sample_s == 20
    plain = AgentSpec.from_policy(parse_policy("name: x\n"), job_id="j", attempt=1)
    assert plain.idle_threshold_pct is None and plain.gpu_sample_s == 30
