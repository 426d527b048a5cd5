"""`kvcalc compare`: the rows are the figures `size`, `batch` and `decode` give for the same
options; the comparison table of seed 000 is computed (MQA 64x and GQA-8 8x for a 64-head model,
INT4 4x without metadata, paged attention no reduction); no cache costs seed 004's ~750x."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from report_check import refused, run_json
from specs import registry_deployment, registry_model
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.comparison import check_techniques
from kvcalc.engine.compare import (
    cache_cost,
    token_passes_with_cache,
    token_passes_without_cache,
)
from kvcalc.engine.kv import kv_bytes_per_sequence
from kvcalc.engine.units import GiB
from kvcalc.techniques import CATEGORIES, TECHNIQUES

#: Llama-3-70B stores 80 layers x 8 KV heads x 128 x (K and V) x 2 bytes per token in bf16.
LLAMA3_70B_BYTES_PER_TOKEN = 80 * 8 * 128 * 2 * 2
#: Llama-3.1-8B: 32 layers x 8 KV heads x 128 x 2 x 2 bytes.
LLAMA31_8B_BYTES_PER_TOKEN = 32 * 8 * 128 * 2 * 2


def rows(runner: CliRunner, *args: str) -> dict[str, dict[str, Any]]:
    """The rows of a one-model comparison, by technique."""
    (model,) = run_json(runner, "compare", *args)["models"]
    return {r["technique"]: r for r in model["rows"]}


# ------------------------------------------------------------------ the preset table


def test_every_override_is_an_option_other_commands_take() -> None:
    assert check_techniques() == []


def test_rows_have_unique_names_and_a_known_category() -> None:
    names = [t.name for t in TECHNIQUES]
    assert len(names) == len(set(names))
    assert names[0] == "baseline" and TECHNIQUES[0].overrides == {}
    assert {t.category for t in TECHNIQUES} <= set(CATEGORIES)


# ------------------------------------------------------------------ baseline = size


@pytest.mark.parametrize(
    ("model", "ctx", "extra"),
    [
        ("llama3-70b", "128k", []),
        ("gemma3-27b", "128k", []),  # sliding-window hybrid
        ("jamba-v0.1", "256k", ["--kv-dtype", "int4"]),  # recurrent states
        ("deepseek-v3", "32k", []),  # MLA
        ("llama3-70b", "100000", ["--kv-heads", "64"]),  # what-if
    ],
)
def test_baseline_row_is_what_size_reports(
    runner: CliRunner, model: str, ctx: str, extra: list[str]
) -> None:
    size = run_json(runner, "size", model, "--ctx", ctx, *extra)
    baseline = rows(runner, model, "--ctx", ctx, *extra, "--only", "baseline")["baseline"]
    assert baseline["kv_bytes_per_token"] == size["kv_bytes_per_token"]
    assert baseline["kv_bytes_per_sequence"] == size["contexts"][0]["kv_bytes_per_sequence"]
    assert baseline["kv_dtype"] == size["kv_dtype"]
    assert baseline["reduction"] == 1


def test_default_context_is_the_smallest_maximum_of_the_models(runner: CliRunner) -> None:
    # Llama-3-70B states 8,192 tokens, Llama-3.1-8B 131,072.
    assert run_json(runner, "compare", "llama3-70b", "llama3.1-8b")["context_tokens"] == 8192


# ------------------------------------------------------------------ seed 000's comparison table


def test_seed_000_llama_70b_at_100k_is_262_gb_and_mqa_gqa_reduce_it_64x_and_8x(
    runner: CliRunner,
) -> None:
    # "2 x 80 x 64 x 100,000 x 128 x 2 (FP16) = 262 GB": a 64-KV-head (MHA) Llama-70B.
    table = rows(runner, "llama3-70b", "--kv-heads", "64", "--ctx", "100000")
    assert table["baseline"]["kv_bytes_per_sequence"] == 2 * 80 * 64 * 100_000 * 128 * 2
    assert table["baseline"]["kv_bytes_per_sequence"] == 262_144_000_000
    assert table["as-mqa"]["reduction"] == 64
    assert table["as-gqa-8"]["reduction"] == 8
    assert table["as-mqa"]["category"] == table["as-gqa-8"]["category"] == "needs retraining"
    assert table["fp8+as-gqa-8"]["reduction"] == 16


def test_int4_without_metadata_is_4x_and_paged_attention_no_reduction(runner: CliRunner) -> None:
    table = rows(runner, "llama3-70b", "--ctx", "128k")
    assert table["int4"]["kv_bytes_per_token"] == LLAMA3_70B_BYTES_PER_TOKEN // 4
    assert table["int4"]["reduction"] == 4
    assert table["int8"]["reduction"] == table["fp8"]["reduction"] == 2
    assert table["paged"]["reduction"] == 1
    assert table["paged"]["category"] == "lossless"
    assert table["int4"]["category"] == "lossy"


def test_seed_000_combination_llama3_70b_at_1m_in_int8_holds_160_gib(runner: CliRunner) -> None:
    table = rows(runner, "llama3-70b", "--ctx", "1m", "--only", "int8")
    assert table["int8"]["kv_bytes_per_sequence"] == 160 * GiB == 163_840 * 1_048_576


def test_a_20_gib_cache_fits_one_gpu_with_the_weights_at_these_dtypes(runner: CliRunner) -> None:
    # Seed 000's "1M+ tokens feasible on single GPU": Llama-3-70B at 1M tokens with a 128K window
    # in int8 holds 20 GiB. `batch` answers which GPU holds the weights (131.42 GiB in bf16,
    # 67.67 GiB in fp8, 35.79 GiB in int4) plus that cache.
    def fits(gpu: str, weights: str) -> int:
        result = runner.invoke(app, ["batch", "llama3-70b", "--gpus", gpu, "--ctx", "1m",
                                     "--kv-dtype", "int8", "--window", "131072",
                                     "--weight-dtype", weights, "--format", "json"])
        assert result.exit_code in (0, 1), result.stderr  # 1: does not fit
        batch: int = json.loads(result.stdout)["contexts"][0]["max_batch"]
        return batch

    assert fits("h100", "bf16") == fits("h100", "fp8") == 0
    assert fits("h100", "int4") == 1
    assert fits("h200", "bf16") == 0
    assert fits("h200", "fp8") >= 1
    assert fits("mi300x", "bf16") >= 1
    assert fits("b200", "bf16") >= 1




def test_int4_with_group_32_fp16_scales_and_zero_points_is_3_2x(runner: CliRunner) -> None:
    # 4 bits + (16-bit scale + 16-bit zero point) / 32 values = 5 bits: 16 / 5 = 3.2x.
    table = rows(runner, "llama3-70b", "--ctx", "128k", "--only", "int4-g32")
    assert table["int4-g32"]["kv_bytes_per_token"] == LLAMA3_70B_BYTES_PER_TOKEN * 5 // 16
    assert table["int4-g32"]["reduction"] == 3.2


@pytest.mark.parametrize(
    ("row", "options"),
    [
        ("int4-g32", ["--kv-dtype", "int4", "--kv-group", "32", "--kv-scale-dtype", "fp16",
                      "--kv-zero-point"]),
        ("kivi-2", ["--kv-dtype", "kivi2"]),
        ("as-mla", ["--as", "mla:512+64"]),
        ("as-mqa", ["--as", "mqa"]),
    ],
)
def test_format_and_attention_rows_are_what_size_reports(
    runner: CliRunner, row: str, options: list[str]
) -> None:
    for model in ("llama3-70b", "qwen3-next-80b-a3b"):
        size = run_json(runner, "size", model, "--ctx", "32k", *options)
        table = rows(runner, model, "--ctx", "32k", "--only", row)
        assert table[row]["kv_bytes_per_sequence"] == size["contexts"][0]["kv_bytes_per_sequence"]


def test_format_options_apply_without_gpus_and_rows_that_cannot_store_a_model_are_left_out(
    runner: CliRunner,
) -> None:
    table = rows(runner, "llama3-70b", "--ctx", "8k", "--kv-dtype", "int4", "--kv-group", "32",
                 "--only", "baseline")
    # 4.5 bits
    assert table["baseline"]["kv_bytes_per_token"] == LLAMA3_70B_BYTES_PER_TOKEN * 9 // 32
    (model,) = run_json(runner, "compare", "deepseek-v3", "--ctx", "8k")["models"]
    skipped = {s["technique"]: s["reason"] for s in model["skipped"]}
    assert "an MLA latent is neither" in skipped["kivi-2"]
    assert skipped["as-mla"] == "deepseek-v3 has mla:512+64 attention already"


def test_sliding_window_and_streaming_llm_are_bounded(runner: CliRunner) -> None:
    at_128k = rows(runner, "llama3-70b", "--ctx", "128k", "--only", "window,streamingllm")
    at_1m = rows(runner, "llama3-70b", "--ctx", "1m", "--only", "window,streamingllm")
    for name in ("window", "streamingllm"):
        assert at_1m[name]["kv_bytes_per_sequence"] == at_128k[name]["kv_bytes_per_sequence"]
        assert at_1m[name]["reduction"] > at_128k[name]["reduction"]


def test_seed_000_combination_with_a_128k_window_holds_20_gib(runner: CliRunner) -> None:
    table = rows(runner, "llama3-70b", "--ctx", "1m", "--only", "int8+window-128k")
    assert table["int8+window-128k"]["kv_bytes_per_sequence"] == 20 * GiB


@pytest.mark.parametrize(
    ("row", "options"),
    [
        ("window", ["--window", "4096"]),
        ("streamingllm", ["--sinks", "4", "--recent", "4096"]),
        ("h2o", ["--h2o-budget", "4096"]),
        ("keep-half", ["--keep-ratio", "0.5"]),
        ("fp8+window", ["--kv-dtype", "fp8", "--window", "4096"]),
    ],
)
def test_eviction_rows_are_what_size_reports_with_their_options(
    runner: CliRunner, row: str, options: list[str]
) -> None:
    for model in ("llama3-70b", "gemma3-27b"):
        size = run_json(runner, "size", model, "--ctx", "128k", *options)
        table = rows(runner, model, "--ctx", "128k", "--only", row)
        assert table[row]["kv_bytes_per_sequence"] == size["contexts"][0]["kv_bytes_per_sequence"]
        assert table[row]["category"] == "lossy"


def test_snapkv_row_compresses_the_prompt(runner: CliRunner) -> None:
    args = ("llama3.1-8b", "--ctx", "36k", "--prompt", "32k", "--gen", "4k")
    size = run_json(runner, "size", "llama3.1-8b", "--snapkv-budget", "4096",
                    "--prompt", "32k", "--gen", "4k")
    table = rows(runner, *args, "--only", "snapkv")
    # 4,096 prompt tokens kept and the 4,096 generated ones.
    assert table["snapkv"]["kv_bytes_per_sequence"] == 8192 * LLAMA31_8B_BYTES_PER_TOKEN
    assert table["snapkv"]["kv_bytes_per_sequence"] == size["contexts"][0]["kv_bytes_per_sequence"]


def test_a_users_eviction_policy_is_the_baselines(runner: CliRunner) -> None:
    size = run_json(runner, "size", "llama3-70b", "--ctx", "32k", "--window", "8192")
    table = rows(runner, "llama3-70b", "--ctx", "32k", "--window", "8192", "--only",
                 "baseline,fp8,h2o")
    per_sequence = size["contexts"][0]["kv_bytes_per_sequence"]
    assert table["baseline"]["kv_bytes_per_sequence"] == per_sequence == 8192 * 327_680
    assert table["fp8"]["kv_bytes_per_sequence"] == per_sequence // 2
    # A row of another policy replaces the user's: H2O keeps 4,096 tokens, not the window.
    assert table["h2o"]["kv_bytes_per_sequence"] == 4096 * 327_680


def test_a_policy_that_evicts_nothing_leaves_its_row_out(runner: CliRunner) -> None:
    (model,) = run_json(runner, "compare", "llama3-70b", "--ctx", "4k")["models"]
    skipped = {s["technique"]: s["reason"] for s in model["skipped"]}
    assert "keeps every token of a 4,096-token context" in skipped["window"]
    assert "window" not in [r["technique"] for r in model["rows"]]
    # Gemma-3-27B's global layers hold the whole context, so pruning half evicts there.
    assert "keep-half" in rows(runner, "gemma3-27b", "--ctx", "4k")


def test_eviction_rows_on_gpus_fit_what_batch_fits(runner: CliRunner) -> None:
    args = ("llama3-70b", "--gpus", "8xH100", "--ctx", "128k")
    table = rows(runner, *args, "--only", "window")
    batch = run_json(runner, "batch", *args, "--window", "4096")
    decode = run_json(runner, "decode", *args, "--window", "4096")
    assert table["window"]["max_batch"] == batch["contexts"][0]["max_batch"]
    assert table["window"]["tpot_seconds"] == decode["contexts"][0]["tpot_seconds"]


# ------------------------------------------------------------------ rows on GPUs = batch, decode


def test_rows_on_gpus_are_what_batch_and_decode_report(runner: CliRunner) -> None:
    args = ("llama3-70b", "--gpus", "8xH100", "--ctx", "32k")
    table = rows(runner, *args, "--only", "baseline,fp8")
    for name, dtype in (("baseline", "bf16"), ("fp8", "fp8")):
        batch = run_json(runner, "batch", *args, "--kv-dtype", dtype)
        decode = run_json(runner, "decode", *args, "--kv-dtype", dtype)
        assert table[name]["max_batch"] == batch["contexts"][0]["max_batch"]
        assert table[name]["batch"] == decode["contexts"][0]["batch"]
        assert table[name]["tpot_seconds"] == decode["contexts"][0]["tpot_seconds"]
    assert table["fp8"]["max_batch"] > table["baseline"]["max_batch"]


def test_given_batch_times_that_batch(runner: CliRunner) -> None:
    args = ("llama3-70b", "--gpus", "8xH100", "--ctx", "32k", "--batch", "4")
    baseline = rows(runner, *args, "--only", "baseline")["baseline"]
    decode = run_json(runner, "decode", *args)
    assert baseline["batch"] == 4
    assert baseline["tpot_seconds"] == decode["contexts"][0]["tpot_seconds"]


def test_mqa_under_tensor_parallelism_is_replicated_per_rank(runner: CliRunner) -> None:
    # One KV head on 8 ranks is stored by each: the cache per GPU is that of 8 heads, so the
    # sequences that fit are those of GQA-8, though the bytes of one sequence are 8x fewer.
    table = rows(runner, "llama3-70b", "--kv-heads", "64", "--gpus", "8xH100", "--ctx", "32k")
    assert table["as-mqa"]["max_batch"] == table["as-gqa-8"]["max_batch"]
    mqa = table["as-mqa"]["kv_bytes_per_sequence"]
    assert table["as-gqa-8"]["kv_bytes_per_sequence"] == 8 * mqa


def test_a_row_that_does_not_fit_says_why(runner: CliRunner) -> None:
    # fp8 weights of Llama-3-70B (67.67 GiB) leave an H100 too little for an 8k sequence.
    args = ("llama3-70b", "--gpus", "h100", "--ctx", "8k", "--weight-dtype", "fp8")
    result = runner.invoke(app, ["batch", *args, "--format", "json"])
    assert result.exit_code == 1
    reason = json.loads(result.stdout)["reason"]
    assert reason.startswith("one sequence of 8,192 tokens needs 2.50 GiB per GPU > KV budget")
    table = rows(runner, *args, "--only", "baseline,int4")
    assert table["baseline"]["max_batch"] == 0
    assert table["baseline"]["batch"] is None and table["baseline"]["tpot_seconds"] is None
    assert table["baseline"]["reason"] == reason
    assert table["int4"]["max_batch"] >= 1 and table["int4"]["reason"] is None
    result = runner.invoke(app, ["compare", *args], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.stderr
    assert f"baseline: does not fit, {reason}" in result.stdout


# ------------------------------------------------------------------ prefix sharing


def test_prefix_sharing_spreads_the_prefix_over_the_batch(runner: CliRunner) -> None:
    table = rows(runner, "llama3.1-8b", "--ctx", "32k", "--batch", "10", "--prefix-shared", "8192")
    unique = (32_768 - 8_192) * LLAMA31_8B_BYTES_PER_TOKEN  # 3,221,225,472
    shared = 8_192 * LLAMA31_8B_BYTES_PER_TOKEN  # 1,073,741,824, stored once for 10 sequences
    assert table["prefix-shared"]["kv_bytes_per_sequence"] == unique + math.ceil(shared / 10)
    assert table["prefix-shared"]["kv_bytes_per_sequence"] == 3_328_599_655
    assert table["baseline"]["kv_bytes_per_sequence"] == 32_768 * LLAMA31_8B_BYTES_PER_TOKEN
    assert table["prefix-shared"]["reduction"] == pytest.approx(4_294_967_296 / 3_328_599_655)
    assert table["prefix-shared"]["category"] == "lossless"


def test_prefix_sharing_on_gpus_fits_what_batch_fits(runner: CliRunner) -> None:
    args = ("llama3.1-8b", "--gpus", "h100", "--ctx", "32k")
    table = rows(runner, *args, "--prefix-shared", "8192")
    shared = run_json(runner, "batch", *args, "--prefix-shared", "8192")
    plain = run_json(runner, "batch", *args)
    assert table["prefix-shared"]["max_batch"] == shared["contexts"][0]["max_batch"]
    assert table["baseline"]["max_batch"] == plain["contexts"][0]["max_batch"]
    assert table["prefix-shared"]["max_batch"] > table["baseline"]["max_batch"]


def test_no_prefix_row_without_the_option(runner: CliRunner) -> None:
    assert "prefix-shared" not in rows(runner, "llama3.1-8b", "--ctx", "32k")


# ------------------------------------------------------------------ the cost of no cache


def test_seed_004_no_cache_example_is_about_750x() -> None:
    # L = N = 1000: ~1.5 million token passes without the cache, ~2,000 with it.
    assert token_passes_with_cache(1000, 1000) == 2_000
    assert token_passes_without_cache(1000, 1000) == 1000 * 1000 + 1000 * 1001 // 2 == 1_500_500
    assert token_passes_without_cache(1000, 1000) / token_passes_with_cache(1000, 1000) == 750.25


def test_without_cache_step_i_recomputes_all_l_plus_i_tokens() -> None:
    for prompt, gen in ((0, 1), (1, 1), (7, 5), (100, 3)):
        assert token_passes_without_cache(prompt, gen) == sum(prompt + i for i in range(1, gen + 1))


def test_no_cache_row_and_json(runner: CliRunner) -> None:
    out = run_json(runner, "compare", "llama3-70b", "--ctx", "8k", "--prompt", "1000",
                   "--gen", "1000")
    assert out["token_passes_with_cache"] == 2_000
    assert out["token_passes_without_cache"] == 1_500_500
    assert out["no_cache_factor"] == 750.25
    table = {r["technique"]: r for r in out["models"][0]["rows"]}
    assert table["no-cache"]["kv_bytes_per_sequence"] == 0
    assert table["no-cache"]["token_passes"] == 1_500_500
    assert table["baseline"]["token_passes"] == 2_000
    assert table["no-cache"]["reduction"] is None


# ------------------------------------------------------------------ models side by side, --only


def test_prompt_and_gen_read_lengths_as_ctx_does(runner: CliRunner) -> None:
    out = run_json(runner, "compare", "llama3-70b", "--ctx", "8k", "--prompt", "1k", "--gen", "2")
    assert (out["prompt_tokens"], out["generated_tokens"]) == (1024, 2)
    assert out["token_passes_without_cache"] == (1024 + 1) + (1024 + 2)


def test_models_side_by_side_have_the_same_rows(runner: CliRunner) -> None:
    out = run_json(runner, "compare", "llama3-70b", "llama3.1-8b", "--ctx", "8k",
                   "--only", "baseline,int4")
    assert [m["model"] for m in out["models"]] == ["llama3-70b", "llama3.1-8b"]
    for model, per_token in zip(
        out["models"], (LLAMA3_70B_BYTES_PER_TOKEN, LLAMA31_8B_BYTES_PER_TOKEN), strict=True
    ):
        assert [r["technique"] for r in model["rows"]] == ["baseline", "int4"]
        assert model["rows"][0]["kv_bytes_per_sequence"] == 8192 * per_token


def test_only_keeps_the_table_order(runner: CliRunner) -> None:
    assert list(rows(runner, "llama3-70b", "--only", "int4,baseline")) == ["baseline", "int4"]


def test_rows_that_do_not_apply_are_left_out_with_the_reason(runner: CliRunner) -> None:
    (model,) = run_json(runner, "compare", "deepseek-v3", "--ctx", "8k")["models"]
    skipped = {s["technique"]: s["reason"] for s in model["skipped"]}
    assert "as-mqa" in skipped and "MLA" in skipped["as-mqa"]
    (model,) = run_json(runner, "compare", "llama3-70b")["models"]
    skipped = {s["technique"]: s["reason"] for s in model["skipped"]}
    assert skipped["as-gqa-8"] == "llama3-70b has 8 KV heads per layer already"
    result = runner.invoke(app, ["compare", "llama3-70b"], env={"COLUMNS": "120"})
    assert "as-gqa-8: left out, llama3-70b has 8 KV heads per layer already" in result.stdout


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["llama3-70b", "--only", "int3"], "--only: unknown row 'int3'"),
        (["llama3-70b", "--only", ","], "--only: name at least one row"),
        (["llama3-70b", "--only", "no-cache"], "--only no-cache: give --prompt and --gen"),
        (["llama3-70b", "--only", "snapkv"], "--only snapkv: give --prompt and --gen"),
        (["llama3-70b", "--window", "2048", "--h2o-budget", "9"], "different eviction policies"),
        (["llama3-70b", "--ctx", "8k", "--window", "9000"], "keeps every token"),
        (["llama3-70b", "--only", "prefix-shared"], "--only prefix-shared: give --prefix-shared"),
        (["llama3-70b", "llama3-70b"], "given twice"),
        (["llama3-70b", "meta-llama/Meta-Llama-3-70B"], "given twice"),
        (["llama3-70b", "--prompt", "1000"], "--prompt and --gen: give both"),
        (["llama3-70b", "--prompt", "1k,2k", "--gen", "1"], "--prompt: give one length"),
        (["llama3-70b", "--prompt", "0", "--gen", "1"], "--prompt: invalid context '0'"),
        (["llama3-70b", "--prompt", "1", "--gen", "x"], "--gen: invalid context 'x'"),
        (["llama3-70b", "--tp", "2"], "--tp: it describes the GPUs; give --gpus too"),
        (["llama3-70b", "--weight-dtype", "fp8"], "--weight-dtype: it describes the GPUs"),
        (["llama3-70b", "--ctx", "8k,32k"], "--ctx: compare sets techniques side by side"),
        (["llama3-70b", "--prefix-shared", "100"], "--prefix-shared: a shared prefix saves"),
        (["llama3-70b", "--batch", "8"], "--batch: without --gpus it only spreads"),
        (["deepseek-v3", "--kv-heads", "8"], "--kv-heads: deepseek-v3 has no KV heads"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(runner: CliRunner, args: list[str], needle: str) -> None:
    refused(runner, ["compare", *args], needle)


# ------------------------------------------------------------------ properties


@given(prompt=st.integers(0, 10**6), gen=st.integers(1, 10**4))
def test_no_cache_never_costs_fewer_passes(prompt: int, gen: int) -> None:
    with_cache = token_passes_with_cache(prompt, gen)
    without = token_passes_without_cache(prompt, gen)
    assert without >= with_cache
    assert without - with_cache == (gen - 1) * prompt + gen * (gen - 1) // 2


@settings(max_examples=50, deadline=None)
@given(
    context=st.integers(1, 1 << 20),
    share=st.floats(0, 1),
    batch=st.integers(1, 1000),
    model_id=st.sampled_from(["llama3.1-8b", "gemma3-27b", "jamba-v0.1", "deepseek-v3"]),
)
def test_sharing_a_prefix_never_costs_more(
    context: int, share: float, batch: int, model_id: str
) -> None:
    model = registry_model(model_id)
    cache = registry_deployment(model_id).cache
    prefix = int(context * share)
    plain = cache_cost(model, cache, context)
    shared = cache_cost(model, cache, context, prefix_shared_tokens=prefix, batch=batch)
    assert plain.bytes_per_sequence == kv_bytes_per_sequence(model, context, cache)
    assert shared.bytes_per_sequence <= plain.bytes_per_sequence
    if batch == 1:
        assert shared.bytes_per_sequence == plain.bytes_per_sequence


def test_a_context_beyond_a_models_maximum_is_warned_of(runner: CliRunner) -> None:
    out = run_json(runner, "compare", "llama3-70b", "llama3.1-8b", "--ctx", "128k")
    (warning,) = out["warnings"]
    assert warning.startswith("llama3-70b: context 131,072 is beyond its maximum context of 8,192")
    assert "warnings" not in run_json(runner, "compare", "llama3.1-8b", "--ctx", "128k")


def test_the_page_lists_every_row_with_its_category() -> None:
    """docs/commands/compare.md's table of rows is TECHNIQUES: every row, in its order, with
    its category."""
    import re
    from pathlib import Path

    from kvcalc.techniques import TECHNIQUES

    page = (Path(__file__).resolve().parents[1] / "docs" / "commands" / "compare.md").read_text()
    rows = re.findall(r"^\| (`[^|]+`) \| (lossless|lossy|needs retraining) \|", page, re.M)
    listed = [
        (name, category) for names, category in rows for name in re.findall(r"`([^`]+)`", names)
    ]
    assert listed == [(t.name, t.category) for t in TECHNIQUES]
