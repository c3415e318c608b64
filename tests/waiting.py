"""Waiting on a condition, never on the clock: the suite's one polling loop.

A test that needs something to happen (a process to start, a file to appear, an instance to be
preempted) waits for that condition, with a timeout that only bounds a failure: a passing test
waits exactly as long as the condition takes. ``wait_for`` returns the condition's first truthy
value or raises; ``until`` returns whether it came true (for ``assert until(...), story``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: how often a condition is polled when the caller does not say
POLL_S = 0.05


def wait_for(cond: Callable[[], T], timeout: float = 10.0, every: float = POLL_S) -> T:
    """``cond()``'s first truthy value, polled until ``timeout`` seconds (then AssertionError)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {_name(cond)}")
        time.sleep(every)  # the poll's pause: waiting on the condition, not on a duration


def until(cond: Callable[[], Any], timeout: float, every: float = POLL_S) -> bool:
    """Whether ``cond()`` came true within ``timeout`` seconds (checked once more at the end)."""
    try:
        wait_for(cond, timeout, every)
    except AssertionError:
        return bool(cond())
    return True


def _name(cond: Callable[..., Any]) -> str:
    code = getattr(cond, "__code__", None)
    where = f" ({code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno})" if code else ""
    return f"{getattr(cond, '__qualname__', repr(cond))}{where}"
