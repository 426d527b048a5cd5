"""One JSON vocabulary (docs/json.md): every command's real output validates against the schema
docs/schema/ holds for it (no key undeclared, none missing, each of its type), the checked-in
schemas and page are the generated ones, a key has one type and one unit in every command, and
every CSV column is a key of the command's JSON."""

from __future__ import annotations

import csv
import io
import json
import re
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.render import schema
from kvcalc.render.report import SCHEMA_VERSION
from kvcalc.render.vocabulary import COMMANDS, VOCABULARY, SchemaVersion

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
CALIBRATE = FIXTURES / "calibrate"

SPEC = """\
deployments:
  - name: seed
    model: llama3-70b
    gpus: 8xH100
    ctx: 8k
    require: {min_batch: 100, max_tpot_ms: 100, max_ttft_ms: 5000, max_kv_fraction: 0.9}
  - name: small
    model: llama3.1-8b
    gpus: h100
    engine: vllm
    require: {min_context: 8k}
"""

#: One run per shape of every command, with the cases that change a document's keys: a model
#: that does not fit, an engine's pool too small, warnings, no GPUs, the roofline, eviction.
RUNS: list[tuple[str, list[str], int]] = [
    ("size", ["size", "llama3-70b", "--ctx", "8k,128k"], 0),
    ("size", ["size", "jamba-v0.1", "--ctx", "8k", "--batch", "4"], 0),
    ("size", ["size", "llama3.1-8b", "--snapkv-budget", "1024", "--prompt", "32k",
              "--gen", "1k"], 0),
    ("batch", ["batch", "llama3-70b", "--gpus", "8xH100"], 0),
    ("batch", ["batch", "llama3.1-8b", "--gpus", "h100", "--ctx", "8k,1m"], 1),
    ("batch", ["batch", "deepseek-v3", "--gpus", "h100"], 1),
    ("batch", ["batch", "--gpus", "8xH100", "--ctx", "8k,128k"], 0),
    ("batch", ["batch", "--gpus", "h100", "--ctx", "8k", "--as", "mqa"], 0),
    ("batch", ["batch", "llama3.1-8b", "--gpus", "8xH100", "--tp", "2", "--engine", "vllm"], 0),
    ("batch", ["batch", "llama3-70b", "--gpus", "h100", "--engine", "vllm"], 1),
    ("batch", ["batch", "gemma3-27b", "--gpus", "h100", "--engine", "vllm", "--ctx", "8k"], 0),
    ("batch", ["batch", "llama3.1-8b", "--gpus", "h100", "--engine", "sglang"], 0),
    # SGLang serves Jamba (Mamba-1) up to 0.5.9.
    ("batch", ["batch", "jamba-v0.1", "--gpus", "2xH100", "--engine", "sglang",
               "--sglang-version", "0.5.9"], 0),
    ("batch", ["batch", "llama3-70b", "--gpus", "h100", "--engine", "sglang"], 1),
    ("batch", ["batch", "llama3.1-8b", "--gpus", "8xH100", "--tp", "2", "--engine", "trtllm"], 0),
    ("batch", ["batch", "llama3-70b", "--gpus", "h100", "--engine", "trtllm"], 1),
    ("batch", ["batch", "llama3.1-8b", "--gpus", "h100", "--engine", "trtllm", "--ctx", "1m"], 1),
    ("decode", ["decode", "llama3-70b", "--gpus", "8xH100", "--ctx", "8k,32k"], 0),
    ("decode", ["decode", "llama3-8b", "--gpus", "2xapple-m4-max", "--ctx", "1k"], 0),
    ("decode", ["decode", "deepseek-v3", "--gpus", "8xH100", "--batch", "1"], 1),
    ("decode", ["decode", "llama3.1-8b", "--gpus", "h100", "--engine", "vllm"], 0),
    ("sweep", ["sweep", "llama3.1-8b", "llama3-70b", "--gpus", "8xH100", "--ctx", "8k..32k:2"], 0),
    ("sweep", ["sweep", "llama3-70b", "--gpus", "8xH100", "--ctx", "128k", "--batch", "4..64"], 0),
    ("sweep", ["sweep", "llama3-70b", "--gpus", "h100", "--ctx", "8k"], 1),
    ("plan", ["plan", "llama3-70b", "--users", "100", "--ctx", "16k", "--max-tpot", "50ms"], 0),
    ("plan", ["plan", "llama3-70b", "--users", "100", "--ctx", "16k", "--roofline"], 0),
    ("plan", ["plan", "qwen3-30b-a3b", "--users", "8", "--price", "h100=2.5,mi300x=1"], 0),
    ("compare", ["compare", "llama3-70b", "--ctx", "32k"], 0),
    ("compare", ["compare", "llama3-70b", "llama3.1-8b", "--gpus", "8xH100", "--ctx", "32k"], 0),
    ("compare", ["compare", "llama3.1-8b", "--ctx", "8k", "--prompt", "4k", "--gen", "1k"], 0),
    ("offload", ["offload", "llama3.1-8b", "--gpus", "h100"], 0),
    ("offload", ["offload", "llama3-70b", "--gpus", "8xH100", "--ctx", "128k"], 0),
    ("calibrate", ["calibrate", str(CALIBRATE / "vllm-0.19.0-llama3.1-8b-h100-pp2.log"),
                   "--gpus", "h100"], 0),
    ("calibrate", ["calibrate", str(CALIBRATE / "sglang-0.4.1-llama3.1-8b-h100-tp1.log"),
                   "--gpus", "h100"], 0),
    ("calibrate", ["calibrate", str(CALIBRATE / "vllm-0.24.0-qwen3.6-35b-a3b-rtx5090-tp1.log"),
                   "--gpus", "rtx-5090", "--model", "qwen3.6-35b-a3b"], 0),
    ("models", ["models"], 0),
    ("models", ["models", "--check"], 0),
    ("gpus", ["gpus"], 0),
    ("gpus", ["gpus", "--check"], 0),
    ("import-hf", ["import-hf", str(FIXTURES / "hf" / "qwen3-8b"), "--hf-repo", "org/m"], 0),
]


def ids(run: tuple[str, list[str], int]) -> str:
    return " ".join(run[1][:6])


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner()


def document(runner: CliRunner, args: list[str], code: int, fmt: str = "json") -> Any:
    result = runner.invoke(app, [*args, "--format", fmt])
    assert result.exit_code == code, (result.stdout, result.stderr)
    return json.loads(result.stdout) if fmt == "json" else result.stdout


@pytest.mark.parametrize("run", RUNS, ids=ids)
def test_real_output_validates_against_its_schema(
    runner: CliRunner, run: tuple[str, list[str], int]
) -> None:
    command, args, code = run
    out = document(runner, args, code)
    schema.validate(command, out)
    if command in schema.REGISTRY_FORMATS:
        assert "schema_version" not in out  # a registry file, as the registry schema holds it
    else:
        assert next(iter(out)) == "schema_version" and out["schema_version"] == SCHEMA_VERSION


def test_a_spec_check_validates_and_so_does_yaml(runner: CliRunner, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    out = document(runner, ["check", str(spec)], 0)
    schema.validate("check", out)
    assert [d["deployment"] for d in out["deployments"]] == ["seed", "small"]
    for example in ("capacity.yaml", "capacity-fails.yaml"):
        example_out = runner.invoke(app, ["check", str(ROOT / "examples" / example), "-f", "json"])
        schema.validate("check", json.loads(example_out.stdout))
    text = document(runner, ["batch", "llama3-70b", "--gpus", "8xH100"], 0, "yaml")
    schema.validate("batch", yaml.safe_load(text))


def test_the_schema_refuses_an_unknown_a_missing_or_a_mistyped_key(runner: CliRunner) -> None:
    out = document(runner, ["batch", "llama3-70b", "--gpus", "8xH100", "--ctx", "8k"], 0)
    schema.validate("batch", out)
    for broken in (
        {**out, "max_sequences": 1},  # a key no declaration names
        {k: v for k, v in out.items() if k != "kv_tokens_capacity"},
        {**out, "gpus": out["gpus"]["label"]},  # the old string
        {**out, "schema_version": 1},
        {**out, "contexts": [{**out["contexts"][0], "max_batch": "12"}]},
    ):
        with pytest.raises(ValidationError):
            schema.validate("batch", broken)


def test_the_checked_in_schemas_and_page_are_the_generated_ones() -> None:
    assert schema.stale() == [], "run python -m kvcalc.render.schema --write"
    on_disk = {p.name for p in schema.SCHEMA_DIR.glob("*.json")}
    assert on_disk == {f"{c}.json" for c in schema.commands()}


def test_a_key_has_one_type_wherever_it_appears() -> None:
    usage = schema.key_usage()
    mixed = {k: {s: sorted(c) for s, c in v.items()} for k, v in usage.items() if len(v) > 1}
    assert mixed == {}
    # Every key has one unit and one meaning, and the vocabulary names no key no command has.
    assert sorted(set(usage) - set(VOCABULARY)) == []
    assert sorted(set(VOCABULARY) - set(usage)) == []


def test_the_same_quantity_has_the_same_key_in_every_command() -> None:
    usage = schema.key_usage()

    def commands(key: str) -> set[str]:
        return set().union(*usage[key].values())

    # The keys issue 16 names, where each command reports the quantity.
    assert commands("kv_bytes_per_token") >= {"size", "compare"}
    assert commands("kv_bytes_per_sequence") >= {"size", "sweep", "compare", "offload"}
    assert commands("max_batch") >= {"batch", "sweep", "plan", "compare", "offload"}
    assert commands("tpot_seconds") == commands("roofline_tpot_seconds")
    assert commands("tpot_seconds") == {"decode", "sweep", "plan", "compare"}
    assert commands("gpus") == {
        "batch", "decode", "sweep", "plan", "compare", "offload", "check", "calibrate"
    }
    # The old names are gone from every document.
    old = {"bytes_per_sequence", "max_sequences", "concurrency", "tpot_estimate_seconds",
           "ttft_estimate_seconds", "tokens_per_second_estimate", "gpu_count", "steps",
           "results", "does_not_fit", "prefix_bytes", "sequences"}  # fmt: skip
    assert old & set(usage) == set()
    units = {VOCABULARY[k].unit for k in usage if k.endswith("_bytes") or "_bytes_" in k}
    assert units <= {"bytes", "bytes/s", "MiB"}
    assert {VOCABULARY[k].unit for k in usage if k.endswith("_seconds")} == {"seconds"}


def test_a_gpu_set_id_is_what_gpus_takes(runner: CliRunner) -> None:
    from kvcalc.registry.gpus import all_gpus, parse_gpu_set
    from kvcalc.render.layout import gpus_payload

    for gpu in all_gpus():
        gpus = parse_gpu_set(f"3x{gpu.id}")
        payload = gpus_payload(gpus)
        again = parse_gpu_set(payload["id"])
        assert (again.accelerator.id, again.count) == (payload["accelerator"], 3) == (gpu.id, 3)
        assert payload["label"] == str(gpus)
    # What plan answers runs as written in the other commands.
    best = document(runner, ["plan", "llama3-70b", "--users", "10", "--gpus", "mi300x"], 0)
    gpus = best["layouts"][0]["gpus"]
    fit = document(runner, ["batch", "llama3-70b", "--gpus", gpus["id"], "--ctx", "8k"], 0)
    assert fit["gpus"] == gpus


def test_the_schema_version_is_one_figure() -> None:
    assert typing.get_args(SchemaVersion) == (SCHEMA_VERSION,)
    text = schema.JSON_MD.read_text()
    assert f"This is version **{SCHEMA_VERSION}**" in text
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"schema_version {SCHEMA_VERSION}" in changelog


def flat_keys(value: Any) -> set[str]:
    """Every key of a document at any depth, nested objects also as ``parent_child``."""
    keys: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            keys.add(key)
            if isinstance(item, dict):
                keys |= {f"{key}_{sub}" for sub in flat_keys(item)}
            keys |= flat_keys(item)
    elif isinstance(value, list):
        for item in value:
            keys |= flat_keys(item)
    return keys


#: CSV columns that are no JSON key, each for a reason: the registry table's one column per
#: context (its JSON has them under each row's contexts); --check's one row per problem (its
#: JSON: the list ``problems``).
CSV_ONLY = re.compile(r"max_batch_at_\d+|problem")


@pytest.mark.parametrize("run", [r for r in RUNS if r[0] != "import-hf"], ids=ids)
def test_every_csv_column_is_a_json_key(
    runner: CliRunner, run: tuple[str, list[str], int]
) -> None:
    _, args, code = run
    keys = flat_keys(document(runner, args, code))
    table = list(csv.reader(io.StringIO(document(runner, args, code, "csv"))))
    if len(table) < 2:
        return  # no row (nothing fits, no problem): the header names what a row would hold
    assert [h for h in table[0] if h not in keys and not CSV_ONLY.fullmatch(h)] == []


def test_every_command_has_a_schema() -> None:
    result = CliRunner().invoke(app, ["--help"])
    listed = re.findall(r"^  (\S+)\s", result.stdout.split("Commands:")[1], re.MULTILINE)
    assert set(listed) == set(schema.commands()) == {*COMMANDS, "import-hf"}


def test_the_page_counts_batch_s_shapes() -> None:
    """docs/json.md says how many shapes `batch` has and names an `--engine` for each engine
    of its own shape (every engine but the budget formula, whose shape is the one model's)."""
    from kvcalc.engine.serving import DEFAULT_ENGINE, ENGINE_NAMES
    from kvcalc.render.schema import INTRO
    from kvcalc.render.vocabulary import COMMANDS

    words = {4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}
    shapes = COMMANDS["batch"]
    own = [name for name in ENGINE_NAMES if name != DEFAULT_ENGINE]
    text = " ".join(INTRO.split())
    named = ", ".join(f"`--engine {name}`" for name in own)
    assert f"`batch` has {words[len(shapes)]} shapes: one model, the whole registry, {named};" in (
        text
    )
    assert len(shapes) == 2 + len(own)
