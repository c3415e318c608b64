"""The agent's GPU utilisation: where samples come from, and how long the GPUs have been idle.

Sources (``AgentSpec.gpu_source``):

- ``""`` or ``nvml``: NVML through ``pynvml`` (none on a machine without a GPU or driver);
- ``file:PATH``: a JSON file someone else keeps up to date, ``{"utilization_pct": 40}`` or a
  list of such rows (one per GPU). The sim cloud has no GPU: its sandboxes point the agent
  at a file the job writes (``$PROVISIONER_GPU_FILE``), so that an example job can stop
  "using its GPU" and the idle policy can be seen to work;
- ``none``: no samples.

:class:`IdleTracker` is pure: given samples and their times, since when every GPU has been
under the threshold (None while any is busy, or nothing is known).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

ENV_GPU_FILE = "PROVISIONER_GPU_FILE"


class UtilisationSource:
    def __init__(self, source: str, workdir: Path, nvml: Any = None) -> None:
        self.source = source or "nvml"
        self.nvml = nvml
        self.path: Path | None = None
        if self.source.startswith("file:"):
            p = Path(self.source[len("file:") :])
            self.path = p if p.is_absolute() else workdir / p
        elif self.source not in ("nvml", "none"):
            raise ValueError(f"gpu_source: {source!r} (use nvml, none or file:PATH)")

    def sample(self) -> list[dict[str, Any]] | None:
        """One row per GPU (``utilization_pct`` at least), or None when nothing is known."""
        if self.source == "none":
            return None
        if self.path is not None:
            return read_file(self.path)
        from provisioner.probe.nvml import sample_gpus

        return sample_gpus(self.nvml)


def read_file(path: Path) -> list[dict[str, Any]] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    rows = doc if isinstance(doc, list) else [doc]
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            return None
        util = row.get("utilization_pct")
        if not isinstance(util, int | float):
            return None
        out.append({"index": int(row.get("index", i)), **row, "utilization_pct": float(util)})
    return out or None


@dataclass
class IdleTracker:
    """Since when all GPUs have been under ``threshold_pct`` (None while any is busy)."""

    threshold_pct: float
    since: datetime | None = None
    last_pct: float | None = None  # the busiest GPU in the last sample

    def observe(self, rows: list[dict[str, Any]] | None, at: datetime) -> None:
        utils = [r["utilization_pct"] for r in rows or () if r.get("utilization_pct") is not None]
        if not utils:  # nothing known: neither idle nor busy; the clock is not started
            self.last_pct = None
            self.since = None
            return
        self.last_pct = max(utils)
        if self.last_pct >= self.threshold_pct:
            self.since = None
        elif self.since is None:
            self.since = at

    def idle_for_s(self, now: datetime) -> float:
        return 0.0 if self.since is None else max(0.0, (now - self.since).total_seconds())
