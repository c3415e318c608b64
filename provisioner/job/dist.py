"""torch.distributed (DDP, torchrun, a gang): every rank checkpoints at the same step, rank 0
writes, every rank resumes from the same checkpoint (torch is imported when these are used).

    import provisioner.job as job
    from provisioner.job import dist

    rank, world = dist.init("gloo")                   # from torchrun's (or the agent's) env
    ck = dist.Checkpointer(model, optimizer, scheduler, loader=loader)   # model: the DDP
    with job.watch(), dist.peers_or_exit():           # a peer gone: exit 75
        step = ck.load()                              # every rank, the same checkpoint
        ...
        if ck.maybe_save(step) and dist.any_rank(job.interrupted()):
            sys.exit(job.EXIT_INTERRUPTED)            # every rank stops at this step

The ranks agree before they save (:func:`any_rank`: one all-reduce of a flag), because the
notice or the signal reaches them at different moments: any rank's request is every rank's,
at the same step. Rank 0 gathers every rank's RNG states and writes the checkpoint; the others
wait at a barrier. Each rank restores its own RNG states from it.

How the notice reaches every process: the agent writes ``$PROVISIONER_NOTICE_FILE`` before it
signals the job, and every process (torchrun's workers inherit the environment) sees it at its
next step through :func:`provisioner.job.checkpoint_requested`. The signal itself reaches only
the job's own process: under torchrun, wrap it (``python -m provisioner.job.torchrun``) so that
the signal is passed to each worker (docs/frameworks.md says why torchrun's own forwarding does
not do).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

import provisioner.job as job
from provisioner.job.torch import Checkpointer as _Checkpointer
from provisioner.job.torch import rng_state, set_rng_state


def _dist() -> Any:
    import torch.distributed as d

    return d


def running() -> bool:
    """Whether a torch.distributed process group of more than one rank is up."""
    d = _dist()
    return bool(d.is_available() and d.is_initialized() and d.get_world_size() > 1)


def init(backend: str = "gloo") -> tuple[int, int]:
    """The default process group from ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
    ``MASTER_PORT`` (torchrun's, or a gang's agent's); (rank, world size). A worker started
    by torchrun is also made to die with it (``PR_SET_PDEATHSIG``): torchrun starts each
    worker in its own session, out of reach of a signal to the launcher's process group."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if os.environ.get("TORCHELASTIC_RUN_ID"):
        _die_with_parent()
    if world > 1:
        _dist().init_process_group(backend, init_method="env://", rank=rank, world_size=world)
    return rank, world


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)


def any_rank(flag: bool) -> bool:
    """``flag`` from any rank, on every rank (one all-reduce); ``flag`` itself alone."""
    if not running():
        return flag
    import torch

    d = _dist()
    device = "cuda" if d.get_backend() == "nccl" else "cpu"
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    d.all_reduce(t, op=d.ReduceOp.MAX)
    return bool(t.item())


def is_rank0() -> bool:
    return not running() or _dist().get_rank() == 0


def barrier() -> None:
    if running():
        _dist().barrier()


class Checkpointer(_Checkpointer):
    """:class:`provisioner.job.torch.Checkpointer` for every rank: ``maybe_save`` decides with
    the other ranks, rank 0 writes (every rank's RNG states in it), the others wait; ``load``
    on every rank. Give it the DDP-wrapped model or the module inside: the same keys are
    saved (the module's)."""

    def __init__(self, model: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(getattr(model, "module", model), *args, **kwargs)

    def state(self, step: int) -> dict[str, Any]:
        ranks: list[Any] = [rng_state()]
        if running():  # a collective: every rank is here
            d = _dist()
            ranks = [None] * d.get_world_size()
            d.all_gather_object(ranks, rng_state())
        doc = super().state(step) if is_rank0() else {}
        doc["rng_ranks"] = ranks
        return doc

    def save(self, step: int) -> Any:
        doc = self.state(step)
        if is_rank0():
            with job.saving(step) as tmp:
                self.write(tmp, doc)
        else:
            job.answered()
        barrier()  # the others wait until rank 0's checkpoint is committed
        self.step = step
        return job.checkpoint_dir() / job.checkpoint_name(step)

    def maybe_save(self, step: int) -> bool:
        want = job.checkpoint_requested() or (self.every is not None and self.every.due())
        if not any_rank(want):
            return False
        self.save(step)
        return True

    def restore_rng(self, doc: dict[str, Any]) -> None:
        ranks = doc.get("rng_ranks") or []
        if running() and len(ranks) == _dist().get_world_size():
            set_rng_state(ranks[_dist().get_rank()])  # this rank's own generators
        else:
            super().restore_rng(doc)


#: What a collective's error says when the other end went (gloo raises a bare RuntimeError).
_PEER_GONE = ("connection", "gloo", "nccl", "socket", "broken pipe", "timed out", "timeout")


def peer_gone(exc: BaseException) -> bool:
    """Whether ``exc`` from a collective means a peer went (not a bug in the job)."""
    d = _dist()
    if isinstance(exc, getattr(d, "DistError", ())):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(w in text for w in _PEER_GONE)


@contextlib.contextmanager
def peers_or_exit(code: int = job.EXIT_INTERRUPTED) -> Iterator[None]:
    """A collective that fails because a peer went (its node was preempted) ends this process
    with ``code`` (75): the agent reports the attempt interrupted and the gang is restarted
    from rank 0's checkpoint, instead of a failure."""
    try:
        yield
    except Exception as exc:
        if not (running() and peer_gone(exc)):
            raise
        print(f"a peer went ({str(exc).splitlines()[0][:200]}); exiting {code}", flush=True)
        sys.stderr.flush()
        os._exit(code)  # no teardown: the process group's would wait for the peer
