"""Hugging Face: the ``Trainer`` saves on the notice and resumes from it; Accelerate's
``save_state``/``load_state`` go through the same atomic commit (``pip install
'provisioner[hf]'``; transformers and accelerate are imported when these are used).

    import provisioner.job as job
    from provisioner.job.hf import ProvisionerCallback, resume_path

    trainer = Trainer(model, args, train_dataset=data, callbacks=[ProvisionerCallback()])
    trainer.train(resume_from_checkpoint=resume_path())    # None: a fresh start
    if job.interrupted():
        sys.exit(job.EXIT_INTERRUPTED)

The callback catches the agent's signal (a flag) and, at the end of the next optimizer step
after it or after a notice, sets ``control.should_save``: the Trainer writes its own
checkpoint (model, optimizer, scheduler, RNG states, trainer state), and the callback moves
it into the checkpoint directory as ``ckpt-<step>`` and commits it (the agent uploads it at
once). After the notice's checkpoint it sets ``control.should_training_stop``. The Trainer
resumes from it with ``resume_from_checkpoint``, skipping the batches already seen in the
epoch and restoring its RNG states. Give ``TrainingArguments(output_dir=...)`` a directory on
the checkpoint directory's filesystem (``hf_output_dir()``) so that the move is a rename.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import provisioner.job as job


def resume_path() -> str | None:
    """What to give ``Trainer.train(resume_from_checkpoint=...)``, or None (a fresh start)."""
    where = job.resume_dir()
    return str(where) if where is not None else None


def hf_output_dir() -> str:
    """A working directory for the Trainer beside the checkpoints (same filesystem)."""
    path = job.checkpoint_dir() / ".hf"
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def _agree(want: bool) -> bool:
    """Any rank's request, for every rank (torch.distributed, when it runs)."""
    from provisioner.job.dist import any_rank

    return any_rank(want)


def _build() -> type:
    from transformers import TrainerCallback

    base: Any = TrainerCallback

    class ProvisionerCallback(base):
        """Sets ``should_save`` when the agent asks (its signal, the notice file), every
        ``every_n_steps`` steps, or when ``every`` (a :class:`provisioner.job.Interval`) is
        due; commits each checkpoint the Trainer writes; stops after the notice's."""

        def __init__(
            self,
            *,
            every_n_steps: int = 0,
            every: job.Interval | None = None,
            stop_on_notice: bool = True,
        ) -> None:
            self.every_n_steps, self.every = every_n_steps, every
            self.stop_on_notice = stop_on_notice
            self._installed = False
            self._started: float | None = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if not job.handling():
                self._installed = job.install()

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self._installed:
                job.restore()
                self._installed = False

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            step = int(state.global_step)
            want = job.checkpoint_requested()
            want = want or bool(self.every_n_steps and step % self.every_n_steps == 0)
            want = want or (self.every is not None and self.every.due())
            if _agree(want):
                job.warn_if_late(step)
                self._started = time.monotonic()
                control.should_save = True
            return control

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            step = int(state.global_step)
            written = Path(args.output_dir) / f"checkpoint-{step}"
            took = None if self._started is None else time.monotonic() - self._started
            self._started = None
            if state.is_world_process_zero and written.is_dir():
                job.adopt(written, step, save_s=took)
            else:
                job.answered()  # rank 0 wrote the gang's checkpoint
            if self.stop_on_notice and job.interrupted():
                control.should_training_stop = True
            return control

    return ProvisionerCallback


def save_state(accelerator: Any, step: int) -> Path:
    """``accelerator.save_state`` as a committed checkpoint of ``step`` (every local process
    calls it; the main one commits). Its directory."""
    directory = job.checkpoint_dir()
    staging = directory / f".{job.checkpoint_name(step)}.partial-accelerate"
    started = time.monotonic()
    if accelerator.is_main_process:
        job.warn_if_late(step)
        shutil.rmtree(staging, ignore_errors=True)  # what a kill left of the same step
    accelerator.wait_for_everyone()
    accelerator.save_state(output_dir=str(staging))
    accelerator.wait_for_everyone()
    final = directory / job.checkpoint_name(step)
    if accelerator.is_main_process:
        job.adopt(staging, step, save_s=time.monotonic() - started)
    else:
        job.answered()
    accelerator.wait_for_everyone()
    return final


def load_state(accelerator: Any) -> int:
    """``accelerator.load_state`` from the checkpoint to resume from; its step (0: none)."""
    where = job.resume_dir()
    if where is None:
        return 0
    accelerator.load_state(str(where))
    return int(where.name.rsplit("-", 1)[-1])


_classes: dict[str, type] = {}


def __getattr__(name: str) -> Any:  # ProvisionerCallback: made on first use
    if name != "ProvisionerCallback":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _classes:
        _classes[name] = _build()
    return _classes[name]
