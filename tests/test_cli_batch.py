"""`kvcalc batch` and `kvcalc decode` through the CLI: the seed's worked example, vLLM mode, the
registry-wide table, and every error path."""

from __future__ import annotations

import json

import pytest
from report_check import SEED, run_json
from typer.testing import CliRunner

from kvcalc.cli.app import app


def test_seed_capacity_json(runner: CliRunner) -> None:
    out = run_json(runner, "batch", "llama3-70b", *SEED, "--ctx", "8k,128k")
    for key in (
        "model",
        "gpus",
        "tp",
        "pp",
        "weights_bytes_per_gpu",
        "kv_budget_bytes_per_gpu",
        "kv_tokens_capacity",
        "max_context_at_batch_1",
    ):
        assert key in out
    assert (out["tp"], out["pp"], out["fits"]) == (8, 1, True)
    assert out["weights_bytes_per_gpu"] == 17_500_000_000
    assert out["kv_budget_bytes_per_gpu"] * 8 == 436_000_000_000
    assert [c["max_batch"] for c in out["contexts"]] == [162, 10]
    # 54.5 GB per GPU over 40,960 bytes per token per GPU (one of the 8 KV heads) is
    # 1,330,566.4 tokens: 83,160 whole 16-token blocks.
    assert out["kv_tokens_capacity"] == out["max_context_at_batch_1"] == 83_160 * 16


def test_seed_capacity_table_has_bars(runner: CliRunner) -> None:
    result = runner.invoke(app, ["batch", "llama3-70b", *SEED, "--ctx", "8k,128k"])
    assert result.exit_code == 0
    assert "406.06 GiB (436.00 GB)" in result.stdout
    assert "█" * 40 in result.stdout


def test_seed_decode(runner: CliRunner) -> None:
    out = run_json(runner, "decode", "llama3-70b", *SEED, "--ctx", "8k")["contexts"][0]
    assert out["batch"] == 162  # default batch: what fits
    assert out["weight_read_seconds"] * 1000 == pytest.approx(5.2, abs=0.1)
    assert out["kv_read_seconds"] * 1000 == pytest.approx(16, abs=0.3)
    assert out["bound"] == "memory"
    # Seed 004: 162 sequences of 8K at 320 KiB per token, read at 8 x 3.35 TB/s.
    assert out["kv_bytes_read"] == 162 * 8192 * 327_680
    assert out["kv_read_seconds"] == pytest.approx(162 * 8192 * 327_680 / (8 * 3.35e12))
    # A memory-bound step reads both: about 5.2 + 16 ms, so about 162 / 21.2 ms tokens per second.
    assert out["roofline_tpot_seconds"] * 1000 == pytest.approx(5.2 + 16, abs=0.1 + 0.3)
    assert out["roofline_tokens_per_second"] == pytest.approx(162 / 0.0212, rel=0.02)
    fp8 = run_json(
        runner, "decode", "llama3-70b", *SEED, "--ctx", "8k", "--batch", "162", "--kv-dtype", "fp8"
    )["contexts"][0]
    assert fp8["kv_read_seconds"] == pytest.approx(out["kv_read_seconds"] / 2)


def test_decode_kv_takes_over_as_context_grows(runner: CliRunner) -> None:
    out = run_json(
        runner, "decode", "llama3-70b", "--gpus", "8xH100", "--batch", "8", "--ctx", "1k,32k,128k"
    )
    shares = [o["kv_share"] for o in out["contexts"]]
    assert shares == sorted(shares) and shares[-1] > 0.5


def test_tp16_doubles_the_kv_per_sequence(runner: CliRunner) -> None:
    tp8 = run_json(runner, "batch", "llama3-70b", "--gpus", "8xH100", "--ctx", "8k")
    tp16 = run_json(
        runner, "batch", "llama3-70b", "--gpus", "16xH100", "--tp", "16", "--ctx", "8k"
    )
    # One whole KV head per GPU either way (seed 004): 8,192 x 2 x 80 x 1 x 128 x 2 bytes, so
    # 16 GPUs hold twice what 8 do.
    per_seq = [o["contexts"][0]["kv_bytes_per_sequence_per_gpu"] for o in (tp8, tp16)]
    assert per_seq == [8192 * 40_960, 8192 * 40_960]


def test_deepseek_v3_keeps_the_whole_latent_on_each_gpu(runner: CliRunner) -> None:
    out = run_json(
        runner, "batch", "deepseek-v3", "--gpus", "8xH200", "--weight-dtype", "fp8", "--ctx", "8k"
    )
    assert out["contexts"][0]["kv_bytes_per_sequence_per_gpu"] == 70_272 * 8192


def test_whole_registry_lists_every_model_with_reasons(runner: CliRunner) -> None:
    out = run_json(runner, "batch", "--gpus", "8xH100", "--ctx", "8k,128k")
    rows = {r["model"]: r for r in out["models"]}
    assert len(rows) >= 30
    assert rows["llama3-70b"]["fits"]
    assert not rows["deepseek-v3"]["fits"]
    assert "usable per GPU" in rows["deepseek-v3"]["reason"]
    # Falcon-7B's 71 query heads do not split 8 ways: it serves as 8 replicas of tp 1.
    assert rows["falcon-7b"]["fits"] and rows["falcon-7b"]["tp"] == 1
    assert rows["falcon-7b"]["layout"].startswith("tp 1 x 8 replicas")
    assert "71 query heads" in rows["falcon-7b"]["layout"]
    assert rows["qwen2.5-7b"]["tp"] == 4  # 28 query heads: the largest split of 8 is 4, x 2
    # An explicit --tp is kept: the model that cannot take it gets the reason instead.
    fixed = {r["model"]: r for r in run_json(
        runner, "batch", "--gpus", "8xH100", "--tp", "8", "--ctx", "8k")["models"]}
    assert not fixed["falcon-7b"]["fits"] and "71 query heads" in fixed["falcon-7b"]["reason"]


def test_weights_that_do_not_fit_exit_1_with_numbers(runner: CliRunner) -> None:
    # In bf16 (not as released) DeepSeek-V3 needs twice its FP8 release.
    args = ["batch", "deepseek-v3", "--gpus", "8xH100", "--weight-dtype", "bf16"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    assert "does not fit: weights 157.94 GiB > 71.26 GiB usable per GPU" in result.stdout
    assert "hint: about 32x h100-sxm would fit" in result.stdout  # 157.94 / 2 > 71.26


def test_the_hint_names_fp8_when_it_fits_on_the_same_gpus(runner: CliRunner) -> None:
    # Llama-3-70B in bf16 needs 131 GiB on one H100; at fp8 about 66 GiB, under 71.26 usable.
    result = runner.invoke(app, ["batch", "llama3-70b", "--gpus", "H100", "--ctx", "8k"])
    assert result.exit_code == 1
    assert "hint: --weight-dtype fp8 would fit on these GPUs" in result.stdout


def test_released_formats_are_the_default(runner: CliRunner) -> None:
    # DeepSeek-V3 ships FP8 with 128x128 block scales: 79.31 GiB per GPU at tp 8 (with its
    # 163,840 x 64 RoPE table), more than an H100's 71.26 usable, less than an H200's 126.4;
    # gpt-oss-120b's MXFP4 experts fit one H100.
    h100 = runner.invoke(app, ["batch", "deepseek-v3", "--gpus", "8xH100"])
    assert h100.exit_code == 1
    assert "weights 79.31 GiB > 71.26 GiB usable per GPU" in h100.stdout
    h200 = run_json(runner, "batch", "deepseek-v3", "--gpus", "8xH200", "--ctx", "8k")
    assert h200["fits"] and h200["weight_dtype"] == "fp8-block+bf16"
    oss = run_json(runner, "batch", "gpt-oss-120b", "--gpus", "H100", "--ctx", "8k")
    assert oss["fits"] and oss["weight_dtype"] == "bf16+mxfp4"


# ------------------------------------------------------------------ vLLM


def test_vllm_exact_llama31_8b(runner: CliRunner) -> None:
    out = run_json(
        runner,
        "batch",
        "llama3.1-8b",
        "--gpus",
        "h100",
        "--engine",
        "vllm",
        "--vllm-version",
        "0.19",  # the release of the logs these figures come from
        "--kv-memory",
        "58.109GiB",
        "--ctx",
        "8k",
    )
    assert (out["num_blocks"], out["kv_cache_tokens"]) == (29_751, 476_016)
    assert round(out["max_concurrency"], 2) == 58.11


def test_vllm_exact_gemma3_group_count(runner: CliRunner) -> None:
    # 20 GiB beside its 51 GiB of weights: 40 no longer passes, it exceeds the H100.
    out = run_json(
        runner,
        "batch",
        "gemma3-27b",
        "--gpus",
        "h100",
        "--engine",
        "vllm",
        "--vllm-version",
        "0.19",  # the release of the logs these figures come from
        "--kv-memory",
        "20GiB",
        "--ctx",
        "8k",
    )
    assert out["contexts"][0]["kv_cache_groups"] == 7
    assert out["contexts"][0]["blocks_per_request"] == 3_590


@pytest.mark.parametrize(
    ("args", "logged_blocks"),
    [
        # llm-d vLLM 0.19 runs at gpu_memory_utilization 0.95 (75.23 GiB of an H100's 79.19).
        (["--gpus", "h100"], 29_751),
        (["--gpus", "2xh100", "--pp", "2"], 67_207),
    ],
)
def test_vllm_budget_estimate_within_a_few_percent_of_the_log(
    runner: CliRunner, args: list[str], logged_blocks: int
) -> None:
    out = run_json(
        runner,
        "batch",
        "llama3.1-8b",
        *args,
        "--engine",
        "vllm",
        "--vllm-version",
        "0.19",  # the release of the logs these figures come from
        "--gpu-util",
        "0.95",
        "--ctx",
        "8k",
    )
    assert out["num_blocks"] == pytest.approx(logged_blocks, rel=0.03)


def test_vllm_refuses_a_request_that_does_not_fit(runner: CliRunner) -> None:
    result = runner.invoke(
        app,
        [
            "batch",
            "llama3-70b",
            "--gpus",
            "2xH100",
            "--engine",
            "vllm",
            "--ctx",
            "128k",
            "--kv-memory",
            "1GiB",
        ],
    )
    assert result.exit_code == 1
    assert "estimated maximum model length" in result.stdout


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["batch", "llama3-70b", "--gpus", "8xH10"], "did you mean"),
        (["batch", "llama3-70b", "--gpus", "0xH100"], "at least 1"),
        (["batch", "llama3-70b", "--gpus", "-2xH100"], "GPU count"),
        (["batch", "llama3-70b", "--gpus", "3xH100", "--tp", "2"], "3 GPUs cannot be split"),
        (["batch", "llama3-70b", "--gpus", "8xH100", "--tp", "3"], "tp x pp = 3"),
        (
            ["batch", "llama3-70b", "--gpus", "6xH100", "--tp", "6"],
            "does not divide the 8 KV heads; on 6 GPUs use tp 2 or 1",
        ),
        (["batch", "falcon-7b", "--gpus", "2xH100", "--tp", "2"], "71 query heads"),
        (["batch", "llama3-70b", "--gpus", "8xH100", "--gpu-util", "1.5"], "--gpu-util"),
        (["batch", "llama3-70b", "--gpus", "8xH100", "--gpu-util", "0"], "--gpu-util"),
        (["batch", "llama3-70b", "--gpus", "8xH100", "--reserve", "1"], "--reserve"),
        (
            ["batch", "llama3-70b", "--gpus", "8xH100", "--reserve", "0.1", "--overhead", "1GiB"],
            "--reserve and --overhead",
        ),
        (["batch", "llama3-70b", "--gpus", "8xH100", "--weights", "-5GB"], "--weights"),
        (["batch", "llama3-70b", "--gpus", "8xH100", "--gpu-memory", "80"], "unit"),
        (["batch", "llama3-70b", "--gpus", "8xH100", "--kv-memory", "0GiB"], "--kv-memory"),
        (["batch", "llama3-70b", "--gpus", "8xH100", "--overhead", "lots"], "--overhead"),
        (["batch", "llama3-70b", "--gpus", "8xH100", "--weight-dtype", "fp3"], "--weight-dtype"),
        (["batch", "llama3-70b", "--gpus", "8xH100", "--pp", "3"], "--pp: 3 does not divide"),
        (["batch", "llama3-70b", "--gpus", "8xH100", "--block-size", "0"], "--block-size"),
        (["batch", "llama3-70b", "--gpus", "8xH100", "--ctx", "abc"], "--ctx"),
        (["batch", "llama3-70b", "--gpus", "8xH100", "--engine", "tgi"], "--engine"),
        (["batch", "--gpus", "8xH100", "--engine", "vllm"], "needs a MODEL"),
        (["batch", "--gpus", "8xH100", "--gpu-util", "1.5"], "--gpu-util"),
        (["batch", "--gpus", "8xH100", "--weights", "-5GB"], "--weights"),
        (["batch", "--gpus", "8xH100", "--tp", "3"], "tp x pp = 3"),
        (
            ["batch", "llama3-70b", "--gpus", "8xH100", "--engine", "vllm", "--kv-dtype", "int4"],
            "int4",
        ),
        (["batch", "llama3-70b"], "--gpus"),
        (["batch", "llama3-70b", "--gpus", "8xH100", "--max-model-len", "8k"], "--engine vllm"),
        # It answered for 1,024 tokens without a word about the 8k asked for.
        (
            ["batch", "llama3-70b", "-g", "8xH100", "--engine", "vllm", "--max-model-len", "1k",
             "-c", "8k"],
            "--ctx 8,192 is longer than --max-model-len 1,024: vLLM refuses",
        ),
        (
            ["batch", "llama3-70b", "-g", "8xH100", "--engine", "vllm", "--max-model-len", "8k",
             "-c", "1k"],
            "give one of --ctx and --max-model-len",
        ),
        (
            ["batch", "llama3-70b", "-g", "8xH100", "--engine", "vllm", "--prefix-shared", "64"],
            "--prefix-shared",
        ),
        (
            ["batch", "llama3-70b", "--gpus", "8xH100", "--kv-memory", "9GiB", "--gpu-util", "0.8"],
            "--kv-memory and --gpu-util",
        ),
        (
            ["batch", "llama3-70b", "--gpus", "8xH100", "--kv-memory", "9GiB", "--weights", "1GB"],
            "--weights",
        ),
        (
            ["batch", "llama3-70b", "--gpus", "8xH100", "--kv-memory", "9GiB", "--reserve", "0.1"],
            "--kv-memory and --reserve",
        ),
        (
            ["batch", "llama3-70b", "--gpus", "8xH100", "--overhead", "1GiB",
             "--max-num-batched-tokens", "4096"],
            "--max-num-batched-tokens",
        ),
        (
            ["decode", "llama3-70b", "--gpus", "8xH100", "--reserve", "0.1",
             "--max-num-batched-tokens", "4096"],
            "--max-num-batched-tokens",
        ),
        (["decode", "llama3-70b", "--gpus", "8xH100", "--tp", "3"], "tp x pp = 3"),
        (["decode", "llama3-70b", "--gpus", "8xH100", "--mbu", "1.5"], "--mbu"),
        (["decode", "llama3-70b", "--gpus", "8xH100", "--batch", "0"], "--batch"),
        (["decode", "nope-70b", "--gpus", "8xH100"], "unknown model"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(runner: CliRunner, args: list[str], needle: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert needle in lines[0]


def test_decode_of_a_model_that_does_not_fit_exits_1(runner: CliRunner) -> None:
    result = runner.invoke(app, ["decode", "deepseek-v3", "--gpus", "8xH100"])
    assert result.exit_code == 1
    assert "does not fit" in result.stderr


def test_prefix_sharing_counts_the_prefix_once(runner: CliRunner) -> None:
    base = run_json(runner, "batch", "llama3-70b", *SEED, "--ctx", "8k")
    shared = run_json(
        runner, "batch", "llama3-70b", *SEED, "--ctx", "8k", "--prefix-shared", "4096"
    )
    # Per GPU: 54.5 GB of KV (seed 004's 436 GB / 8) and 327,680 / 8 = 40,960 bytes per token.
    # Half of each 8k sequence is the shared prefix of 4,096 x 40,960 = 167,772,160 bytes, held
    # once: (54,500,000,000 - 167,772,160) // 167,772,160 = 323 sequences instead of 162.
    assert base["contexts"][0]["max_batch"] == 162
    assert shared["contexts"][0]["max_batch"] == 323


def test_pipeline_parallel_tightest_stage_decides(runner: CliRunner) -> None:
    out = run_json(runner, "batch", "llama3-70b", "--gpus", "8xH100", "--pp", "2", "--ctx", "8k")
    assert (out["tp"], out["pp"], out["replicas"]) == (4, 2, 1)
    # 40 layers per stage at 2 KV heads per rank: the same bytes per GPU as tp 8 over 80 layers.
    assert out["contexts"][0]["kv_bytes_per_sequence_per_gpu"] == 40 * 2 * 2 * 128 * 2 * 8192


def test_data_parallel_replicas_multiply_sequences(runner: CliRunner) -> None:
    one = run_json(runner, "batch", "llama3-8b", "--gpus", "1xH100", "--ctx", "8k")
    four = run_json(runner, "batch", "llama3-8b", "--gpus", "4xH100", "--tp", "1", "--ctx", "8k")
    assert four["replicas"] == 4
    assert four["contexts"][0]["max_batch"] == 4 * one["contexts"][0]["max_batch"]


def test_decode_with_a_batch_that_does_not_fit(runner: CliRunner) -> None:
    weights = runner.invoke(app, ["decode", "deepseek-v3", "--gpus", "8xH100", "--batch", "1"])
    assert weights.exit_code == 1
    assert "does not fit: weights" in weights.stderr
    beyond = runner.invoke(app, ["decode", "llama3-70b", *SEED, "--ctx", "128k", "--batch", "11"])
    assert beyond.exit_code == 0
    assert "exceeds the 10 sequences of 131,072 tokens" in beyond.stderr


def test_vllm_honours_reserve_and_overhead(runner: CliRunner) -> None:
    base = ["batch", "llama3.1-8b", "--gpus", "h100", "--engine", "vllm", "--ctx", "8k"]
    profiled = run_json(runner, *base)["contexts"][0]["available_bytes_per_gpu"]
    reserved = run_json(runner, *base, "--reserve", "0.2")["contexts"][0]
    overhead = run_json(runner, *base, "--overhead", "1GiB")["contexts"][0]
    simple = run_json(runner, *base[:-4], "--ctx", "8k", "--reserve", "0.2")
    # A reserve leaves memory x 0.8 - weights, as the budget formula computes it: the H100's
    # 85,020,639,232 bytes x 0.8, rounded up, less 8,030,261,248 parameters x 2 bytes and the
    # RoPE table vLLM builds with them, 131,072 positions x 128 x 2 bytes.
    assert reserved["available_bytes_per_gpu"] == simple["kv_budget_bytes_per_gpu"]
    assert reserved["available_bytes_per_gpu"] == 68_016_511_386 - 16_060_522_496 - 33_554_432
    assert reserved["available_bytes_per_gpu"] < profiled
    # An explicit overhead replaces the profiled activation peak and non-torch memory.
    assert overhead["available_bytes_per_gpu"] != profiled


def test_max_num_batched_tokens_sizes_the_estimated_overhead(runner: CliRunner) -> None:
    base = ["batch", "llama3.1-8b", "--gpus", "h100", "--ctx", "8k"]
    default = run_json(runner, *base)
    small = run_json(runner, *base, "--max-num-batched-tokens", "2048")
    assert small["overhead_bytes_per_gpu"] < default["overhead_bytes_per_gpu"]


def test_decode_json_reports_why_nothing_fits(runner: CliRunner) -> None:
    result = runner.invoke(app, ["decode", "deepseek-v3", "--gpus", "8xH100", "--format", "json"])
    assert result.exit_code == 1
    out = json.loads(result.stdout)
    assert out["fits"] is False and out["reason"].startswith("weights")
    assert out["contexts"] == []


@pytest.mark.parametrize("engine", ["simple", "vllm", "sglang"])
def test_a_context_the_cache_cannot_hold_does_not_fit_in_any_engine(
    runner: CliRunner, engine: str
) -> None:
    # 1m tokens of Llama-3.1-8B (128 GiB of KV) after an 8k that fits: SGLang said
    # "concurrency 0", fits true, exit 0; the simple engine passed it when it came second.
    args = ["batch", "llama3.1-8b", "-g", "h100", "--engine", engine, "-c", "8k,1m"]
    out = run_json(runner, *args, code=1)
    assert out["fits"] is False
    assert "1,048,576" in out["reason"]
    ok = run_json(runner, "batch", "llama3.1-8b", "-g", "h100", "--engine", engine, "-c", "8k")
    assert (ok["fits"], ok["reason"]) == (True, None)
