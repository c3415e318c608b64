"""Repeated errors, logged once: a condition that fails on every try (a full checkpoint disk, a
store that refuses writes) would otherwise write a line at every retry, twice a second per job.

:class:`Repeats` follows one condition (checkpoint uploads, progress writes, log shipping): the
first failure of a kind is logged whole; the same kind again (the same message, its numbers
aside: a checkpoint's name, a byte count) is counted, and a summary line ``N more in the last
M s`` is logged when a failure comes at least ``summary_s`` after the last line; a failure of
another kind is logged whole at once (after the summary of the kind before it); the first
success after failures is logged once, with how many there were and for how long (the count
not yet summarised is in it).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

#: at most one summary line a minute per condition
SUMMARY_S = 60.0


def kind_of(message: str) -> str:
    """What makes two failures the same: the message with its numbers taken out."""
    return re.sub(r"\d+", "#", message)


class Repeats:
    """One condition's failures and recovery, logged without repeating itself (module doc)."""

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        level: int = logging.ERROR,
        summary_s: float = SUMMARY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log, self.what, self.level = logger, what, level
        self.summary_s, self.clock = summary_s, clock
        self._lock = threading.Lock()
        self._kind: str | None = None  # the kind failing now, None while it works
        self._since = 0.0  # the first failure of this spell
        self._line_at = 0.0  # the last line logged about it
        self._failures = 0  # in this spell
        self._unsaid = 0  # failures since the last line
        self._last = ""

    @property
    def failing(self) -> bool:
        return self._kind is not None

    def failed(self, message: str) -> None:
        """One failure: logged, counted or summarised (see the module doc)."""
        with self._lock:
            now = self.clock()
            kind = kind_of(message)
            if self._kind is None:
                self._since = now
            self._failures += 1
            if kind != self._kind:
                self._summary(now)
                self._kind, self._line_at, self._last = kind, now, message
                self.log.log(self.level, "%s", message)
                return
            self._unsaid += 1
            self._last = message
            if now - self._line_at >= self.summary_s:
                self._summary(now)

    def ok(self) -> None:
        """A success: after failures, one line saying so (with how many there were, those
        not yet summarised included); nothing otherwise."""
        with self._lock:
            if self._kind is None:
                return
            now = self.clock()
            self.log.info(
                "%s works again (%d failure%s in %.0f s)",
                self.what,
                self._failures,
                "" if self._failures == 1 else "s",
                now - self._since,
            )
            self._kind, self._failures, self._unsaid = None, 0, 0

    def _summary(self, now: float) -> None:
        if self._unsaid:
            self.log.log(
                self.level,
                "%s: %d more in the last %.0f s (the last: %s)",
                self.what,
                self._unsaid,
                now - self._line_at,
                self._last,
            )
            self._line_at, self._unsaid = now, 0
