"""HTML pages from the queries' data: Jinja2 templates shipped in the package, autoescaped
(every string from the store is escaped unless it is a chart already built with escaping)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from provisioner.dashboard import charts


def money(v: float | None, digits: int | None = None) -> str:
    if v is None:
        return "–"
    if digits is not None:
        return f"${v:,.{digits}f}"
    if abs(v) >= 100:
        return f"${v:,.0f}"
    if abs(v) >= 1:
        return f"${v:,.2f}"
    return f"${v:.4f}"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    s = abs(int(seconds))
    d, rem = divmod(s, 86400)
    h, rem = divmod(rem, 3600)
    m, sec = divmod(rem, 60)
    if d:
        out = f"{d}d {h}h"
    elif h:
        out = f"{h}h {m}m"
    elif m:
        out = f"{m}m {sec}s"
    else:
        out = f"{sec}s"
    return out if seconds >= 0 else f"-{out}"


def when(dt: datetime | None) -> str:
    return "–" if dt is None else f"{dt:%Y-%m-%d %H:%M:%S} UTC"


def iso(dt: datetime | None) -> str:
    return "" if dt is None else dt.isoformat()


def pct(v: float | None) -> str:
    return "–" if v is None else f"{v * 100:.0f}%"


def price_series(
    history: dict[str, dict[str, list[tuple[datetime, float]]]], market: str, most: int = 8
) -> list[dict[str, Any]]:
    """Chart series of one market's cheapest $/GPU-h per (cloud, GPU): the ``most`` with the
    most points (ties: the cheapest last price first)."""
    rows = [(name, m[market]) for name, m in history.items() if m.get(market)]
    rows.sort(key=lambda r: (-len(r[1]), r[1][-1][1], r[0]))
    return [
        {"name": name, "cls": f"s{i}", "points": pts} for i, (name, pts) in enumerate(rows[:most])
    ]


class Renderer:
    def __init__(self, store_url: str = "", source: str = "") -> None:
        from provisioner import __version__
        from provisioner.control.store import redacted_url

        self.env = Environment(
            loader=PackageLoader("provisioner.dashboard", "templates"),
            autoescape=select_autoescape(["html"], default=True),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(money=money, duration=duration, when=when, iso=iso, pct=pct)
        self.env.globals.update(
            timeline_svg=charts.timeline_svg,
            line_chart_svg=charts.line_chart_svg,
            meter_svg=charts.meter_svg,
            bar_list_svg=charts.bar_list_svg,
            price_series=price_series,
            version=__version__,
            store=redacted_url(store_url) if store_url else "",
            source=source,
            timedelta=timedelta,
        )

    def page(
        self,
        template: str,
        doc: dict[str, Any],
        *,
        now: datetime,
        path: str,
        query: dict[str, list[str]],
        t0: float,
    ) -> str:
        flat = {k: v[0] for k, v in query.items() if v and k not in ("token", "format")}

        def link(**changes: Any) -> str:
            q = {**flat, **{k: v for k, v in changes.items()}}
            q = {k: v for k, v in q.items() if v not in (None, "")}
            return path + ("?" + urlencode(q) if q else "")

        return self.env.get_template(template).render(
            d=doc,
            now=now,
            path=path,
            link=link,
            json_link=link(format="json"),
            elapsed_ms=lambda: f"{(time.perf_counter() - t0) * 1000:.0f}",
        )

    def error(self, status: int, title: str, message: str) -> str:
        # no store address or daemon name on error pages: a 401 tells a stranger nothing
        return self.env.get_template("error.html").render(
            status=status, title=title, message=message, path="", json_link="", store="", source=""
        )
