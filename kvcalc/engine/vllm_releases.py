"""What changed from vLLM 0.10 to 0.34 on the path from GPU memory to KV blocks: one row per
release family, stating only what that family changed from the one before (the first states
every rule), each rule with its source.

This is the only place a vLLM release is compared: :mod:`kvcalc.engine.vllm` and the engine
plug-in read the rules of the release asked for (:func:`vllm_release`) and never test a version
themselves. Sources are the reference ``shared/reference/vllm-releases.md`` (PRs, issues and
logs it cites) and the released wheels' own code, read from ``pip download vllm==X --no-deps``
(``vllm/config/cache.py``, ``vllm/envs.py``, ``vllm/engine/arg_utils.py``,
``vllm/config/vllm.py``, ``vllm/v1/core/kv_cache_utils.py``, ``vllm/v1/worker/gpu_worker.py``)
for 0.10.2, 0.11.0, 0.17.0, 0.20.0, 0.21.0, 0.25.0, 0.26.0, 0.27.0, 0.28.0, 0.30.0, 0.32.0,
0.33.0 and 0.34.0. Where the wheel and the reference disagree the wheel wins (0.20.0 already
defaults to 0.92 and subtracts the CUDA-graph estimate; its token line is still block-based).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Literal

from kvcalc.engine.hardware import capability_family
from kvcalc.engine.overhead import SAMPLER_LOGIT_COPIES
from kvcalc.engine.serving.base import EngineRefusal
from kvcalc.engine.units import GiB

TokenLine = Literal["blocks", "concurrency"]
Accounting = Literal["non_torch", "consumed"]
GraphRule = Literal["after_kv", "printed", "subtracted"]
DenseGraphRule = Literal["v1", "none", "v2"]
BackendRule = Literal["cutlass_sm100", "cutlass_sm10x", "flashinfer_sm10x", "preferred"]
MixedHeadRule = Literal["per_layer", "triton_above_256", "fa4_or_triton"]
KVSizing = Literal["profiled", "after_warmup"]


class VLLMVersionError(EngineRefusal):
    """A release kvcalc has no rules for, or a version it cannot read."""


@dataclass(frozen=True)
class VLLMRelease:
    """The rules of one vLLM release family (its first minor release up to the next row's)."""

    family: str
    """The first release of the family, "0.21"."""
    gpu_memory_utilization: Fraction
    """The default ``--gpu-memory-utilization``."""
    cudagraph: GraphRule
    """What becomes of the CUDA graphs' memory: captured after the KV cache is allocated and
    outside the budget ("after_kv"), estimated and printed but not subtracted ("printed"), or
    estimated and subtracted from the KV budget ("subtracted")."""
    dense_graphs: DenseGraphRule
    """Which estimator dense models' graphs get: Model Runner V1's two-sample estimate ("v1",
    up to 0.24); Model Runner V2, their default from 0.25, whose ``profile_cudagraph_memory``
    returns 0 ("none": "It is TBD whether we keep this API", vllm/v1/worker/gpu/model_runner.py
    of 0.26.0, 0.27.1, 0.28.0; #36520, #49224 from 0.25.1); V2's own estimate ("v2", 0.29.0 on:
    ``profile_cudagraph_memory`` in vllm/v1/worker/gpu/cudagraph_utils.py captures every
    PIECEWISE size and extrapolates FULL from the two largest)."""
    full_graphs: bool
    """FULL decode graphs are captured beside the PIECEWISE ones (FULL_AND_PIECEWISE, 0.11+)."""
    capture_grid_67: bool
    """0.10-0.11 capture 1, 2, 4 and every multiple of 8 up to min(2 x max_num_seqs, 512): 67
    sizes at the defaults (later releases step by 16 from 256)."""
    token_line: TokenLine
    """"GPU KV cache size: N tokens": num_blocks // groups x the smallest block ("blocks") or
    int(max_concurrency x max_model_len) ("concurrency")."""
    async_in_flight: bool
    """Sliding-window and chunked-local layers reserve the tokens of every batch in flight
    (``max_in_flight_tokens``: 2 x max_num_batched_tokens under async scheduling at PP 1)."""
    accounting: Accounting
    """What the summary line calls its terms: weights and non-torch apart ("non_torch") or one
    "consumed memory (weights + non-torch)" with the graph estimate inside the printed peak
    activation ("consumed"). The consumed figure is the free-memory drop since the init
    snapshot, so it also holds torch memory made before the profile run that the older split
    left out: Model Runner V1's ``inputs_embeds``
    (:func:`kvcalc.engine.vllm.consumed_runner_buffers`)."""
    large_device_tier: bool
    """A device of 160 GiB or more gets 16384 batched tokens / 1024 sequences for serve."""
    gb10_small_tier: bool
    """GB10 (DGX Spark, capability 12.1) keeps the small defaults whatever its memory: up to
    0.32 because NVML's device memory query fails on it (``get_device_total_memory`` in
    vllm/platforms/cuda.py of 0.13.0, 0.20.1, 0.27.1 and 0.32.0 calls
    ``nvmlDeviceGetMemoryInfo`` with no fallback, so ``get_batch_defaults`` takes its
    ``except`` branch, device_memory 0); from 0.33 by ``is_gb10`` beside the new fallback."""
    mamba_align: bool
    """Prefix caching is on by default for Mamba hybrids in "align" mode: two state pages per
    request instead of one. The one rule for that default: read by
    :func:`kvcalc.engine.vllm_parallel.mamba_cache_mode` (``--enable-prefix-caching`` not
    given), whose mode sets the state pages (:func:`~kvcalc.engine.vllm_parallel.state_pages`)."""
    sampler_logit_copies: Fraction
    """Copies of the max_num_seqs x vocabulary fp32 logits the profile's sampler run holds at
    its peak (:func:`kvcalc.engine.overhead.sampler_peak`)."""

    dense_sampler_fp32_copies: int | None
    """Model Runner V2's profiled sampler run (dense models from 0.25, every model from 0.29):
    the fp32 copies of the max_num_seqs x vocabulary logits it makes beside the logits
    ``compute_logits`` returns in the model dtype
    (:func:`kvcalc.engine.overhead.v2_sampler_peak`); None where dense models
    run on Model Runner V1, whose sampler holds :attr:`sampler_logit_copies`. V2's dummy batch
    (``InputBatch.make_dummy``, vllm/v1/worker/gpu/input_batch.py) leaves every request greedy
    with top_k = vocabulary and top_p = 1 and no logprobs, penalties or bias
    (``SamplingStates.__init__``, vllm/v1/worker/gpu/sample/states.py), so nothing beyond that
    copy runs: ``gumbel_sample`` keeps one int64 and one fp32 per request and 1,024-token
    block (vllm/v1/worker/gpu/sample/gumbel.py). 0.25.0: ``Sampler.apply_sampling_params``
    (vllm/v1/worker/gpu/sample/sampler.py) copies the logits to fp32 unconditionally (1);
    0.26.0 works on them in place ("the ops below upcast to fp32 internally", a clone for raw
    logprobs only) (0); 0.27.1, 0.28.0, 0.31.0 and 0.33.0 return them untouched unless a
    request needs processing (``_requires_logits_processing`` / ``needs_logits_processing``,
    false for the dummy batch) (0). From 0.33 a second pass follows
    (:attr:`profile_sampler_warmup_pass`)."""

    profile_sampler_warmup_pass: bool
    """Model Runner V2's profiled sampler runs a second pass with every sampling feature on
    (``_dummy_sampler_run``, vllm/v1/worker/gpu/model_runner.py of 0.33.0 and 0.34.0, not
    0.32.0: "warmup_kernels (run after the KV cache is sized) pays for the fp32 logits pipeline,
    so the profiled peak must too"; ``SamplingParams.for_sampler_warmup``), which makes the
    fp32 copy and, with FlashInfer, two more fp32 tensors
    (:func:`kvcalc.engine.vllm.dense_sampler_copies`)."""

    moe_workspace_held: bool
    """The fused-MoE workspaces outlive the layer (the modular kernel's workspace manager sizes
    them once and keeps them, so the sampler's peak sees them); before, the default Triton path
    called ``fused_experts``, whose ``torch.empty`` caches were freed after each layer."""

    shared_kv_projections: bool
    """A KV-shared layer (Gemma 4's last ``num_kv_shared_layers``) gets a whole
    QKVParallelLinear whose K and V slots it never reads, as wide as its source layer's
    (``Gemma4Attention.__init__`` in vllm/model_executor/models/gemma4.py of 0.20.0, 0.21.0,
    0.22.1, 0.27.1, 0.28.0 and 0.29.0); from 0.30 a ColumnParallelLinear q_proj only ("like HF
    this layer only has q_proj", gemma4.py of 0.30.0, 0.31.0, 0.32.0 and 0.33.0)."""

    backend_rule: BackendRule
    """How an MLA model's default block is set when ``--block-size`` is not given
    (:func:`kvcalc.engine.vllm_backends.default_backend_block`): forced by
    ``check_and_update_config`` to the default backend's block, CUTLASS MLA's 128 on capability
    10.0 only ("cutlass_sm100", 0.10-0.11) or the 10.x family ("cutlass_sm10x"), FlashInfer
    MLA's 64 on the 10.x family ("flashinfer_sm10x", 0.17), FlashMLA's 64 on Hopper; or the
    preferred block of the first backend of the priority list ("preferred", 0.18 on)."""

    mixed_head_backend: MixedHeadRule
    """The one backend a model whose attention layers differ in head size (Gemma 4's 256 and
    512) gets when none is chosen (``Gemma4Config.verify_and_update_config``,
    vllm/model_executor/models/config.py): none forced, each layer its own ("per_layer", before
    0.20); TRITON_ATTN when the larger size is above FlashAttention's 256 ("triton_above_256",
    0.20.0, 0.21.0, 0.22.1); from 0.25 FlashAttention 4 where ``is_fa_version_supported(4)``
    holds, capability 9.x, 10.x or 11.x (vllm_flash_attn/flash_attn_interface.py), the
    priority list's backend then kept, else TRITON_ATTN ("fa4_or_triton", 0.25.0, 0.27.1,
    0.28.0, 0.33.0)."""

    model_runner_v1: bool
    """Model Runner V1 is still in the wheel, and runs every model Model Runner V2 does not take
    (:attr:`v2_every_model`). 0.34 removed it ("Model Runner V1 has been removed",
    ``Platform.validate_environ``, vllm/platforms/interface.py of 0.34.0; no
    vllm/v1/worker/gpu_model_runner.py), so V2 runs every model there."""

    v2_every_model: bool
    """Model Runner V2 is the default for every model, not only dense ones: from 0.29
    ``VllmConfig.use_v2_model_runner`` (vllm/config/vllm.py of 0.29.0, 0.30.0, 0.31.0, 0.32.0,
    0.33.0) falls back to V1 only for a feature V2 lacks (``_get_v2_model_runner_unsupported_
    features``: ngram drafts, custom logits processors, sequence parallelism at TP > 1, dual
    batch overlap, ...), so MoE and hybrid models run on V2 (a 0.29.0 L4 start of the hybrid
    Qwen3.5-4B logs "Using V2 Model Runner", tests/fixtures/vllm_logs). In 0.25-0.28 V2 took
    generate models that are neither MoE nor hybrid nor attention-free, and a list of
    architectures beside them (``_is_default_v2_model_runner_model`` and
    ``DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES``: DeepseekV2ForCausalLM and Qwen2MoeForCausalLM
    in 0.25.0, DeepseekV4ForCausalLM added in 0.28.0), which kvcalc does not hold; nor the
    V1 default 0.29-0.31 keep on ROCm for DeepSeek V3.2 and V4 (GLM's DSA model too in 0.31,
    ``ROCM_DEFAULT_MRV1_ARCHITECTURES``)."""

    kv_sizing: KVSizing
    """How the KV cache is sized: from the profile run's estimate before the cache is
    allocated ("profiled", up to 0.33); or, by 0.34's default extensible KV cache, from the
    memory free after warmup and CUDA-graph capture ("after_warmup",
    :mod:`kvcalc.engine.vllm_warmup`), where ``--gpu-memory-utilization`` defaults to 1.0
    (``CacheConfig.resolved_gpu_memory_utilization``, vllm/config/cache.py of 0.34.0). A KV
    budget given (``--kv-cache-memory``) turns it off (``_resolve_extensible_kv_cache``,
    vllm/config/vllm.py of 0.34.0): then the budget stands, as in every release."""

    default_block: int
    """``CacheConfig.DEFAULT_BLOCK_SIZE``, what ``get_preferred_block_size`` is asked for: 16 up
    to 0.33, 64 from 0.34 (vllm/config/cache.py of 0.34.0), which every default CUDA backend
    takes (FLASH_ATTN, TRITON_ATTN and TRITON_MLA a multiple of 16, FLASHINFER and
    FLASHINFER_MLA 64 among theirs) but ROCM_ATTN, which prefers 16 whatever it is asked
    (vllm/v1/attention/backends of 0.34.0)."""

    fit_holds_null_block: bool
    """The start-up check that one request of max_model_len fits, and the estimated maximum
    length it prints, count one block fewer than the pool: "Reserve the null block BlockPool
    permanently holds back, so the check plans against usable blocks"
    (``check_enough_kv_cache_memory`` and ``get_kv_cache_configs``,
    vllm/v1/core/kv_cache_utils.py of 0.29.0-0.32.0, kv_cache_planning.py of 0.33.0 and
    0.34.0; 0.28.0 checks the whole budget)."""

    mm_item_batched_floor: bool
    """An unset ``max_num_batched_tokens`` of a multimodal prefix LM is raised to the largest
    item its processor states (:attr:`kvcalc.engine.vision.VisionEncoder.max_item_tokens`),
    since such a model takes an item in one step ("a single multimodal item must fit in one
    batch"; ``_set_default_max_num_seqs_and_batched_tokens_args``, vllm/engine/arg_utils.py of
    0.22.1, 0.25.1 and 0.34.0; not in 0.21.0)."""

    fa4_hd256_block: bool
    """FlashAttention's preferred block is at least 128 where FA4 runs its Blackwell head-size-256
    kernel (``FlashAttentionBackend._get_fa4_hd256_block_size``, ``FA4_HD256_PAGE_SIZE`` and
    ``uses_fa4_hd256_kernel``: capability 10.x or 11.x, vllm/v1/attention/backends of 0.29.0,
    0.32.0, 0.33.0 and 0.34.0; not in 0.28.0)."""

    mamba2_checkpoint_page: bool
    """In "align" mode a Mamba2 layer's state takes a third page per request, for the prefill
    checkpoint it exports from inside a forward (``num_prefill_checkpoint_blocks=1`` in
    ``MambaMixer2.get_kv_cache_spec``, vllm/model_executor/layers/mamba/mamba_mixer2.py of
    0.32.0, 0.33.0 and 0.34.0, not 0.31.0; ``MambaSpec.max_memory_usage_bytes``,
    vllm/v1/kv_cache_interface.py)."""

    gdn_checkpoint_page: bool
    """Likewise a Gated DeltaNet layer's, where FlashInfer runs its prefill (Hopper: CUDA
    capability 9.x), whose checkpoints also align the attention block to 64
    (``FLASHINFER_GDN_CHECKPOINT_ALIGNMENT``, v1/attention/backends/gdn_attn.py; the layer's
    ``get_kv_cache_spec`` in model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py of 0.33.0
    and 0.34.0, not 0.32.0). Blackwell's FlashInfer GDN prefill (head_k_dim 128 and a CUDA
    13 runtime) is not modelled."""

    tokens_capture_size: bool
    """max_num_batched_tokens is captured where it lies below the ceiling off the grid's steps
    ("ensure max_num_tokens is captured if within max capture size", ``_set_cudagraph_sizes``
    in vllm/config/vllm.py of 0.25.0 to 0.34.0; earlier wheels not read for it)."""

    graph_ceiling_sm100: bool
    """The capture sizes reach min(2 x max_num_seqs, 1024) on the 10.x family, 512 elsewhere
    (``default_max_graph_size``, vllm/config/vllm.py of 0.28.0 to 0.34.0; 512 everywhere in
    0.25.0 and 0.27.1)."""

    seqs_capture_size: bool
    """max_num_seqs is captured where it lies below the ceiling off the grid's steps
    (``uniform_decode_sizes``, vllm/config/vllm.py of 0.31.0 to 0.34.0; not 0.30.0)."""

    graphs_follow_backends: bool
    """FULL_AND_PIECEWISE falls back to PIECEWISE where the least of the model's attention
    backends supports no FULL graph (``resolve_cudagraph_mode_and_sizes``,
    vllm/config/compilation.py of 0.28.0, 0.29.0, 0.33.0 and 0.34.0, from V1's
    ``_check_and_update_cudagraph_mode`` and V2's model runner; earlier wheels not read)."""

    mm_prefix_composite: bool
    """A model whose image tokens attend both ways (vLLM's ``is_mm_prefix_lm``) at head size
    256 or 512 gets a composite backend first on CUDA: TRITON_FLASH_ATTN on Hopper, and
    TRITON_FLASHINFER, whose kernel takes 64-token blocks only, on the 10.x family
    (``_get_backend_priorities``, vllm/platforms/cuda.py; triton_flash_attn.py and
    triton_flashinfer.py in vllm/v1/attention/backends of 0.30.0 to 0.34.0, not 0.29.0); its
    routing supports no CUDA graph where a sliding-window layer is not clamped
    (``MMPrefixAttentionRouting.get_cudagraph_support``, composite.py: Gemma 3's)."""

    split_capture_sizes: bool
    """CUDA graphs are captured at separate prefill and decode sizes
    (``VllmConfig._split_cudagraph_capture_sizes``, vllm/config/vllm.py of 0.34.0, not in
    0.33.0): Model Runner V2 captures its PIECEWISE graphs at the prefill token counts and its
    FULL decode graphs at the decode request counts (``ModelCudaGraphManager._init_candidates``,
    vllm/v1/worker/gpu/cudagraph_utils.py), each grid its own on the 10.x family
    (:func:`capture_grids`)."""

    def in_flight_tokens(self, max_num_batched_tokens: int, pp: int) -> int:
        """Tokens a sliding-window or chunked-local layer must hold beyond its window: one
        step before 0.26; from 0.26 ``max_concurrent_batches x max_num_batched_tokens``, the
        concurrent batches being 2 under async scheduling at PP 1 and PP otherwise
        (``VllmConfig.max_concurrent_batches``, vllm/config/vllm.py of 0.26.0; Model Runner V2
        would take PP + 1 under PP, not modelled)."""
        if not self.async_in_flight:
            return max_num_batched_tokens
        return (2 if pp == 1 else pp) * max_num_batched_tokens


def _release(family: str, **rules: object) -> VLLMRelease:
    """The first family's rules, each stated."""
    return VLLMRelease(family, **rules)  # type: ignore[arg-type]


def _then(family: str, **changes: object) -> tuple[str, dict[str, object]]:
    """A later family: what changed from the family before it."""
    return family, changes


def _table(first: VLLMRelease, *later: tuple[str, dict[str, object]]) -> tuple[VLLMRelease, ...]:
    """Every family's rules: each the one before it with its changes, so a row states only
    what its release changed."""
    rows = [first]
    for family, changes in later:
        rows.append(replace(rows[-1], family=family, **changes))  # type: ignore[arg-type]
    return tuple(rows)


#: The sampler run of 0.10-0.16 held about 9.6 copies of the logits, not 0.19's 3.72: fitted on
#: the one figure the reference gives, Qwen3-14B on an H100 (8192 batched tokens, 1024
#: sequences), whose peak fell from 5.64 GiB in 0.16 to 2.23 in 0.17 (vllm-releases.md section
#: 3; 0.078 GiB of hidden states + 9.6 x 0.58 GiB of logits = 5.64). Used to set this constant;
#: the 0.10.2 L40S and 0.11 H200 logs of tests/fixtures/vllm_logs are held back from it.
PRE_017_LOGIT_COPIES = Fraction("9.6")

#: One row per family, oldest first; each row holds until the next.
RELEASES: tuple[VLLMRelease, ...] = _table(
    # 0.10: graphs captured after the KV cache is allocated, outside the budget (PR #21489's
    # example); 67 capture sizes ("67/67" in 0.10.2 logs, vllm/config/compilation.py 0.10.2).
    # The default Triton MoE path calls fused_experts, whose caches are freed after each layer
    # (fused_moe.py fused_experts_impl, 0.11.0 and 0.13.0 wheels), until 0.14.
    # MLA: CUTLASS MLA forced to 128 on capability 10.0 exactly (is_device_capability(100)),
    # FlashMLA to 64 on Hopper (check_and_update_config, vllm/platforms/cuda.py 0.10.2).
    _release("0.10", gpu_memory_utilization=Fraction(90, 100), cudagraph="after_kv",
             dense_graphs="v1", full_graphs=False, capture_grid_67=True, token_line="blocks",
             async_in_flight=False, accounting="non_torch", large_device_tier=False,
             gb10_small_tier=True, mamba_align=False, sampler_logit_copies=PRE_017_LOGIT_COPIES,
             dense_sampler_fp32_copies=None, profile_sampler_warmup_pass=False,
             moe_workspace_held=False, shared_kv_projections=True,
             backend_rule="cutlass_sm100", mixed_head_backend="per_layer", model_runner_v1=True,
             v2_every_model=False,
             kv_sizing="profiled", default_block=16, fa4_hd256_block=False,
             mamba2_checkpoint_page=False, gdn_checkpoint_page=False, tokens_capture_size=False,
             graph_ceiling_sm100=False, seqs_capture_size=False, graphs_follow_backends=False,
             mm_prefix_composite=False, split_capture_sizes=False,
             fit_holds_null_block=False, mm_item_batched_floor=False),
    # 0.11: FULL_AND_PIECEWISE default (0.11.0 notes), still 67 sizes each ("PIECEWISE 67/67",
    # "FULL 67/67" in tests/fixtures/vllm_logs/v011-h200-qwen3-next-80b-tp2.log); the init
    # snapshot after NCCL (PR #25359), so NCCL buffers are out of non-torch memory.
    _then("0.11", full_graphs=True),
    # 0.12: capture sizes from max_num_seqs (min(2 x max_num_seqs, 512) on the 1, 2, 4, 8k,
    # 16k grid, _set_cudagraph_sizes in vllm/config/vllm.py; 0.17.0 and later wheels).
    # CUTLASS MLA's 128 on the whole 10.x family (is_device_capability_family(100), cuda.py
    # 0.13.0 and 0.14.0).
    _then("0.12", capture_grid_67=False, backend_rule="cutlass_sm10x"),
    # 0.14: the unquantized and FP8 MoE methods run a FusedMoEModularKernel whose workspaces
    # come from current_workspace_manager() and stay (unquantized_fused_moe_method.py and
    # quantization/fp8.py of the 0.14.0 wheel; 0.13.0 still called fused_experts).
    _then("0.14", moe_workspace_held=True),
    # 0.17: the activation profile of 0.19 (Qwen3-14B 5.64 -> 2.23 GiB from 0.16, the
    # reference); PR #30515's estimate is printed ("Estimated CUDA graph memory") but not
    # subtracted: the 0.19.0 H100 logs of the reference print it without subtracting (the
    # 0.17.0 wheel's envs.py has no VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS yet, so it prints
    # none there; either way nothing is subtracted). MLA on the 10.x family: FlashInfer MLA
    # forced to 64 (cuda.py 0.17.0; 0.15-0.16 not read: they keep the 0.14 row's CUTLASS).
    _then("0.17", cudagraph="printed", sampler_logit_copies=SAMPLER_LOGIT_COPIES,
          backend_rule="flashinfer_sm10x"),
    # 0.18: the block is the first backend's preferred size (update_block_size_for_backend,
    # vllm/platforms/interface.py 0.18.0; the forcing in cuda.py is gone).
    _then("0.18", backend_rule="preferred"),
    # 0.20: vllm/config/cache.py 0.20.0 defaults gpu_memory_utilization to 0.92 and envs.py to
    # ESTIMATE_CUDAGRAPHS=1 (PR #38284; the reference dates it 0.21, the 0.20.0 wheel has it);
    # the token line is still num_blocks // groups x block (kv_cache_utils.py 0.20.0).
    _then("0.20", gpu_memory_utilization=Fraction(92, 100), cudagraph="subtracted",
          mixed_head_backend="triton_above_256"),
    # 0.21: "GPU KV cache size in tokens = max_concurrency * max_model_len"
    # (kv_cache_utils.py 0.21.0).
    _then("0.21", token_line="concurrency"),
    # 0.22: a multimodal prefix LM's default batched tokens hold its largest item (Gemma 4's
    # 2,496-token video; arg_utils.py of 0.22.1, not 0.21.0).
    _then("0.22", mm_item_batched_floor=True),
    # 0.25: Model Runner V2 default for every dense model (#44443, 0.25.0 notes), whose
    # profile_cudagraph_memory returns 0 (#36520, #49224 "starting with 0.25.1"); V2's sampler
    # copies the profile's logits to fp32 once (gpu/sample/sampler.py 0.25.0); the batched
    # tokens captured off the grid (vllm/config/vllm.py 0.25.0, the earliest read).
    _then("0.25", dense_graphs="none", dense_sampler_fp32_copies=1,
          mixed_head_backend="fa4_or_triton", tokens_capture_size=True),
    # 0.26: max_in_flight_tokens = max_concurrent_batches x max_num_batched_tokens for
    # sliding-window / chunked-local specs (vllm/config/vllm.py 0.26.0, PR #47728); MRv2's
    # graph estimate is still 0 (gpu/model_runner.py of 0.26.0, 0.27.1, 0.28.0); V2's sampler
    # works on the logits in place, no fp32 copy (gpu/sample/sampler.py 0.26.0 on).
    _then("0.26", async_in_flight=True, dense_sampler_fp32_copies=0),
    # 0.27: "consumed memory (weights + non-torch)" accounting (mem_utils.py 0.27.1 and 0.28.0,
    # total_consumed + transient_peak_headroom), which counts Model Runner V1's inputs_embeds.
    _then("0.27", accounting="consumed"),
    # 0.28: devices of >= 160 GiB get 16384 / 1024 (get_batch_defaults, arg_utils.py 0.28.0);
    # prefix caching on by default for hybrids in "align" mode (#50991); the capture sizes
    # reach 1024 on the 10.x family, and FULL graphs fall back to PIECEWISE where a backend
    # supports none (vllm/config/vllm.py, compilation.py of 0.28.0).
    _then("0.28", large_device_tier=True, mamba_align=True, graph_ceiling_sm100=True,
          graphs_follow_backends=True),
    # 0.29: FlashAttention prefers 128 where FA4's head-size-256 Blackwell kernel runs
    # (_get_fa4_hd256_block_size, flash_attn.py of 0.29.0); Model Runner V2 estimates its
    # graphs (gpu/cudagraph_utils.py profile_cudagraph_memory in the 0.29.0, 0.30.0 and 0.33.0
    # wheels; PR #53306 and its forward fixes). The fit check holds back the null block
    # (kv_cache_utils.py 0.29.0).
    # Model Runner V2 takes every model V2's features allow, MoE and hybrid ones too
    # (use_v2_model_runner, vllm/config/vllm.py of 0.29.0-0.33.0).
    _then("0.29", dense_graphs="v2", fa4_hd256_block=True, fit_holds_null_block=True,
          v2_every_model=True),
    # 0.30: Gemma 4's KV-shared layers build a q_proj alone, no K/V slots (gemma4.py of the
    # 0.30.0 wheel; 0.29.0's still builds QKVParallelLinear on every layer); the composite
    # backends of multimodal prefix LMs (v1/attention/backends/composite.py of 0.30.0).
    _then("0.30", shared_kv_projections=False, mm_prefix_composite=True),
    # 0.31: max_num_seqs captured off the grid's steps (uniform_decode_sizes, vllm.py 0.31.0).
    _then("0.31", seqs_capture_size=True),
    # 0.32: a Mamba2 state's prefill-checkpoint page in align mode (mamba_mixer2.py 0.32.0).
    _then("0.32", mamba2_checkpoint_page=True),
    # 0.33: GB10 kept on the small tier by is_gb10 in get_batch_defaults (arg_utils.py 0.33.0),
    # added with platforms/cuda.py's fallback for NVML's missing memory query there; before,
    # the query's failure gave the small tier (the 0.13 DGX Spark log of
    # tests/fixtures/vllm_logs: max_num_batched_tokens=2048, FULL graphs 35/35), the same rule.
    # Gated DeltaNet's checkpoint page and 64-token alignment under FlashInfer's prefill
    # (qwen_gdn_linear_attn.py 0.33.0).
    # and Model Runner V2's profiled sampler's second, fully featured pass (model_runner.py).
    _then("0.33", gdn_checkpoint_page=True, profile_sampler_warmup_pass=True),
    # 0.34: Model Runner V1 removed, so V2 runs every model; the extensible KV cache, on by
    # default on CUDA and ROCm, sizes the cache after warmup and graph capture with the
    # utilization defaulting to 1.0; the default block 64 (vllm/v1/worker/
    # extensible_kv_cache.py, vllm/config/cache.py, vllm/platforms/interface.py of 0.34.0).
    # get_batch_defaults (arg_utils.py) and the token line (kv_cache_utils.py) are unchanged.
    # The CUDA graphs' prefill and decode sizes resolved apart (_split_cudagraph_capture_sizes,
    # vllm/config/vllm.py of 0.34.0), with wider grids of their own on the 10.x family.
    _then("0.34", model_runner_v1=False, kv_sizing="after_warmup", default_block=64,
          gpu_memory_utilization=Fraction(1), split_capture_sizes=True),
)

#: The oldest and the newest release kvcalc has rules for (0.34.0 is the newest on the
#: package index as of this writing).
OLDEST_VERSION = "0.10"
NEWEST_VERSION = "0.34.0"
#: The release the block model was checked against (61 vLLM 0.19.0 H100 logs).
BLOCK_MODEL_VERSION = "0.19"
DEFAULT_VERSION = NEWEST_VERSION

#: A release as pip spells vLLM's (PEP 440): X.Y[.Z[.N...]], then a pre-release, post-release,
#: dev and local tag (0.10.1.1, 0.26.1rc0, 0.8.5.post1, 0.11.1rc2.dev161+g1234abcd); nothing
#: else after the numbers, so that 0.34x is no release rather than 0.34.
_VERSION = re.compile(
    r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.\d+)*(?:(?:a|b|rc)\d+)?(?:\.?post\d+)?(?:\.?dev\d+)?"
    r"(?:\+[A-Za-z0-9]+(?:\.[A-Za-z0-9]+)*)?"
)


def parse_version(text: str) -> tuple[int, int, int]:
    """(major, minor, patch) of "0.21", "0.21.1", "v0.26.1rc0" (a pre-release or local tag is
    read as its release)."""
    match = _VERSION.fullmatch(text.strip())
    if match is None:
        raise VLLMVersionError(
            "{vllm_version}: " + f"{text!r} is not a vLLM release; give X.Y or X.Y.Z, "
            f"e.g. 0.21", "vllm_version",
        )
    return int(match[1]), int(match[2]), int(match[3] or 0)


def dotted_version(version: tuple[int, int, int]) -> str:
    """``(0, 21, 1)`` as "0.21.1"."""
    return ".".join(map(str, version))


def vllm_release(text: str | None = None) -> VLLMRelease:
    """The rules of the family ``text`` belongs to (None: :data:`DEFAULT_VERSION`); refused
    outside 0.10 .. the newest."""
    version = parse_version(text or DEFAULT_VERSION)
    oldest, newest = parse_version(OLDEST_VERSION), parse_version(NEWEST_VERSION)
    if not oldest[:2] <= version[:2] <= newest[:2]:
        raise VLLMVersionError(
            "{vllm_version}: " + f"vLLM {text} is outside the releases kvcalc models "
            f"({OLDEST_VERSION} to {NEWEST_VERSION[:-2]}); give one of them", "vllm_version",
        )
    row = RELEASES[0]
    for candidate in RELEASES:
        if parse_version(candidate.family)[:2] <= version[:2]:
            row = candidate
    return row


def version_label(text: str | None) -> str:
    """The release as output names it: as given, without a leading v."""
    return (text or DEFAULT_VERSION).strip().removeprefix("v")


# --------------------------------------------------------------------------------------------
# `vllm serve`'s GPU-dependent defaults (EngineArgs.get_batch_defaults, vllm/engine/arg_utils.py,
# PR #17885; the same rule in every release's wheel, with the tiers noted on the rows)

#: Devices of at least this much memory whose name lacks "a100" get the large defaults.
LARGE_DEVICE_BYTES = 70 * GiB
#: From 0.28, devices of at least this much get the largest.
LARGEST_DEVICE_BYTES = 160 * GiB


@dataclass(frozen=True)
class BatchDefaults:
    max_num_batched_tokens: int
    max_num_seqs: int


def serve_batch_defaults(
    release: VLLMRelease, device_memory_bytes: int, device_name: str
) -> BatchDefaults:
    """``vllm serve``'s default ``max_num_batched_tokens`` / ``max_num_seqs`` on one device:
    8192 / 1024 on a device of >= 70 GiB whose name does not contain "a100" (16384 / 1024 at
    >= 160 GiB from 0.28), else 2048 / 256; GB10 stays small in every release
    (:attr:`VLLMRelease.gb10_small_tier`)."""
    name = device_name.lower()
    if release.gb10_small_tier and "gb10" in name:
        return BatchDefaults(2048, 256)
    if release.large_device_tier and device_memory_bytes >= LARGEST_DEVICE_BYTES:
        return BatchDefaults(16384, 1024)
    if device_memory_bytes >= LARGE_DEVICE_BYTES and "a100" not in name:
        return BatchDefaults(8192, 1024)
    return BatchDefaults(2048, 256)


def capture_sizes(
    release: VLLMRelease,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    capability: tuple[int, int] | None = None,
) -> int:
    """How many batch sizes the PIECEWISE graphs are captured at: the shared sizes
    (:func:`shared_capture_sizes`) up to 0.33; from 0.34 the prefill sizes of
    :func:`capture_grids`, on the GPU of compute ``capability``."""
    if release.split_capture_sizes:
        return len(capture_grids(release, max_num_seqs, max_num_batched_tokens, capability)[0])
    return len(shared_capture_sizes(release, max_num_seqs, max_num_batched_tokens, capability))


def shared_capture_sizes(
    release: VLLMRelease,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    capability: tuple[int, int] | None,
) -> list[int]:
    """``cudagraph_capture_sizes`` when none is given (``_set_cudagraph_sizes``): 1, 2, 4, then
    steps of 8 (0.10-0.11, vllm/config/__init__.py 0.11.0), later steps of 8 below 256 and of
    16 from 256 (vllm/config/vllm.py 0.17.0 on), up to min(2 x max_num_seqs, the ceiling,
    max_num_batched_tokens): the ceiling 512, 1024 on the 10.x family from 0.28
    (:attr:`VLLMRelease.graph_ceiling_sm100`). Off those steps the batched tokens are added
    where they are below the ceiling (:attr:`VLLMRelease.tokens_capture_size`), and
    max_num_seqs where it is (:attr:`VLLMRelease.seqs_capture_size`)."""
    tokens, seqs = max_num_batched_tokens, max_num_seqs
    wide = release.graph_ceiling_sm100 and capability_family(capability, 10)
    top = min(2 * seqs, 1024 if wide else 512)
    extra = [seqs] if release.seqs_capture_size and seqs <= top else []
    top = min(tokens, top)
    sizes = {size for size in _grid(release) if size <= top}
    if release.tokens_capture_size and tokens <= top:
        sizes.add(tokens)
    sizes |= {size for size in extra if size <= tokens}
    return sorted(sizes)


def _grid(release: VLLMRelease) -> list[int]:
    if release.capture_grid_67:
        return [1, 2, 4, *range(8, 513, 8)]
    return [1, 2, 4, *range(8, 256, 8), *range(256, 1025, 16)]


def full_graph_sizes(
    release: VLLMRelease,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    capability: tuple[int, int] | None = None,
    full_decode: bool = True,
) -> int:
    """The FULL (decode) graphs of FULL_AND_PIECEWISE: the shared sizes up to max_num_seqs
    ("PIECEWISE=51 (largest=512), FULL=35 (largest=256)" at 256 sequences, LMCache #3430; in
    0.11 "67/67" twice at 1024 sequences and "PIECEWISE 67/67, FULL 35/35" at 256,
    tests/fixtures/vllm_logs/v011-*.log; ``CudagraphDispatcher.initialize_cudagraph_keys``,
    vllm/v1/cudagraph_dispatcher.py, and Model Runner V2's ``_init_candidates`` of 0.33.0); from
    0.34 the decode sizes of :func:`capture_grids`. None where ``full_decode`` is False from
    0.28 (:attr:`VLLMRelease.graphs_follow_backends`): an attention backend of the model
    cannot be captured whole (:func:`kvcalc.engine.vllm.full_decode_graphs`), so
    FULL_AND_PIECEWISE falls back to PIECEWISE alone."""
    if not release.full_graphs:
        return 0  # PIECEWISE only ("67/67" once in 0.10.2 logs)
    if release.graphs_follow_backends and not full_decode:
        return 0
    if release.split_capture_sizes:
        return len(capture_grids(release, max_num_seqs, max_num_batched_tokens, capability)[1])
    shared = shared_capture_sizes(release, max_num_seqs, max_num_batched_tokens, capability)
    return sum(1 for size in shared if size <= max_num_seqs)


def _doubling_grid(limit: int, stride_for: Callable[[int], float]) -> list[int]:
    """1 up to ``limit`` (which ends the grid): from each size to the next multiple of the
    largest power of two not above ``stride_for(size)`` (``_walk_grid``,
    vllm/config/compilation.py of 0.34.0)."""
    sizes: list[int] = []
    size = 1
    while size < limit:
        sizes.append(size)
        stride = 2 ** max(0, math.floor(math.log2(max(1.0, stride_for(size)))))
        size += stride - size % stride
    return [*sizes, limit] if limit else []


def prefill_token_grid(max_tokens: int) -> list[int]:
    """0.34's prefill token counts on the 10.x family: "1, 2, 4, every 8 up to 64, four sizes
    per doubling up to 1024 [...], then every 256 tokens, and every 512 once 7% of the size
    exceeds 512: 54 sizes at 8192" (``prefill_cudagraph_capture_grid``,
    vllm/config/compilation.py of 0.34.0)."""
    return _doubling_grid(
        max_tokens, lambda t: min(t, max(8, t / 4), 0.07 * max(t, 4096))
    )


def decode_request_grid(max_requests: int) -> list[int]:
    """0.34's decode request counts on the 10.x family: "every count up to 6, then a step of
    the largest power of two not above 0.65 * n^(2/3) [...]: 64 sizes at 1024"
    (``decode_cudagraph_capture_grid``, vllm/config/compilation.py of 0.34.0)."""
    return _doubling_grid(max_requests, lambda n: 0.65 * n ** (2 / 3))


#: 0.34's token bound of the prefill graphs and of a decode graph on the 10.x family, when
#: neither is given (``max_prefill_cudagraph_capture_tokens`` and
#: ``max_decode_cudagraph_capture_tokens``: "None (default): 8192 on SM100 GPUs",
#: vllm/config/compilation.py of 0.34.0).
WIDE_CAPTURE_TOKENS = 8192


def capture_grids(
    release: VLLMRelease,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    capability: tuple[int, int] | None,
) -> tuple[list[int], list[int]]:
    """0.34's PIECEWISE (prefill, tokens) and FULL (decode, requests) capture sizes at one
    token per decode request and no size given (``VllmConfig._set_cudagraph_sizes`` and
    ``_split_cudagraph_capture_sizes``, vllm/config/vllm.py of 0.34.0; the graphs
    ``ModelCudaGraphManager._init_candidates`` makes of them, cudagraph_utils.py).

    Elsewhere than the 10.x family both come from the shared sizes
    (:func:`shared_capture_sizes`); the decode sizes are those sizes capped at max_num_seqs.
    On the 10.x family (``is_device_capability_family(100)``) each kind has its own grid:
    prefill up to min(8192, max_num_batched_tokens), decode up to max_num_seqs within 8192
    tokens (:func:`prefill_token_grid`, :func:`decode_request_grid`)."""
    tokens, seqs = max_num_batched_tokens, max_num_seqs
    if capability_family(capability, 10):
        return (
            prefill_token_grid(min(WIDE_CAPTURE_TOKENS, tokens)),
            _reachable(decode_request_grid(seqs), min(seqs, WIDE_CAPTURE_TOKENS, tokens)),
        )
    prefill = shared_capture_sizes(release, seqs, tokens, capability)
    decode = sorted({min(s, seqs) for s in prefill})
    return prefill, _reachable(decode, min(seqs, max(prefill)))


def _reachable(requests: list[int], limit: int) -> list[int]:
    """The decode graphs of request counts ``requests`` whose batches reach at most ``limit``
    requests: each size below it, and the first at or above it captured at it
    (``decode_cudagraph_capture_shapes``, vllm/config/compilation.py of 0.34.0)."""
    kept = [n for n in requests if n < limit]
    return [*kept, limit] if any(n >= limit for n in requests) else kept
