"""`kvcalc models` and `kvcalc models --check`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from kvcalc.cli.app import app

REGISTRY = Path(__file__).parent.parent / "model_configs"


def test_models_json_lists_every_registry_file(runner: CliRunner) -> None:
    result = runner.invoke(app, ["models", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["models"]
    assert {r["id"] for r in rows} == {p.stem for p in (REGISTRY / "models").glob("*.yaml")}
    llama = next(r for r in rows if r["id"] == "llama3-70b")
    assert llama["kv_bytes_per_token_bf16"] == 327_680
    assert llama["attention"] == "full"
    assert llama["kv_heads"] == "8"


def test_models_table(runner: CliRunner) -> None:
    result = runner.invoke(app, ["models"])
    assert result.exit_code == 0
    assert "llama3-70b" in result.stdout
    assert "320.0" in result.stdout


def test_check_passes_on_the_bundled_registry(runner: CliRunner) -> None:
    result = runner.invoke(app, ["models", "--check"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("ok: ")


def test_check_fails_on_bad_data_naming_file_and_field(runner: CliRunner, tmp_path: Path) -> None:
    shutil.copytree(REGISTRY / "models", tmp_path / "models")
    bad = tmp_path / "models" / "llama3-70b.yaml"
    bad.write_text(bad.read_text().replace("vocab_size: 128256", "vocab_size: 0"))
    result = runner.invoke(app, ["models", "--check", "--registry", str(tmp_path)])
    assert result.exit_code == 2
    assert "llama3-70b.yaml: architecture.vocab_size:" in result.stderr
    assert "1 problem(s)" in result.stderr


def test_check_flags_a_name_used_twice(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    text = (REGISTRY / "models" / "llama3-70b.yaml").read_text()
    (tmp_path / "models" / "llama3-70b.yaml").write_text(text)
    (tmp_path / "models" / "copy.yaml").write_text(text.replace("id: llama3-70b", "id: copy"))
    result = runner.invoke(app, ["models", "--check", "--registry", str(tmp_path)])
    assert result.exit_code == 2
    assert "already used" in result.stderr


def test_missing_registry_directory(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["models", "--registry", str(tmp_path / "nowhere")])
    assert result.exit_code == 2
    assert "registry directory not found" in result.stderr
