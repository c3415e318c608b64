"""Data-parallel PyTorch (DDP over gloo, on the CPU) that checkpoints on the interruption
notice and resumes bit-identical: one process per rank, from torchrun's environment (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), which a gang's node agent sets too.

    torchrun --standalone --nproc-per-node 2 -m examples.ddp_train --steps 200
    # a gang: the policy's command is `python -m examples.ddp_train`, one process per node

The model and data are ``examples/torch_train.py``'s; each rank takes its share of every
epoch's shuffled batches (``ResumableLoader`` splits by rank). ``provisioner.job.dist``:

- every rank checks for the agent's request (the notice file every process sees, or the
  signal) at each step, and the ranks agree (one all-reduce) so that all save at the same step;
- rank 0 writes the checkpoint (with every rank's RNG states), the others wait at a barrier;
- after the notice's checkpoint every rank stops (exit 75: the agent reports the attempt
  interrupted), and a rank whose peer went exits 75 too;
- every rank resumes from the same checkpoint; rank 0 writes ``result.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import provisioner.job as job


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m examples.ddp_train", description=__doc__)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=16, help="per rank")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--step-seconds", type=float, default=0.0, help="extra time per step")
    p.add_argument("--checkpoint-every", type=int, default=0, help="steps; 0 = on request only")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from examples.torch_train import build
    from provisioner.job import dist
    from provisioner.job.torch import ResumableLoader, params_sha256

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    rank, world = dist.init("gloo")
    build_args = argparse.Namespace(
        seed=args.seed,
        samples=1024,
        features=16,
        hidden=args.hidden,
        layers=args.layers,
        optimizer="adamw",
        steps=args.steps,
    )
    net, opt, sched, data = build(build_args)
    model = DistributedDataParallel(net) if world > 1 else net
    loader = ResumableLoader(data, batch_size=args.batch, seed=args.seed, drop_last=True)
    ck = dist.Checkpointer(model, opt, sched, loader=loader)
    loss_fn = torch.nn.MSELoss()
    with job.watch(), dist.peers_or_exit():
        step = ck.load()  # every rank, the same checkpoint
        print(f"rank {rank}/{world}: {f'resumed at step {step}' if step else 'fresh start'}")
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
                if args.checkpoint_every and step % args.checkpoint_every == 0:
                    saved = bool(ck.save(step))  # every rank reaches the same step
                else:
                    saved = ck.maybe_save(step)
                if saved and rank == 0:
                    print(f"checkpoint {job.checkpoint_name(step)}", flush=True)
                if saved and dist.any_rank(job.interrupted()):
                    print(f"rank {rank}: notice served, stopping at step {step}", flush=True)
                    return job.EXIT_INTERRUPTED
                if rank == 0 and (step % 10 == 0 or step == args.steps):
                    job.report_progress(step, args.steps, loss=loss.item())
                if step >= args.steps:
                    break
            else:
                ck.epoch += 1
        dist.barrier()
    if rank == 0:
        result = {
            "steps": step,
            "world_size": world,
            "final_loss": loss.item(),
            "params_sha256": params_sha256(ck.model),
        }
        (job.output_dir() / "result.json").write_text(json.dumps(result, indent=2, sort_keys=True))
        print(f"done: {json.dumps(result, sort_keys=True)}", flush=True)
    if dist.running():
        # Every collective is done and the result is written: end the process without torch's
        # process-group teardown, which can hang at exit when the ranks reach it at different
        # moments (seen here under load, rank 0 done and never exiting; pytorch/pytorch#75097).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
