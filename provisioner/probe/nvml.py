"""GPU telemetry through NVML (``nvidia-ml-py``, imported as ``pynvml``), never nvidia-smi's text.

The module is an optional extra (``pip install 'provisioner[gpu]'``) and is imported lazily.
Every function takes the NVML module as an argument (``nvml=None``: import ``pynvml``), so the
tests hand in a fake module object and the same code runs on a machine with no GPU.

What a sample holds per GPU (None where the driver does not say):

``index, name, uuid, utilization_pct, memory_utilization_pct, memory_used_mib,
memory_total_mib, sm_clock_mhz, sm_clock_max_mhz, power_w, power_limit_w, temperature_c,
throttle_reasons`` (names of the active clock-event reasons, e.g. ``sw_power_cap``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from provisioner.errors import ProbeError

#: Clock-event (throttle) reason bits, from nvml.h (nvmlClocksEventReason*).
THROTTLE_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
#: Reasons that mean the GPU runs below the clock it could: worth a line in the report.
SLOWDOWNS = frozenset(
    {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
     "hw_power_brake_slowdown"}
)  # fmt: skip


class NVMLUnavailable(ProbeError, RuntimeError):
    """No NVML here: the module is not installed, or there is no driver / no GPU."""


@dataclass
class GPUSample:
    index: int
    name: str
    uuid: str | None = None
    utilization_pct: float | None = None
    memory_utilization_pct: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: float | None = None
    throttle_reasons: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def load(nvml: Any = None) -> Any:
    """The NVML module, initialised; raises NVMLUnavailable with the reason."""
    if nvml is None:
        try:
            import pynvml as nvml_mod  # nvidia-ml-py
        except ImportError:
            raise NVMLUnavailable(
                "NVML bindings not installed (pip install 'provisioner[gpu]' for nvidia-ml-py)"
            ) from None
        nvml = nvml_mod
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        raise NVMLUnavailable(f"NVML cannot start: {exc}") from None
    return nvml


@contextlib.contextmanager
def session(nvml: Any = None) -> Iterator[Any]:
    mod = load(nvml)
    try:
        yield mod
    finally:
        with contextlib.suppress(Exception):
            mod.nvmlShutdown()


def _try(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # NVMLError_NotSupported and friends: the figure is unknown
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _const(nvml: Any, name: str, default: int) -> int:
    return int(getattr(nvml, name, default))


def sample_handle(nvml: Any, index: int, handle: Any) -> GPUSample:
    s = GPUSample(index=index, name=_text(_try(nvml.nvmlDeviceGetName, handle) or "unknown"))
    uuid = _try(nvml.nvmlDeviceGetUUID, handle)
    s.uuid = None if uuid is None else _text(uuid)
    util = _try(nvml.nvmlDeviceGetUtilizationRates, handle)
    if util is not None:
        s.utilization_pct = float(util.gpu)
        s.memory_utilization_pct = float(util.memory)
    mem = _try(nvml.nvmlDeviceGetMemoryInfo, handle)
    if mem is not None:
        s.memory_used_mib = round(mem.used / 2**20, 1)
        s.memory_total_mib = round(mem.total / 2**20, 1)
    sm = _const(nvml, "NVML_CLOCK_SM", 1)
    clock = _try(nvml.nvmlDeviceGetClockInfo, handle, sm)
    s.sm_clock_mhz = None if clock is None else float(clock)
    clock_max = _try(nvml.nvmlDeviceGetMaxClockInfo, handle, sm)
    s.sm_clock_max_mhz = None if clock_max is None else float(clock_max)
    power = _try(nvml.nvmlDeviceGetPowerUsage, handle)  # milliwatts
    s.power_w = None if power is None else round(power / 1000.0, 1)
    limit = _try(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    s.power_limit_w = None if limit is None else round(limit / 1000.0, 1)
    temp = _try(nvml.nvmlDeviceGetTemperature, handle, _const(nvml, "NVML_TEMPERATURE_GPU", 0))
    s.temperature_c = None if temp is None else float(temp)
    reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    bits = _try(reasons_fn, handle) if reasons_fn is not None else None
    if bits is not None:
        s.throttle_reasons = [name for bit, name in THROTTLE_BITS.items() if int(bits) & bit]
    return s


def sample(nvml: Any) -> list[GPUSample]:
    """One sample of every GPU, from an initialised NVML module."""
    out = []
    for i in range(int(nvml.nvmlDeviceGetCount())):
        out.append(sample_handle(nvml, i, nvml.nvmlDeviceGetHandleByIndex(i)))
    return out


def sample_gpus(nvml: Any = None) -> list[dict[str, Any]] | None:
    """One sample per GPU as dicts, or None where there is no NVML (no GPU, no driver)."""
    try:
        with session(nvml) as mod:
            rows = [s.as_dict() for s in sample(mod)]
    except NVMLUnavailable:
        return None
    except Exception:  # a driver that fails mid-query: no sample this time
        return None
    return rows or None


def driver_version(nvml: Any) -> str | None:
    v = _try(nvml.nvmlSystemGetDriverVersion)
    return None if v is None else _text(v)


def nvlink_links(nvml: Any, index: int) -> int:
    """How many NVLink links of GPU ``index`` are active (0: none, or no NVLink)."""
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    enabled = _const(nvml, "NVML_FEATURE_ENABLED", 1)
    n = 0
    for link in range(_const(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        state = _try(nvml.nvmlDeviceGetNvLinkState, handle, link)
        if state is None:
            break
        n += int(state == enabled)
    return n


def peer_path(nvml: Any, a: int, b: int) -> str:
    """``nvlink`` when NVML says GPUs ``a`` and ``b`` talk over NVLink, else ``pcie``."""
    fn = getattr(nvml, "nvmlDeviceGetP2PStatus", None)
    if fn is not None:
        ha, hb = nvml.nvmlDeviceGetHandleByIndex(a), nvml.nvmlDeviceGetHandleByIndex(b)
        status = _try(fn, ha, hb, _const(nvml, "NVML_P2P_CAPS_INDEX_NVLINK", 3))
        if status is not None:
            return "nvlink" if status == _const(nvml, "NVML_P2P_STATUS_OK", 0) else "pcie"
    return "nvlink" if nvlink_links(nvml, a) and nvlink_links(nvml, b) else "pcie"


class Sampler(threading.Thread):
    """Samples every GPU every ``every_s`` while a benchmark runs (clock, power, temperature
    under load are what tell a throttled card from a healthy one)."""

    def __init__(self, nvml: Any, every_s: float = 0.2) -> None:
        super().__init__(name="nvml-sampler", daemon=True)
        self.nvml = nvml
        self.every_s = every_s
        self.samples: list[list[GPUSample]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            with contextlib.suppress(Exception):
                self.samples.append(sample(self.nvml))
            self._halt.wait(self.every_s)

    def stop(self) -> list[list[GPUSample]]:
        self._halt.set()
        self.join(timeout=5)
        return self.samples


def under_load(samples: list[list[GPUSample]]) -> list[dict[str, Any]]:
    """Per GPU, what the samples taken under load say: mean SM clock and its share of the
    maximum, peak power against the limit, peak temperature, slowdown reasons seen."""
    by: dict[int, list[GPUSample]] = {}
    for row in samples:
        for s in row:
            by.setdefault(s.index, []).append(s)
    out = []
    for index, rows in sorted(by.items()):
        clocks = [s.sm_clock_mhz for s in rows if s.sm_clock_mhz is not None]
        power = [s.power_w for s in rows if s.power_w is not None]
        temps = [s.temperature_c for s in rows if s.temperature_c is not None]
        util = [s.utilization_pct for s in rows if s.utilization_pct is not None]
        cmax = next((s.sm_clock_max_mhz for s in rows if s.sm_clock_max_mhz), None)
        limit = next((s.power_limit_w for s in rows if s.power_limit_w), None)
        seen = sorted({r for s in rows for r in s.throttle_reasons if r in SLOWDOWNS})
        mean_clock = sum(clocks) / len(clocks) if clocks else None
        out.append(
            {
                "index": index,
                "name": rows[0].name,
                "samples": len(rows),
                "sm_clock_mean_mhz": None if mean_clock is None else round(mean_clock, 1),
                "sm_clock_max_mhz": cmax,
                "clock_fraction": round(mean_clock / cmax, 3) if mean_clock and cmax else None,
                "power_peak_w": max(power) if power else None,
                "power_limit_w": limit,
                "temperature_peak_c": max(temps) if temps else None,
                "utilization_mean_pct": round(sum(util) / len(util), 1) if util else None,
                "slowdowns": seen,
            }
        )
    return out
