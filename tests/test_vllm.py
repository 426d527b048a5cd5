"""vLLM 0.19 KV-cache sizing against the worked examples of the reference
(shared/reference/vllm-kv-algorithm.md, "Worked examples", checked on vLLM 0.19.0 H100 logs).

Where the reference gives a block count but not the memory, the memory range that yields that
count is derived by hand from the model's page (written out as arithmetic, never taken from the
code under test), and both ends are tested, together with one byte outside each end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from specs import STARCODER2_3B, registry_model

from kvcalc.engine import spec
from kvcalc.engine.units import GiB, MiB, dtype
from kvcalc.engine.vllm import (
    KVCacheGroup,
    KVCacheTooSmall,
    LayerCacheSpec,
    LayerGrouping,
    VLLMConfigError,
    VLLMKVCache,
    blocks_per_request,
    group_layers,
    hybrid_group_size,
    kv_cache_size_tokens,
    layer_cache_specs,
    max_concurrency,
    needed_bytes,
    non_torch_memory,
    pipeline_stage_layers,
    profile_kv_memory,
    requested_memory,
    stage_cache_layers,
    vllm_kv_cache,
)

BF16, FP16, FP32, FP8 = dtype("bf16"), dtype("fp16"), dtype("fp32"), dtype("fp8")


def run(model_id: str, memory: int | tuple[int, ...], **kw: object) -> VLLMKVCache:
    kw.setdefault("kv_dtype", BF16)
    kw.setdefault("max_model_len", 8192)
    result = vllm_kv_cache(registry_model(model_id), memory, **kw)  # type: ignore[arg-type]
    assert isinstance(result, VLLMKVCache), result
    return result


def assert_block_range(blocks_at: Callable[[int], int], low: int, high: int, blocks: int) -> None:
    """``blocks`` exactly for memory in [low, high], and a different count just outside."""
    assert blocks_at(low) == blocks
    assert blocks_at(high) == blocks
    assert blocks_at(low - 1) == blocks - 1
    assert blocks_at(high + 1) == blocks + 1


def blocks_of(model_id: str, **kw: object) -> Callable[[int], int]:
    return lambda memory: run(model_id, memory, **kw).num_blocks


# ---------------------------------------------------------------- Llama-3.1-8B (one group)

# 32 layers x 16 tokens x 2 (K, V) x 8 KV heads x 128 x 2 bytes = 2 MiB per block.
LLAMA_BLOCK = 32 * 16 * 2 * 8 * 128 * 2


def test_llama31_8b_block_is_2_mib_and_one_group() -> None:
    r = run("llama3.1-8b", 60 * GiB)
    assert LLAMA_BLOCK == 2 * MiB
    assert r.grouping.kind == "uniform_spec"
    assert len(r.grouping.groups) == 1 and r.grouping.group_size == 32
    assert r.layer_specs[0].page_bytes == 16 * 2 * 8 * 128 * 2
    assert r.stages[0].bytes_per_block == LLAMA_BLOCK


def test_llama31_8b_29751_blocks_476016_tokens_58_11x() -> None:
    assert_block_range(
        blocks_of("llama3.1-8b"), 29_751 * LLAMA_BLOCK, 29_752 * LLAMA_BLOCK - 1, 29_751
    )
    r = run("llama3.1-8b", 29_751 * LLAMA_BLOCK)
    assert r.kv_cache_size_tokens == 476_016
    assert r.blocks_per_request == 512
    assert f"{r.max_concurrency:.2f}" == "58.11"


def test_llama31_8b_at_32k_is_2048_blocks_per_request_14_53x() -> None:
    r = run("llama3.1-8b", 29_751 * LLAMA_BLOCK, max_model_len=32_768)
    assert r.blocks_per_request == 2048
    assert f"{r.max_concurrency:.2f}" == "14.53"


def test_llama31_8b_fp8_doubles_to_952032_tokens() -> None:
    # fp8: 1 byte per value, 1 MiB per block; 952,032 / 16 = 59,502 blocks.
    fp8 = blocks_of("llama3.1-8b", kv_dtype=FP8)
    assert_block_range(fp8, 59_502 * MiB, 59_503 * MiB - 1, 59_502)
    assert run("llama3.1-8b", 59_502 * MiB, kv_dtype=FP8).kv_cache_size_tokens == 952_032
    # The bf16 run at the same memory holds exactly half.
    assert run("llama3.1-8b", 59_502 * MiB).kv_cache_size_tokens == 476_016


def test_llama31_8b_fp32_175296_tokens() -> None:
    # fp32 (--dtype float32): 4 MiB per block; 175,296 / 16 = 10,956 blocks.
    fp32 = blocks_of("llama3.1-8b", kv_dtype=FP32)
    assert_block_range(fp32, 10_956 * 4 * MiB, 10_957 * 4 * MiB - 1, 10_956)
    assert run("llama3.1-8b", 10_956 * 4 * MiB, kv_dtype=FP32).kv_cache_size_tokens == 175_296


def test_llama31_8b_pp2_takes_the_smaller_stage() -> None:
    # Reference step 4: the logged 66.54 GiB is one stage's figure; the other stage had
    # 65.63 GiB (logged with 2 decimals) and the log shows 67,207 blocks. A stage holds 16
    # layers: 1 MiB per block, so the second stage had [67,207, 67,208) MiB = 65.632 GiB.
    assert [len(s) for s in pipeline_stage_layers(32, 2)] == [16, 16]
    first = int(66.54 * GiB)
    for second in (67_207 * MiB, 67_208 * MiB - 1):
        r = run("llama3.1-8b", (first, second), pp=2)
        assert [s.bytes_per_block for s in r.stages] == [MiB, MiB]
        assert [s.num_blocks for s in r.stages] == [68_136, 67_207]
        assert r.num_blocks == 67_207
        assert r.kv_cache_size_tokens == 67_207 * 16
    assert run("llama3.1-8b", (first, 67_207 * MiB - 1), pp=2).num_blocks == 67_206


# ---------------------------------------------------------------- Gemma-3-27B (hybrid)

# TP1: 16 KV heads x 128: a page is 16 x 2 x 16 x 128 x 2 = 131,072 bytes; groups of 10 layers.
GEMMA_BLOCK = 10 * 16 * 2 * 16 * 128 * 2


def test_gemma3_27b_seven_groups_of_ten_with_8_padding_slots() -> None:
    g = run("gemma3-27b", 20 * GiB).grouping
    assert g.kind == "hybrid"
    assert len(g.groups) == 7 and g.group_size == 10 and g.padding_layers == 8
    full = g.groups[0] if g.groups[0].spec.kind == "full" else g.groups[-1]
    assert full.layers == tuple(range(5, 62, 6))
    sliding = [grp for grp in g.groups if grp.spec.kind == "sliding"]
    assert sorted(len(grp.layers) for grp in sliding) == [8, 8, 9, 9, 9, 9]
    # Round-robin: the first sliding group takes every sixth sliding layer.
    assert sliding[0].layers[:3] == (0, 7, 14)
    assert g.page_bytes == 131_072


def test_gemma3_27b_15997_blocks_3590_per_request_4_46x_36560_tokens() -> None:
    assert_block_range(
        blocks_of("gemma3-27b"), 15_997 * GEMMA_BLOCK, 15_998 * GEMMA_BLOCK - 1, 15_997
    )
    r = run("gemma3-27b", 15_997 * GEMMA_BLOCK)
    # Full group 512 pages; each of 6 sliding groups ceil(min(1023 + 8192, 8192) / 16) + 1 = 513.
    pages = [grp.spec.pages_per_request(8192, 8192) for grp in r.grouping.groups]
    assert sorted(pages) == [512] + [513] * 6
    assert r.blocks_per_request == 3590
    assert f"{r.max_concurrency:.2f}" == "4.46"
    assert r.kv_cache_size_tokens == 36_560  # 15,997 // 7 x 16


def test_gemma3_27b_pp2_stage_uses_its_own_layers_per_group() -> None:
    # 62 layers -> 31 + 31; stage 0 has 5 full layers and at most 5 layers of any sliding group.
    r = run("gemma3-27b", 20 * GiB, pp=2)
    assert [s.bytes_per_block for s in r.stages] == [5 * 131_072, 5 * 131_072]


# ---------------------------------------------------------------- gpt-oss-20b, Llama-4-Scout


def test_gpt_oss_20b_tp2_1025_blocks_per_request_316_07x() -> None:
    # TP2: 4 KV heads x 64 per rank: page 16 x 2 x 4 x 64 x 2 = 16,384; 12 + 12 layers -> 2 groups.
    block = 12 * 16 * 2 * 4 * 64 * 2
    assert_block_range(
        blocks_of("gpt-oss-20b", tp=2), 323_972 * block, 323_973 * block - 1, 323_972
    )
    r = run("gpt-oss-20b", 323_972 * block, tp=2)
    assert len(r.grouping.groups) == 2 and r.grouping.group_size == 12
    assert r.blocks_per_request == 512 + 513 == 1025
    assert f"{r.max_concurrency:.2f}" == "316.07"
    assert r.kv_cache_size_tokens == 323_972 // 2 * 16


def test_llama4_scout_tp4_2048_blocks_per_request_44_68x() -> None:
    # TP4: 2 KV heads x 128 per rank: page 16,384; 12 full + 36 chunked -> 1 + 3 groups of 12.
    block = 12 * 16 * 2 * 2 * 128 * 2
    assert_block_range(blocks_of("llama4-scout", tp=4), 91_495 * block, 91_496 * block - 1, 91_495)
    r = run("llama4-scout", 91_495 * block, tp=4)
    assert len(r.grouping.groups) == 4 and r.grouping.group_size == 12
    # Chunked: ceil(min(8192 + 8192, 8192) / 16) = 512 pages each.
    assert r.blocks_per_request == 512 + 3 * 512 == 2048
    assert f"{r.max_concurrency:.2f}" == "44.68"


# ---------------------------------------------------------------- MLA


def test_deepseek_v2_lite_94097_blocks_1505552_tokens() -> None:
    # One 576-wide latent, no factor 2: 27 layers x 16 x 576 x 2 bytes per block.
    block = 27 * 16 * 576 * 2
    assert_block_range(blocks_of("deepseek-v2-lite"), 94_097 * block, 94_098 * block - 1, 94_097)
    assert run("deepseek-v2-lite", 94_097 * block).kv_cache_size_tokens == 1_505_552


def test_mla_latent_is_not_split_by_tp() -> None:
    for tp in (1, 2, 8):
        s = layer_cache_specs(registry_model("deepseek-v2-lite"), tp, BF16, 16, 8192)[0]
        assert (s.kind, s.kv_heads, s.head_size_k, s.page_bytes) == ("mla", 1, 576, 16 * 576 * 2)


def test_kimi_k2_tp8_46_80_gib_715072_tokens() -> None:
    r = run("kimi-k2", int(46.80 * GiB), tp=8, max_model_len=131_072, block_size=64)
    assert sum(s.bytes_per_token for s in r.layer_specs) == 70_272 == 61 * 576 * 2
    # At the logged 46.80 GiB with FlashMLA's 64-token blocks (what vLLM uses for MLA on H100):
    assert r.kv_cache_size_tokens == 715_072
    # With 16-token blocks the count needs [44,692, 44,693) blocks of 61 x 16 x 1,152 bytes,
    # i.e. 46.7985-46.7996 GiB, which the log also prints as 46.80.
    block = 61 * 16 * 576 * 2
    low, high = 44_692 * block, 44_693 * block - 1
    assert round(low / GiB, 2) == round(high / GiB, 2) == 46.80
    k16 = blocks_of("kimi-k2", tp=8, max_model_len=131_072)
    assert_block_range(k16, low, high, 44_692)
    assert run("kimi-k2", low, tp=8, max_model_len=131_072).kv_cache_size_tokens == 715_072


# ---------------------------------------------------------------- DeepSeek-V3.2 (indexer layers)

# Per layer and token: the 576-wide MLA latent at bf16, and the indexer's own cache of
# 128 fp8 keys + 128 // 128 x 4 scale bytes (DeepseekV32IndexerCache: MLAAttentionSpec, 1 head of
# 132 uint8). Each is a vLLM layer: 122 specs, one uniform-type group, a block costs their sum.
V32_LATENT = 576 * 2
V32_INDEXER = 128 + 4


def test_deepseek_v32_indexer_is_a_layer_spec_of_its_own() -> None:
    specs = layer_cache_specs(registry_model("deepseek-v3.2-exp"), 8, BF16, 64, 8192)
    assert len(specs) == 2 * 61
    latent, indexer = specs[0], specs[1]
    assert (latent.kind, latent.kv_heads, latent.head_size_k) == ("mla", 1, 576)
    assert latent.page_bytes == 64 * V32_LATENT  # not split by TP 8
    assert (indexer.kind, indexer.kv_heads, indexer.head_size_k) == ("mla", 1, 132)
    assert indexer.page_bytes == 64 * V32_INDEXER
    assert specs[2 * 60 : 2 * 61] == (latent, indexer)


def test_deepseek_v32_blocks_sum_both_pages() -> None:
    r = run("deepseek-v3.2-exp", 40 * GiB, tp=8, block_size=64, max_model_len=163_840)
    assert r.grouping.kind == "uniform_type" and len(r.grouping.groups) == 1
    block = 61 * 64 * (V32_LATENT + V32_INDEXER)
    assert r.stages[0].bytes_per_block == block
    assert r.num_blocks == 40 * GiB // block
    assert r.kv_cache_size_tokens == r.num_blocks * 64
    assert r.blocks_per_request == 163_840 // 64


def test_deepseek_v32_fp8_is_the_656_byte_sparse_mla_format() -> None:
    # vLLM "fp8_ds_mla": 512 fp8 + 4 fp32 scales + 64 bf16 RoPE = 656; the indexer stays 132.
    r = run("deepseek-v3.2-exp", 40 * GiB, kv_dtype=FP8, block_size=64)
    assert [s.page_bytes for s in r.layer_specs[:2]] == [64 * 656, 64 * 132]
    assert r.stages[0].bytes_per_block == 61 * 64 * (656 + 132)


def test_deepseek_v32_pipeline_stages_own_their_indexer_layers() -> None:
    m = registry_model("deepseek-v3.2-exp")
    stages = pipeline_stage_layers(61, 2)
    cache = [stage_cache_layers(m, s) for s in stages]
    assert [len(s) for s in stages] == [31, 30]
    assert cache == [range(0, 62), range(62, 122)]
    r = run("deepseek-v3.2-exp", 20 * GiB, pp=2, block_size=64)
    assert [s.bytes_per_block for s in r.stages] == [
        n * 64 * (V32_LATENT + V32_INDEXER) for n in (31, 30)
    ]


# ---------------------------------------------------------------- Granite-4.0-H (Mamba-2)

# One Mamba-2 layer of Granite-4.0-H-Small at bf16 (vLLM mamba2_state_shape): conv
# (128 x 64 + 2 x 1 x 128) x 3 and SSM 128 x 64 x 128 values.
GRANITE_SMALL_STATE = ((128 * 64 + 2 * 128) * 3 + 128 * 64 * 128) * 2


def test_granite_h_small_attention_block_holds_one_mamba_state() -> None:
    specs = layer_cache_specs(registry_model("granite-4.0-h-small"), 1, BF16, 16, 32_768)
    state, attn = specs[0], specs[5]
    assert state.kind == "mamba" and state.state_bytes == GRANITE_SMALL_STATE == 2_147_840
    # Attention: 8 KV heads x 128 x 2 x 2 = 4,096 bytes/token -> 16 x ceil(2,147,840 / 65,536)
    # = 528 tokens, one of the block sizes in the reference's logs.
    assert attn.kind == "full" and attn.block_size == 528
    assert state.page_bytes == attn.page_bytes == 528 * 4096


def test_granite_h_small_tp8_replicates_the_single_group() -> None:
    specs = layer_cache_specs(registry_model("granite-4.0-h-small"), 8, BF16, 16, 32_768)
    # vLLM pads 1 group to 8 (extra_groups_for_head_shards): conv (8,192 + 2 x 8 x 128) / 8 per
    # rank = 1,280 channels; SSM 128 / 8 = 16 heads.
    assert specs[0].state_bytes == (1280 * 3 + 16 * 64 * 128) * 2


def test_mamba2_groups_that_tp_neither_divides_nor_replicates_are_refused() -> None:
    m = spec.ModelSpec(
        "g", "g", 2, 512, 100, False,
        (spec.Mamba2(8, 64, 3, 16, 4), spec.FullAttention(4, 64, 64, 8)), spec.DenseMLP(512),
    )  # fmt: skip
    with pytest.raises(VLLMConfigError, match="3 Mamba-2 groups"):
        layer_cache_specs(m, 2, BF16, 16, 4096)


# ---------------------------------------------------------------- TP heads, sliding-only


def test_qwen25_7b_tp4_one_kv_head_per_rank() -> None:
    s = layer_cache_specs(registry_model("qwen2.5-7b"), 4, BF16, 16, 8192)[0]
    assert s.kv_heads == 1 and s.page_bytes == 16 * 2 * 1 * 128 * 2


def test_qwen25_7b_fp8_doubles_1096000_to_2192000() -> None:
    # TP1 (the only TP at which 1,096,000 tokens fit an H100: 58.5 GiB of KV):
    # 28 x 16 x 2 x 4 x 128 x 2 = 917,504 bytes per block, 68,500 blocks.
    block = 28 * 16 * 2 * 4 * 128 * 2
    assert_block_range(blocks_of("qwen2.5-7b"), 68_500 * block, 68_501 * block - 1, 68_500)
    assert run("qwen2.5-7b", 68_500 * block).kv_cache_size_tokens == 1_096_000
    assert run("qwen2.5-7b", 68_500 * block, kv_dtype=FP8).kv_cache_size_tokens == 2_192_000


def test_tp_that_does_not_divide_the_heads_is_refused() -> None:
    with pytest.raises(VLLMConfigError, match="28 attention heads are not divisible by 8"):
        layer_cache_specs(registry_model("qwen2.5-7b"), 8, BF16, 16, 8192)
    with pytest.raises(VLLMConfigError, match="replicate 4 KV heads"):
        layer_cache_specs(registry_model("qwen2.5-7b"), 14, BF16, 16, 8192)
    assert layer_cache_specs(registry_model("llama3.1-8b"), 16, BF16, 16, 8192)[0].kv_heads == 1


# starcoder2-3b (tests/specs.py) is not in the registry: 30 layers, 2 KV heads of 128, a
# 4096-token sliding window on every layer. Only the window matters for the blocks-per-request
# golden; the heads set the page from which the memory range is derived.


def starcoder(memory: int, m: spec.ModelSpec = STARCODER2_3B) -> VLLMKVCache:
    r = vllm_kv_cache(m, memory, kv_dtype=BF16, max_model_len=16_384)
    assert isinstance(r, VLLMKVCache)
    return r


def test_starcoder2_3b_all_sliding_769_blocks_per_request_178_68x() -> None:
    block = 30 * 16 * 2 * 2 * 128 * 2
    assert_block_range(
        lambda m: starcoder(m).num_blocks, 137_407 * block, 137_408 * block - 1, 137_407
    )
    r = starcoder(137_407 * block)
    assert r.grouping.kind == "uniform_spec"
    # ceil(min(4095 + 8192, 16384) / 16) + 1 = 769, not ceil(16384 / 16) = 1024.
    assert r.blocks_per_request == 769
    assert f"{r.max_concurrency:.2f}" == "178.68"
    # Before vllm-project/vllm #19029 the window was ignored: the full-attention figure.
    full = spec.FullAttention(2, 128, 128, 24)
    old = starcoder(
        137_407 * block, replace(STARCODER2_3B, mixer_pattern=(full,))
    )
    assert f"{old.max_concurrency:.2f}" == "134.19"


# ---------------------------------------------------------------- grouping rules


def full_spec(heads: int = 8, block: int = 16) -> LayerCacheSpec:
    return LayerCacheSpec("full", block, block * 2 * heads * 128 * 2, heads, 128, 128)


def sliding_spec(heads: int = 8, window: int = 128) -> LayerCacheSpec:
    return LayerCacheSpec("sliding", 16, 16 * 2 * heads * 128 * 2, heads, 128, 128, window=window)


def test_group_size_one_and_a_half_rule() -> None:
    # gpt-oss + EAGLE: 12 sliding + 13 full -> groups of 13 (largest < 1.5 x smallest).
    assert hybrid_group_size([12, 13]) == 13
    assert hybrid_group_size([10, 15]) == 10 and hybrid_group_size([10, 14]) == 14
    g = group_layers([sliding_spec(), full_spec()] * 12 + [full_spec()])
    assert len(g.groups) == 2 and g.group_size == 13 and g.padding_layers == 1


def test_uniform_type_sums_pages_and_takes_one_group() -> None:
    # Full attention with different head counts: one group whose block costs the summed page.
    # Pages of 16 tokens x 2 x heads x 128 x 2 bytes: 65,536 + 32,768 + 65,536 = 163,840.
    g = group_layers([full_spec(8), full_spec(4), full_spec(8)])
    assert g.kind == "uniform_type" and g.padding_layers == 0
    assert g.page_bytes == 163_840
    assert blocks_per_request(g, 1000, 8192) == 63  # ceil(1000 / 16), once
    assert kv_cache_size_tokens(100, g) == 1600
    assert needed_bytes(g, range(3), 1000, 8192) == 63 * 163_840


def test_unequal_pages_are_unified_by_growing_the_block() -> None:
    g = group_layers([full_spec(8), sliding_spec(4)] * 3)
    sliding = [grp.spec for grp in g.groups if grp.spec.kind == "sliding"]
    assert sliding[0].block_size == 32 and sliding[0].page_bytes == full_spec(8).page_bytes
    assert g.min_block_size == 16


def test_pages_that_do_not_divide_are_refused() -> None:
    with pytest.raises(VLLMConfigError, match="cannot unify"):
        group_layers([full_spec(8), sliding_spec(3)])


def test_pipeline_split_gives_the_remainder_to_the_stages_before_the_last() -> None:
    assert [len(s) for s in pipeline_stage_layers(61, 4)] == [15, 15, 16, 15]
    assert [len(s) for s in pipeline_stage_layers(62, 4)] == [15, 16, 16, 15]
    assert [len(s) for s in pipeline_stage_layers(63, 4)] == [16, 16, 16, 15]
    with pytest.raises(VLLMConfigError):
        pipeline_stage_layers(4, 5)


# ---------------------------------------------------------------- Mamba hybrids


def test_jamba_attention_block_grows_to_hold_one_mamba_state() -> None:
    specs = layer_cache_specs(registry_model("jamba-v0.1"), 1, BF16, 16, 32_768)
    mamba, attn = specs[0], specs[4]
    # Mamba state: conv 8192 x 3 + SSM 8192 x 16 values x 2 bytes = 311,296 bytes.
    assert mamba.state_bytes == (8192 * 3 + 8192 * 16) * 2 == 311_296
    # One attention token: 2 x 8 x 128 x 2 = 4,096 bytes -> 16 x ceil(311,296 / 65,536) = 80.
    assert attn.block_size == 80 and attn.page_bytes == 80 * 4096
    assert mamba.page_bytes == attn.page_bytes  # padded up to the attention page
    g = group_layers(specs)
    # 4 attention + 28 Mamba layers: groups of 4 -> 1 + 7 groups; 1 page per request per
    # Mamba group, ceil(32,768 / 80) = 410 for attention.
    assert (g.group_size, len(g.groups)) == (4, 8)
    assert blocks_per_request(g, 32_768, 8192) == 410 + 7


def test_qwen3_next_tp2_block_size() -> None:
    specs = layer_cache_specs(registry_model("qwen3-next-80b-a3b"), 2, BF16, 16, 32_768)
    # Per rank: 8 key / 16 value heads; conv (2 x 8 x 128 + 16 x 128) x 3, state 16 x 128 x 128.
    assert specs[0].state_bytes == ((2 * 8 * 128 + 16 * 128) * 3 + 16 * 128 * 128) * 2
    # Attention: 1 KV head x 256 x 2 x 2 = 1,024 bytes/token -> 16 x ceil(548,864 / 16,384) = 544.
    assert specs[3].block_size == 544


def test_hybrid_token_line_uses_the_attention_block() -> None:
    # vllm-project/vllm #40691 (Qwen3.5-27B, 32k): 290,864 tokens and 33.04x. The only consistent
    # reading is 1 attention group of 784-token blocks + 3 Mamba groups (block = max_model_len)
    # with 1,487 blocks: 1,487 // 4 x 784 = 290,864 and 1,487 / (42 + 3) = 33.04.
    attn = LayerCacheSpec("full", 784, 784 * 4096, 4, 256, 256)
    state = LayerCacheSpec("mamba", 32_768, 784 * 4096, state_bytes=3_000_000)
    groups = (KVCacheGroup(attn, (3,)),) + (KVCacheGroup(state, (0,)),) * 3
    g = LayerGrouping("hybrid", groups, 16, (state, state, state, attn))
    assert kv_cache_size_tokens(1487, g) == 290_864
    assert f"{max_concurrency(1487, blocks_per_request(g, 32_768, 8192)):.2f}" == "33.04"


# ---------------------------------------------------------------- feasibility


def test_one_request_must_fit() -> None:
    # 131,072 tokens of Llama-3.1-8B need 8,192 blocks of 2 MiB = 16 GiB.
    m = registry_model("llama3.1-8b")
    ok = vllm_kv_cache(m, 16 * GiB, kv_dtype=BF16, max_model_len=131_072)
    assert isinstance(ok, VLLMKVCache) and ok.num_blocks == 8192
    short = vllm_kv_cache(m, 16 * GiB - 1, kv_dtype=BF16, max_model_len=131_072)
    assert isinstance(short, KVCacheTooSmall)
    assert short.needed_bytes == 16 * GiB
    # 8,191 blocks hold 131,056 tokens.
    assert short.estimated_max_model_len == 131_056
    assert "16.00 GiB" in short.message and "131,056" in short.message


def test_no_memory_at_all_is_an_error_result() -> None:
    r = vllm_kv_cache(registry_model("llama3.1-8b"), -5, kv_dtype=BF16, max_model_len=8192)
    assert isinstance(r, KVCacheTooSmall) and r.estimated_max_model_len == 0
    assert "no memory left" in r.message


def test_vllm_has_no_int4_kv_cache() -> None:
    with pytest.raises(VLLMConfigError, match="no int4 KV cache"):
        vllm_kv_cache(registry_model("llama3.1-8b"), GiB, kv_dtype=dtype("int4"), max_model_len=8)


# ---------------------------------------------------------------- profiler estimate


def test_requested_memory_of_an_h100() -> None:
    # An H100 80GB reports 79.19 GiB; 0.95 of it is the 75.23 GiB of the reference.
    assert round(requested_memory(int(79.19 * GiB), 0.95) / GiB, 2) == 75.23
    assert round(requested_memory(int(79.19 * GiB), 0.90) / GiB, 2) == 71.27
    with pytest.raises(VLLMConfigError):
        requested_memory(GiB, 1.5)


def test_non_torch_memory_constants() -> None:
    assert 0.25 * GiB <= non_torch_memory(1, 1) <= 0.46 * GiB
    assert round(non_torch_memory(2, 1) / GiB, 2) == round(non_torch_memory(8, 2) / GiB, 2) == 2.1
    assert round(non_torch_memory(1, 2) / GiB, 2) == 0.07


def test_profile_reproduces_the_llama_pp2_stages() -> None:
    # Reference step 4: Llama-3.1-8B PP2 at 0.95 of an H100, non-KV 8.69 GiB on the first
    # stage and 9.60 GiB on the last. Weights per stage: 16 layers of
    # 4096 x (4096 + 2 x 1024 + 4096) + 3 x 4096 x 14336 + 2 x 4096 parameters, plus one
    # 128,256 x 4096 embedding or LM head (+ final norm), at 2 bytes.
    layer = 4096 * (4096 + 2 * 1024 + 4096) + 3 * 4096 * 14336 + 2 * 4096
    first = (16 * layer + 128_256 * 4096) * 2
    last = first + 4096 * 2
    budgets = profile_kv_memory(
        registry_model("llama3.1-8b"),
        int(79.19 * GiB),
        (first, last),
        pp=2,
        gpu_memory_utilization=0.95,
    )
    non_kv = [(b.requested_bytes - b.available_bytes) / GiB for b in budgets]
    assert non_kv[0] == pytest.approx(8.69, abs=0.05)
    assert non_kv[1] == pytest.approx(9.60, abs=0.1)


def test_profile_estimates_the_logged_llama_budget_and_feeds_the_block_count() -> None:
    # Reference step 1 and worked example (v0.19, H100 at 0.95): 79.19 GiB reported, 75.23 GiB
    # requested, 29,751 blocks of 2 MiB available. Weights: 32 layers of 218,112,000 parameters
    # (as in the PP2 test) + embedding and head 2 x 128,256 x 4096 + final norm 4096 =
    # 8,030,261,248 (the official "8.03B"), at 2 bytes.
    (b,) = profile_kv_memory(
        registry_model("llama3.1-8b"),
        int(79.19 * GiB),
        16_060_522_496,
        gpu_memory_utilization=0.95,
    )
    assert round(b.requested_bytes / GiB, 2) == 75.23
    assert b.weights_bytes == 16_060_522_496
    assert 0.25 * GiB <= b.non_torch_bytes <= 0.46 * GiB  # TP 1, reference step 1
    # An estimate: within 1% of the logged 58.11 GiB (29,751 x 2 MiB).
    assert b.available_bytes == pytest.approx(29_751 * LLAMA_BLOCK, rel=0.01)
    # Reference step 4: num_blocks = available_kv // (block_size x bytes_per_token_all_layers).
    r = run("llama3.1-8b", b.available_bytes)
    assert r.num_blocks == b.available_bytes // LLAMA_BLOCK


# ---------------------------------------------------------------- properties

MODELS = {
    "llama3.1-8b": (1, 2, 4, 8),
    "gemma3-27b": (1, 2, 4),
    "gpt-oss-20b": (1, 2, 4),
    "llama4-scout": (1, 2, 4, 8),
    "deepseek-v2-lite": (1, 2, 4),
    "qwen2.5-7b": (1, 2, 4),
    "jamba-v0.1": (1, 2, 4),
    "qwen3-next-80b-a3b": (1, 2, 4),
    "deepseek-v3.2-exp": (1, 2, 8),
    "granite-4.0-h-tiny": (1, 2, 4),
}


@st.composite
def setups(draw: st.DrawFn) -> dict:
    model_id = draw(st.sampled_from(sorted(MODELS)))
    return {
        "model": registry_model(model_id),
        "tp": draw(st.sampled_from(MODELS[model_id])),
        "pp": draw(st.integers(1, 4)),
        "block_size": draw(st.sampled_from([16, 32, 64])),
        "max_num_batched_tokens": draw(st.sampled_from([2048, 8192, 16384])),
    }


memories = st.integers(GiB, 100 * GiB)
lengths = st.integers(1, 131_072)


@settings(max_examples=150, deadline=None)
@given(setups(), memories, st.integers(0, 10 * GiB), lengths)
def test_more_memory_never_lowers_num_blocks(s: dict, low: int, extra: int, length: int) -> None:
    m = s.pop("model")
    high = low + extra
    r_low = vllm_kv_cache(m, low, kv_dtype=BF16, max_model_len=length, **s)
    r_high = vllm_kv_cache(m, high, kv_dtype=BF16, max_model_len=length, **s)
    assume(isinstance(r_low, VLLMKVCache))
    assert isinstance(r_high, VLLMKVCache)
    assert r_high.num_blocks >= r_low.num_blocks


@settings(max_examples=150, deadline=None)
@given(setups(), memories, lengths)
def test_fp8_never_lowers_concurrency(s: dict, memory: int, length: int) -> None:
    m = s.pop("model")
    bf16 = vllm_kv_cache(m, memory, kv_dtype=BF16, max_model_len=length, **s)
    fp8 = vllm_kv_cache(m, memory, kv_dtype=FP8, max_model_len=length, **s)
    assume(isinstance(bf16, VLLMKVCache))
    assert isinstance(fp8, VLLMKVCache)
    assert fp8.max_concurrency >= bf16.max_concurrency


@settings(max_examples=150, deadline=None)
@given(setups(), memories, lengths, lengths)
def test_concurrency_never_rises_with_max_model_len(s: dict, memory: int, a: int, b: int) -> None:
    m = s.pop("model")
    short, long = sorted((a, b))
    r_long = vllm_kv_cache(m, memory, kv_dtype=BF16, max_model_len=long, **s)
    r_short = vllm_kv_cache(m, memory, kv_dtype=BF16, max_model_len=short, **s)
    assume(isinstance(r_long, VLLMKVCache))
    assert isinstance(r_short, VLLMKVCache)
    assert r_long.max_concurrency <= r_short.max_concurrency


@settings(max_examples=150, deadline=None)
@given(setups(), st.integers(1, 4 * GiB), lengths)
def test_feasibility_and_estimated_length_agree(s: dict, memory: int, length: int) -> None:
    m = s.pop("model")
    r = vllm_kv_cache(m, memory, kv_dtype=BF16, max_model_len=length, **s)
    if isinstance(r, VLLMKVCache):
        assert r.num_blocks >= r.blocks_per_request
        return
    assert r.needed_bytes > r.available_bytes
    est = r.estimated_max_model_len
    assert 0 <= est < length
    stage = r.stage.cache_layers
    mnbt = s["max_num_batched_tokens"]
    if est:
        assert needed_bytes(r.grouping, stage, est, mnbt) <= memory
    assert needed_bytes(r.grouping, stage, est + 1, mnbt) > memory


@settings(max_examples=100, deadline=None)
@given(setups())
def test_groups_cover_every_layer_once(s: dict) -> None:
    m = s["model"]
    specs = layer_cache_specs(m, s["tp"], BF16, s["block_size"], 4096)
    g = group_layers(specs)
    layers = sorted(i for grp in g.groups for i in grp.layers)
    assert layers == list(range(len(specs)))
    assert stage_cache_layers(m, range(m.num_layers)) == range(len(specs))
    assert len({grp.spec.page_bytes for grp in g.groups}) == 1 or g.kind == "uniform_type"
    assert all(len(grp.layers) <= g.group_size for grp in g.groups)
