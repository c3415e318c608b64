"""A pytest plugin that moves this process's real clock by some days (issue 39, defect 10):
``pytest -p tests.clock_shift`` with ``PROVISIONER_TEST_SHIFT_DAYS=1500`` (or ``-2500``).

A test that fixes a date and lets the code under it read the real clock passes today and
fails from some day on; run under a shifted clock, it fails today. The plugin is loaded
before any module of this project is imported, and replaces ``datetime.datetime`` by a
subclass whose ``now()``, ``utcnow()`` and ``today()`` are shifted (``from datetime import
datetime`` then binds it), and ``time.time()`` (``time.monotonic()`` and the like are left:
they measure intervals). Child processes are not shifted. No dependency (freezegun and
time-machine do more; neither is installed).
"""

from __future__ import annotations

import datetime as _dt
import os
import time as _time
from typing import Any

ENV = "PROVISIONER_TEST_SHIFT_DAYS"
_real_datetime = _dt.datetime
_real_time = _time.time


def _shift() -> _dt.timedelta:
    return _dt.timedelta(days=float(os.environ.get(ENV, "0") or 0))


class _Meta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _real_datetime)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _real_datetime)


class ShiftedDatetime(_real_datetime, metaclass=_Meta):
    """``datetime`` whose clock reads are moved; its instances are plain ``datetime``s."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return _real_datetime(*args, **kwargs)

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return _real_datetime.now(tz) + _shift()

    @classmethod
    def utcnow(cls) -> Any:
        return _real_datetime.now(_dt.UTC).replace(tzinfo=None) + _shift()

    @classmethod
    def today(cls) -> Any:
        return _real_datetime.now() + _shift()

    @classmethod
    def fromisoformat(cls, s: str) -> Any:
        return _real_datetime.fromisoformat(s)

    @classmethod
    def fromtimestamp(cls, t: float, tz: Any = None) -> Any:
        return _real_datetime.fromtimestamp(t, tz)

    @classmethod
    def strptime(cls, s: str, fmt: str) -> Any:
        return _real_datetime.strptime(s, fmt)

    @classmethod
    def combine(cls, *args: Any, **kwargs: Any) -> Any:
        return _real_datetime.combine(*args, **kwargs)


def _shifted_time() -> float:
    return _real_time() + _shift().total_seconds()


def install() -> None:
    import sqlite3  # noqa: F401  (its adapters are registered for the real class, on import)

    if _shift():
        _dt.datetime = ShiftedDatetime  # type: ignore[misc]
        _time.time = _shifted_time


install()
