"""End to end on the sim provider: a 2-node gang survives the preemption of one node (issue 10).

The policy asks for two nodes in a placement group. The sim takes one node's capacity back
with a notice; the notice reaches every node of the gang (agent/gang.py), rank 0 checkpoints,
the whole gang is terminated and relaunched together from that checkpoint in another zone
(a new placement group), and the job ends bit-identical to an uninterrupted 2-rank run. No
node outlives its gang, and no placement group is left behind.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from providers.sim import SimProvider
from provisioner.api import Job, submit
from provisioner.control.store import Store
from provisioner.core.models import TAG_JOB, TAG_NODES
from tests.e2e_util import REPO

pytestmark = pytest.mark.e2e

STEPS = 400


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def reference_gang_result(
    tmp: Path, steps: int, world: int = 2, step_seconds: float = 0.0
) -> dict[str, object]:
    """The gang job run straight through by ``world`` real processes, no signal, no kill, in
    this process's environment (as the sandbox passes it on: BLAS kernel choices such as
    ``OPENBLAS_CORETYPE`` change the last bits of a matrix product)."""
    port = _free_port()
    procs = []
    for rank in range(world):
        env = {  # the job's environment as the sim's sandbox gives it (OPENBLAS_* chooses kernels)
            **os.environ,
            "PYTHONPATH": str(REPO),
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "examples.gang_train",
                    "--steps",
                    str(steps),
                    "--step-seconds",
                    str(step_seconds),
                    "--checkpoint-dir",
                    str(tmp / f"ck{rank}"),
                    "--output-dir",
                    str(tmp / f"out{rank}"),
                ],
                cwd=REPO,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        )
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode(errors="replace")[-2000:]
    doc: dict[str, object] = json.loads((tmp / "out0" / "result.json").read_text())
    return doc


def write_gang_policy(path: Path, ckpt: Path) -> Path:
    path.write_text(f"""
name: e2e-gang
job:
  command: ["{sys.executable}", "-m", "examples.gang_train", "--steps", "{STEPS}", "--step-seconds", "0.05"]
  compute_hours: 2
  reference_gpu: A10G
resources:
  min_vram_gb: 16
  nodes: 2
  interconnect:
    inter_node: placement-group
market: spot
bid_cap:
  max_spot_price_per_gpu_hour: 3.0
budget:
  max_price_per_hour: 20
residency:
  allow: [EEA]
checkpoint:
  uri: file://{ckpt}
  interval: 30s
  grace: 20s
restart:
  max_restarts: 10
  zone_cooldown: 4s
""")
    return path


@pytest.fixture
def sim_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "sim"
    yield d
    SimProvider(d).shutdown_server(terminate_all=True)


def test_gang_survives_one_node_preemption_bit_identical(tmp_path: Path, sim_dir: Path) -> None:
    reference = reference_gang_result(tmp_path / "ref", STEPS)
    policy = write_gang_policy(tmp_path / "gang.yaml", tmp_path / "ck")
    options = {
        "state_dir": str(sim_dir),
        "mimic": {"eu-west-1a": "aws", "eu-west-1b": "aws"},
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
    sim = SimProvider(**options)

    state = job.wait(timeout=240, poll_s=0.5)
    assert state == "succeeded", job.refresh().reason

    attempts = [a for a in store.attempts(job_id) if a.state != "failed"]
    assert attempts[0].state == "preempted", [(a.attempt, a.state) for a in attempts]
    assert all(a.nodes == 2 for a in attempts)
    assert attempts[-1].state == "ended"
    assert attempts[-1].zone != attempts[0].zone, "restarted away from the lost node's zone"

    # every instance the job ever had was one node of a 2-node gang, two per attempt
    mine = sim.list({TAG_JOB: job_id})
    by_attempt: dict[int, set[int]] = {}
    for inst in mine:
        assert inst.tags[TAG_NODES] == "2"
        by_attempt.setdefault(inst.attempt, set()).add(inst.node)
    assert all(nodes == {0, 1} for nodes in by_attempt.values()), by_attempt
    assert not [i for i in mine if i.state.alive], "a node outlived its gang"

    events = store.events(job_id)
    assert any(e.kind == "notice" for e in events)
    assert sum(e.kind == "launch" for e in events) >= 2
    assert "gang of 2" in " ".join(e.message for e in events if e.kind == "launch")

    # resumed from the checkpoint rank 0 wrote at the notice: the same bits as straight through
    result = job.result
    assert result["params_sha256"] == reference["params_sha256"]
    assert result["final_loss"] == reference["final_loss"]
    assert result.get("world_size") in (None, 2)

    # money: each attempt billed for both nodes
    assert job.spent_usd > 0

    # no placement group left behind: the gang's groups went with it at the end of the job
    assert sim.list_placement_groups({TAG_JOB: job_id}) == []
    deleted = [e for e in events if e.kind == "group-deleted"]
    assert len(deleted) >= 1, "the groups were deleted by the sweep, with a record"
