"""SGLang's token pool against the worked examples of the reference
(shared/reference/sglang-kv-algorithm.md, sections 4, 7 and 10), its properties, and the CLI.

SGLang logs its free memory with two decimals (GiB), so a logged token count is reproduced when it
lies between the predictions at the two ends of that rounding: the least free memory after the
load with the most before it, and the other way round.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from report_check import refused, run_json
from specs import GPU_16GB
from specs import registry_deployment as dep
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine.deployment import Deployment, deployment
from kvcalc.engine.sglang import (
    PrefillGraphInputs,
    SGLangConfigError,
    SGLangOptions,
    SGLangPool,
    SGLangPoolTooSmall,
    default_chunked_prefill_size,
    default_cuda_graph_max_bs,
    default_mem_fraction_static,
    prefill_graph_capture_sizes,
    prefill_graph_reserved_mib,
    sglang_pool,
    sglang_version,
)
from kvcalc.engine.spec import DenseMLP, FullAttention, Mamba, ModelSpec
from kvcalc.engine.units import GiB

HALF_CENT_GIB = Fraction("0.005") * GiB
#: The reference's primary release: its worked examples and logs are v0.5.6's, so they are
#: checked at it (kvcalc's default is the newest release).
V056 = sglang_version("0.5.6")


def pool(d: Deployment, **kw: object) -> SGLangPool:
    """The pool at the reference's release unless another is given."""
    kw.setdefault("version", V056)
    result = sglang_pool(d, SGLangOptions(**kw))  # type: ignore[arg-type]
    assert isinstance(result, SGLangPool), result
    return result


def logged(
    d: Deployment,
    version: str,
    before: str,
    after: str,
    delta: Fraction = Fraction(0),
    **kw: object,
) -> SGLangPool:
    """The pool for GiB figures as SGLang logs them, each moved by ``delta`` GiB against the
    pool (delta > 0: more memory before the load, less after)."""
    return pool(
        d,
        version=sglang_version(version),
        free_before_load_bytes=int(Fraction(before) * GiB + delta),
        free_after_load_bytes=int(Fraction(after) * GiB - delta),
        **kw,
    )


def assert_within_log_rounding(
    d: Deployment, version: str, before: str, after: str, tokens: int, **kw: object
) -> None:
    low = logged(d, version, before, after, HALF_CENT_GIB, **kw).max_total_num_tokens
    high = logged(d, version, before, after, -HALF_CENT_GIB, **kw).max_total_num_tokens
    assert low <= tokens <= high, (low, tokens, high)


# ---------------------------------------------------------------- Llama-3.1-8B on one H100


def test_llama31_8b_v056_worked_example() -> None:
    # Section 10: mfs 0.835; rest = 63.41 - 78.43 x 0.165 = 50.469 GiB; x 8192 tokens per GiB.
    r = logged(dep("llama3.1-8b"), "0.5.6", "78.43", "63.41")
    assert r.memory.mem_fraction_static == Fraction("0.835")
    assert r.cell_size == 8 * 128 * 32 * 2 * 2 == 131_072
    assert r.max_total_num_tokens == 413_442
    # min(max(int(413442 / 131072 x 512) = 1615, 2048), 4096) = 2048, and min(413442 // 2, 2048).
    assert (r.req_pool_size, r.max_running_requests) == (2048, 2048)
    assert r.memory.estimated == ()


@pytest.mark.parametrize(
    ("version", "before", "after", "predicted", "in_log"),
    [
        ("0.4.1", "78.81", "63.72", 444_520, 444_500),
        ("0.4.4", "78.59", "63.48", 442_771, 442_750),
    ],
)
def test_llama31_8b_older_releases_match_their_logs(
    version: str, before: str, after: str, predicted: int, in_log: int
) -> None:
    d = dep("llama3.1-8b")
    r = logged(d, version, before, after)
    assert r.memory.mem_fraction_static == Fraction("0.88")  # the v0.4 TP table at TP 1
    assert r.max_total_num_tokens == predicted
    assert_within_log_rounding(d, version, before, after, in_log)
    # Up to v0.4.6 the request pool has one padding request: logs show 2049.
    assert r.max_running_requests == 2049


def test_v047_and_later_drop_the_padding_request() -> None:
    r = logged(dep("llama3.1-8b"), "0.4.7", "78.59", "63.48", mem_fraction_static=Fraction("0.88"))
    assert r.max_running_requests == 2048


# ---------------------------------------------------------------- default mem_fraction_static


def test_v056_defaults_are_0835_on_h100_and_0907_on_h200() -> None:
    # The docs-CI server_args dumps of section 7.4, from the registry's nvidia-smi totals.
    for gpus, share in (("h100", "0.835"), ("h200", "0.907")):
        r = pool(dep("llama3.1-8b", gpus))
        assert r.memory.mem_fraction_static == Fraction(share), gpus
        assert (r.memory.chunked_prefill_size, r.memory.cuda_graph_max_bs) == (8192, 256)


@pytest.mark.parametrize(
    ("version", "mib", "tp", "share"),
    [
        # Section 7.4 table (v0.5.3-v0.5.9).
        ("0.5.6", 81559, 2, "0.834"),
        ("0.5.6", 81559, 4, "0.824"),
        ("0.5.6", 81559, 8, "0.818"),
        ("0.5.6", 81920, 1, "0.836"),
        ("0.5.6", 143771, 8, "0.897"),
        ("0.5.6", 40960, 1, "0.833"),
        ("0.5.6", 46068, 1, "0.851"),
        ("0.5.6", 24564, 1, "0.847"),
        ("0.5.6", 183359, 8, "0.852"),
        ("0.5.6", 16303, 1, "0.771"),
        # Section 7.3 examples (v0.4.7.post1-v0.5.2).
        ("0.5.2", 81559, 1, "0.874"),
        ("0.5.2", 81559, 8, "0.831"),
        ("0.5.2", 143771, 8, "0.886"),
        ("0.4.10", 24564, 1, "0.879"),
        ("0.5.0", 16303, 1, "0.818"),
        # Section 7.1 TP table (v0.4.0-v0.4.5).
        ("0.4.0", 81559, 16, "0.79"),
        ("0.4.5", 81559, 4, "0.85"),
    ],
)
def test_default_share_by_release(version: str, mib: int, tp: int, share: str) -> None:
    ver = sglang_version(version)
    chunked = default_chunked_prefill_size(ver, mib)
    graph = default_cuda_graph_max_bs(ver, mib, tp)
    assert default_mem_fraction_static(ver, mib, tp, 1, chunked, graph) == Fraction(share)


# ---------------------------------------------------------------- v0.5.10-v0.5.18: prefill graph

#: Captured prefill sizes up to 8192 tokens (``_generate_piecewise_cuda_graph_tokens``):
#: 4..32 step 4 (8), 48..256 step 16 (14), 288..512 step 32 (8), 576..1024 step 64 (8),
#: 1280..4096 step 256 (12), 4608..8192 step 512 (8) = 58 sizes, 8 MiB each.
GRAPH_8K_MIB = (8 + 14 + 8 + 8 + 12 + 8) * 8


@pytest.mark.parametrize(
    ("version", "gpus", "model", "share"),
    [
        # H100 TP1: 512 + 8192 x 1.5 + 256 x 2 + 1/8 x 1024 + 464 = 13,904 MiB;
        # round((81,559 - 13,904) / 81,559, 3) = round(0.82952, 3).
        *((ver, "h100", "llama3.1-8b", "0.830") for ver in ("0.5.10", "0.5.14", "0.5.18")),
        # H200 TP1: the same 13,904 MiB; round(129,867 / 143,771, 3) = round(0.90329, 3).
        ("0.5.12", "h200", "llama3.1-8b", "0.903"),
        # H200 TP8: 512 + 12,288 + 512 x 2 + 8/8 x 1024 + 464 = 15,312 MiB;
        # round(128,459 / 143,771, 3) = round(0.89350, 3).
        ("0.5.16", "8xh200", "llama3.1-70b", "0.893"),
        # MLA reserves a flat 1.5 GiB: 512 + 12,288 + 1,024 + 1,024 + 1,536 = 16,384 MiB;
        # round(127,387 / 143,771, 3) = round(0.88604, 3) ...
        ("0.5.10", "8xh200", "deepseek-v3", "0.886"),
        ("0.5.14", "8xh200", "deepseek-v3", "0.886"),
        ("0.5.18", "8xh200", "deepseek-v3", "0.886"),
        # ... except in 0.5.15-0.5.17, whose breakable prefill graph is off for MLA: 14,848 MiB,
        # the v0.5.6 figure 0.897.
        ("0.5.15", "8xh200", "deepseek-v3", "0.897"),
        ("0.5.17", "8xh200", "deepseek-v3", "0.897"),
    ],
)
def test_v0510_default_share_reserves_the_prefill_graph(
    version: str, gpus: str, model: str, share: str
) -> None:
    # The share does not depend on whether the weights then leave room for a pool.
    r = sglang_pool(dep(model, gpus), SGLangOptions(version=sglang_version(version)))
    assert r.memory.mem_fraction_static == Fraction(share)


def test_v0510_prefill_graph_sizes() -> None:
    assert GRAPH_8K_MIB == 464
    ver = sglang_version("0.5.10")
    base = PrefillGraphInputs(chunked_prefill_size=8192, pp=1, mla=False, llama2=False)
    assert len(prefill_graph_capture_sizes(8192)) == 58
    assert prefill_graph_reserved_mib(ver, base) == GRAPH_8K_MIB
    # Llama-2 captures up to 4096: 58 - 8 = 50 sizes.
    assert prefill_graph_reserved_mib(ver, replace(base, llama2=True)) == 50 * 8
    # --max-total-tokens 1000: 8 + 14 + 8 + 7 (576..960) = 37 sizes.
    assert prefill_graph_reserved_mib(ver, replace(base, max_total_tokens=1000)) == 37 * 8
    assert prefill_graph_reserved_mib(ver, replace(base, mla=True)) == 1536
    assert prefill_graph_reserved_mib(sglang_version("0.5.9"), base) == 0


@pytest.mark.parametrize(
    ("version", "share"),
    [
        # An explicit --context-length 2048 caps the graph at 2048 tokens in 0.5.13-0.5.16
        # only: 8 + 14 + 8 + 8 + 4 (1280..2048) = 42 sizes, 336 MiB; 13,440 + 336 = 13,776;
        # round(67,783 / 81,559, 3) = round(0.83109, 3).
        ("0.5.12", "0.830"),
        ("0.5.13", "0.831"),
        ("0.5.16", "0.831"),
        ("0.5.17", "0.830"),
    ],
)
def test_v0513_to_v0516_cap_the_graph_at_the_context_length(version: str, share: str) -> None:
    r = pool(dep("llama3.1-8b"), version=sglang_version(version), context_length=2048)
    assert r.memory.mem_fraction_static == Fraction(share)


@pytest.mark.parametrize(("version", "share"), [("0.5.12", "0.834"), ("0.5.15", "0.828")])
def test_pipeline_parallel_turns_off_only_the_piecewise_graph(version: str, share: str) -> None:
    # 2 x H100, pp 2: 512 + 12,288 + 512 + 2/8 x 1024 = 13,568 MiB, round(67,991 / 81,559, 3);
    # from 0.5.15 the breakable graph stays on: + 464 = 14,032, round(67,527 / 81,559, 3).
    r = pool(dep("llama3.1-8b", "2xh100", pp=2), version=sglang_version(version))
    assert r.memory.mem_fraction_static == Fraction(share)


def test_v0510_small_gpu_has_no_floor_to_absorb_the_graph() -> None:
    # RTX 4090 (24,564 MiB) TP1: 512 + 2048 x 1.5 + 24 x 2 + 128 = 3,760 MiB, + 42 sizes up to
    # 2048 tokens x 8 = 336: 4,096; round(20,468 / 24,564, 3) = round(0.83325, 3) (0.5.9: 0.847).
    ver = sglang_version("0.5.10")
    graph = PrefillGraphInputs(chunked_prefill_size=2048, pp=1, mla=False, llama2=False)
    mib = prefill_graph_reserved_mib(ver, graph)
    assert mib == 336
    assert default_mem_fraction_static(ver, 24564, 1, 1, 2048, 24, mib) == Fraction("0.833")


def test_v0518_llama31_8b_from_the_section_10_memory() -> None:
    # mfs 0.830; rest = 63.41 - 78.43 x 0.17 = 63.41 - 13.3331 = 50.0769 GiB;
    # x 8192 tokens per GiB = 410,229.96 -> 410,229.
    r = logged(dep("llama3.1-8b"), "0.5.18", "78.43", "63.41")
    assert r.memory.prefill_graph_mib == GRAPH_8K_MIB
    assert r.max_total_num_tokens == 410_229
    assert (r.req_pool_size, r.max_running_requests) == (2048, 2048)


def test_v0510_request_pool_comes_from_the_final_capacity() -> None:
    # --max-total-tokens 3000: 0.5.9 sizes the request pool from the profiled 413,442 tokens
    # (2048); 0.5.10 from the capped 3000, at most half of it (1500).
    kw: dict[str, object] = {"mem_fraction_static": Fraction("0.835"), "max_total_tokens": 3000}
    old = logged(dep("llama3.1-8b"), "0.5.9", "78.43", "63.41", **kw)
    new = logged(dep("llama3.1-8b"), "0.5.10", "78.43", "63.41", **kw)
    assert (old.req_pool_size, old.max_running_requests) == (2048, 1500)
    assert (new.req_pool_size, new.max_running_requests) == (1500, 1500)


def test_v0510_has_no_mamba1_model() -> None:
    # The 0.5.10-0.5.23 wheels hold no srt/models/jamba.py (tests/test_sglang_hybrid.py has the
    # mamba2 / GDN / short-conv pools those releases size).
    with pytest.raises(SGLangConfigError, match="no model with Mamba-1 layers"):
        sglang_pool(dep("jamba-v0.1", "2xh100"), SGLangOptions(version=sglang_version("0.5.10")))


def test_v055_raised_the_graph_batch_of_24_gib_gpus() -> None:
    assert default_cuda_graph_max_bs(sglang_version("0.5.4"), 24564, 1) == 16
    assert default_cuda_graph_max_bs(sglang_version("0.5.5"), 24564, 1) == 24


def test_v046_big_gpus_reserve_13_gib() -> None:
    ver = sglang_version("0.4.6")
    assert default_mem_fraction_static(ver, 143771, 1, 1, 0, 0) == Fraction(
        143771 - 13 * 1024, 143771
    )


def test_estimates_are_flagged_and_near_the_log() -> None:
    r = pool(dep("llama3.1-8b"))
    assert r.memory.estimated == ("free_before_load", "free_after_load")
    # Within 0.5% of the 413,442 the section-10 log figures give.
    assert abs(r.max_total_num_tokens - 413_442) / 413_442 < 0.005


# ---------------------------------------------------------------- LFM2 (mamba pool)

# LFM2-700M: 16 layers = 6 GQA (8 KV heads x 64) + 10 short convolutions over a 1536-wide hidden
# state keeping L_cache - 1 = 2 inputs. The registry has no short-conv kind, so the conv layers are
# built here as Mamba layers with no SSM state: conv state d_inner x (d_conv - 1), nothing else.
LFM2 = ModelSpec(
    id="lfm2-700m",
    name="LFM2-700M",
    num_layers=16,
    hidden_size=1536,
    vocab_size=65536,
    tied_embeddings=True,
    mixer_pattern=(
        *(Mamba(d_inner=1536, d_state=0, d_conv=3, dt_rank=1),) * 2,
        FullAttention(kv_heads=8, head_dim_k=64, head_dim_v=64, q_heads=24),
        *(Mamba(d_inner=1536, d_state=0, d_conv=3, dt_rank=1),) * 2,
        FullAttention(kv_heads=8, head_dim_k=64, head_dim_v=64, q_heads=24),
        *(Mamba(d_inner=1536, d_state=0, d_conv=3, dt_rank=1),) * 2,
        FullAttention(kv_heads=8, head_dim_k=64, head_dim_v=64, q_heads=24),
        *(Mamba(d_inner=1536, d_state=0, d_conv=3, dt_rank=1),) * 2,
        FullAttention(kv_heads=8, head_dim_k=64, head_dim_v=64, q_heads=24),
        *(Mamba(d_inner=1536, d_state=0, d_conv=3, dt_rank=1),) * 2,
        FullAttention(kv_heads=8, head_dim_k=64, head_dim_v=64, q_heads=24),
        FullAttention(kv_heads=8, head_dim_k=64, head_dim_v=64, q_heads=24),
    ),
    dense_mlp=DenseMLP(intermediate_size=4608),
    max_context=128_000,
)

def test_lfm2_hybrid_pools_match_the_log() -> None:
    d = deployment(LFM2, GPU_16GB)
    r = logged(d, "0.5.6.post2", "15.33", "13.81")
    assert r.memory.mem_fraction_static == Fraction("0.771")
    assert r.cell_size == 6 * 8 * 64 * 2 * 2 == 12_288
    assert r.cells.state_bytes_per_request == 10 * 1536 * 2 * 2 == 61_440
    assert (r.mamba_cache_size, r.max_total_num_tokens) == (85_261, 473_672)
    assert_within_log_rounding(d, "0.5.6.post2", "15.33", "13.81", 473_854)
    slots = [
        logged(d, "0.5.6.post2", "15.33", "13.81", delta).mamba_cache_size
        for delta in (HALF_CENT_GIB, -HALF_CENT_GIB)
    ]
    assert slots[0] <= 85_292 <= slots[1]  # type: ignore[operator]
    # Section 3: min(max(int(473,672 / 128,000 x 512) = 1,894, 2048), 4096) = 2048; with the
    # radix cache a third of the mamba slots (85,261 // 3 = 28,420) would bound it below that.
    assert r.req_pool_size == 2048


def test_qwen3_next_states_are_charged_at_float32_ssm() -> None:
    r = pool(dep("qwen3-next-80b-a3b", "4xh200"))
    assert r.mamba_cache_size is not None and r.mamba_cache_size > 0
    with pytest.raises(SGLangConfigError, match="0.5.6"):
        sglang_pool(
            dep("qwen3-next-80b-a3b", "4xh200"), SGLangOptions(version=sglang_version("0.5.2"))
        )


# ---------------------------------------------------------------- layer kinds


def test_mla_latent_is_not_split_and_kv_heads_replicate() -> None:
    ds8 = pool(dep("deepseek-v3", "8xh200", weight_dtype="fp8"))
    ds16 = pool(dep("deepseek-v3", "16xh200", tp=16, weight_dtype="fp8"))
    assert ds8.cell_size == ds16.cell_size == 576 * 61 * 2 == 70_272
    # 8 KV heads over 16 ranks: max(1, 8 // 16) = 1 head per rank, as at TP 8:
    # 1 x 128 x 80 layers x 2 (K, V) x 2 bytes.
    for gpus, tp in (("8xh100", 8), ("16xh100", 16)):
        assert pool(dep("llama3-70b", gpus, tp=tp)).cell_size == 1 * 128 * 80 * 2 * 2 == 40_960


def test_sliding_layers_pool_apart_only_when_asked() -> None:
    d = dep("gpt-oss-20b", "h100")
    shared = pool(d, free_before_load_bytes=70 * GiB, free_after_load_bytes=56 * GiB)
    assert shared.swa_tokens is None
    apart = pool(
        d,
        free_before_load_bytes=70 * GiB,
        free_after_load_bytes=56 * GiB,
        swa_full_tokens_ratio=Fraction("0.8"),
    )
    # Section 1 at the default share 0.835 of an H100 (section 7.4): rest = 56 - 70 x 0.165 =
    # 44.45 GiB = 47,727,824,076.8 bytes over a cell of 24 layers x 8 heads x 64 x 2 x 2 = 49,152
    # bytes: N = 971,025 tokens in one pool.
    assert shared.max_total_num_tokens == 971_025
    # Section 5 (v0.5.6 set_num_token_hybrid, 12 sliding and 12 full layers of equal width):
    # full = int(971,025 x 24 / (0.8 x 12 + 12)) = int(1,078,916.7); swa = int(1,078,916 x 0.8).
    assert apart.max_total_num_tokens == 1_078_916
    assert apart.swa_tokens == 863_132


def test_pipeline_stages_size_by_the_widest_stage() -> None:
    r = pool(dep("llama3.1-8b", "2xh100", tp=1, pp=2))
    assert r.cell_size == 8 * 128 * 16 * 2 * 2


def test_a_budget_below_the_weights_is_too_small() -> None:
    result = sglang_pool(dep("llama3-70b", "h100"), SGLangOptions())
    assert isinstance(result, SGLangPoolTooSmall)
    assert "mem-fraction-static" in result.message


# ---------------------------------------------------------------- properties

MODELS = ("llama3.1-8b", "qwen3-8b", "deepseek-v2-lite", "mistral-7b-v0.1", "qwen3-next-80b-a3b")


def tokens(result: SGLangPool | SGLangPoolTooSmall) -> int:
    return result.max_total_num_tokens if isinstance(result, SGLangPool) else 0


@settings(max_examples=60, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    shares=st.tuples(st.integers(1, 999), st.integers(1, 999)).map(sorted),
    before=st.integers(8, 140),
    used=st.integers(0, 100),
)
def test_more_mem_fraction_never_fewer_tokens(
    model: str, shares: list[int], before: int, used: int
) -> None:
    d = dep(model, "4xh200")
    low, high = (
        tokens(
            sglang_pool(
                d,
                SGLangOptions(
                    mem_fraction_static=Fraction(s, 1000),
                    free_before_load_bytes=before * GiB,
                    free_after_load_bytes=before * GiB * (100 - used) // 100,
                ),
            )
        )
        for s in shares
    )
    assert low <= high


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(("llama3.1-8b", "qwen3-8b", "deepseek-v2-lite", "mistral-7b-v0.1")),
    free=st.integers(1 << 20, 70 << 30),  # 2 x free within the H200's 140 GiB
)
def test_fp8_holds_twice_the_tokens_of_bf16(model: str, free: int) -> None:
    opts = SGLangOptions(
        mem_fraction_static=Fraction(1, 2),
        free_before_load_bytes=2 * free,
        free_after_load_bytes=2 * free,
    )
    bf16 = sglang_pool(dep(model, "h200", kv_dtype="bf16"), opts)
    fp8 = sglang_pool(dep(model, "h200", kv_dtype="fp8"), opts)
    assert fp8.cells.cell_size * 2 == bf16.cells.cell_size
    # The same pool: floor(2x) is 2 floor(x) or one more.
    assert tokens(fp8) in (2 * tokens(bf16), 2 * tokens(bf16) + 1)


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(("llama3.1-8b", "llama3-70b", "qwen3-8b", "deepseek-v2-lite")),
    gpu=st.sampled_from(("h100", "h200", "a100-sxm-40gb", "rtx-4090", "b200")),
    tps=st.tuples(st.sampled_from((1, 2, 4)), st.sampled_from((1, 2, 4))).map(sorted),
    measured=st.booleans(),
)
def test_tp_never_shrinks_the_total_pool(
    model: str, gpu: str, tps: list[int], measured: bool
) -> None:
    small, large = tps
    if large % small:
        return
    kw = (
        {
            "mem_fraction_static": Fraction("0.85"),
            # What each GPU has free, the RTX 4090's 23.6 GiB included.
            "free_before_load_bytes": 20 * GiB,
            "free_after_load_bytes": 15 * GiB,
        }
        if measured
        else {}
    )

    def total(tp: int) -> int:
        result = sglang_pool(dep(model, f"{tp}x{gpu}"), SGLangOptions(**kw))  # type: ignore[arg-type]
        return result.kv_pool_bytes * tp if isinstance(result, SGLangPool) else 0

    assert total(small) <= total(large)


# ---------------------------------------------------------------- the command line

SG = ["batch", "llama3.1-8b", "--gpus", "h100", "--engine", "sglang"]
#: The issue's figures (section 10) are v0.5.6's.
SG056 = [*SG, "--sglang-version", "0.5.6"]


def test_cli_json_has_the_issue_keys(runner: CliRunner) -> None:
    result = runner.invoke(
        app, [*SG056, "--free-before-load", "78.43", "--free-after-load", "63.41", "-f", "json"]
    )
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["max_total_num_tokens"] == 413_442
    assert out["max_running_requests"] == 2048
    assert out["mem_fraction_static"] == 0.835
    assert out["cell_size_bytes"] == 131_072
    assert out["kv_pool_bytes"] == 413_442 * 131_072
    assert out["free_before_load_bytes"] == int(Fraction("78.43") * GiB)
    assert out["free_after_load_bytes"] == int(Fraction("63.41") * GiB)
    assert out["estimated"] == []
    assert out["contexts"] == [
        {"context_tokens": 8192, "max_batch": 50, "max_batch_per_replica": 50, "fits": True}
    ]


def test_cli_text_says_what_it_estimated(runner: CliRunner) -> None:
    result = runner.invoke(app, [*SG, "--sglang-version", "0.4.4", "--ctx", "8k"])
    assert result.exit_code == 0, result.stderr
    assert "avail mem=78.43 GiB (estimated)" in result.stdout
    assert "mem_fraction_static=0.88" in result.stdout


def test_sglang_figures_are_gib_and_say_what_its_log_calls_them(runner: CliRunner) -> None:
    # SGLang logs "avail mem=78.43 GB" and a pool in "GB": both are 2^30-byte units.
    result = runner.invoke(app, [*SG, "--ctx", "8k"])
    assert result.exit_code == 0, result.stderr
    pool = next(line for line in result.stdout.splitlines() if line.startswith("KV Cache"))
    out = run_json(runner, *SG, "--ctx", "8k")
    assert pool.endswith(f"pool {out['kv_pool_bytes'] / 2**30:.2f} GiB per rank")
    before = out["free_before_load_bytes"] / 2**30
    assert f"avail mem={before:.2f} GiB" in result.stdout
    assert f'(SGLang\'s log prints these GiB as "GB": avail mem={before:.2f} GB)' in result.stdout
    bare = [line for line in result.stdout.splitlines() if re.search(r"\d GB\b", line)]
    assert bare == [f'(SGLang\'s log prints these GiB as "GB": avail mem={before:.2f} GB)']


def test_more_free_memory_than_the_gpu_has_is_refused(runner: CliRunner) -> None:
    # 200 GiB "free" on an 80 GB H100 gave a 157 GiB pool, exit 0.
    refused(
        runner,
        [*SG, "--free-before-load", "200", "--free-after-load", "190"],
        "--free-before-load: 200.00 GiB is more than the 79.18 GiB of one NVIDIA H100",
    )
    # The nvidia-smi total SGLang sizes its share from is the H100's, not more than it has.
    result = runner.invoke(app, [*SG, "--gpu-memory", "81559MiB"])
    assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        # A request of the whole context is past the longest SGLang runs to the end: new tokens
        # are capped at max_req_len - input - 1, max_req_len = context_len - 1 (scheduler.py
        # init_req_max_new_tokens, tp_worker.py of 0.5.23).
        (["--ctx", "8k,128k"], "max_req_len - 1 = 131,070 (context_len 131,072 - 2)"),
        # Past the token pool: the scheduler refuses it whatever the context length.
        (["--ctx", "500k", "--context-length", "1m"], "the token pool holds"),
    ],
)
def test_a_context_the_pool_cannot_hold_does_not_fit(
    runner: CliRunner, extra: list[str], why: str
) -> None:
    # It printed "Concurrency ...: 0" and exited 0 with fits: true, unlike the other engines.
    result = runner.invoke(app, [*SG, *extra])
    assert result.exit_code == 1, result.stderr
    assert result.stdout.splitlines()[-1].startswith("does not fit: a request of ")
    out = run_json(runner, *SG, *extra, code=1)
    assert out["fits"] is False and why in out["reason"]
    assert out["contexts"][-1] == {
        "context_tokens": out["contexts"][-1]["context_tokens"],
        "max_batch": 0,
        "max_batch_per_replica": 0,
        "fits": False,
    }


def test_cli_free_memory_takes_units_too(runner: CliRunner) -> None:
    a = runner.invoke(
        app, [*SG, "--free-before-load", "78.43", "--free-after-load", "63.41GiB", "-f", "json"]
    )
    b = runner.invoke(
        app, [*SG, "--free-before-load", "78.43GiB", "--free-after-load", "63.41", "-f", "json"]
    )
    assert json.loads(a.stdout) == json.loads(b.stdout)


def test_cli_too_small_exits_1(runner: CliRunner) -> None:
    result = runner.invoke(app, ["batch", "llama3-70b", "--gpus", "h100", "--engine", "sglang"])
    assert result.exit_code == 1
    assert "does not fit: Not enough memory" in result.stdout


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--mem-fraction-static", "0"], "--mem-fraction-static: 0 is not a fraction in (0, 1)"),
        (["--mem-fraction-static", "1"], "--mem-fraction-static: 1 is not a fraction"),
        (["--mem-fraction-static", "1.2"], "--mem-fraction-static: 1.2 is not"),
        (["--free-before-load", "60", "--free-after-load", "63.41"], "--free-after-load: 63.41"),
        (["--sglang-version", "latest"], "--sglang-version: 'latest' is not a release"),
        (["--sglang-version", "0.4.99"], "there is no SGLang 0.4.99"),
        (["--sglang-version", "0.3.6"], "0.3.6 is not supported"),
        (["--sglang-version", "0.6.0"], "0.6.0 is not supported"),
        (
            ["--sglang-version", "0.5.10", "--swa-full-tokens-ratio", "0.8"],
            "has no sliding-window layers beside full ones",
        ),
        (["--kv-dtype", "int4"], "SGLang has no int4 KV cache; use fp32, bf16, fp16, fp8 "),
        (["--gpu-util", "0.9"], "--gpu-util: SGLang's budget"),
        (["--kv-memory", "50GiB"], "--kv-memory: SGLang's budget"),
        (["--block-size", "32"], "--block-size: SGLang pages"),
        (["--max-num-batched-tokens", "4096"], "--chunked-prefill-size"),
        (["--max-model-len", "8k"], "--max-model-len: applies to --engine vllm only"),
        (["--free-after-load", "60", "--weights", "16GB"], "--weights: --free-after-load"),
        (["--mem-fraction-static", "0.8", "--cuda-graph-max-bs", "8"], "--cuda-graph-max-bs: only"),
        (["--sglang-version", "0.5.2", "--chunked-prefill-size", "4096"], "0.5.3 and later"),
        (["--swa-full-tokens-ratio", "0.8"], "has no sliding-window layers"),
        (["--context-length", "8k,16k"], "--context-length: give one length"),
        (
            [
                "--mem-fraction-static",
                "0.8",
                "--free-before-load",
                "70",
                "--free-after-load",
                "60",
                "--gpu-memory",
                "80GB",
            ],
            "--gpu-memory: --mem-fraction-static and both",
        ),
    ],
)
def test_cli_bad_sglang_input_is_one_line_and_exit_2(
    runner: CliRunner, extra: list[str], needle: str
) -> None:
    refused(runner, [*SG, *extra], needle)


@pytest.mark.parametrize(
    "flag",
    [
        ["--sglang-version", "0.5.6"],
        ["--mem-fraction-static", "0.8"],
        ["--page-size", "16"],
        ["--context-length", "32k"],
        ["--chunked-prefill-size", "4096"],
        ["--cuda-graph-max-bs", "8"],
        ["--max-total-tokens", "1000"],
        ["--free-before-load", "70"],
        ["--free-after-load", "60"],
        ["--swa-full-tokens-ratio", "0.8"],
    ],
)
@pytest.mark.parametrize("engine", ["simple", "vllm"])
def test_cli_sglang_options_need_the_sglang_engine(
    runner: CliRunner, flag: list[str], engine: str
) -> None:
    result = runner.invoke(
        app, ["batch", "llama3.1-8b", "--gpus", "h100", "--engine", engine, *flag]
    )
    assert result.exit_code == 2, result.stdout
    assert result.stderr.strip() == f"Error: {flag[0]}: applies to --engine sglang only"


def test_cli_refuses_a_kind_sglang_cannot_pool(runner: CliRunner) -> None:
    result = runner.invoke(app, ["batch", "minimax-m1", "--gpus", "8xh200", "--engine", "sglang"])
    assert result.exit_code == 2
    assert "lightning attention" in result.stderr


@pytest.mark.parametrize("version", ["0.4.0", "0.5.23"])
def test_the_longest_request_is_context_len_minus_2(version: str) -> None:
    # SGLang caps a request's new tokens at max_req_len - input - 1 with max_req_len =
    # min(context_len, pool) - 1 (Scheduler.init_req_max_new_tokens and TpModelWorker in the
    # 0.4.0 and 0.5.23 wheels): prompt and output together reach context_len - 2, not - 1.
    pool = sglang_pool(dep("llama3.1-8b"), SGLangOptions(version=sglang_version(version)))
    assert isinstance(pool, SGLangPool) and pool.context_length == 131072
    assert pool.concurrency(131070) > 0
    assert pool.concurrency(131071) == 0
    assert "context_len 131,072 - 2" in (pool.refusal(131071) or "")
