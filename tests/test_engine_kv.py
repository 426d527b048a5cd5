"""The KV formulas: golden figures from the seed texts and invariants as properties."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from specs import LLAMA3_8B

from kvcalc.engine import spec
from kvcalc.engine.kv import kv_bytes_per_sequence, kv_bytes_per_token, kv_size
from kvcalc.engine.units import GiB, KiB, MiB, dtype

BF16, FP8 = dtype("bf16"), dtype("fp8")


# Seed 004 ("3.2 The KV Cache"), worked example: Llama-3-70B (the llama3_70b fixture), 80
# layers, 8 KV heads, d_h 128.


def test_llama3_70b_per_token_is_320_kib(llama3_70b: spec.ModelSpec) -> None:
    assert kv_bytes_per_token(llama3_70b, BF16) == 2 * 80 * 8 * 128 * 2 == 327_680 == 320 * KiB


def test_llama3_70b_per_sequence_8k_and_128k(llama3_70b: spec.ModelSpec) -> None:
    assert kv_bytes_per_sequence(llama3_70b, 8192, BF16) == int(2.5 * GiB)
    assert kv_bytes_per_sequence(llama3_70b, 131_072, BF16) == 40 * GiB


def test_mha_and_mqa_what_ifs_of_the_seed_table(llama3_70b: spec.ModelSpec) -> None:
    mha = llama3_70b.with_overrides(kv_heads=64)
    mqa = llama3_70b.with_overrides(kv_heads=1)
    assert kv_bytes_per_token(mha, BF16) == int(2.5 * MiB)
    assert kv_bytes_per_sequence(mha, 131_072, BF16) == 320 * GiB
    assert kv_bytes_per_token(mqa, BF16) == 40 * KiB
    assert kv_bytes_per_sequence(mqa, 131_072, BF16) == 5 * GiB


def test_seed_000_llama_70b_mha_at_100k_is_262_gb(llama3_70b: spec.ModelSpec) -> None:
    # "2 x 80 x 64 x 100,000 x 128 x 2 (FP16) = 262 GB"
    mha = llama3_70b.with_overrides(kv_heads=64)
    assert kv_bytes_per_sequence(mha, 100_000, dtype("fp16")) == 262_144_000_000


def test_llama3_8b_bf16_and_fp8() -> None:
    # Seed 004 exercise: 2 x 32 x 8 x 128 x 2 = 131,072 bytes = 128 KiB in BF16; 64 KiB in FP8.
    assert kv_bytes_per_token(LLAMA3_8B, BF16) == 131_072
    assert kv_bytes_per_token(LLAMA3_8B, FP8) == 65_536


def with_q_heads(model: spec.ModelSpec, q_heads: int) -> spec.ModelSpec:
    """``model`` with another query head count on its (single) MLA mixer."""
    (mla,) = model.mixer_pattern
    return replace(model, mixer_pattern=(replace(mla, q_heads=q_heads),))


def test_deepseek_v3_mla_70272_bytes_per_token(deepseek_v3: spec.ModelSpec) -> None:
    # Seed 004: (512 + 64) x 61 x 2 = 70,272 bytes, "about 8.6 GiB for a 128K-token sequence".
    assert kv_bytes_per_token(deepseek_v3, BF16) == (512 + 64) * 61 * 2 == 70_272
    assert kv_bytes_per_sequence(deepseek_v3, 131_072, BF16) == 70_272 * 131_072
    assert round(70_272 * 131_072 / GiB, 1) == 8.6


def test_sliding_groups_hold_window_full_groups_hold_context(
    gpt_oss_120b: spec.ModelSpec,
) -> None:
    size = kv_size(gpt_oss_120b, 131_072, BF16)
    held = {g.kind: g.tokens_held for g in size.groups}
    assert held == {"sliding": 128, "full": 131_072}
    assert [g.layers for g in size.groups] == [18, 18]
    # 18 layers x 2 x 8 heads x 64 x 2 bytes = 36,864 per token in each group.
    assert size.bytes_per_sequence == 36_864 * 128 + 36_864 * 131_072


def test_state_layers_cost_nothing_per_token() -> None:
    gdn = spec.GatedDeltaNet(16, 32, 128, 128, 4)
    m = spec.ModelSpec("q", "q", 4, 2048, 151936, False, (gdn,), spec.DenseMLP(5120))
    assert kv_bytes_per_token(m, BF16) == 0
    # 32 x 128 x 128 recurrent + (2 x 16 x 128 + 32 x 128) x 3 conv = 548,864 values per layer.
    assert kv_bytes_per_sequence(m, 1, BF16) == 4 * 548_864 * 2


# ------------------------------------------------------------------ properties

attention = st.builds(
    lambda kv, dk, dv, group: spec.FullAttention(kv, dk, dv, kv * group),
    st.integers(1, 128),
    st.integers(1, 512),
    st.integers(1, 512),
    st.integers(1, 8),
)
sliding = st.builds(
    lambda a, w: spec.SlidingWindowAttention(a.kv_heads, a.head_dim_k, a.head_dim_v, a.q_heads, w),
    attention,
    st.integers(1, 1 << 17),
)
chunked = st.builds(
    lambda a, c: spec.ChunkedLocalAttention(a.kv_heads, a.head_dim_k, a.head_dim_v, a.q_heads, c),
    attention,
    st.integers(1, 1 << 17),
)
mla = st.builds(
    spec.MultiHeadLatentAttention,
    st.integers(1, 1024),
    st.integers(1, 128),
    st.integers(1, 256),
    st.integers(1, 256),
    st.integers(1, 256),
)
states = st.one_of(
    st.builds(
        spec.Mamba,
        st.integers(1, 16384),
        st.integers(1, 256),
        st.integers(2, 8),
        st.integers(1, 512),
    ),
    st.builds(
        spec.GatedDeltaNet,
        st.integers(1, 64),
        st.integers(1, 64),
        st.integers(1, 256),
        st.integers(1, 256),
        st.integers(2, 8),
    ),
    st.builds(spec.LightningAttention, st.integers(1, 128), st.integers(1, 256)),
)
mixers = st.one_of(attention, sliding, chunked, mla, states)


@st.composite
def models(draw: st.DrawFn) -> spec.ModelSpec:
    pattern = tuple(draw(st.lists(mixers, min_size=1, max_size=6)))
    layers = draw(st.integers(len(pattern), 128))
    return spec.ModelSpec("p", "p", layers, 4096, 32000, False, pattern, spec.DenseMLP(11008))


def max_cap(model: spec.ModelSpec) -> int:
    caps = [getattr(m, "window", 0) or getattr(m, "chunk", 0) for m in model.mixer_pattern]
    return max(caps, default=0)


contexts = st.integers(1, 1 << 20)


@given(models(), contexts, st.integers(1, 1 << 16))
def test_linear_in_context_beyond_every_window(model: spec.ModelSpec, ctx: int, extra: int) -> None:
    # Past the largest window, each extra token costs exactly the full-context layers' bytes.
    base = max(ctx, max_cap(model))
    grown = kv_bytes_per_sequence(model, base + extra, BF16) - kv_bytes_per_sequence(
        model, base, BF16
    )
    per_token_uncapped = sum(
        g.bytes_per_token for g in kv_size(model, base, BF16).groups if g.kind in ("full", "mla")
    )
    assert grown == extra * per_token_uncapped


@given(models(), contexts)
def test_linear_before_any_window_is_full(model: spec.ModelSpec, ctx: int) -> None:
    caps = [
        c for m in model.mixer_pattern if (c := getattr(m, "window", 0) or getattr(m, "chunk", 0))
    ]
    ctx = min([ctx, *caps])
    state = sum(g.state_bytes for g in kv_size(model, 1, BF16).groups)
    assert kv_bytes_per_sequence(model, ctx, BF16) == ctx * kv_bytes_per_token(model, BF16) + state


@given(models(), contexts)
def test_fp8_is_half_of_bf16(model: spec.ModelSpec, ctx: int) -> None:
    assert 2 * kv_bytes_per_sequence(model, ctx, FP8) == kv_bytes_per_sequence(model, ctx, BF16)


@given(q_heads=st.integers(1, 512), kv_heads=st.integers(1, 4096), ctx=contexts)
def test_mla_is_independent_of_head_count(
    deepseek_v3: spec.ModelSpec, q_heads: int, kv_heads: int, ctx: int
) -> None:
    reference = 70_272 * ctx  # seed 004: one latent and one RoPE key per token and layer
    assert kv_bytes_per_sequence(with_q_heads(deepseek_v3, q_heads), ctx, BF16) == reference
    assert kv_bytes_per_sequence(deepseek_v3.with_overrides(kv_heads=kv_heads), ctx, BF16) == (
        reference
    )


@given(states, contexts, contexts)
def test_state_layers_are_independent_of_context(mixer: spec.Mixer, a: int, b: int) -> None:
    m = spec.ModelSpec("s", "s", 8, 4096, 32000, False, (mixer,), spec.DenseMLP(11008))
    assert kv_bytes_per_sequence(m, a, BF16) == kv_bytes_per_sequence(m, b, BF16) > 0


@given(models(), contexts, st.integers(1, 4096))
def test_total_is_per_sequence_times_batch(model: spec.ModelSpec, ctx: int, batch: int) -> None:
    size = kv_size(model, ctx, BF16, batch)
    assert size.bytes_total == size.bytes_per_sequence * batch


@given(models(), contexts, st.sampled_from([1, 2, 4, 8, 16, 32, 64]))
def test_tensor_parallelism_never_shrinks_the_total(
    model: spec.ModelSpec, ctx: int, tp: int
) -> None:
    try:
        ranked = model.per_rank(tp)
    except spec.ParallelismError:
        return  # a split no engine accepts; refusing it is the right answer
    per_rank = kv_bytes_per_sequence(ranked, ctx, BF16)
    assert per_rank * tp >= kv_bytes_per_sequence(model, ctx, BF16)


def test_tp_beyond_kv_heads_replicates_and_grows_the_total(llama3_70b: spec.ModelSpec) -> None:
    # Seed 004: at TP 8 each GPU holds 1 of the 8 KV heads, 2 x 80 x 1 x 128 x 2 = 40,960 bytes
    # per token (8 x 40,960 = the 320 KiB total). At TP 16 each rank still holds one whole head
    # (replicated), so the total doubles to 16 x 40,960.
    assert kv_bytes_per_token(llama3_70b.per_rank(8), BF16) == 40_960
    assert kv_bytes_per_token(llama3_70b.per_rank(16), BF16) == 40_960


def test_mla_latent_is_not_split_by_tp(deepseek_v3: spec.ModelSpec) -> None:
    assert kv_bytes_per_token(deepseek_v3.per_rank(8), BF16) == 70_272


def test_tp_that_splits_no_head_evenly_is_refused(llama3_70b: spec.ModelSpec) -> None:
    with pytest.raises(spec.ParallelismError, match="size 3 does not divide the 8 KV heads"):
        llama3_70b.per_rank(3)


@st.composite
def moe_models(draw: st.DrawFn) -> spec.ModelSpec:
    model = draw(models())
    if not draw(st.booleans()):
        return model
    layout = spec.MoELayout(
        first_dense=draw(st.integers(0, model.num_layers + 2)),
        period=draw(st.integers(1, 4)),
        offset=draw(st.integers(0, 3)),
    )
    return replace(model, moe=spec.MoE(8, 2, 1024), moe_layout=layout)


@given(moe_models(), st.data())
def test_block_counts_match_a_walk_over_every_layer(
    model: spec.ModelSpec, data: st.DataObject
) -> None:
    # block_counts counts residue classes; walking the layers one by one is the definition.
    start = data.draw(st.integers(0, model.num_layers))
    stop = data.draw(st.integers(start, model.num_layers))
    step = data.draw(st.integers(1, 5))
    layers = range(start, stop, step)
    walked: dict[tuple[int, int], tuple[spec.Mixer, spec.FFN, int]] = {}
    for i in layers:
        mixer, ffn = model.mixer_at(i), model.ffn_at(i)
        n = walked.get((id(mixer), id(ffn)), (mixer, ffn, 0))[2]
        walked[id(mixer), id(ffn)] = (mixer, ffn, n + 1)
    assert model.block_counts(layers) == list(walked.values())


def test_equal_layers_of_a_pattern_are_one_block() -> None:
    # A spec read back from the cache has a copy of each layer; equal copies must still be
    # one block, or block_counts (which groups by identity) would size them separately.
    sliding = spec.SlidingWindowAttention(8, 128, 128, 32, 4096)
    full = spec.FullAttention(8, 128, 128, 32)
    pattern = (sliding, replace(sliding), full, replace(sliding))
    model = spec.ModelSpec("g", "g", 8, 4096, 32000, False, pattern, spec.DenseMLP(11008))
    assert model.mixer_pattern[0] is model.mixer_pattern[1] is model.mixer_pattern[3]
    assert [n for _, _, n in model.block_counts(range(8))] == [6, 2]
