"""Eviction and bounding policies: the reference texts' figures (seeds 000 and 004), the
composition with a model's own windows, states and KV dtype, and the properties every policy
keeps (never more than the baseline, linear until bounded, max batch never rising)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from specs import registry_deployment, registry_model
from test_capacity import seed_capacity, seed_deployment

from kvcalc.engine.capacity import capacity
from kvcalc.engine.decode import decode_step_for
from kvcalc.engine.deployment import DeploymentError
from kvcalc.engine.eviction import (
    KEEP_ALL,
    Eviction,
    EvictionError,
    evicts,
    layer_tokens_held,
    no_eviction_reason,
)
from kvcalc.engine.eviction.policies import (
    H2O,
    KeepRatio,
    SlidingWindow,
    SnapKV,
    StreamingLLM,
)
from kvcalc.engine.kv import kv_bytes_per_sequence, kv_size
from kvcalc.engine.sglang import SGLangConfigError, SGLangOptions, sglang_pool
from kvcalc.engine.units import GB, GiB, MiB, dtype
from kvcalc.engine.vllm import VLLMConfigError, vllm_kv_cache_for

BF16, FP8 = dtype("bf16"), dtype("fp8")
#: Llama-3-70B: 2 x 80 layers x 8 KV heads x 128 x 2 bytes (seed 004).
LLAMA70_TOKEN = 2 * 80 * 8 * 128 * 2
#: Llama-70B as seed 000 sizes it, 64 KV heads (MHA): 2 x 80 x 64 x 128 x 2 bytes.
LLAMA70_MHA_TOKEN = 2 * 80 * 64 * 128 * 2


# ------------------------------------------------------------------ seed 004


def test_seed_004_streamingllm_4_plus_1020_holds_1024_tokens_of_320_kib() -> None:
    policy = StreamingLLM(sinks=4, recent=1020)
    llama = registry_model("llama3-70b")
    for context in (5_000, 8_192, 131_072):
        assert policy.tokens_held(context) == 1024
        assert kv_bytes_per_sequence(llama, context, BF16, policy) == 1024 * LLAMA70_TOKEN
    assert 1024 * LLAMA70_TOKEN == 320 * MiB


def test_seed_004_streamingllm_cannot_recall_a_fact_5000_tokens_back() -> None:
    # "Can the model answer a question about a fact stated 5,000 tokens earlier? No."
    policy = StreamingLLM(sinks=4, recent=1020)
    assert policy.recallable(5_000, 8_192) is False
    assert policy.recallable(1_020, 8_192) is True  # the oldest recent token
    assert policy.recallable(1_021, 8_192) is False
    assert policy.recallable(8_192, 8_192) is True  # the first token is a sink
    assert policy.lossy and "cannot be recalled" in policy.consequence


def test_seed_004_batch_under_streamingllm_is_the_same_at_8k_and_128k() -> None:
    # The seed's 436 GB budget is 54.5 GB per GPU; one sequence keeps 1,024 tokens of
    # 327,680 / 8 = 40,960 bytes per GPU, whatever its context (162 and 10 without eviction).
    cap = capacity(
        _with(seed_deployment(), StreamingLLM(4, 1020)), [8192, 131_072]
    )
    per_sequence = 1024 * LLAMA70_TOKEN // 8
    assert [c.max_batch for c in cap.contexts] == [54_500_000_000 // per_sequence] * 2 == [1299] * 2
    assert [c.tokens_held for c in cap.contexts] == [1024, 1024]
    assert [c.max_batch for c in seed_capacity().contexts] == [162, 10]
    assert cap.max_context_at_batch_1 is None  # bounded: any context fits


def test_seed_004_decode_reads_only_the_kept_tokens() -> None:
    # 162 sequences at 8K read 162 x 8,192 x 320 KiB (about 16 ms at 8 x 3.35 TB/s); keeping
    # 1,024 tokens each reads an eighth of it.
    dep = seed_deployment()
    full = decode_step_for(dep, batch=162, context_tokens=8192)
    kept = decode_step_for(_with(dep, StreamingLLM(4, 1020)), batch=162, context_tokens=8192)
    assert full.kv_bytes_read == 162 * 8192 * LLAMA70_TOKEN
    assert kept.kv_bytes_read == 162 * 1024 * LLAMA70_TOKEN
    assert kept.kv_read_seconds == pytest.approx(full.kv_read_seconds / 8)
    assert kept.weight_bytes_read == full.weight_bytes_read
    assert kept.flops < full.flops  # attention over 1,024 tokens, not 8,192
    assert (kept.tokens_held, full.tokens_held) == (1024, 8192)


# ------------------------------------------------------------------ seed 000


def test_seed_000_streaming_attention_evicts_only_past_sinks_plus_recent() -> None:
    # streaming_attention(n_sink=4, n_recent=4096): standard attention while
    # seq_len <= n_sink + n_recent, else the sinks and the recent tokens.
    policy = StreamingLLM(sinks=4, recent=4096)
    assert [policy.tokens_held(n) for n in (4099, 4100, 4101, 100_000)] == [4099, 4100, 4100, 4100]


def test_seed_000_262_gb_of_llama_70b_at_100k_bounded_by_streamingllm() -> None:
    mha = registry_model("llama3-70b").with_overrides(kv_heads=64)
    assert kv_bytes_per_sequence(mha, 100_000, BF16) == 262_144_000_000  # "262 GB"
    held = kv_bytes_per_sequence(mha, 100_000, BF16, StreamingLLM(4, 4096))
    assert held == 4100 * LLAMA70_MHA_TOKEN == 10_747_904_000


def test_seed_000_sliding_window_4096_and_pruning_at_half() -> None:
    mha = registry_model("llama3-70b").with_overrides(kv_heads=64)
    assert SlidingWindow(4096).tokens_held(100_000) == 4096
    assert kv_bytes_per_sequence(mha, 100_000, BF16, SlidingWindow(4096)) == 4096 * (
        LLAMA70_MHA_TOKEN
    )
    # prune_kv_cache(keep_ratio=0.5): n_keep = int(seq_len * keep_ratio).
    half = KeepRatio(Fraction(1, 2))
    assert [half.tokens_held(n) for n in (100_000, 100_001, 3)] == [50_000, 50_000, 1]
    assert kv_bytes_per_sequence(mha, 100_000, BF16, half) == 131_072_000_000


def test_seed_000_a_128k_window_bounds_llama_3_70b_at_40_gib() -> None:
    # "LLaMA-3-70B Long Context: ... Sliding window (128K): Bounded memory"; seed 004 prices
    # 128K tokens at 40 GiB per sequence, which a 128K window keeps at any longer context.
    llama = registry_model("llama3.1-70b")
    window = SlidingWindow(131_072)
    for context in (131_072, 1 << 20, 1 << 30):
        assert kv_bytes_per_sequence(llama, context, BF16, window) == 40 * GiB
    assert kv_bytes_per_sequence(llama, 1 << 20, BF16) == 320 * GiB


# ------------------------------------------------------------------ the other policies


def test_h2o_keeps_a_fixed_budget() -> None:
    policy = H2O(2048)
    assert [policy.tokens_held(n) for n in (100, 2048, 2049, 1_000_000)] == [100, 2048, 2048, 2048]
    assert policy.recallable(10, 1_000_000) is None  # decided by attention, not position


def test_snapkv_compresses_the_prompt_once_then_grows_by_generated_tokens() -> None:
    policy = SnapKV(snapkv_budget=1024, prompt=32_768, gen=1024)
    assert policy.fixed_context == 33_792
    # After prefill: the budget; then one token per generated token.
    assert policy.tokens_held(32_768) == 1024
    assert policy.tokens_held(32_769) == 1025
    assert policy.tokens_held(33_792) == 2048
    assert policy.observation_window == 32
    assert policy.recallable(1, 33_792) is True  # generated tokens are all kept
    assert policy.recallable(1024 + 32, 33_792) is True  # the observation window
    assert policy.recallable(20_000, 33_792) is None


@pytest.mark.parametrize(
    ("build", "fields"),
    [
        (lambda: SlidingWindow(0), ("window",)),
        (lambda: StreamingLLM(4, 0), ("recent",)),
        (lambda: H2O(0), ("h2o_budget",)),
        (lambda: KeepRatio(Fraction(0)), ("keep_ratio",)),
        (lambda: KeepRatio(Fraction(3, 2)), ("keep_ratio",)),
        (lambda: SnapKV(32, prompt=4096, gen=1), ("snapkv_budget", "observation_window")),
        (lambda: SnapKV(1024, prompt=16, gen=1), ("observation_window",)),
        (lambda: SnapKV(1024, prompt=4096, gen=0), ("gen",)),
    ],
)
def test_bad_policies_name_their_inputs(build, fields: tuple[str, ...]) -> None:
    with pytest.raises(EvictionError) as info:
        build()
    assert info.value.fields == fields


# ------------------------------------------------------------------ composition


def test_layers_with_their_own_window_hold_the_smaller_bound() -> None:
    gemma = registry_model("gemma3-27b")  # 52 sliding layers (window 1,024) + 10 full

    def held(window: int) -> dict[str, int]:
        size = kv_size(gemma, 131_072, BF16, 1, SlidingWindow(window))
        return {g.kind: g.tokens_held for g in size.groups}

    assert held(4096) == {"sliding": 1024, "full": 4096}
    assert held(512) == {"sliding": 512, "full": 512}


def test_recurrent_states_are_unaffected_and_mla_is_evicted() -> None:
    jamba = registry_model("jamba-v0.1")  # 28 Mamba layers + 4 full attention
    policy = H2O(4096)
    groups = {g.kind: g for g in kv_size(jamba, 262_144, BF16, 1, policy).groups}
    baseline = {g.kind: g for g in kv_size(jamba, 262_144, BF16).groups}
    assert groups["mamba"].bytes == baseline["mamba"].bytes > 0
    assert groups["full"].tokens_held == 4096
    deepseek = registry_model("deepseek-v3")
    # MLA: (512 + 64) x 61 layers x 2 bytes per token (seed 004), 4,096 tokens kept.
    assert kv_bytes_per_sequence(deepseek, 131_072, BF16, SlidingWindow(4096)) == 4096 * 70_272


def test_quantization_composes_by_bytes_per_kept_token() -> None:
    llama = registry_model("llama3-70b")
    policy = StreamingLLM(4, 1020)
    bf16 = kv_bytes_per_sequence(llama, 100_000, BF16, policy)
    fp8 = kv_bytes_per_sequence(llama, 100_000, FP8, policy)
    assert fp8 * 2 == bf16 == 1024 * LLAMA70_TOKEN


def test_no_eviction_is_explained() -> None:
    llama = registry_model("llama3-70b")
    assert no_eviction_reason(llama, [8192], SlidingWindow(4096)) is None
    assert no_eviction_reason(llama, [8192], KEEP_ALL) is None
    assert no_eviction_reason(llama, [2048, 8192], SlidingWindow(4096)) is None  # one evicts
    reason = no_eviction_reason(llama, [4096], StreamingLLM(4, 4092))
    assert reason is not None and "no eviction happens" in reason and "4,096" in reason
    # Mistral-7B-v0.1 already slides every layer over 4,096 tokens.
    mistral = registry_model("mistral-7b-v0.1")
    reason = no_eviction_reason(mistral, [32_768], SlidingWindow(8192))
    assert reason is not None and "already holds" in reason
    assert evicts(mistral, 32_768, SlidingWindow(2048))
    jamba = registry_model("jamba-v0.1")
    states = {m for m in map(jamba.mixer_at, range(jamba.num_layers)) if not m.holds_tokens}
    assert states and all(layer_tokens_held(m, 1_000_000, H2O(8)) == 0 for m in states)


def test_a_shared_prefix_and_an_evicting_policy_are_refused() -> None:
    with pytest.raises(DeploymentError) as info:
        registry_deployment("llama3-70b", "8xH100", prefix_shared_tokens=1024,
                            eviction=StreamingLLM(4, 1020))
    assert info.value.fields == ("prefix_shared", "sinks", "recent")


def test_serving_engines_refuse_to_pretend_they_evict() -> None:
    dep = registry_deployment("llama3.1-8b", "h100", eviction=SlidingWindow(4096))
    with pytest.raises(VLLMConfigError, match="does not evict"):
        vllm_kv_cache_for(dep, 8192)
    with pytest.raises(SGLangConfigError, match="does not evict"):
        sglang_pool(dep, SGLangOptions())


# ------------------------------------------------------------------ properties


def _with(dep, policy: Eviction):
    from dataclasses import replace

    return replace(dep, eviction=policy)


bounds = st.integers(min_value=1, max_value=1 << 20)
POLICIES = st.one_of(
    bounds.map(SlidingWindow),
    st.tuples(st.integers(0, 64), bounds).map(lambda t: StreamingLLM(*t)),
    bounds.map(H2O),
    st.fractions(min_value=Fraction(1, 1000), max_value=1).map(KeepRatio),
    st.tuples(st.integers(33, 1 << 16), st.integers(64, 1 << 18), st.integers(1, 1 << 14))
    .filter(lambda t: t[0] > 32)
    .map(lambda t: SnapKV(t[0], prompt=t[1], gen=t[2])),
)
contexts = st.integers(min_value=1, max_value=1 << 21)
HYBRIDS = ["llama3-70b", "gemma3-27b", "jamba-v0.1", "deepseek-v3", "qwen3-next-80b-a3b"]


@settings(max_examples=150, deadline=None)
@given(policy=POLICIES, context=contexts, model_id=st.sampled_from(HYBRIDS))
def test_every_policy_holds_at_most_the_baseline(
    policy: Eviction, context: int, model_id: str
) -> None:
    model = registry_model(model_id)
    assert 1 <= policy.tokens_held(context) <= context
    for i in range(model.num_layers):
        mixer = model.mixer_at(i)
        assert layer_tokens_held(mixer, context, policy) <= mixer.tokens_held(context)
    assert kv_bytes_per_sequence(model, context, BF16, policy) <= kv_bytes_per_sequence(
        model, context, BF16
    )


@settings(max_examples=150, deadline=None)
@given(policy=POLICIES, a=contexts, b=contexts)
def test_tokens_held_never_fall_as_the_context_grows(policy: Eviction, a: int, b: int) -> None:
    lo, hi = sorted((a, b))
    assert policy.tokens_held(lo) <= policy.tokens_held(hi)


@settings(max_examples=100, deadline=None)
@given(bound=bounds, context=contexts, kind=st.sampled_from(["window", "streamingllm", "h2o"]))
def test_kv_grows_linearly_until_the_bound(bound: int, context: int, kind: str) -> None:
    policy = {"window": SlidingWindow(bound), "streamingllm": StreamingLLM(0, bound),
              "h2o": H2O(bound)}[kind]
    llama = registry_model("llama3-70b")
    assert kv_bytes_per_sequence(llama, context, BF16, policy) == LLAMA70_TOKEN * min(
        context, bound
    )


@settings(max_examples=40, deadline=None)
@given(policy=POLICIES, a=st.integers(1, 1 << 20), b=st.integers(1, 1 << 20))
def test_max_batch_never_rises_with_context(policy: Eviction, a: int, b: int) -> None:
    lo, hi = sorted((a, b))
    dep = _with(seed_deployment(memory=80 * GB), policy)
    first, second = capacity(dep, [lo, hi]).contexts
    assert first.max_batch >= second.max_batch
