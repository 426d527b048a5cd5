"""TensorRT-LLM's KV pool: ``free_gpu_memory_fraction`` of the memory free once the weights are
loaded and the activation profile has run, in blocks of ``tokens_per_block``, capped by
``max_tokens``.

Read from NVIDIA/TensorRT-LLM (the 2025-2026 sources; file names are TensorRT-LLM's):

* **The free memory** ("available"). The C++ executor behind a TensorRT engine measures
  ``cudaMemGetInfo`` once the engine, its execution context, runtime buffers and decoder are
  allocated, plus what its memory pool holds free (``BaseKVCacheManager::calculateFreeMemBytes``
  in ``cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp``, before 2025
  ``KVCacheManager::calculateMaxNumBlocks``), and logs ``Memory usage when calculating max tokens
  in paged kv cache: total: T GiB, available: A GiB``. The PyTorch backend (``trtllm-serve``'s
  default since 1.0) runs dummy context requests of ``max_num_tokens`` (8192) tokens and takes
  ``total - peak + temporary`` (``KvCacheCreator._cal_max_memory`` in
  ``tensorrt_llm/_torch/pyexecutor/_util.py``): the device total less the profiled peak (torch
  peak + memory outside torch), the temporary estimation cache added back because the peak holds
  it. Both are the memory free beside the model in place; :class:`TrtllmOptions` takes either
  as ``free_memory_bytes``.
* **The pool's bytes** are that times the fraction, in float32 as the config holds it (the
  PyTorch log prints ``fraction is set 0.8999999761581421``), truncated to whole bytes
  (``static_cast<uint64_t>(finalFreeMem * freeMemFraction)``; Python ``int(available_kv_mem)``).
* **Tokens**: the bytes over the KV size per token, rounded down (C++ ``static_cast`` of the
  quotient; Python ``CacheCost.tokens_for_budget`` / ``int(available_kv_mem //
  kv_size_per_token)``), then the smaller of that and ``KvCacheConfig.max_tokens`` when given.
* **Blocks**: tokens over ``tokens_per_block`` rounded **up** (``tc::ceilDiv(maxTokens,
  tokensPerBlock)`` in C++; ``math.ceil(max_tokens / tokens_per_block)`` in the PyTorch
  ``KVCacheManager.calculate_max_num_blocks`` of the 1.0-1.1 releases). The pool holds
  ``blocks x tokens_per_block`` tokens, the figure of ``[MemUsageChange] Allocated X GiB for max
  tokens in paged KV cache (N)`` (``KVCacheManager::allocatePools``). The 2026 main branch
  rounds the PyTorch path down (``int(max_tokens // tokens_per_block)``): at most one block less.
* **The KV size per token** (``KVCacheManager.get_cache_size_per_token`` /
  ``get_cache_bytes_per_token``; C++ ``calculateCacheSizePerToken``): per attention layer of the
  rank's pipeline stage, ``ceil(kv_heads / tp)`` heads x ``head_dim`` x 2 (K and V) x the KV
  dtype's bytes; for MLA one latent of ``kv_lora_rank + qk_rope_head_dim`` (kv factor 1, not
  split by TP); NVFP4 adds one fp8 scale per 16 values. Ranks take the smallest block count
  (an MPI ``MIN`` all-reduce), so the rank storing the most per token decides.
* **Sliding windows**: with no ``max_attention_window`` given (the default), every layer is one
  pool and a sliding layer costs a full layer per token (gpt-oss-120b logs ``kv size is 73728``:
  all 36 layers, its sliding half included). Variable windows (VSWA) share the memory between
  window sizes in equal parts (``calculate_max_num_blocks_for_vswa``); not modelled.
* **Caps**: ``max_tokens`` caps the tokens (above); ``max_gpu_total_bytes`` caps the bytes
  (``min(kv_cache_max_memory, max_gpu_total_bytes)``) but in the PyTorch path of the 1.x
  releases the token count is computed before that cap, so it binds only the VSWA and V2
  managers; not offered here.

Not modelled: VSWA pools, the Mamba / linear-attention hybrid managers (their state is a fixed
cost per sequence), speculative decoding (the draft's per-token size is added), the KV cache
manager V2, host (secondary) pools, and the second ``min`` of the PyTorch manager with
``fraction x free memory at creation / per-token size`` (larger than the profiled figure unless
the profile leaves little memory).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from kvcalc.engine.kv import as_cache_format, mixer_counts
from kvcalc.engine.overhead import estimated_overhead
from kvcalc.engine.spec import Mixer, ModelSpec

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.kvformat import KVFormat

NAME = "trtllm"
LABEL = "TensorRT-LLM"
#: ``KvCacheConfig.free_gpu_memory_fraction`` (llmapi ``llm_args.py``; C++
#: ``KvCacheConfig::kDefaultGpuMemFraction`` 0.9f).
DEFAULT_FREE_GPU_MEMORY_FRACTION = Fraction("0.9")
#: ``KvCacheConfig.tokens_per_block`` of the LLM API / PyTorch backend (``Field(default=32)``).
#: A TensorRT engine's block size is a build setting (64 in the 2024 plugin config).
DEFAULT_TOKENS_PER_BLOCK = 32
#: ``max_num_tokens`` of the LLM API and ``trtllm-serve``: the dummy requests of the activation
#: profile total this many tokens.
DEFAULT_MAX_NUM_TOKENS = 8192
#: KV dtypes the managers size (``get_cache_bytes_per_token``: FP8, HALF, BF16, FLOAT, NVFP4;
#: INT8 for a TensorRT engine built with an int8 KV cache).
TRTLLM_KV_DTYPES = ("fp32", "fp16", "bf16", "fp8", "int8", "nvfp4")
#: Layer kinds whose cache is keys and values (or one MLA latent) per token.
TOKEN_KINDS = ("full", "sliding", "chunked", "mla")


class TrtllmConfigError(ValueError):
    """A set-up TensorRT-LLM refuses, or that is not modelled; one line naming the fix."""


def float32(value: Fraction) -> Fraction:
    """``value`` as a float32 holds it: the config's fraction is a C++ ``float``."""
    return Fraction(struct.unpack("f", struct.pack("f", float(value)))[0])


@dataclass(frozen=True)
class TrtllmOptions:
    """TensorRT-LLM's own settings, named as its ``KvCacheConfig`` names them."""

    free_gpu_memory_fraction: Fraction = DEFAULT_FREE_GPU_MEMORY_FRACTION
    tokens_per_block: int = DEFAULT_TOKENS_PER_BLOCK
    max_tokens: int | None = None
    free_memory_bytes: int | None = None
    """The memory free beside the loaded model (the log's ``available``); None: estimated."""
    max_num_tokens: int = DEFAULT_MAX_NUM_TOKENS
    """The profile's token count, for the estimate of the activation peak."""

    def __post_init__(self) -> None:
        if not 0 < self.free_gpu_memory_fraction < 1:
            # TLLM_CHECK_WITH_INFO(freeMemFraction < 1.0f, ...) in calculateFreeMemBytes.
            raise TrtllmConfigError(
                f"--free-gpu-memory-fraction: {float(self.free_gpu_memory_fraction):g} must be "
                "above 0 and below 1 (TensorRT-LLM refuses 1), e.g. 0.9"
            )
        if self.tokens_per_block < 1:
            raise TrtllmConfigError(
                f"--tokens-per-block: {self.tokens_per_block} must be at least 1, e.g. 32"
            )
        if self.max_tokens is not None and self.max_tokens < 1:
            raise TrtllmConfigError(f"--max-tokens: {self.max_tokens} must be at least 1")
        if self.free_memory_bytes is not None and self.free_memory_bytes <= 0:
            raise TrtllmConfigError(
                "--free-memory: give the positive 'available' figure of the start-up log"
            )


# --------------------------------------------------------------------------------------------
# The KV size per token


def trtllm_kv_format(fmt: KVFormat) -> KVFormat:
    """The KV format, refused unless TensorRT-LLM's managers size it."""
    if fmt.name not in TRTLLM_KV_DTYPES:
        raise TrtllmConfigError(
            f"--kv-dtype: TensorRT-LLM has no {fmt.name} KV cache; use one of "
            f"{', '.join(TRTLLM_KV_DTYPES)}"
        )
    return fmt


def check_layer(mixer: Mixer, model_id: str) -> None:
    """Refuse a layer whose cache is not keys and values per token."""
    if mixer.kind not in TOKEN_KINDS or mixer.side_caches() or mixer.state_tensors():
        raise TrtllmConfigError(
            f"--engine trtllm: {model_id} has {mixer.kind} layers, which TensorRT-LLM sizes "
            "with a hybrid or sparse cache manager that is not modelled; use --engine vllm"
        )


def stage_kv_size_per_token(per_rank_model: ModelSpec, stage: range, fmt: KVFormat) -> int:
    """Bytes one token adds on one rank of a pipeline stage: every attention layer of the stage
    at its per-rank heads (``per_rank_model`` is the tensor-parallel rank's model)."""
    cache = as_cache_format(fmt)
    total = 0
    for mixer, n in mixer_counts(per_rank_model, stage):
        check_layer(mixer, per_rank_model.id)
        total += cache.token_bytes(mixer) * n
    return total


def kv_size_per_token(dep: Deployment) -> int:
    """The ``kv size per token`` TensorRT-LLM logs for this deployment: the widest stage's
    (ranks agree on the smallest block count, so the rank that stores most per token decides).

    KV heads split as ``ceil(kv_heads / tp)``; a rank holds a whole head when tp exceeds the
    heads, as :meth:`ModelSpec.per_rank` replicates them."""
    fmt = trtllm_kv_format(dep.kv_dtype)
    return max(stage_kv_size_per_token(dep.per_rank, s, fmt) for s in dep.stages)


# --------------------------------------------------------------------------------------------
# The free memory and the pool


def estimated_free_memory(dep: Deployment, max_num_tokens: int = DEFAULT_MAX_NUM_TOKENS) -> int:
    """The free memory beside the model on the tightest GPU, estimated: its memory less its
    weights and the runtime memory of the profile (:func:`kvcalc.engine.overhead.
    estimated_overhead`: the forward pass over ``max_num_tokens`` tokens, MoE workspaces,
    communication buffers). The profile's dummy requests each generate one token, so one row of
    logits is sampled, not a batch of them."""
    memory = dep.memory_bytes_per_gpu
    return min(
        memory
        - weights
        - estimated_overhead(dep.model, dep.tp, dep.pp, stage, max_num_tokens, max_num_seqs=1)
        for stage, weights in enumerate(dep.weights_per_stage)
    )


def pool_bytes(free_memory_bytes: int, fraction: Fraction) -> int:
    """``uint64(free x fraction)`` with the fraction at float32."""
    return math.floor(free_memory_bytes * float32(fraction))


def pool_tokens(budget_bytes: int, bytes_per_token: int, max_tokens: int | None) -> int:
    """Whole tokens in the budget, capped by ``max_tokens``."""
    tokens = max(budget_bytes, 0) // bytes_per_token
    return tokens if max_tokens is None else min(tokens, max_tokens)


def pool_blocks(tokens: int, tokens_per_block: int) -> int:
    """Blocks for ``tokens``, rounded up (``tc::ceilDiv``)."""
    return -(-tokens // tokens_per_block)


@dataclass(frozen=True)
class TrtllmPool:
    """TensorRT-LLM's KV pool on one GPU of the tightest rank."""

    options: TrtllmOptions
    free_memory_bytes: int
    free_memory_estimated: bool
    kv_size_per_token: int
    pool_bytes: int
    """The byte budget: free memory x the fraction."""
    max_tokens: int
    """Tokens the budget holds (capped by ``max_tokens``), before block rounding."""
    num_blocks: int
    kv_cache_tokens: int
    """``num_blocks x tokens_per_block``: the ``(N)`` of the ``Allocated ... GiB`` line."""

    @property
    def allocated_bytes(self) -> int:
        """The pool's allocation, the ``X GiB`` of ``Allocated X GiB for max tokens``."""
        return self.kv_cache_tokens * self.kv_size_per_token


def trtllm_pool(dep: Deployment, opts: TrtllmOptions) -> TrtllmPool:
    """TensorRT-LLM's pool for a deployment; a budget too small for one block is refused."""
    per_token = kv_size_per_token(dep)
    if per_token == 0:
        raise TrtllmConfigError(f"--engine trtllm: {dep.model.id} caches no tokens")
    free = opts.free_memory_bytes
    estimated = free is None
    if free is None:
        free = estimated_free_memory(dep, opts.max_num_tokens)
    budget = pool_bytes(max(free, 0), opts.free_gpu_memory_fraction)
    tokens = pool_tokens(budget, per_token, opts.max_tokens)
    blocks = pool_blocks(tokens, opts.tokens_per_block)
    if blocks == 0:
        raise TrtllmConfigError(
            f"--engine trtllm: {max(free, 0) / (1 << 30):.2f} GiB free beside "
            f"{dep.model.id}'s weights on one {dep.gpus.accelerator.name} leaves no KV block; "
            "use more GPUs, lighter weights or give --free-memory"
        )
    return TrtllmPool(
        options=opts,
        free_memory_bytes=free,
        free_memory_estimated=estimated,
        kv_size_per_token=per_token,
        pool_bytes=budget,
        max_tokens=tokens,
        num_blocks=blocks,
        kv_cache_tokens=blocks * opts.tokens_per_block,
    )
