"""A save and a notice that overlap: no partial checkpoint is ever resumed.

- Killed in the middle of a save (SIGKILL between two files of the checkpoint), the job leaves
  a partial directory that ``latest`` never names; run again in the same place it resumes from
  the checkpoint before, removes the partial one and ends bit-identical.
- On the sim, the notice arrives while a (slow) save is being written: that save completes
  under the notice and answers it (no second save), the agent uploads it, and the job resumes
  from it bit-identical.
- On the sim, the notice is shorter than a save: the job says so before it starts the save
  (``checkpoint_warning`` in its progress, a ``checkpoint-warning`` event), the capacity goes
  in the middle of it, and the job resumes from the checkpoint before, bit-identical.

The examples' ``--slow-save S`` sleeps S seconds between a checkpoint's files (attempt 1 only).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import job_env, need, run_preempted, straight_run, wait_for

STEPS = 300
ARGV = ["examples.torch_train", "--steps", str(STEPS)]


def _partial(checkpoints: Path, step: int) -> Path | None:
    """A checkpoint of ``step`` being written, once its first file is in."""
    for p in checkpoints.glob(f".ckpt-{step:09d}.partial-*"):
        if (p / "state.pt").is_file():
            return p
    return None


def test_a_save_killed_half_way_is_never_resumed(tmp_path: Path) -> None:
    need("torch")
    straight = straight_run(ARGV, tmp_path / "straight")
    work = tmp_path / "work"
    work.mkdir()
    env = job_env()
    argv = [sys.executable, "-m", *ARGV, "--checkpoint-every", "50", "--step-seconds", "0.01"]
    proc = subprocess.Popen(
        argv,
        cwd=work,
        env={**env, "PROVISIONER_ATTEMPT": "2"},  # no slow save for the first checkpoint
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ck = work / "checkpoints"
    wait_for(lambda: (ck / "latest").is_file(), timeout=60)
    proc.kill()
    proc.wait()
    first = (ck / "latest").read_text().strip()
    # now a slow save (attempt 1): killed once its first file is written
    proc = subprocess.Popen(
        [*argv, "--slow-save", "30"],
        cwd=work,
        env={**env, "PROVISIONER_ATTEMPT": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    resumed_at = int(first.rsplit("-", 1)[1])
    partial = wait_for(lambda: _partial(ck, resumed_at + 50), timeout=60)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert partial.is_dir() and (ck / "latest").read_text().strip() == first
    assert not (ck / f"ckpt-{resumed_at + 50:09d}").exists()

    done = subprocess.run(
        argv, cwd=work, env={**env, "PROVISIONER_ATTEMPT": "2"}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"resumed at step {resumed_at}" in done.stdout  # the complete one before
    assert not partial.exists(), "the next save removed the partial checkpoint"
    result = json.loads((work / "output" / "result.json").read_text())
    assert result["params_sha256"] == straight["params_sha256"]


@pytest.fixture
def sim_dir(tmp_path: Path) -> Iterator[Path]:
    from providers.sim import SimProvider

    d = tmp_path / "sim"
    yield d
    SimProvider(d).shutdown_server(terminate_all=True)


def _resumed_from(run: Any) -> list[Any]:
    return [(e.data or {}).get("resumed_from") for e in run.events("first-progress")]


@pytest.mark.e2e
@pytest.mark.slow
def test_a_notice_during_a_save_is_answered_by_that_save(tmp_path: Path, sim_dir: Path) -> None:
    need("torch")
    straight = straight_run(ARGV, tmp_path / "straight")
    argv = [*ARGV, "--checkpoint-every", "100", "--step-seconds", "0.01", "--slow-save", "4"]
    run = run_preempted(
        tmp_path,
        sim_dir,
        argv,
        at_step=0,
        when=lambda prog, work: _partial(work / "checkpoints", 100) is not None,
        notice_s=15,
        timeout=180,
    )
    assert run.state == "succeeded", run.job.refresh().reason
    assert run.preempted
    assert _resumed_from(run) == [None, "ckpt-000000100"]
    old = Path(run.sim.sandbox(run.preempted[0])["sandbox"]) / "work" / "checkpoints"
    kept = sorted(p.name for p in old.iterdir() if p.name.startswith(("ckpt-", ".ckpt-")))
    assert kept == ["ckpt-000000100"], "one save answered both the period and the notice"
    assert run.result["params_sha256"] == straight["params_sha256"]
    assert not run.events("checkpoint-warning")


@pytest.mark.e2e
@pytest.mark.slow
def test_a_save_that_cannot_finish_before_the_capacity_goes(tmp_path: Path, sim_dir: Path) -> None:
    need("torch")
    straight = straight_run(ARGV, tmp_path / "straight")
    # the save at step 50 takes ~6 s; the notice (well before the save of step 100) leaves
    # 4 s: the save it asks for cannot finish
    argv = [*ARGV, "--checkpoint-every", "50", "--step-seconds", "0.05", "--slow-save", "6"]
    run = run_preempted(
        tmp_path,
        sim_dir,
        argv,
        at_step=0,
        when=lambda prog, work: (prog.get("step") or 0) >= 55 and "last_save_s" in prog,
        notice_s=4,
        timeout=180,
    )
    assert run.state == "succeeded", run.job.refresh().reason
    assert run.preempted
    assert _resumed_from(run) == [None, "ckpt-000000050"], "the last complete checkpoint"
    old = Path(run.sim.sandbox(run.preempted[0])["sandbox"]) / "work" / "checkpoints"
    assert (old / "latest").read_text().strip() == "ckpt-000000050"
    assert [p for p in old.glob(".ckpt-*.partial-*")], "the save was cut short"
    warnings = run.events("checkpoint-warning")
    assert len(warnings) == 1, [e.message for e in run.store.events(run.job_id)]
    assert "may not finish before the capacity goes" in warnings[0].message
    assert warnings[0].message.startswith("attempt 1: ")
    assert run.result["params_sha256"] == straight["params_sha256"]
