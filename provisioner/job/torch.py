"""PyTorch: save and load all that a bit-identical resume needs (``pip install
'provisioner[torch]'``; torch is imported when these are used, not when this module is).

    import provisioner.job as job
    from provisioner.job.torch import Checkpointer, ResumableLoader

    loader = ResumableLoader(dataset, batch_size=32, seed=0)   # a DataLoader
    ck = Checkpointer(model, optimizer, scheduler, loader=loader)
    with job.watch():
        step = ck.load()                       # 0 on a fresh start
        while step < total:
            loader.set_epoch(ck.epoch)
            for x, y in loader:
                train_step(x, y)
                step += 1
                if ck.maybe_save(step) and job.interrupted():
                    sys.exit(job.EXIT_INTERRUPTED)
                ...
            ck.epoch += 1

A checkpoint holds the model, the optimizer, the scheduler, the random number generators
(Python's, numpy's, torch's, every CUDA device's) and the data position (epoch, batches done
in it): a run resumed from it draws the same batches, the same dropout masks and ends with the
same bits as a run never interrupted (on the CPU; on GPUs, with deterministic kernels). The
loader shuffles with its own generator, reseeded each epoch, so creating its iterator never
draws from torch's global generator (which the checkpoint restores).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import provisioner.job as job

if TYPE_CHECKING:
    import torch

STATE_FILE = "state.pt"


def rng_state() -> dict[str, Any]:
    """Every random number generator's state, as plain values and tensors (loadable with
    ``torch.load(weights_only=True)``)."""
    import torch

    state: dict[str, Any] = {"python": _plain(random.getstate()), "torch": torch.get_rng_state()}
    try:
        import numpy as np
    except ImportError:
        pass
    else:
        legacy: Any = np.random.get_state(legacy=True)
        kind, keys, pos, has_gauss, gauss = legacy
        state["numpy"] = [kind, torch.from_numpy(keys.astype("int64")), pos, has_gauss, gauss]
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Put back what :func:`rng_state` saved."""
    import torch

    random.setstate(_tuple(state["python"]))
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy as np

        kind, keys, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((kind, keys.numpy().astype("uint32"), pos, has_gauss, gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _plain(value: Any) -> Any:
    return [_plain(v) for v in value] if isinstance(value, tuple | list) else value


def _tuple(value: Any) -> Any:
    return tuple(_tuple(v) for v in value) if isinstance(value, list) else value


def params_sha256(model: torch.nn.Module) -> str:
    """SHA-256 of the model's tensors' bytes, in ``state_dict`` order: equal for equal bits."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _build() -> dict[str, type]:
    """The two classes below, on torch's base classes (imported only now)."""
    import os

    import torch
    from torch.utils.data import DataLoader, Sampler

    sampler_base: Any = Sampler  # Any: the overrides below need no torch typing
    loader_base: Any = DataLoader

    class ResumableSampler(sampler_base):
        """Indices of one epoch, shuffled by ``(seed, epoch)``, this rank's share (rows
        ``rank, rank + world_size, ...``), from ``skip`` on."""

        def __init__(
            self, n: int, *, shuffle: bool = True, seed: int = 0, rank: int = 0, world_size: int = 1
        ) -> None:
            self.n, self.shuffle, self.seed = n, shuffle, seed
            self.rank, self.world_size = rank, world_size
            self.epoch, self.skip = 0, 0

        def set_epoch(self, epoch: int) -> None:
            self.epoch = epoch

        def indices(self) -> list[int]:
            if self.shuffle:
                g = torch.Generator()
                g.manual_seed(self.seed * 1_000_003 + self.epoch)
                order: list[int] = torch.randperm(self.n, generator=g).tolist()
            else:
                order = list(range(self.n))
            return order[self.rank : self.n - self.n % self.world_size : self.world_size]

        def __iter__(self) -> Iterator[int]:
            return iter(self.indices()[self.skip :])

        def __len__(self) -> int:
            return self.n // self.world_size

    class ResumableLoader(loader_base):
        """A :class:`torch.utils.data.DataLoader` that knows where it is: its epoch and the
        batches it handed out in it (``state_dict``/``load_state_dict``, which Lightning
        saves and restores too). ``world_size``/``rank`` split each epoch over the ranks
        (defaults: ``$WORLD_SIZE``/``$RANK``, as torchrun sets them)."""

        def __init__(
            self,
            dataset: Any,
            batch_size: int = 1,
            *,
            shuffle: bool = True,
            seed: int = 0,
            rank: int | None = None,
            world_size: int | None = None,
            **kwargs: Any,
        ) -> None:
            rank = int(os.environ.get("RANK", "0")) if rank is None else rank
            world = int(os.environ.get("WORLD_SIZE", "1")) if world_size is None else world_size
            sampler = ResumableSampler(
                len(dataset), shuffle=shuffle, seed=seed, rank=rank, world_size=world
            )
            super().__init__(
                dataset,
                batch_size=batch_size,
                sampler=sampler,
                generator=torch.Generator(),
                **kwargs,
            )
            self.seed = seed
            self.batches = 0  # handed out in the current epoch
            self._resume_at = 0  # batches to skip, in epoch _resume_epoch only
            self._resume_epoch = 0

        @property
        def epoch(self) -> int:
            return int(self.sampler.epoch)

        def set_epoch(self, epoch: int) -> None:
            self.sampler.set_epoch(epoch)

        def __iter__(self) -> Iterator[Any]:
            # workers' seeds come from this generator: the same per epoch, resumed or not
            self.generator.manual_seed(self.seed * 1_000_003 + self.epoch)
            # A state saved after an epoch's last batch: Lightning counts that epoch done and
            # starts the next one (set_epoch first); its batches must not be skipped.
            skip = self._resume_at if self.epoch == self._resume_epoch else 0
            self._resume_at = 0
            self.sampler.skip = skip * (self.batch_size or 1)
            self.batches = skip
            try:
                for batch in super().__iter__():
                    self.batches += 1
                    yield batch
            finally:
                self.sampler.skip = 0

        def state_dict(self) -> dict[str, int]:
            return {"epoch": self.epoch, "batches": self.batches}

        def load_state_dict(self, state: dict[str, int]) -> None:
            self.set_epoch(int(state["epoch"]))
            self._resume_epoch = int(state["epoch"])
            self._resume_at = int(state["batches"])
            self.batches = self._resume_at

    return {"ResumableSampler": ResumableSampler, "ResumableLoader": ResumableLoader}


_classes: dict[str, type] = {}


def __getattr__(name: str) -> Any:  # ResumableLoader, ResumableSampler: made on first use
    if name not in ("ResumableLoader", "ResumableSampler"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not _classes:
        _classes.update(_build())
    return _classes[name]


class Checkpointer:
    """Saves and loads a training run's state through :mod:`provisioner.job` (atomic, then
    committed for the agent). ``extra`` objects with ``state_dict``/``load_state_dict`` (an
    EMA, a grad scaler) are saved too."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: Any = None,
        scheduler: Any = None,
        *,
        loader: Any = None,
        extra: dict[str, Any] | None = None,
        every: job.Interval | None = None,
    ) -> None:
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.loader, self.extra, self.every = loader, dict(extra or {}), every
        self.epoch = 0
        self.step = 0

    def state(self, step: int) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "step": step,
            "epoch": self.loader.epoch if self.loader is not None else self.epoch,
            "model": self.model.state_dict(),
            "rng": rng_state(),
        }
        if self.optimizer is not None:
            doc["optimizer"] = self.optimizer.state_dict()
        if self.scheduler is not None:
            doc["scheduler"] = self.scheduler.state_dict()
        if self.loader is not None:
            doc["loader"] = self.loader.state_dict()
        doc["extra"] = {k: v.state_dict() for k, v in self.extra.items()}
        return doc

    def save(self, step: int) -> Path:
        """Write the checkpoint of ``step`` and commit it; its directory."""
        with job.saving(step) as tmp:
            self.write(tmp, self.state(step))
        self.step = step
        return job.checkpoint_dir() / job.checkpoint_name(step)

    def write(self, directory: Path, state: dict[str, Any]) -> None:
        """Write ``state`` into the staging ``directory`` (override to add files)."""
        import torch

        torch.save(state, directory / STATE_FILE)

    def maybe_save(self, step: int) -> bool:
        """Save if the agent asked (signal or notice) or the interval is due; True if saved.
        Call it at each step boundary."""
        if not (job.checkpoint_requested() or (self.every is not None and self.every.due())):
            return False
        self.save(step)
        return True

    def load(self, path: str | Path | None = None, *, map_location: str = "cpu") -> int:
        """Load ``path`` (default :func:`provisioner.job.resume_dir`); the step to go on from
        (0: nothing to resume)."""
        import torch

        where = Path(path) if path is not None else job.resume_dir()
        if where is None:
            return 0
        doc = torch.load(where / STATE_FILE, map_location=map_location, weights_only=True)
        self.model.load_state_dict(doc["model"])
        if self.optimizer is not None and "optimizer" in doc:
            self.optimizer.load_state_dict(doc["optimizer"])
        if self.scheduler is not None and "scheduler" in doc:
            self.scheduler.load_state_dict(doc["scheduler"])
        if self.loader is not None and "loader" in doc:
            self.loader.load_state_dict(doc["loader"])
        for key, obj in self.extra.items():
            if key in doc.get("extra", {}):
                obj.load_state_dict(doc["extra"][key])
        self.epoch = int(doc.get("epoch", 0))
        self.restore_rng(doc)
        self.step = int(doc["step"])
        return self.step

    def restore_rng(self, doc: dict[str, Any]) -> None:
        """Put back the generators' states (last, once nothing else will draw)."""
        set_rng_state(doc["rng"])
