"""Options that would be silently ignored are refused, with one line and exit 2."""

from __future__ import annotations

import pytest
from report_check import refused
from typer.testing import CliRunner

from kvcalc.cli.app import app


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["size", "llama3-70b", "--ctx", "8k", "--ctx", "32k"], "--ctx: given 2 times"),
        (["size", "llama3-70b", "-c8k", "--ctx=32k"], "--ctx: given 2 times"),
        (["size", "llama3-70b", "--kv-dtype", "fp8", "--kv-dtype", "bf16"], "--kv-dtype: given 2"),
        (["batch", "llama3-70b", "-g", "8xH100", "--gpus", "4xH100"], "--gpus: given 2 times"),
        (["decode", "llama3-70b", "-g", "8xH100", "--tp", "8", "--tp", "4"], "--tp: given 2 times"),
    ],
)
def test_a_repeated_option_is_refused(runner: CliRunner, args: list[str], needle: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.stdout
    assert result.stderr.strip().splitlines() == [f"Error: {result.stderr.strip()[7:]}"]
    assert needle in result.stderr


def test_a_value_after_the_separator_is_not_an_option(runner: CliRunner) -> None:
    # Only options count: `--` ends them, as in click.
    result = runner.invoke(app, ["size", "--ctx", "8k", "--format", "json", "--", "llama3-70b"])
    assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["size", "deepseek-v3", "--kv-heads", "8"], "--kv-heads: deepseek-v3 has no KV heads"),
        (["size", "deepseek-v3", "--head-dim", "64"], "--head-dim: deepseek-v3 has no KV heads"),
        (["size", "llama3-70b", "--kv-heads", "7"], "64 query heads cannot be grouped over 7"),
    ],
)
def test_a_what_if_that_cannot_apply_is_refused(
    runner: CliRunner, args: list[str], needle: str
) -> None:
    refused(runner, args, needle)


def test_kv_heads_apply_to_the_attention_layers_of_a_hybrid(runner: CliRunner) -> None:
    base = runner.invoke(app, ["size", "jamba-v0.1", "--ctx", "8k", "--format", "json"])
    mqa = runner.invoke(app, ["size", "jamba-v0.1", "--ctx", "8k", "--kv-heads", "1", "-f", "json"])
    assert base.exit_code == mqa.exit_code == 0
    assert base.stdout != mqa.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["gpus", "h100", "--check"], "drop the names (h100)"),
        (["batch", "--gpus", "8xH100", "--weights", "140GB"], "--weights: it is one model's"),
    ],
)
def test_an_option_that_would_be_ignored_is_refused(
    runner: CliRunner, args: list[str], needle: str
) -> None:
    refused(runner, args, needle)
