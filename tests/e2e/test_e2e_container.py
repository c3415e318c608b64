"""A job in a container image, on the sim, through a recording engine.

The engine here is ``tests/fakes/container_shim.py`` under the name ``docker`` on PATH: it
records the exact argv the agent gives an engine and carries out the run itself (the command
in the ``-w`` directory, with only the ``-e`` variables, by exec so that the checkpoint signal
reaches the job). It shows what a real engine cannot here: the exact command lines, a pull
from a registry (none is reachable from this machine) and one that fails. What these tests
prove is the agent's side: the pull, setup once per VM committed as an image, the run's flags,
variables passed by name only, and a pull that fails being a setup failure and not a
preemption. A real engine (Podman) runs a job through a preemption in
``tests/e2e/test_e2e_podman.py``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from providers.sim import SimProvider
from provisioner.api import Job, submit
from provisioner.control.store import Store
from tests.e2e_util import REPO, reference_result
from tests.fakes.container_shim import install

pytestmark = pytest.mark.e2e
STEPS = 300


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    bin_dir = tmp_path / "bin"
    log = tmp_path / "shim.jsonl"
    install(bin_dir, log, tmp_path / "images", "docker")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ.get('PATH', '')}")
    yield log


@pytest.fixture
def sim_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "sim"
    yield d
    SimProvider(d).shutdown_server(terminate_all=True)


def _policy(tmp_path: Path, image: str, extra: str = "") -> Path:
    work = tmp_path / "code"
    work.mkdir(exist_ok=True)
    shutil.copy(REPO / "examples" / "train.py", work / "train.py")
    (work / "check.py").write_text(
        "import os, runpy, sys\n"
        "assert os.path.exists('setup-ran.txt'), 'setup ran in the image, in the code dir'\n"
        "assert os.environ.get('WANDB_MODE') == 'offline'\n"
        "sys.argv = ['train.py', *sys.argv[1:]]\n"
        "runpy.run_path('train.py', run_name='__main__')\n"
    )
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"""
name: boxed
job:
  workdir: code
  container:
    image: {image}
    run_args: ["--shm-size=1g"]
  setup: ["touch setup-ran.txt"]
  env:
    WANDB_MODE: offline
  command: ["python", "check.py", "--steps", "{STEPS}", "--step-seconds", "0.03"]
  compute_hours: 2
  reference_gpu: A10G
resources:
  min_vram_gb: 16
market: spot
bid_cap:
  max_spot_price_per_gpu_hour: 3.0
residency:
  allow: [EEA]
checkpoint:
  uri: file://{tmp_path / "ck"}
  interval: 30s
  grace: 20s
restart:
  max_restarts: 10
  zone_cooldown: 4s
{extra}
""")
    return policy


OPTIONS = {
    "mimic": "all",
    "seconds_per_hour": 60,
    "mtbp_hours": None,
    "demo_outage_s": 6,
    "idle_exit_s": 120,
}


def _calls(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_a_job_in_an_image_survives_a_preemption(
    tmp_path: Path, sim_dir: Path, engine: Path
) -> None:
    policy = _policy(tmp_path, "example/trainer:1")
    options = {**OPTIONS, "state_dir": str(sim_dir), "preempt_first_after_s": 6}
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    _, job_id = submit(
        policy, provider="sim", provider_defaults=False, provider_options=options, store=store
    )
    job = Job(store, job_id)
    assert job.wait(timeout=200, poll_s=0.5) == "succeeded", job.refresh().reason
    assert any(a.state == "preempted" for a in store.attempts(job_id))
    # the container has none of this machine's environment (OPENBLAS_CORETYPE, set on some
    # machines, changes the last bits of a matrix product): the reference run has none either
    bare = (("PATH", os.environ.get("PATH", "/usr/bin:/bin")),)
    assert job.result["params_sha256"] == reference_result(STEPS, env=bare)["params_sha256"]

    calls = _calls(engine)
    argvs = [c["argv"] for c in calls if c["op"] == "call"]
    runs = [c for c in calls if c["op"] == "run"]
    vms = {c["vm"] for c in calls}
    assert len(vms) >= 2  # the attempts ran on two "VMs"
    for vm in vms:  # on each: one pull, one setup (committed as an image), then the job
        mine = [c for c in calls if c["vm"] == vm]
        pulls = [c["argv"] for c in mine if c["op"] == "call" and c["argv"][0] == "pull"]
        assert pulls == [["pull", "example/trainer:1"]]
        setups = [r for r in mine if r["op"] == "run" and r["keep"]]
        assert len(setups) == 1 and setups[0]["image"] == "example/trainer:1"
        commits = [c["argv"] for c in mine if c["op"] == "call" and c["argv"][0] == "commit"]
        assert len(commits) == 1 and commits[0][2].startswith("provisioner-setup/")
        jobs = [r for r in mine if r["op"] == "run" and not r["keep"]]
        assert [r["image"] for r in jobs] == [commits[0][2]]  # the job runs on setup's image
    jobs = [r for r in runs if not r["keep"]]
    job_argv = next(a for a in argvs if a[0] == "run" and "--rm" in a)
    assert "--init" in job_argv and "--shm-size=1g" in job_argv
    assert "--gpus" not in job_argv  # the sim has no GPU
    v = job_argv[job_argv.index("-v") + 1]
    w = job_argv[job_argv.index("-w") + 1]
    assert v.split(":")[0] == v.split(":")[1] and w == v.split(":")[0] + "/code"
    for r in jobs:  # every variable by name, with its value in the client's environment
        env = r["env_with_value"]
        assert isinstance(env, dict)
        assert env["WANDB_MODE"] and env["PROVISIONER_CHECKPOINT_DIR"]
        assert env["PROVISIONER_RESUME_FROM"] in (True, False)
    assert not any("=" in x for a in argvs for x in a if str(x).startswith("WANDB"))


def test_an_image_that_cannot_be_pulled_is_a_setup_failure_not_a_preemption(
    tmp_path: Path, sim_dir: Path, engine: Path
) -> None:
    policy = _policy(tmp_path, "example/missing-image:1")
    options = {**OPTIONS, "state_dir": str(sim_dir), "preempt_first_after_s": None}
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    _, job_id = submit(
        policy, provider="sim", provider_defaults=False, provider_options=options, store=store
    )
    job = Job(store, job_id)
    assert job.wait(timeout=120, poll_s=0.5) == "failed"
    row = job.refresh()
    assert "setup failed the same way on two attempts" in row.reason
    assert "pull example/missing-image:1 exited 1" in row.reason
    attempts = store.attempts(job_id)
    assert len(attempts) == 2 and row.restarts == 0  # not preemptions
    assert all(a.end_reason.startswith("setup failed (") for a in attempts)
    failed = [e for e in store.events(job_id) if e.kind == "setup-failed"]
    assert failed and "manifest unknown" in failed[0].message  # the pull's last lines
