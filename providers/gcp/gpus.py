"""GCP's GPU vocabulary: accelerator types, GPU machine families and the shapes priced from
component SKUs."""

from __future__ import annotations

from providers.base import ErrorKind, ProviderError

#: canonical GPU (normalised: lowercase alphanumerics) -> Compute Engine accelerator type
ACCELERATORS: dict[str, str] = {
    "k80": "nvidia-tesla-k80",
    "p4": "nvidia-tesla-p4",
    "p100": "nvidia-tesla-p100",
    "v100": "nvidia-tesla-v100",
    "t4": "nvidia-tesla-t4",
    "l4": "nvidia-l4",
    "a100": "nvidia-tesla-a100",
    "a10040gb": "nvidia-tesla-a100",
    "a10080gb": "nvidia-a100-80gb",
    "h100": "nvidia-h100-80gb",
    "h10080gb": "nvidia-h100-80gb",
    "h100mega": "nvidia-h100-mega-80gb",
    "h10080gbmega": "nvidia-h100-mega-80gb",
    "h10080gbplus": "nvidia-h100-mega-80gb",
    "h200": "nvidia-h200-141gb",
    "h200141gb": "nvidia-h200-141gb",
    "b200": "nvidia-b200",
    "rtxpro6000": "nvidia-rtx-pro-6000",
    "rtxproserver6000": "nvidia-rtx-pro-6000",
}
#: accelerator type -> our GPU name where policies.gpus is not there to ask
GPU_NAMES: dict[str, str] = {
    "nvidia-tesla-k80": "K80",
    "nvidia-tesla-p4": "P4",
    "nvidia-tesla-p100": "P100",
    "nvidia-tesla-v100": "V100",
    "nvidia-tesla-t4": "T4",
    "nvidia-l4": "L4",
    "nvidia-tesla-a100": "A100",
    "nvidia-a100-80gb": "A100-80GB",
    "nvidia-h100-80gb": "H100",
    "nvidia-h100-mega-80gb": "H100",
    "nvidia-h200-141gb": "H200",
    "nvidia-b200": "B200",
}
#: machine families whose types come with their GPUs (no guestAccelerators to send)
BUILTIN_GPU_FAMILIES = ("a2", "a3", "a4", "a4x", "g2", "g4")
ATTACHABLE = ("nvidia-tesla-t4", "nvidia-tesla-v100", "nvidia-tesla-p100", "nvidia-tesla-p4")
#: GPU machine shapes for pricing from component SKUs: type -> (vCPUs, GiB, accelerator, count)
SHAPES: dict[str, tuple[int, float, str, int]] = {
    **{
        f"g2-standard-{c}": (c, c * 4.0, "nvidia-l4", g)
        for c, g in ((4, 1), (8, 1), (12, 1), (16, 1), (32, 1), (24, 2), (48, 4), (96, 8))
    },
    **{f"a2-highgpu-{g}g": (12 * g, 85.0 * g, "nvidia-tesla-a100", g) for g in (1, 2, 4, 8)},
    "a2-megagpu-16g": (96, 1360.0, "nvidia-tesla-a100", 16),
    **{f"a2-ultragpu-{g}g": (12 * g, 170.0 * g, "nvidia-a100-80gb", g) for g in (1, 2, 4, 8)},
    **{f"a3-highgpu-{g}g": (26 * g, 234.0 * g, "nvidia-h100-80gb", g) for g in (1, 2, 4, 8)},
}


def _norm(name: str) -> str:
    return "".join(c for c in name.lower() if c.isalnum())


def accelerator_type(gpu: str) -> str:
    """The Compute Engine accelerator type for a GPU name (``L4`` -> ``nvidia-l4``)."""
    key = _norm(gpu)
    for prefix in ("", "nvidia", "nvidiatesla", "tesla"):
        if key.startswith(prefix) and key[len(prefix) :] in ACCELERATORS:
            return ACCELERATORS[key[len(prefix) :]]
    if gpu.startswith("nvidia-"):
        return gpu
    raise ProviderError(
        ErrorKind.INVALID, "UnknownGPU", f"no GCP accelerator for {gpu!r}", provider="gcp"
    )


def gpu_name(accelerator: str) -> str:
    """Our GPU name for a Compute Engine accelerator type (``nvidia-tesla-t4`` -> ``T4``)."""
    try:
        from policies.gpus import canonical_gpu

        name = canonical_gpu(GPU_NAMES.get(accelerator, accelerator))
        if name:
            return name
    except Exception:  # gpus.csv missing: fall back on our table
        pass
    return GPU_NAMES.get(accelerator, accelerator)


def has_builtin_gpus(machine_type: str) -> bool:
    return machine_type.split("-", 1)[0] in BUILTIN_GPU_FAMILIES
