"""Memory sizes need a byte unit: ``140B`` is how the field writes a parameter count."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine.units import GB, MIN_BARE_BYTES, BareBytesError, UnitError, parse_bytes


@pytest.mark.parametrize("text", ["140B", "70b", "0.5B", "671 B", "1048575B", "1048576.0B"])
def test_a_bare_b_that_reads_as_a_parameter_count_is_refused(text: str) -> None:
    with pytest.raises(BareBytesError, match="parameter count"):
        parse_bytes(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1048576B", MIN_BARE_BYTES),
        # An H100's memory as torch.cuda.mem_get_info reports it, in bytes.
        ("85020639232B", 85_020_639_232),
        ("140GB", 140 * GB),
        ("140GiB", 140 << 30),
    ],
)
def test_whole_byte_counts_and_units_are_read(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


def test_a_bare_number_is_still_refused_as_gb_or_gib() -> None:
    with pytest.raises(UnitError, match="give a number and a unit") as caught:
        parse_bytes("140")
    assert not isinstance(caught.value, BareBytesError)


def test_weights_in_bare_b_is_refused_with_both_fixes(runner: CliRunner) -> None:
    result = runner.invoke(
        app, ["batch", "llama3-70b", "--gpus", "2xH100", "--weights", "140B"]
    )
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: --weights: invalid size '140B'")
    assert "140GB" in lines[0] and "leave --weights out" in lines[0]
    assert "Traceback" not in result.output


def test_another_size_option_in_bare_b_names_only_the_unit_fix(runner: CliRunner) -> None:
    result = runner.invoke(
        app, ["batch", "llama3-70b", "--gpus", "2xH100", "--gpu-memory", "80B"]
    )
    assert result.exit_code == 2
    assert "--gpu-memory: invalid size '80B'" in result.stderr
    assert "80GB" in result.stderr and "--weights" not in result.stderr


@pytest.mark.parametrize("text", ["80Gb", "64Gb", "1Tb", "512Mb", "80 Kb"])
def test_a_size_in_bits_is_refused(text: str) -> None:
    # --internode 64Gb/s is 8 GB/s (bits, as NICs are sold), but --tier cpu:512GB@64Gb/s read
    # 64 GB/s and --kv-memory 80Gb 80 GB: the same unit, 8x apart.
    with pytest.raises(UnitError, match="is bits, as in 400Gb/s; give bytes"):
        parse_bytes(text)


@pytest.mark.parametrize("text", ["80gb", "80GB", "80gib", "80GiB", "512mb", "1tb"])
def test_a_size_in_bytes_in_any_case_is_read(text: str) -> None:
    assert parse_bytes(text) > 0


def test_a_tier_rate_in_bits_is_refused_not_read_as_bytes(runner: CliRunner) -> None:
    result = runner.invoke(
        app, ["offload", "llama3-8b", "-g", "h100", "--tier", "cpu:512GB@64Gb/s"]
    )
    assert result.exit_code == 2, result.stdout
    assert "--tier cpu:512GB@64Gb/s: invalid size '64Gb': Gb is bits" in result.stderr
