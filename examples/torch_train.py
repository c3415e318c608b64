"""A real PyTorch training loop that checkpoints on the interruption notice and resumes
bit-identical: ``python -m examples.torch_train --steps 300``.

An MLP with dropout (so the random number generators matter) fitted with AdamW and a cosine
schedule on a seeded synthetic regression set, shuffled each epoch. Everything goes through
``provisioner.job`` and ``provisioner.job.torch``:

- ``job.watch()`` catches the agent's checkpoint signal (a flag, nothing more);
- ``Checkpointer.load()`` resumes from ``$PROVISIONER_RESUME_FROM`` (model, optimizer,
  scheduler, every RNG, the loader's epoch and batch);
- at each step boundary ``maybe_save`` saves when the agent asked (its signal or the notice
  file) or ``--checkpoint-every`` steps passed; after the notice's checkpoint the job stops
  with ``job.EXIT_INTERRUPTED`` (the capacity is going);
- ``result.json`` in ``$PROVISIONER_OUTPUT_DIR``: steps, final loss, SHA-256 of the
  parameters (equal to an uninterrupted run's).

``--hidden``/``--layers`` make the model as large as wanted (the benchmark uses ~300 MB);
``--slow-save S`` sleeps S seconds in the middle of each save of attempt 1 (how the tests put a
notice, or a kill, in the middle of a save).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import provisioner.job as job


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m examples.torch_train", description=__doc__)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--samples", type=int, default=1024)
    p.add_argument("--features", type=int, default=16)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2, help="hidden layers")
    p.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw")
    p.add_argument("--step-seconds", type=float, default=0.0, help="extra time per step")
    p.add_argument("--checkpoint-every", type=int, default=100, help="steps; 0 = on request only")
    p.add_argument("--slow-save", type=float, default=0.0, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def build(args: argparse.Namespace) -> tuple[Any, Any, Any, Any]:
    import torch
    from torch import nn

    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(args.samples, args.features, generator=g)
    w = torch.randn(args.features, 1, generator=g) / args.features**0.5
    y = torch.sin(x @ w) + 0.05 * torch.randn(args.samples, 1, generator=g)
    layers: list[nn.Module] = []
    width = args.features
    for _ in range(args.layers):
        layers += [nn.Linear(width, args.hidden), nn.Tanh(), nn.Dropout(0.1)]
        width = args.hidden
    model = nn.Sequential(*layers, nn.Linear(width, 1))
    if args.optimizer == "adamw":
        opt: torch.optim.Optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)
    return model, opt, sched, torch.utils.data.TensorDataset(x, y)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from provisioner.job.torch import Checkpointer, ResumableLoader, params_sha256

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    model, opt, sched, data = build(args)
    loader = ResumableLoader(data, batch_size=args.batch, seed=args.seed, drop_last=True)
    ck = Checkpointer(model, opt, sched, loader=loader)
    slow = args.slow_save if os.environ.get(job.ENV_ATTEMPT, "1") == "1" else 0.0
    if slow > 0:
        plain_write = ck.write

        def slow_write(tmp: Path, state: dict[str, Any]) -> None:
            print(f"saving step {state['step']} (slowly)", flush=True)
            plain_write(tmp, state)
            time.sleep(slow)

        ck.write = slow_write  # type: ignore[method-assign]
    loss_fn = torch.nn.MSELoss()
    with job.watch():
        step = ck.load()
        print(f"{'resumed at step ' + str(step) if step else 'fresh start'}", flush=True)
        loss = torch.tensor(0.0)
        while step < args.steps:
            loader.set_epoch(ck.epoch)
            for xb, yb in loader:
                opt.zero_grad()
                loss = loss_fn(model(xb), yb)
                loss.backward()
                opt.step()
                sched.step()
                step += 1
                if args.step_seconds:
                    time.sleep(args.step_seconds)
                periodic = args.checkpoint_every and step % args.checkpoint_every == 0
                if job.checkpoint_requested() or periodic:
                    print(f"checkpoint {ck.save(step).name}", flush=True)
                    if job.interrupted():
                        print("notice served: stopping here", flush=True)
                        return job.EXIT_INTERRUPTED
                if step % 10 == 0 or step == args.steps:
                    job.report_progress(step, args.steps, loss=loss.item())
                if step >= args.steps:
                    break
            else:
                ck.epoch += 1
    result = {"steps": step, "final_loss": loss.item(), "params_sha256": params_sha256(model)}
    (job.output_dir() / "result.json").write_text(json.dumps(result, indent=2, sort_keys=True))
    print(f"done: {json.dumps(result, sort_keys=True)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
