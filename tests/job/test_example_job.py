"""The example job resumes exactly: killed at random points, it ends bit-identical.

Two levels: the job alone (real SIGUSR1 and SIGKILL at random moments, restarted until it
finishes), and the whole path through the sim cloud and the node agent (a preemption with its
notice in one zone, the next attempt in another zone resuming from the checkpoint store).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from providers.sim import SimProvider
from provisioner.agent.spec import AgentSpec
from provisioner.agent.store import read_progress
from provisioner.core.models import InstanceState, LaunchRequest, Market
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
STEPS = 300


def train(workdir: Path, *extra: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVISIONER_")}
    env["PYTHONPATH"] = str(REPO)
    env["PROVISIONER_PROGRESS_FILE"] = str(workdir / "progress.json")  # stepping: see stepped()
    return subprocess.Popen(
        [sys.executable, "-m", "examples.train", "--steps", str(STEPS), "--log-every", "0", *extra],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def stepped(workdir: Path) -> int:
    """The last step the job reported (every 10 steps), or -1."""
    try:
        return int(json.loads((workdir / "progress.json").read_text())["step"])
    except (OSError, ValueError, KeyError):
        return -1


def result(workdir: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((workdir / "output" / "result.json").read_text())
    return doc


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An uninterrupted run."""
    work = tmp_path_factory.mktemp("reference")
    proc = train(work, "--step-seconds", "0")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    return result(work)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_killed_at_random_points_ends_bit_identical(
    reference: dict[str, Any], tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    kills = resumes = 0
    for _attempt in range(12):
        before = stepped(tmp_path)
        proc = train(tmp_path, "--step-seconds", "0.003", "--checkpoint-every", "37")
        if kills < 5:  # five runs killed, then one to the end
            # a point of a run that steps (its signal handler set), however slow the machine
            wait_for(lambda p=proc, b=before: p.poll() is not None or stepped(tmp_path) > b, 60)
            time.sleep(rng.uniform(0.0, 0.4))  # the behaviour under test: a kill at a random point
            if proc.poll() is None and rng.random() < 0.7:
                proc.send_signal(signal.SIGUSR1)  # ask for a checkpoint ...
                time.sleep(rng.uniform(0.0, 0.05))  # behaviour under test: maybe a kill mid-write
            if proc.poll() is None:
                proc.kill()
                kills += 1
        out, _ = proc.communicate(timeout=120)
        resumes += "resumed from" in out
        if proc.returncode == 0:
            break
    else:
        raise AssertionError("the job never finished")
    assert kills >= 1 and resumes >= 1
    assert result(tmp_path) == reference  # final loss and parameters' SHA-256, bit for bit


def test_signal_checkpoint_then_resume_continues_where_it_stopped(tmp_path: Path) -> None:
    proc = train(tmp_path, "--step-seconds", "0.01", "--checkpoint-every", "0")
    wait_for(lambda: stepped(tmp_path) >= 10, timeout=60)  # a job in its run, stepping
    proc.send_signal(signal.SIGUSR1)
    wait_for(lambda: (tmp_path / "checkpoints" / "latest").exists(), timeout=10)
    proc.kill()
    out, _ = proc.communicate(timeout=10)
    assert "(signal)" in out
    step = int((tmp_path / "checkpoints" / "latest").read_text().strip().split("-")[-1])
    assert 0 < step < STEPS
    again = train(tmp_path, "--step-seconds", "0")
    out, _ = again.communicate(timeout=30)
    assert again.returncode == 0 and f"at step {step}" in out


@pytest.fixture
def sim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SimProvider]:
    monkeypatch.chdir(REPO)
    provider = SimProvider(tmp_path / "sim", mtbp_hours=None, notice_floor_s=1.0, idle_exit_s=60)
    try:
        yield provider
    finally:
        provider.shutdown_server(terminate_all=True)


def test_preempted_in_one_zone_resumed_in_another_bit_identical(
    sim: SimProvider, reference: dict[str, Any], tmp_path: Path
) -> None:
    store = f"file://{tmp_path}/store"
    offers = {o.zone: o for o in sim.offers(["us-east-1"]) if o.spot_price}
    command = [
        sys.executable,
        "-m",
        "examples.train",
        "--steps",
        str(STEPS),
        "--step-seconds",
        "0.05",  # 15 s of work: still running when the notice below runs out
        "--log-every",
        "100",
    ]

    def attempt(n: int, zone: str) -> str:
        spec = AgentSpec(
            job_id="quick",
            attempt=n,
            command=command,
            checkpoint_uri=store,
            interval_s=30,
            grace_s=10,
            progress_every_s=0.5,
        )
        inst = sim.launch(
            LaunchRequest(
                job_id="quick",
                attempt=n,
                offer=offers[zone],
                market=Market.SPOT,
                job_spec=spec.to_dict(),
            )
        )
        return inst.id

    first = attempt(1, "us-east-1a")
    wait_for(lambda: ((read_progress(store, "quick") or {}).get("step") or 0) >= 50, timeout=15)
    # a notice long enough for the save and its upload on a loaded machine (this test is about
    # the resume; tests/job/test_job_save_timing.py is about saves racing the deadline)
    sim.preempt(first, notice_s=8.0)
    wait_for(lambda: sim.get(first).state is InstanceState.PREEMPTED, timeout=30)
    progress = read_progress(store, "quick")
    assert progress is not None and progress["state"] == "interrupted"
    saved = progress["last_checkpoint_step"]
    assert 50 <= saved < STEPS

    second = attempt(2, "us-east-1b")
    done = wait_for(
        lambda: (read_progress(store, "quick") or {}).get("state") == "done", timeout=60
    )
    assert done
    progress = read_progress(store, "quick")
    assert progress is not None
    assert (progress["attempt"], progress["resumed_from"], progress["exit_code"]) == (
        2,
        f"ckpt-{saved:09d}",
        0,
    )
    final = json.loads((tmp_path / "store" / "quick" / "output" / "result.json").read_text())
    assert final == reference
    log = Path(sim.sandbox(second)["sandbox"], "agent.log").read_text()
    assert "resumed from" in log and f"at step {saved}" in log
