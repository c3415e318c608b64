"""Real training frameworks on the sim, through a preemption, bit-identical at the end.

Each test runs a framework's example (``examples/torch_train.py``, ``lightning_train.py``,
``hf_train.py``) as a job on the sim; once it has trained a while, its instance gets a spot
interruption notice. The agent writes the notice file and signals the job; the framework's
integration (``provisioner.job.*``) saves at the next step boundary and stops; the agent
uploads that checkpoint; the job resumes from it in another zone; and its final parameters'
SHA-256 equals a run of the same command straight through. The checkpoint resumed from is the
notice's (periodic checkpoints are off), so a resume that lost any state (an RNG, the data
position, the optimizer, the scheduler) would end with other bits.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.frameworks import need, run_preempted, straight_run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# The notice in real seconds. These tests are about what a resume keeps, not about the deadline
# (tests/job/test_job_save_timing.py is): AWS's two minutes scaled to the sim's hour of 60 s leave
# 2 s, and on a loaded CI machine a framework's save and the upload took longer than that.
NOTICE_S = 10.0


@pytest.fixture
def sim_dir(tmp_path: Path) -> Iterator[Path]:
    from providers.sim import SimProvider

    d = tmp_path / "sim"
    yield d
    SimProvider(d).shutdown_server(terminate_all=True)


def _check_resumed_from_the_notice(
    run, straight: dict, steps: int, notice_event: bool = True
) -> None:  # type: ignore[no-untyped-def]
    assert run.state == "succeeded", run.job.refresh().reason
    assert run.preempted, "the job was never preempted"
    attempts = run.attempts()
    assert attempts[0].state == "preempted" and attempts[-1].state == "ended"
    if notice_event:
        assert any(e.kind == "notice" for e in run.store.events(run.job_id))
    starts = run.events("first-progress")
    resumed = [(e.data or {}).get("resumed_from") for e in starts]
    assert resumed[0] is None and resumed[-1], resumed  # the second attempt resumed
    step = int(str(resumed[-1]).rsplit("-", 1)[1])
    assert 0 < step < steps, f"resumed from {resumed[-1]}: the notice's, mid-run"
    result = run.result
    assert result["steps"] == steps
    assert result["params_sha256"] == straight["params_sha256"]


def test_torch_job_resumes_bit_identical_after_a_notice(tmp_path: Path, sim_dir: Path) -> None:
    need("torch")
    steps = 300
    argv = ["examples.torch_train", "--steps", str(steps), "--checkpoint-every", "0"]
    straight = straight_run(argv, tmp_path / "straight")
    run = run_preempted(
        tmp_path,
        sim_dir,
        [*argv, "--step-seconds", "0.02"],
        at_step=100,
        notice_s=NOTICE_S,
        timeout=180,
    )
    _check_resumed_from_the_notice(run, straight, steps)


def test_lightning_job_resumes_bit_identical_after_a_notice(tmp_path: Path, sim_dir: Path) -> None:
    need("torch")
    need("lightning")
    steps = 200
    argv = ["examples.lightning_train", "--steps", str(steps)]
    straight = straight_run(argv, tmp_path / "straight")
    run = run_preempted(
        tmp_path,
        sim_dir,
        [*argv, "--step-seconds", "0.03"],
        at_step=70,
        notice_s=NOTICE_S,
        timeout=180,
    )
    _check_resumed_from_the_notice(run, straight, steps)


def test_hf_trainer_job_resumes_bit_identical_after_a_notice(tmp_path: Path, sim_dir: Path) -> None:
    need("torch")
    need("transformers")
    need("accelerate")
    steps = 120
    argv = ["examples.hf_train", "--steps", str(steps)]
    straight = straight_run(argv, tmp_path / "straight")
    run = run_preempted(
        tmp_path,
        sim_dir,
        [*argv, "--step-seconds", "0.04"],
        at_step=40,
        notice_s=NOTICE_S,
        timeout=180,
    )
    _check_resumed_from_the_notice(run, straight, steps)


def test_ddp_gang_of_two_resumes_bit_identical_after_one_nodes_notice(
    tmp_path: Path, sim_dir: Path
) -> None:
    """torch.distributed (gloo) over a 2-node gang on the sim; node 1 gets the notice: the
    notice reaches node 0 through the gang, both ranks agree on the step, rank 0 writes the
    checkpoint, both stop, and the gang resumes from it elsewhere, each rank with its own
    RNG states and its share of the data, ending with a straight 2-rank run's bits."""
    need("torch")
    from tests.frameworks import straight_gang

    steps = 200
    argv = ["examples.ddp_train", "--steps", str(steps)]
    straight = straight_gang(argv, tmp_path / "straight")
    run = run_preempted(
        tmp_path,
        sim_dir,
        [*argv, "--step-seconds", "0.03"],
        at_step=60,
        nodes=2,
        node=1,
        notice_s=20.0,
        timeout=240,
    )
    # the peer's notice reaches node 0's agent through the gang (the whole gang checkpoints on
    # it) and the controller through node 0's record (the sim's API, mimicking AWS, says
    # nothing before the capacity goes): the `notice` event is written for the gang too
    _check_resumed_from_the_notice(run, straight, steps, notice_event=True)
    assert all(a.nodes == 2 for a in run.attempts())
    assert run.result["world_size"] == 2
