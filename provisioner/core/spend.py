"""An attempt's billed cost split over time (pure): by UTC day, and clipped to a window.

The cloud bills an attempt as one amount (its rule rounds the run time up to the increment and
the minimum); a report by day needs parts of it. The parts are in proportion to the run
seconds that fall in each piece, so the rounding and the minimum are spread the same way, and
the last piece takes what is left, so the parts add up to the billed amount exactly.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta


@dataclass(frozen=True, slots=True)
class Piece:
    """The part of an attempt's billed cost that fell between ``start`` and ``end``."""

    start: datetime
    end: datetime
    cost_usd: float

    @property
    def day(self) -> date:
        return self.start.astimezone(UTC).date()


def _midnights(start: datetime, end: datetime) -> list[datetime]:
    day = start.astimezone(UTC).date() + timedelta(days=1)
    out = []
    while (m := datetime(day.year, day.month, day.day, tzinfo=UTC)) < end:
        out.append(m)
        day += timedelta(days=1)
    return out


def split(
    cost_usd: float, start: datetime, end: datetime, cuts: Iterable[datetime] = ()
) -> list[Piece]:
    """``cost_usd`` billed for the run from ``start`` to ``end``, split at each midnight UTC and
    at ``cuts`` (a report window's edges), in proportion to the seconds in each piece. The
    pieces sum to ``cost_usd`` (the last takes the remainder). A run of no length is one piece."""
    if end <= start:
        return [Piece(start, start, cost_usd)]
    edges = sorted({*_midnights(start, end), *(c for c in cuts if start < c < end)})
    bounds = [start, *edges, end]
    total_s = (end - start).total_seconds()
    pieces: list[Piece] = []
    given = 0.0
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        if i == len(bounds) - 2:
            part = cost_usd - given
        else:
            part = cost_usd * (b - a).total_seconds() / total_s
            given += part
        pieces.append(Piece(a, b, part))
    return pieces


def clip(pieces: list[Piece], since: datetime | None, until: datetime | None) -> list[Piece]:
    """The pieces inside ``[since, until)`` (split at both first, so none straddles them)."""
    return [
        p
        for p in pieces
        if (since is None or p.start >= since) and (until is None or p.start < until)
    ]
