"""``python -m provisioner.job.torchrun [torchrun's arguments]``: torchrun, with the agent's
checkpoint signal passed on to every worker (the standard library only; torch runs in the
child).

The agent signals the job's own process. With torchrun as the job that is the launcher, and
neither of torchrun's ways reaches the workers usefully (torch 2.13):

- ``--signals-to-handle`` (default ``SIGTERM,SIGINT,SIGHUP,SIGQUIT``; its environment twin is
  ``PET_SIGNALS_TO_HANDLE``) makes torchrun raise ``SignalException`` on the signal, pass it
  to each worker and shut them all down, killing them ``--shutdown-timeout`` (30 s) later: a
  worker that got SIGUSR1 there cannot save and carry on, and a periodic request would end
  the job. ``TORCHELASTIC_SIGNALS_TO_HANDLE`` is what torch's process contexts read, but the
  torchrun launcher overwrites it with that argument's value before it starts them;
- a signal to torchrun's process group does not reach the workers either: torchrun starts each
  one with ``start_new_session=True``, in a session of its own.

So this wrapper starts torchrun (with ``PR_SET_PDEATHSIG``, and with the checkpoint signal
ignored, which torchrun keeps: it installs no handler for it) and, on the checkpoint signal,
sends it to each of torchrun's children, the workers, which catch it with
:func:`provisioner.job.install` and save at their next step, agreeing on the step through
:mod:`provisioner.job.dist`. SIGTERM and SIGINT go to torchrun (its own shutdown). The exit
code is torchrun's, except that a failure while an interruption notice stands is reported as
75 (interrupted), since torchrun reports any worker's non-zero exit as 1.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import provisioner.job as job


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux ``/proc``)."""
    found: list[int] = []
    task = Path(f"/proc/{pid}/task")
    with contextlib.suppress(OSError):
        for t in task.iterdir():
            with contextlib.suppress(OSError, ValueError):
                found += [int(p) for p in (t / "children").read_text().split()]
        if found:
            return sorted(set(found))
    for entry in Path("/proc").iterdir():  # without CONFIG_PROC_CHILDREN: every stat
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return sorted(found)


def _preexec(ignored: int) -> Callable[[], None]:
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        prctl = None

    def preexec() -> None:
        signal.signal(ignored, signal.SIG_IGN)  # torchrun keeps it ignored; we relay it
        if prctl is not None:
            prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG: never outlive us

    return preexec


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    signum = job.checkpoint_signal()
    proc = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", *args], preexec_fn=_preexec(signum)
    )

    def relay(sig: int, _frame: object) -> None:
        for pid in children(proc.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def stop(sig: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)

    signal.signal(signum, relay)
    for sig in (signal.SIGTERM, signal.SIGINT):
        if sig != signum:
            signal.signal(sig, stop)
    rc = proc.wait()
    if rc != 0 and job.notice() is not None:
        return job.EXIT_INTERRUPTED
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
