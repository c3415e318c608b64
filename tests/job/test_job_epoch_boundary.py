"""A checkpoint saved after an epoch's last batch resumes bit-identical, as one from mid-epoch.

The examples' loader (``provisioner.job.torch.ResumableLoader``) hands out 32 batches an epoch
(1,024 rows, batches of 32). A run that saves every 48 steps leaves one checkpoint mid-epoch
(step 48) and one right after an epoch's last batch (step 96); each is resumed in a fresh
working directory (``$PROVISIONER_RESUME_FROM``, as the agent gives it) and must end with the
bits of the run that went straight through. Lightning counts an epoch whose last batch was
saved as done and starts the next one: a loader that still skipped the saved epoch's batches
there lost a whole epoch of data (found by the Lightning e2e test when its notice fell at step
96).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import provisioner.job as job
from tests.frameworks import job_env, need

pytestmark = pytest.mark.slow

STEPS = 100


def _run(argv: list[str], workdir: Path, resume: Path | None = None) -> dict[str, object]:
    workdir.mkdir(parents=True, exist_ok=True)
    env = job_env()
    if resume is not None:
        env[job.ENV_RESUME_FROM] = str(resume)
    done = subprocess.run(
        [sys.executable, "-m", *argv],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    if resume is not None:
        assert str(resume) in done.stdout or "resum" in done.stdout.lower(), done.stdout
    result: dict[str, object] = json.loads((workdir / "output" / "result.json").read_text())
    return result


@pytest.mark.parametrize("example", ["lightning_train", "torch_train"])
def test_resumed_mid_epoch_and_after_an_epochs_last_batch_bit_identical(
    tmp_path: Path, example: str
) -> None:
    need("torch")
    if example == "lightning_train":
        need("lightning")
    argv = [f"examples.{example}", "--steps", str(STEPS), "--checkpoint-every", "48"]
    straight = _run(argv, tmp_path / "straight")
    saved = tmp_path / "straight" / "checkpoints"
    assert sorted(p.name for p in saved.glob("ckpt-*")) == ["ckpt-000000048", "ckpt-000000096"]
    for step in (48, 96):  # 48: mid-epoch (epoch 1, batch 16); 96: after epoch 2's last batch
        resumed = _run(argv, tmp_path / f"from-{step}", resume=saved / f"ckpt-{step:09d}")
        assert resumed["steps"] == STEPS
        assert resumed["params_sha256"] == straight["params_sha256"], f"resumed from step {step}"
