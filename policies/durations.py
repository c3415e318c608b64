"""Durations as a policy writes them: ``90`` (seconds), ``"15m"``, ``"2h"``, ``"1.5d"``."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Any

DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|hr|d|w)?\s*$", re.I)
_UNIT_SECONDS = {
    "s": 1,
    "sec": 1,
    "m": 60,
    "min": 60,
    "h": 3600,
    "hr": 3600,
    "d": 86400,
    "w": 604800,
}


#: The longest duration a policy may give (ten years): more is a typo, and a timedelta
#: overflows not far beyond.
MAX_DURATION = timedelta(days=3650)
_DURATION_HELP = "a duration like 30s, 15m, 2h or 1d"


def parse_duration(value: Any) -> timedelta:
    """``90`` (seconds), ``"15m"``, ``"2h"``, ``"1.5d"`` or a timedelta, at most ten years.

    The number is range-checked before any timedelta is built, so no input overflows."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise ValueError(f"expected {_DURATION_HELP}")
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and len(value) <= 64 and (m := DURATION_RE.match(value)):
        unit = (m.group(2) or "s").lower()
        seconds = float(m.group(1)) * _UNIT_SECONDS[unit]
    else:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise ValueError(f"expected {_DURATION_HELP}, got {shown}")
    if not math.isfinite(seconds) or abs(seconds) > MAX_DURATION.total_seconds():
        raise ValueError(
            f"must be at most {MAX_DURATION.days}d (ten years); expected {_DURATION_HELP}"
        )
    return timedelta(seconds=seconds)


def non_negative_duration(v: Any) -> timedelta:
    d = parse_duration(v)
    if d.total_seconds() < 0:
        raise ValueError(f"must not be negative; expected {_DURATION_HELP}")
    return d


def positive_duration(v: Any) -> timedelta:
    d = non_negative_duration(v)
    if d.total_seconds() <= 0:
        raise ValueError(f"must be longer than 0; expected {_DURATION_HELP}")
    return d
