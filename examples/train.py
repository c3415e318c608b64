"""A small, real, resumable training job: a numpy MLP fitted with SGD + momentum.

``python -m examples.train --steps 400 --step-seconds 0.05``

- The data set is synthetic and seeded; the mini-batch of step ``s`` is drawn from an RNG keyed
  by ``(seed, s)``, so no RNG state has to be carried and a resumed run sees exactly the batches
  an uninterrupted one would.
- The checkpoint holds the step, the parameters and the momentum buffers (``state.npz``), so
  the run resumed from it ends with parameters bit-identical to an uninterrupted run.
- On the checkpoint signal (``$PROVISIONER_CHECKPOINT_SIGNAL``, SIGUSR1 by default) it finishes
  the current step, writes a checkpoint and carries on; it also checkpoints every
  ``--checkpoint-every`` steps, and at the end.
- It resumes from ``$PROVISIONER_RESUME_FROM`` (set by the node agent), else from the newest
  checkpoint in its own checkpoint directory, else starts afresh.
- At the end it writes ``result.json`` (steps, final loss, SHA-256 of the parameters) to
  ``$PROVISIONER_OUTPUT_DIR`` (default ``./output``).

Idle mode (``--idle-after N``): after step N the job stops computing for ``--idle-seconds``
(waiting on a data loader that never delivers, as it were), still answering checkpoint
signals, then carries on. Where the agent gives it ``$PROVISIONER_GPU_FILE`` (the sim cloud,
which has no GPU) it reports its pretend GPU utilisation there: 96% while it trains, 0%
while it idles; that is what the agent samples and the idle-GPU policy acts on.

Checkpoints follow the agent protocol (provisioner.agent.protocol): files in
``<checkpoint dir>/ckpt-<step>/``, then an atomic ``latest`` marker.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import numpy as np

from provisioner.agent import protocol

PARAMS = ("w1", "b1", "w2", "b2")


@dataclass
class Config:
    steps: int = 400
    seed: int = 0
    samples: int = 2048
    features: int = 16
    hidden: int = 32
    batch: int = 64
    lr: float = 0.05
    momentum: float = 0.9


def make_data(cfg: Config) -> tuple[np.ndarray, np.ndarray]:
    """A seeded regression task: y = sin(x·a) + 0.5·tanh(x·b) + noise."""
    rng = np.random.default_rng(cfg.seed)
    x = rng.standard_normal((cfg.samples, cfg.features))
    a = rng.standard_normal(cfg.features) / np.sqrt(cfg.features)
    b = rng.standard_normal(cfg.features) / np.sqrt(cfg.features)
    y = np.sin(x @ a) + 0.5 * np.tanh(x @ b) + 0.05 * rng.standard_normal(cfg.samples)
    return x, y[:, None]


def init_state(cfg: Config) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(cfg.seed + 1)
    state = {
        "w1": rng.standard_normal((cfg.features, cfg.hidden)) / np.sqrt(cfg.features),
        "b1": np.zeros(cfg.hidden),
        "w2": rng.standard_normal((cfg.hidden, 1)) / np.sqrt(cfg.hidden),
        "b2": np.zeros(1),
    }
    for name in PARAMS:
        state["v_" + name] = np.zeros_like(state[name])
    return state


def forward(state: dict[str, np.ndarray], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h = np.tanh(x @ state["w1"] + state["b1"])
    return h, h @ state["w2"] + state["b2"]


def loss(state: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    _, out = forward(state, x)
    return float(np.mean((out - y) ** 2))


def train_step(
    state: dict[str, np.ndarray], cfg: Config, x: np.ndarray, y: np.ndarray, step: int
) -> float:
    """One SGD step on the mini-batch of ``step`` (drawn from an RNG keyed by (seed, step))."""
    idx = np.random.default_rng([cfg.seed, step]).integers(0, cfg.samples, cfg.batch)
    xb, yb = x[idx], y[idx]
    h, out = forward(state, xb)
    err = out - yb
    d_out = 2.0 * err / cfg.batch
    grads = {
        "w2": h.T @ d_out,
        "b2": d_out.sum(axis=0),
    }
    d_h = (d_out @ state["w2"].T) * (1.0 - h**2)
    grads["w1"] = xb.T @ d_h
    grads["b1"] = d_h.sum(axis=0)
    for name in PARAMS:
        v = state["v_" + name]
        v *= cfg.momentum
        v += grads[name]
        state[name] -= cfg.lr * v
    return float(np.mean(err**2))


def params_sha256(state: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for name in PARAMS:
        digest.update(np.ascontiguousarray(state[name], dtype=np.float64).tobytes())
    return digest.hexdigest()


def save(ckpt_dir: Path, step: int, state: dict[str, np.ndarray], cfg: Config) -> str:
    buf = io.BytesIO()
    np.savez(buf, step=np.array(step), **state)  # type: ignore[arg-type]
    meta = {"step": step, "seed": cfg.seed, "params_sha256": params_sha256(state)}
    return protocol.write_checkpoint(
        ckpt_dir, step, {"state.npz": buf.getvalue(), "meta.json": json.dumps(meta).encode()}
    )


def load(path: Path) -> tuple[int, dict[str, np.ndarray]]:
    with np.load(path / "state.npz") as data:
        step = int(data["step"])
        state = {k: np.array(data[k]) for k in data.files if k != "step"}
    return step, state


class CheckpointRequest:
    """Set by the checkpoint signal; the training loop checks it after each step."""

    def __init__(self) -> None:
        self.wanted = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.wanted = True


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m examples.train", description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=400, help="training steps in all")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step-seconds", type=float, default=0.05, help="extra time per step")
    p.add_argument("--checkpoint-every", type=int, default=100, help="steps; 0 = signal only")
    p.add_argument("--log-every", type=int, default=50, help="print a line every N steps")
    p.add_argument("--idle-after", type=int, default=0, help="go idle after this step (0: never)")
    p.add_argument("--idle-seconds", type=float, default=3600.0, help="how long to stay idle")
    p.add_argument(
        "--checkpoint-dir", default=os.environ.get(protocol.ENV_CHECKPOINT_DIR, "checkpoints")
    )
    p.add_argument("--output-dir", default=os.environ.get(protocol.ENV_OUTPUT_DIR, "output"))
    return p.parse_args(argv)


def report_gpu(utilization_pct: float) -> None:
    """Tell the agent how busy our (pretend) GPU is, where it asks (the sim cloud)."""
    path = os.environ.get("PROVISIONER_GPU_FILE")
    if path:
        doc = {"utilization_pct": utilization_pct}
        protocol.atomic_write(Path(path), json.dumps(doc).encode())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = Config(steps=args.steps, seed=args.seed)
    ckpt_dir, out_dir = Path(args.checkpoint_dir), Path(args.output_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    progress_file = os.environ.get(protocol.ENV_PROGRESS_FILE)
    request = CheckpointRequest()
    signal.signal(protocol.checkpoint_signal(), request)

    x, y = make_data(cfg)
    resume = os.environ.get(protocol.ENV_RESUME_FROM) or ""
    if not resume:
        latest = protocol.read_latest(ckpt_dir)
        resume = str(ckpt_dir / latest) if latest else ""
    if resume:
        step, state = load(Path(resume))
        print(f"resumed from {resume} at step {step}", flush=True)
    else:
        step, state = 0, init_state(cfg)

    last_loss = float("nan")
    report_gpu(96.0)
    idled = False
    while step < cfg.steps:
        if args.idle_after and step >= args.idle_after and not idled:
            idled = True
            report_gpu(0.0)
            print(f"idle from step {step} for {args.idle_seconds:g} s", flush=True)
            until = time.monotonic() + args.idle_seconds
            while time.monotonic() < until:
                if request.wanted:
                    request.wanted = False
                    print(f"checkpoint {save(ckpt_dir, step, state, cfg)} (signal)", flush=True)
                time.sleep(0.05)
            report_gpu(96.0)
        last_loss = train_step(state, cfg, x, y, step)
        step += 1
        if args.step_seconds > 0:
            time.sleep(args.step_seconds)
        periodic = args.checkpoint_every > 0 and step % args.checkpoint_every == 0
        if request.wanted or periodic:
            why = "signal" if request.wanted else "periodic"
            request.wanted = False
            name = save(ckpt_dir, step, state, cfg)
            print(f"checkpoint {name} ({why})", flush=True)
        if args.log_every > 0 and (step % args.log_every == 0 or step == cfg.steps):
            print(f"step {step}/{cfg.steps} batch loss {last_loss:.6f}", flush=True)
        if progress_file and (step % 10 == 0 or step == cfg.steps):
            protocol.report_progress(progress_file, step, total_steps=cfg.steps, loss=last_loss)

    if protocol.read_latest(ckpt_dir) != protocol.checkpoint_name(step):
        save(ckpt_dir, step, state, cfg)
    result = {
        "steps": step,
        "seed": cfg.seed,
        "final_loss": loss(state, x, y),
        "params_sha256": params_sha256(state),
    }
    protocol.atomic_write(
        out_dir / "result.json", json.dumps(result, indent=2, sort_keys=True).encode()
    )
    print(f"done: {json.dumps(result, sort_keys=True)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
