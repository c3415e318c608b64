"""torchrun as the job: the agent's checkpoint signal reaches every worker through
``python -m provisioner.job.torchrun``, and a DDP run under it goes through a periodic request
and a notice and resumes bit-identical.

What the agent does is played here by the test: the job's environment (checkpoint directory,
progress and notice files), the signal to the job's process (the wrapper) and the notice file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from provisioner.agent import protocol
from tests.frameworks import job_env, need, straight_gang, wait_for

pytestmark = pytest.mark.e2e

WORKER = """
import os, sys, time
import provisioner.job as job
with job.watch():
    print(f"rank {os.environ['RANK']} ready", flush=True)
    until = time.monotonic() + 60
    while time.monotonic() < until:
        if job.checkpoint_requested():
            print(f"rank {os.environ['RANK']} got the signal", flush=True)
            sys.exit(0)
        time.sleep(0.02)  # the worker's own work between looks at the flag
sys.exit(3)
"""


def _agent_env(tmp: Path) -> dict[str, str]:
    return {
        **job_env(),
        protocol.ENV_CHECKPOINT_DIR: str(tmp / "checkpoints"),
        protocol.ENV_OUTPUT_DIR: str(tmp / "output"),
        protocol.ENV_PROGRESS_FILE: str(tmp / "progress.json"),
        protocol.ENV_NOTICE_FILE: str(tmp / "notice.json"),
        protocol.ENV_SIGNAL: "SIGUSR1",
    }


def _start(tmp: Path, args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[str]:
    """The wrapper as the agent starts a job: the checkpoint signal ignored until the job
    installs its handler (provisioner.agent.procs.child_preexec)."""
    return subprocess.Popen(
        [sys.executable, "-m", "provisioner.job.torchrun", "--standalone", *args],
        cwd=tmp,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGUSR1, signal.SIG_IGN),
    )


def test_the_signal_reaches_every_torchrun_worker(tmp_path: Path) -> None:
    need("torch")
    (tmp_path / "worker.py").write_text(WORKER)
    log = tmp_path / "log.txt"
    proc = _start(tmp_path, ["--nproc-per-node", "2", "worker.py"], _agent_env(tmp_path), log)
    try:
        wait_for(lambda: log.read_text().count("ready") == 2, timeout=60)
        proc.send_signal(signal.SIGUSR1)  # to the job's own process, as the agent does
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
    finally:
        proc.kill()
    text = log.read_text()
    assert "rank 0 got the signal" in text and "rank 1 got the signal" in text, text[-3000:]


def _progress_step(tmp: Path) -> int:
    try:
        return int(json.loads((tmp / "progress.json").read_text()).get("step") or 0)
    except (OSError, ValueError):
        return 0


@pytest.mark.slow
def test_ddp_under_torchrun_through_a_request_and_a_notice(tmp_path: Path) -> None:
    need("torch")
    steps = 200
    argv = ["examples.ddp_train", "--steps", str(steps)]
    straight = straight_gang(argv, tmp_path / "straight")
    work = tmp_path / "work"
    work.mkdir()
    env = _agent_env(work)
    args = ["--nproc-per-node", "2", "-m", *argv, "--step-seconds", "0.03"]
    log = work / "log1.txt"
    proc = _start(work, args, env, log)
    try:
        wait_for(lambda: _progress_step(work) >= 40, timeout=90)
        proc.send_signal(signal.SIGUSR1)  # a periodic request: save and carry on
        ck = work / "checkpoints"
        first = wait_for(lambda: protocol.read_latest(ck), timeout=30)
        at = int(first.rsplit("-", 1)[1])
        wait_for(lambda: _progress_step(work) >= at + 30, timeout=60)
        assert proc.poll() is None, "the request did not stop the job"
        now = datetime.now(UTC)
        protocol.write_notice(  # the agent's notice, then its signal
            work / "notice.json",
            now.isoformat(),
            (now + timedelta(seconds=60)).isoformat(),
            "aws",
            "test",
        )
        proc.send_signal(signal.SIGUSR1)
        assert proc.wait(timeout=60) == 75, log.read_text()[-3000:]  # stopped: interrupted
    finally:
        proc.kill()
    second = protocol.read_latest(ck)
    assert second is not None and int(second.rsplit("-", 1)[1]) > at + 20
    text = log.read_text()
    stop = int(second.rsplit("-", 1)[1])
    for rank in (0, 1):  # every rank stopped at the notice's step
        assert f"rank {rank}: notice served, stopping at step {stop}" in text, text[-3000:]

    # the next attempt: every worker resumes from that checkpoint
    (work / "notice.json").unlink()
    env[protocol.ENV_RESUME_FROM] = str(ck / second)
    log = work / "log2.txt"
    proc = _start(work, args[:-2], env, log)
    assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
    assert f"resumed at step {stop}" in log.read_text()
    result = json.loads((work / "output" / "result.json").read_text())
    assert result["params_sha256"] == straight["params_sha256"]
    assert not [p for p in os.listdir(ck) if ".partial-" in p]
