"""Options that would be silently ignored are refused, with one line and exit 2."""

from __future__ import annotations

import pytest
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
