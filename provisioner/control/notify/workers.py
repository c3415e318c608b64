"""The daemon's delivery threads: one worker per target, each draining its own queues.

The daemon's scheduled ``notify`` job only calls :meth:`TargetWorkers.wake`: one query (the
targets with something due), a worker started for each target that has none, and each one's
wake-up flag set. It never waits on a send, so it never overruns its interval (no scheduler
"skipped" lines) however slow a target is. Each worker runs
:meth:`~provisioner.control.notify.outbox.Deliverer.tick` for its own target, one tick at a
time: a target that apprise throttles (email: one message per 5.5 s) or that hangs until its
timeout holds up its own messages only, and one job's messages to one target still go in
order, from one thread (the claim on the queue keeps other replicas off it).

A worker woken while it sends ticks again as soon as it is done, so nothing waits longer than
its own target makes it. Crash safety is the outbox's: a worker killed with the process leaves
its claimed rows to be sent again once their lease runs out.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from provisioner.control.notify.outbox import Deliverer, TickReport

log = logging.getLogger("provisioner.control.notify")


class _Worker:
    def __init__(self, target: str, run: Callable[[str], None]) -> None:
        self.target = target
        self.wanted = threading.Event()
        self.stopping = False
        self.busy = False
        self._run = run
        self.thread = threading.Thread(target=self._loop, name=f"notify-{target}"[:40], daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            self.wanted.wait()
            if self.stopping:
                return
            self.wanted.clear()
            self.busy = True
            try:
                self._run(self.target)
            finally:
                self.busy = False


class TargetWorkers:
    """One delivery thread per target; ``report`` gets each tick's figures (the metrics)."""

    def __init__(self, deliverer: Deliverer, report: Callable[[TickReport], None]) -> None:
        self.deliverer = deliverer
        self.report = report
        self._workers: dict[str, _Worker] = {}
        self._lock = threading.Lock()
        self._closed = False

    def wake(self) -> list[str]:
        """Wake the worker of every target with something due (started when it has none);
        the targets woken. Returns at once: the sends are the workers'."""
        d = self.deliverer
        due = d.store.due_targets(d.owner, d.clock())
        with self._lock:
            if self._closed:
                return []
            for target in due:
                w = self._workers.get(target)
                if w is None:
                    w = self._workers[target] = _Worker(target, self._tick)
                w.wanted.set()
        return due

    def _tick(self, target: str) -> None:
        try:
            rep = self.deliverer.tick(target)
        except Exception as exc:  # the store's trouble, or a bug: the next wake retries
            log.warning(
                "delivering notifications to %s failed: %s; the next tick retries", target, exc
            )
            return
        try:
            self.report(rep)
        except Exception as exc:
            log.warning("counting notifications failed: %s", exc)

    def busy(self) -> list[str]:
        """The targets whose worker is sending now."""
        with self._lock:
            return sorted(t for t, w in self._workers.items() if w.busy)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the workers (one in a send finishes it, or is left behind after
        ``timeout``: its claimed rows are sent again once their lease runs out)."""
        with self._lock:
            self._closed = True
            workers = list(self._workers.values())
        for w in workers:
            w.stopping = True
            w.wanted.set()
        for w in workers:
            w.thread.join(timeout)
