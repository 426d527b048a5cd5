"""The formatter seam: every format of every converted command parses, tables never cut a number
at 80, 120 or 200 columns, unknown formats exit 2, and the formatters handle edge cases."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

import pytest
import yaml
from report_check import invoke_report, missing_numbers, missing_payload_figures
from typer.testing import CliRunner

from kvcalc.cli.app import ReportFormat, app
from kvcalc.cli.check import CheckFormat
from kvcalc.render.formats import CASE_FORMATS, FORMATTERS, render
from kvcalc.render.report import SCHEMA_VERSION, Column, Report, Section, flatten, number, text

HF_FIXTURES = Path(__file__).parent / "fixtures" / "hf"
#: Every converted command, in the shapes whose layout differs (hybrid, state bytes, batch,
#: several contexts, filtered registry, checks).
COMMANDS = [
    ["size", "llama3-70b", "--ctx", "128k"],
    ["size", "gemma3-27b", "--ctx", "8k,32k,128k", "--batch", "64"],
    ["size", "qwen3-next-80b-a3b", "--ctx", "1m", "--batch", "1000000"],
    ["size", "jamba-v0.1", "--ctx", "256k", "--kv-dtype", "int4"],
    ["size", "llama3-8b", "--ctx", "100,8k", "--kv-dtype", "kivi2"],
    ["size", "deepseek-v3", "--as", "mha", "--ctx", "128k", "--kv-dtype", "int4", "--kv-group",
     "32", "--kv-zero-point"],
    ["models"],
    ["gpus"],
    ["gpus", "h100", "mi300x", "v100"],
    ["models", "--check"],
    ["gpus", "--check"],
    ["batch", "llama3-70b", "--gpus", "8xH100", "--gpu-memory", "80GB", "--weights", "140GB",
     "--reserve", "0.10", "--ctx", "8k,32k,128k"],
    ["batch", "gemma3-27b", "--gpus", "2xH100", "--pp", "2", "--ctx", "1m"],
    ["batch", "--gpus", "8xH100"],
    ["batch", "llama3.1-8b", "--gpus", "h100", "--engine", "vllm", "--ctx", "8k,32k"],
    ["batch", "llama3.1-8b", "--gpus", "h100", "--engine", "sglang", "--ctx", "8k,32k"],
    # SGLang serves Jamba (Mamba-1) up to 0.5.9.
    ["batch", "jamba-v0.1", "--gpus", "2xH100", "--engine", "sglang", "--sglang-version", "0.5.9"],
    ["decode", "llama3-70b", "--gpus", "8xH100", "--ctx", "8k,32k,128k"],
    ["decode", "llama3-70b", "--gpus", "8xH100", "--as", "mha", "--kv-dtype", "kivi2"],
    ["batch", "llama3.1-8b", "--gpus", "h100", "--engine", "vllm", "--kv-dtype", "nvfp4"],
    ["decode", "qwen3-next-80b-a3b", "--gpus", "4xH100", "--ctx", "1m", "--batch", "100000"],
    # The layout notes: tp chosen for the heads; tp across nodes over replicated KV heads.
    ["batch", "qwen2.5-7b", "--gpus", "8xH100", "--engine", "vllm", "--ctx", "8k"],
    ["decode", "llama3-70b", "--gpus", "16xH100", "--tp", "16", "--ctx", "8k"],
    ["sweep", "llama3-70b", "llama3.1-8b", "--gpus", "8xH100", "--gpus", "4xH100", "--ctx",
     "4k..1m"],
    ["sweep", "llama3-70b", "--gpus", "8xH100", "--ctx", "8k,128k", "--batch", "1..64:4"],
    ["sweep", "gemma3-27b", "--gpus", "h100", "--ctx", "1k..1024m:5", "--kv-dtype", "fp8"],
    ["import-hf", str(HF_FIXTURES / "gemma3-27b"), "--hf-repo", "google/gemma-3-27b-it"],
    ["import-hf", str(HF_FIXTURES / "deepseek-v3"), "--hf-repo", "deepseek-ai/DeepSeek-V3"],
    ["size", "gemma3-27b", "--ctx", "8k,128k", "--sinks", "4", "--recent", "1020"],
    ["batch", "jamba-v0.1", "--gpus", "2xH100", "--snapkv-budget", "2048", "--prompt", "128k",
     "--gen", "4k"],
    ["decode", "llama3-70b", "--gpus", "8xH100", "--ctx", "32k,128k", "--keep-ratio", "0.25"],
    ["plan", "llama3-70b", "--users", "100", "--ctx", "16k", "--max-tpot", "50ms",
     "--max-ttft", "2s", "--max-gpus", "16"],
    ["plan", "qwen3-30b-a3b", "--users", "8", "--gpus", "h100,h200,mi300x", "--price",
     "h100=2.5,h200=3.1,mi300x=2", "--kv-dtype", "bf16,fp8", "--roofline"],
    ["compare", "llama3-70b", "--ctx", "128k"],
    ["compare", "llama3-70b", "gemma3-27b", "deepseek-v3", "--ctx", "32k", "--gpus", "8xH100",
     "--prompt", "1000", "--gen", "1000", "--prefix-shared", "1024"],
    ["offload", "llama3.1-8b", "--gpus", "h100", "--ctx", "32k"],
    ["offload", "mistral-7b-v0.1", "--gpus", "a10g", "--tier", "tape:1TB@1MB/s"],
    ["check", str(Path(__file__).parent.parent / "examples" / "capacity.yaml")],
]
WIDTHS = [80, 120, 200]
SEPARATOR = re.compile(r"^\|(?: -{3,}:? \|)+$")


def ids(args: list[str]) -> str:
    return " ".join(args)


def test_every_format_has_a_formatter() -> None:
    assert {f.value for f in ReportFormat} | set(CASE_FORMATS) == set(FORMATTERS)
    assert {f.value for f in CheckFormat} == set(FORMATTERS)
    assert not set(CASE_FORMATS) & {f.value for f in ReportFormat}


@pytest.mark.parametrize("args", COMMANDS, ids=ids)
def test_json_and_yaml_carry_the_same_payload(
    monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    result, report = invoke_report(monkeypatch, args, fmt="json")
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)
    # An object, or a list of objects for a ranking (`plan`).
    assert isinstance(payload, dict) or all(isinstance(row, dict) for row in payload)
    assert payload == json.loads(json.dumps(report.document()))
    result, _ = invoke_report(monkeypatch, args, fmt="yaml")
    assert result.exit_code == 0, result.stderr
    assert yaml.safe_load(result.stdout) == payload


@pytest.mark.parametrize("args", COMMANDS, ids=ids)
def test_csv_has_one_header_and_one_raw_row_per_record(
    monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    result, report = invoke_report(monkeypatch, args, fmt="csv")
    assert result.exit_code == 0, result.stderr
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert rows[0] == report.csv_fields()
    assert len(rows) == 1 + len(report.records)
    for row, record in zip(rows[1:], report.records, strict=True):
        assert len(row) == len(rows[0])
        for cell, value in zip(row, record.values(), strict=True):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                assert cell == str(value)  # unformatted: no separators, no units


@pytest.mark.parametrize("args", COMMANDS, ids=ids)
def test_markdown_has_a_pipe_table_per_section(
    monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    result, report = invoke_report(monkeypatch, args, fmt="markdown")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    separators = [i for i, line in enumerate(lines) if SEPARATOR.match(line)]
    assert len(separators) == len(report.sections)
    for i, section in zip(separators, report.sections, strict=True):
        assert lines[i - 1].startswith("| ")
        assert lines[i - 1].count(" | ") == len(section.columns) - 1
        assert f"### {section.title}" in lines
        assert len(lines) > i + len(section.rows)
    assert missing_numbers(report, result.stdout) == []


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("args", COMMANDS, ids=ids)
def test_table_never_cuts_a_number(
    monkeypatch: pytest.MonkeyPatch, args: list[str], width: int
) -> None:
    result, report = invoke_report(monkeypatch, args, columns=width)
    assert result.exit_code == 0, result.stderr
    assert missing_numbers(report, result.stdout) == []
    assert "…" not in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= width


#: Payload integers a command's table does not show, each for a stated reason.
NOT_IN_TABLE = {
    # The registry-wide table shows the batches per context; the capacity in tokens and the
    # longest single context are in its JSON (and in `kvcalc batch MODEL`).
    "batch --gpus": frozenset({"kv_tokens_capacity", "max_context_at_batch_1"}),
    # vLLM's lines print its concurrency per instance, as its log does; the sequences across
    # the replicas (docs/json.md: max_batch) are in the JSON only.
    "batch qwen2.5-7b --gpus 8xH100 --engine vllm": frozenset({"max_batch", "max_num_seqs"}),
    # vLLM's scheduler cap (--max-num-seqs, default 1024 on an H100) is an input the JSON
    # echoes; the header names it when it is given.
    "batch llama3.1-8b --gpus h100 --engine vllm": frozenset({"max_num_seqs"}),
    # The registry listings show parameters and memory in their units (B, TB/s, TFLOPS).
    "models": None,
    "gpus": None,
    # The table shows rates in their units (GB/s, TFLOPS).
    "offload": frozenset({"bandwidth_bytes_per_s", "prefill_flops_per_second"}),
}


def unshown_keys(args: list[str]) -> frozenset[str] | None:
    for prefix, skip in NOT_IN_TABLE.items():
        if " ".join(args).startswith(prefix):
            return skip
    return frozenset()


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("args", [a for a in COMMANDS if unshown_keys(a) is not None], ids=ids)
def test_table_shows_every_integer_of_its_json(
    monkeypatch: pytest.MonkeyPatch, args: list[str], width: int
) -> None:
    result, report = invoke_report(monkeypatch, args, columns=width)
    skip = unshown_keys(args)
    assert skip is not None
    assert missing_payload_figures(report, result.stdout, skip) == []


def test_a_wide_pipe_keeps_the_table_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    result, _ = invoke_report(monkeypatch, ["models"], columns=200)
    assert "┃ model" in result.stdout


def test_a_narrow_terminal_gets_one_block_per_record(monkeypatch: pytest.MonkeyPatch) -> None:
    result, report = invoke_report(monkeypatch, ["gpus", "h100", "mi300x"], columns=80)
    assert "┃" not in result.stdout
    assert "  memory GiB (label)    79.18 (80 GB)" in result.stdout
    assert missing_numbers(report, result.stdout) == []


# ------------------------------------------------------------------ errors, version, help


@pytest.mark.parametrize("command", [["size", "llama3-70b"], ["models"], ["gpus"],
                                     ["models", "--check"], ["gpus", "--check"],
                                     ["batch", "--gpus", "h100"],
                                     ["decode", "llama3-8b", "--gpus", "h100"],
                                     ["compare", "llama3-8b"],
                                     ["offload", "llama3-8b", "--gpus", "h100"],
                                     ["import-hf", str(HF_FIXTURES / "qwen3-8b")],
                                     ["check", "capacity.yaml"]], ids=ids)
@pytest.mark.parametrize("fmt", ["xml", "JSONL", "", "tabel"])
def test_unknown_format_is_one_line_and_exit_2(
    runner: CliRunner, command: list[str], fmt: str
) -> None:
    result = runner.invoke(app, [*command, "--format", fmt])
    assert result.exit_code == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert "--format" in line
    assert all(f.value in line for f in ReportFormat)


def test_version(runner: CliRunner) -> None:
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"kvcalc {version('kvcalc')}\n"


def test_bare_kvcalc_prints_the_help(runner: CliRunner) -> None:
    result = runner.invoke(app, [])
    assert result.exit_code == 0
    assert result.stdout == runner.invoke(app, ["--help"]).stdout
    assert result.stdout.startswith("Usage: kvcalc")
    for command in ("size", "models", "gpus", "batch", "decode", "compare", "offload",
                    "import-hf"):
        assert re.search(rf"^  {command} ", result.stdout, re.MULTILINE)


def test_cli_uses_typer_public_api_only() -> None:
    package = Path(__file__).parent.parent / "kvcalc"
    offenders = [p.name for p in package.rglob("*.py") if "typer._click" in p.read_text()]
    assert offenders == []


# ------------------------------------------------------------------ check as data


def test_check_json_on_the_bundled_registry(runner: CliRunner) -> None:
    result = runner.invoke(app, ["models", "--check", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["ok"] is True
    assert payload["problems"] == []
    assert payload["files"] == len(list((Path(__file__).parent.parent / "model_configs" /
                                         "models").glob("*.yaml")))


def test_check_json_with_problems_exits_2(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "gpus").mkdir()
    (tmp_path / "gpus" / "h200.yaml").write_text("id: [unclosed\n")
    args = ["gpus", "--check", "--registry", str(tmp_path), "--format", "json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    payload = json.loads(result.stdout)
    assert payload["ok"] is False
    assert payload["files"] == 1
    (problem,) = payload["problems"]
    assert "h200.yaml: invalid YAML" in problem
    assert problem in result.stderr  # diagnostics on stderr in every format


# ------------------------------------------------------------------ formatters


def figures_report(value: float, big: int) -> Report:
    columns = [text("name", "name", "name"), number("big", "big"),
               Column("ratio", lambda r: f"{r['ratio']:.2f}"), text("note", "note")]
    rows = [{"name": "row-1", "big": big, "ratio": value, "note": "a note " * 12}]
    return Report(
        payload={"ratio": value, "values": [value, -value], "big": big},
        records=rows,
        sections=[Section("a title that is long enough to wrap, at a narrow width", columns, rows)],
    )


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_non_finite_numbers_are_null(value: float) -> None:
    report = figures_report(value, 1)
    assert json.loads(render(report, "json", 80)) == {
        "schema_version": SCHEMA_VERSION, "ratio": None, "values": [None, None], "big": 1
    }
    assert yaml.safe_load(render(report, "yaml", 80))["ratio"] is None
    assert list(csv.reader(io.StringIO(render(report, "csv", 80))))[1][2] == ""


@pytest.mark.parametrize("width", [20, 30, 40, 60, 80])
def test_no_width_cuts_a_number(width: int) -> None:
    report = figures_report(0.5, 123_456_789_012_345)
    out = render(report, "table", width)
    assert missing_numbers(report, out) == []
    assert "…" not in out


def test_colour_only_when_asked() -> None:
    report = figures_report(0.5, 1)
    assert "\x1b[" in render(report, "table", 80, True)
    assert "\x1b[" not in render(report, "table", 80, False)


def test_flatten_nested_rows_for_csv() -> None:
    row = {"id": "x", "flops": {"bf16": 1, "fp8": None}, "aliases": ["a", "b"]}
    assert flatten(row) == {"id": "x", "flops_bf16": 1, "flops_fp8": None, "aliases": "a;b"}
    with pytest.raises(TypeError, match="groups"):
        flatten({"groups": [{"kind": "full"}]})


def test_csv_refuses_records_with_other_keys() -> None:
    report = Report(payload={}, records=[{"a": 1}, {"b": 2}])
    with pytest.raises(ValueError, match="differ from the header"):
        render(report, "csv", 80)
