"""The Python API (kvcalc.api): each function answers what its command prints.

The reference for every function is the command line itself: ``to_dict()`` must equal the parsed
``--format json`` of the same inputs, and an input the command refuses must raise a KvcalcError
whose message is the command's error line. The figures are the golden ones of the CLI tests
(Llama-3-70B: 80 layers x 8 KV heads x 128 dims x 2 (K and V) x 2 bytes = 327,680 B per token,
40 GiB per sequence at 128k; Meta's config.json is the registry file's source).
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from report_check import SEED, run_json
from typer.testing import CliRunner

import kvcalc
from kvcalc.cli.app import app
from kvcalc.errors import InputError, KvcalcError, LayoutError, UnknownNameError

ROOT = Path(__file__).resolve().parent.parent
GiB = 1 << 30
#: report_check.SEED as keywords: 140 GB of weights on eight 80 GB H100s, 10% held back.
SEED_INPUTS: dict[str, Any] = {
    "gpus": "8xH100", "gpu_memory": "80GB", "weights": 140 * 10**9, "reserve": 0.10
}


# ------------------------------------------------------------------ the API is the CLI's JSON

#: (command line, API call): the same question both ways.
SAME = [
    (["size", "llama3-70b", "--ctx", "128k"], lambda: kvcalc.size("llama3-70b", ctx="128k")),
    (
        ["size", "llama3-70b", "--ctx", "8k,32k", "--batch", "4", "--kv-dtype", "fp8"],
        lambda: kvcalc.size("llama3-70b", ctx=["8k", 32768], batch=4, kv_dtype="fp8"),
    ),
    (
        ["size", "llama3-70b", "--ctx", "128k", "--window", "4096"],
        lambda: kvcalc.size("llama3-70b", ctx=131072, window=4096),
    ),
    (
        ["size", "llama3-70b", "--snapkv-budget", "2k", "--prompt", "32k", "--gen", "1k"],
        lambda: kvcalc.size("llama3-70b", snapkv_budget="2k", prompt="32k", gen=1024),
    ),
    (
        ["size", "llama3-8b", "--as", "mla:512+64", "--ctx", "32k"],
        lambda: kvcalc.size("llama3-8b", attention="mla:512+64", ctx="32k"),
    ),
    (["batch", "llama3-70b", *SEED], lambda: kvcalc.batch("llama3-70b", **SEED_INPUTS)),
    (
        ["batch", "llama3-70b", "--gpus", "8xH100", "--ctx", "8k,32k", "--kv-dtype", "fp8",
         "--window", "4096"],
        lambda: kvcalc.batch("llama3-70b", gpus="8xH100", ctx="8k,32k", kv_dtype="fp8",
                             window=4096),
    ),
    (
        ["batch", "llama3.1-8b", "--gpus", "1xH100", "--engine", "vllm",
         "--max-model-len", "32k,128k"],
        lambda: kvcalc.batch("llama3.1-8b", gpus="1xH100", engine="vllm",
                             max_model_len=["32k", "128k"]),
    ),
    (
        ["batch", "llama3.1-8b", "--gpus", "1xH100", "--engine", "sglang", "--ctx", "8k",
         "--mem-fraction-static", "0.85", "--free-before-load", "78.43"],
        lambda: kvcalc.batch("llama3.1-8b", gpus="1xH100", engine="sglang", ctx=8192,
                             mem_fraction_static=0.85, free_before_load=78.43),
    ),
    (
        ["batch", "--gpus", "8xH100", "--ctx", "32k"],
        lambda: kvcalc.batch(gpus="8xH100", ctx="32k"),
    ),
    (
        ["decode", "llama3-70b", "--gpus", "8xH100", "--ctx", "8k,32k"],
        lambda: kvcalc.decode("llama3-70b", gpus="8xH100", ctx=["8k", "32k"]),
    ),
    (
        ["decode", "llama3-70b", "--gpus", "8xH100", "--batch", "400", "--mbu", "0.8",
         "--mfu", "0.5", "--engine", "vllm"],
        lambda: kvcalc.decode("llama3-70b", gpus="8xH100", batch=400, mbu=0.8, mfu=0.5,
                              engine="vllm"),
    ),
    (
        ["plan", "llama3-70b", "--users", "32", "--ctx", "8k", "--max-tpot", "50ms",
         "--gpus", "H100,H200", "--kv-dtype", "bf16,fp8", "--price", "H100=2.5,H200=3.1"],
        lambda: kvcalc.plan("llama3-70b", users=32, ctx="8k", max_tpot="50ms",
                            gpus=["H100", "H200"], kv_dtype=["bf16", "fp8"],
                            price={"H100": 2.5, "H200": 3.1}),
    ),
    (
        ["sweep", "llama3-70b", "--gpus", "8xH100", "--ctx", "8k..32k"],
        lambda: kvcalc.sweep("llama3-70b", gpus="8xH100", ctx="8k..32k"),
    ),
    (
        ["sweep", "llama3-8b", "llama3-70b", "--gpus", "8xH100", "--gpus", "4xH200",
         "--ctx", "8k,32k", "--batch", "1,8", "--mbu", "0.8"],
        lambda: kvcalc.sweep(
            ["llama3-8b", "llama3-70b"], gpus=["8xH100", "4xH200"], ctx="8k,32k",
            batch=[1, 8], mbu=0.8,
        ),
    ),
    (
        ["offload", "llama3-70b", "--gpus", "8xH100"],
        lambda: kvcalc.offload("llama3-70b", gpus="8xH100"),
    ),
    (
        ["offload", "llama3-70b", "--gpus", "8xH100", "--ctx", "128k",
         "--tier", "cpu:512GB@64GB/s", "--kv-memory", "40GiB"],
        lambda: kvcalc.offload(
            "llama3-70b", gpus="8xH100", ctx="128k", tier="cpu:512GB@64GB/s",
            kv_memory=40 * GiB,
        ),
    ),
    (
        ["compare", "llama3-70b", "--ctx", "128k"],
        lambda: kvcalc.compare("llama3-70b", ctx="128k"),
    ),
    (
        ["compare", "llama3-70b", "mixtral-8x7b", "--gpus", "8xH100", "--ctx", "32k",
         "--only", "baseline,fp8,as-mqa,window"],
        lambda: kvcalc.compare(
            ["llama3-70b", "mixtral-8x7b"], gpus="8xH100", ctx="32k",
            only=["baseline", "fp8", "as-mqa", "window"],
        ),
    ),
    (
        ["compare", "llama3-70b", "--prompt", "4k", "--gen", "1k", "--ctx", "8k"],
        lambda: kvcalc.compare("llama3-70b", prompt="4k", gen="1k", ctx="8k"),
    ),
    (
        ["check", str(ROOT / "examples" / "capacity.yaml")],
        lambda: kvcalc.check(ROOT / "examples" / "capacity.yaml"),
    ),
]


@pytest.mark.parametrize(("args", "call"), SAME, ids=[" ".join(a[:2]) for a, _ in SAME])
def test_to_dict_is_the_commands_json(runner: CliRunner, args: list[str], call: Any) -> None:
    result = call()
    document = run_json(runner, *args, code=result.exit_code)
    assert result.to_dict() == document
    assert json.loads(json.dumps(result.to_dict())) == document  # plain JSON types only


def test_a_failing_check_is_a_result_not_an_error(runner: CliRunner) -> None:
    spec = ROOT / "examples" / "capacity-fails.yaml"
    result = kvcalc.check(spec)
    assert result.exit_code == 1 and not result.passed
    assert result.to_dict() == run_json(runner, "check", str(spec), code=1)
    assert not all(c.ok for c in result.deployments)


# ------------------------------------------------------------------ golden figures


def test_llama3_70b_golden_figures() -> None:
    result = kvcalc.size("llama3-70b", ctx="128k")
    assert result.model == "llama3-70b"
    assert result.kv_bytes_per_token == 327_680 == 320 * 1024
    assert result.contexts == (131_072,)
    assert result.kv_bytes_per_sequence == (40 * GiB,)
    assert result.kv_bytes_total == (40 * GiB,)
    assert result.kv_dtype == "bf16"


def test_batch_golden_figures(runner: CliRunner) -> None:
    # Seed 004: 8 x 80 GB - 10% - 140 GB of weights = 436 GB of KV, 327,680 B per token.
    result = kvcalc.batch("llama3-70b", **SEED_INPUTS, ctx="128k")
    assert result.contexts == (131_072,)
    assert result.max_batch == (436 * 10**9 // (40 * GiB),) == (10,)
    registry = kvcalc.batch(gpus="8xH100", ctx="32k")
    assert registry.model is None and registry.max_batch == ()
    cap = registry.registry["llama3-70b"]
    assert not isinstance(cap, str)
    assert cap.contexts[0].max_batch == kvcalc.batch("llama3-70b", gpus="8xH100", ctx="32k"
                                                     ).max_batch[0]


def test_batch_typed_figures_are_the_jsons() -> None:
    vllm = kvcalc.batch("llama3.1-8b", gpus="1xH100", engine="vllm", max_model_len="32k")
    assert vllm.engine == "vllm" and vllm.contexts == (32_768,)
    # vLLM's log prints its concurrency as a fraction; whole requests are what run at once.
    document = vllm.to_dict()
    key = "max_batch" if "max_batch" in document else "max_concurrency"  # before issue 16's vocab
    assert vllm.max_batch[0] == int(document[key]) > 0


def test_decode_figures() -> None:
    result = kvcalc.decode("llama3-70b", gpus="8xH100", ctx=["8k", "32k"], batch=8)
    assert result.contexts == (8192, 32_768) and result.batch == (8, 8)
    # The roofline reads the weights once (Llama-3-70B in bf16 without its embedding table:
    # 139.03 GB) and each sequence's cache (2.5 GiB at 8k) at 8 x 3.35 TB/s.
    weights, h100 = 139_025_580_032, 3.35e12
    assert result.roofline_tpot_seconds[0] == pytest.approx(
        (weights + 8 * 2.5 * GiB) / (8 * h100)
    )
    # The realistic estimate is slower than the roofline bound, never faster.
    assert all(
        t is not None and t > r
        for t, r in zip(result.tpot_seconds, result.roofline_tpot_seconds, strict=True)
    )
    assert all(t is not None and t > 0 for t in result.ttft_seconds)


def test_plan_layouts() -> None:
    result = kvcalc.plan("llama3-70b", users=32, ctx="8k", max_tpot="50ms", gpus="H100,H200")
    best = result.layouts[0]
    assert best.max_batch >= 32
    assert best.tpot_seconds is not None and best.tpot_seconds <= 0.050
    assert best.label in result.render("table")  # the layout the command ranks first


def test_a_spec_object_is_a_model() -> None:
    from kvcalc.registry.load import resolve_model

    spec = resolve_model("llama3-70b")
    assert kvcalc.size(spec, ctx="8k").to_dict() == kvcalc.size("llama3-70b", ctx="8k").to_dict()


def test_fp8_halves_the_golden_cache() -> None:
    result = kvcalc.size("llama3-70b", ctx=[8192, "128k"], kv_dtype="fp8", batch=2)
    assert result.kv_bytes_per_token == 163_840
    assert result.kv_bytes_per_sequence == (int(1.25 * GiB), 20 * GiB)
    assert result.kv_bytes_total == (int(2.5 * GiB), 40 * GiB)


def test_sweep_lines_hold_the_figures_of_size_and_batch(runner: CliRunner) -> None:
    result = kvcalc.sweep("llama3-70b", gpus=["8xH100"], ctx=["8k", "128k"])
    (line,) = result.lines
    assert result.contexts == (8192, 131_072)
    assert [p.kv_bytes_per_sequence for p in line.points] == [int(2.5 * GiB), 40 * GiB]
    batch = run_json(runner, "batch", "llama3-70b", "--gpus", "8xH100", "--ctx", "8k,128k")
    assert [p.max_batch for p in line.points] == [c["max_batch"] for c in batch["contexts"]]


def test_compare_rows_are_typed() -> None:
    result = kvcalc.compare("llama3-70b", ctx="128k", only="baseline,fp8")
    (model,) = result.models
    assert result.context == 131_072
    assert [r.technique for r in model.rows] == ["baseline", "fp8"]
    assert [r.bytes_per_sequence for r in model.rows] == [40 * GiB, 20 * GiB]


def test_offload_tiers() -> None:
    result = kvcalc.offload("llama3-70b", gpus="8xH100", tier=["cpu:512GB@64GB/s"])
    assert result.context == 32_768
    (tier,) = result.tiers
    assert tier.tier.name == "cpu"
    # 512 GB of 327,680-byte tokens.
    assert tier.tokens == 512 * 10**9 // 327_680


# ------------------------------------------------------------------ results are frozen


def test_results_are_frozen() -> None:
    result = kvcalc.size("llama3-70b", ctx="8k")
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.kv_bytes_per_token = 1  # type: ignore[misc]
    report = result.report()
    report.warnings = ["changed"]
    assert result.report().warnings == [] and "warnings" not in result.to_dict()


# ------------------------------------------------------------------ errors


#: (command line, API call, field): a refusal both ways.
REFUSED = [
    (["size", "llama3-70"], lambda: kvcalc.size("llama3-70"), "model"),
    (["size", "llama3-70b", "--ctx", "12q"], lambda: kvcalc.size("llama3-70b", ctx="12q"), "ctx"),
    (
        ["size", "llama3-70b", "--sinks", "4"],
        lambda: kvcalc.size("llama3-70b", sinks=4),
        "sinks",
    ),
    (
        ["size", "llama3-70b", "--kv-dtype", "fp7"],
        lambda: kvcalc.size("llama3-70b", kv_dtype="fp7"),
        "kv_dtype",
    ),
    (
        ["offload", "llama3-70b", "--gpus", "8xH100", "--ctx", "8k,32k"],
        lambda: kvcalc.offload("llama3-70b", gpus="8xH100", ctx="8k,32k"),
        "ctx",
    ),
    (
        ["offload", "llama3-70b", "--gpus", "8xH100", "--kv-memory", "90GB"],
        lambda: kvcalc.offload("llama3-70b", gpus="8xH100", kv_memory="90GB"),
        "kv_memory",
    ),
    (
        ["sweep", "llama3-70b", "--gpus", "8xH100", "--gpus", "8xH100"],
        lambda: kvcalc.sweep("llama3-70b", gpus=["8xH100", "8xH100"]),
        "gpus",
    ),
    (
        ["sweep", "llama3-70b", "--gpus", "8xH1000"],
        lambda: kvcalc.sweep("llama3-70b", gpus="8xH1000"),
        "gpus",
    ),
    (
        ["compare", "llama3-70b", "--only", "fp9"],
        lambda: kvcalc.compare("llama3-70b", only="fp9"),
        "only",
    ),
    (
        ["batch", "llama3-70b", "--gpus", "8xH100", "--engine", "vllm", "--window", "4k"],
        lambda: kvcalc.batch("llama3-70b", gpus="8xH100", engine="vllm", window="4k"),
        "window",
    ),
    (
        ["batch", "llama3-70b", "--gpus", "8xH100", "--page-size", "16"],
        lambda: kvcalc.batch("llama3-70b", gpus="8xH100", page_size=16),
        "page_size",
    ),
    (
        ["decode", "llama3-70b", "--gpus", "8xH100", "--mbu", "1.5"],
        lambda: kvcalc.decode("llama3-70b", gpus="8xH100", mbu=1.5),
        "mbu",
    ),
    (
        ["plan", "llama3-70b", "--users", "100000", "--gpus", "H100", "--max-gpus", "2"],
        lambda: kvcalc.plan("llama3-70b", users=100_000, gpus="H100", max_gpus=2),
        None,
    ),
    (
        ["plan", "llama3-70b", "--users", "8", "--engine", "sglang"],
        lambda: kvcalc.plan("llama3-70b", users=8, engine="sglang"),
        "engine",
    ),
    (
        ["compare", "llama3-70b", "--tp", "4"],
        lambda: kvcalc.compare("llama3-70b", tp=4),
        "tp",
    ),
]


@pytest.mark.parametrize(
    ("args", "call", "field"), REFUSED, ids=[" ".join(a) for a, _, _ in REFUSED]
)
def test_errors_are_the_commands_error_line(
    runner: CliRunner, args: list[str], call: Any, field: str | None
) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    with pytest.raises(KvcalcError) as caught:
        call()
    assert line == f"Error: {caught.value}"
    assert caught.value.field == field


def test_an_error_names_its_field_and_fix() -> None:
    with pytest.raises(InputError) as caught:
        kvcalc.offload("llama3-70b", gpus="8xH100", kv_memory="90GB")
    assert caught.value.field == "kv_memory"
    assert caught.value.fix is not None and caught.value.fix in str(caught.value)
    with pytest.raises(UnknownNameError) as unknown:
        kvcalc.size("llama3-70")
    assert unknown.value.field == "model"
    assert unknown.value.fix is not None and "llama3-70b" in unknown.value.fix


def test_a_layout_the_model_refuses_is_a_layout_error() -> None:
    # Llama-3-70B's 8 KV heads do not split over tp 3; on 3 GPUs only tp 1 does.
    with pytest.raises(LayoutError) as caught:
        kvcalc.offload("llama3-70b", gpus="3xH100", tp=3)
    assert caught.value.field == "tp"
    assert caught.value.fix == "on 3 GPUs use tp 1"
    # A split of the GPUs no model takes is an input error, not a layout.
    with pytest.raises(InputError) as other:
        kvcalc.offload("llama3-70b", gpus="8xH100", tp=3)
    assert not isinstance(other.value, LayoutError)
    assert other.value.fields == ("tp", "pp")


def test_inputs_are_held_to_their_declared_range() -> None:
    # --tp takes 1 to 4096 and --window at least one token, on the command line and here.
    with pytest.raises(InputError) as tp:
        kvcalc.batch("llama3-70b", gpus="8xH100", tp=0)
    assert tp.value.field == "tp" and tp.value.fix == "give from 1 to 4096"
    with pytest.raises(InputError) as window:
        kvcalc.size("llama3-70b", window=0)
    assert window.value.field == "window"


def test_an_input_the_function_does_not_take_is_refused() -> None:
    with pytest.raises(InputError) as caught:
        kvcalc.size("llama3-70b", gpus="8xH100")  # type: ignore[call-arg]
    assert caught.value.field == "gpus"
    with pytest.raises(InputError):
        kvcalc.size("llama3-70b", kv_dtyp="fp8")  # type: ignore[call-arg]


def test_a_bad_spec_raises_every_problem(tmp_path: Path) -> None:
    from kvcalc.registry.check_spec import SpecError

    spec = tmp_path / "capacity.yaml"
    spec.write_text("deployments:\n  - {model: llama3-70, gpus: 8xH100, require: {min_batch: 1}}\n")
    with pytest.raises(SpecError) as caught:
        kvcalc.check(spec)
    assert isinstance(caught.value, KvcalcError)
    missing_ctx, unknown = caught.value.problems
    assert missing_ctx.startswith(f"{spec}:2: ") and "ctx: missing" in missing_ctx
    assert unknown.startswith(f"{spec}:2: ") and "did you mean llama3-70b" in unknown


# ------------------------------------------------------------------ import kvcalc stays cheap


def test_import_kvcalc_imports_no_command() -> None:
    code = (
        "import sys, kvcalc; "
        "print(sorted(m for m in sys.modules if m.startswith(('kvcalc', 'typer', 'pydantic'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['kvcalc']"


def test_every_function_is_exported() -> None:
    for name in (
        "size", "batch", "decode", "plan", "sweep", "offload", "compare", "check", "KvcalcError"
    ):
        assert name in kvcalc.__all__ and callable(getattr(kvcalc, name))
    with pytest.raises(AttributeError):
        kvcalc.no_such_name  # noqa: B018


# ------------------------------------------------------------------ docs/api.md runs


def python_blocks(path: Path) -> list[tuple[str, str | None]]:
    """Each ```python block of ``path`` with the output block (```text) right after it."""
    text = path.read_text(encoding="utf-8")
    pattern = re.compile(r"```python\n(.*?)```\s*(?:```text\n(.*?)```)?", re.DOTALL)
    return [(m.group(1), m.group(2)) for m in pattern.finditer(text)]


@pytest.mark.parametrize(("page", "least"), [("docs/api.md", 5), ("README.md", 1)])
def test_the_api_examples_run_and_print_what_they_show(page: str, least: int) -> None:
    blocks = python_blocks(ROOT / page)
    assert len(blocks) >= least
    for code, shown in blocks:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
            env=None,
        )
        assert out.returncode == 0, (code, out.stderr)
        if shown is not None:
            assert out.stdout == shown, code


def test_the_api_table_names_each_function_s_own_keywords() -> None:
    """docs/api.md's table names a function per command with keywords it takes, and the
    README's list of functions is the table's."""
    import inspect

    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    table = re.findall(r"^\| `kvcalc\.(\w+)\(([^)]*)\)` \| `kvcalc (\S+)`", page, re.M)
    assert len(table) >= 9
    for function, keywords, command in table:
        assert function == command
        named = [k.strip().rstrip("=") for k in keywords.split(",") if k.strip() != "..."]
        assert set(named) <= set(inspect.signature(getattr(kvcalc, function)).parameters), function
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    listed = readme.split("gives one function per command: ", 1)[1].split(".", 1)[0]
    assert set(re.findall(r"`(\w+)`", listed)) == {f for f, _, _ in table}


def test_the_keywords_types_are_the_declared_inputs() -> None:
    # The API's keyword types (for a type checker) mirror the declarations: every declared
    # input is a keyword, typed as its unit reads, and no keyword is undeclared.
    import typing
    from pathlib import Path

    from kvcalc import api
    from kvcalc.engine.inputs import all_inputs
    from kvcalc.options import EVICTION_INPUTS

    readable = {
        "tokens": {int | str}, "context": {int | str}, "count": {int, int | str},
        "fraction": {float}, "bytes": {str | int, str | float}, "text": {str}, "flag": {bool},
        "path": {str | Path, str},
    }
    declared = {**all_inputs(), **{i.name: i for i in EVICTION_INPUTS}}
    declared.pop("gpus")  # every function's own argument
    hints = {}
    for group in (api.DeploymentInputs, api.EngineInputs, api.EvictionInputs):
        hints.update(typing.get_type_hints(group))
    assert set(hints) == set(declared)
    for name, inp in declared.items():
        assert hints[name] in readable[inp.unit], (name, inp.unit, hints[name])


@pytest.mark.parametrize(
    "call",
    [
        lambda: kvcalc.plan("llama3-8b", users=4, ctx=""),
        lambda: kvcalc.offload("llama3-8b", gpus="h100", ctx=""),
        lambda: kvcalc.size("llama3-8b", ctx=""),
    ],
    ids=["plan", "offload", "size"],
)
def test_an_empty_context_is_refused_not_taken_for_the_default(call: Any) -> None:
    # The command line refuses `--ctx ''`; the library must not answer for 8k instead.
    with pytest.raises(InputError) as caught:
        call()
    assert caught.value.field == "ctx"
