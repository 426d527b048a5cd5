"""Hugging Face repo ids as MODEL: the local hub cache, the optional download, and every failure.

No test reaches the network: conftest.py points HF_HUB_CACHE at an empty folder and sets
HF_HUB_OFFLINE=1 for the run; the download tests install a fake ``huggingface_hub`` module (its
``hf_hub_download`` writes into the cache the way the real one does) and the missing-extra test
makes the import fail.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from report_check import usage_error
from specs import HUB_CACHE, QWEN_COMMIT, QWEN_INSTRUCT, registry_model
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine.kv import kv_bytes_per_token
from kvcalc.engine.units import dtype
from kvcalc.registry.hub import (
    RepoId,
    cache_origin,
    download_error,
    hub_cache_dir,
    offline,
    parse_repo_id,
)
from kvcalc.registry.load import RegistryError, UnknownNameError, read_text, resolve_model

SHA_A = "a" * 40
SHA_B = "b" * 40
BF16 = dtype("bf16")


def qwen_config(**changes: Any) -> dict[str, Any]:
    path = HUB_CACHE / "models--Qwen--Qwen2.5-7B-Instruct" / "snapshots" / QWEN_COMMIT
    return {**json.loads((path / "config.json").read_text(encoding="utf-8")), **changes}


def cache_repo(
    cache: Path, repo: str, commit: str, config: dict[str, Any], refs: tuple[str, ...] = ("main",)
) -> Path:
    """Write a repo into a hub cache as huggingface_hub does: the file in blobs/, a symlink to
    it in snapshots/<commit>/, and each ref naming the commit."""
    folder = cache / ("models--" + repo.replace("/", "--"))
    blob = folder / "blobs" / f"{commit[:8]}-config"
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_text(json.dumps(config), encoding="utf-8")
    snapshot = folder / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (snapshot / "config.json").symlink_to(os.path.relpath(blob, snapshot))
    for ref in refs:
        (folder / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (folder / "refs" / ref).write_text(commit, encoding="ascii")
    return snapshot / "config.json"


@pytest.fixture()
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def invoke(runner: CliRunner, *args: str) -> Any:
    return runner.invoke(app, list(args))


# ------------------------------------------------------------------ repo ids


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Qwen/Qwen2.5-7B-Instruct", RepoId("Qwen/Qwen2.5-7B-Instruct")),
        ("org/name@main", RepoId("org/name", "main")),
        ("org/name@v1.0", RepoId("org/name", "v1.0")),
        ("org/name@refs/pr/1", RepoId("org/name", "refs/pr/1")),
        (f"org/name@{SHA_A}", RepoId("org/name", SHA_A)),
        ("o_1/n.a-m_e", RepoId("o_1/n.a-m_e")),
    ],
)
def test_repo_ids_parse(text: str, expected: RepoId) -> None:
    assert parse_repo_id(text) == expected
    assert str(parse_repo_id(text)) == text


@pytest.mark.parametrize(
    "text",
    [
        "org/",
        "/name",
        "org/name/extra",
        "org/-name",
        "org/name.",
        "org/na--me",
        "org/na..me",
        "org/na me",
        "org/näme",
        "o" * 97 + "/name",
        "org/name@",
        "org/name@../../etc",
        "org/name@a/../b",
        "org/name@a//b",
        "org/name@x@y",
    ],
)
def test_malformed_repo_ids_are_refused(text: str) -> None:
    with pytest.raises(RegistryError, match="Hugging Face repo id"):
        parse_repo_id(text)


def test_hub_cache_follows_huggingface_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert hub_cache_dir() == tmp_path / "home" / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub_cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hub_cache_dir() == tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "explicit"))
    assert hub_cache_dir() == tmp_path / "explicit"


@pytest.mark.parametrize(
    ("hf_hub", "transformers", "expected"),
    [("1", None, "HF_HUB_OFFLINE"), ("true", None, "HF_HUB_OFFLINE"),
     ("YES", "1", "HF_HUB_OFFLINE"), ("0", "1", None), ("", None, None),
     (None, "1", "TRANSFORMERS_OFFLINE"), (None, None, None)],
)  # fmt: skip
def test_offline_reads_huggingface_hub_spellings(
    monkeypatch: pytest.MonkeyPatch,
    hf_hub: str | None,
    transformers: str | None,
    expected: str | None,
) -> None:
    for name, value in (("HF_HUB_OFFLINE", hf_hub), ("TRANSFORMERS_OFFLINE", transformers)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert offline() == expected


# ------------------------------------------------------------------ the local cache


def test_cached_repo_resolves_without_network(fixture_cache: Path) -> None:
    model = resolve_model(QWEN_INSTRUCT)
    base = registry_model("qwen2.5-7b")
    # The Instruct release is Qwen2.5-7B with a 32k context (model-configs.yaml notes).
    assert kv_bytes_per_token(model, BF16) == kv_bytes_per_token(base, BF16) == 57_344
    assert model.max_context == 32_768
    assert (model.id, model.name) == ("qwen2.5-7b-instruct", QWEN_INSTRUCT)


@pytest.mark.parametrize("revision", ["", "@main", f"@{QWEN_COMMIT}"])
def test_revision_by_branch_or_commit(fixture_cache: Path, revision: str) -> None:
    model = resolve_model(QWEN_INSTRUCT + revision)
    assert model.max_context == 32_768
    assert model.name == QWEN_INSTRUCT + revision


def test_refs_pick_the_snapshot(hub_cache: Path) -> None:
    cache_repo(hub_cache, "org/m", SHA_A, qwen_config(num_hidden_layers=10), ("main",))
    cache_repo(hub_cache, "org/m", SHA_B, qwen_config(num_hidden_layers=20), ("v2", "refs/pr/3"))
    assert resolve_model("org/m").num_layers == 10
    assert resolve_model("org/m@main").num_layers == 10
    assert resolve_model("org/m@v2").num_layers == 20
    assert resolve_model("org/m@refs/pr/3").num_layers == 20
    assert resolve_model(f"org/m@{SHA_A}").num_layers == 10
    assert resolve_model(f"org/m@{SHA_B}").num_layers == 20


def test_registry_aliases_win_over_the_cache(hub_cache: Path) -> None:
    repo = "meta-llama/Llama-3.3-70B-Instruct"
    cache_repo(hub_cache, repo, SHA_A, qwen_config())
    assert resolve_model(repo).id == "llama3.3-70b"


def test_bare_unknown_names_stay_registry_misses(hub_cache: Path) -> None:
    with pytest.raises(UnknownNameError, match="did you mean"):
        resolve_model("llama3-70x")


def test_a_local_folder_wins_over_a_repo_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "org" / "local-model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(qwen_config(num_hidden_layers=7)))
    monkeypatch.chdir(tmp_path)
    assert resolve_model("org/local-model").num_layers == 7


def test_damaged_ref_is_one_line(hub_cache: Path) -> None:
    cache_repo(hub_cache, "org/m", SHA_A, qwen_config())
    (hub_cache / "models--org--m" / "refs" / "main").write_text("not a sha")
    with pytest.raises(RegistryError, match="40-hex commit sha"):
        resolve_model("org/m")


def test_oversized_cached_config_is_refused(hub_cache: Path) -> None:
    path = cache_repo(hub_cache, "org/m", SHA_A, qwen_config())
    path.resolve().write_text(" " * (1 << 20) + "{}")
    with pytest.raises(RegistryError, match="too large"):
        resolve_model("org/m")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a FIFO")
def test_only_regular_files_are_read(tmp_path: Path) -> None:
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    with pytest.raises(RegistryError, match="not a regular file"):
        read_text(fifo)


# ------------------------------------------------------------------ downloading


class FakeHub:
    """A stand-in for huggingface_hub.hf_hub_download: records its calls and writes the file
    into the cache layout the real one writes, or raises the exception it is given."""

    def __init__(self, config: dict[str, Any], error: BaseException | None = None) -> None:
        self.config = config
        self.error = error
        self.calls: list[dict[str, Any]] = []

    def hf_hub_download(self, repo_id: str, filename: str, **kwargs: Any) -> str:
        self.calls.append({"repo_id": repo_id, "filename": filename, **kwargs})
        if self.error is not None:
            raise self.error
        refs = (kwargs.get("revision") or "main",)
        return str(cache_repo(Path(kwargs["cache_dir"]), repo_id, SHA_B, self.config, refs))


@pytest.fixture()
def online(monkeypatch: pytest.MonkeyPatch, hub_cache: Path) -> Callable[..., FakeHub]:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def install(
        config: dict[str, Any] | None = None, error: BaseException | None = None
    ) -> FakeHub:
        fake = FakeHub(config or qwen_config(), error)
        module = types.ModuleType("huggingface_hub")
        module.hf_hub_download = fake.hf_hub_download  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "huggingface_hub", module)
        return fake

    return install


def test_uncached_repo_downloads_config_json_only(
    online: Callable[..., FakeHub], hub_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    fake = online(qwen_config(num_hidden_layers=12))
    assert resolve_model("org/new@v3").num_layers == 12
    (call,) = fake.calls
    assert call["repo_id"] == "org/new"
    assert call["filename"] == "config.json"
    assert call["revision"] == "v3"
    assert call["token"] == "hf_secret"
    assert Path(call["cache_dir"]) == hub_cache
    assert "trust_remote_code" not in call
    # Now cached: the next run reads the cache and never calls the Hub.
    fake.error = AssertionError("the cache should have answered")
    assert resolve_model("org/new@v3").num_layers == 12
    assert len(fake.calls) == 1


def test_offline_never_imports_huggingface_hub(
    online: Callable[..., FakeHub], monkeypatch: pytest.MonkeyPatch, runner: CliRunner
) -> None:
    fake = online()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = invoke(runner, "size", "org/uncached", "--ctx", "8k")
    usage_error(
        result, "org/uncached", "HF_HUB_OFFLINE", "not in the Hugging Face cache"
    )
    assert fake.calls == []


def test_missing_extra_is_one_line(
    monkeypatch: pytest.MonkeyPatch, hub_cache: Path, runner: CliRunner
) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # makes the import fail
    result = invoke(runner, "size", "org/uncached")
    # The pip of the Python running kvcalc, and the hub extra's own requirement: `pip install
    # 'kvcalc[hub]'` cannot work where kvcalc is not on PyPI.
    hint = f"{shlex.quote(sys.executable)} -m pip install 'huggingface_hub>=0.20'"
    usage_error(result, "org/uncached", "not in the Hugging Face cache", hint)
    assert result.stderr.rstrip("\n").endswith(
        f"downloading it needs huggingface_hub, an optional extra; install it with {hint}"
    )


def test_the_hub_install_hint_installs_the_hub_extras_requirement() -> None:
    from importlib.metadata import requires

    from kvcalc.registry.hub import HUB_REQUIREMENT

    # The installed metadata of kvcalc (pyproject.toml's hub extra), parsed independently.
    hub = re.compile(r"extra\s*==\s*[\"']hub[\"']")
    extra = [r.split(";")[0].strip() for r in requires("kvcalc") or [] if hub.search(r)]
    # Metadata writes the name normalized (PEP 503: huggingface-hub); pip takes either spelling.
    name, op, version = HUB_REQUIREMENT.partition(">=")
    normalized = re.sub(r"[-_.]+", "-", name).lower() + op + version
    assert extra == [normalized] == ["huggingface-hub>=0.20"]


def hub_error(name: str, *bases: type[BaseException]) -> type[BaseException]:
    """An exception class named as huggingface_hub names it, with its parents."""
    return type(name, bases or (OSError,), {})


REPO_NOT_FOUND = hub_error("RepositoryNotFoundError")
ENTRY_NOT_FOUND = hub_error("EntryNotFoundError", Exception)
HUB_ERRORS = [
    (hub_error("GatedRepoError", REPO_NOT_FOUND), ("gated", "HF_TOKEN", "huggingface.co/org/m")),
    (REPO_NOT_FOUND, ("no such model repo",)),
    (hub_error("RevisionNotFoundError"), ("no revision",)),
    (hub_error("LocalEntryNotFoundError", FileNotFoundError, ENTRY_NOT_FOUND), ("reached",)),
    (hub_error("RemoteEntryNotFoundError", OSError, ENTRY_NOT_FOUND), ("no config.json",)),
    (hub_error("OfflineModeIsEnabled", ConnectionError), ("offline mode",)),
    (hub_error("DisabledRepoError"), ("disabled",)),
    (RuntimeError, ("downloading config.json failed: RuntimeError: boom second line",)),
]


@pytest.mark.parametrize(("error", "words"), HUB_ERRORS, ids=lambda v: getattr(v, "__name__", ""))
def test_hub_errors_are_one_line_each(
    online: Callable[..., FakeHub],
    runner: CliRunner,
    error: type[BaseException],
    words: tuple[str, ...],
) -> None:
    online(error=error("boom\nsecond line"))
    result = invoke(runner, "size", "org/m@dev")
    usage_error(result, "org/m", *words)


def test_gated_error_says_whether_a_token_was_given(
    online: Callable[..., FakeHub], runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    gated = hub_error("GatedRepoError", REPO_NOT_FOUND)
    online(error=gated("401"))
    usage_error(invoke(runner, "size", "org/m"), "HF_TOKEN is not set")
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    usage_error(invoke(runner, "size", "org/m"), "HF_TOKEN's account has no access")


# ------------------------------------------------------------------ every model command


MODEL_COMMANDS = [
    ["size", "{model}", "--ctx", "8k"],
    ["batch", "{model}", "--gpus", "1xH100", "--ctx", "8k"],
    ["batch", "{model}", "--gpus", "1xH100", "--ctx", "8k", "--engine", "vllm"],
    ["decode", "{model}", "--gpus", "1xH100", "--ctx", "8k"],
]


@pytest.mark.parametrize("command", MODEL_COMMANDS, ids=lambda c: " ".join(c[::2]))
def test_every_model_command_takes_a_repo_id(
    fixture_cache: Path, runner: CliRunner, command: list[str]
) -> None:
    args = [a.format(model=QWEN_INSTRUCT) for a in command]
    result = invoke(runner, *args, "--format", "json")
    assert result.exit_code == 0, result.output
    assert "qwen2.5-7b-instruct" in result.stdout
    # The same answer as the snapshot's config.json given as a path, named after its repo.
    config = HUB_CACHE / "models--Qwen--Qwen2.5-7B-Instruct" / "snapshots" / QWEN_COMMIT
    by_path = invoke(runner, *[a.format(model=str(config)) for a in command], "--format", "json")
    assert by_path.exit_code == 0, by_path.output
    assert by_path.stdout == result.stdout


@pytest.mark.parametrize("command", MODEL_COMMANDS, ids=lambda c: " ".join(c[::2]))
def test_every_model_command_refuses_a_malformed_id(runner: CliRunner, command: list[str]) -> None:
    result = invoke(runner, *[a.format(model="org/bad--id") for a in command])
    usage_error(result, "'org/bad--id'", "ORG/NAME")


def test_huggingface_hub_logging_stays_off_stderr(
    online: Callable[..., FakeHub], runner: CliRunner
) -> None:
    fake = online(error=hub_error("LocalEntryNotFoundError", FileNotFoundError)("offline"))
    download = fake.hf_hub_download

    def retrying(repo_id: str, filename: str, **kwargs: Any) -> str:
        # huggingface_hub's own logging puts a stderr handler on its root logger.
        handler = logging.StreamHandler()  # the run's sys.stderr, made during the run
        logging.getLogger("huggingface_hub").addHandler(handler)
        try:
            logging.getLogger("huggingface_hub.utils._http").warning("Retrying in 1s [1/5].")
        finally:
            logging.getLogger("huggingface_hub").removeHandler(handler)
        return download(repo_id, filename, **kwargs)

    sys.modules["huggingface_hub"].hf_hub_download = retrying  # type: ignore[attr-defined]
    usage_error(invoke(runner, "size", "org/m"), "cannot be reached")
    assert logging.getLogger("huggingface_hub").level == logging.NOTSET  # restored


@pytest.mark.parametrize(
    ("relative", "expected"),
    [
        (f"models--org--m/snapshots/{SHA_A}/config.json", ("org/m", SHA_A)),
        (f"models--org--m/snapshots/{SHA_A[:7]}/config.json", None),
        (f"datasets--org--m/snapshots/{SHA_A}/config.json", None),
        (f"models--org--m--x/snapshots/{SHA_A}/config.json", None),
        (f"models--org--m/refs/{SHA_A}/config.json", None),
        (f"models--org--m/snapshots/{SHA_A}/other.json", None),
    ],
)
def test_cache_paths_name_their_repo(
    tmp_path: Path, relative: str, expected: tuple[str, str] | None
) -> None:
    found = cache_origin(tmp_path / relative)
    assert (found and (found.repo.repo, found.commit)) == expected


#: The exceptions of huggingface_hub (exported by huggingface_hub.utils since 0.20) that each
#: have their own line.
REAL_HUB_ERRORS = [
    "GatedRepoError", "RepositoryNotFoundError", "RevisionNotFoundError", "EntryNotFoundError",
    "LocalEntryNotFoundError", "OfflineModeIsEnabled", "DisabledRepoError",
]  # fmt: skip


@pytest.mark.hub
@pytest.mark.parametrize("name", REAL_HUB_ERRORS)
def test_the_installed_huggingface_hub_errors_have_their_own_line(name: str) -> None:
    # Runs where the `hub` extra is installed: the matching by class name must see the real
    # classes (.ci/run installs the extra after the main run and runs the `hub` tests).
    utils = pytest.importorskip("huggingface_hub.utils")
    error_class = getattr(utils, name)
    line = download_error(RepoId("org/m", "dev"), error_class.__new__(error_class))
    assert "downloading config.json failed" not in line


@pytest.mark.hub
def test_the_installed_hf_hub_download_takes_kvcalcs_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real hf_hub_download, offline so that it never reaches the network: it must accept
    # every argument kvcalc passes (a renamed one would be a TypeError, "downloading failed")
    # and fail with the real class for a file that is not cached.
    from kvcalc.registry.hub import HubError, download_config

    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(HubError) as error:
        download_config(RepoId("org/m", "dev"), tmp_path, "org/m@dev: not cached")
    assert str(error.value) == (
        "org/m@dev: config.json is not cached and the Hugging Face Hub cannot be reached; "
        "check the network (or pass a path to a config.json)"
    )
