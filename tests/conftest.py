"""Shared test set-up: plain, fixed-width output for CLI tests, and the registry in the tree."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner


@pytest.fixture(autouse=True)
def _plain_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("KVCALC_REGISTRY", raising=False)


@pytest.fixture()
def runner() -> CliRunner:
    return CliRunner()
