"""A Lightning module that checkpoints on the interruption notice and resumes bit-identical:
``python -m examples.lightning_train --steps 200``.

The same MLP with dropout and seeded regression set as ``examples/torch_train.py``, as a
``LightningModule`` (AdamW and a cosine schedule stepped per batch) trained by a CPU
``Trainer``. ``provisioner.job.lightning.ProvisionerCheckpoint`` saves at the end of the batch
after the agent's signal or notice (and every ``--checkpoint-every`` steps) and stops the
trainer after the notice's checkpoint; ``ckpt_path()`` hands ``Trainer.fit`` the checkpoint to
resume from; the train loader is a ``provisioner.job.torch.ResumableLoader``, whose position
Lightning saves and restores. ``result.json`` in ``$PROVISIONER_OUTPUT_DIR`` has the
parameters' SHA-256.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from typing import Any

import provisioner.job as job


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m examples.lightning_train", description=__doc__)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw")
    p.add_argument("--step-seconds", type=float, default=0.0, help="extra time per step")
    p.add_argument("--checkpoint-every", type=int, default=0, help="steps; 0 = on request only")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import lightning.pytorch as pl
    import torch

    from examples.torch_train import build
    from provisioner.job.lightning import ProvisionerCheckpoint, ckpt_path
    from provisioner.job.torch import ResumableLoader, params_sha256

    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    torch.set_num_threads(1)
    build_args = argparse.Namespace(
        seed=args.seed,
        samples=1024,
        features=16,
        hidden=args.hidden,
        layers=args.layers,
        optimizer=args.optimizer,
        steps=args.steps,
    )
    net, _, _, data = build(build_args)

    class Regression(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("loss", loss, prog_bar=False, logger=False)
            if args.step_seconds:
                time.sleep(args.step_seconds)
            step = self.trainer.global_step + 1
            if step % 10 == 0 or step == args.steps:
                job.report_progress(step, args.steps, loss=loss.item())
            return loss

        def configure_optimizers(self) -> Any:
            if args.optimizer == "adamw":
                opt: torch.optim.Optimizer = torch.optim.AdamW(self.parameters(), lr=1e-3)
            else:
                opt = torch.optim.SGD(self.parameters(), lr=1e-3)
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

        def train_dataloader(self) -> Any:
            return ResumableLoader(data, batch_size=args.batch, seed=args.seed, drop_last=True)

    model = Regression()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=args.steps,
        max_epochs=-1,
        deterministic=True,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,
        callbacks=[ProvisionerCheckpoint(every_n_steps=args.checkpoint_every)],
    )
    resume = ckpt_path()
    print(f"resuming from {resume}" if resume else "fresh start", flush=True)
    trainer.fit(model, ckpt_path=resume)
    if job.interrupted():
        print("notice served: stopping here", flush=True)
        return job.EXIT_INTERRUPTED
    result = {"steps": int(trainer.global_step), "params_sha256": params_sha256(model.net)}
    (job.output_dir() / "result.json").write_text(json.dumps(result, indent=2, sort_keys=True))
    print(f"done: {json.dumps(result, sort_keys=True)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
