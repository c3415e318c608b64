"""Each provider's part of a pass in its own lane, so that a cloud API that hangs holds only
the jobs that run on it.

A pass observes each configured provider once (list, interruptions), steps that provider's
jobs, and reaps its orphans. With jobs on one provider that is done in the pass's own thread,
in order (the common case, and the seeded whole-system run's). With jobs on several, each
provider's part runs in a worker thread and the pass waits for all of them at most
``patience_s``; a part still running then (its API accepts and does not answer, and the
adapter's own timeouts and retries have not run out yet) is left to finish on its own. Until
it has, the next passes leave that provider's jobs to it (their rows, memos and instances
are the lane's: never read, decided or reaped twice at once) and go on with the others; when
it ends, what it did is counted in the pass that finds it done.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, fields
from typing import Any

from provisioner.control.records import PassReport

log = logging.getLogger("provisioner.control.reconciler")

#: ``(provider key, its (job id, memo) pairs, the report to count in)``: one provider's part
GroupStep = Callable[[str, list[tuple[str, Any]], PassReport], None]


@dataclass
class Lane:
    future: Future[None]
    started: float  # monotonic
    jobs: frozenset[str]
    report: PassReport


class ProviderLanes:
    def __init__(
        self,
        patience_s: float,
        workers: int = 8,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.patience_s = patience_s
        self.workers = workers
        self.monotonic = monotonic
        self._pool: ThreadPoolExecutor | None = None
        self._late: dict[str, Lane] = {}  # provider key -> its part, still running

    def jobs(self) -> set[str]:
        """The jobs whose provider's part of an earlier pass is still running."""
        out: set[str] = set()
        for lane in self._late.values():
            out |= lane.jobs
        return out

    def busy_jobs(self, report: PassReport) -> set[str]:
        """:meth:`jobs`, once the parts that ended since the last pass are counted in
        ``report`` (and their jobs handed back to the pass)."""
        for key, lane in list(self._late.items()):
            if not lane.future.done():
                continue
            del self._late[key]
            merge(report, lane.report)
            took = self.monotonic() - lane.started
            exc = lane.future.exception()
            if exc is not None:
                log.warning("%s: its late part of a pass ended after %.0f s with %r",
                            _name(key), took, exc)  # fmt: skip
            else:
                log.warning("%s: its late part of a pass ended after %.0f s; its %d job(s) "
                            "are passed again", _name(key), took, len(lane.jobs))  # fmt: skip
        return self.jobs()

    def run(
        self,
        by_provider: dict[str, list[tuple[str, Any]]],
        step: GroupStep,
        report: PassReport,
    ) -> None:
        """Every provider's part of this pass (see the module doc); the first exception a
        part raised (a store that is locked, say) is raised once all are counted."""
        if not by_provider:
            return
        if len(by_provider) == 1 and not self._late:
            ((key, pairs),) = by_provider.items()
            step(key, pairs, report)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="provider")
        started = self.monotonic()
        lanes: dict[str, Lane] = {}
        for key, pairs in by_provider.items():
            part = PassReport(step_s=report.step_s)
            future = self._pool.submit(step, key, pairs, part)
            lanes[key] = Lane(future, started, frozenset(j for j, _ in pairs), part)
        wait_futures([lane.future for lane in lanes.values()], timeout=self.patience_s)
        first: BaseException | None = None
        for key, lane in lanes.items():
            if not lane.future.done():
                self._late[key] = lane
                log.warning(
                    "%s has not finished its part of the pass in %.0f s (its API does not "
                    "answer?): its %d job(s) wait for it; the other providers' jobs go on",
                    _name(key),
                    self.monotonic() - started,
                    len(lane.jobs),
                )
                continue
            merge(report, lane.report)
            exc = lane.future.exception()
            if exc is not None and first is None:
                first = exc
        if first is not None:
            raise first

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


def merge(into: PassReport, part: PassReport) -> None:
    """Count one provider's part of a pass in the pass's report (its counts, lists and
    tallies; not the pass's own size, length or step)."""
    for f in fields(PassReport):
        if f.name in ("jobs", "seconds", "step_s"):
            continue
        mine, theirs = getattr(into, f.name), getattr(part, f.name)
        if isinstance(mine, Counter):
            mine.update(theirs)
        elif isinstance(mine, list):
            mine.extend(theirs)
        elif isinstance(mine, dict):
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0.0) + v
        elif isinstance(mine, int | float):
            setattr(into, f.name, mine + theirs)


def _name(key: str) -> str:
    return key.split(":", 1)[0]
