"""What the job's process knows between calls of :mod:`provisioner.job` (one per process)."""

from __future__ import annotations

from typing import Any


class _State:
    """What this process knows: the flag, the handlers it replaced, the last save."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.requested = False  # set by the signal handler, and nothing else happens there
        self.signum: int | None = None
        self.previous: Any = None  # the handler installed before ours
        self.depth = 0  # nested watch() blocks
        self.served_notice: str | None = None  # the notice a committed save answered
        self.last_save_s: float | None = None
        self.saves = 0  # checkpoints committed by this process
        self.sticky: dict[str, Any] = {}  # kept in every progress report (warnings, timing)
        self.step: int | None = None
        self.total: int | None = None
        self.warned_for: str | None = None  # the notice a warning was written for


state = _State()
