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
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import TYPE_CHECKING, Any

from kvcalc.engine.inputs import Input
from kvcalc.engine.profiles import REGISTRY_FIT, SGLANG_2904, DecodeProfile
from kvcalc.engine.serving.base import (
    GPUS_COLUMNS,
    Engine,
    EnginePart,
    EngineRefusal,
    InputRefusal,
    Refusals,
    cuda_total_note,
    log_gib,
    refusal,
)
from kvcalc.engine.units import GiB
from kvcalc.errors import literal

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.kvformat import KVFormat
    from kvcalc.engine.serving.base import BatchRequest, Given, ServingEngine, Setup
    from kvcalc.engine.spec import Mixer, ModelSpec

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


class TrtllmConfigError(EngineRefusal):
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
        # Refused as TensorRT-LLM refuses them (TLLM_CHECK_WITH_INFO(freeMemFraction < 1.0f) in
        # calculateFreeMemBytes), naming the input so that each front end spells it its way.
        checks = (
            (
                "free_gpu_memory_fraction",
                0 < self.free_gpu_memory_fraction < 1,
                f"{float(self.free_gpu_memory_fraction):g} must be above 0 and below 1 "
                "(TensorRT-LLM refuses 1), e.g. 0.9",
            ),
            (
                "tokens_per_block",
                self.tokens_per_block >= 1,
                f"{self.tokens_per_block} must be at least 1, e.g. 32",
            ),
            (
                "max_tokens",
                self.max_tokens is None or self.max_tokens >= 1,
                f"{self.max_tokens} must be at least 1 token",
            ),
            (
                "free_memory",
                self.free_memory_bytes is None or self.free_memory_bytes > 0,
                "give the positive 'available' figure of the start-up log",
            ),
        )
        for name, ok, reason in checks:
            if not ok:
                raise refusal(name, reason)


# --------------------------------------------------------------------------------------------
# The KV size per token


def trtllm_kv_format(fmt: KVFormat) -> KVFormat:
    """The KV format, refused unless TensorRT-LLM's managers size it."""
    if fmt.name not in TRTLLM_KV_DTYPES:
        raise TrtllmConfigError(
            "{kv_dtype}: "
            + literal(
                f"TensorRT-LLM has no {fmt.name} KV cache; use one of {', '.join(TRTLLM_KV_DTYPES)}"
            ),
            "kv_dtype",
        )
    return fmt


def check_layer(mixer: Mixer, model_id: str) -> None:
    """Refuse a layer whose cache is not keys and values per token."""
    if mixer.kind not in TOKEN_KINDS or mixer.side_caches() or mixer.state_tensors():
        raise TrtllmConfigError(
            "{engine} "
            + literal(
                f"{NAME}: {model_id} has {mixer.kind} layers, which TensorRT-LLM sizes with a "
                "hybrid or sparse cache manager that is not modelled; use "
            )
            + "{engine} vllm",
            "engine",
        )


def stage_kv_size_per_token(per_rank_model: ModelSpec, stage: range, fmt: KVFormat) -> int:
    """Bytes one token adds on one rank of a pipeline stage: every attention layer of the stage
    at its per-rank heads (``per_rank_model`` is the tensor-parallel rank's model)."""
    from kvcalc.engine.kv import as_cache_format, mixer_counts

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


#: The CUDA context and allocator state, counted in TensorRT-LLM's peak (``total_used -
#: torch_used`` is measured from zero, not from a baseline as vLLM does): an H100 reports 79.19
#: GiB to torch and 78.43-78.81 GiB free before any weights (the SGLang reference, section 8).
CUDA_CONTEXT_BYTES = 3 * GiB // 4


def estimated_free_memory(dep: Deployment, max_num_tokens: int = DEFAULT_MAX_NUM_TOKENS) -> int:
    """The free memory beside the model on the tightest GPU, estimated: its memory less the CUDA
    context, its weights and the runtime memory of the profile (:func:`kvcalc.engine.overhead.
    estimated_overhead`: the forward pass over ``max_num_tokens`` tokens, MoE workspaces,
    communication buffers). The profile's dummy requests each generate one token, so one row of
    logits is sampled, not a batch of them. A TensorRT engine also holds its execution context,
    runtime buffers and decoder, sized by its build settings (not estimated): on the two logs of
    one without other tenants, the estimate is 6% and 11% above the logged figure."""
    from kvcalc.engine.overhead import estimated_overhead

    memory = dep.cuda_total_bytes_per_gpu - CUDA_CONTEXT_BYTES  # cudaMemGetInfo's total
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


@dataclass(frozen=True, eq=False)  # compared by identity: no __eq__/__hash__ to build
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
    max_seq_len: int
    """The longest sequence: the model's maximum (``max_seq_len is not specified, using
    inferred value``), lowered to the pool's tokens when it holds fewer ("Attention window size
    131072 exceeds upper bound 86720 for available blocks ... Adjusted max_seq_len to 86720")."""

    @property
    def allocated_bytes(self) -> int:
        """The pool's allocation, the ``X GiB`` of ``Allocated X GiB for max tokens``."""
        return self.kv_cache_tokens * self.kv_size_per_token

    def blocks_per_sequence(self, context: int) -> int:
        """Blocks one sequence of ``context`` tokens takes: ``ceil(context / tokens_per_block)``
        (``KVCacheManager::calculateMaxBlockRequirements``, beam width 1, no sink tokens)."""
        return pool_blocks(context, self.options.tokens_per_block)

    def max_batch(self, context: int) -> int:
        """Sequences of ``context`` tokens the pool holds at once, at most ``max_batch_size``."""
        if context > self.max_seq_len:
            return 0
        return min(self.num_blocks // self.blocks_per_sequence(context), DEFAULT_MAX_BATCH_SIZE)


def trtllm_pool(dep: Deployment, opts: TrtllmOptions) -> TrtllmPool:
    """TensorRT-LLM's pool for a deployment; a budget too small for one block is refused."""
    from kvcalc.engine.units import MAX_CONTEXT_TOKENS

    accelerator = dep.gpus.accelerator.name
    if not accelerator.startswith("NVIDIA"):
        # The registry names every NVIDIA part "NVIDIA ..." and no other part so.
        raise TrtllmConfigError(
            "{gpus}: " + literal(f"TensorRT-LLM runs on NVIDIA GPUs only, not on {accelerator}"),
            "gpus",
        )
    per_token = kv_size_per_token(dep)
    if per_token == 0:
        raise TrtllmConfigError(
            "{engine} " + literal(f"{NAME}: {dep.model.id} caches no tokens"), "engine"
        )
    free = opts.free_memory_bytes
    estimated = free is None
    if free is None:
        free = estimated_free_memory(dep, opts.max_num_tokens)
    budget = pool_bytes(max(free, 0), opts.free_gpu_memory_fraction)
    tokens = pool_tokens(budget, per_token, opts.max_tokens)
    blocks = pool_blocks(tokens, opts.tokens_per_block)
    if blocks == 0:
        raise TrtllmConfigError(
            "{engine} "
            + literal(
                f"{NAME}: {max(free, 0) / GiB:.2f} GiB free beside {dep.model.id}'s weights on "
                f"one {dep.gpus.accelerator.name} leaves no KV block; use more GPUs, lighter "
                "weights or give "
            )
            + "{free_memory}",
            "engine",
            "free_memory",
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
        max_seq_len=min(
            dep.model.max_context or MAX_CONTEXT_TOKENS, blocks * opts.tokens_per_block
        ),
    )


#: ``max_batch_size`` of the LLM API and ``trtllm-serve`` (``--max_batch_size``, default 2048):
#: the scheduler runs no more sequences at once, whatever the pool holds.
DEFAULT_MAX_BATCH_SIZE = 2048


# --------------------------------------------------------------------------------------------
# The engine behind the serving protocol (:mod:`kvcalc.engine.serving.base`)

#: The request length its batch is shown for when --ctx is not given.
DEFAULT_CONTEXT = 8192

_BUDGET = (
    "TensorRT-LLM's budget is {free_gpu_memory_fraction} of the memory free after the weights "
    "and its profile (or {free_memory} from its log)"
)


_LOADED = "{free_memory} is the memory left once the weights are loaded"
_REFUSALS = Refusals(
    {
        "gpu_util": _BUDGET,
        "reserve": _BUDGET,
        "overhead": _BUDGET,
        "kv_memory": _BUDGET,
        "block_size": "TensorRT-LLM pages its pool with {tokens_per_block}",
        "prefix_shared": "TensorRT-LLM's pool does not depend on block reuse",
        "max_num_batched_tokens": "TensorRT-LLM's profile runs its own max_num_tokens (8192)",
    }
)


#: What each of its own inputs declares: the engine that reads it, where the help lists it.
_OWN: dict[str, Any] = {"engine": NAME, "panel": "TensorRT-LLM engine"}


class TensorRTLLM(Engine):
    name = NAME
    label = LABEL
    summary = "trtllm: TensorRT-LLM's KV pool (free_gpu_memory_fraction of the free memory)"
    #: The PyTorch backend (trtllm-serve's default since 1.0) replays generation-only steps as
    #: CUDA graphs (cuda_graph_config, its docs' "generation-only CUDA graph") and all-reduces
    #: with allreduce_strategy AUTO: its one-shot/two-shot custom kernels for small messages,
    #: the kernel SGLang adapted (sglang PR #2904: 3.7-7.8 us at 512 B-32 KB, H100), 6 us.
    decode_profile = DecodeProfile(
        name=NAME,
        label=LABEL,
        cuda_graphs=True,
        allreduce="custom one-shot all-reduce (allreduce_strategy AUTO)",
        allreduce_latency_seconds=6e-6,
        sources=(
            "https://nvidia.github.io/TensorRT-LLM/features/"
            "torch_compile_and_piecewise_cuda_graph.html (generation-only CUDA graphs)",
            "https://github.com/NVIDIA/TensorRT-LLM/issues/2696 (the one-shot custom kernel)",
            SGLANG_2904 + " (the same kernel in SGLang: 3.7-7.8 us at 512 B-32 KB, H100)",
            REGISTRY_FIT,
        ),
    )
    #: Its ``KvCacheConfig`` fields, and the "available" figure of its log.
    inputs: tuple[Input, ...] = (
        Input(
            "free_gpu_memory_fraction",
            "fraction",
            "share of the memory free after the weights and the profile [default: 0.9]",
            **_OWN,
        ),
        # A token count, read as --block-size and --page-size are (32, 1k).
        Input(
            "tokens_per_block",
            "tokens",
            "tokens per KV block [default: 32; a TensorRT engine's is its build setting]",
            minimum=1,
            maximum=65536,
            **_OWN,
        ),
        Input("max_tokens", "tokens", "cap on the pool's tokens [default: none]", **_OWN),
        # TensorRT-LLM prints GiB: a bare number is read so.
        Input(
            "free_memory",
            "bytes",
            "free memory in GiB: 'available' of its 'Memory usage when calculating max tokens "
            "in paged kv cache' line, e.g. 17.83 (PyTorch logs: 'Estimated max memory in KV "
            "cache' / the fraction) [default: estimated]",
            metavar="GIB",
            bare_unit="GiB",
            **_OWN,
        ),
    )
    options = tuple(i.name for i in inputs)
    default_contexts: tuple[int, ...] | None = (DEFAULT_CONTEXT,)
    refusals = _REFUSALS
    plans = True

    def check_inputs(self, given: Given) -> None:
        reasons = dict(self.refusals.reasons)
        if "free_memory" in given:
            reasons.update(dict.fromkeys(("weights", "weight_dtype"), _LOADED))
        Refusals(reasons).check(given)

    def check_model(self, model: ModelSpec, given: Given) -> None:
        for mixer in model.mixer_pattern:
            try:
                check_layer(mixer, model.id)
            except TrtllmConfigError as exc:
                raise InputRefusal(exc.template, *exc.fields, model_specific=True) from None

    def check_kv_format(self, kv: KVFormat) -> None:
        trtllm_kv_format(kv)  # a TrtllmConfigError is the InputRefusal naming kv_dtype

    def engine_options(self, given: Given) -> TrtllmOptions:
        """Its options from their values (the free memory in bytes, token counts as integers);
        a value TensorRT-LLM refuses raises the refusal naming the field."""
        from kvcalc.engine.deployment import as_fraction

        fraction = given.get("free_gpu_memory_fraction")
        block = given.get("tokens_per_block")
        return TrtllmOptions(
            free_gpu_memory_fraction=(
                DEFAULT_FREE_GPU_MEMORY_FRACTION if fraction is None else as_fraction(fraction)
            ),
            tokens_per_block=DEFAULT_TOKENS_PER_BLOCK if block is None else block,
            max_tokens=given.get("max_tokens"),
            free_memory_bytes=given.get("free_memory"),
        )

    def pool(self, dep: Deployment, options: TrtllmOptions | None = None) -> TrtllmKVPool:
        return TrtllmKVPool(dep, options if options is not None else TrtllmOptions())


@dataclass(frozen=True, eq=False)  # compared by identity: no __eq__/__hash__ to build
class TrtllmKVPool:
    """TensorRT-LLM's pool of one replica, started once."""

    dep: Deployment
    options: TrtllmOptions

    @cached_property
    def _started(self) -> TrtllmPool | TrtllmConfigError:
        try:
            return trtllm_pool(self.dep, self.options)
        except TrtllmConfigError as exc:
            if "no KV block" not in str(exc):
                raise
            return exc

    def start(self) -> TrtllmPool | TrtllmConfigError:
        """The pool, or why TensorRT-LLM holds no block (a layout it refuses raises)."""
        return self._started

    def max_batches(self, contexts: Sequence[int]) -> tuple[list[int], str | None]:
        pool = self.start()
        if not isinstance(pool, TrtllmPool):
            return [0] * len(contexts), str(pool)
        return [pool.max_batch(c) for c in contexts], None

    def max_batch(self, context: int) -> int:
        try:
            pool = self.start()
        except TrtllmConfigError:
            return 0
        return pool.max_batch(context) if isinstance(pool, TrtllmPool) else 0

    def fraction(self, batch_per_replica: int, context: int) -> float:
        pool = self.start()
        if not isinstance(pool, TrtllmPool) or context > pool.max_seq_len:
            return math.inf
        return batch_per_replica * pool.blocks_per_sequence(context) / pool.num_blocks

    def longest_context(self) -> int | None:
        """``max_seq_len``: the model's maximum, lowered to what the pool holds (0: no pool)."""
        pool = self._started
        return pool.max_seq_len if isinstance(pool, TrtllmPool) else 0

    def batch(self, request: BatchRequest) -> TrtllmAnswer:
        """The pool at the contexts asked (else at 8,192 tokens)."""
        return TrtllmAnswer(self.dep, self._started, list(request.contexts or (DEFAULT_CONTEXT,)))

    def caveats(self) -> list[str]:
        """The estimated CUDA total, where the free memory it estimates starts from it."""
        pool = self._started
        estimated = isinstance(pool, TrtllmPool) and pool.free_memory_estimated
        return cuda_total_note(self.dep) if estimated else []

    def step_tokens(self) -> int:
        """``max_num_tokens``: what one iteration's batch of context and generation tokens
        holds."""
        return self.options.max_num_tokens

    def started_with(self) -> dict[str, Any]:
        return trtllm_started_with(self.options, self._started)


#: The keys of every CSV record: the pool, then one row per context.
TRTLLM_FIELDS = (
    "model",
    *GPUS_COLUMNS,
    "tp",
    "pp",
    "kv_dtype",
    "free_gpu_memory_fraction",
    "tokens_per_block",
    "free_memory_bytes",
    "kv_bytes_per_token_per_gpu",
    "num_blocks",
    "kv_cache_tokens",
    "fits",
    "context_tokens",
    "blocks_per_sequence",
    "max_batch",
    "max_batch_per_replica",
)


#: The pool's keys of the JSON, after the set-up's and before its counts.
_POOL_KEYS = (
    "free_gpu_memory_fraction",
    "tokens_per_block",
    "max_tokens_cap",
    "free_memory_bytes",
    "estimated",
    "kv_bytes_per_token_per_gpu",
    "kv_budget_bytes_per_gpu",
    "max_tokens",
    "kv_pool_bytes",
    "max_seq_len",
    "max_batch_size",
)


@dataclass(frozen=True, eq=False)  # compared by identity: no __eq__/__hash__ to build
class TrtllmAnswer:
    """`kvcalc batch`'s answer: the pool (or why it holds no block) and the contexts asked."""

    dep: Deployment
    result: TrtllmPool | TrtllmConfigError
    contexts: list[int]

    def part(self, setup: Setup) -> EnginePart:
        """The JSON object, one CSV record per context (the pool's figures repeated on each, a
        context with no pool as not fitting) and TensorRT-LLM's lines."""
        payload = trtllm_payload(self.dep, self.result, self.contexts, setup)
        # The payload lists every context asked, a pool too small for any with each not fitting.
        flat = {**payload, **{f"gpus_{k}": v for k, v in setup.gpus.items()}}
        records = [
            {k: row.get(k, flat.get(k)) for k in TRTLLM_FIELDS} for row in payload["contexts"]
        ]
        lines = trtllm_lines(self.dep, self.result, self.contexts, setup)
        return EnginePart(payload, records, TRTLLM_FIELDS, lines, payload["fits"], self.contexts)


def _why_not(pool: TrtllmPool, context: int) -> str | None:
    if context > pool.max_seq_len:
        held = "the pool holds" if pool.max_seq_len == pool.kv_cache_tokens else "of the model"
        return f"{context:,} tokens exceed max_seq_len {pool.max_seq_len:,} ({held})"
    return None


def trtllm_started_with(
    opts: TrtllmOptions, result: TrtllmPool | TrtllmConfigError
) -> dict[str, Any]:
    """The ``KvCacheConfig`` TensorRT-LLM started with and the free memory it read (null where
    no pool was built; ``estimated`` names it when kvcalc estimated it)."""
    pool = result if isinstance(result, TrtllmPool) else None
    return {
        "free_gpu_memory_fraction": float(opts.free_gpu_memory_fraction),
        "tokens_per_block": opts.tokens_per_block,
        "max_tokens_cap": opts.max_tokens,
        "free_memory_bytes": None if pool is None else pool.free_memory_bytes,
        "estimated": None if pool is None else ["free_memory"] * pool.free_memory_estimated,
    }


def trtllm_payload(
    dep: Deployment,
    result: TrtllmPool | TrtllmConfigError,
    contexts: Sequence[int],
    setup: Setup,
) -> dict[str, Any]:
    """One JSON object: the inputs TensorRT-LLM read, its pool, one row per context."""
    opts = result.options if isinstance(result, TrtllmPool) else None
    head: dict[str, Any] = {
        "model": dep.model.id,
        "gpus": dict(setup.gpus),
        "tp": dep.tp,
        "pp": dep.pp,
        **setup.layout,
        "engine": NAME,
        "kv_dtype": dep.kv_dtype.name,
        "kv_bits_per_value": setup.kv_bits_per_value,
        "gpu_memory_bytes": dep.cuda_total_bytes_per_gpu,
        "cuda_total_estimated": dep.cuda_total_estimated,
    }
    if not isinstance(result, TrtllmPool):
        return {
            **head,
            # As every engine's JSON: each key its CSV holds, null where no pool was built.
            **dict.fromkeys(_POOL_KEYS),
            "fits": False,
            "reason": str(result),
            "num_blocks": 0,
            "kv_cache_tokens": 0,
            # As every engine's JSON: each context asked, none fitting (as the CSV lists them).
            "contexts": [
                {
                    "context_tokens": c,
                    "blocks_per_sequence": None,
                    "max_batch": 0,
                    "max_batch_per_replica": 0,
                    "fits": False,
                }
                for c in contexts
            ],
        }
    assert opts is not None
    reasons = [r for r in (_why_not(result, c) for c in contexts) if r is not None]
    return {
        **head,
        **trtllm_started_with(opts, result),
        "kv_bytes_per_token_per_gpu": result.kv_size_per_token,
        "kv_budget_bytes_per_gpu": result.pool_bytes,
        "max_tokens": result.max_tokens,
        "num_blocks": result.num_blocks,
        "kv_cache_tokens": result.kv_cache_tokens,
        "kv_pool_bytes": result.allocated_bytes,
        "max_seq_len": result.max_seq_len,
        "max_batch_size": DEFAULT_MAX_BATCH_SIZE,
        "fits": not reasons and all(result.max_batch(c) > 0 for c in contexts),
        "reason": reasons[0] if reasons else None,
        "contexts": [
            {
                "context_tokens": c,
                "blocks_per_sequence": result.blocks_per_sequence(c),
                "max_batch": result.max_batch(c) * dep.replicas,
                "max_batch_per_replica": result.max_batch(c),
                "fits": result.max_batch(c) > 0,
            }
            for c in contexts
        ],
    }


def trtllm_lines(
    dep: Deployment,
    result: TrtllmPool | TrtllmConfigError,
    contexts: Sequence[int],
    setup: Setup,
) -> list[str]:
    """The text output: the set-up, then TensorRT-LLM's own start-up lines."""
    header = (
        f"{dep.model.name} ({dep.model.id}) on {dep.gpus}: {LABEL}, tp {dep.tp}, pp {dep.pp}, "
        f"KV {setup.kv_label}"
    )
    if not isinstance(result, TrtllmPool):
        return [header, *setup.layout_notes, f"does not fit: {result}"]
    opts = result.options
    cap = f", max_tokens={opts.max_tokens:,}" if opts.max_tokens is not None else ""
    source = (
        " (estimated: the GPU less its weights and the activation profile; give --free-memory "
        "from the log)"
        if result.free_memory_estimated
        else ""
    )
    lines = [
        header,
        *setup.layout_notes,
        *cuda_total_note(dep),
        f"free_gpu_memory_fraction={float(opts.free_gpu_memory_fraction):g}, "
        f"tokens_per_block={opts.tokens_per_block}{cap}",
        "Memory usage when calculating max tokens in paged kv cache: total: "
        f"{log_gib(dep.cuda_total_bytes_per_gpu)}, available: "
        f"{log_gib(result.free_memory_bytes)}{source}",
        f"kv size per token is {result.kv_size_per_token:,} bytes per rank",
        f"max tokens: {result.max_tokens:,} ({log_gib(result.pool_bytes)} of KV budget)",
        f"Number of blocks in KV cache primary pool: {result.num_blocks:,}",
        f"Number of tokens per block: {opts.tokens_per_block}.",
        f"[MemUsageChange] Allocated {log_gib(result.allocated_bytes)} for max tokens in paged KV "
        f"cache ({result.kv_cache_tokens:,}).",
    ]
    if result.free_memory_estimated and dep.gpus.accelerator.unified_memory:
        # The DGX Spark log held 49.28 GiB outside torch: the OS and page cache share the pool.
        lines.append(
            "unified memory: what the OS and other processes hold is not estimated; "
            "give --free-memory from the log"
        )
    for c in contexts:
        batch = result.max_batch(c)
        capped = " (max_batch_size)" if batch == DEFAULT_MAX_BATCH_SIZE else ""
        lines.append(
            f"Sequences of {c:,} tokens at once: {batch:,}{capped} "
            f"({result.blocks_per_sequence(c):,} blocks each)"
        )
    reasons = [r for r in (_why_not(result, c) for c in contexts) if r is not None]
    return lines + [f"does not fit: {r}" for r in reasons][:1]


ENGINE: ServingEngine = TensorRTLLM()
