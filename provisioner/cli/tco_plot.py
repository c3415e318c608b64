"""The PNG of `provisioner tco --plot`: cumulative cost over the horizon, one line per option
(the cheapest of each kind and term). matplotlib (the `plot` extra) is imported here only."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from provisioner.core.planner.tco_plan import TcoResult
    from provisioner.core.tco import Option


def plot_tco(result: TcoResult, path: str | Path, limit: int = 8) -> None:
    """Write the plot; an upfront payment shows as a step at the month it is paid."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5.5))
    months = list(range(result.profile.horizon_months + 1))
    for o in best_per_kind(result.options, limit):
        xs, ys = _with_steps(months, o.cumulative(), dict(o.upfront_at))
        ax.plot(xs, ys, label=f"{o.provider}:{o.region} {o.label} (${o.total:,.0f})")
    ax.set_xlabel("month")
    ax.set_ylabel("cumulative cost (USD)")
    ax.set_title(f"{result.profile.name} under {result.policy.name}: cost over {months[-1]} months")
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"${v:,.0f}"))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)


def _with_steps(
    months: list[int], cumulative: list[float], upfront: dict[int, float]
) -> tuple[list[float], list[float]]:
    """The curve with a vertical step where an upfront payment is made (month 0 and renewals)."""
    xs: list[float] = []
    ys: list[float] = []
    for m, v in zip(months, cumulative, strict=True):
        if upfront.get(m):
            xs.append(m)
            ys.append(v - upfront[m])
        xs.append(m)
        ys.append(v)
    return xs, ys


def best_per_kind(options: list[Option], limit: int = 8) -> list[Option]:
    """The cheapest option of each kind and term (options come cheapest first)."""
    seen: set[tuple[str, str | None]] = set()
    out = []
    for o in options:
        key = (o.kind, o.term)
        if key in seen:
            continue
        seen.add(key)
        out.append(o)
        if len(out) >= limit:
            break
    return out
