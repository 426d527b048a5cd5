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


# ---------------------------------------------------------------- the listing cache


def listing(runner: CliRunner, *args: str, env: dict[str, str | None]) -> str:
    result = runner.invoke(app, ["models", "--format", "json", *args], env=env)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_cached_rows_print_exactly_what_a_fresh_validation_prints(
    runner: CliRunner, tmp_path: Path
) -> None:
    cache = {"KVCALC_CACHE_DIR": str(tmp_path / "cache")}
    fresh = listing(runner, env={"KVCALC_NO_CACHE": "1"})
    miss = listing(runner, env=cache)
    entries = list((tmp_path / "cache").glob("*.json"))
    assert len(entries) == 1  # the rows of the whole registry, in one entry
    hit = listing(runner, env=cache)
    # Byte for byte: an int read back as a float (or a list as a tuple) would show.
    assert fresh == miss == hit
    # The stored rows are arrays in the order of the shape, not the printed objects.
    stored = json.loads(entries[0].read_text())
    assert len(stored) == len(json.loads(fresh)["models"]) and isinstance(stored[0], list)


def test_an_edited_model_file_misses_the_listing_cache(
    runner: CliRunner, tmp_path: Path
) -> None:
    shutil.copytree(REGISTRY / "models", tmp_path / "models")
    env: dict[str, str | None] = {"KVCALC_CACHE_DIR": str(tmp_path / "cache")}
    args = ("--registry", str(tmp_path))
    before = {r["id"]: r for r in json.loads(listing(runner, *args, env=env))["models"]}
    assert before["llama3-70b"]["layers"] == 80
    path = tmp_path / "models" / "llama3-70b.yaml"
    path.write_text(path.read_text().replace("num_layers: 80", "num_layers: 40"))
    after = {r["id"]: r for r in json.loads(listing(runner, *args, env=env))["models"]}
    assert after["llama3-70b"]["layers"] == 40
    assert after["llama3-70b"]["kv_bytes_per_token_bf16"] == 327_680 // 2
    # A file made invalid is an error again, never the rows cached before it broke.
    path.write_text(path.read_text().replace("vocab_size: 128256", "vocab_size: 0"))
    result = runner.invoke(app, ["models", *args], env=env)
    assert result.exit_code == 2
    assert "llama3-70b.yaml: architecture.vocab_size:" in result.stderr


def test_a_listing_entry_of_the_wrong_shape_is_rebuilt(runner: CliRunner, tmp_path: Path) -> None:
    cache = {"KVCALC_CACHE_DIR": str(tmp_path / "cache")}
    good = listing(runner, env=cache)
    (entry,) = (tmp_path / "cache").glob("*.json")
    rows = json.loads(entry.read_text())
    for corrupt in (
        [[*rows[0][:4], "80", *rows[0][5:]], *rows[1:]],  # layers as a string
        [rows[0][:-1], *rows[1:]],  # a field missing
        [[*rows[0], "extra"], *rows[1:]],  # one too many
    ):
        entry.write_text(json.dumps(corrupt))
        assert listing(runner, env=cache) == good
        assert json.loads(entry.read_text()) == rows  # rewritten whole


def assert_warm_runs_import_none(
    tmp_path: Path, commands: list[list[str]], modules: dict[str, str]
) -> None:
    """Warm the cache with each command, then run them all again in one fresh interpreter and
    assert none of ``modules`` (name: what it is) was imported. The warm runs are fresh
    interpreters too, as a user's earlier commands are: what earlier tests left in this process
    (its memoised source digest, loaded modules) cannot reach the entries' keys."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "KVCALC_CACHE_DIR": str(tmp_path / "cache")}
    for argv in commands:
        warm = subprocess.run(
            [sys.executable, "-m", "kvcalc", *argv], capture_output=True, text=True, env=env
        )
        assert warm.returncode == 0, warm.stderr
    code = (
        "import sys\nfrom kvcalc.cli import main\n"
        f"for argv in {commands!r}:\n"
        "    sys.argv = ['kvcalc', *argv]\n"
        "    try: main()\n"
        "    except SystemExit as exc: assert not exc.code, exc.code\n"
        + "".join(f"assert {m!r} not in sys.modules, {what + ' imported'!r}\n"
                  for m, what in modules.items())
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr


def test_a_warm_listing_imports_no_pydantic(tmp_path: Path) -> None:
    assert_warm_runs_import_none(
        tmp_path, [["models"], ["gpus"]],
        {"pydantic": "pydantic", "kvcalc.registry.schema": "the schema"},
    )


def test_a_warm_size_imports_no_pydantic_and_no_serving_engine(tmp_path: Path) -> None:
    # `kvcalc size` is the README's first command: with the cache warm it needs the model's spec
    # and the KV formula, not the schema nor the serving engines' option declarations.
    assert_warm_runs_import_none(
        tmp_path, [["size", "llama3-70b", "--ctx", "8k", "--kv-dtype", "fp8"]],
        {"pydantic": "pydantic", "kvcalc.engine.serving": "the serving engines"},
    )
