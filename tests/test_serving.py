"""The serving-engine seam (kvcalc/engine/serving/): engine names live only there, the registry
refuses an unknown name with the list, and an engine registered as one module is served by
every command that takes --engine without any other change."""

from __future__ import annotations

import math
import re
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine import serving
from kvcalc.engine.serving import ENGINE_NAMES, engine_named
from kvcalc.engine.serving.base import (
    BatchRequest,
    Engine,
    EnginePart,
    InputRefusal,
    Refusals,
    ServingEngine,
    Setup,
)
from tests.report_check import refused, run_json

PACKAGE = Path(__file__).resolve().parents[1] / "kvcalc"


def test_no_engine_name_is_spelled_outside_the_serving_package() -> None:
    """An engine's name as a string literal anywhere else is a dispatch on it (or a copy of the
    registry): either way the next engine would have to edit that file too."""
    names = "|".join(re.escape(n) for n in (*ENGINE_NAMES, "trtllm"))
    literal = re.compile(rf"""(["'])({names})\1""")
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "serving" not in path.relative_to(PACKAGE).parts[:2]
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if literal.search(line)
    ]
    assert found == []


def test_the_scan_sees_a_name_where_one_is_spelled() -> None:
    # The scan above must be able to fail: the registry itself spells every name.
    source = (PACKAGE / "engine" / "serving" / "__init__.py").read_text()
    assert all(f'"{name}"' in source for name in ENGINE_NAMES)


def test_registry_refuses_an_unknown_engine_with_the_list() -> None:
    with pytest.raises(InputRefusal) as info:
        engine_named("tgi")
    assert info.value.fields == ("engine",)
    choose = "choose simple, vllm, sglang, trtllm"
    assert str(info.value) == f"--engine: unknown engine 'tgi'; {choose}"
    assert info.value.worded(str) == f"engine: unknown engine 'tgi'; {choose}"


def test_registry_names_match_their_engines() -> None:
    for name in ENGINE_NAMES:
        engine = engine_named(name.upper())
        assert engine.name == name
        assert engine.summary.startswith(f"{name}: ")


def test_an_engine_own_option_is_refused_by_the_others() -> None:
    with pytest.raises(InputRefusal) as info:
        serving.check_inputs(engine_named("vllm"), {"page_size": 16})
    assert info.value.worded(lambda f: f"<{f}>") == "<page_size>: applies to <engine> sglang only"


# ------------------------------------------------------------------ one module: a new engine


class _FixedPool:
    """A toy engine's pool: every replica holds TOKENS tokens, whatever the deployment."""

    TOKENS = 100_000

    def __init__(self, dep: Any) -> None:
        self.dep = dep

    def max_batches(self, contexts: Sequence[int]) -> tuple[list[int], str | None]:
        return [self.TOKENS // c for c in contexts], None

    def max_batch(self, context: int) -> int:
        return self.TOKENS // context

    def fraction(self, batch_per_replica: int, context: int) -> float:
        return batch_per_replica * context / self.TOKENS

    def longest_context(self) -> int | None:
        return self.TOKENS

    def batch(self, request: BatchRequest) -> _FixedAnswer:
        return _FixedAnswer(list(request.contexts or [8192]))

    def caveats(self) -> list[str]:
        return []

    def step_tokens(self) -> int:
        return 8192

    def started_with(self) -> dict[str, Any]:
        return {"fixed_blocks": 1}


class _FixedAnswer:
    def __init__(self, contexts: list[int]) -> None:
        self.contexts = contexts

    def part(self, setup: Setup) -> EnginePart:
        rows = [{"context_tokens": c, "max_batch": _FixedPool.TOKENS // c} for c in self.contexts]
        return EnginePart(
            payload={"engine": "fixed", "kv_cache_tokens": _FixedPool.TOKENS, "contexts": rows},
            records=rows,
            fields=("context_tokens", "max_batch"),
            lines=[f"Fixed pool: {_FixedPool.TOKENS:,} tokens ({setup.kv_label})"],
            fits=True,
            lengths=self.contexts,
        )


class _Fixed(Engine):
    name = "fixed"
    label = "Fixed"
    summary = "fixed: a pool of 100,000 tokens"
    default_contexts: tuple[int, ...] | None = (8192,)
    refusals = Refusals({"prefix_shared": "the fixed pool ignores it"})

    def pool(self, dep: Any, options: Any = None) -> _FixedPool:
        return _FixedPool(dep)


@pytest.fixture()
def fixed_engine(monkeypatch: pytest.MonkeyPatch) -> ServingEngine:
    """A new engine as the seam takes one: a module with ENGINE, and its name registered (after
    the commands' modules are loaded, so that no other test sees it in --engine's help)."""
    import kvcalc.cli.batch
    import kvcalc.cli.decode
    import kvcalc.cli.plan  # noqa: F401

    engine: ServingEngine = _Fixed()
    module = types.ModuleType("kvcalc.engine.serving.fixed")
    module.ENGINE = engine  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(serving, "ENGINE_NAMES", (*ENGINE_NAMES, "fixed"))
    monkeypatch.setattr(serving, "_LOADED", {})
    return engine


def test_a_registered_engine_answers_batch_through_the_generic_report(
    runner: CliRunner, fixed_engine: ServingEngine
) -> None:
    doc = run_json(
        runner, "batch", "llama3.1-8b", "--gpus", "h100", "--engine", "fixed", "--ctx", "8k,32k"
    )
    assert doc["kv_cache_tokens"] == 100_000
    assert doc["contexts"] == [
        {"context_tokens": 8192, "max_batch": 12},
        {"context_tokens": 32768, "max_batch": 3},
    ]
    table = runner.invoke(app, ["batch", "llama3.1-8b", "--gpus", "h100", "--engine", "fixed"])
    assert table.exit_code == 0, table.stderr
    assert "Fixed pool: 100,000 tokens" in table.stdout


def test_a_registered_engine_sizes_decode_batch_and_refuses_what_it_ignores(
    runner: CliRunner, fixed_engine: ServingEngine
) -> None:
    doc = run_json(
        runner, "decode", "llama3.1-8b", "--gpus", "h100", "--engine", "fixed", "--ctx", "32k"
    )
    assert doc["engine"] == "fixed"
    assert [step["batch"] for step in doc["contexts"]] == [math.floor(100_000 / 32768)]
    assert doc["engine_inputs"] == {"fixed_blocks": 1}  # the pool's own, as it states them
    refused(
        runner,
        ["decode", "llama3.1-8b", "--gpus", "h100", "--engine", "fixed", "--prefix-shared", "1k"],
        "--prefix-shared: the fixed pool ignores it",
    )
    refused(
        runner,
        ["batch", "llama3.1-8b", "--gpus", "h100", "--engine", "fixed", "--page-size", "16"],
        "--page-size: applies to --engine sglang only",
    )


DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_the_docs_name_every_engine() -> None:
    """docs/serving.md's module table has a row per engine and quotes the refusal of an unknown
    one as it is; docs/shell-completion.md and docs/engines.md list `--engine`'s values and
    plan's as the registry has them."""
    from kvcalc.planning import plan_engines

    page = (DOCS / "serving.md").read_text()
    rows = re.findall(r"^\| `(\w+)\.py` *\| `(\w+)` *\|", page, re.M)
    assert rows == [(name, name) for name in ENGINE_NAMES]
    with pytest.raises(InputRefusal) as refusal:
        engine_named("tgi")
    assert f"`{refusal.value.worded(lambda f: '--' + f.replace('_', '-'))}`" in page
    planned = [engine.name for engine in plan_engines()]
    listed = ", ".join(f"`{name}`" for name in ENGINE_NAMES)
    plans = ", ".join(f"`{name}`" for name in planned)
    completion = " ".join((DOCS / "shell-completion.md").read_text().split())
    assert f"the values of `--engine` ({listed}; `plan`: {plans})" in completion
    engines = " ".join((DOCS / "engines.md").read_text().split())
    assert f"`batch`, `decode`, `plan` ({plans}) and the deployments" in engines
