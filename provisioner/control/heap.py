"""The daemon's garbage collector, paced by its passes.

At 10,000 jobs the daemon's reconciler holds some 400,000 objects that live as long as their
jobs (rows, memos, progress records, plans). CPython's cyclic collector rescans every one of
them each time enough new objects have survived since its last full collection: about once
a warm pass there, a quarter of a second of CPU each (a quarter of the pass), and eight times
in the cold pass, whose loading is what grows the heap. The reconciler makes almost no cyclic
garbage (rows, documents and instances are freed by reference counting the moment they are
dropped), so the daemon paces the collector by its passes instead:

* during a pass, automatic collection is off;
* after it, everything the collector tracks is frozen (:func:`gc.freeze`: no scan, a list
  moved), so later collections, automatic or not, skip it. The pass's own cyclic garbage
  (sessions, exceptions: about 150 objects a pass at 10,000 jobs) is frozen with it; a young
  collection to free it first would scan every object the pass allocated and kept (0.14 s
  after a cold pass);
* once per :data:`FULL_EVERY_S` the frozen objects are thawed and collected in full, so
  cyclic garbage waits at most that long; :meth:`GcPacer.close` thaws them.

Only the daemon's reconciler does this (:func:`provisioner.control.daemon.service.reconciler_for`);
``up`` and tests leave the collector as it is.
"""

from __future__ import annotations

import functools
import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Concatenate, ParamSpec, Protocol, TypeVar

#: a full collection (the frozen heap thawed, collected, frozen again) at most this often
FULL_EVERY_S = 600.0


class GcPacer:
    """The collector paced by one reconciler's passes (a no-op when not ``enabled``)."""

    def __init__(self, enabled: bool = False, full_every_s: float = FULL_EVERY_S) -> None:
        self.enabled = enabled
        self.full_every_s = full_every_s
        self._full_at: float | None = None
        self.full_collections = 0  # how many full collections it made (for tests, metrics)

    @contextmanager
    def pass_(self) -> Iterator[None]:
        """Around one pass: no automatic collection inside; after it, what is alive frozen
        (a full collection first when one is due)."""
        if not self.enabled:
            yield
            return
        was = gc.isenabled()  # another pass (another thread) may have paused it: left so
        gc.disable()
        try:
            yield
        finally:
            if was:
                gc.enable()
            self._settle()

    def _settle(self) -> None:
        now = time.monotonic()
        if self._full_at is None:
            self._full_at = now
        if now - self._full_at >= self.full_every_s:
            gc.unfreeze()
            gc.collect()
            self._full_at = now
            self.full_collections += 1
        gc.freeze()

    def close(self) -> None:
        """The frozen objects back under the collector (the reconciler is done)."""
        if self.enabled:
            gc.unfreeze()


class _Paced(Protocol):
    gc: GcPacer


S = TypeVar("S", bound=_Paced)
P = ParamSpec("P")
R = TypeVar("R")


def paced(fn: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """A pass method run under its object's :class:`GcPacer` (``self.gc``)."""

    @functools.wraps(fn)
    def run(self: S, *args: P.args, **kwargs: P.kwargs) -> R:
        with self.gc.pass_():
            return fn(self, *args, **kwargs)

    return run
