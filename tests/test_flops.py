"""FLOPs per decode step: golden values worked by hand from the official configs
(shared/reference/model-configs.yaml, the specs of tests/specs.py), and properties over batch and
context."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.engine.flops import decode_flops, matmul_params_per_token
from kvcalc.engine.spec import (
    DenseMLP,
    FullAttention,
    GatedDeltaNet,
    LightningAttention,
    Mamba,
    ModelSpec,
    SlidingWindowAttention,
)
from kvcalc.engine.weights import param_counts


def test_llama3_70b_decode_flops(llama3_70b: ModelSpec) -> None:
    # matmul: 70,553,706,496 parameters less the 128256 x 8192 embedding table (1,050,673,152)
    # and the norms (80 x 16,384 + 8,192 = 1,318,912) = 69,501,714,432 per token, 2 FLOPs each.
    # attention at 8,192 tokens: 80 layers x 2 x 64 heads x (128 + 128) x 8,192.
    f = decode_flops(llama3_70b, batch=1, context_tokens=8192)
    assert f.matmul == 2 * 69_501_714_432
    assert f.attention == 80 * 2 * 64 * 256 * 8192
    assert f.state == 0
    assert f.total == 139_003_428_864 + 21_474_836_480


def test_batch_multiplies_every_part(llama3_70b: ModelSpec) -> None:
    # 32 sequences of 4,096 tokens: 32 x the 2 x 69,501,714,432 matmul FLOPs of one token, and
    # 32 x 80 layers x 2 x 64 heads x (128 + 128) x 4,096 held tokens of attention.
    many = decode_flops(llama3_70b, 32, 4096)
    assert many.matmul == 32 * 139_003_428_864
    assert many.attention == 32 * 80 * 2 * 64 * 256 * 4096


def test_sliding_window_caps_the_tokens_attended(gpt_oss_120b: ModelSpec) -> None:
    # gpt-oss-120b at 100,000 tokens: 18 sliding layers attend to 128 tokens, 18 full layers to
    # all 100,000; 2 x 64 heads x (64 + 64) = 16,384 FLOPs per held token.
    f = decode_flops(gpt_oss_120b, batch=1, context_tokens=100_000)
    assert f.attention == 16_384 * (18 * 128 + 18 * 100_000)


def test_moe_matmul_counts_top_k_experts(gpt_oss_120b: ModelSpec) -> None:
    # gpt-oss-120b: 5,710,443,840 active parameters (4 of 128 experts), less the 201088 x 2880
    # table (579,133,440) and the norms (36 x 5,760 + 2,880 = 210,240).
    assert matmul_params_per_token(gpt_oss_120b) == 5_710_443_840 - 579_133_440 - 210_240


def test_mla_attention_is_counted_absorbed(deepseek_v3: ModelSpec) -> None:
    # Scores against the 512-wide latent plus the 64-wide RoPE key, then a weighted sum of
    # 512-wide latents: 2 x 128 heads x (512 + 64 + 512) per held token and layer.
    f = decode_flops(deepseek_v3, batch=1, context_tokens=1000)
    assert f.attention == 61 * 2 * 128 * 1088 * 1000
    # matmul: 37,552,282,624 active, less the embedding table and the norms (two per layer, the
    # two latent norms of 1536 and 512, the final norm).
    norms = 61 * (2 * 7168 + 1536 + 512) + 7168
    assert f.matmul == 2 * (37_552_282_624 - 129280 * 7168 - norms)


def test_tied_head_is_a_matmul() -> None:
    attn = FullAttention(kv_heads=2, head_dim_k=8, head_dim_v=8, q_heads=2)
    tied = ModelSpec("t", "t", 2, 16, 1000, True, (attn,), DenseMLP(32))
    untied = ModelSpec("u", "u", 2, 16, 1000, False, (attn,), DenseMLP(32))
    # Per layer: q, k, v, o 4 x 16 x 16 = 1,024; MLP 3 x 16 x 32 = 1,536; norms 32. The
    # 1000 x 16 head (16,000) is multiplied whether it is its own matrix or the embedding's.
    assert matmul_params_per_token(tied) == 2 * (1_024 + 1_536) + 16_000
    assert matmul_params_per_token(untied) == 2 * (1_024 + 1_536) + 16_000
    # Counted once when tied: 2 x 2,592 layers + 16,000 table + 16 final norm.
    assert param_counts(tied).total == 2 * 2_592 + 16_000 + 16
    assert param_counts(untied).total == 2 * 2_592 + 2 * 16_000 + 16


def test_state_updates() -> None:
    # Per layer and token: Mamba 4 x d_inner x d_state, lightning 4 x heads x head_dim^2,
    # Gated DeltaNet 6 x v_heads x k_head_dim x v_head_dim; none depends on the context.
    cases = (
        (Mamba(d_inner=8192, d_state=16, d_conv=4, dt_rank=256), 4 * 8192 * 16),
        (LightningAttention(heads=64, head_dim=128), 4 * 64 * 128 * 128),
        (GatedDeltaNet(16, 32, 128, 128, 4), 6 * 32 * 128 * 128),
    )
    for mixer, per_layer in cases:
        m = ModelSpec("s", "s", 3, 64, 100, False, (mixer,), DenseMLP(64))
        short = decode_flops(m, batch=2, context_tokens=10)
        long = decode_flops(m, batch=2, context_tokens=1_000_000)
        assert short == long
        assert short.state == 2 * 3 * per_layer
        assert short.attention == 0


def test_bad_input_is_refused(llama3_70b: ModelSpec) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        decode_flops(llama3_70b, batch=0, context_tokens=10)


@st.composite
def attention_models(draw: st.DrawFn) -> ModelSpec:
    kv = draw(st.integers(1, 8))
    fields = {
        "kv_heads": kv,
        "head_dim_k": draw(st.integers(1, 256)),
        "head_dim_v": draw(st.integers(1, 256)),
        "q_heads": kv * draw(st.integers(1, 8)),
    }
    full = FullAttention(**fields)
    sliding = SlidingWindowAttention(**fields, window=draw(st.integers(1, 4096)))
    pattern = tuple(draw(st.lists(st.sampled_from([full, sliding]), min_size=1, max_size=6)))
    return ModelSpec("r", "r", draw(st.integers(1, 24)), 64, 1000, False, pattern, DenseMLP(64))


@settings(max_examples=150, deadline=None)
@given(attention_models(), st.integers(1, 64), st.integers(1, 1 << 20), st.integers(1, 1 << 20))
def test_attention_grows_with_context_and_matmul_does_not(
    m: ModelSpec, batch: int, ctx_a: int, ctx_b: int
) -> None:
    short, long = sorted((ctx_a, ctx_b))
    a = decode_flops(m, batch, short)
    b = decode_flops(m, batch, long)
    assert a.attention <= b.attention
    assert a.matmul == b.matmul
    # Once the context passes every window, the sliding layers stop growing: the growth is
    # exactly what the full layers add.
    full_per_token = sum(
        2 * mx.q_heads * (mx.head_dim_k + mx.head_dim_v)
        for mx in (m.mixer_at(i) for i in range(m.num_layers))
        if not isinstance(mx, SlidingWindowAttention)
    )
    windows = [mx.window for mx in m.mixer_pattern if isinstance(mx, SlidingWindowAttention)]
    if not windows or short >= max(windows):
        assert b.attention - a.attention == batch * full_per_token * (long - short)
