"""Calls a job's pass makes to a service outside this process, each bounded in time.

A checkpoint store that stops answering (an S3 endpoint that accepts and never replies, a
bucket behind a broken proxy) must hold only the job that uses it: the pass goes on for every
other job, and the job itself goes on with what was last read (its notice handling included).
:class:`Effects` runs such calls on a small pool of worker threads, one call in flight per
(job, purpose), and the pass waits for each at most ``wait_s`` seconds, and for all of them
together at most ``patience_s`` per pass. A call still running after that is left to run; the
pass uses the last answer and takes the new one when it comes. A store with a call that
outlived its wait is *slow*: later calls to it are started but not waited for, until one of
its calls answers again, so that a store that hangs costs the pass one wait, not one per job.

The call itself has a timeout too (the S3 client's connect and read timeouts,
:mod:`provisioner.objstore.fs`): a worker is never held for ever.

A call that has run ``slow_after_s`` gets one ``store-slow`` event on its job, naming the
store and how long it has waited, and one WARNING line per store; the answer that ends the
stall gets a ``store-answered`` event. Waits use the monotonic clock: they measure real time
spent on a socket, while the events carry the pass's own time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from provisioner.errors import ControlError

log = logging.getLogger("provisioner.control.effects")

T = TypeVar("T")

#: how long a pass waits for one call before it goes on with the last answer
WAIT_S = 2.0
#: how long one pass waits for all such calls together
PATIENCE_S = 5.0
#: a call running this long gets a ``store-slow`` event on its job
SLOW_AFTER_S = 10.0
#: worker threads: calls in flight at once (a hung store holds one per job that uses it)
WORKERS = 16


class Pending(ControlError):
    """A call the pass could not wait for: its job's pass goes on without the answer (or,
    where it cannot, stops here for this pass and takes it up again next pass)."""

    def __init__(self, where: str, what: str, waited_s: float) -> None:
        super().__init__(f"{where} has not answered for {waited_s:.0f} s ({what})")
        self.where, self.what, self.waited_s = where, what, waited_s


@dataclass
class Call(Generic[T]):
    """One call in flight (or answered and not yet taken)."""

    key: tuple[str, str]  # (job, purpose)
    where: str  # the service, as shown: a store's scheme and bucket, never credentials
    what: str  # what was asked of it ("progress.json")
    future: Future[T]
    started: float  # monotonic


@dataclass
class Stall:
    """What the pass should tell about one job: its store stopped answering, or answered
    again after that was told."""

    job_id: str
    where: str
    what: str
    waited_s: float
    ended: bool  # True: the store answered again


@dataclass
class _Slow:
    since: float  # monotonic: when the first call that outlived its wait began
    told: dict[str, str] = field(default_factory=dict)  # job -> what, stalls written


@dataclass
class Effects:
    """The pool and the calls in flight (one per job and purpose)."""

    wait_s: float = WAIT_S
    patience_s: float = PATIENCE_S
    slow_after_s: float = SLOW_AFTER_S
    workers: int = WORKERS
    monotonic: Callable[[], float] = time.monotonic
    _pool: ThreadPoolExecutor | None = None
    _calls: dict[tuple[str, str], Call[Any]] = field(default_factory=dict)
    _running: dict[str, int] = field(default_factory=dict)  # store -> calls not yet done
    _slow: dict[str, _Slow] = field(default_factory=dict)
    _patience: float = PATIENCE_S
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _stalls: list[Stall] = field(default_factory=list)
    #: seconds this pass spent waiting, by store (the daemon's overrun line names them)
    waited: dict[str, float] = field(default_factory=dict)

    def begin_pass(self) -> None:
        """A new pass: its patience is whole again."""
        self._patience = self.patience_s
        self.waited = {}

    def call(self, job_id: str, purpose: str, where: str, what: str, fn: Callable[[], T]) -> T:
        """``fn()``'s answer, waited for at most :attr:`wait_s` (less once the pass's patience
        is spent, none while ``where`` is slow); :class:`Pending` when it has not come (the
        call goes on; the next ``call`` with the same job and purpose takes its answer
        instead of starting another). While a store is slow, one call to it at a time is
        started (the others are Pending at once), so a hung store cannot take every worker.
        ``fn``'s own exception is raised as it is."""
        key = (job_id, purpose)
        slow = self._slow.get(where)
        with self._lock:
            current = self._calls.get(key)
            if current is None:
                if slow is not None and self._running.get(where, 0) > 0:
                    current = None
                else:
                    current = Call(key, where, what, self._submit(where, fn), self.monotonic())
                    self._calls[key] = current
        if current is None:  # the store is slow and already being asked
            assert slow is not None
            raise self._pending(job_id, where, what, slow)
        if not current.future.done():
            budget = 0.0 if slow is not None else min(self.wait_s, self._patience)
            if budget > 0:
                t0 = self.monotonic()
                wait_futures([current.future], timeout=budget)
                spent = self.monotonic() - t0
                self._patience = max(0.0, self._patience - spent)
                self.waited[where] = self.waited.get(where, 0.0) + spent
        if not current.future.done():
            if slow is None:
                slow = self._slow[where] = _Slow(current.started)
                log.warning(
                    "%s has not answered for %.1f s (%s): the jobs that use it go on with "
                    "what was last read",
                    where,
                    self.monotonic() - current.started,
                    what,
                )
            raise self._pending(job_id, where, what, slow)
        with self._lock:
            self._calls.pop(key, None)
        exc = current.future.exception()
        if slow is not None and (exc is None or not no_answer(exc)):
            self._answered(where, slow)
        if exc is not None:
            raise exc
        return current.future.result()

    def ready(self, job_id: str, purpose: str) -> bool:
        """Whether a call left running by an earlier pass has its answer now."""
        current = self._calls.get((job_id, purpose))
        return current is not None and current.future.done()

    def take_stalls(self) -> list[Stall]:
        """The stalls to tell since the last take (the pass writes them as events)."""
        out, self._stalls = self._stalls, []
        return out

    def forget(self, keep: set[str]) -> None:
        """Drop the calls of jobs this process no longer holds (their answers are not
        wanted; the threads end with their calls' own timeouts)."""
        with self._lock:
            for key in [k for k in self._calls if k[0] not in keep]:
                del self._calls[key]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    # -- inside -------------------------------------------------------------------------------

    def _pending(self, job_id: str, where: str, what: str, slow: _Slow) -> Pending:
        waited = self.monotonic() - slow.since
        if waited >= self.slow_after_s and job_id not in slow.told:
            slow.told[job_id] = what
            self._stalls.append(Stall(job_id, where, what, waited, ended=False))
        return Pending(where, what, waited)

    def _answered(self, where: str, slow: _Slow) -> None:
        if self._slow.get(where) is not slow:
            return
        del self._slow[where]
        waited = self.monotonic() - slow.since
        log.warning("%s answered again after %.1f s", where, waited)
        for job_id, what in slow.told.items():
            self._stalls.append(Stall(job_id, where, what, waited, ended=True))

    def _submit(self, where: str, fn: Callable[[], T]) -> Future[T]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="effects")
        self._running[where] = self._running.get(where, 0) + 1
        future = self._pool.submit(fn)

        def done(_: Future[T]) -> None:
            with self._lock:
                self._running[where] -= 1

        future.add_done_callback(done)
        return future


def no_answer(exc: BaseException) -> bool:
    """Whether an exception says the service did not answer (a timeout, a refused or broken
    connection) rather than answering with an error (not found, access denied)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, TimeoutError | ConnectionError):
            return True
        names = {t.__name__ for t in type(cur).__mro__}
        if any("Timeout" in n or "Connection" in n for n in names):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def store_where(uri: str) -> str:
    """A checkpoint store as an event may show it: scheme and bucket (or the path), with any
    user information or query (where credentials could sit) left out."""
    from urllib.parse import urlsplit

    if "://" not in uri:
        return uri
    parts = urlsplit(uri)
    host = parts.hostname or ""
    path = parts.path.rstrip("/")
    return f"checkpoint store {parts.scheme}://{host}{path}"
