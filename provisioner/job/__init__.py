"""The job's side, for training code: when to checkpoint, where, and what to resume from.

The node agent (docs/agent.md) starts the job with its checkpoint directory, the checkpoint
to resume from and a signal that asks for a checkpoint; on a spot interruption notice it also
writes the notice (with the time the capacity goes) to ``$PROVISIONER_NOTICE_FILE``. This
module turns that into a few calls, with the standard library only (``import provisioner.job``
loads no numpy and no framework; the integrations are ``provisioner.job.torch``,
``.lightning``, ``.hf``, ``.dist``, each importing its framework when used)::

    import provisioner.job as job

    with job.watch():                           # the signal sets a flag; handlers restored
        step = load(job.resume_dir())           # None: a fresh start
        while step < total:
            step = train_one_step()
            if job.checkpoint_requested():      # a notice or the agent's signal
                with job.saving(step) as tmp:   # a staging directory
                    write_everything(tmp)       # renamed and committed on exit: the agent
                if job.interrupted():           # uploads it at once
                    sys.exit(job.EXIT_INTERRUPTED)   # the capacity goes: stop here
            job.report_progress(step, total)

Nothing happens inside the signal handler but setting a flag: the save runs at the next step
boundary, in the training loop, where the state is consistent (a save inside a handler can
deadlock on a lock the interrupted code holds).

A checkpoint is complete once ``latest`` names it (written atomically after the files, which
are fsynced in a staging directory that is then renamed): a save killed half-way leaves a
``.ckpt-*.partial-*`` directory that nothing resumes from, and the next save removes it.

Timing: each save's duration is measured (and kept in the checkpoint, so a resumed run knows
it); a save that starts under a notice whose deadline is nearer than the last save's duration
writes ``checkpoint_warning`` to the progress file, which the controller records as a
``checkpoint-warning`` event. :func:`young_daly_interval` and :class:`Interval` set the
periodic interval from the expected interruption rate (docs/frameworks.md).

Outside the agent (no environment) everything still works: checkpoints go to
``./checkpoints``, the notice never comes, progress is not written.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from provisioner.job._state import state as _state
from provisioner.job.timing import Interval, young_daly_interval

# The protocol's names (provisioner.agent.protocol has the same; tests/job/test_job_api.py keeps
# them equal). Repeated here so that the job imports nothing of the agent.
ENV_JOB_ID = "PROVISIONER_JOB_ID"
ENV_ATTEMPT = "PROVISIONER_ATTEMPT"
ENV_CHECKPOINT_DIR = "PROVISIONER_CHECKPOINT_DIR"
ENV_RESUME_FROM = "PROVISIONER_RESUME_FROM"
ENV_SIGNAL = "PROVISIONER_CHECKPOINT_SIGNAL"
ENV_OUTPUT_DIR = "PROVISIONER_OUTPUT_DIR"
ENV_PROGRESS_FILE = "PROVISIONER_PROGRESS_FILE"
ENV_NOTICE_FILE = "PROVISIONER_NOTICE_FILE"
LATEST = "latest"
#: Written into each checkpoint by :func:`saving`: its step and how long the save took.
META = "provisioner-checkpoint.json"
#: The exit code of a job that stopped after its notice checkpoint (EX_TEMPFAIL): the agent
#: reports the attempt interrupted, and the controller resumes it elsewhere.
EXIT_INTERRUPTED = 75
#: Seconds kept for the agent's upload when weighing a save against the notice's deadline.
UPLOAD_MARGIN_S = 1.0

__all__ = [
    "EXIT_INTERRUPTED",
    "Interval",
    "adopt",
    "answered",
    "checkpoint_dir",
    "checkpoint_name",
    "checkpoint_requested",
    "checkpoint_signal",
    "deadline",
    "handling",
    "install",
    "interrupted",
    "last_save_seconds",
    "notice",
    "output_dir",
    "report_progress",
    "restore",
    "resume_dir",
    "save_done",
    "saving",
    "seconds_left",
    "warn",
    "warn_if_late",
    "watch",
    "young_daly_interval",
]


def _reset_for_tests() -> None:
    restore(force=True)
    _state.reset()


# -- where things are ------------------------------------------------------------------------


def checkpoint_dir() -> Path:
    """``$PROVISIONER_CHECKPOINT_DIR`` (``./checkpoints`` outside the agent), created."""
    path = Path(os.environ.get(ENV_CHECKPOINT_DIR) or "checkpoints")
    path.mkdir(parents=True, exist_ok=True)
    return path


def output_dir() -> Path:
    """``$PROVISIONER_OUTPUT_DIR`` (``./output``), created: the result goes here (uploaded when
    the job exits 0)."""
    path = Path(os.environ.get(ENV_OUTPUT_DIR) or "output")
    path.mkdir(parents=True, exist_ok=True)
    return path


def checkpoint_name(step: int) -> str:
    return f"ckpt-{step:09d}"


def _read_latest(directory: Path) -> str | None:
    try:
        name = (directory / LATEST).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return name if name and (directory / name).is_dir() else None


def resume_dir() -> Path | None:
    """The checkpoint to resume from: ``$PROVISIONER_RESUME_FROM`` (the agent fetched it from
    the store), else the one ``latest`` names in the checkpoint directory (a restart on the
    same machine), else None (a fresh start). Never a partial one."""
    given = os.environ.get(ENV_RESUME_FROM) or ""
    if given and Path(given).is_dir():
        path = Path(given)
    else:
        directory = Path(os.environ.get(ENV_CHECKPOINT_DIR) or "checkpoints")
        name = _read_latest(directory)
        if name is None:
            return None
        path = directory / name
    meta = _read_json(path / META)
    if isinstance(meta.get("save_s"), int | float) and _state.last_save_s is None:
        _state.last_save_s = float(meta["save_s"])  # how long a save takes: known at once
    return path


# -- the signal ------------------------------------------------------------------------------


def checkpoint_signal() -> int:
    """The signal that asks for a checkpoint (``$PROVISIONER_CHECKPOINT_SIGNAL``, SIGUSR1)."""
    name = (os.environ.get(ENV_SIGNAL) or "SIGUSR1").upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    return int(getattr(signal, name, signal.SIGUSR1))


def _handler(signum: int, frame: FrameType | None) -> None:
    _state.requested = True  # only this: the save happens in the training loop


def install() -> bool:
    """Catch the checkpoint signal: it sets the flag :func:`checkpoint_requested` reads. True
    when installed (or already); False off the main thread (Python's rule), where the notice
    file still works."""
    if _state.signum is not None:
        return True
    if threading.current_thread() is not threading.main_thread():
        return False
    signum = checkpoint_signal()
    _state.previous = signal.signal(signum, _handler)
    _state.signum = signum
    return True


def handling() -> bool:
    """Whether :func:`install` has caught the checkpoint signal (and not restored it)."""
    return _state.signum is not None


def restore(force: bool = False) -> None:
    """Put back the handler :func:`install` replaced (only if ours is still the one set)."""
    signum = _state.signum
    if signum is None:
        return
    with contextlib.suppress(ValueError, TypeError):  # off the main thread
        if force or signal.getsignal(signum) is _handler:
            previous = _state.previous
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
    _state.signum, _state.previous = None, None


@contextlib.contextmanager
def watch() -> Iterator[None]:
    """``with watch():`` the checkpoint signal is caught for the block; the handler before it
    is restored after (nested blocks restore once, at the outermost)."""
    install()
    _state.depth += 1
    try:
        yield
    finally:
        _state.depth -= 1
        if _state.depth == 0:
            restore()


# -- the notice ------------------------------------------------------------------------------


def _read_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def notice() -> dict[str, Any] | None:
    """The interruption notice the agent wrote (``{"seen_at", "deadline", "cloud",
    "reason"}``), or None: none yet, or no agent."""
    path = os.environ.get(ENV_NOTICE_FILE)
    if not path or not os.path.exists(path):
        return None
    doc = _read_json(Path(path))
    return doc or None


def _parse(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def deadline() -> datetime | None:
    """When the capacity goes (aware UTC), from the notice; None without one."""
    doc = notice()
    return _parse(doc.get("deadline")) if doc else None


def seconds_left(now: datetime | None = None) -> float | None:
    """Seconds until :func:`deadline` (negative once past); None without a notice."""
    d = deadline()
    return None if d is None else (d - (now or datetime.now(UTC))).total_seconds()


def _notice_key(doc: dict[str, Any] | None) -> str | None:
    return None if doc is None else f"{doc.get('seen_at')}|{doc.get('deadline')}"


def checkpoint_requested() -> bool:
    """A checkpoint is wanted now: the signal came since the last save, or a notice came
    that no save has answered yet. Cheap (a flag and one ``stat``): call it every step."""
    if _state.requested:
        return True
    key = _notice_key(notice())
    return key is not None and key != _state.served_notice


def interrupted() -> bool:
    """A checkpoint has answered the interruption notice: the job may stop (exit
    :data:`EXIT_INTERRUPTED`); the capacity is going."""
    key = _notice_key(notice())
    return key is not None and key == _state.served_notice


# -- saving ----------------------------------------------------------------------------------


def last_save_seconds() -> float | None:
    """How long the last complete save took (this process's, or the one resumed from)."""
    return _state.last_save_s


def _fsync_tree(root: Path) -> None:
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as fh:
                os.fsync(fh.fileno())
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be opened
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def warn_if_late(step: int) -> bool:
    """Before a save under a notice: will it finish before the capacity goes? If the last
    save took longer than what is left, say so (:func:`warn`: the progress file, which the
    controller records as a ``checkpoint-warning`` event, and stderr), once per notice; True
    then. :func:`saving` calls it."""
    doc = notice()
    left = seconds_left()
    last = _state.last_save_s
    key = _notice_key(doc)
    if left is None or last is None or last <= left - UPLOAD_MARGIN_S:
        return False
    if key == _state.warned_for:
        return True
    _state.warned_for = key
    warn(
        f"the checkpoint of step {step} may not finish before the capacity goes: the last save "
        f"took {last:.1f} s and {max(left, 0.0):.1f} s are left"
    )
    return True


@contextlib.contextmanager
def saving(step: int, *, keep: int = 3) -> Iterator[Path]:
    """``with saving(step) as tmp:`` write the checkpoint's files into ``tmp``; on leaving the
    block they are fsynced, ``tmp`` is renamed ``ckpt-<step>`` and committed (:func:`save_done`).
    An exception leaves nothing behind; a kill leaves a partial directory nobody resumes from."""
    directory = checkpoint_dir()
    warn_if_late(step)
    started = time.monotonic()
    # a hidden staging name: a kill mid-save leaves it, and nobody resumes from it (save_done
    # removes such leftovers); only a complete directory is renamed ckpt-<step> and committed
    staging = directory / f".{checkpoint_name(step)}.partial-{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    adopt(staging, step, keep=keep, save_s=time.monotonic() - started)


def adopt(
    path: str | os.PathLike[str], step: int, *, keep: int = 3, save_s: float | None = None
) -> Path:
    """A complete checkpoint a library wrote at ``path`` (on the checkpoint directory's
    filesystem: Hugging Face's ``checkpoint-<step>``, a staging directory): fsync its files,
    rename it ``ckpt-<step>`` in the checkpoint directory and commit it (:func:`save_done`).
    ``save_s``: how long the save took (for the deadline check of the next one)."""
    directory = checkpoint_dir()
    staging = Path(path)
    final = directory / checkpoint_name(step)
    try:
        meta: dict[str, Any] = {
            "step": step,
            "save_s": None if save_s is None else round(save_s, 3),
        }
        meta["saved_at"] = _now_iso()
        (staging / META).write_text(json.dumps(meta), encoding="utf-8")
        _fsync_tree(staging)
        trash = None
        if final.exists():  # the same step again: swap it
            trash = directory / f".{final.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(final, trash)
        os.replace(staging, final)
        _fsync_dir(directory)
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    save_done(final, keep=keep, save_s=save_s)
    return final


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def save_done(path: str | os.PathLike[str], *, keep: int = 3, save_s: float | None = None) -> str:
    """``path`` (a complete checkpoint directory in the checkpoint directory, its name ending
    with the step) is done: commit it (``latest``), so that the agent uploads it at once. The
    request it answers is cleared, old checkpoints beyond ``keep`` and partial ones removed."""
    final = Path(path)
    directory = checkpoint_dir()
    if final.parent.resolve() != directory.resolve() or not final.is_dir():
        raise ValueError(f"{final} is not a checkpoint directory in {directory}")
    doc = notice()  # before the commit: a notice that came during the save is answered by it
    _atomic_write(directory / LATEST, (final.name + "\n").encode())
    _state.requested = False
    if doc is not None:
        _state.served_notice = _notice_key(doc)
    if save_s is not None:
        _state.last_save_s = save_s
        _state.sticky["last_save_s"] = round(save_s, 3)
    _state.saves += 1
    for partial in directory.glob(".ckpt-*.partial-*"):  # left by a kill mid-save
        shutil.rmtree(partial, ignore_errors=True)
    if keep > 0:
        old = sorted(p.name for p in directory.glob("ckpt-*") if p.is_dir())
        for stale in old[:-keep]:
            if stale != final.name:
                shutil.rmtree(directory / stale, ignore_errors=True)
    if _state.step is not None:
        report_progress(_state.step, _state.total)
    return final.name


def answered() -> None:
    """The checkpoint another process writes answers the request (a gang's other ranks: rank 0
    saves for all): clear the flag and mark the notice answered, without saving."""
    _state.requested = False
    doc = notice()
    if doc is not None:
        _state.served_notice = _notice_key(doc)


# -- progress --------------------------------------------------------------------------------


def report_progress(step: int, total: int | None = None, **extra: Any) -> None:
    """Tell the agent where the job is (``$PROVISIONER_PROGRESS_FILE``, written atomically;
    without an agent, nothing). ``extra`` keys go into the progress record's ``job``."""
    _state.step, _state.total = step, total
    path = os.environ.get(ENV_PROGRESS_FILE)
    if not path:
        return
    doc: dict[str, Any] = {"step": step, **_state.sticky, **extra}
    if total is not None:
        doc["total_steps"] = total
    with contextlib.suppress(OSError):  # progress is best effort
        _atomic_write(Path(path), json.dumps(doc, sort_keys=True, default=str).encode())


def warn(message: str) -> None:
    """A ``checkpoint_warning`` in the progress file (the controller records it as an event,
    once per attempt) and on stderr."""
    _state.sticky["checkpoint_warning"] = message
    print(f"provisioner.job: warning: {message}", file=sys.stderr, flush=True)
    report_progress(_state.step or 0, _state.total)
