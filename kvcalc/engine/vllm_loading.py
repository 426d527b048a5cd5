"""What vLLM places on each GPU while it builds a model beyond the checkpoint's weights (and the
RoPE tables, :func:`kvcalc.engine.weights.rotary_cache_bytes`, which every engine builds).

"Model loading took X GiB" is the torch memory that grows over ``GPUModelRunner.load_model``
(``DeviceMemoryProfiler`` around it, vllm/v1/worker/gpu_model_runner.py; ``current_memory_usage``
is ``torch.cuda.max_memory_allocated`` after a peak reset, vllm/platforms/cuda.py; both in the
0.22.1 wheel), so every tensor a model's constructor puts on the GPU counts, whether the
checkpoint fills it or not. The profiler takes that figure as the weights, so it leaves the KV
cache that much less. Two such tensors are read from the Gemma 4 code of the wheels
(vllm/model_executor/models/gemma4.py and gemma4_mm.py); no other registry model has either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.engine.mixers.shared_kv import SharedKVAttention
from kvcalc.engine.tensors import linear
from kvcalc.engine.units import dtype
from kvcalc.engine.weights import Bits, add_tensor_bits, as_precision, bytes_of

if TYPE_CHECKING:
    from kvcalc.engine.quant import CheckpointFormat
    from kvcalc.engine.spec import ModelSpec
    from kvcalc.engine.vllm_releases import VLLMRelease


def unused_kv_projection_bytes(
    model: ModelSpec, layers: range, precision: CheckpointFormat, tp: int
) -> int:
    """The K and V slots of the KV-shared layers among ``layers`` on one rank: up to 0.29
    ``Gemma4Attention`` builds every layer's QKVParallelLinear with its source layer's KV heads
    and head size, KV-shared layers included, whose forward reads only the query part
    (:attr:`~kvcalc.engine.vllm_releases.VLLMRelease.shared_kv_projections`). Split as vLLM
    splits KV heads (one whole head per rank when they are fewer than the ranks), in the
    layers' format. Gemma 4 E4B: 15 sliding (2 x 256) and 3 full (2 x 512) such layers of
    hidden 2560, 55,050,240 parameters, 0.10 GiB in bf16."""
    bits: Bits = {}
    hidden = model.hidden_size
    for mixer, _, n in model.block_counts(layers):
        if isinstance(mixer, SharedKVAttention):
            s = mixer.source
            kv = linear("mixer", s.kv_heads, s.head_dim_k + s.head_dim_v, hidden)
            add_tensor_bits(bits, kv, precision, tp, n)
    return bytes_of(bits)


def per_layer_input_buffer_bytes(model: ModelSpec, max_num_batched_tokens: int) -> int:
    """The per-layer-embedding buffer ``Gemma4ForConditionalGeneration.__init__`` allocates "for
    CUDA graph compatibility": ``torch.zeros(max_num_batched_tokens, num_hidden_layers,
    hidden_size_per_layer_input)`` in the model dtype on every rank (gemma4_mm.py of 0.20.0
    to 0.33.0). Only the multimodal wrapper builds it, so a text-only Gemma 4 has none. Gemma 4
    E4B at 2,048 batched tokens: 2,048 x 42 x 256 x 2 B = 42 MiB."""
    if model.per_layer_input is None or (model.vision is None and model.audio is None):
        return 0
    width = model.per_layer_input[1]
    elements = max_num_batched_tokens * model.num_layers * width
    return dtype(model.default_dtype).bytes_for(elements)


def loaded_beyond_weights_bytes(
    model: ModelSpec,
    layers: range,
    precision: CheckpointFormat,
    tp: int,
    release: VLLMRelease,
    max_num_batched_tokens: int,
) -> int:
    """What one rank of the pipeline stage holding ``layers`` allocates while vLLM ``release``
    builds the model, beyond the weights kvcalc counts: the unused K/V slots of KV-shared
    layers (where the release builds them) and the per-layer-embedding buffer."""
    unused = (
        unused_kv_projection_bytes(model, layers, as_precision(precision), tp)
        if release.shared_kv_projections
        else 0
    )
    return unused + per_layer_input_buffer_bytes(model, max_num_batched_tokens)
