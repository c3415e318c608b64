"""How the daemon tells of passes that run late: one WARNING line when a pass takes longer
than the interval between passes (what it waited on, how many launches it made), one a
minute while that goes on, and none of APScheduler's per-tick "skipped" lines."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("provisioner.control.daemon")


class Overruns:
    """One WARNING line when a pass takes longer than the interval between passes, with what
    it waited on; while passes keep overrunning, one line a minute with their count (in place
    of APScheduler's "skipped" line for every pass that could not start)."""

    EVERY_S = 60.0

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.monotonic = monotonic
        self.told_at: float | None = None
        self.since_told = 0
        self.longest = 0.0

    def note(self, took: float, interval: float, report: Any) -> None:
        if took <= interval:
            return
        now = self.monotonic()
        self.since_told += 1
        self.longest = max(self.longest, took)
        if self.told_at is not None and now - self.told_at < self.EVERY_S:
            return
        waits = ", ".join(
            f"{s:.1f} s on {where}" for where, s in sorted(report.waited.items()) if s >= 0.05
        )
        launches = report.launch_seconds
        parts = [f"{report.jobs} jobs"]
        if waits:
            parts.append(f"waiting {waits}")
        if launches:
            parts.append(f"{len(launches)} launch(es) {sum(launches):.1f} s")
        more = ""
        if self.since_told > 1:
            more = f"; {self.since_told} passes overran since the last such line (longest {self.longest:.1f} s)"
        log.warning(
            "reconcile pass took %.1f s, over the %g s interval (%s)%s",
            took,
            interval,
            "; ".join(parts),
            more,
        )
        self.told_at, self.since_told, self.longest = now, 0, 0.0


class _SchedulerNoise(logging.Filter):
    """APScheduler's lines that a slow pass makes by the dozen ("skipped: maximum number of
    running instances reached", "was missed by"): :class:`Overruns` says it once."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = str(record.msg)
        return not ("maximum number of running instances" in msg or "was missed by" in msg)


def quiet_scheduler() -> None:
    for name in ("apscheduler.scheduler", "apscheduler.executors.default"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _SchedulerNoise) for f in logger.filters):
            logger.addFilter(_SchedulerNoise())
