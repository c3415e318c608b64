"""PyTorch Lightning: save at the next batch boundary after a notice, resume with ``ckpt_path``
(``pip install 'provisioner[lightning]'``; Lightning is imported when these are used).

    import provisioner.job as job
    from provisioner.job.lightning import ProvisionerCheckpoint, ckpt_path
    from provisioner.job.torch import ResumableLoader   # the train_dataloader's loader

    trainer = L.Trainer(..., callbacks=[ProvisionerCheckpoint()])
    trainer.fit(model, ckpt_path=ckpt_path())           # None: a fresh start
    if job.interrupted():
        sys.exit(job.EXIT_INTERRUPTED)                  # stopped for the notice

The callback catches the agent's signal (a flag: Lightning's own SIGUSR1 handling is for SLURM
requeue and saves inside the handler), and at the end of the next training batch it calls
``trainer.save_checkpoint`` into a staging directory that :mod:`provisioner.job` renames and
commits (the agent uploads it at once); every rank takes part, rank 0 writes. Its own state in
the checkpoint is every RNG's (restored when training starts again), and a
:class:`~provisioner.job.torch.ResumableLoader` is saved and restored by Lightning itself (a
stateful loader), so the resumed run draws the same batches. After the notice's checkpoint
it stops the trainer (``stop_on_notice``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import provisioner.job as job

FILENAME = "model.ckpt"


def ckpt_path(filename: str = FILENAME) -> str | None:
    """What to give ``Trainer.fit(ckpt_path=...)``: the checkpoint to resume from, or None."""
    where = job.resume_dir()
    if where is None or not (where / filename).is_file():
        return None
    return str(where / filename)


def _lightning() -> Any:
    try:
        import lightning.pytorch

        return lightning.pytorch
    except ImportError:  # the standalone package
        import pytorch_lightning

        return pytorch_lightning


def _build() -> type:
    pl = _lightning()
    base: Any = pl.Callback

    class ProvisionerCheckpoint(base):
        """Checkpoints when the agent asks (its signal, the notice file), every
        ``every_n_steps`` optimizer steps, or when ``every`` (a :class:`provisioner.job.Interval`)
        is due; always at a batch boundary."""

        def __init__(
            self,
            *,
            every_n_steps: int = 0,
            every: job.Interval | None = None,
            stop_on_notice: bool = True,
            filename: str = FILENAME,
        ) -> None:
            super().__init__()
            self.every_n_steps, self.every = every_n_steps, every
            self.stop_on_notice, self.filename = stop_on_notice, filename
            self._rng: dict[str, Any] | None = None
            self._installed = False

        @property
        def state_key(self) -> str:
            return "ProvisionerCheckpoint"

        def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
            if not job.handling():  # else someone else's (a job.watch() block) to restore
                self._installed = job.install()

        def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
            if self._installed:
                job.restore()
                self._installed = False

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            # after Lightning made the loaders' iterators: what it drew is not in the state
            if self._rng is not None:
                from provisioner.job.torch import set_rng_state

                set_rng_state(self._rng)
                self._rng = None

        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
        ) -> None:
            step = int(trainer.global_step)
            want = job.checkpoint_requested()
            want = want or bool(self.every_n_steps and step % self.every_n_steps == 0)
            want = want or (self.every is not None and self.every.due())
            if trainer.world_size > 1:  # any rank's request is every rank's, at this batch
                want = trainer.strategy.reduce_boolean_decision(want, all=False)
            if not want:
                return
            self.save(trainer, step)
            if self.stop_on_notice and job.interrupted():
                trainer.should_stop = True

        def save(self, trainer: Any, step: int) -> None:
            """Every rank calls ``trainer.save_checkpoint`` (a collective); rank 0 writes."""
            if trainer.is_global_zero:
                with job.saving(step) as tmp:
                    trainer.save_checkpoint(str(tmp / self.filename))
            else:
                trainer.save_checkpoint(str(Path(job.checkpoint_dir()) / ".unused"))
                job.answered()

        def state_dict(self) -> dict[str, Any]:
            from provisioner.job.torch import rng_state

            return {"rng": rng_state()}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            self._rng = state_dict.get("rng")

    return ProvisionerCheckpoint


_classes: dict[str, type] = {}


def __getattr__(name: str) -> Any:  # ProvisionerCheckpoint: made on first use
    if name != "ProvisionerCheckpoint":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _classes:
        _classes[name] = _build()
    return _classes[name]
