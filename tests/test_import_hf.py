"""`kvcalc import-hf`: the registry entry it writes loads back to the imported spec, and its
refusals are one line each."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from report_check import usage_error
from specs import FIXTURES, HUB_CACHE, QWEN_COMMIT, QWEN_INSTRUCT
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine.spec import ModelSpec
from kvcalc.registry.hf import load_hf_config
from kvcalc.registry.load import load_model_file, resolve_model

#: Every config.json fixture, as "hf/<registry id>" or "multimodal/<name>".
HF_FIXTURES = sorted(
    f"{p.parent.name}/{p.name}"
    for folder in ("hf", "multimodal")
    for p in (FIXTURES / folder).iterdir()
    if (p / "config.json").is_file()
)


def import_hf(runner: CliRunner, *args: str) -> Any:
    return runner.invoke(app, ["import-hf", *args])


def write_entry(directory: Path, text: str) -> Path:
    """Save import-hf's YAML as a registry file, named by its id as the registry requires."""
    entry = yaml.safe_load(text)
    path = directory / "models" / f"{entry['id']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def same_model(spec: ModelSpec, model_id: str, name: str) -> ModelSpec:
    return replace(spec, id=model_id, name=name)


@pytest.mark.parametrize("folder", HF_FIXTURES)
def test_written_entry_loads_to_the_imported_spec(
    runner: CliRunner, tmp_path: Path, folder: str
) -> None:
    config = FIXTURES / folder
    result = import_hf(runner, str(config), "--hf-repo", "org/Some-Model", "--name", "imported")
    assert result.exit_code == 0, result.output
    path = write_entry(tmp_path, result.stdout)
    assert path.name == "imported.yaml"
    loaded = load_model_file(path)
    assert loaded.verification == "unreviewed"
    assert loaded.source == [str(config / "config.json")]
    assert loaded.to_spec() == load_hf_config(config, "imported", "Some-Model")
    check = runner.invoke(app, ["models", "--check", "--registry", str(tmp_path)])
    assert check.exit_code == 0, check.output


def test_repo_id_entry_is_pinned_to_the_commit(
    runner: CliRunner, tmp_path: Path, fixture_cache: Path
) -> None:
    result = import_hf(runner, QWEN_INSTRUCT)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""  # the Instruct repo is not a registry name
    path = write_entry(tmp_path, result.stdout)
    loaded = load_model_file(path)
    assert (loaded.id, loaded.name, loaded.hf_repo) == (
        "qwen2.5-7b-instruct",
        "Qwen2.5-7B-Instruct",
        QWEN_INSTRUCT,
    )
    assert loaded.source == [
        f"https://huggingface.co/{QWEN_INSTRUCT}/blob/{QWEN_COMMIT}/config.json"
    ]
    assert loaded.family == "qwen"
    assert loaded.max_context == 32_768
    hub = resolve_model(QWEN_INSTRUCT)
    assert loaded.to_spec() == same_model(hub, loaded.id, loaded.name)


def test_name_sets_the_id(runner: CliRunner, fixture_cache: Path) -> None:
    result = import_hf(runner, f"{QWEN_INSTRUCT}@main", "--name", "qwen2.5-7b-it", "-f", "json")
    assert result.exit_code == 0, result.output
    entry = json.loads(result.stdout)
    assert entry["id"] == "qwen2.5-7b-it"
    assert entry["hf_repo"] == QWEN_INSTRUCT


def test_json_is_the_yaml_entry(runner: CliRunner, fixture_cache: Path) -> None:
    as_json = json.loads(import_hf(runner, QWEN_INSTRUCT, "-f", "json").stdout)
    assert as_json == yaml.safe_load(import_hf(runner, QWEN_INSTRUCT).stdout)


def test_the_name_or_path_a_config_states_is_its_repo(runner: CliRunner, tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "hf" / "qwen3-8b" / "config.json").read_text())
    config = tmp_path / "local" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({**data, "_name_or_path": "someone/Qwen3-8B-Tuned"}))
    entry = json.loads(import_hf(runner, str(config), "-f", "json").stdout)
    assert (entry["id"], entry["name"], entry["hf_repo"]) == (
        "qwen3-8b-tuned",
        "Qwen3-8B-Tuned",
        "someone/Qwen3-8B-Tuned",
    )


@pytest.mark.parametrize(
    ("folder", "family"),
    [("mixtral-8x7b", "mistral"), ("gpt-oss-20b", "gpt-oss"), ("falcon-7b-rw", "falcon"),
     ("kimi-k2", "kimi"), ("gemma3-27b", "gemma"), ("qwen3-235b-a22b", "qwen"),
     ("llama4-scout", "llama"), ("granite-4.0-h-tiny", "granite"),
     ("deepseek-v3.2-exp", "deepseek")],
)  # fmt: skip
def test_family_is_the_registry_s(runner: CliRunner, folder: str, family: str) -> None:
    config = FIXTURES / "hf" / folder
    result = import_hf(runner, str(config), "--hf-repo", "org/m", "-f", "json")
    assert json.loads(result.stdout)["family"] == family


def test_a_registry_model_gets_a_warning(runner: CliRunner) -> None:
    config = FIXTURES / "hf" / "qwen2.5-7b"
    result = import_hf(runner, str(config), "--hf-repo", "Qwen/Qwen2.5-7B")
    assert result.exit_code == 0
    (line,) = result.stderr.splitlines()
    assert "'qwen2.5-7b' and 'Qwen/Qwen2.5-7B' already name registry model qwen2.5-7b" in line


def test_table_lists_every_field(runner: CliRunner, fixture_cache: Path) -> None:
    result = runner.invoke(app, ["import-hf", QWEN_INSTRUCT, "-f", "table"], env={"COLUMNS": "80"})
    assert result.exit_code == 0
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    for field in ("hf_repo", "architecture_mixers_full_kv_heads", "max_context"):
        assert field in result.stdout
    assert "32,768" in result.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["llama3-70b"], ("neither a config.json path nor a Hugging Face repo id",)),
        (["org/bad--id"], ("ORG/NAME",)),
        (["org/uncached"], ("HF_HUB_OFFLINE",)),
        ([str(FIXTURES / "hf" / "qwen2.5-7b")], ("--hf-repo", "_name_or_path")),
        ([str(FIXTURES / "hf" / "qwen2.5-7b"), "--hf-repo", "a/b@main"], ("without @revision",)),
        ([str(FIXTURES / "hf" / "qwen2.5-7b"), "--hf-repo", "a--b/c"], ("--hf-repo", "ORG/NAME")),
        ([QWEN_INSTRUCT, "--hf-repo", "a/b"], ("--hf-repo: only for a config.json path",)),
        ([QWEN_INSTRUCT, "--name", "Bad_Name"], ("--name", "lowercase")),
        ([str(FIXTURES / "hf" / "missing"), "--hf-repo", "a/b"], ("no such file",)),
    ],
)
def test_refusals_are_one_line(
    runner: CliRunner, fixture_cache: Path, args: list[str], words: tuple[str, ...]
) -> None:
    usage_error(import_hf(runner, *args), *words)


def test_a_cached_snapshot_path_is_its_repo_at_its_commit(runner: CliRunner) -> None:
    config = HUB_CACHE / "models--Qwen--Qwen2.5-7B-Instruct" / "snapshots" / QWEN_COMMIT
    entry = json.loads(import_hf(runner, str(config), "-f", "json").stdout)
    assert entry["hf_repo"] == QWEN_INSTRUCT
    assert entry["source"] == [
        f"https://huggingface.co/{QWEN_INSTRUCT}/blob/{QWEN_COMMIT}/config.json"
    ]
    assert entry["id"] == "qwen2.5-7b-instruct"


def test_a_registry_repo_id_is_imported_from_the_hub_not_the_registry(
    runner: CliRunner, fixture_cache: Path
) -> None:
    # import-hf reads the repo's own config.json; the registry entry is not a source.
    result = import_hf(runner, "meta-llama/Llama-3.3-70B-Instruct")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert "its config.json is not in the Hugging Face cache" in line
    assert "not a registry name" not in line


def test_a_released_format_is_written_as_weights(runner: CliRunner) -> None:
    # DeepSeek-V3's fp8 [128, 128] blocks and gpt-oss's MXFP4 experts have a registry form.
    for folder, weights in (
        ("deepseek-v3", {"format": "fp8-block"}),
        ("gpt-oss-20b", {"format": "mxfp4", "applies_to": "experts"}),
    ):
        result = import_hf(runner, str(FIXTURES / "hf" / folder), "--hf-repo", "org/M")
        assert result.exit_code == 0, result.output
        entry = yaml.safe_load(result.stdout)
        assert {k: v for k, v in entry["weights"].items() if k != "source"} == weights
    args = (str(FIXTURES / "hf" / "qwen3-8b"), "--hf-repo", "org/M")
    plain = yaml.safe_load(import_hf(runner, *args).stdout)
    assert "weights" not in plain


def test_a_format_without_a_registry_form_is_refused(runner: CliRunner, tmp_path: Path) -> None:
    # Per-channel int8 (a RedHat w8a8 checkpoint) is sized from the config.json itself, but a
    # registry file cannot state it: refused, never written as the bf16 model it is not.
    data = json.loads((FIXTURES / "hf" / "qwen3-8b" / "config.json").read_text())
    weights = {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True}
    data["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}},
        "ignore": ["lm_head"],
    }
    folder = tmp_path / "w8a8"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(data))
    result = import_hf(runner, str(folder), "--hf-repo", "org/M")
    assert result.exit_code == 2
    assert "has no registry weights: form" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_config_missing_a_field_the_formulas_read_is_refused(
    runner: CliRunner, tmp_path: Path
) -> None:
    # It was written as num_layers: 32 (LlamaConfig's default) as if the file said so.
    data = json.loads((FIXTURES / "hf" / "llama3-70b" / "config.json").read_text())
    del data["num_hidden_layers"]
    path = tmp_path / "m" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    for args in (["import-hf", str(path), "--hf-repo", "org/M"], ["size", str(path)]):
        usage_error(
            runner.invoke(app, args), "num_hidden_layers: missing required field", "(32)"
        )


def test_a_documented_default_is_listed_as_unverified_and_warned(runner: CliRunner) -> None:
    result = import_hf(runner, str(FIXTURES / "hf" / "gemma3-27b"), "--hf-repo", "org/G",
                       "--name", "g")
    assert result.exit_code == 0, result.output
    unverified = yaml.safe_load(result.stdout)["unverified"]
    assumed = [line for line in unverified if line.startswith("architecture: ")]
    assert len(assumed) == 1 and "vocab_size 262208" in assumed[0]
    assert "text_config states no max_position_embeddings, sliding_window_pattern" in assumed[0]
    warning = [line for line in result.stderr.splitlines() if "vocab_size 262208" in line]
    assert len(warning) == 1 and warning[0].startswith("warning: g: text_config states no")


def test_every_command_warns_of_the_defaults_an_answer_rests_on(runner: CliRunner) -> None:
    config = str(FIXTURES / "hf" / "falcon-7b")
    result = runner.invoke(app, ["batch", config, "--gpus", "1xH100", "--ctx", "2k",
                                 "--format", "json"])
    assert result.exit_code == 0, result.stderr
    (warning,) = json.loads(result.stdout)["warnings"]
    assert "states no tie_word_embeddings, max_position_embeddings" in warning
    assert "FalconConfig's defaults" in warning
    assert f"warning: {warning}" in result.stderr.splitlines()
