"""Five-field cron expressions (minute hour day-of-month month day-of-week), in UTC, on croniter.

Used for policy time windows ("run only from 22:00 for 8 hours"). The grammar and the matching
are croniter's (``*``, lists, ranges, steps, names such as ``mon`` and ``jan``, ``7`` for
Sunday). Day-of-month and day-of-week combine as croniter does by default (``day_or=True``),
which is Vixie cron's rule: when both fields are restricted a day matches if *either* does
(``0 0 1 * mon`` opens on the 1st and on every Monday); when one of them is ``*`` only the other
one counts. Only five fields are accepted (croniter's optional seconds and year fields are
refused), and an error names the field that is wrong, so the policy loader can point at it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache

from croniter import CroniterBadDateError, CroniterError, croniter

_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_ANY = ("*", "*", "*", "*", "*")


def _check(expr: str) -> None:
    """Raise ValueError naming the first field croniter refuses (or the field count)."""
    parts = expr.split()
    if len(parts) != 5:
        raise ValueError(
            f"cron needs 5 fields (minute hour day month weekday), got {len(parts)}: {expr!r}"
        )
    for i, (name, text) in enumerate(zip(_FIELDS, parts, strict=True)):
        alone = " ".join(text if j == i else star for j, star in enumerate(_ANY))
        try:
            croniter(alone)
        except CroniterError as exc:
            why = str(exc).split("]", 1)[-1].strip(" ,") or "not acceptable"
            why = why.replace(f"in field {i} ", "")
            raise ValueError(f"cron {name}: {text!r} {why}") from None
    try:
        croniter(expr)
    except CroniterError as exc:  # pragma: no cover - each field passed alone
        raise ValueError(f"cron: {expr!r}: {exc}") from None


@dataclass(frozen=True, slots=True)
class CronSpec:
    """A checked five-field expression; times are matched to the minute."""

    expr: str

    @classmethod
    def parse(cls, expr: str) -> CronSpec:
        return _parse(expr)

    def matches(self, t: datetime) -> bool:
        return bool(croniter.match(self.expr, t.replace(second=0, microsecond=0)))

    def previous(self, t: datetime, limit: timedelta = timedelta(days=366)) -> datetime | None:
        """The latest time <= t (to the minute) that matches, looking back at most ``limit``."""
        cur = t.replace(second=0, microsecond=0)
        try:
            found: datetime = croniter(self.expr, cur + timedelta(seconds=1)).get_prev(datetime)
        except CroniterBadDateError:
            return None
        return found if found >= cur - limit else None

    def next(self, t: datetime, limit: timedelta = timedelta(days=366)) -> datetime | None:
        """The earliest time >= t (to the minute) that matches, looking ahead at most ``limit``."""
        cur = t.replace(second=0, microsecond=0)
        if cur < t:
            cur += timedelta(minutes=1)
        try:
            found: datetime = croniter(self.expr, cur - timedelta(seconds=1)).get_next(datetime)
        except CroniterBadDateError:
            return None
        return found if found <= cur + limit else None


@lru_cache(maxsize=256)
def _parse(expr: str) -> CronSpec:
    _check(expr)
    return CronSpec(" ".join(expr.split()))


def in_window(windows: list[tuple[str, timedelta]], t: datetime) -> bool:
    """True when ``t`` lies inside any window (opened by its cron, lasting its duration)."""
    if not windows:
        return True
    for expr, duration in windows:
        start = CronSpec.parse(expr).previous(t, limit=duration + timedelta(minutes=1))
        if start is not None and t < start + duration:
            return True
    return False


def next_window_start(windows: list[tuple[str, timedelta]], t: datetime) -> datetime | None:
    starts = [CronSpec.parse(expr).next(t) for expr, _ in windows]
    found = [s for s in starts if s is not None]
    return min(found) if found else None
