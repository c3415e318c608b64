"""A job in a real container, on the sim: Podman runs it, a preemption's notice reaches it
through the engine's signal proxy, and it resumes bit-identical in a container on another VM.

Needs Podman with a local image that has a C library (``localhost/testbase:1``, Debian's
minimal base: ``tools/containers/setup-podman.sh debian``, which `.ci/run` runs); no registry
is reachable here, so the image is imported, not pulled. The image has no Python of its own:
the policy mounts this machine's interpreter and the project read-only (``run_args``), as an
image with the job's runtime would carry them. Skipped where Podman cannot run a container,
except under CI, where that is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from providers.sim import SimProvider
from provisioner.api import Job, submit
from provisioner.control.store import Store
from tests.e2e_util import REPO, reference_result

pytestmark = pytest.mark.e2e
IMAGE = "localhost/testbase:1"
STEPS = 400


def _podman_runs() -> str | None:
    """Why Podman cannot run a container here, or None when it can."""
    podman = shutil.which("podman")
    if podman is None:
        return "podman is not installed (tools/containers/setup-podman.sh debian)"
    probe = subprocess.run(
        [podman, "run", "--rm", "--network", "host", IMAGE, "true"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if probe.returncode != 0:
        return f"podman cannot run {IMAGE}: {probe.stderr.strip()[-200:]}"
    return None


@pytest.fixture(scope="module")
def podman() -> Iterator[str]:
    why = _podman_runs()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the real-engine test: {why}")
        pytest.skip(why)
    yield "podman"
    # the sim kills a preempted "VM"'s processes, the engine's client among them; a real VM's
    # containers go with it, the sim's stay: remove them
    names = subprocess.run(
        ["podman", "ps", "-a", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    mine = [n for n in names if n.startswith("provisioner-")]
    if mine:
        subprocess.run(["podman", "rm", "-f", *mine], capture_output=True, check=False)


@pytest.fixture
def sim_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "sim"
    yield d
    SimProvider(d).shutdown_server(terminate_all=True)


def test_a_job_in_a_podman_container_survives_a_preemption(
    tmp_path: Path, sim_dir: Path, podman: str
) -> None:
    work = tmp_path / "code"
    work.mkdir()
    shutil.copy(REPO / "examples" / "train.py", work / "train.py")
    python_home = Path(sys.base_prefix).resolve()  # the interpreter the venv was made from
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"""
name: podman
job:
  workdir: code
  container:
    image: {IMAGE}
    engine: podman
    run_args: ["-v", "{python_home}:{python_home}:ro", "-v", "{REPO}:{REPO}:ro"]
  setup: ["echo set up inside > setup-ran.txt"]
  env:
    PYTHONPATH: "{REPO}"
  command: ["{sys.executable}", "train.py", "--steps", "{STEPS}", "--step-seconds", "0.03"]
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
""")
    options: dict[str, Any] = {
        "state_dir": str(sim_dir),
        "mimic": "all",
        "seconds_per_hour": 60,
        "mtbp_hours": None,
        "preempt_first_after_s": 6,
        "demo_outage_s": 6,
        "idle_exit_s": 120,
        "keep_sandboxes": True,  # the test looks in every attempt's work/code
    }
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    _, job_id = submit(
        policy, provider="sim", provider_defaults=False, provider_options=options, store=store
    )
    job = Job(store, job_id)
    assert job.wait(timeout=300, poll_s=0.5) == "succeeded", job.refresh().reason
    attempts = store.attempts(job_id)
    assert any(a.state == "preempted" for a in attempts), [a.state for a in attempts]
    # the container gets the job's own variables by name and nothing else of this machine's
    # environment (OPENBLAS_CORETYPE, set on some machines, changes the last bits of a matrix
    # product): the reference run has none of it either
    bare = (("PATH", os.environ.get("PATH", "/usr/bin:/bin")),)
    assert job.result["params_sha256"] == reference_result(STEPS, env=bare)["params_sha256"]
    notice = [e for e in store.events(job_id) if e.kind == "notice"]
    assert notice  # the job checkpointed on it, inside its container (the resume proves it)
    for sandbox in (sim_dir / "instances").iterdir():
        code = sandbox / "work" / "code"
        if code.is_dir():  # setup ran inside the image, in the mounted code directory
            assert (code / "setup-ran.txt").read_text() == "set up inside\n"
