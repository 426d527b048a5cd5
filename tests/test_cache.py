"""The validated-spec cache: a hit gives the same spec, any edit misses, bad entries are ignored,
and errors are never cached."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvcalc.registry.load import RegistryError, resolve_model

REGISTRY = Path(__file__).parent.parent / "model_configs"


@pytest.fixture()
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "registry"
    shutil.copytree(REGISTRY / "models", root / "models")
    monkeypatch.setenv("KVCALC_REGISTRY", str(root))
    monkeypatch.setenv("KVCALC_CACHE_DIR", str(tmp_path / "cache"))
    return root


def entries(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache").glob("*.pickle"))


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
        entry.write_bytes(b"not a pickle")
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


def test_the_key_covers_every_module_a_cached_spec_is_made_of() -> None:
    # A cached spec is a pickle of engine objects: an edit to any of their modules must miss.
    import sys

    from specs import registry_model

    import kvcalc
    from kvcalc.registry.cache import code_files
    from kvcalc.registry.load import model_paths

    package = Path(kvcalc.__file__).parent
    covered = {(package / name).resolve() for name in code_files(package)}
    for path in model_paths():
        model = registry_model(path.stem)
        for obj in (model, *model.mixer_pattern, *model.layers[0].__dict__.values()):
            source = Path(sys.modules[type(obj).__module__].__file__ or "").resolve()
            assert source in covered, f"{type(obj).__name__} comes from {source}"
