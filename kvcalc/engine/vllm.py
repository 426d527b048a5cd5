"""vLLM v1 KV-cache sizing: pages, layer groups, blocks, concurrency and the token line.

A restatement of what vLLM does at start-up, release by release: the block model below is
0.19's, and what later or earlier releases change (the utilization default, the CUDA-graph
estimate, the GPU-dependent batch defaults, the token line, the window reserve, align-mode
state pages, the pre-0.17 sampler profile) is read from :mod:`kvcalc.engine.vllm_releases`,
never compared here. The 0.19 rules come from the reference
``vllm-kv-algorithm.md`` (itself read from ``vllm/v1/core/kv_cache_utils.py``,
``vllm/v1/kv_cache_interface.py`` and the hybrid-Mamba set-up, and checked against 61 vLLM 0.19.0
H100 start-up logs). Step numbers below refer to that text:

1. the profiler leaves ``available_kv`` bytes per worker (step 1; estimated here by
   :func:`profile_kv_memory` when the user gives no figure);
2. every layer reports a spec with a page size: one block of ``block_size`` tokens of one layer
   on one rank (step 2);
3. layers are grouped; all groups draw block ids from one pool (step 3);
4. ``num_blocks = available // page // group_size``, then the minimum over workers (step 4);
5. "GPU KV cache size: N tokens" = ``num_blocks // groups x min_block_size`` (step 5, 0.19 row);
6. "Maximum concurrency" = ``num_blocks / blocks_per_request`` (step 6).

Side caches (DeepSeek-V3.2's indexer keys) are vLLM layers of their own: each decoder layer
contributes its main spec and then one spec per side cache, so the specs, groups and pages below
count vLLM's cache layers, and a pipeline stage's decoder layers map to the run of cache layers
they own (:func:`stage_cache_layers`).

DeepSeek-V4 follows vLLM 0.33 (../shared/reference/arch-2026.md section 1): each layer registers
its window, compressed-latent, indexer and compressor-state specs in fp8_ds_mla pages padded to
576 bytes, none split by TP, at the backend's own blocks (64 for the window, 256 for the latents,
4 and 8 for the states; ``--block-size`` does not change them), grouped by
:func:`packed_groups`. Its token line is vLLM's later ``max_concurrency x max_model_len``.

Decode context parallelism, prefix caching's "align" mode for Mamba hybrids and MTP draft
layers follow :mod:`kvcalc.engine.vllm_parallel` (``dcp``, ``mamba_cache_mode``,
``draft_mixers`` below; an MTP layer of DeepSeek-V3.2 brings its latent and its indexer keys);
the release decides whether a hybrid caches prefixes by default (align mode from 0.28,
:attr:`~kvcalc.engine.vllm_releases.VLLMRelease.mamba_align`) and whether the token line is
multiplied by the DCP size (the block line up to 0.20; from 0.21 the concurrency line counts DCP
through the blocks per request). Not modelled: prefill context parallelism, Mamba "all" mode,
``--disable-hybrid-kv-cache-manager``, separate draft models (EAGLE, draft_model), per-token KV
scales, the DCP-scaled scheduler block of 0.30+ (``resolve_dcp_kv_block_size``) and non-torch
memory by release. The default backend's block (FlashMLA 64, FLASHINFER_MLA 32, ...) is chosen
by :func:`kvcalc.engine.vllm_backends.vllm_block_size` for a deployment that gives none; this
module pages at the ``block_size`` it is given. For DeepSeek-V3.2's sparse attention: the
indexer's top-k index buffer (``topk_indices_buffer``, outside the KV cache, part of the
profiled activations).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

from kvcalc.engine.deployment import DEFAULT_BLOCK_SIZE, DEFAULT_GPU_UTIL, as_fraction, usable_bytes
from kvcalc.engine.eviction import kept_by_engine
from kvcalc.engine.kv import CacheFormat, layer_state_bytes
from kvcalc.engine.kvformat import KVFormat, as_kv_format, plain
from kvcalc.engine.overhead import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
    activation_peak,
    moe_workspace,
    non_torch_memory,
    runner_inputs_embeds,
    used_ffns,
    v2_penalty_buffers,
)
from kvcalc.engine.serving.base import EngineRefusal
from kvcalc.engine.spec import Mixer, ModelSpec, MoE, ParallelismError
from kvcalc.engine.units import DType, GiB, dtype
from kvcalc.engine.vllm_parallel import (
    GDN_CHECKPOINT_ALIGNMENT,
    MambaCacheMode,
    dcp_tokens,
    speculative_state,
    state_pages,
)
from kvcalc.engine.vllm_parallel import (
    mamba_cache_mode as release_cache_mode,
)
from kvcalc.engine.vllm_releases import (
    BLOCK_MODEL_VERSION,
    TokenLine,
    VLLMRelease,
    capture_sizes,
    full_graph_sizes,
    parse_version,
    serve_batch_defaults,
    vllm_release,
)
from kvcalc.engine.vllm_warmup import (
    MARGIN_FLOOR_BYTES_CUDA,
    MARGIN_FLOOR_BYTES_ROCM,
    AfterWarmup,
    graph_pool_bytes,
    in_use_at_snapshot_bytes,
    samples_with_flashinfer,
    warmup_transient_bytes,
)
from kvcalc.engine.weights import pipeline_stages
from kvcalc.errors import literal

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.hardware import GpuSet
    from kvcalc.engine.vllm_parallel import VLLMServing

#: KV formats vLLM stores, as read in 0.19 (``--kv-cache-dtype auto`` resolves to the model
#: dtype; 0.28.0's and 0.34.0's ``CacheDType`` add int4_per_token_head and the turboquant and
#: octave formats, which kvcalc does not model, so they are refused with the rest; every
#: ``fp8*`` variant stores one byte per value with a per-tensor scale; the per_token_head modes
#: add an fp32 scale per token, head and K/V; nvfp4 packs one fp8 scale per 16 values). The
#: names are :data:`kvcalc.engine.kvformat.PRESETS` entries: a format customised with groups,
#: scales or KIVI options gets another name, and is refused.
VLLM_KV_DTYPES = (
    "fp32",
    "bf16",
    "fp16",
    "fp8",
    "fp8_per_token_head",
    "int8_per_token_head",
    "nvfp4",
)
#: The attention block in a Mamba hybrid is a multiple of this, or of the block asked for where
#: that is larger (kernel_block_alignment_size for non-MLA attention: the first backend's
#: smallest kernel block, 16 for FLASH_ATTN, TRITON_ATTN and FLASHINFER).
HYBRID_BLOCK_ALIGNMENT = 16
#: Hybrid grouping: when the largest bucket of layers has fewer than 1.5x the layers of the
#: smallest, the group size is the largest bucket (reference step 3, gpt-oss + EAGLE 12 + 13).
GROUP_SIZE_SLACK = Fraction(3, 2)

SpecKind = Literal["full", "sliding", "chunked", "mla", "mamba"]
Grouping = Literal["uniform_spec", "uniform_type", "hybrid", "packed"]


class VLLMConfigError(EngineRefusal):
    """A configuration vLLM 0.19 would refuse (or that is not modelled); one line naming the fix."""


# --------------------------------------------------------------------------------------------
# Step 2: one layer's spec and page on one rank


@dataclass(frozen=True)
class LayerCacheSpec:
    """One layer's KV-cache spec on one rank, as vLLM's ``KVCacheSpec`` subclasses define it.

    Equal specs (same kind, block, heads, sizes, window) are what vLLM buckets together. For
    Mamba-type states ``page_bytes`` is the padded page and ``state_bytes`` the real state.
    """

    kind: SpecKind
    block_size: int
    page_bytes: int
    kv_heads: int = 0
    head_size_k: int = 0
    head_size_v: int = 0
    window: int = 0
    chunk: int = 0
    state_bytes: int = 0
    state_pages: int = 1
    """Pages a request's state takes (:func:`kvcalc.engine.vllm_parallel.state_pages`)."""

    @property
    def is_state(self) -> bool:
        return self.kind == "mamba"

    @property
    def bytes_per_token(self) -> int:
        """Bytes one token takes in this layer's page (0 for a fixed state)."""
        return 0 if self.is_state else self.page_bytes // self.block_size

    @property
    def type_key(self) -> tuple[str, int]:
        """What UniformTypeKVCacheSpecs compares: MLA is a kind of full attention, and sliding or
        chunked layers are one type only with the same window or chunk."""
        if self.kind in ("full", "mla"):
            return ("full", 0)
        return (self.kind, self.window or self.chunk)

    def pages_per_request(
        self, max_model_len: int, max_num_batched_tokens: int, dcp: int = 1
    ) -> int:
        """Pages one request of ``max_model_len`` tokens may hold (``max_memory_usage_bytes`` /
        page, kv_cache_interface.py); a DCP rank holds cdiv(L, dcp) of its tokens."""
        if self.kind == "sliding":
            # The window plus one scheduling step; +1 for a window starting mid-block.
            tokens = min(self.window - 1 + max_num_batched_tokens, max_model_len)
            return math.ceil(tokens / self.block_size) + 1
        if self.kind == "chunked":
            tokens = min(self.chunk + max_num_batched_tokens, max_model_len)
            return math.ceil(tokens / self.block_size)
        if self.kind == "mamba":
            return self.state_pages  # mamba_cache_mode "none": 1, "align": 2 (+ speculative)
        return math.ceil(dcp_tokens(max_model_len, dcp) / self.block_size)


def vllm_kv_dtype(kv_dtype: KVFormat | DType) -> KVFormat:
    """The KV format, refused unless vLLM stores it (:data:`VLLM_KV_DTYPES`). The refusal names
    no release: it holds under every release kvcalc models."""
    fmt = as_kv_format(kv_dtype)
    if fmt.name not in VLLM_KV_DTYPES:
        raise VLLMConfigError.at(
            "kv_dtype",
            f"vLLM has no {fmt.name} KV cache; use one of {', '.join(VLLM_KV_DTYPES)}",
        )
    return fmt


def attention_bytes_per_token(mixer: Mixer, kv_dtype: KVFormat | DType) -> int:
    """Bytes one token adds to one attention layer's own spec on one rank (``mixer`` already
    per rank); side caches have specs of their own (:func:`side_cache_specs`).

    Full/sliding/chunked: kv_heads x (head_size_k + head_size_v); MLA: one latent of
    kv_lora_rank + qk_rope_head_dim with no factor 2 (MLAAttentionSpec, num_kv_heads 1), or
    DeepSeek's 656-byte "fp8_ds_mla" entry for an fp8 cache of an indexed (sparse) MLA layer.
    """
    return as_kv_format(kv_dtype).token_bytes(mixer)


def attention_spec(mixer: Mixer, kv_dtype: KVFormat | DType, block_size: int) -> LayerCacheSpec:
    """The spec of a per-rank attention mixer at ``block_size`` tokens per block."""
    layout = mixer.page_layout()
    if layout is None:
        raise TypeError(f"{mixer.kind} holds no tokens: its page is a state page")
    return LayerCacheSpec(
        layout.kind,
        block_size,
        block_size * attention_bytes_per_token(mixer, kv_dtype),
        kv_heads=layout.kv_heads,
        head_size_k=layout.head_size_k,
        head_size_v=layout.head_size_v,
        window=layout.window,
        chunk=layout.chunk,
    )


def side_cache_specs(mixer: Mixer, block_size: int) -> tuple[LayerCacheSpec, ...]:
    """One spec per side cache of a per-rank layer, at the attention block size: vLLM's
    ``DeepseekV32IndexerCache`` reports an MLAAttentionSpec of one head of head_size uint8, the
    head being the entry's bytes (index_head_dim fp8 values + their fp32 scales, 132)."""
    return tuple(
        LayerCacheSpec(
            "mla",
            block_size,
            block_size * side.bytes_per_token,
            kv_heads=1,
            head_size_k=side.bytes_per_token,
        )
        for side in mixer.side_caches()
    )


def cache_layers_of(mixer: Mixer) -> int:
    """vLLM cache layers one decoder layer of ``mixer`` registers: its own and its side caches
    (DeepSeek-V4: its window, compressed, indexer and compressor-state specs); none for a layer
    reusing another's cache (it reports no spec)."""
    if not mixer.owns_cache:
        return 0
    if is_compressed(mixer):
        return len(dsv4_specs(mixer))
    return 1 + len(mixer.side_caches())


# --------------------------------------------------------------------------------------------
# DeepSeek-V4 (vLLM 0.33, ../shared/reference/arch-2026.md section 1): every layer registers
# several specs, all replicated over TP (max_tp_shards 1), in fp8_ds_mla pages padded to 576 B.

#: The window cache's block (DeepseekV4SWACache, sparse_swa.py).
DSV4_SWA_BLOCK = 64
#: The compressed latents' and indexer keys' block (DeepseekSparseSWABackend's preferred size).
DSV4_STORAGE_BLOCK = 256
#: Blocks of the compressor-state caches by ratio (CompressorStateCache, compressor.py).
DSV4_STATE_BLOCK = {4: 4, 128: 8}
#: Every DSV4 page is rounded up to a multiple of this (the 576-value MLA row alignment).
DSV4_PAGE_ALIGNMENT = 576


def is_compressed(mixer: Mixer) -> bool:
    return mixer.kind == "compressed"


def backend_blocks(model: ModelSpec) -> bool:
    """Whether vLLM pages ``model`` at its attention backend's own blocks, whatever
    ``--block-size`` says (DeepSeek-V4)."""
    return any(is_compressed(m) for m in model.mixer_pattern)


def _aligned(page: int) -> int:
    return -(-page // DSV4_PAGE_ALIGNMENT) * DSV4_PAGE_ALIGNMENT


def dsv4_specs(mixer: Mixer) -> tuple[LayerCacheSpec, ...]:
    """The specs one DeepSeek-V4 layer registers, at vLLM's default fp8_ds_mla layout: its
    window (SlidingWindowMLASpec, 64-token blocks); with a ratio r its compressed latents
    (MLAAttentionSpec of 256-token blocks holding 256 / r entries) and its compressor state (a
    window of coff x r fp32 rows); at r = 4 also the indexer keys and the indexer's compressor
    state."""
    from kvcalc.engine.mixers.compressed import (
        CompressedAttention,
        index_key_bytes,
        overlap,
        packed_entry_bytes,
    )

    assert isinstance(mixer, CompressedAttention)
    entry = packed_entry_bytes(mixer.head_dim, mixer.rope_dim)
    swa = DSV4_SWA_BLOCK
    specs = [
        LayerCacheSpec("sliding", swa, _aligned(swa * entry), 1, entry, window=mixer.window)
    ]
    r = mixer.compress_ratio
    if not r:
        return tuple(specs)
    store, coff, block = DSV4_STORAGE_BLOCK, overlap(r), DSV4_STATE_BLOCK[r]
    entries = store // r

    def state(dim: int) -> LayerCacheSpec:
        row = 2 * coff * dim * 4  # fp32 kv and score rows
        return LayerCacheSpec("sliding", block, _aligned(block * row), 1, row, window=coff * r)

    latents = LayerCacheSpec("mla", store, _aligned(entries * entry), 1, entry)
    specs += [latents, state(mixer.head_dim)]
    if mixer.indexed:
        key = index_key_bytes(mixer.index_head_dim)
        specs += [
            LayerCacheSpec("mla", store, _aligned(entries * key), 1, key),
            state(mixer.index_head_dim),
        ]
    return tuple(specs)


def packed_groups(specs: Sequence[LayerCacheSpec]) -> LayerGrouping:
    """``_get_packed_kv_cache_groups`` for block-outermost layouts (DSV4's indexer backend):
    the full-attention-type layers (compressed latents, indexer keys) form one group whose
    block costs the sum of their pages; every other bucket of equal window and block is cut
    into the fewest groups (layers[i::k]) whose pages fit that budget. The reference worked
    this from the code without running it (arch-2026.md uncertainty 1)."""
    specs = tuple(specs)
    full = tuple(i for i, s in enumerate(specs) if s.type_key == ("full", 0))
    budget = max(sum(specs[i].page_bytes for i in full), max(s.page_bytes for s in specs))
    groups = [KVCacheGroup(specs[full[0]], full)] if full else []
    buckets: dict[tuple[str, int, int], list[int]] = {}
    for i, s in enumerate(specs):
        if i not in full:
            buckets.setdefault((s.kind, s.window, s.block_size), []).append(i)
    for layers in buckets.values():
        count = math.ceil(sum(specs[i].page_bytes for i in layers) / budget)
        groups.extend(KVCacheGroup(specs[layers[0]], tuple(layers[i::count])) for i in range(count))
    return LayerGrouping("packed", tuple(groups), max(len(g.layers) for g in groups), specs)


def stage_cache_layers(model: ModelSpec, stage: range) -> range:
    """The cache layers (indices into the layer specs) of a stage's decoder layers: every decoder
    layer owns a contiguous run, its own spec first, in layer order."""
    start = sum(cache_layers_of(model.mixer_at(i)) for i in range(stage.start))
    return range(start, start + sum(cache_layers_of(model.mixer_at(i)) for i in stage))


def state_bytes(mixer: Mixer, conv_dtype: DType, ssm_dtype: DType) -> int:
    """MambaSpec page before padding: the sum over the mixer's state tensors (conv and temporal,
    as MambaStateShapeCalculator splits them) of elements x dtype bytes."""
    return layer_state_bytes(mixer, CacheFormat(plain(conv_dtype), conv_dtype, ssm_dtype))


def hybrid_attention_block_size(
    attention_bytes_per_token: int, state_page_bytes: int, block_size: int, alignment: int = 1
) -> int:
    """The attention block of a Mamba hybrid ("Setting attention block size to N tokens"): the
    smallest multiple of the alignment whose page holds a whole state, the alignment being
    max(16, the block asked for) (``kernel_block_alignment_size = max(min kernel block,
    cache_config.block_size)`` in ``Platform._align_hybrid_block_size``,
    vllm/platforms/interface.py of 0.28.0, 0.33.0 and 0.34.0). So 0.34's default block of 64
    makes it a multiple of 64, where up to 0.33 it was one of 16 (Qwen3.5-0.8B: 576 tokens,
    not 544); a block asked for that holds a state is kept. ``alignment``: the states' prefill
    checkpoints' in align mode, which the step is made a multiple of (lcm)."""
    step = math.lcm(max(HYBRID_BLOCK_ALIGNMENT, block_size), alignment)
    return step * math.ceil(state_page_bytes / (step * attention_bytes_per_token))


#: vLLM's words for the units spec.split_heads refuses to split.
_VLLM_UNIT_NAMES = {
    "query heads": "attention heads",
    "Mamba channels": "Mamba inner channels",
    "linear-attention heads": "lightning-attention heads",
}


def check_tensor_parallel(model: ModelSpec, tp: int) -> None:
    """Refuse a TP size vLLM cannot shard the model by. The divisibility rules are the engine's
    own (:func:`kvcalc.engine.spec.split_heads`); only the wording is vLLM's."""
    if tp < 1:
        raise VLLMConfigError(f"tensor-parallel size must be at least 1, got {tp}")
    try:
        model.per_rank(tp)
    except ParallelismError as exc:
        if exc.what == "KV heads" and tp > exc.heads:
            raise VLLMConfigError(
                f"vLLM cannot replicate {exc.heads} KV heads of {model.id} over "
                f"tensor-parallel size {tp}; use a multiple of {exc.heads}"
            ) from None
        what = _VLLM_UNIT_NAMES.get(exc.what, exc.what)
        raise VLLMConfigError(
            f"vLLM cannot shard {model.id} over tensor-parallel size {tp}: its {exc.heads} "
            f"{what} are not divisible by {tp}; choose a TP size that divides {exc.heads}"
        ) from None


def layer_cache_specs(
    model: ModelSpec,
    tp: int,
    kv_dtype: KVFormat | DType,
    block_size: int,
    max_model_len: int,
    conv_state_dtype: DType | None = None,
    ssm_state_dtype: DType | None = None,
    mamba_cache_mode: MambaCacheMode = "none",
    num_speculative_tokens: int = 0,
    draft_mixers: Sequence[Mixer] = (),
    checkpoint_kinds: frozenset[str] = frozenset(),
) -> tuple[LayerCacheSpec, ...]:
    """Every cache layer's spec on one TP rank, in layer order, after the hybrid-Mamba set-up:
    a decoder layer's own spec, then one per side cache (:func:`stage_cache_layers`); then the
    ``draft_mixers`` (MTP layers), which join the pool as the target's layers do.

    ``mamba_cache_mode`` "align" (prefix caching) gives a state the attention block and 2
    pages per request, a third to the ``checkpoint_kinds`` that export prefill checkpoints
    (:func:`~kvcalc.engine.vllm_parallel.checkpoint_kinds`; Gated DeltaNet's also align the
    attention block to 64); ``num_speculative_tokens`` adds a page per token and a conv row per
    token (:mod:`kvcalc.engine.vllm_parallel`).

    ``max_model_len`` is the block size vLLM gives Mamba-type specs (prefix caching off); it
    only matters for the token line of a Mamba hybrid.

    State dtypes default to the model dtype: in 0.19 ``--mamba-cache-dtype auto`` (conv) and
    ``--mamba-ssm-cache-dtype auto`` (temporal state) follow the model, not ``--kv-cache-dtype``
    (the reference notes 2025 code used the KV dtype; set them to reproduce that). A Mamba state
    page is padded to the attention page, whose block grows to hold one state (step 2).
    """
    kv_dtype = vllm_kv_dtype(kv_dtype)
    check_tensor_parallel(model, tp)
    model_dtype = dtype(model.default_dtype)
    conv_dtype = conv_state_dtype or model_dtype
    # --mamba-ssm-cache-dtype auto follows the conv state, unless the model states its own
    # (Qwen3_5ForConditionalGenerationConfig adopts the config's mamba_ssm_dtype).
    stated = dtype(model.ssm_state_dtype) if model.ssm_state_dtype else None
    ssm_dtype = ssm_state_dtype or stated or conv_dtype
    # A layer reusing another's cache reports no spec (kv_sharing_target_layer_name).
    all_mixers = [model.mixer_at(i) for i in range(model.num_layers)] + list(draft_mixers)
    mixers = [
        speculative_state(m, num_speculative_tokens).per_rank(tp)
        for m in all_mixers
        if m.owns_cache
    ]
    if any(is_compressed(m) for m in mixers):
        if kv_dtype.name != "fp8" or not all(is_compressed(m) for m in mixers):
            model_id = literal(model.id)
            raise VLLMConfigError(
                f"{model_id}: vLLM stores DeepSeek-V4's cache as fp8_ds_mla (its FlashMLA "
                "default; bf16 is refused there, and the plain-row backends are not modelled); "
                "use {kv_dtype} fp8",
                "kv_dtype",
            )
        return tuple(spec for m in mixers for spec in dsv4_specs(m))
    attention = [m for m in mixers if m.holds_tokens]
    states = [state_bytes(m, conv_dtype, ssm_dtype) for m in mixers if not m.holds_tokens]
    if states and attention:
        if any(attention_spec(m, kv_dtype, block_size).kind == "mla" for m in attention):
            raise VLLMConfigError(
                f"{model.id}: MLA combined with recurrent states is not modelled for vLLM"
            )
        # vLLM sizes the block from the model-level heads: the first attention layer's.
        # Only where every state layer declares a checkpoint alignment
        # (get_mamba_prefill_checkpoint_alignment, vllm/model_executor/layers/mamba/abstract.py).
        gdn_checkpoints = (
            mamba_cache_mode == "align"
            and "gated_deltanet" in checkpoint_kinds
            and all(m.kind == "gated_deltanet" for m in mixers if not m.holds_tokens)
        )
        block_size = hybrid_attention_block_size(
            attention_bytes_per_token(attention[0], kv_dtype), max(states), block_size,
            GDN_CHECKPOINT_ALIGNMENT if gdn_checkpoints else 1,
        )
    attention_page = block_size * max(
        (attention_bytes_per_token(m, kv_dtype) for m in attention), default=0
    )
    specs = []
    for mixer in mixers:
        if mixer.holds_tokens:
            specs.append(attention_spec(mixer, kv_dtype, block_size))
            specs.extend(side_cache_specs(mixer, block_size))
            continue
        real = state_bytes(mixer, conv_dtype, ssm_dtype)
        # A Mamba spec's block is max_model_len when prefix caching is off (mamba_block_size),
        # the attention block in "align" mode.
        block = block_size if mamba_cache_mode == "align" else max_model_len
        pages = state_pages(
            mamba_cache_mode, num_speculative_tokens, mixer.kind in checkpoint_kinds
        )
        specs.append(
            LayerCacheSpec(
                "mamba", block, max(real, attention_page), state_bytes=real, state_pages=pages
            )
        )
    return tuple(specs)


# --------------------------------------------------------------------------------------------
# Step 3: grouping layers


@dataclass(frozen=True)
class KVCacheGroup:
    """Layers that share one spec and one block table (a vLLM ``KVCacheGroupSpec``)."""

    spec: LayerCacheSpec
    layers: tuple[int, ...]


@dataclass(frozen=True)
class LayerGrouping:
    """How vLLM grouped the layers (``get_kv_cache_groups``)."""

    kind: Grouping
    groups: tuple[KVCacheGroup, ...]
    group_size: int
    """Layers per group (= KV tensors allocated); short groups are padded to it."""
    layer_specs: tuple[LayerCacheSpec, ...]
    """Every layer's spec after page unification. A uniform type's single group keeps them all
    (its group spec is the first layer's)."""

    @property
    def padding_layers(self) -> int:
        """The empty slots of short groups (vLLM: "Add N padding layers")."""
        return sum(self.group_size - len(g.layers) for g in self.groups)

    @property
    def page_bytes(self) -> int:
        """Every group's page (hybrid pages are unified); the summed page for a uniform type."""
        if self.kind == "uniform_type":
            return sum(s.page_bytes for s in self.layer_specs)
        if self.kind == "packed":
            return max(sum(self.layer_specs[i].page_bytes for i in g.layers) for g in self.groups)
        return self.groups[0].spec.page_bytes

    @property
    def min_block_size(self) -> int:
        return min(g.spec.block_size for g in self.groups)


def unify_page_sizes(specs: Sequence[LayerCacheSpec]) -> tuple[LayerCacheSpec, ...]:
    """``unify_kv_cache_spec_page_size``: grow smaller pages to the largest by multiplying their
    block size; refused when the largest page is not a multiple of a smaller one."""
    largest = max(s.page_bytes for s in specs)
    out = []
    for s in specs:
        if s.page_bytes == largest:
            out.append(s)
        elif s.is_state or largest % s.page_bytes:
            raise VLLMConfigError(
                f"vLLM cannot unify KV page sizes {s.page_bytes:,} and {largest:,} bytes "
                "(not divisible); this layer mix is not supported by the hybrid allocator"
            )
        else:
            ratio = largest // s.page_bytes
            out.append(replace(s, block_size=s.block_size * ratio, page_bytes=largest))
    return tuple(out)


def hybrid_group_size(bucket_sizes: Sequence[int]) -> int:
    """Layers per group: the smallest bucket, or the largest when it is under 1.5x the smallest
    (fewer padding layers, e.g. 12 sliding + 13 full -> 13)."""
    smallest, largest = min(bucket_sizes), max(bucket_sizes)
    return largest if largest < GROUP_SIZE_SLACK * smallest else smallest


def group_layers(specs: Sequence[LayerCacheSpec], packed: bool = False) -> LayerGrouping:
    """``get_kv_cache_groups``: one group for a uniform spec or type, else hybrid groups.

    Hybrid buckets are cut into ceil(n / group_size) groups taking every k-th layer
    (``layers[i::k]``), so pipeline stages keep balanced groups. ``packed``: a block-outermost
    layout (DeepSeek-V4), grouped by :func:`packed_groups`.
    """
    specs = tuple(specs)
    if packed:
        return packed_groups(specs)
    one_group = (KVCacheGroup(specs[0], tuple(range(len(specs)))),)
    if len(set(specs)) == 1:
        return LayerGrouping("uniform_spec", one_group, len(specs), specs)
    same_block = len({s.block_size for s in specs}) == 1
    if same_block and len({s.type_key for s in specs}) == 1:
        # UniformTypeKVCacheSpecs: one group and one block table; each layer keeps its own
        # page (one tensor per layer), and a block costs the sum of the pages.
        return LayerGrouping("uniform_type", one_group, len(specs), specs)
    unified = unify_page_sizes(specs)
    buckets: dict[LayerCacheSpec, list[int]] = {}
    for i, s in enumerate(unified):
        buckets.setdefault(s, []).append(i)
    size = hybrid_group_size([len(v) for v in buckets.values()])
    groups: list[KVCacheGroup] = []
    for spec, layers in buckets.items():
        count = math.ceil(len(layers) / size)
        groups.extend(KVCacheGroup(spec, tuple(layers[i::count])) for i in range(count))
    return LayerGrouping("hybrid", tuple(groups), size, unified)


# --------------------------------------------------------------------------------------------
# Step 4: pipeline stages and blocks


def pipeline_stage_layers(num_layers: int, pp: int) -> tuple[range, ...]:
    """Layers of each pipeline stage, split as vLLM's ``get_pp_indices`` does
    (:func:`kvcalc.engine.weights.pipeline_stages`); a size outside 1..layers is refused."""
    if not 1 <= pp <= num_layers:
        raise VLLMConfigError(
            f"pipeline-parallel size {pp} must be between 1 and the {num_layers} layers"
        )
    return pipeline_stages(num_layers, pp)


def stage_bytes_per_block(grouping: LayerGrouping, stage: range) -> int:
    """Bytes one block id costs on a worker holding ``stage`` (its cache layers,
    :func:`stage_cache_layers`): its layers' summed page for a
    uniform type, else page x group size, the group size being the most layers this worker
    has in any one group (it allocates that many shared tensors)."""
    if grouping.kind == "uniform_type":
        return sum(grouping.layer_specs[i].page_bytes for i in stage)
    if grouping.kind == "packed":
        pages = grouping.layer_specs
        return max(
            sum(pages[i].page_bytes for i in g.layers if i in stage) for g in grouping.groups
        )
    tensors = max(sum(1 for i in g.layers if i in stage) for g in grouping.groups)
    return grouping.page_bytes * tensors


def blocks_in_pool(available_bytes: int, bytes_per_block: int) -> int:
    """``available // page // group_size`` (the same as one floor division by their product)."""
    return max(0, available_bytes // bytes_per_block)


def blocks_per_request(
    grouping: LayerGrouping, max_model_len: int, max_num_batched_tokens: int, dcp: int = 1
) -> int:
    """Blocks one request of ``max_model_len`` takes from the shared pool: the sum over groups
    of their pages per request; a uniform type takes its layers' largest count once."""
    if grouping.kind == "uniform_type":
        specs = grouping.layer_specs
    else:
        specs = tuple(g.spec for g in grouping.groups)
    pages = [s.pages_per_request(max_model_len, max_num_batched_tokens, dcp) for s in specs]
    return max(pages) if grouping.kind == "uniform_type" else sum(pages)


def needed_bytes(
    grouping: LayerGrouping,
    stage: range,
    max_model_len: int,
    max_num_batched_tokens: int,
    dcp: int = 1,
) -> int:
    """Bytes a worker needs for one request of ``max_model_len`` (``_check_enough_kv_cache_memory``:
    group_size x page x blocks per request, or the per-layer sum for a uniform type)."""
    return stage_bytes_per_block(grouping, stage) * blocks_per_request(
        grouping, max_model_len, max_num_batched_tokens, dcp
    )


def estimate_max_model_len(
    grouping: LayerGrouping,
    stage: range,
    available_bytes: int,
    max_model_len: int,
    max_num_batched_tokens: int,
    dcp: int = 1,
) -> int:
    """vLLM's "estimated maximum model length": binary search over 1..max_model_len for the
    longest request that fits; 0 when not even one token does."""

    def fits(length: int) -> bool:
        needed = needed_bytes(grouping, stage, length, max_num_batched_tokens, dcp)
        return needed <= available_bytes

    if not fits(1):
        return 0
    low, high, best = 1, max_model_len, 1
    while low <= high:
        mid = (low + high) // 2
        if fits(mid):
            best, low = mid, mid + 1
        else:
            high = mid - 1
    return best


# --------------------------------------------------------------------------------------------
# Steps 5 and 6: the reported lines


def kv_cache_size_tokens(pool_blocks: int, grouping: LayerGrouping, dcp: int = 1) -> int:
    """The "GPU KV cache size: N tokens" line of vLLM 0.19: num_blocks // groups x the smallest
    block, x the DCP size ("Multiplying the GPU KV cache size by the cp_world_size"). True
    capacity for one group; for hybrids an equal-share figure that undercounts."""
    return pool_blocks // len(grouping.groups) * grouping.min_block_size * dcp


def max_concurrency(pool_blocks: int, request_blocks: int) -> float:
    """The "Maximum concurrency for L tokens per request" (vLLM prints it with 2 decimals)."""
    return pool_blocks / request_blocks


# --------------------------------------------------------------------------------------------
# The whole computation


@dataclass(frozen=True)
class StageKV:
    """One pipeline stage's worker (every TP rank of a stage is identical)."""

    stage: int
    layers: range
    """The stage's decoder layers."""
    cache_layers: range
    """Its vLLM cache layers (indices into the layer specs; the decoder layers, plus side
    caches when a layer has any)."""
    available_bytes: int
    bytes_per_block: int
    num_blocks: int
    needed_bytes: int
    """Bytes one request of max_model_len needs on this worker."""


@dataclass(frozen=True)
class VLLMSetup:
    """The inputs, as vLLM sees them."""

    model_id: str
    tp: int
    pp: int
    kv_dtype: str
    block_size: int
    """The requested attention block (a Mamba hybrid may raise it; see the layer specs)."""
    max_model_len: int
    max_num_batched_tokens: int
    decode_context_parallel_size: int = 1
    mamba_cache_mode: MambaCacheMode = "none"
    num_speculative_tokens: int = 0
    draft_layers: int = 0
    """The MTP layers whose caches joined the pool."""
    token_line: TokenLine = "blocks"
    """How the release prints "GPU KV cache size" (:attr:`VLLMRelease.token_line`): by blocks,
    x the DCP size after a "Multiplying..." line (up to 0.20), or max_concurrency x L."""


@dataclass(frozen=True)
class VLLMKVCache:
    """What vLLM 0.19 reports at start-up for this set-up."""

    setup: VLLMSetup
    layer_specs: tuple[LayerCacheSpec, ...]
    grouping: LayerGrouping
    stages: tuple[StageKV, ...]
    num_blocks: int
    """Blocks in the pool: the minimum over workers."""
    blocks_per_request: int
    max_concurrency: float
    kv_cache_size_tokens: int
    """The "GPU KV cache size: N tokens" line."""

    def pool_fraction(self, requests: int) -> float:
        """The share of the block pool ``requests`` requests of max_model_len reserve: the
        inverse of the concurrency vLLM logs, scaled by the requests."""
        return requests * self.blocks_per_request / self.num_blocks


@dataclass(frozen=True)
class KVCacheTooSmall:
    """vLLM refuses to start: one request of max_model_len does not fit on a worker."""

    setup: VLLMSetup
    layer_specs: tuple[LayerCacheSpec, ...]
    grouping: LayerGrouping
    stage: StageKV
    estimated_max_model_len: int
    """The longest request that fits (binary search as in vLLM); 0 if none does."""
    over_memory: str | None = None
    """Why nothing starts at all: the weights, overhead and KV budget given exceed the GPU's
    memory (:func:`kvcalc.engine.capacity.over_memory_reason`)."""
    checked_bytes: int | None = None
    """What vLLM's fit check set the request against: the budget, less the null block from
    0.29 (:attr:`~kvcalc.engine.vllm_releases.VLLMRelease.fit_holds_null_block`); None: the
    budget."""
    more_room: str | None = "--gpu-memory-utilization"
    """The input that would give the cache more room (:func:`more_room_input`); None when the
    cache already takes all the memory the device has left."""

    @property
    def needed_bytes(self) -> int:
        return self.stage.needed_bytes

    @property
    def available_bytes(self) -> int:
        """The memory the fit check had, as vLLM's message prints it."""
        return self.stage.available_bytes if self.checked_bytes is None else self.checked_bytes

    @property
    def message(self) -> str:
        """One line in vLLM's words (its GiB are 2^30 bytes, printed with 2 decimals)."""
        if self.over_memory is not None:
            return self.over_memory
        raise_it = f"raise {self.more_room} or " if self.more_room else ""
        if self.available_bytes <= 0:
            return f"no memory left for the KV cache on this worker; {raise_it}use more GPUs"
        # vLLM 0.34's hint where the extensible cache has taken all the device leaves
        # (_more_kv_cache_memory_hint, vllm/v1/core/kv_cache_planning.py).
        remedy = (
            f"lower --max-model-len or raise {self.more_room}"
            if self.more_room
            else "lower --max-model-len or --max-num-seqs, or use more GPUs: the cache already "
            "takes all the memory left after the model, its activations, CUDA graphs and warmup"
        )
        return (
            f"one request of max_model_len {self.setup.max_model_len:,} needs "
            f"{self.needed_bytes / GiB:.2f} GiB of KV cache, more than the "
            f"{self.available_bytes / GiB:.2f} GiB available; the estimated maximum model "
            f"length is {self.estimated_max_model_len:,} ({remedy})"
        )


def per_stage(values: int | Sequence[int], pp: int, what: str) -> tuple[int, ...]:
    """One figure per pipeline stage: a single figure applies to every stage."""
    if isinstance(values, int):
        return (values,) * pp
    out = tuple(values)
    if len(out) != pp:
        raise VLLMConfigError(f"{len(out)} {what} figures given for {pp} pipeline stages")
    return out


def vllm_kv_cache(
    model: ModelSpec,
    kv_memory: int | Sequence[int],
    *,
    max_model_len: int,
    kv_dtype: KVFormat | DType,
    tp: int = 1,
    pp: int = 1,
    block_size: int = DEFAULT_BLOCK_SIZE,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    conv_state_dtype: DType | None = None,
    ssm_state_dtype: DType | None = None,
    dcp: int = 1,
    mamba_cache_mode: MambaCacheMode | None = None,
    num_speculative_tokens: int = 0,
    draft_mixers: Sequence[Mixer] = (),
    release: VLLMRelease | None = None,
    checkpoint_kinds: frozenset[str] = frozenset(),
) -> VLLMKVCache | KVCacheTooSmall:
    """Blocks, concurrency and the token line of vLLM ``release`` (None: 0.19, the release the
    block model was checked on) for ``kv_memory`` bytes of KV cache per worker ("Available KV
    cache memory"; one figure, or one per pipeline stage).

    ``dcp`` is ``--decode-context-parallel-size``, ``mamba_cache_mode`` the mode prefix caching
    puts a hybrid's states in (None: the release's default, "align" from 0.28 and "none"
    before, :func:`~kvcalc.engine.vllm_parallel.mamba_cache_mode`), ``draft_mixers`` the MTP
    layers of ``num_speculative_tokens`` speculative decoding, checked by
    :mod:`kvcalc.engine.vllm_parallel` (the last stage holds them); ``checkpoint_kinds`` the
    state mixers whose align-mode states take a prefill-checkpoint page
    (:func:`~kvcalc.engine.vllm_parallel.checkpoint_kinds` of the release and GPU).

    ``block_size`` is vLLM's ``cache_config.block_size``: ``--block-size``, else the default
    backend's (:func:`kvcalc.engine.vllm_backends.vllm_block_size`: FlashMLA 64 on Hopper up to
    0.17, the Kimi-K2 TP8 log's; FLASHINFER_MLA 32 on Blackwell from 0.18 ...).
    A Mamba hybrid raises it for its attention layers (see :func:`layer_cache_specs`).
    """
    rules = release or vllm_release(BLOCK_MODEL_VERSION)
    for name, value in (
        ("max_model_len", max_model_len),
        ("block_size", block_size),
        ("max_num_batched_tokens", max_num_batched_tokens),
    ):
        if value < 1:
            raise VLLMConfigError(f"{name} must be at least 1, got {value}")
    if mamba_cache_mode is None:
        mamba_cache_mode = release_cache_mode(model, None, hybrid_default_on=rules.mamba_align)
    available = per_stage(kv_memory, pp, "KV memory")
    stage_layers = pipeline_stage_layers(model.num_layers, pp)
    specs = layer_cache_specs(
        model, tp, kv_dtype, block_size, max_model_len, conv_state_dtype, ssm_state_dtype,
        mamba_cache_mode, num_speculative_tokens, draft_mixers, checkpoint_kinds,
    )
    grouping = group_layers(specs, packed=any(is_compressed(m) for m in model.mixer_pattern))
    # DeepSeek-V4 follows 0.33's line whatever the release (its rules are 0.33's).
    token_line = "concurrency" if grouping.kind == "packed" else rules.token_line
    setup = VLLMSetup(
        model.id, tp, pp, kv_dtype.name, block_size, max_model_len, max_num_batched_tokens,
        dcp, mamba_cache_mode, num_speculative_tokens, len(draft_mixers), token_line,
    )
    in_flight = rules.in_flight_tokens(max_num_batched_tokens, pp)
    per_request = blocks_per_request(grouping, max_model_len, in_flight, dcp)
    stages = []
    for index, (layers, memory) in enumerate(zip(stage_layers, available, strict=True)):
        cache_layers = stage_cache_layers(model, layers)
        if index == pp - 1:  # the draft's cache layers follow the target's, on the last stage
            cache_layers = range(cache_layers.start, len(specs))
        per_block = stage_bytes_per_block(grouping, cache_layers)
        stage = StageKV(
            index,
            layers,
            cache_layers,
            memory,
            per_block,
            blocks_in_pool(memory, per_block),
            per_block * per_request,
        )
        checked = memory - per_block * rules.fit_holds_null_block
        if checked <= 0 or stage.needed_bytes > checked:
            estimate = (
                estimate_max_model_len(
                    grouping, cache_layers, checked, max_model_len, in_flight, dcp
                )
                if checked > 0
                else 0
            )
            return KVCacheTooSmall(setup, specs, grouping, stage, estimate,
                                   checked_bytes=checked)
        stages.append(stage)
    blocks = min(s.num_blocks for s in stages)
    concurrency = max_concurrency(blocks, per_request)
    return VLLMKVCache(
        setup=setup,
        layer_specs=specs,
        grouping=grouping,
        stages=tuple(stages),
        num_blocks=blocks,
        blocks_per_request=per_request,
        max_concurrency=concurrency,
        # From 0.21 the line is max_concurrency x L: DCP is already in the blocks per request.
        kv_cache_size_tokens=concurrency_tokens(concurrency, max_model_len)
        if token_line == "concurrency"
        else kv_cache_size_tokens(blocks, grouping, dcp),
    )


def concurrency_tokens(concurrency: float, max_model_len: int) -> int:
    """The token line from 0.21: ``int(max_concurrency x max_model_len)``
    (``get_kv_cache_capacity``, kv_cache_utils.py), not a multiple of the block."""
    return int(concurrency * max_model_len)


# --------------------------------------------------------------------------------------------
# Step 1: estimating "Available KV cache memory" when the user gives none

#: The CUDA-graph estimate per captured graph and per decoder layer it runs through. Model
#: Runner V1's ``profile_cudagraph_memory`` (vllm/v1/worker/gpu_model_runner.py, the same in
#: the 0.19.0, 0.22.1, 0.27.1 and 0.33.0 wheels) captures each mode's two largest sizes into a
#: scratch pool and prints max(first captures) + sum over modes of (graphs - 1) x max(second
#: capture, 1 MiB). The first capture's activations are small (kvcalc's forward at 512 tokens:
#: 62 MiB for Llama-3.1-8B, 42 for Gemma 4 E4B against 0.79 GiB printed), so the per-graph part
#: rules, and a graph's memory grows with its layers: a PIECEWISE size is one CUDA graph per
#: piece between the attention ops (layers + 1), a FULL one a graph of every layer's kernels.
#: Set on the three vLLM 0.19.0 H100 TP 1 logs that print the estimate (llm-d-planner runs,
#: tests/fixtures/calibrate/, used to set constants; 51 + 51 graphs at 1,024 sequences):
#: Qwen2.5-7B 0.61 GiB (28 layers), Qwen3-8B 0.84 (36), Gemma-3-27B 1.05 (62), pooled.
CUDAGRAPH_BYTES_PER_GRAPH_LAYER = int(Fraction("2.50") * GiB) // (102 * (28 + 36 + 62))
#: Model Runner V2's estimate (every model from 0.29: every PIECEWISE size captured, FULL ones
#: extrapolated, ``profile_cudagraph_memory``, vllm/v1/worker/gpu/cudagraph_utils.py), per graph
#: and layer, pooled over the three public logs that print it (used to set this constant), each
#: 86 graphs (256 sequences and 2,048 batched tokens: 51 PIECEWISE + 35 FULL):
#: Qwen3.5-4B (32 layers) on an L4 under 0.29.0, "0.47 GiB (estimated)", its utilization line's
#: (0.9200 - 0.8986) x 22.03 GiB; Qwen3-30B-A3B-FP8 (48) and Qwen3.6-35B-A3B-FP8 (40) on a GB10
#: under 0.30.0, (0.5500 - 0.5410) and (0.5500 - 0.5413) x 121.69 GiB ("The current
#: --gpu-memory-utilization=X is equivalent to Y without CUDA graph memory profiling",
#: gpu_worker.py): 179, 279 and 323 KiB, pooled 267 (tests/fixtures/vllm_logs). It was set
#: before on the A100 0.31 line's "1.44 GiB for peak activation" (the headroom + the estimate,
#: ``determine_available_memory``) less kvcalc's headroom, 456 KiB: that residue holds more than
#: the graphs (a first start compiles the model inside the profile, which raised the 0.27.1
#: RTX 4090 first starts' peaks by 0.5-1.0 GiB over their warm restarts), so kvcalc now leaves
#: about 0.5 GiB of it unexplained there.
CUDAGRAPH_BYTES_PER_GRAPH_LAYER_V2 = int(
    (
        (Fraction("0.9200") - Fraction("0.8986")) * Fraction("22.03")
        + (Fraction("0.5500") - Fraction("0.5410")) * Fraction("121.69")
        + (Fraction("0.5500") - Fraction("0.5413")) * Fraction("121.69")
    ) * GiB
) // (86 * (32 + 48 + 40))


@dataclass(frozen=True)
class ProfiledMemory:
    """The profiler's budget on one worker; ``available_bytes`` may be negative (no room)."""

    requested_bytes: int
    """Reported GPU memory x gpu_memory_utilization."""
    weights_bytes: int
    activation_peak_bytes: int
    non_torch_bytes: int
    """Non-torch memory, and from 0.27 the model runner's persistent buffers its "consumed
    memory (weights + non-torch)" also holds (:func:`consumed_runner_buffers`)."""
    cudagraph_bytes: int = 0
    """The CUDA-graph estimate the release subtracts from the budget (0 where it does not)."""
    cudagraph_estimate_bytes: int = 0
    """The estimate as the log prints it, subtracted or not (0 before 0.17: not estimated)."""
    after_warmup: AfterWarmup | None = None
    """What 0.34's extensible KV cache measures after warmup (None: sized from the profile)."""

    @property
    def cudagraph_charged_bytes(self) -> int:
        """What the budget loses to CUDA graphs: the estimate the release subtracts, or from
        0.34 the pool captured before the cache is sized."""
        if self.after_warmup is not None:
            return self.after_warmup.graph_pool_bytes
        return self.cudagraph_bytes

    @property
    def used_after_warmup_bytes(self) -> int | None:
        """0.34: what is resident beside the cache when it is measured (None before 0.34)."""
        warm = self.after_warmup
        if warm is None:
            return None
        return (self.weights_bytes + self.non_torch_bytes + warm.graph_pool_bytes
                + warm.held_workspace_bytes)

    @property
    def transient_kept_bytes(self) -> int | None:
        """0.34's "X GiB kept for transient activations" (None before 0.34)."""
        warm = self.after_warmup
        if warm is None:
            return None
        return warm.transient_bytes(self.activation_peak_bytes + self.cudagraph_estimate_bytes)

    def _measured(self) -> tuple[AfterWarmup, int, int] | None:
        """0.34's measure after warmup: its terms, what is resident beside the cache and what
        is kept for transients (None before 0.34)."""
        warm, used, kept = (self.after_warmup, self.used_after_warmup_bytes,
                            self.transient_kept_bytes)
        if warm is None or used is None or kept is None:
            return None
        return warm, used, kept

    @property
    def free_after_warmup_bytes(self) -> int | None:
        """0.34's "Memory after warmup: X GiB free" (the cache all but uncommitted then)."""
        measured = self._measured()
        if measured is None:
            return None
        warm, used, _ = measured
        return warm.init_free_bytes - used

    @property
    def withheld_by_utilization_bytes(self) -> int:
        """0.34: the free memory a utilization below 1 keeps out of the cache: the cache at a
        budget of all the memory free at start-up less the cache at the requested one
        (``measure_kv_cache_blocks``, extensible_kv_cache.py of 0.34.0, which warns from 1 GiB
        for a utilization between 0.7 and 1); 0 before 0.34."""
        measured = self._measured()
        if measured is None:
            return 0
        warm, used, kept = measured
        return (max(warm.kv_cache_bytes(warm.init_free_bytes, used, kept), 0)
                - max(warm.kv_cache_bytes(self.requested_bytes, used, kept), 0))

    @property
    def available_bytes(self) -> int:
        measured = self._measured()
        if measured is not None:
            warm, used, kept = measured
            return warm.kv_cache_bytes(self.requested_bytes, used, kept)
        return self.requested_bytes - (
            self.weights_bytes
            + self.activation_peak_bytes
            + self.non_torch_bytes
            + self.cudagraph_bytes
        )


def requested_memory(gpu_memory_bytes: int, utilization: float | Fraction) -> int:
    """``ceil(total_memory x gpu_memory_utilization)``, on the memory CUDA reports (79.19 GiB on
    an H100 80GB, not the marketed 80 GB): the deployment's usable memory."""
    if not 0 < utilization <= 1:
        raise VLLMConfigError(f"gpu_memory_utilization must be in (0, 1], got {utilization}")
    return usable_bytes(gpu_memory_bytes, as_fraction(utilization))


def is_dense(model: ModelSpec) -> bool:
    """Attention and dense MLPs only: what Model Runner V2 took by default in 0.25."""
    return all(m.holds_tokens for m in model.mixer_pattern) and not any(
        isinstance(ffn, MoE) for ffn in used_ffns(model)
    )


def runs_on_model_runner_v2(model: ModelSpec, release: VLLMRelease) -> bool:
    """Whether ``release`` runs ``model`` on Model Runner V2: a dense model from 0.25, when V2
    became their default (its graph rule no longer V1's); every model from 0.29
    (:attr:`~kvcalc.engine.vllm_releases.VLLMRelease.v2_every_model`), and in 0.34, which
    removed V1 (:attr:`~kvcalc.engine.vllm_releases.VLLMRelease.model_runner_v1`)."""
    if not release.model_runner_v1 or release.v2_every_model:
        return True
    return is_dense(model) and release.dense_graphs != "v1"


def dense_sampler_copies(
    model: ModelSpec, release: VLLMRelease, capability: tuple[int, int] | None = None
) -> int | None:
    """The fp32 logits copies of Model Runner V2's profiled sampler where V2 runs the model (a
    dense model from 0.25, every model from 0.29: :attr:`~kvcalc.engine.vllm_releases.
    VLLMRelease.dense_sampler_fp32_copies`); None where Model Runner V1 does. From 0.33 its
    second pass with every sampling feature on
    (:attr:`~kvcalc.engine.vllm_releases.VLLMRelease.profile_sampler_warmup_pass`): the fp32
    copy ``Sampler.apply_sampling_params`` makes and, where FlashInfer samples on a GPU of
    compute ``capability`` (:func:`~kvcalc.engine.vllm_warmup.samples_with_flashinfer`), the
    top-k-masked logits and their softmax ``top_k_top_p_sampling_from_logits`` makes beside it
    (flashinfer/sampling.py of flashinfer-python 0.7.2.post1 and 0.7.4): 1 or 3."""
    if not runs_on_model_runner_v2(model, release):
        return None
    if release.profile_sampler_warmup_pass:
        return 3 if samples_with_flashinfer(capability) else 1
    return release.dense_sampler_fp32_copies


def consumed_runner_buffers(
    model: ModelSpec, release: VLLMRelease, tokens: int, max_num_seqs: int,
    first_stage: bool = True,
) -> int:
    """What the release's "consumed memory" holds of the model runner's persistent buffers
    beyond the weights and the non-torch memory, where the release counts them ("consumed"
    accounting, 0.27 on; before, torch memory made ahead of the profile run is in no term):

    * Model Runner V1's ``inputs_embeds`` (:func:`~kvcalc.engine.overhead.runner_inputs_embeds`:
      ``tokens``, max_num_batched_tokens, x the hidden size) where V1 runs the model, on every
      worker (``GPUModelRunner.__init__``);
    * where Model Runner V2 does (dense models from 0.25, every model from 0.29), its sampler
      penalty state (:func:`~kvcalc.engine.overhead.v2_penalty_buffers`), and for a multimodal
      model on the first pipeline stage its ``EncoderRunner.inputs_embeds`` of the same shape
      (vllm/v1/worker/gpu/mm/encoder_runner.py, made by ``init_model_state`` after "Model
      loading took" is measured, when the runner has an encoder cache: multimodal inputs on
      the first PP rank, ``GPUModelRunner.__init__`` of 0.28.0 and 0.34.0). Text models keep
      no ``inputs_embeds`` there (its ``--enable-prompt-embeds`` buffer is not modelled)."""
    if release.accounting != "consumed":
        return 0
    if not runs_on_model_runner_v2(model, release):
        return runner_inputs_embeds(model, tokens)
    encoder = model.vision is not None and first_stage
    return v2_penalty_buffers(model, max_num_seqs) + runner_inputs_embeds(model, tokens) * encoder


def cudagraph_estimate(
    model: ModelSpec,
    release: VLLMRelease,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    pp: int = 1,
    capability: tuple[int, int] | None = None,
) -> int:
    """"Estimated CUDA graph memory" of one worker: graphs captured (PIECEWISE and FULL sizes,
    :func:`captured_graphs` on a GPU of compute ``capability``) x the layers of the largest pipeline
    stage x the figure per graph and layer of the model runner that estimates them
    (:data:`CUDAGRAPH_BYTES_PER_GRAPH_LAYER`, Model Runner V2's
    :data:`CUDAGRAPH_BYTES_PER_GRAPH_LAYER_V2` for dense models from 0.29); 0 before 0.17 (not
    estimated) and for dense models in 0.25-0.28 (Model Runner V2's estimate is 0)."""
    rule = release.dense_graphs if runs_on_model_runner_v2(model, release) else "v1"
    if release.cudagraph == "after_kv" or rule == "none":
        return 0
    per_graph_layer = (
        CUDAGRAPH_BYTES_PER_GRAPH_LAYER_V2 if rule == "v2" else CUDAGRAPH_BYTES_PER_GRAPH_LAYER
    )
    graphs = captured_graphs(model, release, max_num_seqs, max_num_batched_tokens, capability)
    return graphs * stage_layers(model, pp) * per_graph_layer


def full_decode_graphs(
    model: ModelSpec, release: VLLMRelease, capability: tuple[int, int] | None = None
) -> bool:
    """Whether every attention backend of ``model`` can be captured in a FULL decode graph.
    A chunked-local layer's builder reports ``AttentionCGSupport.NEVER``
    (``ChunkedLocalAttentionBuilder.get_cudagraph_support``,
    vllm/model_executor/layers/attention/chunked_local_attention.py of 0.28.0, 0.33.0 and
    0.34.0), the least of the model's backends is what the mode is resolved against, and at
    NEVER FULL_AND_PIECEWISE becomes PIECEWISE (``resolve_cudagraph_mode_and_sizes``,
    vllm/config/compilation.py of 0.28.0 to 0.34.0). Applied from 0.28
    (:attr:`~kvcalc.engine.vllm_releases.VLLMRelease.graphs_follow_backends`). So does a
    multimodal prefix LM's composite backend with a sliding-window layer it does not clamp
    (:func:`~kvcalc.engine.vllm_backends.mm_prefix_backend`, ``MMPrefixAttentionRouting``,
    vllm/v1/attention/backends/composite.py of 0.30.0 to 0.34.0: Gemma 3 4B and 12B on
    Hopper and the 10.x family; Gemma 4 clamps its windows,
    :attr:`~kvcalc.engine.vision.VisionEncoder.prefix_window_clamped`)."""
    from kvcalc.engine.vllm_backends import mm_prefix_backend

    if any(m.kind == "chunked" for m in model.mixer_pattern):
        return False
    unclamped = any(m.kind == "sliding" for m in model.mixer_pattern) and not (
        model.vision is not None and model.vision.prefix_window_clamped
    )
    return not (unclamped and mm_prefix_backend(release, model, capability) is not None)


def captured_graphs(
    model: ModelSpec,
    release: VLLMRelease,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    capability: tuple[int, int] | None = None,
) -> int:
    """The CUDA graphs a worker captures: the PIECEWISE sizes and the FULL ones on a GPU of
    compute ``capability`` (None: ROCm or not known)."""
    return capture_sizes(
        release, max_num_seqs, max_num_batched_tokens, capability
    ) + full_graph_sizes(
        release, max_num_seqs, max_num_batched_tokens, capability,
        full_decode_graphs(model, release, capability),
    )


def stage_layers(model: ModelSpec, pp: int) -> int:
    """The layers of the largest pipeline stage."""
    return max(len(stage) for stage in pipeline_stage_layers(model.num_layers, pp))


def profile_kv_memory(
    model: ModelSpec,
    gpu_memory_bytes: int,
    weights_per_gpu: int | Sequence[int],
    *,
    tp: int = 1,
    pp: int = 1,
    gpu_memory_utilization: float | Fraction = DEFAULT_GPU_UTIL,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
    release: VLLMRelease | None = None,
    scale_up_link: bool = True,
    rocm: bool = False,
    unified_in_use_bytes: int | None = None,
    capability: tuple[int, int] | None = None,
    cuda_graphs: bool = True,
) -> tuple[ProfiledMemory, ...]:
    """Estimated "Available KV cache memory" per pipeline stage, as the profiler of vLLM
    ``release`` (None: 0.19) would find it (``Worker.determine_available_memory``): requested -
    weights - activation peak - non-torch - the CUDA-graph estimate where the release
    subtracts it; from 0.34 what its extensible KV cache measures after warmup
    (:mod:`kvcalc.engine.vllm_warmup`: ``rocm`` for its margin, ``unified_in_use_bytes`` what
    a unified part's OS leaves unavailable at start; ``capability`` the GPU's compute capability,
    which sets 0.34's CUDA-graph sizes; ``cuda_graphs`` False under ``--enforce-eager``: it
    sets ``cudagraph_mode`` NONE (``VllmConfig``, vllm/config/vllm.py of 0.29.0), so
    ``determine_available_memory`` makes no estimate, and ``compile_or_warm_up_model`` captures
    nothing (vllm/v1/worker/gpu_worker.py of 0.29.0 and 0.34.0)). ``weights_per_gpu`` is one
    figure, or one
    per stage; ``scale_up_link`` False for GPUs joined by PCIe alone
    (:func:`~kvcalc.engine.overhead.non_torch_memory`). An estimate: expect a few percent of
    run-to-run variation, and pass the logged figure when you have one."""
    rules = release or vllm_release(BLOCK_MODEL_VERSION)
    weights = per_stage(weights_per_gpu, pp, "weights")
    requested = requested_memory(gpu_memory_bytes, gpu_memory_utilization)
    # 0.34's extensible cache makes no estimate: Model Runner V2's profile_cudagraph_memory
    # returns 0 under it ("The extensible KV cache measures the capture footprint after
    # warmup", vllm/v1/worker/gpu/model_runner.py of 0.34.0), so the profiled peak kept free
    # (reserved_headroom_bytes = peak_activation_memory, gpu_worker.py) holds none.
    estimated = cuda_graphs and rules.kv_sizing != "after_warmup"
    graphs = cudagraph_estimate(
        model, rules, max_num_seqs, max_num_batched_tokens, pp, capability
    ) if estimated else 0
    warmup = None
    if rules.kv_sizing == "after_warmup":
        warmup = AfterWarmup(
            device_total_bytes=gpu_memory_bytes,
            in_use_at_snapshot_bytes=in_use_at_snapshot_bytes(
                tp * pp > 1, unified_in_use_bytes
            ),
            graph_pool_bytes=graph_pool_bytes(
                captured_graphs(
                    model, rules, max_num_seqs, max_num_batched_tokens, capability
                ) if cuda_graphs else 0,
                stage_layers(model, pp),
            ),
            margin_floor_bytes=MARGIN_FLOOR_BYTES_ROCM if rocm else MARGIN_FLOOR_BYTES_CUDA,
            held_workspace_bytes=(
                moe_workspace(model, tp, max_num_batched_tokens) if rules.moe_workspace_held else 0
            ),
        )
    return tuple(
        ProfiledMemory(
            requested_bytes=requested,
            weights_bytes=w,
            activation_peak_bytes=activation_peak(
                model,
                tp,
                max_num_batched_tokens,
                max_num_seqs,
                last_stage=s == pp - 1,
                pp=pp,
                logit_copies=rules.sampler_logit_copies,
                workspace_held=rules.moe_workspace_held,
                v2_sampler_fp32_copies=dense_sampler_copies(model, rules, capability),
                workspace_resident=warmup is not None,
            ),
            non_torch_bytes=non_torch_memory(tp, pp, scale_up_link)
            + consumed_runner_buffers(model, rules, max_num_batched_tokens, max_num_seqs,
                                      first_stage=s == 0),
            cudagraph_bytes=graphs if rules.cudagraph == "subtracted" and not warmup else 0,
            cudagraph_estimate_bytes=graphs,
            after_warmup=warmup
            and replace(
                warmup,
                warmup_transient_bytes=warmup_transient_bytes(
                    model, max_num_batched_tokens, max_num_seqs, pp, last_stage=s == pp - 1,
                    flashinfer_sampler=samples_with_flashinfer(capability),
                ),
            ),
        )
        for s, w in enumerate(weights)
    )


# --------------------------------------------------------------------------------------------
# The inputs vLLM starts with, resolved for a release and a GPU


@dataclass(frozen=True)
class VLLMInputs:
    """What a vLLM start-up uses: the release and the values of its budget's inputs, given or
    the release's defaults for the GPU (reported in the JSON)."""

    version: str
    """The release as given (or the default), e.g. "0.21" or "0.33.0"."""
    release: VLLMRelease
    gpu_memory_utilization: Fraction
    max_num_batched_tokens: int
    max_num_seqs: int
    enforce_eager: bool = False
    """``--enforce-eager``: no CUDA graphs, so none in the budget."""


#: ``CacheConfig.DEFAULT_GPU_MEMORY_UTILIZATION`` of 0.34.0 (vllm/config/cache.py): the share a
#: start-up without the extensible KV cache requests, as from 0.21.
PROFILED_UTILIZATION_0_34 = Fraction(92, 100)


def release_as_run(
    release: VLLMRelease, version: str, dep: Deployment, extensible: bool | None
) -> VLLMRelease:
    """``release``'s rules under ``--[no-]enable-extensible-kv-cache`` (None: vLLM's default,
    on from 0.34). Off, the cache is sized from the profile run as up to 0.33, at the 0.92
    default utilization (``_resolve_extensible_kv_cache``, vllm/config/vllm.py;
    ``CacheConfig.resolved_gpu_memory_utilization``, vllm/config/cache.py of 0.34.0). Earlier
    releases have no such option (``vllm serve`` refuses an argument it does not know), and
    vLLM does not start with it on beside a KV budget given ("it sizes the KV cache from
    measured memory, which kv_cache_memory_bytes overrides")."""
    field = "enable_extensible_kv_cache"
    if extensible is None:
        return release
    if release.kv_sizing != "after_warmup":
        raise VLLMConfigError(
            "{" + field + "}: " + f"vLLM {version} has no such option (the extensible KV "
            "cache came, on by default, in 0.34); drop it, or give {vllm_version} 0.34 or later",
            field, "vllm_version",
        )
    if not extensible:
        return replace(
            release, kv_sizing="profiled", gpu_memory_utilization=PROFILED_UTILIZATION_0_34
        )
    if dep.kv_budget_given:
        raise VLLMConfigError.at(field, (
            "vLLM does not start with it beside a KV budget given: the extensible KV cache is "
            "sized from measured memory, which the budget overrides; drop one of them"
        ))
    return release


def batch_defaults(dep: Deployment, release: VLLMRelease) -> tuple[int, int]:
    """``vllm serve``'s max_num_batched_tokens and max_num_seqs for the deployment's GPU."""
    accelerator = dep.gpus.accelerator
    defaults = serve_batch_defaults(release, dep.cuda_total_bytes_per_gpu, accelerator.name)
    return defaults.max_num_batched_tokens, defaults.max_num_seqs


def max_num_seqs_for(dep: Deployment, release: VLLMRelease) -> int:
    """``--max-num-seqs``: the deployment's, else vLLM's default for the GPU and release (the
    one place it is read: it sizes the sampler's profile run and the CUDA-graph capture sizes,
    and caps the requests the scheduler runs at once, the batch kvcalc reports)."""
    if dep.max_num_seqs is not None:
        return dep.max_num_seqs
    return batch_defaults(dep, release)[1]


def max_num_batched_tokens_for(dep: Deployment, release: VLLMRelease) -> int:
    """``--max-num-batched-tokens``: the deployment's, else vLLM's default for the GPU, raised
    to a multimodal prefix LM's largest item where the release does
    (:attr:`~kvcalc.engine.vllm_releases.VLLMRelease.mm_item_batched_floor`: Gemma 4
    26B-A4B's 2,496 above an L40S's 2,048)."""
    if dep.max_num_batched_tokens is not None:
        return dep.max_num_batched_tokens
    tokens = batch_defaults(dep, release)[0]
    vision = dep.model.vision
    if release.mm_item_batched_floor and vision is not None and vision.prefix_lm:
        return max(tokens, vision.max_item_tokens)
    return tokens


def vllm_inputs(
    dep: Deployment,
    version: str | None = None,
    enforce_eager: bool = False,
    extensible: bool | None = None,
) -> VLLMInputs:
    """The release ``version`` (None: the newest supported) and the inputs it starts ``dep``
    with: the utilization given or the release's default, the batch sizes given or vLLM's
    defaults for the GPU, whether it runs eager (no CUDA graphs), and whether 0.34's extensible
    KV cache is on (``extensible``, None: vLLM's default; :func:`release_as_run`)."""
    from kvcalc.engine.vllm_releases import version_label

    release = release_as_run(vllm_release(version), version_label(version), dep, extensible)
    share = dep.gpu_util if dep.gpu_util is not None else release.gpu_memory_utilization
    tokens, seqs = max_num_batched_tokens_for(dep, release), max_num_seqs_for(dep, release)
    check_batch_sizes(dep, tokens, seqs)
    return VLLMInputs(
        version=version_label(version),
        release=release,
        gpu_memory_utilization=share,
        max_num_batched_tokens=tokens,
        max_num_seqs=seqs,
        enforce_eager=enforce_eager,
    )


def serving_inputs(dep: Deployment, serving: VLLMServing) -> VLLMInputs:
    """The inputs vLLM starts ``dep`` with under its serving options: their release, whether
    it runs eager and whether its cache is extensible (:func:`vllm_inputs`)."""
    return vllm_inputs(
        dep, serving.vllm_version, serving.enforce_eager, serving.enable_extensible_kv_cache
    )


def check_batch_sizes(dep: Deployment, tokens: int, seqs: int) -> None:
    """vLLM refuses to start when a step cannot hold one token of every running request:
    "max_num_batched_tokens must be greater than or equal to max_num_seqs"
    (``SchedulerConfig.verify_max_model_len``, vllm/config/scheduler.py of 0.13.0, 0.22.1 and
    0.28.0; the default batched tokens are not raised to meet a --max-num-seqs given,
    ``EngineArgs._set_default_max_num_seqs_and_batched_tokens_args`` of arg_utils.py 0.28.0)."""
    if tokens >= seqs:
        return
    field = "max_num_batched_tokens" if dep.max_num_batched_tokens is not None else "max_num_seqs"
    raise VLLMConfigError(
        "{" + field + "}: vLLM does not start with max_num_batched_tokens "
        f"{tokens:,} below max_num_seqs {seqs:,}; give {{max_num_batched_tokens}} of at least "
        f"{seqs:,} or {{max_num_seqs}} of at most {tokens:,}",
        *sorted({field, "max_num_batched_tokens", "max_num_seqs"}, key=lambda f: f != field),
    )


def check_starts(dep: Deployment, inputs: VLLMInputs) -> None:
    """Refuse a share of a unified part's memory its OS is not known to leave available: on an
    integrated GPU vLLM's free memory is the OS's MemAvailable (``MemorySnapshot.measure``,
    vllm/utils/mem_utils.py) and ``request_memory`` (vllm/v1/worker/utils.py) refuses to start
    when ``ceil(total x gpu_memory_utilization)`` is more than that, except under 0.34's
    extensible KV cache, whose budget "is only a cap; exceeding free memory over-reserves
    address space rather than pages" (``request_memory`` of 0.34.0). A KV budget given directly
    (``--kv-cache-memory``, a calibration) comes with the share its run started at, which kvcalc
    does not take beside it: such a deployment is not refused."""
    acc = dep.gpus.accelerator
    available = acc.available_at_start_bytes
    if available is None or dep.kv_budget_given or inputs.release.kv_sizing == "after_warmup":
        return
    utilization = inputs.gpu_memory_utilization
    requested = requested_memory(dep.cuda_total_bytes_per_gpu, utilization)
    if requested <= available:
        return
    most = Fraction(available, dep.cuda_total_bytes_per_gpu)
    raise VLLMConfigError.at(
        "gpu_util",
        f"vLLM does not start at {float(utilization):g} on a {acc.id}: it requests "
        f"{requested / GiB:,.2f} GiB of the unified {dep.cuda_total_bytes_per_gpu / GiB:,.2f} "
        f"GiB, and the OS has been measured to leave at most {available / GiB:,.2f} GiB "
        f"available at start-up; give {math.floor(most * 100) / 100:g} or less",
    )


def check_loads(dep: Deployment, inputs: VLLMInputs) -> None:
    """Refuse a tp at which vLLM cannot build the model from its block-FP8 checkpoint
    (:mod:`kvcalc.engine.fp8_shards`): a layout refusal, so a plan passes over it."""
    from kvcalc.engine.fp8_shards import vllm_shard_refusal
    from kvcalc.engine.serving.base import named_inputs

    why = vllm_shard_refusal(dep, parse_version(inputs.version))
    if why is not None:
        template = "{tp}: " + why
        raise VLLMConfigError(template, *named_inputs(template))


def kv_cache_upper_bound(dep: Deployment) -> bool:
    """Whether kvcalc's KV budget for ``dep`` is only an upper bound of vLLM's: a unified part
    and a budget kvcalc estimates from the GPU alone (no ``--kv-cache-memory``, calibration,
    reserve or overhead given).

    On an integrated GPU vLLM's free memory is the OS's MemAvailable (``MemorySnapshot.measure``,
    vllm/utils/mem_utils.py: compute capabilities 8.7, 11.0 and 12.1 in 0.13.0, the device's
    ``is_integrated`` property from 0.22.1 on), so every drop of it between the snapshot after
    NCCL init and the end of the profile run is charged to the KV pool: as non-torch memory up to
    0.26, inside "consumed memory" (``total_consumed``) from 0.27. That drop holds the host's
    use while vLLM starts (this process's model loading and torch.compile, the page cache, other
    processes), which depends on the machine and the run, not the model: vLLM subtracts nothing
    for it in any release read (0.13.0, 0.22.1, 0.26.0, 0.27.1, 0.28.0, 0.33.0), and kvcalc
    counts none of it.
    Public reports on GB10s range from a cold load's page cache (NVIDIA/xr-ai PR #462: a warm
    start of the same settings passes) to tens of GiB of torch.compile host memory
    (eugr/spark-vllm-docker PR #286), so no constant describes it
    (tests/fixtures/vllm_logs/README.md)."""
    return (
        dep.gpus.accelerator.unified_memory
        and not dep.kv_budget_given
        and dep.overhead_bytes is None
    )


def vllm_weights_per_stage(dep: Deployment, inputs: VLLMInputs) -> tuple[int, ...]:
    """The profiler's weights per stage ("Model loading took"): the deployment's weights, plus
    what the release's model code allocates beside them while it loads
    (:func:`~kvcalc.engine.vllm_loading.loaded_beyond_weights_bytes`) unless the weights were
    given as a measured total, which holds it already."""
    from kvcalc.engine.vllm_loading import loaded_beyond_weights_bytes

    if dep.weights_total_bytes is not None:
        return dep.weights_per_stage
    stages = pipeline_stages(dep.model.num_layers, dep.pp)
    return tuple(
        w + loaded_beyond_weights_bytes(
            dep.model, layers, dep.weights, dep.tp, inputs.release,
            inputs.max_num_batched_tokens,
        )
        for w, layers in zip(dep.weights_per_stage, stages, strict=True)
    )


def vllm_memory_terms(dep: Deployment, inputs: VLLMInputs) -> tuple[ProfiledMemory, ...]:
    """Each term of the profiler's budget per pipeline stage as kvcalc computes it for
    ``dep`` under ``inputs`` (requested memory, weights, activation peak, non-torch memory, the
    CUDA-graph estimate, and what is left for the KV cache), whatever figures the user gave:
    to set beside the terms a start-up log prints (``kvcalc calibrate``)."""
    return profile_kv_memory(
        dep.model,
        dep.cuda_total_bytes_per_gpu,  # vLLM's mem_get_info total, not nvidia-smi's
        vllm_weights_per_stage(dep, inputs),
        tp=dep.tp,
        pp=dep.pp,
        gpu_memory_utilization=inputs.gpu_memory_utilization,
        max_num_batched_tokens=inputs.max_num_batched_tokens,
        max_num_seqs=inputs.max_num_seqs,
        release=inputs.release,
        scale_up_link=dep.gpus.accelerator.interconnect is not None,
        rocm=dep.gpus.accelerator.vendor == "amd",
        unified_in_use_bytes=unified_in_use(dep),
        capability=dep.gpus.accelerator.compute_capability,
        cuda_graphs=not inputs.enforce_eager,
    )


def unified_in_use(dep: Deployment) -> int | None:
    """What a unified part's OS was measured to leave unavailable at start-up (None: not a
    unified part, or not measured)."""
    available = dep.gpus.accelerator.available_at_start_bytes
    if available is None:
        return None
    return max(dep.cuda_total_bytes_per_gpu - available, 0)


def vllm_memory_terms_for(
    model: ModelSpec, gpus: GpuSet, version: str | None = None, **deployment_inputs: Any
) -> tuple[VLLMInputs, tuple[ProfiledMemory, ...]]:
    """The inputs vLLM ``version`` (None: the newest) starts ``model`` on ``gpus`` with, and
    each budget term kvcalc computes per stage (:func:`vllm_memory_terms`): for setting beside
    a start-up log's "weights / peak activation / non-torch / CUDAGraph" figures.
    ``deployment_inputs`` are :func:`~kvcalc.engine.deployment.deployment`'s keywords (``tp``,
    ``gpu_util``, ``max_num_batched_tokens``, ``max_num_seqs``, ``weight_dtype`` ...)."""
    from kvcalc.engine.deployment import deployment

    dep = deployment(model, gpus, **deployment_inputs)
    inputs = vllm_inputs(dep, version)
    return inputs, vllm_memory_terms(dep, inputs)


def vllm_budget_per_stage(dep: Deployment, inputs: VLLMInputs) -> tuple[int, ...]:
    """"Available KV cache memory" per stage: the figure given (``kv_memory``), the usable
    memory less the weights and a given overhead, the seed's reserve, or the profiler's
    estimate under the release's rules (:func:`vllm_memory_terms`)."""
    if dep.kv_budget_given:
        return dep.kv_budget_per_stage
    if dep.overhead_bytes is not None:
        usable = requested_memory(dep.cuda_total_bytes_per_gpu, inputs.gpu_memory_utilization)
        weights = vllm_weights_per_stage(dep, inputs)
        return tuple(usable - w - dep.overhead_bytes for w in weights)
    return tuple(t.available_bytes for t in vllm_memory_terms(dep, inputs))


def deployment_kv_cache(
    dep: Deployment,
    budgets: int | Sequence[int],
    max_model_len: int,
    inputs: VLLMInputs,
    **paging: Any,
) -> VLLMKVCache | KVCacheTooSmall:
    """:func:`vllm_kv_cache` of ``dep``'s model, layout and cache format from ``budgets`` (KV
    bytes per stage) under the release's ``inputs``; ``paging``: vLLM's own serving settings
    (dcp, mamba_cache_mode, speculative tokens and draft layers)."""
    from kvcalc.engine.vllm_backends import vllm_block_size
    from kvcalc.engine.vllm_parallel import checkpoint_kinds

    return vllm_kv_cache(
        dep.model,
        budgets,
        max_model_len=max_model_len,
        kv_dtype=dep.cache.kv,
        tp=dep.tp,
        pp=dep.pp,
        block_size=vllm_block_size(dep, inputs.release),
        max_num_batched_tokens=inputs.max_num_batched_tokens,
        conv_state_dtype=dep.cache.state,
        ssm_state_dtype=dep.cache.ssm_state or dep.cache.state,
        release=inputs.release,
        checkpoint_kinds=checkpoint_kinds(
            inputs.release, dep.gpus.accelerator.compute_capability
        ),
        **paging,
    )


def more_room_input(dep: Deployment, inputs: VLLMInputs) -> str | None:
    """The option that gives ``dep``'s cache more room: a given budget's, else the
    utilization's, unless 0.34's extensible cache at a utilization of 1 already takes all the
    memory the device has left."""
    if dep.kv_memory_bytes is not None:
        return "--kv-cache-memory"
    if dep.reserve is not None:
        return "the KV share (lower --reserve)"
    if inputs.release.kv_sizing == "after_warmup" and inputs.gpu_memory_utilization >= 1:
        return None
    return "--gpu-memory-utilization"


def vllm_kv_cache_for(
    dep: Deployment,
    max_model_len: int,
    inputs: VLLMInputs | None = None,
    serving: VLLMServing | None = None,
) -> VLLMKVCache | KVCacheTooSmall:
    """vLLM's start-up for a deployment under ``inputs`` (None: the defaults of the release
    ``serving`` names, else the newest's, :func:`vllm_inputs`) with vLLM's own serving options
    (:class:`~kvcalc.engine.vllm_parallel.VLLMServing`; None: their defaults): its KV budget per
    stage (:func:`vllm_budget_per_stage`, less the MTP layers' weights on the last stage), its
    cache format and paging."""
    from kvcalc.engine.capacity import over_memory_reason
    from kvcalc.engine.vllm_parallel import VLLMServing, serving_setup

    if dep.eviction.lossy:
        raise VLLMConfigError(kept_by_engine("vLLM", dep.eviction))
    serving = serving or VLLMServing()
    inputs = inputs or serving_inputs(dep, serving)
    check_starts(dep, inputs)
    check_loads(dep, inputs)
    setup = serving_setup(dep, serving, inputs)
    result = deployment_kv_cache(
        dep,
        setup.budgets,
        max_model_len,
        inputs,
        dcp=setup.dcp,
        mamba_cache_mode=setup.mamba_cache_mode,
        num_speculative_tokens=setup.num_speculative_tokens,
        draft_mixers=setup.draft_mixers,
    )
    if isinstance(result, KVCacheTooSmall):
        result = replace(result, more_room=more_room_input(dep, inputs))
    over = over_memory_reason(dep)
    if over is None:
        return result
    # A KV budget given beside weights that leave no room for it: vLLM could not allocate it.
    stage = result.stage if isinstance(result, KVCacheTooSmall) else result.stages[0]
    return KVCacheTooSmall(result.setup, result.layer_specs, result.grouping, stage, 0, over)
