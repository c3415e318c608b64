"""The picture of one simulated window: spot capacity, the market chosen, cumulative cost."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from provisioner.core.strategies import ON_DEMAND, SPOT
from provisioner.simulate.engine import Timeline


def plot_timeline(
    tl: Timeline,
    zones: list[str],
    path: str | Path,
    *,
    title: str = "",
    deadline_h: float | None = None,
) -> None:
    """Write a three-panel PNG: capacity per zone, market over time, cumulative cost."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.asarray(tl.t_h)
    step = float(t[1] - t[0]) if len(t) > 1 else 1.0
    avail = np.asarray(tl.avail, dtype=bool).reshape(len(t), -1)
    market = np.asarray(tl.market)
    zone = np.asarray(tl.zone)
    fig, axes = plt.subplots(
        3,
        1,
        figsize=(11, 6.5),
        sharex=True,
        gridspec_kw={"height_ratios": [max(1, len(zones)), 1, 2]},
    )
    ax = axes[0]
    for z in range(len(zones)):
        ax.broken_barh(_runs(t, avail[:, z], step), (z - 0.4, 0.8), color="#4c9f70")
    ax.set_yticks(range(len(zones)), zones)
    ax.set_ylabel("spot up")
    ax = axes[1]
    cmap = plt.get_cmap("tab10")
    colors = [cmap(i) for i in range(10)]
    for z in range(len(zones)):
        on_z = (market == SPOT) & (zone == z)
        color = "#2b6cb0" if len(zones) == 1 else colors[z % len(colors)]
        ax.broken_barh(_runs(t, on_z, step), (0.6, 0.8), color=color, label=zones[z])
    ax.broken_barh(_runs(t, market == ON_DEMAND, step), (-0.4, 0.8), color="#c05621")
    ax.set_ylim(-0.6, 1.6)
    ax.set_yticks([0, 1], ["on-demand", "spot"])
    ax.set_ylabel("market")
    if len(zones) > 1:
        ax.legend(loc="upper right", fontsize="small", ncol=len(zones))
    ax = axes[2]
    ax.plot(t, tl.cost, color="black")
    ax.set_ylabel("cost (USD)")
    ax.set_xlabel("hours from the job's start")
    if deadline_h is not None:
        for a in axes:
            a.axvline(deadline_h, color="red", linestyle="--", linewidth=1)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _runs(t: np.ndarray, on: np.ndarray, step: float) -> list[tuple[float, float]]:
    """(start, width) of each run of True in ``on``."""
    if not len(on):
        return []
    edges = np.flatnonzero(np.diff(np.concatenate([[0], on.astype(np.int8), [0]])))
    return [
        (float(t[a]), float((b - a) * step)) for a, b in zip(edges[::2], edges[1::2], strict=True)
    ]
