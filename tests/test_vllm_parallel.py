"""vLLM's serving options beyond tp/pp (kvcalc/engine/vllm_parallel.py): decode context
parallelism, data and expert parallelism, MTP speculative layers, prefix caching's Mamba modes,
--max-num-seqs, and vLLM's own spellings of the budget options.

References: real start-up logs stored in tests/fixtures/vllm_serve/ with their sources (Kimi-K2
TP8 and TP8+DCP8 from vLLM's recipe; a Qwen3.6-27B TP2 prefix-caching run from club-3090 #104),
and the rules of the vllm 0.19.0 wheel worked by hand (page and state bytes written out as
arithmetic from the model's config, never taken from the code under test).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from report_check import refused, run_json
from specs import registry_deployment, registry_model
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine.quant import plain
from kvcalc.engine.units import GiB, dtype
from kvcalc.engine.vllm import (
    VLLMKVCache,
    max_num_seqs_for,
    vllm_budget_per_stage,
    vllm_inputs,
    vllm_kv_cache,
    vllm_kv_cache_for,
)
from kvcalc.engine.vllm_parallel import (
    VLLMParallelError,
    VLLMServing,
    check_dcp,
    mamba_cache_mode,
    mtp_mixers,
    mtp_weight_bytes,
    serving_deployment,
    serving_setup,
)
from kvcalc.engine.vllm_releases import vllm_release
from kvcalc.engine.weights import expert_parallel_tensors, weights_per_gpu

FIXTURES = Path(__file__).parent / "fixtures" / "vllm_serve"
BF16, FP8, FP16 = dtype("bf16"), dtype("fp8"), dtype("fp16")


def log_figures(name: str) -> tuple[list[float], list[int]]:
    """The "Available KV cache memory" GiB and "GPU KV cache size" tokens a log prints."""
    text = (FIXTURES / name).read_text()
    gib = [float(m) for m in re.findall(r"Available KV cache memory: ([\d.]+) GiB", text)]
    tokens = [int(m.replace(",", "")) for m in re.findall(r"GPU KV cache size: ([\d,]+)", text)]
    return gib, tokens


def started(model_id: str, memory: int, **kw: object) -> VLLMKVCache:
    result = vllm_kv_cache(registry_model(model_id), memory, **kw)  # type: ignore[arg-type]
    assert isinstance(result, VLLMKVCache), result
    return result


# ---------------------------------------------------------------- DCP: Kimi-K2 TP8 + DCP8

# One MLA latent of 512 + 64 bf16 values per layer and token, not split by TP: 61 layers x 64
# tokens (FlashMLA's block on H200) x 1,152 bytes a block.
KIMI_BLOCK = 61 * 64 * 576 * 2


def test_kimi_k2_dcp8_multiplies_the_logged_token_line_by_8() -> None:
    gib, tokens = log_figures("kimi-k2-thinking-tp8-dcp8.log")
    assert gib == [46.80, 46.80] and tokens == [715_072, 5_721_088]
    # 715,072 = 11,173 blocks x 64; 5,721,088 / 8 = 715,136 = 11,174 x 64: the DCP run had one
    # block more, within the two decimals the log prints (both memories read 46.80 GiB).
    for blocks, dcp, line in ((11_173, 1, 715_072), (11_174, 8, 5_721_088)):
        memory = blocks * KIMI_BLOCK
        assert round(memory / GiB, 2) == 46.80
        r = started("kimi-k2-thinking", memory, max_model_len=262_144, kv_dtype=BF16, tp=8,
                    block_size=64, dcp=dcp)
        assert r.num_blocks == blocks
        assert r.kv_cache_size_tokens == line
        # Each DCP rank holds cdiv(262,144, dcp) tokens of a request: 4,096 or 512 blocks.
        assert r.blocks_per_request == math.ceil(math.ceil(262_144 / dcp) / 64)


def test_dcp_leaves_the_pages_and_blocks_and_divides_a_requests_blocks() -> None:
    memory = int(46.80 * GiB)
    base = started("kimi-k2-thinking", memory, max_model_len=131_072, kv_dtype=BF16, tp=8,
                   block_size=64)
    dcp = started("kimi-k2-thinking", memory, max_model_len=131_072, kv_dtype=BF16, tp=8,
                  block_size=64, dcp=8)
    assert dcp.layer_specs == base.layer_specs and dcp.num_blocks == base.num_blocks
    assert (base.blocks_per_request, dcp.blocks_per_request) == (2_048, 256)
    assert dcp.max_concurrency == pytest.approx(8 * base.max_concurrency)


@settings(max_examples=40, deadline=None)
@given(
    memory=st.integers(min_value=1 * GiB, max_value=70 * GiB),
    dcp=st.sampled_from([1, 2, 4, 8]),
    length=st.integers(min_value=1_024, max_value=131_072),
)
def test_dcp_multiplies_the_token_line_and_never_lowers_the_concurrency(
    memory: int, dcp: int, length: int
) -> None:
    kw = {"max_model_len": length, "kv_dtype": BF16, "tp": 8, "block_size": 64}
    base = vllm_kv_cache(registry_model("kimi-k2-thinking"), memory, **kw)  # type: ignore[arg-type]
    split = vllm_kv_cache(registry_model("kimi-k2-thinking"), memory, dcp=dcp, **kw)  # type: ignore[arg-type]
    if not isinstance(base, VLLMKVCache):
        return
    assert isinstance(split, VLLMKVCache)
    assert split.kv_cache_size_tokens == dcp * base.kv_cache_size_tokens
    assert split.max_concurrency >= base.max_concurrency


@settings(max_examples=40, deadline=None)
@given(
    memory=st.integers(min_value=1 * GiB, max_value=70 * GiB),
    dcp=st.sampled_from([2, 4, 8]),
    length=st.integers(min_value=1_024, max_value=131_072),
    version=st.sampled_from(["0.21", "0.28", "0.33"]),
)
def test_from_021_the_token_line_counts_dcp_once_through_the_blocks_per_request(
    memory: int, dcp: int, length: int, version: str
) -> None:
    # From 0.21 the line is int(max_concurrency x max_model_len) (kv_cache_utils.py 0.21.0, no
    # "Multiplying" line): the DCP ranks' share of a request is already in its blocks, so the
    # line is the concurrency's, never dcp x the block line.
    kw = {"max_model_len": length, "kv_dtype": BF16, "tp": 8, "block_size": 64,
          "release": vllm_release(version)}
    model = registry_model("kimi-k2-thinking")
    split = vllm_kv_cache(model, memory, dcp=dcp, **kw)  # type: ignore[arg-type]
    old = vllm_kv_cache(model, memory, dcp=dcp, **{**kw, "release": vllm_release("0.19")})  # type: ignore[arg-type]
    if not isinstance(split, VLLMKVCache):
        return
    assert isinstance(old, VLLMKVCache)
    assert split.kv_cache_size_tokens == int(split.max_concurrency * length)
    # Both count each DCP rank's cdiv(L, dcp) tokens: the lines differ by the last block's
    # rounding of a request, at most one block per request of each rank.
    per_request = split.blocks_per_request
    assert split.kv_cache_size_tokens <= old.kv_cache_size_tokens * length / (
        (per_request - 1) * 64 * dcp) + 1


def test_dcp_takes_gqa_only_with_tp_above_the_kv_heads() -> None:
    llama70 = registry_model("llama3-70b")  # 8 KV heads, 64 query heads
    check_dcp(llama70, 16, 2)  # tp 16 > 8 heads, dcp <= 16 // 8, 8 query heads per KV head
    for tp, dcp, words in (
        (8, 2, "tp > the 8 KV heads"),
        (16, 4, "dcp <= tp // KV heads (= 2)"),
        (8, 3, "must divide the tensor-parallel size 8"),
    ):
        with pytest.raises(VLLMParallelError, match=re.escape(words)):
            check_dcp(llama70, tp, dcp)
    # A sliding-window or recurrent cache asserts dcp == 1 in vLLM 0.19.
    for model_id in ("gemma3-27b", "qwen3.6-27b"):
        with pytest.raises(VLLMParallelError, match="only full-attention or MLA"):
            check_dcp(registry_model(model_id), 16, 2, (0, 19, 0))


def test_gqa_dcp_keeps_a_ranks_heads_and_multiplies_the_tokens() -> None:
    # Llama-3-70B at tp 16: max(1, 8 // 16) = 1 KV head of 128 per rank, K and V at bf16:
    # 80 layers x 16 x 1 x 256 x 2 bytes a block; dcp 2 halves a request's blocks.
    block = 80 * 16 * 1 * 256 * 2
    r = started("llama3-70b", 1_000 * block, max_model_len=8_192, kv_dtype=BF16, tp=16, dcp=2)
    assert r.num_blocks == 1_000
    assert r.kv_cache_size_tokens == 2 * 1_000 * 16
    assert r.blocks_per_request == 8_192 // 2 // 16


# ---------------------------------------------------------------- prefix caching: align mode

# Qwen3.6-27B at TP2 (config.json: 16 full-attention layers of 4 KV heads x 256, 48 Gated DeltaNet
# layers of 16 key / 48 value heads of 128, conv kernel 4, the SSM state in float32):
#   conv state  (2 x 16 x 128 + 48 x 128) / 2 ranks = 5,120 channels x (4 - 1) rows x 2 B (fp16)
#   SSM state   48 / 2 = 24 heads x 128 x 128 x 4 B
#   attention   4 / 2 = 2 KV heads x (256 + 256) x 1 B (fp8) = 1,024 B per token
QWEN36_STATE = 5_120 * 3 * 2 + 24 * 128 * 128 * 4
QWEN36_TOKEN = 2 * 512 * 1


def test_qwen36_prefix_caching_align_mode_matches_club_3090_104() -> None:
    gib, tokens = log_figures("club3090-104-qwen3.6-27b-tp2-prefix-caching.log")
    assert gib == [9.84] and tokens == [619_202]
    # The attention block grows to the smallest multiple of 16 holding a state: 16 x
    # ceil(1,603,584 / (16 x 1,024)) = 1,568 tokens; 4 groups of 16 layers (16 attention, 48
    # GDN in 3), a block costs 16 pages of 1,568 x 1,024 B.
    assert QWEN36_STATE == 1_603_584
    block = 16 * math.ceil(QWEN36_STATE / (16 * QWEN36_TOKEN))
    assert block == 1_568
    blocks = int(9.84 * GiB) // (16 * block * QWEN36_TOKEN)
    # align mode: ceil(262,144 / 1,568) = 168 attention pages + 2 state pages x 3 GDN groups.
    per_request = math.ceil(262_144 / block) + 3 * 2
    assert (blocks, per_request) == (411, 174)
    r = started("qwen3.6-27b", int(9.84 * GiB), max_model_len=262_144, kv_dtype=FP8, tp=2,
                conv_state_dtype=FP16, mamba_cache_mode="align")
    assert (r.num_blocks, r.blocks_per_request) == (411, 174)
    assert r.layer_specs[0].block_size == 1_568  # the state's block is the attention block
    assert f"{r.max_concurrency:.2f}" == "2.36"
    # That release logs int(concurrency x max_model_len) (vllm-releases.md section 7).
    assert int(r.max_concurrency * 262_144) == 619_202
    # vLLM 0.19's default for a hybrid (prefix caching off, one state page) does not match.
    off = started("qwen3.6-27b", int(9.84 * GiB), max_model_len=262_144, kv_dtype=FP8, tp=2,
                  conv_state_dtype=FP16)
    assert off.blocks_per_request == 168 + 3 and f"{off.max_concurrency:.2f}" == "2.40"


def test_the_mamba_cache_mode_follows_vllm_019_and_028() -> None:
    dense, gdn, mamba2 = (registry_model(m) for m in ("llama3-8b", "qwen3.6-27b", "nemotron-h-8b"))
    assert mamba_cache_mode(dense, True) == "none"
    assert mamba_cache_mode(gdn, None) == "none"  # 0.19: off for hybrids
    assert mamba_cache_mode(gdn, None, hybrid_default_on=True) == "align"  # 0.28 (#50991)
    assert mamba_cache_mode(gdn, True) == "align"
    assert mamba_cache_mode(gdn, False, hybrid_default_on=True) == "none"
    assert mamba_cache_mode(mamba2, True) == "all"  # supports_mamba_prefix_caching


# ---------------------------------------------------------------- MTP speculative layers


def test_qwen36_mtp_adds_a_full_attention_layer_and_speculative_state() -> None:
    # k = 3: the conv state keeps 3 more rows (conv_kernel - 1 + num_spec) and each state takes
    # 1 + 3 pages; the MTP layer is one more full-attention layer (17 attention, 48 GDN).
    state = 5_120 * (3 + 3) * 2 + 24 * 128 * 128 * 4
    block = 16 * math.ceil(state / (16 * QWEN36_TOKEN))
    assert (state, block) == (1_634_304, 1_600)
    model = registry_model("qwen3.6-27b")
    r = started("qwen3.6-27b", 400 * 17 * block * QWEN36_TOKEN, max_model_len=262_144,
                kv_dtype=FP8, tp=2, conv_state_dtype=FP16, num_speculative_tokens=3,
                draft_mixers=mtp_mixers(model))
    assert len(r.layer_specs) == 65 and r.grouping.group_size == 17  # 48 >= 1.5 x 17
    assert r.num_blocks == 400
    assert r.blocks_per_request == math.ceil(262_144 / block) + 3 * (1 + 3)


def test_deepseek_v4_mtp_is_one_more_window_layer() -> None:
    model = registry_model("deepseek-v4-flash")
    base = started("deepseek-v4-flash", 20 * GiB, max_model_len=65_536, kv_dtype=FP8, tp=2)
    mtp = started("deepseek-v4-flash", 20 * GiB, max_model_len=65_536, kv_dtype=FP8, tp=2,
                  num_speculative_tokens=1, draft_mixers=mtp_mixers(model))
    added = mtp.layer_specs[len(base.layer_specs):]
    # 584 B latents (arch-2026.md section 1) in 64-token blocks, the page rounded up to 576.
    assert [(s.kind, s.window, s.block_size, s.page_bytes) for s in added] == [
        ("sliding", 128, 64, math.ceil(64 * 584 / 576) * 576)
    ]
    assert mtp.max_concurrency <= base.max_concurrency


@settings(max_examples=30, deadline=None)
@given(
    memory=st.integers(min_value=2 * GiB, max_value=40 * GiB),
    length=st.integers(min_value=4_096, max_value=262_144),
    k=st.integers(min_value=1, max_value=4),
)
def test_speculative_draft_layers_never_increase_the_batch(
    memory: int, length: int, k: int
) -> None:
    model = registry_model("qwen3.6-27b")
    kw = {"max_model_len": length, "kv_dtype": FP8, "tp": 2}
    base = vllm_kv_cache(model, memory, **kw)  # type: ignore[arg-type]
    spec = vllm_kv_cache(model, memory, num_speculative_tokens=k,  # type: ignore[arg-type]
                         draft_mixers=mtp_mixers(model), **kw)
    if isinstance(spec, VLLMKVCache):
        assert isinstance(base, VLLMKVCache)
        assert spec.max_concurrency <= base.max_concurrency


def test_mtp_weights_come_out_of_the_last_stage_budget_not_a_given_pool() -> None:
    dep = registry_deployment("qwen3.6-27b", "2xh100", tp=2)
    setup = serving_setup(dep, VLLMServing(num_speculative_tokens=1))
    assert setup.mtp_weight_bytes > 0
    # The release's profiled budget (the newest by default), less the MTP layers' weights.
    budget = vllm_budget_per_stage(dep, vllm_inputs(dep))
    assert setup.budgets == (budget[0] - setup.mtp_weight_bytes,)
    given = registry_deployment("qwen3.6-27b", "2xh100", tp=2, kv_memory_bytes=20 * GiB)
    assert serving_setup(given, VLLMServing(num_speculative_tokens=1)).budgets == (20 * GiB,)


def test_speculative_tokens_are_refused_where_vllm_refuses_them() -> None:
    dep = registry_deployment("llama3-8b", "h100")
    with pytest.raises(VLLMParallelError, match="no multi-token-prediction layers"):
        serving_setup(dep, VLLMServing(num_speculative_tokens=1))


# ---------------------------------------------------------------- DP and EP


@settings(max_examples=20, deadline=None)
@given(dp=st.sampled_from([2, 4, 8]), model_id=st.sampled_from(["llama3-8b", "qwen3-8b"]))
def test_data_parallelism_never_changes_a_dense_replicas_pool(dp: int, model_id: str) -> None:
    dep = registry_deployment(model_id, f"{dp}xh100", tp=1)
    served = serving_deployment(dep, VLLMServing(data_parallel_size=dp))
    assert served.replicas == dp
    assert served.kv_budget_per_stage == dep.kv_budget_per_stage
    assert vllm_kv_cache_for(served, 8_192) == vllm_kv_cache_for(dep, 8_192)


# Qwen3-30B-A3B: 48 MoE layers of 128 experts, each gate/up/down of 768 x 2,048 at bf16.
QWEN3_30B_EXPERTS = 48 * 128 * 3 * 768 * 2_048 * 2


def test_a_data_parallel_group_spreads_the_experts_over_its_ranks() -> None:
    model = registry_model("qwen3-30b-a3b")
    alone = weights_per_gpu(model, BF16, 1, 1)[0].bytes_per_gpu
    shared = weights_per_gpu(model, BF16, 1, 1, moe_ranks=2)[0].bytes_per_gpu
    assert alone - shared == QWEN3_30B_EXPERTS // 2
    # Whole experts over the same 2 ranks: 64 each, the same bytes as half of every expert.
    ep = weights_per_gpu(model, BF16, 1, 1, moe_ranks=2, expert_parallel=True)[0].bytes_per_gpu
    assert ep == shared
    dep = registry_deployment("qwen3-30b-a3b", "2xh100", tp=1)
    served = serving_deployment(dep, VLLMServing(data_parallel_size=2))
    assert dep.weights_per_stage[0] - served.weights_per_stage[0] == QWEN3_30B_EXPERTS // 2


def test_expert_parallelism_holds_whole_experts_rounded_up() -> None:
    moe = registry_model("qwen3-30b-a3b").moe
    assert moe is not None
    tensors = expert_parallel_tensors(moe, 2_048, plain(BF16), 3)
    # ceil(128 / 3) = 43 whole experts on the most loaded rank.
    assert sum(t.params for t in tensors) == 43 * 3 * 768 * 2_048


def test_data_parallel_size_must_be_the_replicas() -> None:
    dep = registry_deployment("llama3-8b", "4xh100", tp=2)
    with pytest.raises(VLLMParallelError, match=r"give \{tp\} 1|give --tp 1"):
        serving_deployment(dep, VLLMServing(data_parallel_size=4))


# ---------------------------------------------------------------- the command line

VLLM = ["batch", "llama3-8b", "--gpus", "h100", "--engine", "vllm", "--max-model-len", "8k"]
NEW_OPTIONS = (
    ("--max-num-seqs", "8"),
    ("--decode-context-parallel-size", "2"),
    ("--dcp", "2"),
    ("--data-parallel-size", "2"),
    ("--enable-expert-parallel",),
    ("--enable-prefix-caching",),
    ("--no-enable-prefix-caching",),
    ("--num-speculative-tokens", "1"),
)


@pytest.mark.parametrize("option", NEW_OPTIONS, ids=lambda o: o[0])
@pytest.mark.parametrize("engine", ["simple", "sglang", "trtllm"])
def test_other_engines_refuse_vllms_options(
    runner: CliRunner, engine: str, option: tuple[str, ...]
) -> None:
    args = ["batch", "llama3-8b", "--gpus", "h100", "--engine", engine, *option]
    refused(runner, args, "applies to --engine vllm only")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--dcp", "0"], "--dcp"),
        (["--dcp", "two"], "--dcp"),
        (["--max-num-seqs", "0"], "--max-num-seqs"),
        (["--num-speculative-tokens", "-1"], "--num-speculative-tokens"),
        (["--data-parallel-size", "0"], "--data-parallel-size"),
        (["--kv-cache-memory", "40G"], "--kv-memory"),
        (["--gpu-memory-utilization", "1.5"], "--gpu-util"),
        (["--dcp", "2"], "--decode-context-parallel-size: 2 must divide the tensor-parallel"),
        (["--data-parallel-size", "2"], "--data-parallel-size 2 x tp 1 x pp 1 is 2 GPUs"),
        (["--num-speculative-tokens", "1"], "carries no multi-token-prediction layers"),
        (["--enable-expert-parallel"], "--enable-expert-parallel: llama3-8b has no routed"),
    ],
)
def test_bad_vllm_options_are_one_line_exit_2(
    runner: CliRunner, args: list[str], needle: str
) -> None:
    refused(runner, [*VLLM, *args], needle)


def test_vllms_spellings_of_the_budget_options(runner: CliRunner) -> None:
    ours = run_json(runner, *VLLM, "--kv-memory", "20GiB")
    for spelling in ("--kv-cache-memory",):
        theirs = run_json(runner, *VLLM, spelling, "20GiB")
        # Llama-3-8B: 32 layers x 64 tokens (0.34's default block) x 8 KV heads x (128 + 128)
        # x 2 bytes a block.
        assert theirs["num_blocks"] == ours["num_blocks"] == 20 * GiB // (32 * 64 * 8 * 256 * 2)
        assert theirs["kv_cache_memory_bytes"] == 20 * GiB
        assert theirs["gpu_memory_utilization"] is None
    assert ours["kv_cache_memory_bytes"] == 20 * GiB
    util = run_json(runner, *VLLM, "--gpu-memory-utilization", "0.8")
    assert util["gpu_memory_utilization"] == 0.8
    assert util["num_blocks"] == run_json(runner, *VLLM, "--gpu-util", "0.8")["num_blocks"]


def test_the_json_reports_the_inputs_vllm_used(runner: CliRunner) -> None:
    out = run_json(runner, *VLLM)
    assert {k: out[k] for k in (
        "gpu_memory_utilization", "max_num_batched_tokens", "max_num_seqs",
        "decode_context_parallel_size", "data_parallel_size", "enable_expert_parallel",
        "enable_prefix_caching", "mamba_cache_mode", "num_speculative_tokens", "draft_layers",
    )} == {
        # vllm serve's max_num_seqs on an 80 GB H100 (>= 70 GiB, not an A100): 1024; the
        # newest release's default utilization, 1.0 under its extensible KV cache
        # (vllm/config/cache.py of 0.34.0; 0.92 from 0.20 to 0.33).
        "gpu_memory_utilization": 1.0, "max_num_batched_tokens": 8_192, "max_num_seqs": 1_024,
        "decode_context_parallel_size": 1, "data_parallel_size": None,
        "enable_expert_parallel": False, "enable_prefix_caching": True,
        "mamba_cache_mode": None, "num_speculative_tokens": 0, "draft_layers": 0,
    }
    kimi = run_json(runner, "batch", "kimi-k2-thinking", "--gpus", "8xh200", "--engine", "vllm",
                    "--max-model-len", "128k", "--block-size", "64", "--dcp", "8",
                    "--kv-cache-memory", "46.80GiB")
    assert kimi["decode_context_parallel_size"] == 8
    # The newest release's line, max_concurrency x L: blocks / 256 per request x 131,072 =
    # blocks x 512, what 0.19's block line x 8 gives when L / dcp is a whole number of blocks.
    assert kimi["kv_cache_tokens"] == 8 * (int(46.80 * GiB) // KIMI_BLOCK) * 64


def test_max_num_seqs_caps_the_batch_not_the_pool(runner: CliRunner) -> None:
    free = run_json(runner, *VLLM)
    capped = run_json(runner, *VLLM, "--max-num-seqs", "8")
    assert free["contexts"][0]["max_batch"] > 8
    assert capped["contexts"][0]["max_batch"] == 8 and capped["max_num_seqs"] == 8
    # Fewer sampled rows in the profile: a smaller activation peak, more blocks.
    assert capped["num_blocks"] >= free["num_blocks"]


def test_prefix_caching_changes_a_hybrids_pool_on_the_command_line(runner: CliRunner) -> None:
    args = ["batch", "qwen3.6-27b", "--gpus", "2xh100", "--tp", "2", "--engine", "vllm",
            "--max-model-len", "256k", "--kv-dtype", "fp8"]
    # vLLM 0.19 leaves a hybrid's prefix caching off; 0.28+ (the default release) turns it on
    # in align mode (#50991), as --enable-prefix-caching does.
    off = run_json(runner, *args, "--vllm-version", "0.19")
    on = run_json(runner, *args, "--vllm-version", "0.19", "--enable-prefix-caching")
    assert (off["mamba_cache_mode"], on["mamba_cache_mode"]) == ("none", "align")
    assert (off["enable_prefix_caching"], on["enable_prefix_caching"]) == (False, True)
    assert on["contexts"][0]["blocks_per_request"] > off["contexts"][0]["blocks_per_request"]
    newest = run_json(runner, *args)
    assert (newest["mamba_cache_mode"], newest["enable_prefix_caching"]) == ("align", True)
    # (0.34's attention block is aligned to its default 64, not 0.19's 16: compared with the
    # newest release's own --enable-prefix-caching.)
    given = run_json(runner, *args, "--enable-prefix-caching")
    assert newest["contexts"][0]["blocks_per_request"] == given["contexts"][0]["blocks_per_request"]
    dropped = run_json(runner, *args, "--no-enable-prefix-caching")
    assert dropped["mamba_cache_mode"] == "none"
    # Mamba2 hybrids: "all" mode in 0.19 (refused, not modelled); from 0.28 prefix caching
    # turns the default "none" into "align" for them too (MambaModelConfig, 0.28.0), which is
    # also their default there.
    nemotron = ["batch", "nemotron-h-8b", "--gpus", "h100", "--engine", "vllm",
                "--max-model-len", "8k"]
    refused(runner, [*nemotron, "--enable-prefix-caching", "--vllm-version", "0.19"],
            "'all' mode")
    for version in ("0.28", "0.34"):
        given = run_json(runner, *nemotron, "--enable-prefix-caching", "--vllm-version", version)
        default = run_json(runner, *nemotron, "--vllm-version", version)
        assert given["mamba_cache_mode"] == default["mamba_cache_mode"] == "align"
        assert given["contexts"][0]["num_blocks"] == default["contexts"][0]["num_blocks"]


def test_deepseek_v3_mtp_weights_against_its_readme() -> None:
    text = (FIXTURES / "deepseek-v3-readme-weights-mtp.txt").read_text()
    unique = float(re.search(r"([\d.]+)B unique parameters", text).group(1)) * 1e9  # type: ignore[union-attr]
    model = registry_model("deepseek-v3")
    # At 2 bytes a parameter the bytes are twice the parameters; vLLM keeps the layer's own
    # shared_head (vocab x hidden), which the README counts as the shared output head.
    params = mtp_weight_bytes(model, BF16, 1) / 2 - model.vocab_size * model.hidden_size
    assert abs(params / unique - 1) < 0.02
    # Split by tp 8, the routed experts and the head by rows: about an eighth on each GPU.
    assert mtp_weight_bytes(model, BF16, 8) < mtp_weight_bytes(model, BF16, 1) / 7


def test_vllm_serves_default_max_num_seqs_follows_the_device(runner: CliRunner) -> None:
    # get_batch_defaults (vllm 0.19 arg_utils.py): >= 70 GiB and no "a100" in the name: 1024;
    # GB10 (DGX Spark, 121.69 GiB) stays on the small tier: NVML's memory query fails there up
    # to 0.32 (platforms/cuda.py, no fallback; the 0.13 Spark log of tests/fixtures/vllm_logs
    # runs 2048 tokens and 35 FULL graphs), is_gb10 from 0.33 (arg_utils.py 0.33.0).
    for gpu, version, seqs in (("h100", "0.19", 1_024), ("a100-sxm-80gb", "0.19", 256),
                               ("l40s", "0.19", 256), ("dgx-spark", "0.13", 256),
                               ("dgx-spark", "0.32", 256), ("dgx-spark", "0.33", 256)):
        dep = registry_deployment("llama3-8b", gpu)
        assert max_num_seqs_for(dep, vllm_release(version)) == seqs, (gpu, version)
    # Llama-3-8B at 1k holds more than 256 requests on an 80 GB A100; vLLM runs 256.
    out = run_json(runner, "batch", "llama3-8b", "--gpus", "a100-sxm-80gb", "--engine", "vllm",
                   "--max-model-len", "1k")
    assert out["max_num_seqs"] == 256
    assert out["max_concurrency"] > 256 and out["contexts"][0]["max_batch_per_replica"] == 256


def test_a_release_that_caches_hybrid_prefixes_by_default_takes_align_mode() -> None:
    # One rule: the release row's mamba_align (0.28+, #50991) is the default prefix caching.
    dep = registry_deployment("qwen3.6-27b", "2xh100", tp=2)
    for version, mode in (("0.19", "none"), ("0.27", "none"), ("0.28", "align"), ("0.33", "align")):
        assert serving_setup(dep, VLLMServing(vllm_version=version)).mamba_cache_mode == mode
    off = VLLMServing(enable_prefix_caching=False, vllm_version="0.28")
    assert serving_setup(dep, off).mamba_cache_mode == "none"


def test_deepseek_v4_dp8_against_tp8_on_b200_as_recipes_762_logs(runner: CliRunner) -> None:
    text = (FIXTURES / "dsv4-flash-b200-dp8-vs-tp8.txt").read_text()
    dp_total, tp = (float(x) for x in re.search(r"\(([\d.]+)x vs ([\d.]+)x", text).groups())  # type: ignore[union-attr]
    args = ["batch", "deepseek-v4-flash", "--gpus", "8xb200", "--engine", "vllm",
            "--max-model-len", "1m", "--gpu-util", "0.95", "--kv-dtype", "fp8",
            # The run's release and step (vllm#51454): 0.26+ reserve two 8,192-token batches per
            # window and 0.28+ default to 16,384 on a B200, which this log predates.
            "--vllm-version", "0.25", "--max-num-batched-tokens", "8192",
            "--max-num-seqs", "256", "--enable-expert-parallel"]
    tp8 = run_json(runner, *args, "--tp", "8")
    dp8 = run_json(runner, *args, "--tp", "1", "--data-parallel-size", "8")
    assert dp8["replicas"] == 8 and dp8["data_parallel_size"] == 8
    # Eight pools, each a little smaller than TP8's (the attention weights are whole on every
    # GPU, the experts still split eight ways): 7.7x the capacity, within 2%.
    ours = 8 * dp8["max_concurrency"] / tp8["max_concurrency"]
    assert dp8["max_concurrency"] < tp8["max_concurrency"]
    assert abs(ours / (dp_total / tp) - 1) < 0.02
    # The pools themselves are within 6% of the log's (3.3% high at TP8, under 0.25's rules).
    assert abs(tp8["max_concurrency"] / tp - 1) < 0.06
    assert abs(8 * dp8["max_concurrency"] / dp_total - 1) < 0.06
    # Without EP the DP8 group still spreads the experts over its 8 ranks (FusedMoE flattens
    # tp across dp), so the pool is the same to within the experts' split by rows.
    rows = run_json(runner, *args[:-1], "--tp", "1", "--data-parallel-size", "8")
    assert abs(rows["max_concurrency"] / dp8["max_concurrency"] - 1) < 0.01


def test_one_max_num_seqs_caps_the_batch_and_sizes_the_cuda_graphs(runner: CliRunner) -> None:
    # A DGX Spark (GB10, 121.69 GiB) gets 256 sequences from vllm serve in every release (NVML's
    # memory query fails there up to 0.32, is_gb10 from 0.33). The same figure caps the batch
    # and sets the CUDA graphs captured: at 256, 51 PIECEWISE sizes (to 512) and 35 FULL (to
    # 256) as LMCache #3430 logs; at 1,024 given, both grids run to 512: 51 + 51.
    from kvcalc.engine.vllm import CUDAGRAPH_BYTES_PER_GRAPH_LAYER_V2

    per_graph = 28 * CUDAGRAPH_BYTES_PER_GRAPH_LAYER_V2  # Qwen3-0.6B's 28 layers, dense: MRv2

    args = ["batch", "qwen3-0.6b", "--gpus", "dgx-spark", "--engine", "vllm", "--max-model-len",
            "512", "--vllm-version", "0.32", "--gpu-util", "0.85"]  # the share GB10s start at
    default, wide = run_json(runner, *args), run_json(runner, *args, "--max-num-seqs", "1024")
    assert (default["max_num_seqs"], wide["max_num_seqs"]) == (256, 1_024)
    assert wide["cudagraph_memory_bytes"] == (51 + 51) * per_graph
    assert default["cudagraph_memory_bytes"] == (51 + 35) * per_graph
    assert default["max_concurrency"] > 1_024
    assert wide["contexts"][0]["max_batch_per_replica"] == 1_024
    assert default["contexts"][0]["max_batch_per_replica"] == 256


def test_the_dcp_line_is_in_the_words_of_the_release() -> None:
    # The Kimi-K2 recipe's DCP start-up (kv_cache_utils.py:1224: 0.11.1's line numbers) names
    # the dcp size alone; from 0.12.0 the line names prefill context parallelism beside it.
    logged = next(line.split("] ", 1)[1] for line in
                  (FIXTURES / "kimi-k2-thinking-tp8-dcp8.log").read_text().splitlines()
                  if "Multiplying" in line)
    runner = CliRunner()
    args = ["batch", "kimi-k2-thinking", "--gpus", "8xh200", "--engine", "vllm", "--dcp", "8",
            "--max-model-len", "256k", "--kv-cache-memory", "46.80GiB"]
    printed = runner.invoke(app, [*args, "--vllm-version", "0.11.1"]).stdout
    assert logged in printed.splitlines()
    newer = runner.invoke(app, [*args, "--vllm-version", "0.12"]).stdout
    assert logged not in newer and "(pcp_world_size 1 * dcp_world_size 8)." in newer


def test_dcp_on_a_hybrid_with_states_says_whether_vllm_or_kvcalc_stops_it(
    runner: CliRunner,
) -> None:
    # Up to 0.25 vLLM asserts "DCP not support hybrid attn now"; from 0.26 it runs it (the
    # attention sharded, the GDN states replicated), which kvcalc does not model: it says so.
    args = ["batch", "qwen3.5-27b", "--gpus", "8xh100", "--engine", "vllm", "--dcp", "2",
            "--ctx", "8k"]
    refused(runner, [*args, "--vllm-version", "0.25"], "splits only full-attention or MLA")
    refused(runner, [*args, "--vllm-version", "0.26"], "kvcalc does not model that pool")


@pytest.mark.parametrize(
    ("model", "version", "needle"),
    [
        ("kimi-k2-thinking", "0.10.1", "came in 0.10.2"),
        ("llama3-70b", "0.11.0", "only MLA caches"),
    ],
)
def test_dcp_is_refused_where_the_release_cannot_run_it(
    runner: CliRunner, model: str, version: str, needle: str
) -> None:
    # No --decode-context-parallel-size before 0.10.2 (ParallelConfig); up to 0.11.0 only the
    # MLA backends return the softmax LSE a DCP decode merges.
    refused(runner, ["batch", model, "--gpus", "16xh100", "--tp", "16", "--engine", "vllm",
                     "--dcp", "2", "--vllm-version", version, "--ctx", "8k"],
            "--decode-context-parallel-size", needle, "--vllm-version")
    # The same set-up starts under the release that added it.
    newer = run_json(runner, "batch", model, "--gpus", "16xh100", "--tp", "16", "--engine",
                     "vllm", "--dcp", "2", "--vllm-version", "0.11.1", "--ctx", "8k")
    assert newer["decode_context_parallel_size"] == 2
