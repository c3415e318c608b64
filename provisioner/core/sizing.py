"""How much GPU memory and time a workload needs, by the usual rules of thumb.

Memory per GPU (GB = 1e9 bytes), for P parameters, precision bytes b:

* weights: P·b (QLoRA: 4-bit base weights, 0.5 bytes/param, plus ~5% for quantisation
  constants);
* full fine-tuning, mixed precision with AdamW: 16 bytes/param in all (b for weights,
  b for gradients, 4+4+4 for the FP32 master copy and the two Adam moments); in FP32 the same
  16 bytes (4 + 4 + 8). With ``gpu_count`` > 1, states are taken as sharded (FSDP/ZeRO-3);
* LoRA/QLoRA: frozen base weights plus 16 bytes per trainable adapter parameter
  (``lora_fraction`` of P);
* activations (training): s·B·h·L·34 bytes without checkpointing (Korthikanti et al. 2022,
  with flash attention so no s² term), s·B·h·L·2 bytes with gradient checkpointing;
* inference: weights plus the KV cache, 2·L·h·s·B·b;
* plus 1 GB of CUDA context and kernels, then the ``headroom`` margin (20% by default).

Shapes not given are estimated from P with the aspect ratio of Llama-style models
(h ≈ 128·L, P ≈ 12·L·h²).

Duration: training takes ~6·P·T FLOPs for T tokens (forward 2·P·T, backward 4·P·T); LoRA skips
the weight gradients (~4·P·T); inference ~2·P·T. Divided by the GPUs' dense tensor TFLOPS
times the assumed MFU.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.model import Method, Precision, Workload

BYTES = {
    Precision.FP32: 4.0,
    Precision.TF32: 4.0,
    Precision.BF16: 2.0,
    Precision.FP16: 2.0,
    Precision.INT8: 1.0,
    Precision.INT4: 0.5,
}
CUDA_CONTEXT_GB = 1.0


@dataclass(frozen=True, slots=True)
class VRAMEstimate:
    weights_gb: float
    gradients_gb: float
    optimizer_gb: float
    activations_gb: float
    overhead_gb: float
    total_gb: float  # per GPU, including headroom

    def as_dict(self) -> dict[str, float]:
        return {k: round(getattr(self, k), 2) for k in self.__slots__}


def shape(w: Workload) -> tuple[int, int]:
    """(layers, hidden) from the workload, estimated from the parameter count if absent."""
    params = w.parameters_b * 1e9
    if w.layers and w.hidden_size:
        return w.layers, w.hidden_size
    if w.layers:
        return w.layers, max(1, round((params / (12 * w.layers)) ** 0.5))
    if w.hidden_size:
        return max(1, round(params / (12 * w.hidden_size**2))), w.hidden_size
    layers = max(1, round((params / (12 * 128**2)) ** (1 / 3)))
    return layers, max(1, round((params / (12 * layers)) ** 0.5))


def estimate_vram(w: Workload, gpu_count: int = 1) -> VRAMEstimate:
    p = w.parameters_b * 1e9
    b = BYTES[w.precision]
    layers, hidden = shape(w)
    tokens = w.sequence_length * w.batch_size
    shard = max(1, gpu_count)
    grads = opt = act = 0.0
    if w.method is Method.INFERENCE:
        # tensor-parallel serving splits both the weights and the KV cache (by heads)
        weights = p * b / shard
        act = 2 * layers * hidden * tokens * b / shard  # KV cache
    elif w.method is Method.FULL:
        weights = p * b / shard
        grads = p * b / shard
        opt = p * (16 - 2 * b if b < 4 else 8) / shard
        act = tokens * hidden * layers * (2 if w.gradient_checkpointing else 34)
    else:
        base_b = 0.5 * 1.05 if w.method is Method.QLORA else b
        weights = p * base_b
        trainable = p * w.lora_fraction
        grads = trainable * 2
        opt = trainable * 12
        act = tokens * hidden * layers * (2 if w.gradient_checkpointing else 34)
    gb = 1e9
    raw = (weights + grads + opt + act) / gb + CUDA_CONTEXT_GB
    return VRAMEstimate(
        weights_gb=weights / gb,
        gradients_gb=grads / gb,
        optimizer_gb=opt / gb,
        activations_gb=act / gb,
        overhead_gb=CUDA_CONTEXT_GB,
        total_gb=raw * (1 + w.headroom),
    )


def training_flops(w: Workload) -> float | None:
    """FLOPs for the whole workload, or None when ``tokens_b`` is not given."""
    if w.tokens_b is None:
        return None
    per_token = {Method.FULL: 6.0, Method.LORA: 4.0, Method.QLORA: 4.0, Method.INFERENCE: 2.0}[
        w.method
    ]
    return per_token * w.parameters_b * 1e9 * w.tokens_b * 1e9


def estimate_hours(w: Workload, tflops_per_gpu: float, gpu_count: int) -> float | None:
    """Wall-clock hours on ``gpu_count`` GPUs of ``tflops_per_gpu`` dense TFLOPS each."""
    flops = training_flops(w)
    if flops is None or tflops_per_gpu <= 0:
        return None
    return flops / (tflops_per_gpu * 1e12 * gpu_count * w.mfu) / 3600.0
