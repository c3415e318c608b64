"""Time windows: the hours a job with cron windows really has left before its deadline."""

from __future__ import annotations

from datetime import datetime, timedelta


def window_hours_left(
    windows: list[tuple[str, timedelta]], now: datetime, deadline: datetime, changeover_h: float
) -> float:
    """Hours inside time ``windows`` ((cron, duration) pairs) from ``now`` to ``deadline``, less
    one changeover per window still to open (each starts a new instance): the time a job with
    windows really has left."""
    from policies.cron import CronSpec, in_window, next_window_start

    wins = windows
    t, total, openings = now, 0.0, 0
    for _ in range(10_000):
        if t >= deadline:
            break
        if in_window(wins, t):
            end = t
            for expr, dur in wins:
                start = CronSpec.parse(expr).previous(t, limit=dur + timedelta(minutes=1))
                if start is not None and t < start + dur:
                    end = max(end, start + dur)
            seg_end = min(end, deadline)
            total += (seg_end - t).total_seconds() / 3600.0
            t = max(seg_end, t + timedelta(minutes=1))
        else:
            nxt = next_window_start(wins, t)
            if nxt is None or nxt >= deadline:
                break
            openings += 1
            t = nxt
    return total - openings * changeover_h
