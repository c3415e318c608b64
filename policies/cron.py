"""A small five-field cron (minute hour day-of-month month day-of-week), in UTC.

Used for policy time windows ("run only from 22:00 for 8 hours"). Supports ``*``, lists,
ranges, steps and names (``mon``, ``jan``); day-of-month and day-of-week combine as in Vixie
cron (either matches when both are restricted).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    (
        "month",
        1,
        12,
        {
            m: i + 1
            for i, m in enumerate(
                ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
            )
        },
    ),
    (
        "day-of-week",
        0,
        7,
        {d: i for i, d in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])},
    ),
)


def _parse_field(text: str, name: str, lo: int, hi: int, names: dict[str, int]) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        if not part:
            raise ValueError(f"cron {name}: empty list item")
        step = 1
        if "/" in part:
            part, step_text = part.split("/", 1)
            if not step_text.isdigit() or int(step_text) == 0:
                raise ValueError(f"cron {name}: step {step_text!r} must be a positive number")
            step = int(step_text)
        if part == "*":
            start, end = lo, hi
        else:
            bounds = part.split("-", 1)
            nums = []
            for b in bounds:
                b_low = b.lower()
                if b_low in names:
                    nums.append(names[b_low])
                elif b.isdigit():
                    nums.append(int(b))
                else:
                    raise ValueError(f"cron {name}: {b!r} is not a number or name")
            start = nums[0]
            end = nums[1] if len(nums) == 2 else (hi if step > 1 else start)
        if not (lo <= start <= hi and lo <= end <= hi) or start > end:
            raise ValueError(f"cron {name}: {part!r} is outside {lo}-{hi}")
        values.update(range(start, end + 1, step))
    if name == "day-of-week" and 7 in values:
        values.discard(7)
        values.add(0)
    return frozenset(values)


@dataclass(frozen=True, slots=True)
class CronSpec:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    dom_restricted: bool
    dow_restricted: bool

    @classmethod
    def parse(cls, expr: str) -> CronSpec:
        parts = expr.split()
        if len(parts) != 5:
            raise ValueError(
                f"cron needs 5 fields (minute hour day month weekday), got {len(parts)}: {expr!r}"
            )
        m, h, dom, mon, dow = (_parse_field(p, *f) for p, f in zip(parts, _FIELDS, strict=True))
        return cls(
            m, h, dom, mon, dow, dom_restricted=parts[2] != "*", dow_restricted=parts[4] != "*"
        )

    def matches(self, t: datetime) -> bool:
        if t.minute not in self.minutes or t.hour not in self.hours or t.month not in self.months:
            return False
        dom = t.day in self.days
        dow = (t.isoweekday() % 7) in self.weekdays
        if self.dom_restricted and self.dow_restricted:
            return dom or dow
        return dom and dow

    def previous(self, t: datetime, limit: timedelta = timedelta(days=366)) -> datetime | None:
        """The latest time <= t (to the minute) that matches, looking back at most ``limit``."""
        cur = t.replace(second=0, microsecond=0)
        end = cur - limit
        while cur >= end:
            if cur.month not in self.months:
                cur = cur.replace(day=1, hour=0, minute=0) - timedelta(minutes=1)
                continue
            if not self._day_ok(cur):
                cur = cur.replace(hour=0, minute=0) - timedelta(minutes=1)
                continue
            if cur.hour not in self.hours:
                cur = cur.replace(minute=0) - timedelta(minutes=1)
                continue
            if cur.minute in self.minutes:
                return cur
            cur -= timedelta(minutes=1)
        return None

    def next(self, t: datetime, limit: timedelta = timedelta(days=366)) -> datetime | None:
        """The earliest time >= t (to the minute) that matches, looking ahead at most ``limit``."""
        cur = t.replace(second=0, microsecond=0)
        if cur < t:
            cur += timedelta(minutes=1)
        end = cur + limit
        while cur <= end:
            if cur.month not in self.months:
                nxt_month = (cur.replace(day=28) + timedelta(days=4)).replace(
                    day=1, hour=0, minute=0
                )
                cur = nxt_month
                continue
            if not self._day_ok(cur):
                cur = cur.replace(hour=0, minute=0) + timedelta(days=1)
                continue
            if cur.hour not in self.hours:
                cur = cur.replace(minute=0) + timedelta(hours=1)
                continue
            if cur.minute in self.minutes:
                return cur
            cur += timedelta(minutes=1)
        return None

    def _day_ok(self, t: datetime) -> bool:
        dom = t.day in self.days
        dow = (t.isoweekday() % 7) in self.weekdays
        if self.dom_restricted and self.dow_restricted:
            return dom or dow
        return dom and dow


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
