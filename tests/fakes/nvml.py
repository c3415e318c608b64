"""A fake NVML module object (the shape of ``pynvml`` from nvidia-ml-py), injected into the
probe and the agent in place of the real bindings on machines with no GPU.

Written from NVML's API reference (nvml.h): handles by index, utilisation as a struct with
``gpu``/``memory`` percentages, memory in bytes, power in milliwatts, clocks in MHz, clock
event reasons as a bit mask, NVLink state per link, P2P status per capability index. Each
GPU's readings are plain attributes a test may change between samples.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


class NVMLError(Exception):
    pass


@dataclass
class FakeGPU:
    name: str = "NVIDIA A100-SXM4-40GB"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    utilization: float = 0.0
    memory_utilization: float = 0.0
    memory_used: int = 1 << 30
    memory_total: int = 40 << 30
    sm_clock: int = 1410
    sm_clock_max: int = 1410
    power_mw: int = 60_000
    power_limit_mw: int = 400_000
    temperature: int = 35
    throttle_bits: int = 0
    nvlinks: int = 12
    supported: dict[str, bool] = field(default_factory=dict)  # e.g. {"power": False}


class FakeNVML:
    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0
    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 18
    NVML_P2P_CAPS_INDEX_NVLINK = 3
    NVML_P2P_STATUS_OK = 0
    NVML_P2P_STATUS_NOT_SUPPORTED = 5
    NVMLError = NVMLError

    def __init__(self, gpus: list[FakeGPU] | None = None, *, fail_init: bool = False) -> None:
        self.gpus = gpus if gpus is not None else [FakeGPU()]
        self.fail_init = fail_init
        self.inits = 0
        self.shutdowns = 0
        self.calls = 0

    # -- library -----------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise NVMLError("Driver Not Loaded")
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGPU:
        if not 0 <= index < len(self.gpus):
            raise NVMLError("Invalid Argument")
        return self.gpus[index]

    def _check(self, gpu: FakeGPU, what: str) -> None:
        self.calls += 1
        if not gpu.supported.get(what, True):
            raise NVMLError("Not Supported")

    # -- per device ---------------------------------------------------------------------------

    def nvmlDeviceGetName(self, h: FakeGPU) -> str:
        return h.name

    def nvmlDeviceGetUUID(self, h: FakeGPU) -> str:
        return h.uuid

    def nvmlDeviceGetUtilizationRates(self, h: FakeGPU) -> Any:
        self._check(h, "utilization")
        return SimpleNamespace(gpu=int(h.utilization), memory=int(h.memory_utilization))

    def nvmlDeviceGetMemoryInfo(self, h: FakeGPU) -> Any:
        self._check(h, "memory")
        return SimpleNamespace(
            total=h.memory_total, used=h.memory_used, free=h.memory_total - h.memory_used
        )

    def nvmlDeviceGetClockInfo(self, h: FakeGPU, clock: int) -> int:
        self._check(h, "clock")
        return h.sm_clock

    def nvmlDeviceGetMaxClockInfo(self, h: FakeGPU, clock: int) -> int:
        self._check(h, "clock")
        return h.sm_clock_max

    def nvmlDeviceGetPowerUsage(self, h: FakeGPU) -> int:
        self._check(h, "power")
        return h.power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, h: FakeGPU) -> int:
        self._check(h, "power")
        return h.power_limit_mw

    def nvmlDeviceGetTemperature(self, h: FakeGPU, sensor: int) -> int:
        self._check(h, "temperature")
        return h.temperature

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeGPU) -> int:
        self._check(h, "throttle")
        return h.throttle_bits

    def nvmlDeviceGetNvLinkState(self, h: FakeGPU, link: int) -> int:
        if link >= self.NVML_NVLINK_MAX_LINKS:
            raise NVMLError("Invalid Argument")
        if h.nvlinks == 0:
            raise NVMLError("Not Supported")
        return 1 if link < h.nvlinks else 0

    def nvmlDeviceGetP2PStatus(self, a: FakeGPU, b: FakeGPU, cap: int) -> int:
        both = a.nvlinks > 0 and b.nvlinks > 0
        return self.NVML_P2P_STATUS_OK if both else self.NVML_P2P_STATUS_NOT_SUPPORTED
