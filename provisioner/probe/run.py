"""One probe of the machine it runs on: what its GPUs actually do, beside their datasheet.

:func:`run_probe` measures, per device, dense matmul throughput in each precision the
hardware has (FP32, TF32, BF16, FP16), device memory bandwidth, host-to-device bandwidth, and,
between the GPUs of a node, peer bandwidth and whether it goes over NVLink or PCIe; NVML is
sampled while the matmuls run (clock, power, temperature, slowdown reasons). Every figure
carries its method and, where policies/gpus.csv has it, the datasheet figure and the
ratio. The report's ``summary.fraction`` is the one number the controller and the planner
use: measured over datasheet matmul throughput in the precision the planner ranks by (BF16,
else FP16, else FP32), of the node's slowest GPU.
"""

from __future__ import annotations

import platform
import socket
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from provisioner.probe import nvml as nvml_
from provisioner.probe.backends import Backend, Device, available_backends
from provisioner.probe.datasheet import compare, headline, model_of

REPORT_VERSION = 1


@dataclass(frozen=True)
class ProbeOptions:
    """How hard to probe. ``quick`` (the default, what the agent runs at start) takes a few
    seconds per GPU; ``full`` the 10,000-class matmul the guides suggest, for longer."""

    size: int | None = None  # matmul n; None: 8192 on a GPU, 1024 on a CPU (quick)
    seconds: float = 0.5  # timed rounds per figure
    buffer_mib: int | None = None  # copy buffers; None: 1024 on a GPU, 64 on a CPU
    all_pairs: bool = False  # peer bandwidth between every pair (else GPU 0 to each other)
    backend: str = "auto"

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ProbeOptions:
        if name == "quick":
            base = cls()
        elif name == "full":
            base = cls(size=10240, seconds=2.0, buffer_mib=2048, all_pairs=True)
        else:
            raise ValueError(f"unknown probe preset {name!r} (quick, full)")
        values = {k: v for k, v in overrides.items() if v is not None}
        return cls(**{**base.__dict__, **values})

    def matrix(self, device: Device) -> int:
        return self.size or (8192 if device.kind == "gpu" else 1024)

    def buffer(self, device: Device) -> int:
        return (self.buffer_mib or (1024 if device.kind == "gpu" else 64)) * 2**20


def _iso(dt: datetime) -> str:
    return dt.isoformat(timespec="seconds").replace("+00:00", "Z")


def run_probe(
    options: ProbeOptions | None = None,
    *,
    backend: Backend | None = None,
    nvml: Any = None,
    gpu_model: str | None = None,
    progress: Any = None,
) -> dict[str, Any]:
    """Measure this machine; the report as a JSON-ready dict (see the module's docstring).

    ``backend`` and ``nvml`` are for injection (tests, the GPU check); by default the best
    installed backend and the ``pynvml`` module. ``gpu_model`` overrides the datasheet lookup
    by device name. ``progress(text)`` is told what is being measured."""
    opts = options or ProbeOptions()
    started = time.perf_counter()
    notes: list[str] = []
    if backend is None:
        backend, passed = available_backends(opts.backend)
        notes += passed
    say = progress or (lambda _text: None)

    nv_doc: dict[str, Any] = {"available": False}
    nv_mod = None
    try:
        nv_mod = nvml_.load(nvml)
        nv_doc = {
            "available": True,
            "driver": nvml_.driver_version(nv_mod),
            "idle": [s.as_dict() for s in nvml_.sample(nv_mod)],
        }
    except nvml_.NVMLUnavailable as exc:
        nv_doc["note"] = str(exc)
    except Exception as exc:
        nv_doc["note"] = f"NVML failed: {exc}"
        nv_mod = None

    devices = backend.devices()
    dev_docs = []
    figures: list[dict[str, Any]] = []
    sampler = None
    if nv_mod is not None:
        sampler = nvml_.Sampler(nv_mod)
        sampler.start()
    try:
        for dev in devices:
            model = gpu_model or (model_of(dev.name) if dev.kind == "gpu" else None)
            dev_docs.append(
                {
                    "index": dev.index,
                    "name": dev.name,
                    "kind": dev.kind,
                    "model": model,
                    "compute_capability": None
                    if dev.compute_capability is None
                    else ".".join(map(str, dev.compute_capability)),
                    "memory_gib": None
                    if dev.memory_bytes is None
                    else round(dev.memory_bytes / 2**30, 1),
                }
            )
            n = opts.matrix(dev)
            for prec in backend.precisions(dev):
                say(f"device {dev.index}: {prec.upper()} matmul {n}x{n}")
                value = backend.matmul_tflops(dev, prec, n, opts.seconds)
                figures.append(
                    compare(
                        f"matmul_{prec}",
                        dev.index,
                        value,
                        f"{backend.name}: {n}x{n} {prec.upper()} matmul, 2n³ FLOP per call, "
                        f"best of rounds over {opts.seconds:g} s",
                        model,
                    )
                )
            nbytes = opts.buffer(dev)
            say(f"device {dev.index}: memory copy {nbytes >> 20} MiB")
            figures.append(
                compare(
                    "memory_copy",
                    dev.index,
                    backend.copy_gbs(dev, nbytes, opts.seconds),
                    f"{backend.name}: {'device-to-device' if dev.kind == 'gpu' else 'host memory'} "
                    f"copy of {nbytes >> 20} MiB, "
                    "read + written bytes",
                    model,
                )
            )
            h2d = backend.h2d_gbs(dev, nbytes, opts.seconds)
            if h2d is not None:
                say(f"device {dev.index}: host-to-device {nbytes >> 20} MiB")
                figures.append(
                    compare(
                        "host_to_device",
                        dev.index,
                        h2d,
                        f"{backend.name}: pinned host buffer of {nbytes >> 20} MiB to the device",
                        model,
                    )
                )
    finally:
        load = sampler.stop() if sampler is not None else []
    if nv_mod is not None:
        nv_doc["under_load"] = nvml_.under_load(load)

    peers = _peers(backend, devices, opts, nv_mod, gpu_model, say)
    figures += peers
    if nv_mod is not None:
        import contextlib

        with contextlib.suppress(Exception):
            nv_mod.nvmlShutdown()

    gpus = [d for d in dev_docs if d["kind"] == "gpu"]
    summary = headline(figures, gpus)
    if not gpus:
        summary["note"] = "no GPU found: CPU figures only, nothing to compare with a datasheet"
    return {
        "version": REPORT_VERSION,
        "at": _iso(datetime.now(UTC)),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "backend": backend.name,
        "backend_notes": notes,
        "options": {
            "size": opts.size,
            "seconds": opts.seconds,
            "buffer_mib": opts.buffer_mib,
            "all_pairs": opts.all_pairs,
        },
        "devices": dev_docs,
        "figures": figures,
        "nvml": nv_doc,
        "summary": summary,
        "elapsed_s": round(time.perf_counter() - started, 2),
    }


def _peers(
    backend: Backend,
    devices: list[Device],
    opts: ProbeOptions,
    nv_mod: Any,
    gpu_model: str | None,
    say: Any,
) -> list[dict[str, Any]]:
    gpus = [d for d in devices if d.kind == "gpu"]
    if len(gpus) < 2:
        return []
    pairs = (
        [(a, b) for a in gpus for b in gpus if a.index != b.index]
        if opts.all_pairs
        else [(gpus[0], b) for b in gpus[1:]]
    )
    out = []
    for a, b in pairs:
        nbytes = opts.buffer(a)
        say(f"peer {a.index} -> {b.index}: {nbytes >> 20} MiB")
        value = backend.peer_gbs(a, b, nbytes, opts.seconds)
        path = nvml_.peer_path(nv_mod, a.index, b.index) if nv_mod is not None else "unknown"
        model = gpu_model or model_of(a.name)
        if value is None:
            out.append(
                {
                    "name": "peer",
                    "device": a.index,
                    "peer": b.index,
                    "value": None,
                    "unit": "GB/s",
                    "path": path,
                    "method": f"{backend.name}: no peer access between {a.index} and {b.index}"
                    " (copies go through the host)",
                    "datasheet": None,
                    "ratio": None,
                }
            )
            continue
        fig = compare(
            "peer",
            a.index,
            value,
            f"{backend.name}: {nbytes >> 20} MiB copied GPU {a.index} -> GPU {b.index}, "
            "one direction",
            model,
            path=path,
        )
        fig["peer"] = b.index
        out.append(fig)
    return out
