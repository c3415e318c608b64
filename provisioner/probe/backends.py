"""Where the probe's arithmetic runs: torch (CUDA), CuPy, or numpy on the CPU (the floor).

Each backend measures the same things the same way, and says how (``method``):

- dense matmul throughput: ``n x n @ n x n`` repeated for the time given, ``2·n³`` FLOP each,
  after a warm-up; the rate is the best of the timed rounds (the card's capability, not the
  noise of a shared host);
- device memory bandwidth: a device-to-device copy of a large buffer, counted as bytes read
  plus bytes written (as STREAM's copy counts it);
- host-to-device: a pinned host buffer copied to the device;
- peer: a buffer copied from one GPU to another (one direction).

GPU timings use the device's own events (torch.cuda.Event / cupy.cuda.Event), so the host's
clock and launch latency stay out of the figure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


@dataclass(frozen=True)
class Device:
    index: int
    name: str
    kind: str  # "gpu" or "cpu"
    compute_capability: tuple[int, int] | None = None
    memory_bytes: int | None = None


class Backend(Protocol):
    name: str

    def devices(self) -> list[Device]: ...

    def precisions(self, device: Device) -> list[str]: ...

    def matmul_tflops(self, device: Device, precision: str, n: int, seconds: float) -> float: ...

    def copy_gbs(self, device: Device, nbytes: int, seconds: float) -> float: ...

    def h2d_gbs(self, device: Device, nbytes: int, seconds: float) -> float | None: ...

    def peer_gbs(self, src: Device, dst: Device, nbytes: int, seconds: float) -> float | None: ...


def timed_rounds(run: Callable[[], float], seconds: float, min_rounds: int = 3) -> float:
    """Call ``run`` (which returns the seconds one round took) until ``seconds`` of wall time
    have passed and at least ``min_rounds`` rounds ran; the fastest round's time."""
    best = float("inf")
    start = time.perf_counter()
    rounds = 0
    while rounds < min_rounds or time.perf_counter() - start < seconds:
        best = min(best, run())
        rounds += 1
        if rounds >= 10_000:
            break
    return best


# -- numpy (the CPU floor) ---------------------------------------------------------------------


class NumpyBackend:
    """The CPU, through numpy's BLAS: FP32 matmul and memory copy; no device, no peers."""

    name = "numpy"

    def __init__(self) -> None:
        import numpy as np

        self.np = np

    def devices(self) -> list[Device]:
        import os
        import platform

        name = platform.processor() or platform.machine() or "cpu"
        return [Device(0, f"CPU {name} ({os.cpu_count()} threads)", "cpu")]

    def precisions(self, device: Device) -> list[str]:
        return ["fp32"]  # numpy's FP16 matmul is not BLAS: measuring it would mislead

    def matmul_tflops(self, device: Device, precision: str, n: int, seconds: float) -> float:
        np = self.np
        rng = np.random.default_rng(0)
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        out = np.empty((n, n), dtype=np.float32)
        np.matmul(a, b, out=out)  # warm-up

        def one() -> float:
            t0 = time.perf_counter()
            np.matmul(a, b, out=out)
            return time.perf_counter() - t0

        best = timed_rounds(one, seconds)
        return 2.0 * n**3 / best / 1e12

    def copy_gbs(self, device: Device, nbytes: int, seconds: float) -> float:
        np = self.np
        src = np.ones(nbytes // 4, dtype=np.float32)
        dst = np.empty_like(src)
        np.copyto(dst, src)

        def one() -> float:
            t0 = time.perf_counter()
            np.copyto(dst, src)
            return time.perf_counter() - t0

        best = timed_rounds(one, seconds)
        return 2.0 * src.nbytes / best / 1e9

    def h2d_gbs(self, device: Device, nbytes: int, seconds: float) -> float | None:
        return None

    def peer_gbs(self, src: Device, dst: Device, nbytes: int, seconds: float) -> float | None:
        return None


# -- torch -------------------------------------------------------------------------------------


class TorchBackend:
    """CUDA (or ROCm) GPUs through torch; TF32 is switched on only for the TF32 figure."""

    name = "torch"

    def __init__(self) -> None:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch is installed but sees no GPU")
        self.torch = torch

    def devices(self) -> list[Device]:
        t = self.torch
        out = []
        for i in range(t.cuda.device_count()):
            p = t.cuda.get_device_properties(i)
            out.append(Device(i, p.name, "gpu", (p.major, p.minor), int(p.total_memory)))
        return out

    def precisions(self, device: Device) -> list[str]:
        major = (device.compute_capability or (0, 0))[0]
        got = ["fp32"]
        if major >= 8:
            got += ["tf32", "bf16"]
        if major >= 7:
            got.append("fp16")  # tensor cores from Volta on
        return got

    def _time(self, device: Device, fn: Callable[[], Any], seconds: float) -> float:
        t = self.torch
        with t.cuda.device(device.index):
            fn()
            t.cuda.synchronize()
            start, end = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)

            def one() -> float:
                start.record()
                fn()
                end.record()
                end.synchronize()
                return float(start.elapsed_time(end)) / 1000.0

            return timed_rounds(one, seconds)

    def matmul_tflops(self, device: Device, precision: str, n: int, seconds: float) -> float:
        t = self.torch
        t.cuda.empty_cache()  # what the last figure left behind
        dtype = {"fp32": t.float32, "tf32": t.float32, "bf16": t.bfloat16, "fp16": t.float16}[
            precision
        ]
        dev = f"cuda:{device.index}"
        a = t.randn(n, n, device=dev, dtype=dtype)
        b = t.randn(n, n, device=dev, dtype=dtype)
        out = t.empty(n, n, device=dev, dtype=dtype)
        was = t.backends.cuda.matmul.allow_tf32
        t.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        try:
            best = self._time(device, lambda: t.matmul(a, b, out=out), seconds)
        finally:
            t.backends.cuda.matmul.allow_tf32 = was
        return 2.0 * n**3 / best / 1e12

    def copy_gbs(self, device: Device, nbytes: int, seconds: float) -> float:
        t = self.torch
        t.cuda.empty_cache()  # what the last figure left behind
        dev = f"cuda:{device.index}"
        src = t.empty(nbytes, dtype=t.uint8, device=dev).fill_(1)
        dst = t.empty_like(src)
        best = self._time(device, lambda: dst.copy_(src), seconds)
        return 2.0 * nbytes / best / 1e9

    def h2d_gbs(self, device: Device, nbytes: int, seconds: float) -> float | None:
        t = self.torch
        t.cuda.empty_cache()  # what the last figure left behind
        host = t.empty(nbytes, dtype=t.uint8).pin_memory()
        dst = t.empty(nbytes, dtype=t.uint8, device=f"cuda:{device.index}")
        best = self._time(device, lambda: dst.copy_(host, non_blocking=True), seconds)
        return nbytes / best / 1e9

    def peer_gbs(self, src: Device, dst: Device, nbytes: int, seconds: float) -> float | None:
        t = self.torch
        t.cuda.empty_cache()  # what the last figure left behind
        if not t.cuda.can_device_access_peer(src.index, dst.index):
            return None
        a = t.empty(nbytes, dtype=t.uint8, device=f"cuda:{src.index}").fill_(1)
        b = t.empty(nbytes, dtype=t.uint8, device=f"cuda:{dst.index}")
        best = self._time(src, lambda: b.copy_(a, non_blocking=True), seconds)
        return nbytes / best / 1e9


# -- CuPy --------------------------------------------------------------------------------------


class CupyBackend:
    """CUDA GPUs through CuPy (no BF16 or TF32 switch there: FP32 and FP16)."""

    name = "cupy"

    def __init__(self) -> None:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("CuPy is installed but sees no GPU")
        self.cp = cupy

    def devices(self) -> list[Device]:
        cp = self.cp
        out = []
        for i in range(cp.cuda.runtime.getDeviceCount()):
            p = cp.cuda.runtime.getDeviceProperties(i)
            name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
            cc = (int(p["major"]), int(p["minor"]))
            out.append(Device(i, name, "gpu", cc, int(p["totalGlobalMem"])))
        return out

    def precisions(self, device: Device) -> list[str]:
        major = (device.compute_capability or (0, 0))[0]
        return ["fp32", "fp16"] if major >= 7 else ["fp32"]

    def _time(self, device: Device, fn: Callable[[], Any], seconds: float) -> float:
        cp = self.cp
        with cp.cuda.Device(device.index):
            fn()
            cp.cuda.Device(device.index).synchronize()
            start, end = cp.cuda.Event(), cp.cuda.Event()

            def one() -> float:
                start.record()
                fn()
                end.record()
                end.synchronize()
                return float(cp.cuda.get_elapsed_time(start, end)) / 1000.0

            return timed_rounds(one, seconds)

    def matmul_tflops(self, device: Device, precision: str, n: int, seconds: float) -> float:
        cp = self.cp
        dtype = {"fp32": cp.float32, "fp16": cp.float16}[precision]
        with cp.cuda.Device(device.index):
            a = cp.random.standard_normal((n, n), dtype=cp.float32).astype(dtype)
            b = cp.random.standard_normal((n, n), dtype=cp.float32).astype(dtype)
            out = cp.empty((n, n), dtype=dtype)
            best = self._time(device, lambda: cp.matmul(a, b, out=out), seconds)
        return 2.0 * n**3 / best / 1e12

    def copy_gbs(self, device: Device, nbytes: int, seconds: float) -> float:
        cp = self.cp
        with cp.cuda.Device(device.index):
            src = cp.ones(nbytes, dtype=cp.uint8)
            dst = cp.empty_like(src)
            best = self._time(device, lambda: cp.copyto(dst, src), seconds)
        return 2.0 * nbytes / best / 1e9

    def h2d_gbs(self, device: Device, nbytes: int, seconds: float) -> float | None:
        cp = self.cp
        import numpy as np

        mem = cp.cuda.alloc_pinned_memory(nbytes)
        host = np.frombuffer(mem, dtype=np.uint8, count=nbytes)
        with cp.cuda.Device(device.index):
            dst = cp.empty(nbytes, dtype=cp.uint8)
            best = self._time(device, lambda: dst.set(host), seconds)
        return nbytes / best / 1e9

    def peer_gbs(self, src: Device, dst: Device, nbytes: int, seconds: float) -> float | None:
        cp = self.cp
        if not cp.cuda.runtime.deviceCanAccessPeer(src.index, dst.index):
            return None
        with cp.cuda.Device(src.index):
            a = cp.ones(nbytes, dtype=cp.uint8)
        with cp.cuda.Device(dst.index):
            b = cp.empty(nbytes, dtype=cp.uint8)
        return (
            nbytes / self._time(src, lambda: b.data.copy_from_device(a.data, nbytes), seconds) / 1e9
        )


def available_backends(wanted: str = "auto") -> tuple[Backend, list[str]]:
    """The backend to use and why the better ones were passed over (``auto``: torch with a
    GPU, else CuPy with a GPU, else numpy)."""
    order = ["torch", "cupy", "numpy"] if wanted == "auto" else [wanted]
    makers: dict[str, Callable[[], Backend]] = {
        "torch": TorchBackend,
        "cupy": CupyBackend,
        "numpy": NumpyBackend,
    }
    notes: list[str] = []
    for name in order:
        if name not in makers:
            raise ValueError(f"unknown backend {name!r} (auto, torch, cupy, numpy)")
        try:
            return makers[name](), notes
        except ImportError:
            if wanted != "auto":  # asked for by name: a bad option for this machine
                extra = {"torch": "torch", "cupy": "cupy-cuda12x"}.get(name, name)
                raise ValueError(
                    f"--backend {name}: {name} is not installed here (pip install {extra}; "
                    "or --backend auto)"
                ) from None
            notes.append(f"{name}: not installed")
        except Exception as exc:  # no GPU, broken driver: the next one
            notes.append(f"{name}: {exc}")
    raise RuntimeError("; ".join(notes) or "no backend")
