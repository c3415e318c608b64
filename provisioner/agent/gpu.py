"""GPU probe: utilisation and memory per GPU from ``nvidia-smi``; no GPU (or no driver) is fine."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

QUERY = "index,name,utilization.gpu,memory.used,memory.total"


def probe_gpus(nvidia_smi: str | None = None, timeout: float = 5.0) -> list[dict[str, Any]] | None:
    """One row per GPU (index, name, utilization_pct, memory_used_mib, memory_total_mib).

    None when there is no ``nvidia-smi`` or it fails (no GPU, no driver); an empty list never
    means "a GPU that reports nothing".
    """
    exe = nvidia_smi or shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    rows = parse_nvidia_smi(out.stdout)
    return rows or None


def parse_nvidia_smi(text: str) -> list[dict[str, Any]]:
    """Rows of ``--query-gpu=index,name,utilization.gpu,memory.used,memory.total`` CSV."""
    rows: list[dict[str, Any]] = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5:
            continue
        rows.append(
            {
                "index": _int(parts[0]),
                "name": parts[1],
                "utilization_pct": _num(parts[2]),
                "memory_used_mib": _num(parts[3]),
                "memory_total_mib": _num(parts[4]),
            }
        )
    return rows


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def _int(text: str) -> int | None:
    value = _num(text)
    return None if value is None else int(value)
