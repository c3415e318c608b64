"""The PNG of ``provisioner cost --plot``: cumulative spend over time (matplotlib, lazily)."""

from __future__ import annotations

from datetime import datetime
from typing import Any


def plot_spend(
    curve: list[tuple[datetime, float]], path: str, *, title: str, estimate: float | None
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4), dpi=100)
    if curve:
        times: list[Any] = [t for t, _ in curve]
        ax.plot(times, [v for _, v in curve], label="billed (cumulative)")
    if estimate is not None:
        ax.axhline(estimate, linestyle="--", color="grey", label="estimate at launch")
    ax.set_xlabel("time (UTC)")
    ax.set_ylabel("USD")
    ax.set_title(title)
    ax.legend(loc="upper left")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
