"""Charts as inline SVG, built on the server (no script, no charting library).

Every piece of text that came from the store goes through :func:`markupsafe.escape` (by
``Markup.format``); colours come from CSS classes in ``static/dashboard.css``, so the page
needs no inline style and runs under a strict Content-Security-Policy.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from markupsafe import Markup, escape

_STEPS = [
    timedelta(seconds=s)
    for s in (
        1,
        5,
        15,
        30,
        60,
        300,
        900,
        1800,
        3600,
        3 * 3600,
        6 * 3600,
        12 * 3600,
        86400,
        2 * 86400,
        7 * 86400,
        30 * 86400,
    )
]


def _ticks(start: datetime, end: datetime, most: int = 8) -> list[datetime]:
    span = max((end - start).total_seconds(), 1.0)
    step = next((s for s in _STEPS if span / s.total_seconds() <= most), _STEPS[-1])
    sec = step.total_seconds()
    first = datetime.fromtimestamp((start.timestamp() // sec + 1) * sec, tz=start.tzinfo)
    out: list[datetime] = []
    t = first
    while t <= end and len(out) < 40:
        out.append(t)
        t += step
    return out


def _tick_label(t: datetime, span: timedelta) -> str:
    if span <= timedelta(minutes=2):
        return f"{t:%H:%M:%S}"
    if span <= timedelta(days=1):
        return f"{t:%H:%M}"
    return f"{t:%b %d %H:%M}"


def _money(v: float) -> str:
    return f"${v:,.2f}" if abs(v) >= 10 else f"${v:,.4f}".rstrip("0").rstrip(".")


class _Scale:
    def __init__(self, start: datetime, end: datetime, x0: float, x1: float) -> None:
        self.start, self.end = start, end if end > start else start + timedelta(seconds=1)
        self.x0, self.x1 = x0, x1

    def __call__(self, t: datetime) -> float:
        total = (self.end - self.start).total_seconds()
        frac = (t - self.start).total_seconds() / total
        return round(self.x0 + max(0.0, min(1.0, frac)) * (self.x1 - self.x0), 1)


def _time_axis(sc: _Scale, y_top: float, y_bottom: float) -> list[Markup]:
    parts: list[Markup] = []
    span = sc.end - sc.start
    for t in _ticks(sc.start, sc.end):
        x = sc(t)
        parts.append(
            Markup(
                '<line class="grid" x1="{x}" x2="{x}" y1="{a}" y2="{b}"/>'
                '<text class="tick" x="{x}" y="{ty}" text-anchor="middle">{label}</text>'
            ).format(x=x, a=y_top, b=y_bottom, ty=y_bottom + 14, label=_tick_label(t, span))
        )
    return parts


_MARK_SHAPES = {
    "launch": '<path d="M{x},{y1} l6,10 h-12 z"/>',
    "restart": '<circle cx="{x}" cy="{y}" r="6"/><path class="glyph" d="M{x},{y2} v6"/>',
    "notice": '<path d="M{x},{y1} l6,6 l-6,6 l-6,-6 z"/>',
    "checkpoint": '<circle cx="{x}" cy="{y}" r="4.5"/>',
    "preemption": '<path d="M{xa},{ya} l10,10 m0,-10 l-10,10"/>',
    "launch-failed": '<path d="M{xb},{yb} l7,7 m0,-7 l-7,7"/>',
    "succeeded": '<path d="M{x},{y1} v12 M{x},{y1} h8 l-2,3 l2,3 h-8"/>',
}


def _mark(kind: str, x: float, y: float) -> Markup:
    shape = _MARK_SHAPES.get(kind, '<rect x="{xr}" y="{yr}" width="8" height="8"/>')
    return Markup(shape).format(
        x=x,
        y=y,
        y1=y - 6,
        y2=y - 3,
        xa=x - 5,
        ya=y - 5,
        xb=x - 3.5,
        yb=y - 3.5,
        xr=x - 4,
        yr=y - 4,
    )


def timeline_svg(tl: dict[str, Any], width: int = 1000) -> Markup:
    """The attempts as bars on a time axis (one lane each, by market and how they ended) and
    the marks (launch, notice, checkpoint, preemption, restart, ...) with their reasons as
    tooltips. The job's own events (submitted, succeeded) sit on the top lane."""
    lanes: list[dict[str, Any]] = tl["lanes"]
    gutter, lane_h, top = 210, 30, 10
    rows = 1 + len(lanes)
    height = top + rows * lane_h + 24
    sc = _Scale(tl["start"], tl["end"], gutter, width - 16)
    row_of = {lane["attempt"]: i + 1 for i, lane in enumerate(lanes)}
    parts: list[Markup] = [
        Markup(
            '<svg class="chart timeline" viewBox="0 0 {w} {h}" role="img" '
            'aria-label="Timeline of the job\'s attempts" xmlns="http://www.w3.org/2000/svg">'
        ).format(w=width, h=height)
    ]
    parts += _time_axis(sc, top, top + rows * lane_h)
    parts.append(
        Markup('<text class="lane-label" x="8" y="{y}">job</text>').format(y=top + lane_h / 2 + 4)
    )
    for i, lane in enumerate(lanes):
        y: float = top + (i + 1) * lane_h
        x0, x1 = sc(lane["start"]), sc(lane["end"])
        title = (
            f"attempt {lane['attempt']} on {lane.get('where', lane['label'])} · {lane['market']}"
            f" · {lane['state']} · {_money(lane['cost_usd'])}"
        )
        if lane["reason"]:
            title += f"\nwhy: {lane['reason']}"
        if lane["end_reason"]:
            title += f"\nended: {lane['end_reason']}"
        parts.append(
            Markup(
                '<g class="lane lane-{state} market-{market}" data-attempt="{n}">'
                "<title>{title}</title>"
                '<text class="lane-label" x="8" y="{ty}">{label}</text>'
                '<rect class="bar{open}" x="{x}" y="{by}" width="{bw}" height="14" rx="3"/></g>'
            ).format(
                state=lane["state"],
                market=lane["market"],
                n=lane["attempt"],
                title=title,
                ty=y + lane_h / 2 + 4,
                label=_clip(lane["label"], 26),
                open=" open" if lane["open"] else "",
                x=x0,
                by=y + (lane_h - 14) / 2,
                bw=max(2.0, x1 - x0),
            )
        )
    for m in tl["marks"]:
        row = row_of.get(m["attempt"], 0) if m["attempt"] is not None else 0
        y = top + row * lane_h + lane_h / 2
        title = m["label"] + (f": {m['reason']}" if m["reason"] else "")
        parts.append(
            Markup(
                '<g class="mark mark-{kind}" data-kind="{kind}"><title>{title}</title>{shape}</g>'
            ).format(kind=m["kind"], title=title, shape=_mark(m["kind"], sc(m["at"]), y))
        )
    parts.append(Markup("</svg>"))
    return Markup("").join(parts)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def line_chart_svg(
    series: list[dict[str, Any]],
    *,
    width: int = 1000,
    height: int = 240,
    money: bool = True,
    hline: float | None = None,
    hline_label: str = "",
    label: str = "chart",
) -> Markup:
    """Step-free line chart over time: ``series`` = ``[{name, cls, points: [(t, v)]}]``;
    ``hline`` draws a dashed limit (a budget)."""
    pts = [p for s in series for p in s["points"]]
    if not pts:
        return Markup('<p class="empty">No data yet.</p>')
    t0, t1 = min(p[0] for p in pts), max(p[0] for p in pts)
    top_value = max([p[1] for p in pts] + [1e-9])
    if hline and hline > 4 * top_value:  # a far-off limit would flatten the line: name it
        hline_label, hline = f"{hline_label} (off the scale)", None
        off_scale = True
    else:
        off_scale = False
    vmax = max([top_value] + ([hline] if hline else [])) * 1.08
    left, right, top, bottom = 64, width - 16, 12, height - 26
    sc = _Scale(t0, t1, left, right)

    def y(v: float) -> float:
        return round(bottom - (v / vmax) * (bottom - top), 1)

    parts: list[Markup] = [
        Markup(
            '<svg class="chart line" viewBox="0 0 {w} {h}" role="img" aria-label="{label}" '
            'xmlns="http://www.w3.org/2000/svg">'
        ).format(w=width, h=height, label=label)
    ]
    parts += _time_axis(sc, top, bottom)
    for i in range(5):
        v = vmax * i / 4
        parts.append(
            Markup(
                '<line class="grid" x1="{l}" x2="{r}" y1="{y}" y2="{y}"/>'
                '<text class="tick" x="{tx}" y="{ty}" text-anchor="end">{v}</text>'
            ).format(
                l=left,
                r=right,
                y=y(v),
                tx=left - 6,
                ty=y(v) + 4,
                v=_money(v) if money else f"{v:.3g}",
            )
        )
    if hline:
        parts.append(
            Markup(
                '<line class="limit" x1="{l}" x2="{r}" y1="{y}" y2="{y}"/>'
                '<text class="limit-label" x="{r}" y="{ty}" text-anchor="end">{label}</text>'
            ).format(l=left, r=right, y=y(hline), ty=y(hline) - 5, label=hline_label)
        )
    if off_scale and hline_label:
        parts.append(
            Markup(
                '<text class="limit-label" x="{r}" y="{y}" text-anchor="end">{label}</text>'
            ).format(r=right, y=top + 10, label=hline_label)
        )
    for s in series:
        if not s["points"]:
            continue
        d = " ".join(f"{sc(t)},{y(v)}" for t, v in s["points"])
        parts.append(
            Markup(
                '<g class="series {cls}"><title>{name}</title>'
                '<polyline points="{d}" fill="none"/></g>'
            ).format(cls=s.get("cls", ""), name=s["name"], d=d)
        )
        t, v = s["points"][-1]
        parts.append(
            Markup('<circle class="series-end {cls}" cx="{x}" cy="{y}" r="3.5"/>').format(
                cls=s.get("cls", ""), x=sc(t), y=y(v)
            )
        )
    parts.append(Markup("</svg>"))
    return Markup("").join(parts)


def meter_svg(fraction: float | None, cls: str = "", width: int = 120, label: str = "") -> Markup:
    """A small horizontal bar for progress or spend against budget (over 1: drawn full, in the
    ``over`` class)."""
    if fraction is None:
        return Markup('<span class="muted">–</span>')
    f = max(0.0, fraction)
    over = " over" if f > 1.0 else (" warn" if f > 0.85 and "budget" in cls else "")
    return Markup(
        '<svg class="meter {cls}{over}" viewBox="0 0 {w} 8" width="{w}" height="8" role="img" '
        'aria-label="{label}" xmlns="http://www.w3.org/2000/svg">'
        '<rect class="track" width="{w}" height="8" rx="4"/>'
        '<rect class="fill" width="{fw}" height="8" rx="4"/></svg>'
    ).format(
        cls=cls,
        over=over,
        w=width,
        fw=round(min(1.0, f) * width, 1),
        label=label or f"{f * 100:.0f}%",
    )


def bar_list_svg(items: list[tuple[str, float, str]], width: int = 420) -> Markup:
    """Horizontal bars with labels: ``[(label, value, cls)]`` (instances per region)."""
    if not items:
        return Markup("")
    vmax = max(v for _, v, _ in items) or 1.0
    row, gutter = 20, 150
    parts = [
        Markup(
            '<svg class="chart bars" viewBox="0 0 {w} {h}" role="img" aria-label="bars" '
            'xmlns="http://www.w3.org/2000/svg">'
        ).format(w=width, h=row * len(items) + 4)
    ]
    for i, (label, v, cls) in enumerate(items):
        y = i * row + 2
        parts.append(
            Markup(
                '<g class="{cls}"><text class="lane-label" x="0" y="{ty}">{label}</text>'
                '<rect class="bar" x="{x}" y="{y}" width="{bw}" height="14" rx="3"/>'
                '<text class="tick" x="{vx}" y="{ty}">{v}</text></g>'
            ).format(
                cls=cls,
                ty=y + 11,
                label=_clip(label, 22),
                x=gutter,
                y=y,
                bw=max(2.0, (v / vmax) * (width - gutter - 40)),
                vx=gutter + max(2.0, (v / vmax) * (width - gutter - 40)) + 4,
                v=f"{v:g}",
            )
        )
    parts.append(Markup("</svg>"))
    return Markup("").join(parts)


__all__ = ["bar_list_svg", "escape", "line_chart_svg", "meter_svg", "timeline_svg"]
