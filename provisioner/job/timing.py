"""How often to checkpoint: the Young/Daly interval from the save time and the expected time
between interruptions (docs/frameworks.md has a worked example)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from provisioner.job._state import state as _state


def young_daly_interval(save_s: float, mtbi_s: float) -> float:
    """The checkpoint interval that loses the least time: ``sqrt(2 * C * M)`` (Young, 1974;
    Daly's first order), with ``C`` the save time and ``M`` the mean time between
    interruptions, both in seconds."""
    if save_s <= 0 or mtbi_s <= 0:
        raise ValueError("save time and mean time between interruptions must be positive")
    return math.sqrt(2.0 * save_s * mtbi_s)


class Interval:
    """Periodic checkpoints: ``due()`` once ``every_s`` passed since the last save. With
    ``mtbi_s`` (mean seconds between interruptions, e.g. ``3600 / rate_per_hour``) instead,
    the interval is :func:`young_daly_interval` of the last save's measured duration
    (``first_s`` until one is measured), never under ``min_s``."""

    def __init__(
        self,
        every_s: float | None = None,
        *,
        mtbi_s: float | None = None,
        first_s: float = 600.0,
        min_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if every_s is None and mtbi_s is None:
            raise ValueError("give every_s or mtbi_s")
        self.every_s, self.mtbi_s = every_s, mtbi_s
        self.first_s, self.min_s, self.clock = first_s, min_s, clock
        self.since = clock()  # the start, or the last save seen
        self._saves = _state.saves

    def seconds(self) -> float:
        if self.every_s is not None:
            return self.every_s
        assert self.mtbi_s is not None
        save = _state.last_save_s
        if save is None or save <= 0:
            return self.first_s
        return max(self.min_s, young_daly_interval(save, self.mtbi_s))

    def due(self) -> bool:
        now = self.clock()
        if _state.saves != self._saves:  # a save since the last look: the interval restarts
            self._saves, self.since = _state.saves, now
        return now - self.since >= self.seconds()
