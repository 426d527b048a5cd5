"""vLLM's ``--enforce-eager``: no CUDA graphs captured, so none estimated or measured (it sets
``cudagraph_mode`` NONE, vllm/config/vllm.py of 0.29.0, which ``determine_available_memory``
checks before estimating; ``compile_or_warm_up_model`` captures nothing under it,
vllm/v1/worker/gpu_worker.py of 0.29.0 and 0.34.0)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from kvcalc.calibration.lines import log_lines
from kvcalc.calibration.vllm_log import parse_vllm_log
from kvcalc.cli.app import app

LOGS = Path(__file__).parent / "fixtures" / "vllm_logs"
BATCH = ["batch", "llama3.1-8b", "--gpus", "a100", "--ctx", "8k", "--engine", "vllm",
         "-f", "json"]


def run(*args: str, code: int = 0) -> Any:
    out = CliRunner().invoke(app, list(args))
    assert out.exit_code == code, out.output
    return out


def doc(*extra: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(run(*BATCH, *extra).stdout)
    return value


def test_eager_gives_the_budget_the_graph_estimate_back_where_the_release_subtracts_it() -> None:
    graphs, eager = doc("--vllm-version", "0.31"), doc("--vllm-version", "0.31", "--enforce-eager")
    estimate = graphs["cudagraph_memory_bytes"]
    assert estimate > 0 and not eager["cudagraph_memory_bytes"] and eager["enforce_eager"]
    gained = (eager["contexts"][0]["available_bytes_per_gpu"]
              - graphs["contexts"][0]["available_bytes_per_gpu"])
    assert gained == estimate


def test_eager_under_0_34_measures_no_graph_pool_and_keeps_no_estimate_as_transient() -> None:
    graphs, eager = doc(), doc("--enforce-eager")
    assert graphs["kv_sized_after_warmup"] and eager["kv_sized_after_warmup"]
    assert (eager["contexts"][0]["available_bytes_per_gpu"]
            > graphs["contexts"][0]["available_bytes_per_gpu"])
    table = run(*BATCH[:-2], "--enforce-eager").stdout
    assert "CUDA graph pool" not in table and ", eager" in table.splitlines()[0]


def test_eager_is_refused_where_kvcalc_times_decode_steps(tmp_path: Path) -> None:
    out = run("decode", "llama3.1-8b", "--gpus", "a100", "--engine", "vllm", "--enforce-eager",
              code=2)
    assert "--enforce-eager" in out.stderr and "\n" not in out.stderr.strip()
    spec = tmp_path / "c.yaml"
    spec.write_text("deployments:\n  - {name: a, model: llama3.1-8b, gpus: a100, engine: vllm, "
                    "enforce_eager: true, ctx: 8k, require: {max_tpot_ms: 50}}\n")
    out = run("check", str(spec), code=2)
    assert "enforce_eager: require.max_tpot_ms" in out.stderr
    spec.write_text("deployments:\n  - {name: a, model: llama3.1-8b, gpus: a100, engine: vllm, "
                    "enforce_eager: true, ctx: 8k, require: {min_batch: 4}}\n")
    run("check", str(spec))


def test_eager_belongs_to_vllm() -> None:
    out = run("batch", "llama3.1-8b", "--gpus", "a100", "--enforce-eager", code=2)
    assert "--enforce-eager" in out.stderr


def test_calibrate_reads_eager_from_the_engine_config() -> None:
    # The 0.15.1 A100 40GB log's engine config line says enforce_eager=True.
    text = (LOGS / "v0151-a100-40gb-llama31-8b.log").read_text()
    assert parse_vllm_log(log_lines(text)).enforce_eager is True
    given = parse_vllm_log(log_lines(
        "INFO non-default args: {'model': 'x', 'enforce_eager': True}\n"))
    assert given.enforce_eager is True
