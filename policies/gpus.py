"""GPU specifications (policies/gpus.csv) and name normalisation across clouds."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from importlib import resources


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """One GPU model with the figures that decide whether and how well it fits a job."""

    model: str
    vendor: str
    vram_gb: float
    mem_bandwidth_gbs: float | None = None
    fp32_tflops: float | None = None
    tf32_tflops: float | None = None
    bf16_tflops: float | None = None
    fp16_tflops: float | None = None
    interconnect: str = ""
    interconnect_gbs: float | None = None
    host_link_gbs: float | None = None  # host-to-device link (PCIe x16), one direction
    tdp_w: float | None = None
    aliases: tuple[str, ...] = ()
    source: str = ""

    @property
    def tensor_tflops(self) -> float:
        """Best dense half-precision (BF16, else FP16, else FP32) throughput, in TFLOPS."""
        return self.bf16_tflops or self.fp16_tflops or self.fp32_tflops or 0.0


def _f(text: str) -> float | None:
    text = text.strip()
    return float(text) if text else None


@cache
def gpu_specs() -> dict[str, GPUSpec]:
    """Every known GPU by canonical model name."""
    out: dict[str, GPUSpec] = {}
    with resources.files("policies").joinpath("gpus.csv").open(encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            spec = GPUSpec(
                model=row["model"],
                vendor=row["vendor"],
                vram_gb=float(row["vram_gb"]),
                mem_bandwidth_gbs=_f(row["mem_bandwidth_gbs"]),
                fp32_tflops=_f(row["fp32_tflops"]),
                tf32_tflops=_f(row["tf32_tflops"]),
                bf16_tflops=_f(row["bf16_tflops"]),
                fp16_tflops=_f(row["fp16_tflops"]),
                interconnect=row["interconnect"],
                interconnect_gbs=_f(row["interconnect_gbs"]),
                host_link_gbs=_f(row.get("host_link_gbs") or ""),
                tdp_w=_f(row.get("tdp_w") or ""),
                aliases=tuple(a for a in row["aliases"].split("|") if a),
                source=row["source"],
            )
            out[spec.model] = spec
    return out


def _norm(name: str) -> str:
    return "".join(c for c in name.lower() if c.isalnum())


@cache
def _alias_table() -> dict[str, str]:
    table: dict[str, str] = {}
    for spec in gpu_specs().values():
        table[_norm(spec.model)] = spec.model
        for alias in spec.aliases:
            table.setdefault(_norm(alias), spec.model)
    return table


def canonical_gpu(name: str | None) -> str | None:
    """The canonical model for a name as a cloud or catalog spells it, or None if unknown.

    ``nvidia-tesla-t4``, ``T4``, ``t4`` -> ``T4``; ``a100-80gb`` -> ``A100-80GB``.
    """
    if not name:
        return None
    key = _norm(name)
    table = _alias_table()
    if key in table:
        return table[key]
    for prefix in ("nvidia", "nvidiatesla", "tesla", "amd", "amdinstinct", "instinct"):
        if key.startswith(prefix) and key[len(prefix) :] in table:
            return table[key[len(prefix) :]]
    return None


def gpu_spec(name: str) -> GPUSpec | None:
    model = canonical_gpu(name)
    return gpu_specs().get(model) if model else None
