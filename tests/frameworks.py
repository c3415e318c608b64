"""Helpers for the tests with real training frameworks (torch, lightning, transformers).

``need("torch")`` imports a framework or skips the test with the reason, except in CI (``$CI``
set), where a missing framework fails the test: ``.ci/run`` installs them all. The rest runs
a framework example on the sim through a preemption, and straight through for comparison.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests import waiting
from tests.e2e_util import REPO

INSTALL = {
    "torch": "pip install torch==2.13.0 (the CPU wheel)",
    "lightning": "pip install 'provisioner[lightning]'",
    "transformers": "pip install 'provisioner[hf]'",
    "accelerate": "pip install 'provisioner[hf]'",
}


def need(module: str) -> ModuleType:
    """The framework, or a skip saying how to install it (a failure under CI)."""
    reason = f"{module} is not installed ({INSTALL.get(module, 'pip install ' + module)})"
    if os.environ.get("CI"):
        try:
            return __import__(module)
        except ImportError as exc:  # CI installs every framework: a missing one is a failure
            pytest.fail(f"{reason}; .ci/run installs it: {exc}")
    return pytest.importorskip(module, reason=reason)


def job_env() -> dict[str, str]:
    """The environment the sim gives a job without its own code (this checkout on the path),
    with nothing of an agent in it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVISIONER_")}
    env["PYTHONPATH"] = str(REPO)
    return env


def straight_run(argv: list[str], workdir: Path, timeout: float = 300) -> dict[str, Any]:
    """``python -m <argv>`` run straight through in ``workdir`` (no agent, no signal): its
    result.json."""
    workdir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", *argv],
        cwd=workdir,
        env=job_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc: dict[str, Any] = json.loads((workdir / "output" / "result.json").read_text())
    return doc


def straight_gang(argv: list[str], workdir: Path, world: int = 2) -> dict[str, Any]:
    """``python -m <argv>`` as ``world`` ranks on this machine (torchrun's environment, as a
    gang's agents give it), straight through: rank 0's result.json."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(world):
        d = workdir / f"rank{rank}"
        d.mkdir(parents=True, exist_ok=True)
        env = {
            **job_env(),
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
        with (d / "log.txt").open("w") as log:  # a file: a full pipe would stall a rank
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", *argv], cwd=d, env=env, stdout=log, stderr=log
                )
            )
    try:
        for rank, p in enumerate(procs):
            code = p.wait(timeout=240)
            assert code == 0, (workdir / f"rank{rank}" / "log.txt").read_text()[-3000:]
    finally:
        for p in procs:
            p.kill()
    doc: dict[str, Any] = json.loads((workdir / "rank0" / "output" / "result.json").read_text())
    return doc


def sim_policy(path: Path, argv: list[str], ckpt: Path, *, interval: str = "1h") -> Path:
    command = json.dumps([sys.executable, "-m", *argv])
    path.write_text(f"""
name: frameworks
job:
  command: {command}
  compute_hours: 2
  reference_gpu: A10G
resources:
  min_vram_gb: 16
market: spot
bid_cap:
  max_spot_price_per_gpu_hour: 3.0
budget:
  max_price_per_hour: 10
residency:
  allow: [EEA]
checkpoint:
  uri: file://{ckpt}
  shared: true  # the sim's "VMs" run on this machine
  interval: {interval}
  grace: 30s
restart:
  max_restarts: 10
  zone_cooldown: 4s
""")
    return path


def wait_for(what: Callable[[], Any], timeout: float, poll_s: float = 0.1) -> Any:
    """``what()``'s first truthy answer, polled until ``timeout`` (then an assertion error)."""
    return waiting.wait_for(what, timeout, poll_s)


@dataclass
class SimRun:
    """A job run on the sim through one preemption: what the test looks at afterwards."""

    state: str
    job: Any
    store: Any
    job_id: str
    sim: Any
    preempted: list[str] = field(default_factory=list)

    @property
    def result(self) -> dict[str, Any]:
        doc: dict[str, Any] = self.job.result
        return doc

    def events(self, kind: str) -> list[Any]:
        return [e for e in self.store.events(self.job_id) if e.kind == kind]

    def attempts(self) -> list[Any]:
        return [a for a in self.store.attempts(self.job_id) if a.state != "failed"]


def run_preempted(
    tmp: Path,
    sim_dir: Path,
    argv: list[str],
    *,
    at_step: int,
    notice_s: float | None = None,
    nodes: int = 1,
    node: int = 0,
    when: Callable[[dict[str, Any], Path], bool] | None = None,
    timeout: float = 240,
    interval: str = "1h",
) -> SimRun:
    """``python -m <argv>`` as a job on the sim; once attempt 1 reports step ``at_step`` (or
    ``when(its progress file, its working directory)`` holds), its instance (a gang's: node ``node``'s) is preempted (a notice of ``notice_s`` real
    seconds, default the cloud's, scaled). Waits for the job to end."""
    from providers.sim import SimProvider
    from provisioner.api import Job, submit
    from provisioner.control.store import Store
    from provisioner.core.models import TAG_JOB

    policy = sim_policy(tmp / "policy.yaml", argv, tmp / "ck", interval=interval)
    if nodes > 1:
        text = policy.read_text().replace(
            "  min_vram_gb: 16\n",
            f"  min_vram_gb: 16\n  nodes: {nodes}\n  interconnect:\n"
            "    inter_node: placement-group\n",
        )
        policy.write_text(text.replace("max_price_per_hour: 10", "max_price_per_hour: 40"))
    options: dict[str, Any] = {
        "state_dir": str(sim_dir),
        "mimic": {"eu-west-1a": "aws", "eu-west-1b": "aws"},
        "seconds_per_hour": 60,
        "mtbp_hours": None,
        "idle_exit_s": 120,
        "keep_sandboxes": True,  # the tests look in a preempted attempt's work/
    }
    store = Store(f"sqlite:///{tmp / 's.db'}")
    _, job_id = submit(
        policy, provider="sim", provider_defaults=False, provider_options=options, store=store
    )
    job = Job(store, job_id)
    sim = SimProvider(**options)
    preempted: list[str] = []

    def ready() -> str | None:
        """Attempt 1's instance to preempt, once its job (read from its own progress file in
        the sandbox: the agent's record lags by seconds) has got that far."""
        mine = [i for i in sim.list({TAG_JOB: job_id}) if i.attempt == 1 and i.state.alive]
        if len(mine) < nodes:
            return None
        lead = next(i for i in mine if i.node == 0)
        work = Path(sim.sandbox(lead.id)["sandbox"]) / "work"
        try:
            prog = json.loads((work / "job-progress.json").read_text())
        except (OSError, ValueError):
            return None
        if not (when(prog, work) if when is not None else (prog.get("step") or 0) >= at_step):
            return None
        return next(i.id for i in mine if i.node == node)

    def preempt() -> None:
        try:
            iid = wait_for(ready, timeout=timeout / 2, poll_s=0.1)
        except AssertionError:
            return
        sim.preempt(iid, notice_s=notice_s)
        preempted.append(iid)

    t = threading.Thread(target=preempt, daemon=True)
    t.start()
    state = job.wait(timeout=timeout, poll_s=0.5)
    t.join(timeout=5)
    return SimRun(state, job, store, job_id, sim, preempted)
