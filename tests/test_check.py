"""`kvcalc check SPEC`: requirements measured with the engines `batch` and `decode` use, the
seed's figures, the CI formats, the example files, and every way a spec can be bad."""

from __future__ import annotations

import json
import math
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from specs import registry_deployment
from typer.testing import CliRunner, Result

from kvcalc.cli.app import app

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "capacity.yaml"
WORKFLOW = ROOT / "examples" / "github-workflow.yml"

#: Seed 004's deployment: Llama-3-70B on 8x H100 80 GB, 140 GB of weights, 10% reserved.
SEED = """\
deployments:
  - name: seed
    model: llama3-70b
    gpus: 8xH100
    gpu_memory: 80GB
    weights: 140GB
    reserve: 0.1
    ctx: 8k
    require:
      min_batch: {min_batch}
      max_tpot_ms: {tpot}
      min_tokens_per_second: 7000
      max_kv_fraction: 1
"""


def write(tmp_path: Path, text: str, name: str = "capacity.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def run(runner: CliRunner, path: Path | str, *args: str) -> Result:
    return runner.invoke(app, ["check", str(path), *args])


def run_json(runner: CliRunner, path: Path, code: int = 0, *args: str) -> dict:
    result = run(runner, path, "--format", "json", *args)
    assert result.exit_code == code, result.stderr
    return json.loads(result.stdout)


def requirements(payload: dict, deployment: int = 0) -> dict[str, dict]:
    return {r["requirement"]: r for r in payload["deployments"][deployment]["requirements"]}


# ------------------------------------------------------------------ measured figures


def test_seed_figures(runner: CliRunner, tmp_path: Path) -> None:
    out = run_json(runner, write(tmp_path, SEED.format(min_batch=162, tpot=21.5)), 0, "--roofline")
    assert out["ok"] is True and out["failed"] == 0 and out["requirement_count"] == 4
    req = requirements(out)
    # Seed 004: 162 sequences of 8K fit (the README's batch example).
    assert req["min_batch"]["measured"] == 162
    assert req["min_batch"]["margin"] == 0
    # The step reads the weights (about 5.2 ms) and 162 x 8,192 x 320 KiB of KV at 8 x 3.35 TB/s.
    kv_ms = 162 * 8192 * 327_680 / (8 * 3.35e12) * 1000
    assert req["max_tpot_ms"]["measured"] == pytest.approx(5.15 + kv_ms, abs=0.02)
    assert req["min_tokens_per_second"]["measured"] == pytest.approx(
        162 / (req["max_tpot_ms"]["measured"] / 1000)
    )
    # 162 sequences x 8,192 tokens x 40,960 bytes (one KV head per GPU) of a 54.5 GB budget.
    assert req["max_kv_fraction"]["measured"] == pytest.approx(
        162 * 8192 * 40_960 / 54_500_000_000
    )
    deployment = out["deployments"][0]
    assert (deployment["batch"], deployment["context_tokens"], deployment["tp"]) == (162, 8192, 8)


def test_a_failing_requirement_exits_1_with_its_shortfall(
    runner: CliRunner, tmp_path: Path
) -> None:
    out = run_json(runner, write(tmp_path, SEED.format(min_batch=170, tpot=21.5)), code=1)
    req = requirements(out)
    assert out["ok"] is False and out["failed"] >= 1
    assert (req["min_batch"]["passed"], req["min_batch"]["margin"]) == (False, 162 - 170)
    assert req["min_batch"]["margin_ratio"] == pytest.approx(-8 / 170)
    # 170 sequences do not fit the 54.5 GB budget: the fraction says by how much.
    assert req["max_kv_fraction"]["measured"] == pytest.approx(
        170 * 8192 * 40_960 / 54_500_000_000
    )
    assert req["max_kv_fraction"]["passed"] is False


def test_tpot_is_timed_at_the_required_batch(runner: CliRunner, tmp_path: Path) -> None:
    # 81 sequences emit fewer than the 7,000 tokens/s required: exit 1, still timed.
    small = requirements(
        run_json(runner, write(tmp_path, SEED.format(min_batch=81, tpot=50)), 1, "--roofline")
    )
    big = requirements(
        run_json(runner, write(tmp_path, SEED.format(min_batch=162, tpot=50)), 0, "--roofline")
    )
    # Half the sequences read half the KV; the weights are read once either way.
    kv_half = 81 * 8192 * 327_680 / (8 * 3.35e12) * 1000
    assert big["max_tpot_ms"]["measured"] - small["max_tpot_ms"]["measured"] == pytest.approx(
        kv_half, abs=0.01
    )


def test_vllm_engine_counts_whole_requests(runner: CliRunner, tmp_path: Path) -> None:
    # vLLM 0.19 on one H100: decode's default batch is the whole requests of its concurrency.
    decode = runner.invoke(app, ["decode", "llama3.1-8b", "--gpus", "h100", "--engine", "vllm",
                                 "--ctx", "8k", "--format", "json"])
    whole = json.loads(decode.stdout)["contexts"][0]["batch"]
    spec = f"""\
deployments:
  - {{name: v, model: llama3.1-8b, gpus: h100, engine: vllm, ctx: 8k,
     require: {{min_batch: {whole + 1}, min_context: 128k}}}}
"""
    out = run_json(runner, write(tmp_path, spec), code=1)
    req = requirements(out)
    assert (req["min_batch"]["measured"], req["min_batch"]["passed"]) == (whole, False)
    assert req["min_context"]["measured"] == 131_072  # the model's maximum, which vLLM serves
    assert req["min_context"]["passed"] is True


def test_replicas_split_the_batch(runner: CliRunner, tmp_path: Path) -> None:
    one = """\
deployments:
  - {name: r, model: llama3.1-8b, gpus: GPUS, tp: 1, ctx: 8k, require: {min_batch: 100,
     max_tpot_ms: 1000}}
"""
    # One H100 holds fewer than 100 sequences of 8k: exit 1, still measured.
    single = requirements(run_json(runner, write(tmp_path, one.replace("GPUS", "h100")), 1))
    eight = run_json(runner, write(tmp_path, one.replace("GPUS", "8xH100")))
    req = requirements(eight)
    assert eight["deployments"][0]["replicas"] == 8
    assert req["min_batch"]["measured"] == 8 * single["min_batch"]["measured"]
    # 100 sequences over 8 replicas: each steps 13 of them.
    from kvcalc.engine.decode import decode_step_for
    from kvcalc.engine.latency import tpot_estimate

    dep = registry_deployment("llama3.1-8b", "8xH100", tp=1)
    step = tpot_estimate(dep, batch=13, context_tokens=8192)
    assert req["max_tpot_ms"]["measured"] == pytest.approx(step.tpot_seconds * 1000)
    bound = decode_step_for(dep, batch=13, context_tokens=8192)
    assert step.tpot_seconds > bound.tpot_seconds  # the estimate pays what the bound does not
    assert "13 per replica" in req["max_tpot_ms"]["note"]


def test_min_context_at_batch_1_is_capped_by_the_model(runner: CliRunner, tmp_path: Path) -> None:
    spec = """\
deployments:
  - {name: seed, model: llama3-70b, gpus: 8xH100, gpu_memory: 80GB, weights: 140GB,
     reserve: 0.1, require: {min_context: 8k}}
  - {name: big, model: llama3.1-70b, gpus: 8xH100, require: {min_context: 1m}}
"""
    out = run_json(runner, write(tmp_path, spec), code=1)
    # Seed: 1,330,560 tokens fit one sequence, but Llama-3 was trained to 8,192.
    seed = requirements(out, 0)["min_context"]
    assert (seed["measured"], seed["note"]) == (8192, "the model's maximum context")
    big = requirements(out, 1)["min_context"]
    assert (big["measured"], big["passed"]) == (131_072, False)


def test_nothing_fits_fails_every_requirement_at_the_context(
    runner: CliRunner, tmp_path: Path
) -> None:
    spec = """\
deployments:
  - {name: tiny, model: llama3.1-70b, gpus: 1xL4, ctx: 8k,
     require: {min_batch: 1, max_tpot_ms: 100, max_kv_fraction: 0.9}}
"""
    out = run_json(runner, write(tmp_path, spec), code=1)
    assert out["deployments"][0]["reason"]
    for req in requirements(out).values():
        assert req["passed"] is False
    assert requirements(out)["min_batch"]["measured"] == 0
    # Nothing runs, so nothing is timed, even at the batch min_batch asks for.
    assert requirements(out)["max_tpot_ms"]["measured"] is None
    assert requirements(out)["max_tpot_ms"]["note"].startswith("nothing to measure: weights")
    assert out["deployments"][0]["batch"] is None


def test_defaults_are_merged_and_keep_their_lines(runner: CliRunner, tmp_path: Path) -> None:
    spec = """\
defaults:
  gpus: 8xH100
  ctx: 32k
  require:
    max_kv_fraction: 0.95
    min_batch: 1
deployments:
  - name: a
    model: llama3.1-70b
    require:
      min_batch: 2
  - name: b
    model: llama3.1-8b
    gpus: h100
"""
    out = run_json(runner, write(tmp_path, spec))
    a, b = requirements(out, 0), requirements(out, 1)
    assert (a["min_batch"]["required"], a["min_batch"]["line"]) == (2, 11)
    assert (b["min_batch"]["required"], b["min_batch"]["line"]) == (1, 6)
    assert a["max_kv_fraction"]["line"] == b["max_kv_fraction"]["line"] == 5
    assert out["deployments"][1]["gpus"]["label"].startswith("1x")
    assert out["deployments"][1]["gpus"]["id"] == "1xH100-SXM"
    assert [d["line"] for d in out["deployments"]] == [8, 12]


@given(
    st.sampled_from(["min_batch", "max_tpot_ms", "min_tokens_per_second", "max_kv_fraction"]),
    st.floats(0.01, 1e6),
    st.floats(0, 1e6),
)
def test_a_requirement_holds_exactly_when_its_margin_is_not_negative(
    key: str, required: float, measured: float
) -> None:
    from kvcalc.engine.requirements import evaluate

    outcome = evaluate(key, required, measured)
    assert outcome.margin is not None
    assert outcome.passed == (outcome.margin >= 0)


# ------------------------------------------------------------------ formats


def test_junit_has_a_testcase_per_requirement(runner: CliRunner, tmp_path: Path) -> None:
    path = write(tmp_path, SEED.format(min_batch=170, tpot=21.5))
    result = run(runner, path, "--format", "junit", "--roofline")
    assert result.exit_code == 1
    root = ET.fromstring(result.stdout)
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name", "").split()[0] for c in cases] == [
        "min_batch", "max_tpot_ms", "min_tokens_per_second", "max_kv_fraction"
    ]
    assert suite.get("tests") == "4" and root.get("failures") == suite.get("failures")
    failure = cases[0].find("failure")
    assert failure is not None
    assert "measured 162 seq" in failure.get("message", "")
    assert ">= 170 seq" in failure.get("message", "")
    assert (cases[0].get("file"), cases[0].get("line")) == (str(path), "10")
    assert cases[2].find("failure") is None  # 170 / TPOT still beats 7,000 tokens/s


def test_github_annotates_the_failing_requirement_line(runner: CliRunner, tmp_path: Path) -> None:
    path = write(tmp_path, SEED.format(min_batch=170, tpot=21.5))
    result = run(runner, path, "--format", "github", "--roofline")
    assert result.exit_code == 1
    errors = [line for line in result.stdout.splitlines() if line.startswith("::error ")]
    assert errors[0].startswith(f"::error file={path},line=10,title=seed%3A min_batch >= 170 seq::")
    assert "measured 162 seq" in errors[0]
    failed = json.loads(run(runner, path, "-f", "json", "--roofline").stdout)["failed"]
    assert len(errors) == failed
    assert result.stdout.splitlines()[-1].endswith("requirements fail (1 deployment)")


def test_github_data_is_escaped() -> None:
    from kvcalc.render.formats import github_annotation

    line = github_annotation("a,b:c%.yaml", 3, "50% of\nit\r")
    # A line break is shown as in every format, never a second line of the log.
    assert line == "::error file=a%2Cb%3Ac%25.yaml,line=3::50%25 of\\nit\\r"
    warning = github_annotation(None, None, "w", command="warning")
    assert warning == "::warning::w"


@pytest.mark.parametrize("fmt", ["junit", "github"])
@pytest.mark.parametrize(
    "command", [["size", "llama3-70b"], ["batch", "llama3-70b", "--gpus", "8xH100"], ["models"]]
)
def test_only_check_offers_the_ci_formats(
    runner: CliRunner, command: list[str], fmt: str
) -> None:
    result = runner.invoke(app, [*command, "--format", fmt])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert "--format" in line


# ------------------------------------------------------------------ the example files


def test_the_example_spec_holds_and_its_page_shows_it(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    result = run(runner, "examples/capacity.yaml")
    assert result.exit_code == 0, result.stderr
    out = run_json(runner, EXAMPLE)
    assert out["ok"] is True
    names = [d["deployment"] for d in out["deployments"]]
    page = (ROOT / "docs" / "commands" / "check.md").read_text()
    assert "$ kvcalc check examples/capacity.yaml\n" in page
    assert EXAMPLE.read_text() in page  # check's page shows the file it runs
    for name in names:
        assert name in result.stdout


def test_the_example_workflow_installs_kvcalc_and_runs_the_check() -> None:
    assert WORKFLOW.read_text() in (ROOT / "docs" / "commands" / "check.md").read_text()
    workflow = yaml.safe_load(WORKFLOW.read_text())
    assert workflow["name"]
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert triggers
    steps = [s for job in workflow["jobs"].values() for s in job["steps"]]
    runs = [s.get("run", "") for s in steps]
    install = next(
        i for i, s in enumerate(steps) if "kvcalc" in s.get("name", "") and "pip install" in runs[i]
    )
    check = next(i for i, r in enumerate(runs) if "kvcalc check" in r)
    assert install < check
    assert "examples/capacity.yaml" in runs[check] or "capacity.yaml" in runs[check]
    assert any(s.get("uses", "").startswith("actions/checkout") for s in steps)
    assert "--format github" in runs[check] or "-f github" in runs[check]


# ------------------------------------------------------------------ bad specs


BAD_SPECS = [
    # (spec text, line, words the one line must contain)
    ("deployments:\n  - {model: llama3-8b, gpus: h100, ctx: 8k, require: {min_batch: 1},\n"
     "     tpp: 2}\n", 3, ["deployments[0].tpp", "unknown key"]),
    ("deployments:\n  - model: llama3-8b\n    gpus: h100\n    ctx: 8k\n    require:\n"
     "      min_bach: 1\n", 6, ["require.min_bach", "unknown requirement", "min_batch"]),
    ("deployments:\n  - gpus: h100\n    ctx: 8k\n    require: {min_batch: 1}\n", 2,
     ["model: missing"]),
    ("deployments:\n  - model: llama3-8b\n    ctx: 8k\n    require: {min_batch: 1}\n", 2,
     ["gpus: missing"]),
    ("deployments:\n  - model: llama3-8b\n    gpus: h100\n    require:\n      min_batch: 4\n",
     5, ["ctx: missing", "min_batch"]),
    ("deployments:\n  - model: llama3-8b\n    gpus: h100\n    ctx: 8k\n"
     "    require: {min_context: 8k}\n", 4, ["ctx:", "no requirement"]),
    ("deployments:\n  - model: llama3-8b\n    gpus: h100\n    mfu: 0.8\n"
     "    require: {min_context: 8k}\n", 4, ["mfu", "max_tpot_ms"]),
    ("deployments:\n  - model: llama3-8b\n    gpus: h100\n    require:\n"
     "      max_ttft_ms: 200\n", 5, ["ctx: missing", "max_ttft_ms"]),
    # Eviction as the command line takes it.
    ("deployments:\n  - model: llama3-8b\n    gpus: h100\n    window: 1000\n"
     "    require: {min_context: 8k}\n", 4, ["window: an eviction policy is sized at a context"]),
    ("deployments:\n  - model: llama3-8b\n    gpus: h100\n    engine: vllm\n    ctx: 8k\n"
     "    window: 1000\n    require: {min_batch: 1}\n", 6, ["window:", "does not evict"]),
    ("deployments:\n  - model: llama3-70b\n    gpus: 8xH100\n    snapkv_budget: 1024\n"
     "    prompt: 32k\n    gen: 1k\n    ctx: 8k\n    require: {min_batch: 1}\n", 7,
     ["ctx: with snapkv_budget the context is prompt + gen"]),
    ("deployments:\n  - model: llama3-8b\n    gpus: h100\n    ctx: 8k\n    window: 100000\n"
     "    require: {min_batch: 1}\n", 5, ["window:", "no eviction happens"]),
    ("deployments:\n  - model: llama3-8b\n    gpus: h100\n    require: {}\n", 2,
     ["at least one requirement"]),
    ("deployments:\n  - model: llama3-8b\n    gpus: h100\n    gpus: h200\n"
     "    require: {min_context: 8k}\n", 4, ["gpus", "duplicate key"]),
    ("deployments:\n  - model: nosuch-model\n    gpus: h100\n    require: {min_context: 8k}\n",
     2, ["model:", "unknown model"]),
    ("deployments:\n  - model: llama3-8b\n    gpus: 2xNOPE\n    require: {min_context: 8k}\n",
     3, ["gpus:", "unknown gpu"]),
    ("deployments:\n  - model: llama3-8b\n    gpus: 8xH100\n    tp: 3\n"
     "    require: {min_context: 8k}\n", 4, ["tp and pp", "cannot be split"]),
    ("deployments:\n  - model: llama3-8b\n    gpus: h100\n    engine: sglang\n"
     "    prefix_shared: 64\n    require: {min_context: 8k}\n", 5,
     ["prefix_shared:", "SGLang"]),
    ("deployments:\n  - model: llama3-8b\n    gpus: h100\n    ctx: 8k\n"
     "    prefix_shared: 8192\n    require: {min_batch: 1}\n", 5,
     ["prefix_shared: 8,192 shared tokens leave nothing"]),
    ("deployments:\n  - model: llama3-8b\n    gpus: h100\n    kv_memory: 20\n"
     "    require: {min_context: 8k}\n", 4, ["kv_memory:"]),
    ("deployments:\n  - model: llama3-8b\n    gpus: h100\n    ctx: 8x\n"
     "    require: {min_batch: 1}\n", 4, ["deployments[0].ctx", "is not a token count"]),
    ("deployments:\n  - model: llama3-8b\n    gpus: h100\n    engine: tgi\n"
     "    require: {min_context: 8k}\n", 4, ["deployments[0].engine", "simple"]),
    ("deployments:\n  - {name: a, model: llama3-8b, gpus: h100, require: {min_context: 8k}}\n"
     "  - {name: a, model: llama3-8b, gpus: h200, require: {min_context: 8k}}\n", 3,
     ["name", "already"]),
    ("defaults: {name: x}\ndeployments:\n  - {model: llama3-8b, gpus: h100,"
     " require: {min_context: 8k}}\n", 1, ["defaults:", "name belongs to one deployment"]),
    ("deployments: []\n", 1, ["at least one deployment"]),
    ("- just a list\n", 1, ["expected a mapping"]),
    ("deployments:\n  - {model: llama3-8b, gpus: h100, require: {min_context: 8k}}\n"
     "deploy: 1\n", 3, ["deploy", "unknown key"]),
    ("", 1, ["empty"]),
    ("deployments:\n  - model: [unclosed\n", 3, ["invalid YAML"]),
    ("a: 1\n---\nb: 2\n", 2, ["invalid YAML"]),
    # Hostile YAML: an anchor bomb, explicit tags (the unsafe loader's Python objects among them).
    ("a: [&a x, *a, *a]\n", 1, ["anchors and aliases"]),
    ("deployments: !!python/object/apply:os.system ['true']\n", 1, ["tags"]),
    ("deployments:\n  - model: !!str llama3-8b\n", 2, ["tags"]),
    ("deployments:\n  - {? [a, b] : 1, model: llama3-8b, gpus: h100,\n"
     "     require: {min_context: 8k}}\n", 2, ["keys must be plain words"]),
    # The number rule and the ranges of the command line's options hold in a spec too.
    ("deployments:\n  - {model: llama3-8b, gpus: h100, tp: 1" + "0" * 80
     + ", require: {min_context: 8k}}\n", 2, ["deployments[0].tp", "longer than any number"]),
    ("deployments:\n  - {model: llama3-8b, gpus: h100, reserve: .nan,"
     " require: {min_context: 8k}}\n", 2, ["deployments[0].reserve", "finite"]),
    ("deployments:\n  - {model: llama3-8b, gpus: h100, ctx: 8k,"
     " require: {max_tpot_ms: .inf}}\n", 2, ["max_tpot_ms", "finite"]),
    ("deployments:\n  - {model: llama3-8b, gpus: h100, tp: 5000,"
     " require: {min_context: 8k}}\n", 2, ["tp: 5000 is out of range", "from 1 to 4096"]),
    ("deployments:\n  - {model: llama3-8b, gpus: h100, engine: sglang, page_size: 100000,"
     " require: {min_context: 8k}}\n", 2, ["page_size", "from 1 to 65536"]),
]


@pytest.mark.parametrize(("text", "line", "words"), BAD_SPECS, ids=lambda v: repr(v)[:40])
def test_a_bad_spec_is_one_line_per_problem_and_exit_2(
    runner: CliRunner, tmp_path: Path, text: str, line: int, words: list[str]
) -> None:
    path = write(tmp_path, text)
    result = run(runner, path)
    assert result.exit_code == 2, result.stdout
    assert result.stdout == ""
    (problem,) = result.stderr.splitlines()
    where = f"{path}:{line}: " if line else f"{path}: "
    assert problem.startswith(f"Error: {where}"), problem
    for word in words:
        assert word in problem
    assert "Traceback" not in result.stderr


def test_every_problem_gets_its_own_line(runner: CliRunner, tmp_path: Path) -> None:
    spec = """\
deployments:
  - {model: nosuch-model, gpus: h100, require: {min_context: 8k}}
  - {model: llama3-8b, gpus: h100, require: {min_contxt: 8k}}
  - {model: llama3-8b, gpus: h100, tp: two, require: {min_context: 8k}}
"""
    result = run(runner, write(tmp_path, spec))
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    # The valid deployment with an unknown model is built (and refused) beside the others.
    assert [re.findall(r":(\d+): ", p)[0] for p in lines] == ["2", "3", "4"]
    assert "unknown model" in lines[0]
    github = run(runner, write(tmp_path, spec), "--format", "github")
    errors = github.stdout.splitlines()
    assert [e.split(",")[1] for e in errors[:3]] == ["line=2", "line=3", "line=4"]
    second = errors[1]
    assert second.startswith("::error file=")
    assert second.endswith("::deployments[1].require.min_contxt: unknown requirement; choose "
                          "min_batch, min_context, max_tpot_ms, max_ttft_ms, "
                          "min_tokens_per_second, max_kv_fraction")


def test_the_error_names_the_spec_key_not_the_option(runner: CliRunner, tmp_path: Path) -> None:
    spec = """\
deployments:
  - model: llama3-8b
    gpus: h100
    reserve: 0.1
    gpu_util: 0.8
    require: {min_context: 8k}
"""
    result = run(runner, write(tmp_path, spec))
    assert result.exit_code == 2
    assert ":4: deployments[0] (llama3-8b on h100): reserve and gpu_util:" in result.stderr
    assert "--" not in result.stderr


def test_a_huge_file_is_refused_before_parsing(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text("# " + "x" * (1 << 20) + "\n")
    result = run(runner, path)
    assert result.exit_code == 2
    assert "too large" in result.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a FIFO")
def test_a_non_regular_file_is_refused_without_reading(
    runner: CliRunner, tmp_path: Path
) -> None:
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)  # reading it would block forever
    result = run(runner, fifo)
    assert result.exit_code == 2
    assert "not a regular file" in result.stderr
    result = run(runner, tmp_path)
    assert (result.exit_code, "not a regular file" in result.stderr) == (2, True)
    result = run(runner, tmp_path / "missing.yaml")
    assert (result.exit_code, "file not found" in result.stderr) == (2, True)


def test_a_config_path_is_relative_to_the_spec(runner: CliRunner, tmp_path: Path) -> None:
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
        "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 8192,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    spec = "deployments:\n  - {model: m/config.json, gpus: h100, require: {min_context: 8k}}\n"
    out = run_json(runner, write(tmp_path, spec))
    assert requirements(out)["min_context"]["measured"] == 8192


def test_spec_keys_are_the_command_line_options() -> None:
    from dataclasses import fields

    from kvcalc.cli.eviction import EvictionOptions
    from kvcalc.deploy import DeploymentOptions, EngineChoice, engine_input_names
    from kvcalc.registry.check_spec import DeploymentEntry

    options = {*DeploymentOptions.names, *(f.name for f in fields(EvictionOptions))}
    options |= {*engine_input_names(), *EngineChoice._fields}
    assert options <= set(DeploymentEntry.model_fields)
    assert set(DeploymentEntry.model_fields) - options == {
        "name", "model", "ctx", "mfu", "judge", "require"
    }


def test_unbounded_is_not_a_number() -> None:
    from kvcalc.render.capacity_check import quantity, signed

    assert quantity(math.inf, "tokens") == "unbounded"
    assert signed(None, "ms") == "n/a"
    assert quantity(0.5, "fraction") == "50.0%"


@pytest.mark.parametrize("fmt", ["junit", "github"])
def test_the_ci_formats_report_an_invalid_spec_too(
    runner: CliRunner, tmp_path: Path, fmt: str
) -> None:
    spec = "deployments:\n  - model: llama3-8b\n    gpus: h100\n    require: {min_contxt: 8k}\n"
    path = write(tmp_path, spec)
    result = run(runner, path, "--format", fmt)
    assert result.exit_code == 2
    assert "min_contxt" in result.stderr
    if fmt == "github":
        assert result.stdout.startswith(f"::error file={path},line=4,")
        return
    case = ET.fromstring(result.stdout).find("testsuite/testcase")
    assert case is not None and case.get("line") == "4"
    failure = case.find("failure")
    assert failure is not None and failure.get("type") == "invalid spec"


def test_defaults_nobody_reads_are_refused(runner: CliRunner, tmp_path: Path) -> None:
    spec = """\
defaults:
  mfu: 0.8
deployments:
  - {model: llama3-8b, gpus: h100, ctx: 8k, require: {min_batch: 1}}
"""
    result = run(runner, write(tmp_path, spec))
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert ":2: defaults.mfu: " in line


@pytest.mark.parametrize("value", ["yes", "1.5", "[8k]", "{a: 1}", "-1", "0", "null"])
def test_a_context_must_be_tokens(runner: CliRunner, tmp_path: Path, value: str) -> None:
    spec = f"deployments:\n  - {{model: llama3-8b, gpus: h100, ctx: {value},\n" \
        "     require: {min_batch: 1}}\n"
    result = run(runner, write(tmp_path, spec))
    assert result.exit_code == 2
    assert "ctx" in result.stderr and "Traceback" not in result.stderr


#: Plausible values of each key (valid somewhere, or on an edge), and chaos for any key.
PLAUSIBLE: dict[str, list[object]] = {
    "name": ["a", "b", ""],
    "model": ["llama3-8b", "llama3-70b", "jamba-v0.1", "gemma3-27b", "deepseek-v3", "nope", ""],
    "gpus": ["h100", "8xH100", "2xMI300X", "0xH100", "x", 8],
    "ctx": ["8k", "32k", "1m", 4096, 0, "1024m"],
    "tp": [1, 2, 8, 3, 0], "pp": [1, 2, 0], "engine": ["simple", "vllm", "sglang", "trtllm"],
    "kv_dtype": ["fp8", "bf16", "int4", ""], "weights": ["140GB", "1GB", 80],
    "reserve": [0.1, 0, 1, -0.5], "gpu_util": [0.9, 0.5, 1.5], "kv_memory": ["20GiB", "0GB"],
    "block_size": [16, 1, 0], "page_size": [1, 64], "mfu": [0.8, 1, 0],
    "prefix_shared": [0, 1024, 100_000], "mem_fraction_static": [0.8, 2],
    "window": [1024, 100_000], "sinks": [4], "recent": [1020], "keep_ratio": [0.5, 2],
    "snapkv_budget": [1024], "prompt": ["32k"], "gen": ["1k"], "roofline": [True],
    "kv_group": [32, 0], "kv_quant": ["kivi", "x"], "kv_bits": [2, 3], "kv_zero_point": [True],
}
REQUIREMENT_VALUES: dict[str, list[object]] = {
    "min_batch": [1, 8, 64, 500], "min_context": ["8k", 131_072, "1m"], "max_ttft_ms": [500, 5],
    "max_kv_fraction": [0.5, 0.9, 1], "max_tpot_ms": [10, 50.5],
    "min_tokens_per_second": [100, 5000.0],
}
REQUIRE = st.lists(st.sampled_from(sorted(REQUIREMENT_VALUES)), min_size=1, max_size=3).flatmap(
    lambda keys: st.fixed_dictionaries({k: st.sampled_from(REQUIREMENT_VALUES[k]) for k in keys})
)
CHAOS_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**6), 10**13), st.floats(),
    st.text(max_size=6), st.lists(st.integers(), max_size=2),
)


@st.composite
def deployment_entries(draw: st.DrawFn) -> dict:
    """Mostly plausible deployments (model, gpus and requirements usually there), with
    arbitrary keys and values mixed in."""
    entry: dict = {}
    for key in draw(st.lists(st.sampled_from(sorted(PLAUSIBLE)), unique=True, max_size=3)):
        entry[key] = draw(st.sampled_from(PLAUSIBLE[key]))
    for key, values in (
        ("model", PLAUSIBLE["model"][:4]), ("gpus", PLAUSIBLE["gpus"][:3]), ("ctx", ["8k", "32k"])
    ):
        if draw(st.integers(0, 9)) > 0:
            entry[key] = draw(st.sampled_from(values))
    if draw(st.integers(0, 9)) > 0:
        entry["require"] = draw(REQUIRE)
    if draw(st.integers(0, 9)) == 0:
        entry[draw(st.sampled_from([*PLAUSIBLE, "bogus"]))] = draw(CHAOS_VALUES)
    if draw(st.integers(0, 9)) == 0:
        entry.setdefault("require", {})[draw(st.sampled_from(["max_ttft_ms", "x"]))] = draw(
            CHAOS_VALUES
        )
    return entry


@settings(max_examples=1000 if os.environ.get("CI") else 100, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(deployment_entries(), min_size=1, max_size=2), st.booleans())
def test_no_spec_gives_a_traceback(entries: list[dict], json_format: bool) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.yaml"
        path.write_text(yaml.safe_dump({"deployments": entries}))
        args = ["check", str(path), *(["--format", "json"] if json_format else [])]
        result = CliRunner().invoke(app, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        entries, repr(result.exception)
    )
    assert result.exit_code in (0, 1, 2), (entries, result.stderr)
    assert "Traceback" not in result.stderr
    event(f"exit {result.exit_code}")
    if json_format and result.exit_code in (0, 1):
        json.loads(result.stdout)
    if result.exit_code == 2:
        assert all(line.startswith(f"Error: {path}") for line in result.stderr.splitlines())
        # A problem names the spec's keys (kv_memory), never the options (--kv-memory).
        options = re.findall(r"--[a-z][a-z-]*", result.stderr.replace(str(path), ""))
        assert set(options) <= {"--roofline"}, (entries, result.stderr)


def test_roofline_with_no_time_required_is_refused(runner: CliRunner, tmp_path: Path) -> None:
    # --roofline holds the time requirements to the bound; with none required it changed
    # nothing and passed unremarked, where a spec's mfu with no time requirement is refused.
    spec = "deployments:\n  - {name: x, model: llama3-8b, gpus: h100, ctx: 8k,\n" \
        "     require: {min_batch: 1, max_kv_fraction: 1}}\n"
    path = write(tmp_path, spec)
    assert run(runner, path).exit_code == 0
    result = run(runner, path, "--roofline")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"Error: --roofline: no deployment of {path} requires a time (max_tpot_ms, max_ttft_ms "
        "or min_tokens_per_second); drop --roofline"
    ]


def test_internode_that_no_time_reads_is_refused(runner: CliRunner, tmp_path: Path) -> None:
    # The inter-node network slows only the realistic times: with min_batch alone, or under
    # --roofline, internode changed nothing and passed unremarked (as mfu is refused so).
    spec = "deployments:\n  - {name: x, model: llama3-70b, gpus: 16xH100, tp: 16, ctx: 8k,\n" \
        "     internode: 1GB/s, require: {%s}}\n"
    capacity = write(tmp_path, spec % "min_batch: 1", "capacity.yaml")
    result = run(runner, capacity)
    assert result.exit_code == 2, result.stdout
    assert "internode: only max_tpot_ms, min_tokens_per_second and max_ttft_ms read it" \
        in result.stderr
    timed = write(tmp_path, spec % "max_tpot_ms: 1000", "timed.yaml")
    assert run(runner, timed).exit_code == 0
    bound = run(runner, timed, "--roofline")
    assert bound.exit_code == 2
    assert "internode: the roofline bound crosses no network; drop internode or --roofline" \
        in bound.stderr


def test_a_context_beyond_the_model_warns(runner: CliRunner, tmp_path: Path) -> None:
    spec = "deployments:\n  - {name: x, model: llama3-8b, gpus: h100, ctx: 32k,\n" \
        "     require: {min_batch: 1}}\n"
    path = write(tmp_path, spec)
    result = run(runner, path, "-f", "json")
    assert result.exit_code == 0
    (warning,) = json.loads(result.stdout)["warnings"]
    assert warning.startswith("x: llama3-8b: context 32,768 is beyond its maximum context of 8,192")
    assert result.stderr == f"warning: {warning}\n"
    assert run(runner, path).stdout.startswith(f"{path}: the requirement holds (1 deployment)")
    github = run(runner, path, "-f", "github").stdout.splitlines()
    assert github[0] == f"::warning file={path},line=2::{warning}"  # the line of ctx


def test_sglang_engine_measures_its_token_pool(runner: CliRunner, tmp_path: Path) -> None:
    from kvcalc.engine.sglang import SGLangOptions, SGLangPool, sglang_pool

    spec = """\
deployments:
  - {name: s, model: llama3.1-8b, gpus: h100, engine: sglang, ctx: 8k,
     require: {min_batch: 4, max_kv_fraction: 0.9, min_context: 8k}}
"""
    req = requirements(run_json(runner, write(tmp_path, spec)))
    pool = sglang_pool(registry_deployment("llama3.1-8b"), SGLangOptions())
    assert isinstance(pool, SGLangPool)
    assert req["min_batch"]["measured"] == pool.concurrency(8192)
    # Four requests of 8,192 tokens in 1-token pages out of the pool's tokens.
    assert req["max_kv_fraction"]["measured"] == pytest.approx(
        4 * 8192 / pool.max_total_num_tokens
    )
    assert req["min_context"]["measured"] == pool.max_request_tokens == pool.max_req_len - 1


def test_no_kv_cache_is_not_a_fraction(runner: CliRunner, tmp_path: Path) -> None:
    spec = """\
deployments:
  - {name: v, model: llama3.1-70b, gpus: l4, engine: vllm, ctx: 8k,
     require: {min_batch: 2, max_kv_fraction: 0.9}}
"""
    req = requirements(run_json(runner, write(tmp_path, spec), code=1))
    assert req["max_kv_fraction"]["measured"] is None
    assert req["max_kv_fraction"]["note"]  # vLLM's own words for why it does not start


def test_times_are_decodes_estimates(runner: CliRunner, tmp_path: Path) -> None:
    spec = """\
deployments:
  - {name: e, model: llama3-70b, gpus: 8xH100, ctx: 8k,
     require: {min_batch: 100, max_tpot_ms: 100, max_ttft_ms: 5000,
               min_tokens_per_second: 1}}
"""
    req = requirements(run_json(runner, write(tmp_path, spec)))
    decode = runner.invoke(app, ["decode", "llama3-70b", "--gpus", "8xH100", "--ctx", "8k",
                                 "--batch", "100", "--format", "json"])
    (step,) = json.loads(decode.stdout)["contexts"]
    assert req["max_tpot_ms"]["measured"] == pytest.approx(step["tpot_seconds"] * 1000)
    assert req["max_ttft_ms"]["measured"] == pytest.approx(step["ttft_seconds"] * 1000)
    assert req["min_tokens_per_second"]["measured"] == pytest.approx(
        step["tokens_per_second"]
    )
    assert "estimate" in req["max_tpot_ms"]["note"]
    bound = requirements(run_json(runner, write(tmp_path, spec), 0, "--roofline"))
    assert bound["max_tpot_ms"]["measured"] == pytest.approx(step["roofline_tpot_seconds"] * 1000)
    assert bound["max_ttft_ms"]["measured"] < req["max_ttft_ms"]["measured"]


def test_mfu_sets_the_prefill_rate(runner: CliRunner, tmp_path: Path) -> None:
    spec = "deployments:\n  - {{model: llama3-70b, gpus: 8xH100, ctx: 8k, {mfu}" \
        "require: {{max_ttft_ms: 5000}}}}\n"
    base = requirements(run_json(runner, write(tmp_path, spec.format(mfu=""))))
    half = requirements(run_json(runner, write(tmp_path, spec.format(mfu="mfu: 0.25, "))))
    assert half["max_ttft_ms"]["measured"] > base["max_ttft_ms"]["measured"]
    assert "mfu 0.25" in half["max_ttft_ms"]["note"]
    result = run(runner, write(tmp_path, spec.format(mfu="mfu: 0.25, ")), "--roofline")
    assert result.exit_code == 2
    assert "mfu: the roofline holds prefill to the dense peak" in result.stderr


def test_unknown_link_speed_cannot_be_estimated(runner: CliRunner, tmp_path: Path) -> None:
    spec = """\
deployments:
  - {name: m, model: llama3-8b, gpus: 2xapple-m2-ultra, ctx: 8k,
     require: {min_batch: 1, max_tpot_ms: 1000}}
"""
    path = write(tmp_path, spec)
    req = requirements(run_json(runner, path, 1))
    assert req["max_tpot_ms"]["measured"] is None and req["max_tpot_ms"]["passed"] is False
    assert "--roofline" in req["max_tpot_ms"]["note"]
    assert requirements(run_json(runner, path, 0, "--roofline"))["max_tpot_ms"]["passed"]


def test_eviction_keys_size_the_cache_as_batch_does(runner: CliRunner, tmp_path: Path) -> None:
    spec = """\
deployments:
  - name: stream
    model: llama3.1-70b
    gpus: 8xH100
    gpu_memory: 80GB
    weights: 140GB
    reserve: 0.1
    ctx: 128k
    sinks: 4
    recent: 1020
    require: {min_batch: 1299}
  - name: snap
    model: llama3-70b
    gpus: 8xH100
    snapkv_budget: 1024
    prompt: 32k
    gen: 1k
    require: {min_batch: 1, max_ttft_ms: 100000}
"""
    out = run_json(runner, write(tmp_path, spec))
    # The README's eviction example: 1,299 sequences of 1,024 kept tokens on the seed's budget.
    stream = out["deployments"][0]
    assert requirements(out, 0)["min_batch"]["measured"] == 1299
    assert stream["eviction"]["policy"] == "streamingllm"
    assert stream["eviction"]["parameters"] == {"sinks": 4, "recent": 1020}
    snap = out["deployments"][1]
    assert snap["context_tokens"] == 32_768 + 1024  # SnapKV's context is prompt + gen
    assert "one prompt of 32,768 tokens" in requirements(out, 1)["max_ttft_ms"]["note"]
    decode = runner.invoke(app, ["decode", "llama3-70b", "--gpus", "8xH100", "--snapkv-budget",
                                 "1024", "--prompt", "32k", "--gen", "1k", "--format", "json"])
    (step,) = json.loads(decode.stdout)["contexts"]
    assert requirements(out, 1)["min_batch"]["measured"] == step["batch"]
    assert requirements(out, 1)["max_ttft_ms"]["measured"] == pytest.approx(
        step["ttft_seconds"] * 1000
    )


@pytest.mark.parametrize("name", ["\r", "a\nb.yaml", "x\ty.yaml"])
def test_a_path_with_line_breaks_is_still_one_line(runner: CliRunner, name: str) -> None:
    result = run(runner, name)
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("Error: ") and line.endswith("file not found")


def test_kv_format_keys_size_the_cache_as_batch_does(runner: CliRunner, tmp_path: Path) -> None:
    spec = """\
deployments:
  - {name: int4, model: llama3.1-70b, gpus: 8xH100, ctx: 32k, kv_dtype: int4, kv_group: 32,
     kv_zero_point: true, require: {min_batch: 1}}
  - {name: kivi, model: llama3.1-70b, gpus: 8xH100, ctx: 32k, kv_quant: kivi, kv_bits: 2,
     require: {min_batch: 1}}
"""
    out = run_json(runner, write(tmp_path, spec))
    for index, options in enumerate(
        (["--kv-dtype", "int4", "--kv-group", "32", "--kv-zero-point"],
         ["--kv-quant", "kivi", "--kv-bits", "2"])
    ):
        batch = runner.invoke(app, ["batch", "llama3.1-70b", "--gpus", "8xH100", "--ctx", "32k",
                                    *options, "--format", "json"])
        expected = json.loads(batch.stdout)["contexts"][0]["max_batch"]
        assert requirements(out, index)["min_batch"]["measured"] == expected
    assert out["deployments"][0]["kv_dtype"] != "bf16"
    bad = "deployments:\n  - {model: llama3.1-70b, gpus: 8xH100, ctx: 32k, kv_quant: kivi,\n" \
        "     kv_bits: 3, require: {min_batch: 1}}\n"
    result = run(runner, write(tmp_path, bad))
    assert result.exit_code == 2 and "kv_bits: KIVI stores 2 or 4 bits" in result.stderr


LAYOUTS = """\
deployments:
  - name: qwen
    model: qwen2.5-7b
    gpus: 8xH100
    ctx: 8k
    require: {min_batch: 8}
  - name: wide
    model: llama3.1-70b
    gpus: 16xH100
    tp: 16
    ctx: 8k
    require: {min_batch: 8}
"""


def test_each_deployment_says_how_it_is_laid_out(runner: CliRunner, tmp_path: Path) -> None:
    # The notes `batch` prints for the same deployment: the tp chosen and why, a tp group across
    # nodes, KV heads replicated.
    path = write(tmp_path, LAYOUTS)
    payload = run_json(runner, path)
    expected = []
    for deployment, options in zip(
        payload["deployments"],
        [["qwen2.5-7b", "--gpus", "8xH100"], ["llama3.1-70b", "--gpus", "16xH100", "--tp", "16"]],
        strict=True,
    ):
        batch = runner.invoke(app, ["batch", *options, "--ctx", "8k", "-f", "json"])
        assert batch.exit_code == 0, batch.stderr
        layout = json.loads(batch.stdout)
        for key in ("replicas", "tp_given", "tp_reason", "tp_nodes", "kv_head_copies",
                    "layout_notes"):
            assert deployment[key] == layout[key], key
        expected.append(layout["layout_notes"])
    assert [len(notes) for notes in expected] == [1, 2]
    assert expected[0][0].startswith("layout tp 4 x 2 replicas: tensor parallel size 8")
    assert expected[1][0].startswith("tp 16 spans 2 nodes of 8 GPUs")
    assert expected[1][1].startswith("tp 16 over 8 KV heads")
    # The text formats print them under the deployment's table, before the next deployment.
    for fmt in ("table", "markdown"):
        out = run(runner, path, "-f", fmt).stdout.splitlines()
        starts = [next(i for i, line in enumerate(out) if line.lstrip("# ").startswith(name))
                  for name in ("qwen: ", "wide: ")]
        for notes, start, end in zip(expected, starts, [starts[1], len(out)], strict=True):
            assert all(note in out[start:end] for note in notes), (fmt, notes)
    # The CI formats annotate pass or fail: a note is neither.
    github = run(runner, path, "-f", "github").stdout
    assert github == f"{path}: all 2 requirements hold (2 deployments)\n"


def test_an_engine_refusal_names_the_spec_key(runner: CliRunner, tmp_path: Path) -> None:
    # vLLM refuses the format while it sizes the pool, not while the options are read: the
    # problem still names the key as the spec spells it.
    spec = "deployments:\n  - {model: llama3.1-8b, gpus: h100, ctx: 8k, engine: vllm,\n" \
        "     kv_dtype: int4, kv_group: 32, require: {min_batch: 1}}\n"
    result = run(runner, write(tmp_path, spec))
    assert result.exit_code == 2
    assert "kv_dtype: vLLM has no int4" in result.stderr and "--" not in result.stderr


# ------------------------------------------------------------------ judge: high


JUDGED = """\
deployments:
  - name: judged
    model: llama3-70b
    gpus: 8xH100
    ctx: 8k
    {judge}
    require: {{min_batch: 1, max_tpot_ms: 1000, min_tokens_per_second: 1}}
"""


def test_judge_high_holds_the_band_s_high_end(runner: CliRunner, tmp_path: Path) -> None:
    from specs import registry_deployment

    from kvcalc.engine.latency import tpot_estimate

    estimate = requirements(run_json(runner, write(tmp_path, JUDGED.format(judge=""))))
    high = requirements(run_json(runner, write(tmp_path, JUDGED.format(judge="judge: high"))))
    batch = 1  # TPOT targets are timed at the batch min_batch asks for
    est = tpot_estimate(registry_deployment("llama3-70b", "8xh100"), batch=batch,
                        context_tokens=8192)
    assert estimate["max_tpot_ms"]["measured"] == pytest.approx(est.tpot_seconds * 1000)
    assert high["max_tpot_ms"]["measured"] == pytest.approx(est.tpot_high_seconds * 1000)
    assert high["max_tpot_ms"]["measured"] > estimate["max_tpot_ms"]["measured"]
    assert high["min_tokens_per_second"]["measured"] == pytest.approx(
        batch / est.tpot_high_seconds
    )
    assert "band, high end" in high["max_tpot_ms"]["note"]


def test_judge_needs_a_tpot_requirement_and_no_roofline(
    runner: CliRunner, tmp_path: Path
) -> None:
    spec = "deployments:\n  - {model: llama3-70b, gpus: 8xH100, ctx: 8k, judge: high, " \
        "require: {min_batch: 1}}\n"
    result = run(runner, write(tmp_path, spec))
    assert result.exit_code == 2 and "judge: only max_tpot_ms" in result.stderr
    judged = write(tmp_path, JUDGED.format(judge="judge: high"))
    result = run(runner, judged, "--roofline")
    assert result.exit_code == 2 and "judge: the roofline bound has no band" in result.stderr
    result = run(runner, write(tmp_path, JUDGED.format(judge="judge: low")))
    assert result.exit_code == 2 and "judge" in result.stderr
