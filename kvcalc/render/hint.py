"""The one hint a "does not fit" line carries: the cheapest change that would fit.

Cheapest first: storing the weights as FP8 on the same GPUs (when they are 16-bit or wider),
else more GPUs of the same kind (the fewest, doubling the tensor-parallel group, with the
weights per GPU shrinking as 1/GPUs and the runtime overhead unchanged: an estimate).
"""

from __future__ import annotations

from kvcalc.engine.capacity import Capacity
from kvcalc.engine.quant import weight_format
from kvcalc.engine.weights import checkpoint_precision, max_weight_bytes_per_gpu

#: Never suggest more GPUs than this many times the ones given.
_MAX_SCALE = 64


def _leaves_kv_memory(weights: int, overhead: int, usable: int) -> bool:
    return weights + overhead < usable


def fit_hint(cap: Capacity) -> str | None:
    """``--weight-dtype fp8`` or ``--gpus NxGPU`` when either would leave KV memory; None when
    the answer already fits or a figure was given instead of computed."""
    dep = cap.deployment
    if cap.fits or dep.kv_memory_bytes is not None or dep.weights_total_bytes is not None:
        return None
    usable, overhead = dep.usable_bytes_per_gpu, cap.overhead_bytes_per_gpu
    if dep.weights.layers.element_bits >= 16:
        fp8 = checkpoint_precision(dep.model, weight_format("fp8"))
        weights = max_weight_bytes_per_gpu(dep.model, fp8, dep.tp, dep.pp)
        if _leaves_kv_memory(weights, overhead, usable):
            return "hint: --weight-dtype fp8 would fit on these GPUs"
    scale = 2
    while scale <= _MAX_SCALE:
        if _leaves_kv_memory(-(-cap.weights_bytes_per_gpu // scale), overhead, usable):
            count = dep.gpus.count * scale
            return f"hint: about {count}x {dep.gpus.accelerator.id} would fit"
        scale *= 2
    return None
