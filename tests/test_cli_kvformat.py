"""KV formats and ``--as`` through the CLI: the golden figures as printed, every command taking
the options, the engines' refusals, and every bad input as one line with exit code 2."""

from __future__ import annotations

import json

import pytest
from report_check import usage_error
from test_cli_size import run, size_json
from typer.testing import CliRunner


def test_int4_group_32_prints_5_bits(runner: CliRunner) -> None:
    args = ["llama3-70b", "--ctx", "8k", "--kv-dtype", "int4", "--kv-group", "32"]
    result = run(runner, "size", *args, "--kv-zero-point")
    assert result.exit_code == 0, result.stderr
    assert "KV format:    int4 g32 fp16+zero = 5.0 bits per value (4.0 + scales)" in result.stdout
    out = size_json(runner, *args, "--kv-zero-point")
    assert out["kv_dtype"] == "int4 g32 fp16+zero"
    assert out["kv_bits_per_value"] == 5.0
    assert out["kv_bytes_per_token"] == 327_680 * 5 // 16 == 102_400
    assert size_json(runner, *args, "--kv-scale-dtype", "fp32")["kv_bits_per_value"] == 5.0


def test_plain_dtypes_print_no_format_line(runner: CliRunner) -> None:
    result = run(runner, "size", "llama3-70b", "--ctx", "8k", "--kv-dtype", "fp8")
    assert "KV format" not in result.stdout
    assert size_json(runner, "llama3-70b", "--ctx", "8k")["kv_bits_per_value"] == 16.0


def test_kivi_per_sequence_is_exact_and_per_token_is_the_slope(runner: CliRunner) -> None:
    short = size_json(runner, "llama3-8b", "--ctx", "100", "--kv-dtype", "kivi2")
    assert short["kv_bytes_per_sequence"] == 32 * 100 * 4096  # all within the bf16 residual
    assert short["kv_bytes_per_token"] == 32 * 768  # 3 bits per value
    same = size_json(
        runner, "llama3-8b", "--ctx", "100", "--kv-quant", "kivi", "--kv-bits", "2",
        "--kv-group", "32", "--kv-residual", "128",
    )
    assert same["kv_bytes_per_sequence"] == short["kv_bytes_per_sequence"]
    result = run(runner, "size", "llama3-8b", "--ctx", "8k", "--kv-dtype", "kivi2")
    assert "newest 128 tokens at bf16: per token is the long-context slope" in result.stdout


def test_llama_70b_as_mha_at_100k_in_gb_and_gib(runner: CliRunner) -> None:
    result = run(runner, "size", "llama3-70b", "--as", "mha", "--ctx", "100000")
    assert result.exit_code == 0, result.stderr
    assert "Llama-3-70B as mha" in result.stdout
    assert "per token:    2,621,440 B (2.50 MiB)" in result.stdout
    assert "262,144,000,000 B = 244.14 GiB (262.14 GB)" in result.stdout
    mqa = size_json(runner, "llama3-70b", "--as", "mqa", "--ctx", "100000")
    assert mqa["kv_bytes_per_token"] * 64 == 2_621_440


def test_deepseek_v3_as_mha_is_71_times_its_mla(runner: CliRunner) -> None:
    mha = size_json(runner, "deepseek-v3", "--as", "mha", "--ctx", "8k")
    mla = size_json(runner, "deepseek-v3", "--ctx", "8k")
    assert mha["kv_bytes_per_token"] == 128 * (192 + 128) * 61 * 2 == 4_997_120
    assert mla["kv_bytes_per_token"] == 70_272
    assert round(mha["kv_bytes_per_token"] / mla["kv_bytes_per_token"]) == 71


def test_batch_and_decode_take_the_format_and_the_variant(runner: CliRunner) -> None:
    base = ["llama3-70b", "--gpus", "8xH100", "--ctx", "8k", "--format", "json"]
    plain = json.loads(run(runner, "batch", *base).stdout)
    mha = json.loads(run(runner, "batch", *base, "--as", "mha").stdout)
    kivi = json.loads(run(runner, "batch", *base, "--as", "mha", "--kv-dtype", "kivi2").stdout)
    fits = [out["contexts"][0]["max_batch"] for out in (plain, mha, kivi)]
    assert fits[0] > fits[2] > fits[1] > 0
    assert kivi["kv_dtype"] == "kivi2"
    step = json.loads(run(runner, "decode", *base, "--batch", "1", "--as", "mha").stdout)
    plain_step = json.loads(run(runner, "decode", *base, "--batch", "1").stdout)
    assert step["contexts"][0]["kv_bytes_read"] == 8 * plain_step["contexts"][0]["kv_bytes_read"]


def test_every_engine_reports_the_effective_bits(runner: CliRunner) -> None:
    base = ["llama3.1-8b", "--gpus", "h100", "--ctx", "8k", "--format", "json"]
    group = ["--kv-dtype", "int4", "--kv-group", "32"]
    assert json.loads(run(runner, "batch", *base, *group).stdout)["kv_bits_per_value"] == 4.5
    nvfp4 = run(runner, "batch", *base, "--engine", "vllm", "--kv-dtype", "nvfp4").stdout
    assert json.loads(nvfp4)["kv_bits_per_value"] == 4.5
    sglang = run(runner, "batch", *base, "--engine", "sglang").stdout
    assert json.loads(sglang)["kv_bits_per_value"] == 16.0
    step = json.loads(run(runner, "decode", *base, "--kv-dtype", "kivi2").stdout)
    assert step["kv_bits_per_value"] == 3.0
    table = run(runner, "decode", *base[:-2], *group, "--kv-zero-point").stdout
    assert "KV int4 g32 fp16+zero (5.0 bits)" in table
    assert "KV bf16," in run(runner, "decode", *base[:-2]).stdout


def test_plan_tries_format_names_and_takes_the_variant(runner: CliRunner) -> None:
    args = ["plan", "llama3-70b", "--users", "30", "--ctx", "8k", "--gpus", "H100", "--top", "9"]
    result = run(runner, *args, "--kv-dtype", "bf16,kivi2,nvfp4", "--as", "mha", "-f", "json")
    assert result.exit_code == 0, result.stderr
    best = {}
    for layout in json.loads(result.stdout)["layouts"]:
        best.setdefault(layout["kv_dtype"], layout["gpus"]["count"])
    # As MHA the cache is 8x Llama-3-70B's: fewer bits per value need fewer GPUs.
    assert best["kivi2"] <= best["nvfp4"] <= best.get("bf16", 9)
    assert "kivi2" in best


def test_sweep_takes_the_format_and_the_variant(runner: CliRunner) -> None:
    args = ["sweep", "llama3-70b", "-g", "8xH100", "--ctx", "8k,32k", "-f", "json"]
    plain = json.loads(run(runner, *args).stdout)
    out = json.loads(run(runner, *args, "--as", "mha", "--kv-dtype", "kivi2").stdout)
    (series,) = out["series"]
    (base,) = plain["series"]
    assert series["kv_dtype"] == "kivi2"
    # MHA is 8x the cache, KIVI-2 a little over 3/16 of bf16 at these contexts.
    kivi, bf16 = series["points"][1], base["points"][1]
    assert 8 * 3 / 16 < kivi["kv_bytes_per_sequence"] / bf16["kv_bytes_per_sequence"] < 1.6


def test_sglang_fp4_cells_are_its_formula(runner: CliRunner) -> None:
    # sglang-kv-algorithm.md 2.3: (n k L 2 elem) // 2 + (n k L 2 elem) // 16 for MHA, and
    # ((r + rope) L elem) // 2 + ((r + rope) // 16) L elem for MLA.
    def cell(model: str, *more: str) -> int:
        args = ["batch", model, "-g", "h100", "--engine", "sglang", "--kv-dtype", "fp4_e2m1"]
        result = run(runner, *args, *more, "--format", "json")
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)["cell_size_bytes"]

    mha = 8 * 128 * 32 * 2
    # The reference's rule is v0.5.6's (0.5.23 refuses an fp4 MHA cache: its FP8 dequant
    # workspace is not modelled).
    assert cell("llama3.1-8b", "--sglang-version", "0.5.6") == mha // 2 + mha // 16 == 36_864
    mla = cell("deepseek-v2-lite", "--sglang-version", "0.5.18")
    assert mla == (576 * 27) // 2 + (576 // 16) * 27 == 8_748


def test_vllm_stores_its_presets(runner: CliRunner) -> None:
    args = ["batch", "llama3.1-8b", "--gpus", "h100", "--engine", "vllm", "--ctx", "8k"]
    for name in ("fp8_per_token_head", "int8_per_token_head", "nvfp4"):
        result = run(runner, *args, "--kv-dtype", name)
        assert result.exit_code == 0, result.stderr
        assert f"KV {name}" in result.stdout


def test_the_registry_table_reports_models_a_format_cannot_store(runner: CliRunner) -> None:
    result = run(runner, "batch", "--gpus", "8xH100", "--kv-dtype", "kivi2", "--format", "json")
    assert result.exit_code == 0, result.stderr
    rows = {r["model"]: r for r in json.loads(result.stdout)["models"]}
    assert not rows["deepseek-v3"]["fits"]
    assert "MLA latent" in rows["deepseek-v3"]["reason"]
    assert rows["llama3-70b"]["fits"] and rows["llama3-70b"]["reason"] is None


def test_the_registry_table_names_its_format_and_what_if(runner: CliRunner) -> None:
    args = ["batch", "--gpus", "8xH100", "--ctx", "8k"]
    result = run(runner, *args, "--kv-dtype", "int4", "--kv-group", "64", "--as", "mqa")
    assert result.exit_code == 0, result.stderr
    assert "weights at each model's dtype, KV int4 g64 fp16, attention as mqa" in result.stdout
    out = json.loads(run(runner, *args, "--as", "mla:512+64", "--format", "json").stdout)
    assert (out["weight_dtype"], out["kv_dtype"], out["as_attention"]) == (
        None, None, "mla:512+64"
    )
    rows = {r["model"]: r for r in out["models"]}
    # DeepSeek-V3.2's indexed MLA takes the latent; a sliding-only model has nothing to turn.
    assert "re-derive" not in (rows["deepseek-v3.2-exp"]["reason"] or "")
    assert "no full-attention or MLA layers" in rows["mistral-7b-v0.1"]["reason"]
    plain = json.loads(run(runner, *args, "--format", "json").stdout)
    assert (plain["weight_dtype"], plain["kv_dtype"], plain["as_attention"]) == (None, None, None)


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["size", "llama3-70b", "--kv-group", "0"], ["--kv-group"]),
        (["size", "llama3-70b", "--kv-dtype", "int4", "--kv-group", "-3"], ["--kv-group"]),
        (["size", "llama3-70b", "--kv-group", "32"], ["--kv-group", "bf16", "not quantised"]),
        (["size", "llama3-70b", "--as", "gqa:7"], ["--as gqa:7", "64 query heads", "divisor"]),
        (["size", "llama3-70b", "--as", "gqa"], ["--as", "gqa:G"]),
        (["size", "llama3-70b", "--as", "mla:x"], ["--as", "mla:LATENT"]),
        (["size", "llama3-70b", "--as", "gqa:0"], ["--as gqa:0", "1 to 4,096 KV heads"]),
        (["size", "llama3-70b", "--as", "gqa:\uff18"], ["--as", "ASCII digits"]),
        (["size", "llama3-70b", "--as", "mla:99999999"], ["--as mla:99999999", "latent of 1 to"]),
        (["size", "llama3-70b", "--kv-dtype", ""], ["--kv-dtype: no value"]),
        (["size", "llama3-70b", "--as", "mla:512+200"], ["--as mla:512+200", "wider"]),
        (["size", "llama3-70b", "--as", "mha", "--kv-heads", "8"], ["--kv-heads", "--as mha"]),
        (["size", "deepseek-v3", "--as", "mla:512", "--head-dim", "64"], ["--head-dim"]),
        (["size", "mistral-7b-v0.1", "--as", "mla:512"], ["no full-attention or MLA layers"]),
        (
            ["size", "llama3-70b", "--kv-dtype", "int4", "--kv-scale-dtype", "fp16"],
            ["--kv-scale-dtype", "int4 stores no scales", "--kv-group"],
        ),
        (["size", "llama3-70b", "--kv-scale-dtype", "fp32"], ["--kv-scale-dtype"]),
        (["size", "llama3-70b", "--kv-dtype", "fp8", "--kv-zero-point"], ["--kv-zero-point"]),
        (["size", "llama3-70b", "--kv-bits", "2"], ["--kv-bits", "KIVI only"]),
        (["size", "llama3-70b", "--kv-residual", "64"], ["--kv-residual", "KIVI only"]),
        (["size", "llama3-70b", "--kv-quant", "awq"], ["--kv-quant", "kivi"]),
        (["size", "llama3-70b", "--kv-quant", "kivi", "--kv-bits", "3"], ["--kv-bits", "2 or 4"]),
        (["size", "deepseek-v3", "--kv-dtype", "kivi2"], ["--kv-dtype", "MLA latent"]),
        (
            ["size", "llama3-70b", "--kv-dtype", "int4", "--kv-group", "8", "--kv-group", "16"],
            ["--kv-group: given 2 times"],
        ),
        (
            ["batch", "llama3-70b", "-g", "8xH100", "--engine", "vllm", "--kv-dtype", "kivi2"],
            ["vLLM has no kivi2 KV cache", "nvfp4"],
        ),
        (
            ["batch", "llama3-70b", "-g", "8xH100", "--engine", "vllm", "--kv-dtype", "int4",
             "--kv-group", "32"],
            ["vLLM has no int4 g32 fp16 KV cache"],
        ),
        (
            ["batch", "llama3-70b", "-g", "8xH100", "--engine", "sglang", "--kv-dtype", "kivi2"],
            ["SGLang has no kivi2 KV cache", "nvfp4 (fp4_e2m1)"],
        ),
        (
            ["batch", "llama3-70b", "-g", "8xH100", "--engine", "sglang", "--kv-dtype", "nvfp4",
             "--sglang-version", "0.5.18"],
            ["--sglang-version: SGLang 0.5.18 adds an FP8 dequant workspace"],
        ),
        (["decode", "llama3-70b", "-g", "8xH100", "--as", "gqa:3"], ["--as gqa:3"]),
        (["batch", "-g", "8xH100", "--as", "moe"], ["--as", "'moe'"]),
        (
            ["plan", "llama3-70b", "--users", "9", "--engine", "vllm", "--kv-dtype", "kivi2"],
            ["--kv-dtype: vLLM has no kivi2 KV cache"],
        ),
        (["plan", "deepseek-v3", "--users", "9", "--kv-dtype", "kivi2"], ["MLA latent"]),
        (["plan", "llama3-70b", "--users", "9", "--kv-dtype", "fp8,fp8_e4m3"], ["twice"]),
        (["plan", "llama3-70b", "--users", "9", "--as", "gqa:5"], ["--as gqa:5"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    runner: CliRunner, args: list[str], needles: list[str]
) -> None:
    usage_error(run(runner, *args), *needles)
