"""`kvcalc decode --engine`: the default batch at each context is the engine's own concurrency,
and the options an engine would not use are refused as in `batch`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from report_check import refused, run_json
from specs import registry_deployment
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine.vllm import VLLMKVCache, vllm_inputs, vllm_kv_cache_for

H100 = ("llama3.1-8b", "--gpus", "h100", "--ctx", "8k,32k")


def decode_batches(runner: CliRunner, *args: str) -> list[int]:
    return [step["batch"] for step in run_json(runner, "decode", *H100, *args)["contexts"]]


def test_vllm_batch_is_the_whole_requests_of_its_max_concurrency(runner: CliRunner) -> None:
    # vLLM 0.19 at --max-model-len 8k / 32k: 54.14x / 13.54x on one H100 at 0.9 (kvcalc batch;
    # the profile estimate of its budget, 54.14 GiB over 512 and 2,048 blocks of 2 MiB).
    assert decode_batches(runner, "--engine", "vllm", "--vllm-version", "0.19") == [54, 13]
    dep = registry_deployment("llama3.1-8b")
    for length, batch in ((8192, 54), (32768, 13)):
        result = vllm_kv_cache_for(dep, length, vllm_inputs(dep, "0.19"))
        assert isinstance(result, VLLMKVCache)
        assert math.floor(result.max_concurrency) == batch


def test_sglang_batch_is_its_concurrency_at_each_context(runner: CliRunner) -> None:
    sglang = run_json(runner, "batch", *H100, "--engine", "sglang")
    expected = [row["max_batch_per_replica"] for row in sglang["contexts"]]
    assert decode_batches(runner, "--engine", "sglang") == expected


def test_sglang_options_reach_decode(runner: CliRunner) -> None:
    # The section-10 log figures: 413,442 tokens, 413,442 // 8192 = 50 and // 32,768 = 12.
    logged = ("--free-before-load", "78.43", "--free-after-load", "63.41")
    assert decode_batches(runner, "--engine", "sglang", *logged) == [50, 12]
    # A smaller share of the free memory holds fewer requests.
    fewer = decode_batches(runner, "--engine", "sglang", *logged, "--mem-fraction-static", "0.5")
    assert fewer[0] < 50


def test_an_explicit_batch_is_kept_and_checked_against_the_engine(runner: CliRunner) -> None:
    result = runner.invoke(
        app, ["decode", *H100, "--engine", "vllm", "--vllm-version", "0.19", "--batch", "60"]
    )
    assert result.exit_code == 0, result.stderr
    assert "exceeds the 54 sequences of 8,192 tokens" in result.stderr


def test_an_engine_whose_cache_holds_nothing_says_why(runner: CliRunner) -> None:
    for engine, needle in (("vllm", "no memory left"), ("sglang", "Not enough memory")):
        result = runner.invoke(
            app, ["decode", "llama3-70b", "--gpus", "h100", "--engine", engine, "-f", "json"]
        )
        assert result.exit_code == 1, (engine, result.stdout)
        out = json.loads(result.stdout)
        assert out["fits"] is False and needle in out["reason"], out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--engine", "tgi"], "--engine: unknown engine 'tgi'; choose simple, vllm, sglang"),
        (["--sglang-version", "0.5.6"], "--sglang-version: applies to --engine sglang only"),
        (
            ["--engine", "vllm", "--page-size", "16"],
            "--page-size: applies to --engine sglang only",
        ),
        (
            ["--engine", "vllm", "--prefix-shared", "1000"],
            "--prefix-shared: vLLM's block count does not depend on a shared prefix",
        ),
        (["--engine", "sglang", "--block-size", "32"], "--block-size: SGLang pages"),
        (["--engine", "sglang", "--gpu-util", "0.9"], "--gpu-util: SGLang's budget"),
        (
            ["--engine", "sglang", "--sglang-version", "0.6.0"],
            "--sglang-version: 0.6.0 is not supported",
        ),
    ],
)
def test_options_the_engine_would_not_use_are_refused(
    runner: CliRunner, extra: list[str], message: str
) -> None:
    line = refused(runner, ["decode", *H100, *extra])
    assert line.startswith(f"Error: {message}"), line


@pytest.mark.parametrize(
    "engine_args",
    [
        ("--engine", "vllm", "--vllm-version", "0.19", "--max-num-seqs", "64"),
        ("--engine", "sglang", "--sglang-version", "0.5.6"),
        ("--engine", "trtllm", "--free-gpu-memory-fraction", "0.85"),
        ("--engine", "simple"),
    ],
    ids=["vllm", "sglang", "trtllm", "simple"],
)
def test_decode_plan_and_check_state_the_inputs_batch_states(
    runner: CliRunner, tmp_path: Path, engine_args: tuple[str, ...]
) -> None:
    # One vocabulary: the engine inputs decode, plan and check report are the keys and values
    # of batch's JSON for the same start-up (the given options applied, the defaults the
    # engine chose for the GPU and release filled in); the budget formula reports none.
    gpus = ("--gpus", "h100")
    started = run_json(runner, "decode", "llama3.1-8b", *gpus, "--ctx", "8k",
                       *engine_args)["engine_inputs"]
    if engine_args[1] == "simple":
        assert started is None
        return
    whole = run_json(runner, "batch", "llama3.1-8b", *gpus, "--ctx", "8k", *engine_args)
    assert started and {k: whole[k] for k in started} == started
    spec = tmp_path / "capacity.yaml"
    options = dict(zip(engine_args[::2], engine_args[1::2], strict=True))
    keys = "".join(f", {k[2:].replace('-', '_')}: '{v}'" for k, v in options.items())
    spec.write_text("deployments:\n  - {name: d, model: llama3.1-8b, gpus: h100, ctx: 8k"
                    f"{keys}, require: {{min_batch: 1}}}}\n")
    (checked,) = run_json(runner, "check", str(spec))["deployments"]
    assert checked["engine_inputs"] == started
    if engine_args[1] == "vllm":  # plan takes vLLM's release and cap, no other engine's
        (layout,) = run_json(runner, "plan", "llama3.1-8b", "--users", "1", *gpus,
                             "--max-gpus", "1", "--top", "1", *engine_args)["layouts"]
        assert layout["engine_inputs"] == started
