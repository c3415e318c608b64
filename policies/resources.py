"""The policy's ``resources`` section: which GPUs, how many per node, how many nodes, how
they must be joined, and the workload that sizes them (re-exported by :mod:`policies.model`)."""

from __future__ import annotations

import enum
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator

from policies.strict import StrictModel as _Model


class Precision(str, enum.Enum):
    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    INT8 = "int8"
    INT4 = "int4"


class Method(str, enum.Enum):
    FULL = "full"
    LORA = "lora"
    QLORA = "qlora"
    INFERENCE = "inference"


class Workload(_Model):
    """A model to fit on the GPUs; VRAM per GPU and duration are estimated from it."""

    parameters_b: float = Field(
        gt=0, le=100_000, description="Model size in billions of parameters."
    )
    method: Method = Field(Method.LORA, description="full, lora, qlora or inference.")
    precision: Precision = Field(Precision.BF16, description="Precision of weights and compute.")
    sequence_length: int = Field(2048, ge=1, le=10_000_000)
    batch_size: int = Field(1, ge=1, le=1_000_000, description="Micro-batch per GPU.")
    gradient_checkpointing: bool = Field(True, description="Recompute activations (training).")
    lora_fraction: float = Field(
        0.01, gt=0, le=1, description="Trainable adapter parameters as a share of the model."
    )
    layers: int | None = Field(
        None, ge=1, le=10_000, description="Transformer layers (estimated if absent)."
    )
    hidden_size: int | None = Field(
        None, ge=1, le=1_000_000, description="Model width (estimated if absent)."
    )
    tokens_b: float | None = Field(
        None, gt=0, description="Tokens to process, in billions (sizes the job's duration)."
    )
    mfu: float = Field(
        0.35, gt=0, le=1, description="Model FLOPs utilisation assumed for duration."
    )
    headroom: float = Field(
        0.2, ge=0, le=4, description="Safety margin on estimated VRAM (0.2 = 20%)."
    )


def _known_gpu(name: str) -> str:
    """The canonical GPU model for ``name``, or a ValueError that lists close known names."""
    from policies.gpus import canonical_gpu, gpu_specs

    if len(name) > 64:
        raise ValueError(f"unknown GPU {name[:20]!r}... (a GPU model is a short name like A100)")
    model = canonical_gpu(name)
    if model is not None:
        return model
    import difflib

    known = sorted(gpu_specs())
    close = difflib.get_close_matches(name.upper(), known, n=3, cutoff=0.5)
    hint = f" (did you mean {', '.join(close)}?)" if close else f" (known: {', '.join(known)})"
    raise ValueError(f"unknown GPU {name!r}{hint}")


GPUName = Annotated[str, AfterValidator(_known_gpu)]


class Interconnect(_Model):
    """How the GPUs of a node and the nodes of a gang must be joined (multi-node jobs).

    ``intra_node``: the GPU-to-GPU path inside one instance (``nvlink`` accepts NVLink or
    NVSwitch; ``nvswitch`` only all-to-all NVSwitch; ``pcie``/``any``: whatever it has).
    ``inter_node`` (for ``resources.nodes`` > 1): ``any`` keeps the gang in one region,
    ``same-zone`` in one zone, ``placement-group`` in one zone inside the cloud's placement
    construct (AWS cluster placement group, GCP compact placement policy, Azure proximity
    placement group, Alibaba deployment set, Tencent placement group).
    ``min_network_gbps``: the least network bandwidth per node; ``fabric``: an RDMA network
    (``efa`` on AWS, ``infiniband`` on Azure/GCP/Alibaba/Tencent where the type has it,
    ``rdma``: either).
    """

    intra_node: Literal["any", "pcie", "nvlink", "nvswitch"] = "any"
    inter_node: Literal["any", "same-zone", "placement-group"] = "placement-group"
    min_network_gbps: float | None = Field(
        None, gt=0, le=100_000, description="Least network bandwidth per node, Gbit/s."
    )
    fabric: Literal["any", "efa", "infiniband", "rdma"] = "any"


class Resources(_Model):
    """Which GPUs, how many, and how much memory the job needs."""

    gpus: list[GPUName] | None = Field(
        None, description="Acceptable GPU models (e.g. [A100, H100, L40S]); any if absent."
    )
    gpu_count: int = Field(1, ge=1, le=64, description="GPUs per instance.")
    nodes: int = Field(
        1,
        ge=1,
        le=64,
        description="Instances that run the job together (a gang): launched, interrupted "
        "and restarted as one.",
    )
    interconnect: Interconnect = Field(default_factory=lambda: Interconnect())
    min_vram_gb: float | None = Field(
        None, gt=0, le=4096, description="Minimum memory per GPU, GB."
    )
    min_vcpus: float | None = Field(None, gt=0)
    min_memory_gib: float | None = Field(None, gt=0)
    workload: Workload | None = None
    exclude_gpus: list[GPUName] = Field(
        default_factory=list, description="GPU models never to use."
    )
    min_measured_fraction: float | None = Field(
        None,
        gt=0,
        le=1,
        description="Least share of its datasheet matmul throughput a node's probe must "
        "measure (0.8 = 80%); below it the instance is terminated and its zone cooled down.",
    )

    @field_validator("gpus")
    @classmethod
    def _non_empty(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and not v:
            raise ValueError("list at least one GPU model, or leave `gpus` out to accept any")
        return v
