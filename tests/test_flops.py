"""FLOPs per decode step: golden values worked by hand from the official configs
(shared/reference/model-configs.yaml), and properties over batch and context."""

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
    MoE,
    MoELayout,
    MultiHeadLatentAttention,
    SlidingWindowAttention,
)
from kvcalc.engine.weights import param_counts

LLAMA3_70B = ModelSpec(
    id="llama3-70b",
    name="Llama-3-70B",
    num_layers=80,
    hidden_size=8192,
    vocab_size=128256,
    tied_embeddings=False,
    mixer_pattern=(FullAttention(kv_heads=8, head_dim_k=128, head_dim_v=128, q_heads=64),),
    dense_mlp=DenseMLP(28672),
)

_OSS_ATTN = {"kv_heads": 8, "head_dim_k": 64, "head_dim_v": 64, "q_heads": 64}
GPT_OSS_120B = ModelSpec(
    id="gpt-oss-120b",
    name="gpt-oss-120b",
    num_layers=36,
    hidden_size=2880,
    vocab_size=201088,
    tied_embeddings=False,
    mixer_pattern=(SlidingWindowAttention(**_OSS_ATTN, window=128), FullAttention(**_OSS_ATTN)),
    moe=MoE(experts=128, top_k=4, intermediate_size=2880),
)

DEEPSEEK_V3_MLA = MultiHeadLatentAttention(
    kv_lora_rank=512,
    qk_rope_head_dim=64,
    qk_nope_head_dim=128,
    v_head_dim=128,
    q_heads=128,
    q_lora_rank=1536,
)
DEEPSEEK_V3 = ModelSpec(
    id="deepseek-v3",
    name="DeepSeek-V3",
    num_layers=61,
    hidden_size=7168,
    vocab_size=129280,
    tied_embeddings=False,
    mixer_pattern=(DEEPSEEK_V3_MLA,),
    dense_mlp=DenseMLP(18432),
    moe=MoE(256, 8, 2048, shared_experts=1, shared_intermediate_size=2048),
    moe_layout=MoELayout(first_dense=3),
)


def test_llama3_70b_decode_flops() -> None:
    # matmul: 70,553,706,496 parameters less the 128256 x 8192 embedding table (1,050,673,152)
    # and the norms (80 x 16,384 + 8,192 = 1,318,912) = 69,501,714,432 per token, 2 FLOPs each.
    # attention at 8,192 tokens: 80 layers x 2 x 64 heads x (128 + 128) x 8,192.
    f = decode_flops(LLAMA3_70B, batch=1, context_tokens=8192)
    assert f.matmul == 2 * 69_501_714_432
    assert f.attention == 80 * 2 * 64 * 256 * 8192
    assert f.state == 0
    assert f.total == 139_003_428_864 + 21_474_836_480


def test_batch_multiplies_every_part() -> None:
    one = decode_flops(LLAMA3_70B, 1, 4096)
    many = decode_flops(LLAMA3_70B, 32, 4096)
    assert (many.matmul, many.attention) == (32 * one.matmul, 32 * one.attention)


def test_sliding_window_caps_the_tokens_attended() -> None:
    # gpt-oss-120b at 100,000 tokens: 18 sliding layers attend to 128 tokens, 18 full layers to
    # all 100,000; 2 x 64 heads x (64 + 64) = 16,384 FLOPs per held token.
    f = decode_flops(GPT_OSS_120B, batch=1, context_tokens=100_000)
    assert f.attention == 16_384 * (18 * 128 + 18 * 100_000)


def test_moe_matmul_counts_top_k_experts() -> None:
    # gpt-oss-120b: 5,710,443,840 active parameters (4 of 128 experts), less the 201088 x 2880
    # table (579,133,440) and the norms (36 x 5,760 + 2,880 = 210,240).
    assert matmul_params_per_token(GPT_OSS_120B) == 5_710_443_840 - 579_133_440 - 210_240


def test_mla_attention_is_counted_absorbed() -> None:
    # Scores against the 512-wide latent plus the 64-wide RoPE key, then a weighted sum of
    # 512-wide latents: 2 x 128 heads x (512 + 64 + 512) per held token and layer.
    f = decode_flops(DEEPSEEK_V3, batch=1, context_tokens=1000)
    assert f.attention == 61 * 2 * 128 * 1088 * 1000
    # matmul: 37,552,282,624 active, less the embedding table and the norms (two per layer, the
    # two latent norms of 1536 and 512, the final norm).
    norms = 61 * (2 * 7168 + 1536 + 512) + 7168
    assert f.matmul == 2 * (37_552_282_624 - 129280 * 7168 - norms)


def test_tied_head_is_a_matmul() -> None:
    attn = FullAttention(kv_heads=2, head_dim_k=8, head_dim_v=8, q_heads=2)
    tied = ModelSpec("t", "t", 2, 16, 1000, True, (attn,), DenseMLP(32))
    untied = ModelSpec("u", "u", 2, 16, 1000, False, (attn,), DenseMLP(32))
    assert matmul_params_per_token(tied) == matmul_params_per_token(untied)
    assert param_counts(tied).total == param_counts(untied).total - 16_000


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


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        decode_flops(LLAMA3_70B, batch=0, context_tokens=10)


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
