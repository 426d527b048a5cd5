"""The eviction options through `size`, `batch` and `decode`: what each shows (tokens held, the
lossy note, the JSON keys) and every refusal (one line, exit 2)."""

from __future__ import annotations

import pytest
from report_check import SEED, refused, run_json
from typer.testing import CliRunner

from kvcalc.cli.app import app

#: Llama-3-70B's 320 KiB per token (seed 004).
LLAMA70_TOKEN = 327_680


def test_size_json_states_the_policy_and_the_tokens_held(runner: CliRunner) -> None:
    out = run_json(runner, "size", "llama3-70b", "--ctx", "8k,100k", "--sinks", "4",
                  "--recent", "1020")
    assert out["eviction"]["policy"] == "streamingllm"
    assert out["eviction"]["lossy"] is True
    assert out["eviction"]["parameters"] == {"sinks": 4, "recent": 1020}
    assert "cannot be recalled" in out["eviction"]["consequence"]
    for context in out["contexts"]:
        assert context["tokens_held"] == 1024
        assert context["kv_bytes_per_sequence"] == 1024 * LLAMA70_TOKEN  # 320 MiB


def test_size_table_shows_tokens_held_and_the_lossy_note(runner: CliRunner) -> None:
    result = runner.invoke(
        app, ["size", "llama3-70b", "--ctx", "100k", "--sinks", "4", "--recent", "1020"],
        env={"COLUMNS": "80"},
    )
    assert result.exit_code == 0, result.stderr
    assert "StreamingLLM 4 sinks + 1,020 recent" in result.stdout
    assert "tokens held:  1,024 of 102,400" in result.stdout
    assert "lossy:" in result.stdout
    assert "335,544,320" in result.stdout


def test_size_without_a_policy_holds_every_token(runner: CliRunner) -> None:
    out = run_json(runner, "size", "llama3-70b", "--ctx", "8k")
    assert out["eviction"] == {"policy": "none", "lossy": False, "consequence": None,
                               "parameters": {}}
    assert out["contexts"][0]["tokens_held"] == 8192


def test_keep_ratio_and_fp8_compose(runner: CliRunner) -> None:
    out = run_json(runner, "size", "llama3-70b", "--ctx", "100000", "--keep-ratio", "0.5",
                  "--kv-dtype", "fp8")
    assert out["contexts"][0]["tokens_held"] == 50_000
    assert out["contexts"][0]["kv_bytes_per_sequence"] == 50_000 * LLAMA70_TOKEN // 2


def test_batch_under_streamingllm_fits_as_many_at_128k_as_at_8k(runner: CliRunner) -> None:
    out = run_json(runner, "batch", "llama3-70b", *SEED, "--ctx", "8k,128k", "--sinks", "4",
                  "--recent", "1020")
    # 54.5 GB per GPU // (1,024 tokens x 40,960 bytes per GPU); 162 and 10 without eviction.
    assert [c["max_batch"] for c in out["contexts"]] == [1299, 1299]
    assert [c["tokens_held"] for c in out["contexts"]] == [1024, 1024]
    assert out["eviction"]["policy"] == "streamingllm"
    assert out["max_context_at_batch_1"] is None


def test_batch_with_snapkv_sizes_prompt_plus_generated(runner: CliRunner) -> None:
    out = run_json(runner, "batch", "llama3-70b", *SEED, "--snapkv-budget", "1024",
                  "--prompt", "32k", "--gen", "1k")
    (context,) = out["contexts"]
    assert context["context_tokens"] == 32_768 + 1024
    assert context["tokens_held"] == 2048
    assert context["kv_bytes_per_sequence_per_gpu"] == 2048 * LLAMA70_TOKEN // 8
    assert out["eviction"]["parameters"] == {
        "snapkv_budget": 1024, "observation_window": 32, "prompt": 32_768, "gen": 1024
    }


def test_decode_reads_only_the_kept_tokens(runner: CliRunner) -> None:
    out = run_json(runner, "decode", "llama3-70b", *SEED, "--ctx", "8k", "--batch", "162",
                  "--h2o-budget", "2048")
    (step,) = out["contexts"]
    assert step["tokens_held"] == 2048
    assert step["kv_bytes_read"] == 162 * 2048 * LLAMA70_TOKEN
    assert out["eviction"]["policy"] == "h2o"


def test_a_context_the_policy_does_not_reach_is_noted(runner: CliRunner) -> None:
    result = runner.invoke(app, ["size", "llama3-70b", "--ctx", "2k,8k", "--window", "4096"])
    assert result.exit_code == 0, result.stderr
    assert result.stderr.strip() == (
        "warning: sliding window of 4,096 tokens evicts nothing at 2,048 tokens"
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--ctx", "1024", "--sinks", "4", "--recent", "1020"], "no eviction happens"),
        (["--ctx", "4k", "--window", "8192"], "no eviction happens"),
        (["--ctx", "8k", "--keep-ratio", "0"], "--keep-ratio: 0 is not a fraction in (0, 1]"),
        (["--ctx", "8k", "--keep-ratio", "1.5"], "--keep-ratio: 1.5 is not a fraction"),
        (["--ctx", "8k", "--keep-ratio", "nan"], "'--keep-ratio': 'nan' is not a finite number"),
        (["--ctx", "8k", "--keep-ratio", "1"], "no eviction happens"),
        (["--ctx", "8k", "--window", "4096", "--h2o-budget", "2048"],
         "--window and --h2o-budget: window and h2o are different eviction policies"),
        (["--ctx", "8k", "--observation-window", "16"],
         "--observation-window: applies to SnapKV only; give --snapkv-budget too"),
        (["--snapkv-budget", "1024"], "give --prompt and --gen lengths"),
        (["--snapkv-budget", "1024", "--prompt", "32k"], "give --prompt and --gen lengths"),
        (["--snapkv-budget", "1024", "--prompt", "32k", "--gen", "1k", "--ctx", "8k"],
         "--ctx: with --snapkv-budget the context is --prompt + --gen"),
        (["--snapkv-budget", "32", "--prompt", "32k", "--gen", "1k"],
         "--snapkv-budget and --observation-window: the budget (32) must exceed"),
        (["--snapkv-budget", "64q", "--prompt", "32k", "--gen", "1k"],
         "--snapkv-budget: invalid token count '64q': use a whole number of tokens such as"),
        (["--snapkv-budget", "64k", "--prompt", "32k", "--gen", "1k"], "no eviction happens"),
        (["--snapkv-budget", "65536", "--prompt", "32k", "--gen", "1k"], "no eviction happens"),
        (["--ctx", "8k", "--sinks", "4"], "--sinks: StreamingLLM keeps sinks and recent"),
        (["--ctx", "8k", "--gen", "1k"], "--gen: applies to SnapKV only"),
    ],
)
def test_bad_eviction_input_is_one_line_and_exit_2(
    runner: CliRunner, args: list[str], expected: str
) -> None:
    for command in (["size", "llama3-70b"], ["batch", "llama3-70b", *SEED]):
        refused(runner, [*command, *args], expected)


def test_a_model_that_already_holds_less_is_refused(runner: CliRunner) -> None:
    # Mistral-7B-v0.1 slides every layer over 4,096 tokens: an 8,192 window changes nothing.
    line = refused(runner, ["size", "mistral-7b-v0.1", "--ctx", "32k", "--window", "8192"])
    assert "already holds" in line and "no eviction happens" in line


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_serving_engines_refuse_a_policy(runner: CliRunner, engine: str) -> None:
    for command in ("batch", "decode"):
        line = refused(runner, [command, "llama3.1-8b", "--gpus", "h100", "--engine", engine,
                                "--window", "4096"])
        assert "--window:" in line and "does not evict" in line


def test_the_registry_table_and_a_shared_prefix_are_refused(runner: CliRunner) -> None:
    line = refused(runner, ["batch", "--gpus", "8xH100", "--window", "4096"])
    assert "name the MODEL" in line
    line = refused(runner, ["batch", "llama3-70b", *SEED, "--ctx", "8k", "--prefix-shared",
                            "1024", "--sinks", "4", "--recent", "1020"])
    assert line.startswith("Error: --prefix-shared and --sinks and --recent:")
