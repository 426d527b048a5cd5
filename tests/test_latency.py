"""The realistic decode and prefill estimates (kvcalc.engine.latency), term by term, as literal
arithmetic from the registry's figures: H100 SXM NVLink 900 GB/s both ways (450 GB/s each way),
efficiency 0.82 of peak bandwidth, 1 ms per step, 9 us per all-reduce, matmul ceiling 0.803;
Llama-3-70B 80 layers of hidden 8192; Llama-3-8B 32 layers, 32 query heads of 128."""

from __future__ import annotations

import pytest
from report_check import run_json
from specs import registry_deployment, registry_model
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine.flops import attended_tokens_in_prefill, matmul_params_per_token, prefill_flops
from kvcalc.engine.latency import (
    GENERIC_EFFICIENCY,
    allreduce_seconds,
    can_time_communication,
    efficiency_of,
    layer_kernel_seconds,
    moe_layer_kernel_seconds,
    pipeline_send_seconds,
    prefill_estimate,
    tpot_estimate,
    tpot_seconds,
    ttft_seconds,
    w4a16_experts,
)
from kvcalc.engine.profiles import SERVING_KERNELS
from kvcalc.engine.units import UnitError, parse_duration

LINK = 450e9
LATENCY = 9e-6


def test_allreduce_is_the_ring_share_over_one_direction_plus_latency() -> None:
    assert allreduce_seconds(16384, 1, None, LATENCY) == 0.0
    assert allreduce_seconds(16384, 8, 450_000_000_000, LATENCY) == pytest.approx(
        2 * 7 / 8 * 16384 / LINK + LATENCY
    )
    assert allreduce_seconds(10**9, 2, 450_000_000_000, 0.0) == pytest.approx(10**9 / LINK)
    with pytest.raises(ValueError, match="link bandwidth is unknown"):
        allreduce_seconds(16384, 2, None, LATENCY)


def test_tpot_estimate_terms_on_8xh100() -> None:
    dep = registry_deployment("llama3-70b", "8xh100")
    est = tpot_estimate(dep, batch=1, context_tokens=8192)
    assert est.measured
    assert est.memory_seconds == pytest.approx(est.roofline.memory_seconds / 0.82)
    assert est.communication_seconds == pytest.approx(
        2 * 80 * (2 * 7 / 8 * (1 * 8192 * 2) / LINK + LATENCY)
    )
    assert est.overhead_seconds == 0.001
    assert est.roofline.compute_seconds is not None and est.compute_seconds is not None
    assert est.compute_seconds == pytest.approx(est.roofline.compute_seconds / 0.803)
    # A serving engine's per-layer kernels: 80 dense layers at 45 us.
    assert est.layer_seconds == pytest.approx(80 * 45e-6)
    assert est.tpot_seconds == pytest.approx(
        max(est.memory_seconds, est.compute_seconds)
        + est.communication_seconds
        + 0.001
        + 80 * 45e-6
    )
    # The roofline is untouched (the golden 5.2 ms decode figures rely on it).
    assert est.roofline.tpot_seconds < est.tpot_seconds


def test_all_reduce_message_grows_with_the_batch() -> None:
    dep = registry_deployment("llama3-70b", "8xh100")
    est = tpot_estimate(dep, batch=64, context_tokens=8192)
    assert est.communication_seconds == pytest.approx(
        2 * 80 * (2 * 7 / 8 * (64 * 8192 * 2) / LINK + LATENCY)
    )


def test_one_gpu_has_no_communication() -> None:
    est = tpot_estimate(registry_deployment("llama3-8b", "h100"), batch=1, context_tokens=1024)
    assert est.communication_seconds == 0.0


def test_pipeline_stages_add_one_send_per_boundary() -> None:
    dep = registry_deployment("llama3-70b", "8xh100", tp=4, pp=2)
    assert pipeline_send_seconds(dep, 3) == pytest.approx(3 * 8192 * 2 / LINK + LATENCY)
    est = tpot_estimate(dep, batch=3, context_tokens=8192)
    ring = 2 * 3 / 4 * (3 * 8192 * 2) / LINK + LATENCY
    assert est.communication_seconds == pytest.approx(
        2 * 80 * ring + 3 * 8192 * 2 / LINK + LATENCY
    )


def test_parts_without_measured_figures_use_the_generic_ones() -> None:
    dep = registry_deployment("llama3-8b", "b200")
    assert efficiency_of(dep.gpus.accelerator) is GENERIC_EFFICIENCY
    est = tpot_estimate(dep, batch=1, context_tokens=1024)
    assert not est.measured
    assert est.memory_seconds == pytest.approx(est.roofline.memory_seconds / 0.8)
    assert est.overhead_seconds == 0.002


def test_multi_gpu_without_a_known_link_cannot_be_timed() -> None:
    assert can_time_communication(registry_deployment("llama3-8b", "1xapple-m4-max"))
    dep = registry_deployment("llama3-8b", "2xapple-m4-max")
    assert not can_time_communication(dep)


def test_attended_tokens_of_a_causal_prefill() -> None:
    assert attended_tokens_in_prefill(10, 10) == 55  # 1 + 2 + ... + 10
    assert attended_tokens_in_prefill(4, 10) == 1 + 2 + 3 + 4 * 7  # a 4-token window


def test_prefill_flops_of_llama3_8b() -> None:
    model = registry_model("llama3-8b")
    flops = prefill_flops(model, 1000)
    assert flops.matmul == 2 * matmul_params_per_token(model) * 1000
    # 32 layers x 2 FLOPs x 32 heads x (128 + 128) per attended token, 1000 x 1001 / 2 of them.
    assert flops.attention == 32 * 2 * 32 * 256 * 1000 * 1001 // 2
    assert flops.state == 0


def test_prefill_is_memory_bound_for_one_token_and_compute_bound_for_long_prompts() -> None:
    dep = registry_deployment("llama3-70b", "8xh100")
    short = prefill_estimate(dep, prompt_tokens=1)
    assert short.bound == "memory"
    weights = tpot_estimate(dep, batch=1, context_tokens=1).roofline.weight_read_seconds
    assert short.weight_read_seconds == pytest.approx(weights / 0.82)
    long = prefill_estimate(dep, prompt_tokens=32768)
    assert long.bound == "compute"
    assert long.compute_seconds == pytest.approx(long.flops / (989e12 * 0.803 * 8))
    assert long.mfu == 0.803
    assert long.ttft_seconds == pytest.approx(
        long.compute_seconds + long.communication_seconds + 0.001 + 80 * 45e-6
    )
    half = prefill_estimate(dep, prompt_tokens=32768, mfu=0.4015)
    assert half.compute_seconds == pytest.approx(2 * long.compute_seconds)


@pytest.mark.parametrize(
    ("model", "gpus"),
    [("llama3-70b", "8xh100"), ("deepseek-v3", "8xh200"), ("qwen3-30b-a3b", "mi300x"),
     ("gemma3-27b", "2xa100-sxm-80gb"), ("llama3-8b", "b200")],
)
@pytest.mark.parametrize("context", [1, 4096, 131072])
def test_the_roofline_is_a_lower_bound_of_the_estimate(model: str, gpus: str, context: int) -> None:
    dep = registry_deployment(model, gpus)
    for batch in (1, 16):
        bound = tpot_seconds(dep, batch=batch, context_tokens=context, roofline=True)
        assert bound < tpot_seconds(dep, batch=batch, context_tokens=context)
    assert ttft_seconds(dep, prompt_tokens=context, roofline=True) < ttft_seconds(
        dep, prompt_tokens=context
    )


def test_parse_duration() -> None:
    assert parse_duration("50ms") == pytest.approx(0.05)
    assert parse_duration("2s") == 2.0
    assert parse_duration(" 800 us") == pytest.approx(0.0008)
    for bad in ("50", "fast", "-1ms", "0s", "1h"):
        with pytest.raises(UnitError):
            parse_duration(bad)


# ------------------------------------------------------------------ decode's new columns


def test_decode_reports_the_estimate_beside_the_roofline(runner: CliRunner) -> None:
    out = run_json(
        runner, "decode", "llama3-70b", "--gpus", "8xH100", "--ctx", "8k", "--batch", "1"
    )
    step = out["contexts"][0]
    dep = registry_deployment("llama3-70b", "8xh100")
    est = tpot_estimate(dep, batch=1, context_tokens=8192)
    assert step["roofline_tpot_seconds"] == est.roofline.tpot_seconds
    assert step["tpot_seconds"] == est.tpot_seconds
    assert step["memory_estimate_seconds"] == est.memory_seconds
    assert step["communication_seconds"] == est.communication_seconds
    assert step["step_overhead_seconds"] == 0.001
    assert step["tokens_per_second"] == pytest.approx(1 / est.tpot_seconds)
    assert step["ttft_seconds"] == prefill_estimate(dep, prompt_tokens=8192).ttft_seconds
    assert out["efficiency_basis"] == "measured"


def test_decode_mfu_changes_the_ttft_only(runner: CliRunner) -> None:
    args = ("llama3-70b", "--gpus", "8xH100", "--ctx", "32k", "--batch", "1")
    default = run_json(runner, "decode", *args)["contexts"][0]
    slow = run_json(runner, "decode", *args, "--mfu", "0.2")["contexts"][0]
    assert slow["ttft_seconds"] > 3 * default["ttft_seconds"]
    assert slow["roofline_tpot_seconds"] == default["roofline_tpot_seconds"]
    assert slow["memory_estimate_seconds"] == default["memory_estimate_seconds"]


def test_decode_without_a_link_speed_leaves_the_estimate_empty(runner: CliRunner) -> None:
    out = run_json(runner, "decode", "llama3-8b", "--gpus", "2xapple-m4-max", "--ctx", "1k")
    step = out["contexts"][0]
    assert step["roofline_tpot_seconds"] > 0
    assert step["tpot_seconds"] is None and step["ttft_seconds"] is None


@pytest.mark.parametrize("mfu", ["0", "1.5", "-0.2"])
def test_decode_refuses_a_bad_mfu(runner: CliRunner, mfu: str) -> None:
    result = runner.invoke(app, ["decode", "llama3-8b", "--gpus", "h100", "--mfu", mfu])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "--mfu" in result.stderr


# ------------------------------------------------------------------ the registry's figures


def efficiency_file(**efficiency: object) -> dict:
    import yaml

    from kvcalc.registry.gpus import find_gpu_path

    data = yaml.safe_load(find_gpu_path("h100").read_text())
    data["efficiency"] = {**data["efficiency"], **efficiency}
    return data


def test_registry_efficiency_becomes_the_engine_s() -> None:
    from kvcalc.registry.gpu_schema import GpuFile

    accelerator = GpuFile.model_validate(efficiency_file()).to_accelerator()
    assert accelerator.efficiency is not None
    assert accelerator.efficiency.bandwidth_fraction == 0.82
    assert accelerator.efficiency.step_overhead_seconds == 0.001
    assert accelerator.efficiency.link_latency_seconds == pytest.approx(9e-6)
    assert accelerator.efficiency.matmul_fraction == 0.803
    assert accelerator.tdp_watts == 700
    assert accelerator.link_bytes_per_s == 450_000_000_000


@pytest.mark.parametrize(
    "bad",
    [{"bandwidth_fraction": 1.2}, {"bandwidth_fraction": 0}, {"step_overhead_ms": -1},
     {"matmul_fraction": 2}, {"source": []}, {"speedup": 2}],
)
def test_registry_refuses_bad_efficiency_figures(bad: dict) -> None:
    from pydantic import ValidationError

    from kvcalc.registry.gpu_schema import GpuFile

    with pytest.raises(ValidationError):
        GpuFile.model_validate(efficiency_file(**bad))


def test_every_efficiency_block_cites_a_source() -> None:
    from kvcalc.registry.gpus import all_gpus

    blocks = [g for g in all_gpus() if g.efficiency is not None]
    assert {g.id for g in blocks} >= {"a100-sxm-80gb", "h100-sxm", "h200", "mi300x", "rtx-4090"}
    assert all(any("http" in s for s in g.efficiency.source) for g in blocks if g.efficiency)


def test_snapkv_ttft_is_the_prefill_of_its_prompt(runner: CliRunner) -> None:
    out = run_json(
        runner, "decode", "llama3-70b", "--gpus", "8xH100", "--snapkv-budget", "1024",
        "--prompt", "32k", "--gen", "1k", "--batch", "1",
    )
    step = out["contexts"][0]
    assert step["context_tokens"] == 32768 + 1024
    dep = registry_deployment("llama3-70b", "8xh100")
    assert step["ttft_seconds"] == prefill_estimate(dep, prompt_tokens=32768).ttft_seconds


def test_int4_experts_take_the_w4a16_moe_layer_cost() -> None:
    # GPTQ/AWQ/compressed-tensors int4 experts run as Marlin MoE kernels (65 us a layer, set on
    # the Qwen3.5 AWQ fit point); NVFP4 and FP8 experts keep the grouped-GEMM figure (98 us).
    kernels = SERVING_KERNELS
    model, gpus = "qwen3.5-397b-a17b", "4xrtx-pro-6000"
    int4 = registry_deployment(model, gpus, tp=4, weight_dtype="int4-g128")
    nvfp4 = registry_deployment(model, gpus, tp=4, weight_dtype="nvfp4")
    assert w4a16_experts(int4) and not w4a16_experts(nvfp4)
    assert moe_layer_kernel_seconds(int4, kernels) == kernels.w4a16_moe_layer_seconds == 65e-6
    assert moe_layer_kernel_seconds(nvfp4, kernels) == kernels.moe_layer_seconds == 98e-6
    layers = int4.model.num_layers  # every Qwen3.5-397B layer routes experts
    assert layer_kernel_seconds(int4, kernels) == pytest.approx(layers * 65e-6)
