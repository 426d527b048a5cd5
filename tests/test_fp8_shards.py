"""The tensor-parallel shards vLLM and SGLang cannot load from a block-FP8 checkpoint
(kvcalc/engine/fp8_shards.py).

SGLang's references: sglang #10852 (Qwen3-Next-80B-A3B-FP8 at TP 8: "The output_size of gate's
and up's weight = 64 is not divisible by weight quantization block_n = 128") and QwenLM/Qwen3
#1485 (sglang 0.4.6.post5: Qwen3-30B-A3B-FP8 and Qwen3-235B-A22B-FP8 run at TP 1 and 2 only).

References: public reports of the failures (vllm PR #52915: Qwen3.6-35B-A3B-FP8 at TP 8 stops on
"Weight input_size_per_partition = 64 is not divisible by weight quantization block_k = 128", its
512-row shared expert; vllm PR #44763 and the vLLM 0.10-0.28 fp8.py raise for Qwen3-30B-A3B's
768 expert rows at TP 4, 192 a rank) and real start-up logs of block-FP8 checkpoints that loaded,
which the rule must let through: tests/fixtures/vllm_logs/v0102-l40s-qwen3-235b-fp8-tp8.log (TP 8
with --enable-expert-parallel, its non-default args), v027-rtxpro6000-qwen3-235b-fp8-tp4.log and
v019-4xh100-minimax-m2.5-fp8-tp4.log (TP 4).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from report_check import refused, run_json
from typer.testing import CliRunner

from kvcalc.api import load_model
from kvcalc.engine.deployment import Deployment, deployment
from kvcalc.engine.fp8_shards import vllm_shard_refusal
from kvcalc.engine.vllm_parallel import VLLMServing, serving_deployment
from kvcalc.engine.vllm_releases import parse_version
from kvcalc.registry.gpus import parse_gpu_set


def fp8_deployment(model: str, gpus: str, tp: int, ep: bool = False) -> Deployment:
    dep = deployment(load_model(model, None, None, None), parse_gpu_set(gpus), tp=tp)
    return serving_deployment(dep, VLLMServing(enable_expert_parallel=ep))


def refusal_at(model: str, gpus: str, tp: int, version: str, ep: bool = False) -> str | None:
    return vllm_shard_refusal(fp8_deployment(model, gpus, tp, ep), parse_version(version))


@pytest.mark.parametrize(("model", "gpus", "tp", "version", "ep"), [
    # v0102-l40s-qwen3-235b-fp8-tp8.log: 'tensor_parallel_size': 8, 'enable_expert_parallel'
    ("qwen3-235b-a22b-2507-fp8", "8xl40s", 8, "0.10.2", True),
    ("qwen3-235b-a22b-2507-fp8", "4xrtx-pro-6000", 4, "0.27.1", False),
    ("minimax-m2.5", "4xh100", 4, "0.19.0", False),
])
def test_logged_starts_load(model: str, gpus: str, tp: int, version: str, ep: bool) -> None:
    assert refusal_at(model, gpus, tp, version, ep) is None


def test_qwen36_shared_expert_at_tp8_is_refused_in_the_newest_release() -> None:
    # vllm PR #52915 (open, 2026-08): 512 shared-expert rows / 8 = 64 inputs of down_proj.
    why = refusal_at("qwen3.6-35b-a3b-fp8", "8xh100", 8, "0.34.0")
    assert why is not None and "shared experts take 64 inputs" in why
    assert "{tp} 4" in why
    assert refusal_at("qwen3.6-35b-a3b-fp8", "8xh100", 4, "0.34.0") is None


def test_expert_rows_refused_until_the_scales_are_refined() -> None:
    # 768 rows / 4 = 192: 0.28.0's Fp8MoEMethod raises; 0.29.0 refines to gcd(128, 192, 2048)
    # = 64-wide tiles.
    why = refusal_at("qwen3-30b-a3b-fp8", "4xh100", 4, "0.28.0")
    assert why is not None and "192 a rank" in why
    assert "{enable_expert_parallel}" in why and "{vllm_version} 0.29" in why
    assert refusal_at("qwen3-30b-a3b-fp8", "4xh100", 4, "0.29.0") is None
    assert refusal_at("qwen3-30b-a3b-fp8", "4xh100", 4, "0.28.0", ep=True) is None
    # 768 / 16 = 48: gcd 16 is finer than the refinement's 32, refused in every release.
    assert refusal_at("qwen3-30b-a3b-fp8", "16xh100", 16, "0.34.0") is not None


def test_dense_rows_refused_in_every_release() -> None:
    # DeepSeek-V3's three dense layers: 18,432 rows / 32 = 576 inputs a rank of down_proj;
    # up to 0.13 vLLM stops first on gate_up_proj, whose gate and up partitions are 576 rows
    # each (validate_fp8_block_shape checks every output partition of a merged layer).
    for version in ("0.14.0", "0.28.0", "0.34.0"):
        why = refusal_at("deepseek-v3", "32xh100", 32, version)
        assert why is not None and "MLP projections take 576 inputs" in why
    why = refusal_at("deepseek-v3", "32xh100", 32, "0.10.2")
    assert why is not None and "MLP projections give 576 outputs" in why
    assert refusal_at("deepseek-v3", "16xh100", 16, "0.19.0") is None


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["qwen3-235b-a22b-2507", "qwen3-30b-a3b", "qwen3-32b", "qwen3.6-35b-a3b"]),
       st.sampled_from([1, 2, 4, 8]),
       st.sampled_from(["0.10.2", "0.13.0", "0.19.0", "0.28.0", "0.29.0", "0.34.0"]))
def test_bf16_and_tp1_always_load(model: str, tp: int, version: str) -> None:
    """Only block-scaled weights have tiles to split; one rank splits nothing."""
    assert refusal_at(model, f"{tp}xh100", tp, version) is None
    assert refusal_at(f"{model}-fp8", "h100", 1, version) is None


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["qwen3-235b-a22b-2507-fp8", "qwen3-30b-a3b-fp8", "minimax-m2.5"]),
       st.sampled_from([2, 4, 8, 16]),
       st.sampled_from(["0.10.2", "0.19.0", "0.28.0", "0.29.0", "0.34.0"]))
def test_expert_parallel_never_refused_for_the_experts(model: str, tp: int, version: str) -> None:
    """Whole experts a rank: no expert matrix is split (these models' other layers split whole
    heads at these sizes)."""
    assert refusal_at(model, f"{tp}xh100", tp, version, ep=True) is None


def test_cli_refuses_in_one_line(runner: CliRunner) -> None:
    for command in ("batch", "decode"):
        refused(runner, [command, "qwen3-235b-a22b-2507-fp8", "--gpus", "8xl40s", "--engine",
                         "vllm", "--vllm-version", "0.10.2", "--ctx", "8k"],
                "--tp: vLLM 0.10.2 cannot load", "192 a rank", "--tp 4",
                "--enable-expert-parallel", "--vllm-version 0.29")


def test_plan_passes_over_a_layout_vllm_cannot_load(runner: CliRunner) -> None:
    """On 8 RTX 4090s tp 4 is plan's fastest layout once 0.29 loads it; 0.28 cannot (192 expert
    rows a rank), so plan keeps a layout that loads."""
    def layouts(version: str) -> list[tuple[int, int]]:
        doc = run_json(runner, "plan", "qwen3-30b-a3b-fp8", "--gpus", "rtx-4090", "--engine",
                       "vllm", "--vllm-version", version, "--users", "64", "--ctx", "16k",
                       "--max-tpot", "60ms")
        return [(layout["tp"], layout["pp"]) for layout in doc["layouts"]]

    assert layouts("0.29") == [(4, 1)]
    chosen = layouts("0.28")
    assert chosen and all(tp != 4 for tp, _ in chosen)


# ------------------------------------------------------------------------------- SGLang
# sglang/srt/layers/quantization/fp8.py of 0.4.3, 0.5.1 and 0.5.23: every output partition of
# a split or merged column layer checked (as vLLM up to 0.13), the experts never refined.


def sglang_refusal(model: str, gpus: str, tp: int, version: str, *extra: str) -> str | None:
    from kvcalc.engine.fp8_shards import sglang_rules, sglang_shard_refusal

    dep = deployment(load_model(model, None, None, None), parse_gpu_set(gpus), tp=tp)
    dp = int(extra[1]) if extra[:1] == ("--dp-size",) else 1
    return sglang_shard_refusal(dep, sglang_rules(version, dp))


def test_sglang_qwen3_next_at_tp8_is_refused() -> None:
    # sglang #10852 (2025-09-24): Qwen3-Next-80B-A3B-Instruct-FP8 at tp 8, "The output_size of
    # gate's and up's weight = 64 is not divisible by weight quantization block_n = 128"
    # (512 expert and shared-expert rows / 8); the thread's advice is a smaller tp.
    for version in ("0.5.2", "0.5.23"):
        why = sglang_refusal("qwen3-next-80b-a3b-fp8", "8xh100", 8, version)
        assert why is not None and "64 outputs a rank" in why and "{tp} 4" in why
        assert sglang_refusal("qwen3-next-80b-a3b-fp8", "8xh100", 4, version) is None


def test_sglang_never_refines_the_expert_tiles() -> None:
    # QwenLM/Qwen3 #1485 (sglang 0.4.6.post5): Qwen3-30B-A3B-FP8 and Qwen3-235B-A22B-FP8 run at
    # tp 1 and 2, not at 4 or 8 ("只能跑TP1和TP2"): 768 rows / 4 = 192, 1,536 / 8 = 192.
    # vLLM 0.29 refines the 30B's 192-row shards to 64-wide tiles; SGLang 0.5.23 still refuses.
    for version in ("0.4.6.post5", "0.5.23"):
        why = sglang_refusal("qwen3-30b-a3b-fp8", "4xh100", 4, version)
        assert why is not None and "192 a rank" in why and "{tp} 2" in why
        assert sglang_refusal("qwen3-30b-a3b-fp8", "4xh100", 2, version) is None
        assert sglang_refusal("qwen3-235b-a22b-2507-fp8", "8xh100", 8, version) is not None
    assert refusal_at("qwen3-30b-a3b-fp8", "4xh100", 4, "0.29.0") is None


def test_sglang_dp_attention_splits_the_attention_over_its_own_ranks() -> None:
    # DeepSeek-V3 at tp 8 with DP attention over 8 ranks (the deployment SGLang's DeepSeek docs
    # run): attention whole on every rank, the dense MLP 18,432 / 8 = 2,304 rows and the experts
    # 2,048 / 8 = 256 a rank, all whole tiles; at tp 32 the dense MLP's 576 are not.
    assert sglang_refusal("deepseek-v3", "8xh200", 8, "0.5.23", "--dp-size", "8") is None
    assert sglang_refusal("deepseek-v3", "8xh200", 8, "0.5.23") is None
    why = sglang_refusal("deepseek-v3", "32xh100", 32, "0.5.23", "--dp-size", "32")
    assert why is not None and "576" in why


def test_sglang_cli_refuses_in_one_line(runner: CliRunner) -> None:
    refused(runner, ["batch", "qwen3-next-80b-a3b-fp8", "--gpus", "8xh100", "--engine", "sglang",
                     "--tp", "8", "--ctx", "32k"],
            "--tp: SGLang 0.5.23 cannot load", "64 outputs a rank", "give --tp 4")


def test_sglang_ep_size_loads_what_the_expert_rows_refuse(runner: CliRunner) -> None:
    # sglang PR #12129 launches MiniMax-M2 with --tp-size 8 --ep-size 8; without EP, tp 8
    # stops on the experts (sglang #23265). The refusal offers both fixes.
    args = ["batch", "minimax-m2.7", "--gpus", "8xh100", "--engine", "sglang", "--ctx", "32k"]
    refused(runner, args, "192 a rank", "give --tp 4 or --ep-size 8")
    doc = run_json(runner, *args, "--ep-size", "8")
    assert (doc["tp"], doc["expert_parallel_ranks"]) == (8, 8)
    assert "expert_parallel_ranks" not in run_json(runner, *args, "--tp", "4")
    # Qwen3-Next's shared expert stays split over tp under EP (sglang #10852's diagnosis), so
    # EP is no fix there: the refusal names the tp alone.
    refused(runner, ["batch", "qwen3-next-80b-a3b-fp8", "--gpus", "8xh100", "--engine", "sglang",
                     "--tp", "8", "--ep-size", "8", "--ctx", "32k"],
            "shared experts give 64 outputs", "give --tp 4")


def test_sglang_ep_size_holds_the_same_experts_where_rows_split_whole(runner: CliRunner) -> None:
    # At tp 4 MiniMax's 1,536 rows split into whole 384-row tiles and its 256 experts into 64
    # a rank: the same routed weights either way (block scales whole on both sides), so the
    # free memory after load matches to the MiB and so does the pool.
    args = ["batch", "minimax-m2.7", "--gpus", "4xh200", "--engine", "sglang", "--ctx", "32k"]
    split, whole = run_json(runner, *args), run_json(runner, *args, "--ep-size", "4")
    assert abs(split["free_after_load_bytes"] - whole["free_after_load_bytes"]) < 2**20
    assert split["cell_size_bytes"] == whole["cell_size_bytes"]


@pytest.mark.parametrize(("extra", "needle"), [
    (["llama3.1-8b", "--ep-size", "8"], "--ep-size: llama3.1-8b has no routed experts"),
    (["minimax-m2.7", "--ep-size", "4"], "--ep-size 4 is not --tp 8"),
    (["minimax-m2.7", "--ep-size", "0"], "--ep-size"),
])
def test_sglang_ep_size_refusals(runner: CliRunner, extra: list[str], needle: str) -> None:
    refused(runner, ["batch", extra[0], "--gpus", "8xh100", "--engine", "sglang", "--ctx", "8k",
                     *extra[1:]], needle)
