"""The deployment object: its validation, and the budget formula and the vLLM model agreeing
wherever they model the same thing (same budget in -> same tokens, up to block rounding)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from specs import registry_deployment as dep
from specs import registry_model

from kvcalc.engine.capacity import capacity
from kvcalc.engine.deployment import (
    DEFAULT_GPU_UTIL,
    DeploymentError,
    usable_bytes,
)
from kvcalc.engine.kv import kv_size
from kvcalc.engine.units import GB, GiB
from kvcalc.engine.vllm import (
    VLLMKVCache,
    layer_cache_specs,
    profile_kv_memory,
    requested_memory,
    vllm_inputs,
    vllm_kv_cache_for,
)
from kvcalc.engine.vllm_releases import BLOCK_MODEL_VERSION

# An H100's CUDA total (registry h100-sxm): 81,082 MiB = 85,020,639,232 bytes.
H100_BYTES = 85_020_639_232
# Llama-3.1-8B at bf16: 8,030,261,248 parameters (the official 8.03B) x 2 bytes, and the RoPE
# cos/sin table vLLM builds with the weights: 131,072 positions x 128 x 2 bytes = 33,554,432.
LLAMA31_8B_WEIGHTS = 16_060_522_496 + 33_554_432


# ------------------------------------------------------------------ memory


def test_usable_memory_is_exact_for_decimal_shares() -> None:
    # 0.9 as a binary float is 0.90000000000000002220; the share is read as 9/10, so the seed's
    # 80 GB leaves exactly 72 GB, and a 10% reserve exactly the same.
    assert usable_bytes(80 * GB, Fraction("0.9")) == 72 * GB
    assert dep("llama3-70b", "8xH100", gpu_memory_bytes=80 * GB).usable_bytes_per_gpu == 72 * GB
    assert dep("llama3-70b", "8xH100", gpu_memory_bytes=80 * GB, reserve=0.1).memory_share == (
        Fraction(9, 10)
    )


def test_both_engines_take_the_same_usable_memory() -> None:
    d = dep("llama3.1-8b", gpu_util=0.95)
    assert d.usable_bytes_per_gpu == requested_memory(d.memory_bytes_per_gpu, 0.95)
    assert d.memory_bytes_per_gpu == H100_BYTES
    # ceil(85,020,639,232 x 0.95) = 80,769,607,271 bytes, as vLLM's requested memory.
    assert d.usable_bytes_per_gpu == 80_769_607_271
    assert dep("llama3.1-8b").memory_share == DEFAULT_GPU_UTIL == Fraction(9, 10)


@pytest.mark.parametrize(("model_id", "gpus", "pp"), [
    ("llama3.1-8b", "1xH100", 1),
    ("llama3.1-8b", "2xH100", 2),
    ("qwen3-32b", "4xH100", 1),
    ("deepseek-v2-lite", "2xH100", 1),
])
def test_estimated_budget_is_the_vllm_profile(model_id: str, gpus: str, pp: int) -> None:
    d = dep(model_id, gpus, pp=pp)
    profiled = profile_kv_memory(
        d.model, d.memory_bytes_per_gpu, d.weights_per_stage, tp=d.tp, pp=d.pp
    )
    assert d.kv_budget_per_stage == tuple(p.available_bytes for p in profiled)


def test_a_reserve_replaces_the_overhead_and_an_overhead_replaces_the_estimate() -> None:
    reserved = dep("llama3.1-8b", reserve=0.1)
    assert reserved.overhead_per_stage == (0,)
    # 0.9 x 85,020,639,232 = 76,518,575,308.8, rounded up; less the weights and the 5 GiB given.
    given = dep("llama3.1-8b", overhead_bytes=5 * GiB)
    assert given.weights_per_stage == (LLAMA31_8B_WEIGHTS,)
    assert given.kv_budget_per_stage == (76_518_575_309 - LLAMA31_8B_WEIGHTS - 5 * GiB,)


def test_the_last_pipeline_stage_carries_the_sampler() -> None:
    d = dep("llama3.1-8b", "2xH100", pp=2)
    first, last = d.overhead_per_stage
    # The first stage peaks in the forward pass, 8192 tokens x (5 x 4096 hidden + 3 x 14,336 FFN)
    # x 2 bytes = 1,040,187,392; the last in the sampler run, 3.72 copies of 1,024 rows of fp32
    # logits over the 128,256-token vocabulary (1,954,252,063, rounded up) beside the 8192 x
    # 4096 hidden states (67,108,864). The difference, 0.91 GiB, is the logged one (reference
    # step 4: the PP2 stages peaked at 1.10 and 2.01 GiB).
    assert last - first == 67_108_864 + 1_954_252_063 - 1_040_187_392


# ------------------------------------------------------------------ agreement of the engines


# 20 GiB = 21,474,836,480 bytes of KV per GPU, over one 16-token block of every layer per rank:
BLOCKS_IN_20_GIB = {
    # 32 layers x 16 x 2 (K, V) x 8 heads x 128 x 2 bytes = 2 MiB -> 10,240 blocks
    ("llama3.1-8b", "bf16"): 10_240,
    ("llama3.1-8b", "fp8"): 20_480,
    # TP 4 over 4 KV heads: 28 x 16 x 2 x 1 x 128 x 2 = 229,376 bytes -> 93,622.9 blocks
    ("qwen2.5-7b", "bf16"): 93_622,
    ("qwen2.5-7b", "fp8"): 187_245,
    # MLA, the 576-wide latent whole on each rank: 27 x 16 x 576 x 2 = 497,664 -> 43,151.5
    ("deepseek-v2-lite", "bf16"): 43_151,
    ("deepseek-v2-lite", "fp8"): 86_302,
    # TP 2 over 8 KV heads: 32 x 16 x 2 x 4 x 128 x 2 = 1 MiB -> 20,480 blocks
    ("mixtral-8x7b", "bf16"): 20_480,
    ("mixtral-8x7b", "fp8"): 40_960,
}


@pytest.mark.parametrize(("model_id", "gpus"), [
    ("llama3.1-8b", "1xH100"),
    ("qwen2.5-7b", "4xH100"),  # one replicated KV head per rank
    ("deepseek-v2-lite", "2xH100"),  # MLA: the latent is whole on every rank
    ("mixtral-8x7b", "2xH100"),
])
@pytest.mark.parametrize("kv", ["bf16", "fp8"])
def test_same_budget_same_tokens(model_id: str, gpus: str, kv: str) -> None:
    # The 16-token block given: vLLM's default for an fp8 MLA cache on Hopper is FLASHMLA's 64
    # (kvcalc/engine/vllm_backends.py); the agreement is checked at one block for both.
    d = dep(model_id, gpus, kv_dtype=kv, kv_memory_bytes=20 * GiB, block_size=16)
    assert d.replicas == 1
    blocks = BLOCKS_IN_20_GIB[model_id, kv]
    simple = capacity(d, [8192])
    vllm = vllm_kv_cache_for(d, 8192)
    assert isinstance(vllm, VLLMKVCache)
    assert vllm.num_blocks == blocks
    assert simple.kv_tokens_capacity == vllm.kv_cache_size_tokens == 16 * blocks
    # A request of 8,192 tokens is 512 whole blocks in both.
    assert simple.contexts[0].max_batch_per_replica == blocks // 512


@pytest.mark.parametrize("model_id", ["llama3.1-8b", "deepseek-v2-lite"])
def test_same_estimated_budget_same_tokens(model_id: str) -> None:
    # The budget formula's default overhead is vLLM 0.19's profile (0.9, no CUDA-graph
    # estimate, 8192 batched tokens on an H100), so the two agree at that release.
    d = dep(model_id)
    vllm = vllm_kv_cache_for(d, 8192, vllm_inputs(d, BLOCK_MODEL_VERSION))
    assert isinstance(vllm, VLLMKVCache)
    assert capacity(d, [8192]).kv_tokens_capacity == vllm.kv_cache_size_tokens


@pytest.mark.parametrize("model_id", ["jamba-v0.1", "qwen3-next-80b-a3b", "minimax-text-01"])
@pytest.mark.parametrize("kv", ["bf16", "fp8"])
def test_recurrent_state_bytes_agree_and_stay_at_the_model_dtype(model_id: str, kv: str) -> None:
    gpus = "8xH100" if model_id == "minimax-text-01" else "2xH100"
    d = dep(model_id, gpus, kv_dtype=kv)
    size = kv_size(d.per_rank, 1, d.cache)
    simple_state = {g.mixer.state_elements(): g.state_bytes // g.layers for g in size.groups}
    specs = layer_cache_specs(d.model, d.tp, d.kv_dtype, d.block_size, 8192, d.cache.state)
    vllm_state = {s.state_bytes for s in specs if s.is_state}
    assert set(simple_state.values()) - {0} == vllm_state
    # fp8 KV halves the attention entries only: a recurrent state is kept at the model dtype.
    bf16 = kv_size(d.per_rank, 1, dep(model_id, gpus).cache)
    assert [g.state_bytes for g in size.groups] == [g.state_bytes for g in bf16.groups]


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(("kw", "fields", "needle"), [
    ({"tp": 3}, ("tp", "pp"), "tp x pp = 3"),
    ({"tp": 6, "gpus": "6xH100"}, ("tp",), "does not divide the 8 KV heads"),
    ({"pp": 81, "gpus": "81xH100", "tp": 1}, ("pp",), "81 stages exceed the 80 layers"),
    ({"gpu_util": 1.5}, ("gpu_util",), "(0, 1]"),
    ({"reserve": 1}, ("reserve",), "[0, 1)"),
    ({"reserve": 0.1, "gpu_util": 0.9}, ("reserve", "gpu_util"), "give one or the other"),
    ({"reserve": 0.1, "overhead_bytes": GiB}, ("reserve", "overhead"), "give one or the other"),
    ({"kv_memory_bytes": GiB, "gpu_util": 0.9}, ("kv_memory", "gpu_util"), "given directly"),
    ({"kv_memory_bytes": GiB, "gpu_memory_bytes": GB}, ("kv_memory", "gpu_memory"), "directly"),
    ({"kv_memory_bytes": 0}, ("kv_memory",), "positive"),
    # An H100 has 81,559 MiB (nvidia-smi; CUDA reports 79.18 GiB): a byte more is another GPU.
    ({"gpu_memory_bytes": 85_520_809_985}, ("gpu_memory",), "the 85,520,809,984 B (79.65 GiB)"),
    ({"block_size": 0}, ("block_size",), "at least 1"),
    ({"kv_dtype": "int3"}, ("kv_dtype",), "unknown dtype"),
    ({"weight_dtype": "fp3"}, ("weight_dtype",), "unknown dtype"),
])
def test_a_deployment_that_cannot_be_built_names_its_fields(
    kw: dict, fields: tuple[str, ...], needle: str
) -> None:
    gpus = kw.pop("gpus", "8xH100")
    with pytest.raises(DeploymentError) as info:
        dep("llama3-70b", gpus, **kw)
    assert info.value.fields == fields
    assert needle in str(info.value)


def test_layout_errors_are_marked_model_specific() -> None:
    with pytest.raises(DeploymentError) as info:
        dep("llama3-70b", "6xH100", tp=6)
    assert info.value.model_specific
    with pytest.raises(DeploymentError) as info:
        dep("llama3-70b", "8xH100", tp=3)
    assert not info.value.model_specific


def test_a_deployment_is_frozen() -> None:
    d = dep("llama3-70b", "8xH100")
    with pytest.raises(AttributeError):
        d.tp = 4  # type: ignore[misc]


# ------------------------------------------------------------------ properties


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from(["llama3.1-8b", "qwen2.5-7b", "deepseek-v2-lite"]),
    st.integers(2 * GiB, 60 * GiB),
    st.sampled_from([1024, 8192, 32768]),
)
def test_engines_agree_for_any_budget(model_id: str, memory: int, ctx: int) -> None:
    # The same block for both: vLLM's default one is its release's (64 from 0.34).
    d = dep(model_id, kv_memory_bytes=memory, block_size=64)
    vllm = vllm_kv_cache_for(d, ctx)
    simple = capacity(d, [ctx])
    if isinstance(vllm, VLLMKVCache):
        assert simple.kv_tokens_capacity == vllm.kv_cache_size_tokens
        assert simple.contexts[0].max_batch == vllm.num_blocks // vllm.blocks_per_request
    elif simple.contexts[0].max_batch:
        # From 0.29 vLLM's fit check holds its null block back: only a budget within that
        # block of one request is refused where the formula fits it.
        assert vllm.available_bytes < vllm.needed_bytes <= memory
        assert memory - vllm.available_bytes == vllm.stage.bytes_per_block


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]), st.sampled_from(["llama3-70b", "deepseek-v3", "jamba-v0.1"]))
def test_tensor_parallelism_never_shrinks_the_total_cache(tp: int, model_id: str) -> None:
    model = registry_model(model_id)
    one = kv_size(model, 32768, dep(model_id, "8xH100", tp=1).cache).bytes_per_sequence
    d = dep(model_id, "8xH100", tp=tp)
    assert kv_size(d.per_rank, 32768, d.cache).bytes_per_sequence * tp >= one
