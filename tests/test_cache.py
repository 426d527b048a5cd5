"""The validated-spec cache: a hit gives the same spec, any edit misses, bad entries are ignored,
errors are never cached, and an entry is plain JSON checked on the way back in."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from kvcalc.registry.load import RegistryError, resolve_model

REGISTRY = Path(__file__).parent.parent / "model_configs"


@pytest.fixture()
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "registry"
    shutil.copytree(REGISTRY / "models", root / "models")
    shutil.copytree(REGISTRY / "gpus", root / "gpus")
    monkeypatch.setenv("KVCALC_REGISTRY", str(root))
    monkeypatch.setenv("KVCALC_CACHE_DIR", str(tmp_path / "cache"))
    return root


def entries(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache").glob("*.json"))


def test_hit_returns_the_same_spec(registry: Path, tmp_path: Path) -> None:
    first = resolve_model("llama3-70b")
    assert len(entries(tmp_path)) == 1
    assert resolve_model("llama3-70b") == first


def test_an_edit_misses_the_cache(registry: Path, tmp_path: Path) -> None:
    assert resolve_model("llama3-70b").num_layers == 80
    path = registry / "models" / "llama3-70b.yaml"
    path.write_text(path.read_text().replace("num_layers: 80", "num_layers: 40"))
    assert resolve_model("llama3-70b").num_layers == 40


def test_errors_are_never_cached(registry: Path, tmp_path: Path) -> None:
    path = registry / "models" / "llama3-70b.yaml"
    good = path.read_text()
    path.write_text(good.replace("num_layers: 80", "num_layers: -1"))
    for _ in range(2):
        with pytest.raises(RegistryError, match="num_layers"):
            resolve_model("llama3-70b")
    path.write_text(good)
    assert resolve_model("llama3-70b").num_layers == 80


def test_a_corrupt_entry_is_rebuilt(registry: Path, tmp_path: Path) -> None:
    spec = resolve_model("llama3-70b")
    for entry in entries(tmp_path):
        entry.write_bytes(b"{\"@type\": trunc")
    assert resolve_model("llama3-70b") == spec


def test_no_cache_writes_nothing(
    registry: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVCALC_NO_CACHE", "1")
    resolve_model("llama3-70b")
    assert entries(tmp_path) == []


def test_alias_index_follows_edits(registry: Path) -> None:
    path = registry / "models" / "llama3-70b.yaml"
    assert resolve_model("meta-llama/Meta-Llama-3-70B").id == "llama3-70b"
    path.write_text(path.read_text().replace("aliases: [", "aliases: [my-70b, "))
    assert resolve_model("MY-70B").id == "llama3-70b"


def test_a_registry_name_reads_only_its_own_file(
    registry: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvcalc.registry import load

    monkeypatch.setenv("KVCALC_NO_CACHE", "1")
    read: list[str] = []
    real = load.read_yaml

    def spy(path: Path) -> object:
        read.append(path.name)
        return real(path)

    monkeypatch.setattr(load, "read_yaml", spy)
    resolve_model("llama3-70b")
    assert read == ["llama3-70b.yaml"]


def _classes_within(value: object) -> Iterator[type]:
    """The class of every dataclass object in ``value``, fields and containers walked."""
    from dataclasses import fields, is_dataclass

    if is_dataclass(value) and not isinstance(value, type):
        yield type(value)
        for f in fields(value):
            yield from _classes_within(getattr(value, f.name))
    elif isinstance(value, tuple | list | frozenset | set):
        for item in value:
            yield from _classes_within(item)
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _classes_within(item)


def test_an_edit_to_any_module_changes_the_key(tmp_path: Path) -> None:
    # No hand-kept list of modules: the key covers the package's whole source, so an edit to
    # engine/units.py (which no spec class lives in) misses the cache, as does a new module.
    import kvcalc
    from kvcalc.registry.cache import package_digest

    package = tmp_path / "kvcalc"
    shutil.copytree(Path(kvcalc.__file__).parent, package, ignore=shutil.ignore_patterns("*.pyc"))
    before = package_digest(package, "0")
    assert package_digest(package, "0") == before  # a key is stable
    units = package / "engine" / "units.py"
    units.write_text(units.read_text() + "\n# an edit\n")
    edited = package_digest(package, "0")
    assert edited != before
    (package / "render" / "new_module.py").write_text("")
    assert package_digest(package, "0") != edited
    assert package_digest(package, "1") != package_digest(package, "0")  # and the version


def _package_copy(tmp_path: Path) -> Path:
    import kvcalc

    package = tmp_path / "kvcalc"
    shutil.copytree(Path(kvcalc.__file__).parent, package, ignore=shutil.ignore_patterns("*.pyc"))
    return package


def test_the_memoised_digest_is_the_content_digest_and_misses_after_any_edit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The memo is keyed by the files' stat; an edit that keeps the size and puts the
    # modification time back still changes the change time, so the content is hashed again.
    from kvcalc.registry import cache

    monkeypatch.setattr(cache, "SETTLED_NS", 0)  # the copy is seconds old
    package, memos = _package_copy(tmp_path), tmp_path / "memos"
    first = cache.memoised_package_digest(package, "0", memos)
    assert first == cache.package_digest(package, "0")
    assert len(list(memos.glob("source-*.digest"))) == 1
    assert cache.memoised_package_digest(package, "0", memos) == first  # from the memo

    units = package / "engine" / "units.py"
    before = units.stat()
    text = units.read_text()
    units.write_text(text.replace("bytes", "BYTES", 1))  # same size
    os.utime(units, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert units.stat().st_size == before.st_size and units.stat().st_mtime == before.st_mtime
    edited = cache.memoised_package_digest(package, "0", memos)
    assert edited == cache.package_digest(package, "0") != first
    assert cache.memoised_package_digest(package, "1", memos) == cache.package_digest(package, "1")


def test_no_memo_is_written_while_a_source_file_is_fresh(tmp_path: Path) -> None:
    from kvcalc.registry import cache

    package, memos = _package_copy(tmp_path), tmp_path / "memos"
    assert cache.memoised_package_digest(package, "0", memos) == cache.package_digest(package, "0")
    assert not list(memos.glob("source-*.digest"))  # a second edit could share its stat


@pytest.mark.parametrize("planted", [b"", b"zz" * 64, "é".encode() * 64, b"00" * 63, b"ab" * 65])
def test_a_malformed_memo_is_a_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: bytes
) -> None:
    from kvcalc.registry import cache

    monkeypatch.setattr(cache, "SETTLED_NS", 0)
    package, memos = _package_copy(tmp_path), tmp_path / "memos"
    truth = cache.memoised_package_digest(package, "0", memos)
    (memo,) = memos.glob("source-*.digest")
    memo.write_bytes(planted)
    assert cache.memoised_package_digest(package, "0", memos) == truth
    memo.unlink()
    memo.symlink_to(tmp_path / "elsewhere")  # a planted link is not followed
    (tmp_path / "elsewhere").write_text("00" * 64)
    assert cache.memoised_package_digest(package, "0", memos) == truth


def test_a_warm_cache_misses_after_an_edit_to_a_module_no_spec_is_made_of(
    tmp_path: Path,
) -> None:
    # End to end, in a copy of the package: a warm spec cache is read, then an edit to
    # engine/units.py makes the next run validate again (a new entry), not serve the old one.
    import subprocess
    import sys

    import kvcalc

    root = tmp_path / "src"
    shutil.copytree(
        Path(kvcalc.__file__).parent, root / "kvcalc", ignore=shutil.ignore_patterns("*.pyc")
    )
    cache = tmp_path / "cache"
    registry = Path(__file__).parent.parent / "model_configs"
    env = {
        **os.environ,
        "PYTHONPATH": str(root),
        "KVCALC_CACHE_DIR": str(cache),
        "KVCALC_REGISTRY": str(registry),
    }
    script = "from kvcalc.registry.load import resolve_model; resolve_model('llama3-70b')"

    def run() -> set[str]:
        subprocess.run([sys.executable, "-c", script], env=env, check=True, cwd=tmp_path)
        return {p.name for p in cache.glob("*.json")}

    first = run()
    assert first and run() == first  # warm: read, nothing new written
    units = root / "kvcalc" / "engine" / "units.py"
    units.write_text(units.read_text() + "\n# an edit\n")
    assert run() - first


# ---------------------------------------------------------------- safe by construction


def only_entry(tmp_path: Path) -> Path:
    [entry] = entries(tmp_path)
    return entry


def test_an_entry_is_plain_json_of_the_spec(registry: Path, tmp_path: Path) -> None:
    spec = resolve_model("llama3-70b")
    data = json.loads(only_entry(tmp_path).read_text())
    assert data["@type"] == "kvcalc.engine.spec:ModelSpec"
    assert data["num_layers"] == spec.num_layers == 80
    assert data["mixer_pattern"][0]["@type"] == "kvcalc.engine.mixers.attention:FullAttention"


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: {**d, "num_layers": "80"},  # a string where an int belongs
        lambda d: {**d, "num_layers": True},  # a bool is not an int
        lambda d: {**d, "num_layers": -80},  # no count is negative
        lambda d: {**d, "hidden_size": 8192.5},
        lambda d: {**d, "extra": 1},  # a field the class does not have
        lambda d: {k: v for k, v in d.items() if k != "vocab_size"},  # a missing field
        lambda d: {**d, "@type": "os:system"},  # only kvcalc's engine classes are built
        lambda d: {**d, "@type": "kvcalc.engine.hardware:Accelerator"},  # not a ModelSpec
        lambda d: {**d, "mixer_pattern": [{"@type": "builtins:eval"}]},
        lambda d: [d],
    ],
)
def test_an_entry_of_the_wrong_shape_is_a_miss(
    registry: Path, tmp_path: Path, edit: object
) -> None:
    spec = resolve_model("llama3-70b")
    entry = only_entry(tmp_path)
    entry.write_text(json.dumps(edit(json.loads(entry.read_text()))))  # type: ignore[operator]
    assert resolve_model("llama3-70b") == spec
    assert json.loads(entry.read_text())["num_layers"] == 80  # rewritten by the rebuild


@pytest.mark.parametrize("cut", [0, 1, 100, -1])
def test_a_truncated_entry_is_a_miss(registry: Path, tmp_path: Path, cut: int) -> None:
    spec = resolve_model("llama3-70b")
    entry = only_entry(tmp_path)
    entry.write_bytes(entry.read_bytes()[:cut])
    assert resolve_model("llama3-70b") == spec


def test_non_finite_numbers_are_a_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvcalc.registry.cache import cache_key, cached

    monkeypatch.setenv("KVCALC_CACHE_DIR", str(tmp_path))
    key = cache_key(b"x", "test")
    (tmp_path / f"{key}.json").write_text("NaN")
    assert cached(b"x", lambda: 1.5, "test", float) == 1.5


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_entry_is_a_miss_and_never_blocks(registry: Path, tmp_path: Path) -> None:
    spec = resolve_model("llama3-70b")
    entry = only_entry(tmp_path)
    entry.unlink()
    os.mkfifo(entry)  # opening it for reading would wait forever for a writer
    assert resolve_model("llama3-70b") == spec


def test_a_directory_entry_is_a_miss(registry: Path, tmp_path: Path) -> None:
    spec = resolve_model("llama3-70b")
    entry = only_entry(tmp_path)
    entry.unlink()
    entry.mkdir()
    assert resolve_model("llama3-70b") == spec


def keep_size_and_mtime(path: Path, old: str, new: str) -> None:
    assert len(old) == len(new)
    before = path.stat()
    path.write_text(path.read_text().replace(old, new))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size


def test_the_alias_index_is_keyed_by_content(registry: Path) -> None:
    from kvcalc.registry.load import RegistryError

    path = registry / "models" / "llama3-70b.yaml"
    assert "meta-llama/Meta-Llama-3-70B" in path.read_text()
    assert resolve_model("meta-llama/Meta-Llama-3-70B").id == "llama3-70b"
    keep_size_and_mtime(path, "meta-llama/Meta-Llama-3-70B", "meta-llama/Meta-Llama-3-71B")
    assert resolve_model("meta-llama/Meta-Llama-3-71B").id == "llama3-70b"
    # No longer a registry name, the repo id falls through to the (empty, offline) hub cache.
    with pytest.raises(RegistryError, match="not a registry name"):
        resolve_model("meta-llama/Meta-Llama-3-70B")


def test_the_whole_registry_is_keyed_by_content(registry: Path) -> None:
    from kvcalc.registry.load import all_model_specs

    path = registry / "models" / "llama3-70b.yaml"
    assert {s.id: s.num_layers for s in all_model_specs()}["llama3-70b"] == 80
    keep_size_and_mtime(path, "num_layers: 80", "num_layers: 81")
    assert {s.id: s.num_layers for s in all_model_specs()}["llama3-70b"] == 81


def test_every_registry_spec_round_trips_through_plain_json() -> None:
    # A type added to the specs without a plain form would silently never be cached.
    from kvcalc.engine.hardware import Accelerator
    from kvcalc.engine.spec import ModelSpec
    from kvcalc.registry.gpus import gpu_paths, load_gpu_file
    from kvcalc.registry.load import load_model_file, model_paths
    from kvcalc.registry.plain import from_plain, to_plain

    for path in model_paths():
        spec = load_model_file(path).to_spec()
        assert from_plain(json.loads(json.dumps(to_plain(spec))), ModelSpec) == spec, path.name
    for path in gpu_paths():
        gpu = load_gpu_file(path).to_accelerator()
        assert from_plain(json.loads(json.dumps(to_plain(gpu))), Accelerator) == gpu, path.name


# ------------------------------------------------------------------ the whole-registry rows


def registry_batch(*args: str) -> dict[str, str]:
    """The whole-registry batch in every format the rows feed."""
    from typer.testing import CliRunner

    from kvcalc.cli.app import app

    out = {}
    for fmt in ("table", "json", "csv"):
        result = CliRunner().invoke(app, ["batch", "--gpus", "8xH100", *args, "-f", fmt])
        assert result.exit_code == 0, result.stderr
        out[fmt], out[f"{fmt} stderr"] = result.stdout, result.stderr
    return out


def rows_entries(tmp_path: Path) -> list[Path]:
    return [e for e in entries(tmp_path) if e.read_text().startswith('"{\\"rows\\"')]


@pytest.mark.parametrize("args", [(), ("--ctx", "4k,1m", "--kv-dtype", "fp8", "--tp", "2")])
def test_registry_rows_from_the_cache_are_the_rows_sized_afresh(
    registry: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]
) -> None:
    cold = registry_batch(*args)
    assert len(rows_entries(tmp_path)) == 1
    assert registry_batch(*args) == cold  # read back
    monkeypatch.setenv("KVCALC_NO_CACHE", "1")
    assert registry_batch(*args) == cold  # sized without any cache


def test_registry_rows_are_keyed_by_the_model_files_and_the_inputs(
    registry: Path, tmp_path: Path
) -> None:
    before = json.loads(registry_batch()["json"])
    assert json.loads(registry_batch("--ctx", "16k")["json"]) != before
    path = registry / "models" / "llama3-70b.yaml"
    path.write_text(path.read_text().replace("num_layers: 80", "num_layers: 40"))
    after = {m["model"]: m for m in json.loads(registry_batch()["json"])["models"]}
    old = {m["model"]: m for m in before["models"]}
    assert after["llama3-70b"]["contexts"] != old["llama3-70b"]["contexts"]
    assert len(rows_entries(tmp_path)) == 3


def test_a_damaged_rows_entry_is_sized_again(registry: Path, tmp_path: Path) -> None:
    cold = registry_batch()
    for damage in ('"{\\"rows\\": 1}"', '"[]"', '"{\\"rows\\"'):
        for entry in rows_entries(tmp_path) or entries(tmp_path):
            entry.write_text(damage)
        assert registry_batch() == cold


def test_the_capacities_of_a_table_read_back_are_worked_out_when_asked(
    registry: Path, tmp_path: Path
) -> None:
    import kvcalc

    cold = kvcalc.batch(gpus="8xH100", ctx="32k")
    warm = kvcalc.batch(gpus="8xH100", ctx="32k")
    assert warm.to_dict() == cold.to_dict()
    for result in (warm, cold):
        assert not isinstance(result.registry["llama3-70b"], str)
    # Each model's capacity is the row its table shows.
    rows = {m["model"]: m for m in warm.to_dict()["models"]}
    for model_id, cap in warm.registry.items():
        if isinstance(cap, str):
            assert rows[model_id]["reason"] == cap
        else:
            assert rows[model_id]["contexts"][0]["max_batch"] == cap.contexts[0].max_batch
