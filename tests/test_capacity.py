"""Capacity and decode time: the seed's worked example (seed 004) and invariants."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from specs import registry_deployment, registry_model

from kvcalc.engine.capacity import Layout, capacity
from kvcalc.engine.decode import decode_step
from kvcalc.engine.deployment import Deployment, DeploymentError
from kvcalc.engine.eviction import KEEP_ALL, Eviction
from kvcalc.engine.eviction.policies import H2O, KeepRatio, SlidingWindow, StreamingLLM
from kvcalc.engine.kv import kv_bytes_per_token
from kvcalc.engine.units import GB, GiB, dtype
from kvcalc.engine.weights import WeightPrecision
from kvcalc.registry.load import model_paths

BF16, FP8 = dtype("bf16"), dtype("fp8")
H100_BW = 3_350_000_000_000  # 3.35 TB/s, the seed's figure
H100_BF16 = 989 * 10**12


def seed_deployment(
    model_id: str = "llama3-70b",
    kv: str = "bf16",
    tp: int = 8,
    gpus: int = 8,
    memory: int = 80 * GB,
    weights_total: int = 140 * GB,
) -> Deployment:
    """The seed's worked example: 80 GB per GPU, 10% reserved, 140 GB of weights."""
    return registry_deployment(
        model_id,
        f"{gpus}xH100",
        tp=tp,
        kv_dtype=kv,
        reserve=0.10,
        gpu_memory_bytes=memory,
        weights_total_bytes=weights_total,
    )


def seed_capacity(model_id: str = "llama3-70b", kv: str = "bf16", contexts=(8192, 131_072), **kw):
    return capacity(seed_deployment(model_id, kv, **kw), list(contexts))


def test_seed_budget_436_gb_and_162_vs_10_sequences() -> None:
    cap = seed_capacity()
    total = cap.kv_budget_bytes_per_gpu * 8
    assert total == 436 * GB
    assert round(total / GiB) == 406
    assert [c.max_batch for c in cap.contexts] == [162, 10]


def test_seed_decode_5_2_ms_weights_16_ms_kv_and_fp8_halves_kv() -> None:
    model = registry_model("llama3-70b")
    common = {
        "batch": 162,
        "context_tokens": 8192,
        "precision": WeightPrecision.uniform(BF16),
        "tp": 8,
        "pp": 1,
        "bandwidth_per_gpu": H100_BW,
        "flops_per_gpu": H100_BF16,
        "weights_total_bytes": 140 * GB,
    }
    step = decode_step(model, kv_dtype=BF16, **common)
    # The seed reads all 140 GB (5.22 ms); kvcalc reads only the 162 looked-up rows of the
    # untied embedding table, 2.1 GB less, hence 5.15 ms.
    assert step.weight_read_seconds * 1000 == pytest.approx(5.2, abs=0.1)
    assert step.kv_read_seconds * 1000 == pytest.approx(16, abs=0.3)
    assert step.bound == "memory"
    # "FP8 KV would halve that 16 ms."
    fp8 = decode_step(model, kv_dtype=FP8, **common)
    assert fp8.kv_read_seconds == pytest.approx(step.kv_read_seconds / 2)
    assert fp8.kv_read_seconds * 1000 == pytest.approx(8, abs=0.15)


def test_tp16_holds_one_kv_head_per_rank_and_twice_the_total() -> None:
    model = registry_model("llama3-70b")
    assert model.per_rank(16).mixer_at(0).kv_heads == 1
    # Seed 004: one of the 8 KV heads per GPU at TP 8, 2 x 80 x 1 x 128 x 2 = 40,960 bytes per
    # token; at TP 16 each rank holds one whole head too, so 16 GPUs hold twice the 320 KiB.
    assert kv_bytes_per_token(model.per_rank(8), BF16) == 40_960
    assert kv_bytes_per_token(model.per_rank(16), BF16) == 40_960


def test_deepseek_v3_latent_is_whole_on_every_gpu() -> None:
    model = registry_model("deepseek-v3")
    assert kv_bytes_per_token(model.per_rank(8), BF16) == 70_272


def test_replicas_need_divisible_gpu_counts() -> None:
    assert seed_deployment(tp=2).replicas == 4
    with pytest.raises(DeploymentError, match="3 GPUs"):
        seed_deployment(gpus=3, tp=2)


# ------------------------------------------------------------------ properties

model_ids = st.sampled_from(
    [
        "llama3-70b",
        "gemma3-27b",
        "gpt-oss-120b",
        "deepseek-v3",
        "qwen3-next-80b-a3b",
        "jamba-v0.1",
        "mistral-7b-v0.1",
        "llama4-scout",
    ]
)
ctx = st.integers(1, 1 << 20)


@settings(max_examples=60, deadline=None)
@given(model_ids, ctx, ctx)
def test_max_batch_never_rises_with_context(model_id: str, a: int, b: int) -> None:
    lo, hi = sorted((a, b))
    cap = seed_capacity(model_id, contexts=(lo, hi), weights_total=10 * GB)
    assert cap.contexts[0].max_batch >= cap.contexts[1].max_batch


@settings(max_examples=40, deadline=None)
@given(model_ids, ctx, st.sampled_from([1, 2, 4]))
def test_more_gpus_never_lower_capacity(model_id: str, context: int, factor: int) -> None:
    small = seed_capacity(model_id, contexts=(context,), weights_total=10 * GB)
    big = seed_capacity(model_id, contexts=(context,), gpus=8 * factor, weights_total=10 * GB)
    assert big.contexts[0].max_batch >= small.contexts[0].max_batch


@settings(max_examples=40, deadline=None)
@given(model_ids, ctx)
def test_fp8_kv_never_lowers_capacity(model_id: str, context: int) -> None:
    bf16 = seed_capacity(model_id, contexts=(context,), weights_total=10 * GB)
    fp8 = seed_capacity(model_id, kv="fp8", contexts=(context,), weights_total=10 * GB)
    assert fp8.contexts[0].max_batch >= bf16.contexts[0].max_batch


@settings(max_examples=40, deadline=None)
@given(model_ids, st.integers(1, 512), st.integers(1, 512), ctx, ctx)
def test_decode_time_grows_with_batch_and_context(
    model_id: str, b1: int, b2: int, c1: int, c2: int
) -> None:
    model = registry_model(model_id)
    common = {
        "kv_dtype": BF16,
        "precision": WeightPrecision.uniform(BF16),
        "tp": 8,
        "pp": 1,
        "bandwidth_per_gpu": H100_BW,
        "flops_per_gpu": H100_BF16,
    }
    (b_lo, b_hi), (c_lo, c_hi) = sorted((b1, b2)), sorted((c1, c2))
    small = decode_step(model, batch=b_lo, context_tokens=c_lo, **common)
    large = decode_step(model, batch=b_hi, context_tokens=c_hi, **common)
    assert large.tpot_seconds >= small.tpot_seconds
    assert large.kv_read_seconds >= small.kv_read_seconds


def _bisected_max_context(layout: Layout) -> int | None:
    """The reference: plain bisection over every context up to the limit."""
    from kvcalc.engine.capacity import MAX_CONTEXT_TOKENS, max_batch

    if max_batch(layout, 1) < 1:
        return 0
    if max_batch(layout, MAX_CONTEXT_TOKENS) >= 1:
        return None
    lo, hi = 1, MAX_CONTEXT_TOKENS
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if max_batch(layout, mid) >= 1 else (lo, mid)
    return lo


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(sorted(p.stem for p in model_paths())),
    st.integers(min_value=1, max_value=2**40),
    st.sampled_from([1, 16, 64, 528]),
    st.integers(min_value=0, max_value=5000),
)
def test_max_context_search_finds_what_bisection_finds(
    model_id: str, budget: int, block: int, prefix: int
) -> None:
    from kvcalc.engine.capacity import Stage, max_context_at_batch_1
    from kvcalc.engine.kv import cache_format

    spec = registry_model(model_id)
    kv = dtype(spec.default_dtype)
    layout = Layout(spec, (Stage(0, range(spec.num_layers), budget),),
                    cache_format(spec, kv), block, prefix)
    assert max_context_at_batch_1(layout) == _bisected_max_context(layout)


_policies = st.one_of(
    st.just(KEEP_ALL),
    st.integers(1, 1 << 17).map(SlidingWindow),
    st.tuples(st.integers(1, 64), st.integers(1, 1 << 15)).map(lambda t: StreamingLLM(*t)),
    st.integers(1, 1 << 17).map(H2O),
    st.fractions(min_value=Fraction(1, 100), max_value=1).map(KeepRatio),
)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(sorted(p.stem for p in model_paths())),
    st.sampled_from(["bf16", "fp8", "int4", "nvfp4", "kivi2", "kivi4"]),
    _policies,
    st.lists(st.integers(min_value=1, max_value=2**40), min_size=1, max_size=3),
    st.sampled_from([1, 16, 64]),
    st.integers(min_value=0, max_value=5000),
)
def test_max_context_search_matches_bisection_under_formats_policies_and_stages(
    model_id: str,
    kv_name: str,
    policy: Eviction,
    budgets: list[int],
    block: int,
    prefix: int,
) -> None:
    # The search starts from a long-context estimate (exact for linear formats past every
    # window); KIVI's non-linear bytes, evicting policies and uneven stages must still land
    # where plain bisection does.
    from kvcalc.engine.capacity import Stage, max_context_at_batch_1
    from kvcalc.engine.kv import cache_format
    from kvcalc.engine.kvformat import KVFormatError, KVFormatRequest, check_stores, kv_format
    from kvcalc.engine.weights import pipeline_stages

    spec = registry_model(model_id)
    fmt = kv_format(KVFormatRequest(dtype=kv_name), spec.default_dtype)
    try:
        check_stores(fmt, spec)
    except KVFormatError:
        return  # the format cannot store this model's layers; nothing to search
    stages = tuple(
        Stage(i, layers, budget)
        for i, (layers, budget) in enumerate(
            zip(pipeline_stages(spec.num_layers, len(budgets)), budgets, strict=True)
        )
    )
    layout = Layout(spec, stages, cache_format(spec, fmt), block,
                    0 if policy.lossy else prefix, policy)
    assert max_context_at_batch_1(layout) == _bisected_max_context(layout)


@pytest.mark.parametrize("pp", [1, 2])
def test_weights_overhead_and_kv_beyond_a_gpu_fit_nothing_in_any_engine(pp: int) -> None:
    # Llama-3.1-70B's 141 GB of weights and an 80 GB KV budget on H100s (79.18 GiB each):
    # short by their sum less the memory, whichever engine sizes the cache.
    from kvcalc.engine.capacity import memory_shortfall
    from kvcalc.engine.vllm import KVCacheTooSmall, vllm_kv_cache_for

    dep = registry_deployment(
        "llama3.1-70b", f"{pp}xH100", tp=1, pp=pp, kv_memory_bytes=80 * GB
    )
    stages = zip(dep.weights_per_stage, dep.overhead_per_stage, strict=True)
    worst = max(w + o + 80 * GB for w, o in stages)
    assert memory_shortfall(dep) == worst - 85_020_639_232 > 0
    cap = capacity(dep, [8192])
    assert (cap.fits, cap.contexts[0].max_batch, cap.max_context_at_batch_1) == (False, 0, 0)
    assert cap.reason is not None and "short by" in cap.reason
    assert isinstance(vllm_kv_cache_for(dep, 8192), KVCacheTooSmall)


def test_a_kv_budget_that_leaves_room_for_the_weights_still_fits() -> None:
    from kvcalc.engine.capacity import memory_shortfall

    dep = registry_deployment("llama3.1-70b", "4xH100", tp=4, kv_memory_bytes=30 * GB)
    assert memory_shortfall(dep) == 0
    assert capacity(dep, [8192]).fits
