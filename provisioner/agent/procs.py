"""How the agent starts its children (the job, setup, the container engine's client)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable


def child_preexec(checkpoint_signal: int | None = None) -> Callable[[], None]:
    """What runs in a child before exec.

    - Die when the agent dies (``PR_SET_PDEATHSIG``, Linux): a child must never outlive its
      agent, or it would go on writing checkpoints nobody uploads beside a later attempt's job.
    - With ``checkpoint_signal``: start with it ignored, so a notice that comes while the job
      is still starting up (before it installs its handler) does not kill it. A handler the
      job installs replaces this; SIGTERM and SIGINT are left alone (they stop the job).
    """

    try:  # looked up here, not in the child: nothing to import or lock after the fork
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        prctl = None
    ignore = checkpoint_signal not in (None, signal.SIGTERM, signal.SIGINT)

    def preexec() -> None:
        if ignore and checkpoint_signal is not None:
            signal.signal(checkpoint_signal, signal.SIG_IGN)
        if prctl is not None:
            prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG

    return preexec


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """SIGTERM to ``proc``'s process group (it leads one), SIGKILL after ``grace_s``."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
