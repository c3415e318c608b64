"""The drill's job: seconds of checkpointed work with a known result (standard library only).

``python -m provisioner.drill.job --steps 60 --step-seconds 0.2``

Each step folds the step number into a SHA-256 chain; the chain's last digest after ``steps``
steps is the result, the same however often the run is stopped and resumed, so
:func:`expected_result` knows it without running anything. The state (step and digest) is
checkpointed through :mod:`provisioner.job` (every ``--checkpoint-every`` steps, on the
agent's signal and on a notice); after a notice's checkpoint the job exits
:data:`provisioner.job.EXIT_INTERRUPTED`, and a resumed run starts from the checkpoint the
agent fetched. The result goes to ``$PROVISIONER_OUTPUT_DIR/result.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import provisioner.job as job

SEED = b"provisioner drill"
STATE = "state.json"


def step_digest(digest: str, step: int) -> str:
    """The chain's digest after ``step`` (counting from 0), from the one before it."""
    return hashlib.sha256(f"{digest}:{step}".encode()).hexdigest()


def expected_result(steps: int) -> dict[str, object]:
    """What the job writes after ``steps`` steps, interrupted or not."""
    digest = hashlib.sha256(SEED).hexdigest()
    for step in range(steps):
        digest = step_digest(digest, step)
    return {"drill": True, "steps": steps, "digest": digest}


def _load(path: Path | None) -> tuple[int, str, str]:
    """(step, digest, where from) from a checkpoint directory, or a fresh start."""
    if path is None:
        return 0, hashlib.sha256(SEED).hexdigest(), ""
    doc = json.loads((path / STATE).read_text(encoding="utf-8"))
    return int(doc["step"]), str(doc["digest"]), path.name


def _save(step: int, digest: str) -> None:
    with job.saving(step) as tmp:
        (tmp / STATE).write_text(json.dumps({"step": step, "digest": digest}), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m provisioner.drill.job", description=__doc__)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--step-seconds", type=float, default=0.2)
    p.add_argument("--checkpoint-every", type=int, default=0, help="steps; 0: on demand only")
    args = p.parse_args(argv)
    with job.watch():
        step, digest, resumed = _load(job.resume_dir())
        if resumed:
            print(f"resumed from {resumed} at step {step}", flush=True)
        job.report_progress(step, args.steps, resumed_from=resumed)
        while step < args.steps:
            digest = step_digest(digest, step)
            step += 1
            time.sleep(args.step_seconds)
            periodic = args.checkpoint_every > 0 and step % args.checkpoint_every == 0
            if periodic or job.checkpoint_requested():
                _save(step, digest)
                print(f"checkpoint at step {step}", flush=True)
                if job.interrupted():
                    print("interrupted: the notice's checkpoint is saved", flush=True)
                    return job.EXIT_INTERRUPTED
            job.report_progress(step, args.steps, resumed_from=resumed)
        _save(step, digest)
        result = {"drill": True, "steps": step, "digest": digest}
        (job.output_dir() / "result.json").write_text(json.dumps(result), encoding="utf-8")
    print(f"done: {json.dumps(result)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
