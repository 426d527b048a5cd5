"""Architecture what-ifs (``--as``): seed 000's "262 GB at 100K" for Llama-70B as MHA, seed
004's 64x MHA/MQA and ~71x DeepSeek-V3 MHA/MLA, and what every variant keeps."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_engine_kv import models

from kvcalc.engine import spec
from kvcalc.engine.kv import kv_bytes_per_sequence, kv_bytes_per_token
from kvcalc.engine.units import GB, GiB, dtype
from kvcalc.engine.variant import AttentionVariant, VariantError, as_attention

BF16 = dtype("bf16")
MHA, MQA = AttentionVariant("mha"), AttentionVariant("mqa")


def test_llama_70b_as_mha_is_262_gb_at_100k(llama3_70b: spec.ModelSpec) -> None:
    mha = as_attention(llama3_70b, MHA)
    # Seed 000: 2 x 80 layers x 64 heads x 128 x 2 bytes per token, x 100,000 tokens.
    assert kv_bytes_per_token(mha, BF16) == 2 * 80 * 64 * 128 * 2 == 2_621_440
    total = kv_bytes_per_sequence(mha, 100_000, BF16)
    assert total == 2_621_440 * 100_000 == 262_144_000_000
    assert round(total / GB, 1) == 262.1 and round(total / GiB, 2) == 244.14


def test_llama_70b_as_mqa_is_64_times_less_than_mha(llama3_70b: spec.ModelSpec) -> None:
    mha = kv_bytes_per_token(as_attention(llama3_70b, MHA), BF16)
    mqa = kv_bytes_per_token(as_attention(llama3_70b, MQA), BF16)
    assert mqa == 2 * 80 * 1 * 128 * 2 == 40_960 and mha == 64 * mqa


def test_gqa_8_is_llama_70b_itself(llama3_70b: spec.ModelSpec) -> None:
    gqa8 = as_attention(llama3_70b, AttentionVariant("gqa", kv_heads=8))
    assert gqa8.mixer_pattern == llama3_70b.mixer_pattern


def test_gqa_that_does_not_divide_the_heads_is_refused(llama3_70b: spec.ModelSpec) -> None:
    with pytest.raises(VariantError, match="64 query heads cannot be grouped over 7"):
        as_attention(llama3_70b, AttentionVariant("gqa", kv_heads=7))


def test_deepseek_v3_as_mha_is_about_71_times_its_mla(deepseek_v3: spec.ModelSpec) -> None:
    mha = as_attention(deepseek_v3, MHA)
    # Seed 004: 128 heads, keys of 128 + 64, values of 128, 61 layers, 2 bytes.
    assert kv_bytes_per_token(mha, BF16) == 128 * (192 + 128) * 61 * 2 == 4_997_120
    assert kv_bytes_per_token(deepseek_v3, BF16) == 70_272
    assert 71 < 4_997_120 / 70_272 < 71.2


def test_llama_70b_as_mla_caches_a_latent(llama3_70b: spec.ModelSpec) -> None:
    mla = as_attention(llama3_70b, AttentionVariant("mla", latent=512, rope=64))
    assert kv_bytes_per_token(mla, BF16) == (512 + 64) * 80 * 2 == 92_160
    (layer,) = mla.mixer_pattern
    assert isinstance(layer, spec.MultiHeadLatentAttention)
    # The query keeps its 128 values per head: 64 RoPE, 64 not.
    assert (layer.qk_nope_head_dim, layer.qk_rope_head_dim, layer.v_head_dim) == (64, 64, 128)


def test_mla_keeps_sliding_layers(gpt_oss_120b: spec.ModelSpec) -> None:
    mla = as_attention(gpt_oss_120b, AttentionVariant("mla", latent=256))
    before = [m.kind for m in gpt_oss_120b.mixer_pattern]
    assert "sliding" in before and "full" in before
    assert [m.kind for m in mla.mixer_pattern] == [k if k == "sliding" else "mla" for k in before]


def test_a_rope_wider_than_the_query_head_is_refused(llama3_70b: spec.ModelSpec) -> None:
    with pytest.raises(VariantError, match="wider than the 128-wide query heads"):
        as_attention(llama3_70b, AttentionVariant("mla", latent=512, rope=129))


def test_a_model_without_attention_is_refused() -> None:
    mamba = spec.ModelSpec(
        "m", "m", 4, 1024, 1000, False, (spec.Mamba(2048, 16, 4, 64),), spec.DenseMLP(4096)
    )
    with pytest.raises(VariantError, match="no attention layers"):
        as_attention(mamba, MHA)
    sliding_only = spec.ModelSpec(
        "s",
        "s",
        4,
        1024,
        1000,
        False,
        (spec.SlidingWindowAttention(8, 128, 128, 32, window=4096),),
        spec.DenseMLP(4096),
    )
    with pytest.raises(VariantError, match="no full-attention or MLA layers"):
        as_attention(sliding_only, AttentionVariant("mla", latent=512))


@pytest.mark.parametrize(
    ("kind", "numbers"), [("gqa", {"kv_heads": 0}), ("mla", {"latent": 0}), ("gqa", {})]
)
def test_a_variant_without_its_numbers_is_refused(kind: str, numbers: dict) -> None:
    with pytest.raises(VariantError):
        AttentionVariant(kind, **numbers)  # type: ignore[arg-type]


variants = st.one_of(
    st.sampled_from([MHA, MQA]),
    st.builds(AttentionVariant, st.just("mla"), st.none(), st.integers(1, 1024), st.just(0)),
)


@given(models(), variants, st.integers(1, 1 << 20))
@settings(max_examples=200, deadline=None)
def test_a_variant_keeps_the_other_dimensions(
    model: spec.ModelSpec, variant: AttentionVariant, ctx: int
) -> None:
    try:
        new = as_attention(model, variant)
    except VariantError:
        return  # no layer takes it
    assert (new.id, new.num_layers, new.hidden_size, new.vocab_size, new.dense_mlp) == (
        model.id,
        model.num_layers,
        model.hidden_size,
        model.vocab_size,
        model.dense_mlp,
    )
    for old, now in zip(model.mixer_pattern, new.mixer_pattern, strict=True):
        assert old.holds_tokens == now.holds_tokens
        if not old.holds_tokens:
            assert now == old
    # MHA never caches less than MQA.
    if variant == MHA:
        mqa = as_attention(model, MQA)
        assert kv_bytes_per_sequence(new, ctx, BF16) >= kv_bytes_per_sequence(mqa, ctx, BF16)
