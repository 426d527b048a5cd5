"""Shared test set-up: hermetic environment, plain fixed-width output, the registry in the tree.

Hermetic means no test sees the caller's kvcalc settings or cache, and none leaves ``os.environ``
changed. For the whole run (collection included) the validated-spec cache lives in a temporary
directory and every other variable kvcalc reads is set or removed; both are restored when the run
ends. Tests change the environment through ``monkeypatch`` or CliRunner's ``env`` (both undone
after them), and a guard fails any test that leaves it changed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import specs
from typer.testing import CliRunner

from kvcalc.engine.spec import ModelSpec

#: Set for the whole run: plain output (no colour, a fixed width) whatever the caller's terminal.
SESSION_ENV = {"NO_COLOR": "1", "COLUMNS": "200"}
#: Removed for the whole run: variables kvcalc reads that must not leak from the caller's shell.
SESSION_UNSET = (
    "KVCALC_REGISTRY",
    "KVCALC_NO_CACHE",
    "KVCALC_DEBUG",
    "XDG_CACHE_HOME",
    "FORCE_COLOR",
    "HF_HOME",
    "HF_TOKEN",
    "HUGGINGFACE_HUB_CACHE",
    "TRANSFORMERS_OFFLINE",
)

_session = pytest.MonkeyPatch()


def pytest_configure(config: pytest.Config) -> None:
    cache = tempfile.mkdtemp(prefix="kvcalc-test-cache-")
    _session.setenv("KVCALC_CACHE_DIR", cache)
    # Hugging Face repo ids resolve against an empty hub cache inside it, offline: no test reads
    # the caller's cache or reaches the network unless it sets these itself.
    _session.setenv("HF_HUB_CACHE", os.path.join(cache, "hf-hub"))
    _session.setenv("HF_HUB_OFFLINE", "1")
    for name, value in SESSION_ENV.items():
        _session.setenv(name, value)
    for name in SESSION_UNSET:
        _session.delenv(name, raising=False)


def pytest_unconfigure(config: pytest.Config) -> None:
    cache = os.environ.get("KVCALC_CACHE_DIR")
    _session.undo()
    if cache:
        shutil.rmtree(cache, ignore_errors=True)


@pytest.fixture(autouse=True)
def _environ_unchanged() -> Iterator[None]:
    # An autouse fixture without dependencies is set up before a test's `monkeypatch` and torn
    # down after it, so it sees the environment once every monkeypatch has been undone.
    before = dict(os.environ)
    yield
    after = dict(os.environ)
    changed = sorted(
        k
        for k in before.keys() | after.keys()
        if before.get(k) != after.get(k) and k != "PYTEST_CURRENT_TEST"  # pytest's own marker
    )
    assert not changed, f"the test left os.environ changed: {changed}"


@pytest.fixture()
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture()
def fixture_cache(monkeypatch: pytest.MonkeyPatch) -> Path:
    """HF_HUB_CACHE pointed at the fixture hub cache (specs.HUB_CACHE) for one test."""
    monkeypatch.setenv("HF_HUB_CACHE", str(specs.HUB_CACHE))
    return specs.HUB_CACHE


# ------------------------------------------------------------------ reference models
# Hand-built from the official config.json values (tests/specs.py), shared by every test file.


@pytest.fixture(scope="session")
def llama3_70b() -> ModelSpec:
    return specs.LLAMA3_70B


@pytest.fixture(scope="session")
def deepseek_v3() -> ModelSpec:
    return specs.DEEPSEEK_V3


@pytest.fixture(scope="session")
def gpt_oss_120b() -> ModelSpec:
    return specs.GPT_OSS_120B
