"""Measured figures beside the datasheet (policies/gpus.csv): pure functions."""

from __future__ import annotations

from typing import Any

from policies.gpus import GPUSpec, canonical_gpu, gpu_specs

#: Figure name -> (GPUSpec attribute, unit, how the datasheet figure is read).
DATASHEET = {
    "matmul_fp32": ("fp32_tflops", "TFLOPS", "datasheet FP32 (non-tensor) peak"),
    "matmul_tf32": ("tf32_tflops", "TFLOPS", "datasheet TF32 dense tensor peak"),
    "matmul_bf16": ("bf16_tflops", "TFLOPS", "datasheet BF16 dense tensor peak"),
    "matmul_fp16": ("fp16_tflops", "TFLOPS", "datasheet FP16 dense tensor peak"),
    "memory_copy": ("mem_bandwidth_gbs", "GB/s", "datasheet memory bandwidth"),
    "host_to_device": ("host_link_gbs", "GB/s", "host link (PCIe x16), one direction"),
    "peer": ("interconnect_gbs", "GB/s", "GPU-to-GPU interconnect, half the bidirectional total"),
}
#: The precision the planner ranks by (GPUSpec.tensor_tflops): the first the datasheet has.
HEADLINE_ORDER = ("bf16", "fp16", "fp32")


def _sig(x: float) -> float:
    """Four significant figures (a CPU against an A100 is 0.0007, not 0.0)."""
    return float(f"{x:.4g}")


def model_of(name: str | None) -> str | None:
    """The canonical GPU model for a device name as a driver reports it ("NVIDIA H100 80GB
    HBM3" -> H100): the whole name, else the name with trailing words dropped."""
    if not name:
        return None
    words = name.replace("_", " ").split()
    for end in range(len(words), 0, -1):
        model = canonical_gpu(" ".join(words[:end]))
        if model is not None:
            return model
    return None


def datasheet_value(spec: GPUSpec | None, figure: str) -> float | None:
    if spec is None or figure not in DATASHEET:
        return None
    value = getattr(spec, DATASHEET[figure][0], None)
    if value is None:
        return None
    return float(value) / 2.0 if figure == "peer" else float(value)


def compare(
    name: str,
    device: int,
    value: float,
    method: str,
    model: str | None,
    **extra: Any,
) -> dict[str, Any]:
    """One figure as the report holds it: value, unit, method, datasheet and ratio."""
    spec = gpu_specs().get(model) if model else None
    sheet = datasheet_value(spec, name)
    unit = DATASHEET.get(name, ("", "", ""))[1]
    doc: dict[str, Any] = {
        "name": name,
        "device": device,
        "value": _sig(value),  # significant figures: a slow CPU's 0.0004 TFLOPS is not 0
        "unit": unit,
        "method": method,
        "datasheet": sheet,
        "datasheet_source": None if sheet is None else f"gpus.csv {model}: {DATASHEET[name][2]}",
        "ratio": None if not sheet else _sig(value / sheet),
    }
    doc.update(extra)
    return doc


def headline(figures: list[dict[str, Any]], gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """The node's summary: GPU model and count, the precision compared, measured TFLOPS per
    GPU, and ``fraction`` (the slowest GPU's measured/datasheet ratio in that precision)."""
    models = sorted({g["model"] for g in gpus if g.get("model")})
    out: dict[str, Any] = {
        "gpu": models[0] if len(models) == 1 else (",".join(models) or None),
        "gpu_count": len(gpus),
        "precision": None,
        "tflops_per_gpu": None,
        "tflops": None,
        "fraction": None,
        "fraction_by_gpu": {},
    }
    by_name: dict[str, dict[int, dict[str, Any]]] = {}
    for f in figures:
        if f.get("name", "").startswith("matmul_"):
            by_name.setdefault(f["name"][len("matmul_") :], {})[int(f["device"])] = f
    gpu_ids = {int(g["index"]) for g in gpus}
    for prec in HEADLINE_ORDER:
        rows = {d: f for d, f in by_name.get(prec, {}).items() if d in gpu_ids}
        if not rows or any(f.get("ratio") is None for f in rows.values()):
            continue
        ratios = {d: float(f["ratio"]) for d, f in rows.items()}
        values = [float(f["value"]) for f in rows.values()]
        out.update(
            precision=prec,
            tflops_per_gpu=round(min(values), 3),
            tflops=round(sum(values), 3),
            fraction=_sig(min(ratios.values())),
            fraction_by_gpu={str(d): r for d, r in sorted(ratios.items())},
        )
        break
    if out["precision"] is None and gpus:
        out["note"] = "no matmul figure with a datasheet to compare against"
    return out
