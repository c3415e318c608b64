"""Helpers for the end-to-end tests: an uninterrupted reference run of the example job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@cache
def reference_result(
    steps: int, seed: int = 0, env: tuple[tuple[str, str], ...] | None = None
) -> dict[str, object]:
    """The example job run straight through, no signal, no kill, in this process's
    environment (``env``, as (name, value) pairs: in that one instead, e.g. a container's,
    which has none of this machine's BLAS settings)."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="ref-run-"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "examples.train",
            "--steps",
            str(steps),
            "--seed",
            str(seed),
            "--checkpoint-dir",
            str(d / "ck"),
            "--output-dir",
            str(d / "out"),
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=300,
        # the environment a job gets (the sim's sandbox and the agent pass theirs on): BLAS
        # kernel choices such as OPENBLAS_CORETYPE change the last bits of a matrix product
        env={**(os.environ if env is None else dict(env)), "PYTHONPATH": str(REPO)},
    )
    doc: dict[str, object] = json.loads((d / "out" / "result.json").read_text())
    return doc


def write_policy(
    path: Path,
    *,
    steps: int,
    ckpt: Path,
    extra: str = "",
    market: str = "spot",
    allow: str = "EEA",
    step_seconds: float = 0.05,
) -> Path:
    path.write_text(f"""
name: e2e
job:
  command: ["{sys.executable}", "-m", "examples.train", "--steps", "{steps}", "--step-seconds", "{step_seconds}"]
  compute_hours: 2
  reference_gpu: A10G
resources:
  min_vram_gb: 16
market: {market}
bid_cap:
  max_spot_price_per_gpu_hour: 3.0
budget:
  max_price_per_hour: 10
residency:
  allow: [{allow}]
checkpoint:
  uri: file://{ckpt}
  shared: true  # the fake clouds' "VMs" run on this machine
  interval: 30s
  grace: 20s
restart:
  max_restarts: 10
  zone_cooldown: 4s
{extra}
""")
    return path
