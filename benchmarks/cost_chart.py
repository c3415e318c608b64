"""The chart of ``cost_bench.py`` (moved out of it to keep it under 500 lines)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from provisioner.core.strategies import COMPARED


def draw(
    rep: dict[str, Any],
    path: Path,
    label: dict[str, str],
    published: dict[str, tuple[float, float]],
    aim: float,
) -> None:
    """Table 3's hours beside the published ones; cost / optimum over C/D, one and three
    zones."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    ax = axes[0]
    c = next(x for x in rep["table3"] if x["d_min"] == 12.0)
    names = [*COMPARED, "optimum"]
    od = [
        c["policies"][n]["on_demand_work_hours"]
        if n in c["policies"]
        else c["optimum"].get("od_work_hours", 0)
        for n in names
    ]
    sp = [
        c["policies"][n]["spot_work_hours"]
        if n in c["policies"]
        else c["optimum"].get("spot_work_hours", 0)
        for n in names
    ]
    x = np.arange(len(names))
    ax.bar(x - 0.2, od, 0.4, label="on-demand h", color="#c05621")
    ax.bar(x + 0.2, sp, 0.4, label="spot h", color="#2b6cb0")
    for i, n in enumerate(names):
        if n in published:
            ax.plot([i - 0.4, i], [published[n][0]] * 2, "k--", linewidth=1)
            ax.plot([i, i + 0.4], [published[n][1]] * 2, "k--", linewidth=1)
    ax.set_xticks(
        x,
        [label[n].replace(" (provisioner)", "") for n in names],
        rotation=25,
        ha="right",
        fontsize=8,
    )
    ax.set_title("Table 3 setting (d = 0.2 h): hours; dashed = published", fontsize=9)
    ax.legend(fontsize=8)
    for ax, zones in zip(axes[1:], (1, 3), strict=True):
        for n in COMPARED:
            if n == "on-demand":
                continue
            pts = sorted(
                (cc["frac"], cc["policies"][n]["cost_over_optimum_mean"])
                for cc in rep["grid"]
                if cc["zones"] == zones
                and not cc["set"].startswith("held-out")
                and cc["work_h"] == 48.0
                and cc["d_min"] == 12.0
                and not cc["set"].startswith("held-out")
            )
            if pts:
                style = "--" if n == "eager-next-region" else "-"
                ax.plot(*zip(*pts, strict=True), style, marker="o", label=label[n])
        ax.axhline(aim, color="grey", linestyle=":", linewidth=1)
        ax.set_xlabel("job fraction C/D")
        ax.set_ylabel("mean cost / optimum")
        ax.set_title(f"2023-02-15, {zones} zone(s), C = 48 h, d = 12 min", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
