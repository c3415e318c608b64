"""A Hugging Face ``Trainer`` run that checkpoints on the interruption notice and resumes
bit-identical: ``python -m examples.hf_train --steps 120``.

A tiny GPT-2 built from a config (nothing is downloaded) learns a seeded synthetic token
sequence task on the CPU. ``provisioner.job.hf.ProvisionerCallback`` asks the Trainer to save
at the end of the step after the agent's signal or notice (its own checkpoint: model,
optimizer, scheduler, RNG states, trainer state), moves it into the checkpoint directory and
commits it; after the notice's checkpoint it stops training, and the script exits 75.
``resume_path()`` hands ``trainer.train(resume_from_checkpoint=...)`` the checkpoint to resume
from; the Trainer skips the batches the epoch already saw and restores its RNG states.
``result.json`` in ``$PROVISIONER_OUTPUT_DIR`` has the parameters' SHA-256.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import provisioner.job as job


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m examples.hf_train", description=__doc__)
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--samples", type=int, default=256)
    p.add_argument("--n-embd", type=int, default=32, help="the model's width")
    p.add_argument("--n-layer", type=int, default=2, help="its blocks")
    p.add_argument("--optim", default="adamw_torch", help="TrainingArguments.optim (sgd: no state)")
    p.add_argument("--step-seconds", type=float, default=0.0, help="extra time per step")
    p.add_argument("--checkpoint-every", type=int, default=0, help="steps; 0 = on request only")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ["HF_HUB_OFFLINE"] = "1"  # nothing from any hub: the model is built here
    import torch
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        Trainer,
        TrainerCallback,
        TrainingArguments,
        set_seed,
    )

    from provisioner.job.hf import ProvisionerCallback, hf_output_dir, resume_path
    from provisioner.job.torch import params_sha256

    torch.set_num_threads(1)
    set_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed + 1)
    start = torch.randint(0, 60, (args.samples, 1), generator=g)
    seqs = (start + torch.arange(16)) % 64  # each sequence counts up from a random token
    data = [{"input_ids": s, "labels": s.clone()} for s in seqs]
    config = GPT2Config(
        vocab_size=64,
        n_positions=16,
        n_embd=args.n_embd,
        n_layer=args.n_layer,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = GPT2LMHeadModel(config)

    class Report(TrainerCallback):
        def on_step_end(self, a: Any, state: Any, control: Any, **kw: Any) -> None:
            if args.step_seconds:
                time.sleep(args.step_seconds)
            if state.global_step % 10 == 0 or state.global_step == args.steps:
                job.report_progress(state.global_step, args.steps)

    targs = TrainingArguments(
        output_dir=hf_output_dir(),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch,
        learning_rate=1e-3,
        optim=args.optim,
        lr_scheduler_type="cosine",
        save_strategy="no",  # the callback saves: on request and every --checkpoint-every
        logging_strategy="no",
        report_to=[],
        seed=args.seed,
        full_determinism=True,
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    callback = ProvisionerCallback(every_n_steps=args.checkpoint_every)
    trainer = Trainer(model=model, args=targs, train_dataset=data, callbacks=[Report(), callback])
    resume = resume_path()
    print(f"resuming from {resume}" if resume else "fresh start", flush=True)
    trainer.train(resume_from_checkpoint=resume)
    if job.interrupted():
        print("notice served: stopping here", flush=True)
        return job.EXIT_INTERRUPTED
    result = {"steps": trainer.state.global_step, "params_sha256": params_sha256(model)}
    (job.output_dir() / "result.json").write_text(json.dumps(result, indent=2, sort_keys=True))
    print(f"done: {json.dumps(result, sort_keys=True)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
