"""vLLM's default attention backend and the block it forces or prefers when --block-size is not
given (kvcalc/engine/vllm_backends.py), against the rules read in the wheels of 0.10.2, 0.13.0,
0.14.0, 0.17.0, 0.18.0, 0.19.0, 0.21.0, 0.25.0, 0.27.0 and 0.33.0 (vllm/platforms/cuda.py
``check_and_update_config`` / ``_get_backend_priorities``, vllm/platforms/interface.py
``update_block_size_for_backend``, each backend's ``get_supported_kernel_block_sizes``), and
against real start-up logs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from report_check import refused, run_json
from specs import registry_model
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine.deployment import deployment
from kvcalc.engine.units import GiB
from kvcalc.engine.vllm import VLLMKVCache, vllm_inputs, vllm_kv_cache_for
from kvcalc.engine.vllm_backends import deployment_backend_block, model_kind
from kvcalc.engine.vllm_releases import vllm_release
from kvcalc.registry.gpus import parse_gpu_set

# (release, GPUs, model, KV dtype) -> (backend, block), each worked by hand from the wheel.
RULES = [
    # 0.10.2: CUTLASS MLA forced to 128 on capability 10.0 exactly; FlashMLA (Hopper only,
    # is_flashmla_supported: major 9) forced to 64; elsewhere 16.
    ("0.10.2", "h100", "deepseek-v2-lite", None, "FLASHMLA", 64),
    ("0.11.0", "b200", "deepseek-v2-lite", None, "CUTLASS_MLA", 128),
    ("0.11.0", "b300", "deepseek-v2-lite", None, "TRITON_MLA", 16),  # 10.3 is not (10, 0)
    ("0.11.0", "l40s", "deepseek-v2-lite", None, "TRITON_MLA", 16),
    # 0.13/0.14: is_device_capability_family(100): B300 too.
    ("0.13.0", "b300", "deepseek-v2-lite", None, "CUTLASS_MLA", 128),
    ("0.14.0", "h200", "kimi-k2", None, "FLASHMLA", 64),
    # 0.17: FlashInfer MLA on the 10.x family, 16 raised to 64 (not 32, not a multiple of 64).
    ("0.17.0", "b200", "deepseek-v2-lite", None, "FLASHINFER_MLA", 64),
    ("0.17.0", "a100-sxm-80gb", "deepseek-v2-lite", None, "TRITON_MLA", 16),
    # 0.18 on: the first backend's preferred block. Hopper: FLASH_ATTN_MLA (MultipleOf(16)),
    # no fp8 cache there, so fp8 gets FLASHMLA ([64]); 10.x: FLASHINFER_MLA ([32, 64]).
    ("0.18.0", "h100", "deepseek-v2-lite", None, "FLASH_ATTN_MLA", 16),
    ("0.19.0", "h100", "deepseek-v2-lite", None, "FLASH_ATTN_MLA", 16),
    ("0.19.0", "h100", "deepseek-v2-lite", "fp8", "FLASHMLA", 64),
    ("0.21.0", "b200", "deepseek-v2-lite", None, "FLASHINFER_MLA", 32),
    ("0.27.0", "h100", "deepseek-v2-lite", None, "FLASH_ATTN_MLA", 16),
    ("0.27.0", "b200", "deepseek-v2-lite", "fp8", "FLASHINFER_MLA", 32),
    ("0.27.0", "rtx-pro-6000", "deepseek-v2-lite", None, "TRITON_MLA", 16),  # 12.x branch
    ("0.33.0", "a100-sxm-80gb", "deepseek-v2-lite", None, "TRITON_MLA", 16),
    ("0.33.0", "mi300x", "deepseek-v2-lite", None, "TRITON_MLA", 16),  # ROCm, AITER off
    # Sparse MLA with an indexer: FlashMLA-sparse and the indexer cache take only 64.
    ("0.11.0", "h200", "deepseek-v3.2-exp", None, "FLASHMLA_SPARSE", 64),
    ("0.33.0", "h100", "deepseek-v3.2-exp", None, "FLASHMLA_SPARSE", 64),
    ("0.27.0", "b200", "deepseek-v3.2-exp", "fp8", "FLASHMLA_SPARSE", 64),
    # Full / sliding attention: FLASH_ATTN (MultipleOf(16)) or FLASHINFER on 10.x: 16.
    ("0.10.2", "h100", "llama3.1-8b", None, "FLASH_ATTN", 16),
    ("0.33.0", "b200", "llama3.1-8b", None, "FLASHINFER", 16),
    ("0.33.0", "h100", "gemma3-27b", None, "FLASH_ATTN", 16),
    ("0.33.0", "mi300x", "llama3.1-8b", None, "ROCM_ATTN", 16),
    # Hybrids keep 16 (their attention block is raised to hold a state afterwards).
    ("0.27.0", "b200", "qwen3-next-80b-a3b", None, "FLASHINFER", 16),
]


@pytest.mark.parametrize(("version", "gpu", "model", "kv", "backend", "block"), RULES)
def test_the_default_backend_and_block_follow_the_wheels(
    version: str, gpu: str, model: str, kv: str | None, backend: str, block: int
) -> None:
    dep = deployment(registry_model(model), parse_gpu_set(f"8x{gpu}"), tp=8, kv_dtype=kv)
    chosen = deployment_backend_block(dep, vllm_release(version))
    assert chosen is not None
    assert (chosen.backend, chosen.block_size) == (backend, block)


def test_other_platforms_name_no_backend_and_keep_16() -> None:
    dep = deployment(registry_model("deepseek-v2-lite"), parse_gpu_set("1xtpu-v6e"))
    assert deployment_backend_block(dep, vllm_release("0.33")) is None
    assert dep.block_size == 16


def test_model_kinds() -> None:
    kinds = {m: model_kind(registry_model(m)) for m in (
        "deepseek-v2-lite", "deepseek-v3.2-exp", "llama3.1-8b", "qwen3-next-80b-a3b")}
    assert kinds == {"deepseek-v2-lite": "mla", "deepseek-v3.2-exp": "sparse_mla",
                     "llama3.1-8b": "attention", "qwen3-next-80b-a3b": "hybrid"}


# (release, GPU, model, --block-size) -> the block check_and_update_config leaves (cuda.py).
FORCED = [
    ("0.10.2", "h100", "deepseek-v2-lite", 128, 64),  # FlashMLA: "block_size != 64"
    ("0.11.0", "b200", "deepseek-v2-lite", 256, 128),  # CUTLASS MLA: "!= 128"
    ("0.13.0", "b200", "deepseek-v2-lite", 256, 256),  # "% 128 != 0": kept
    ("0.14.0", "h100", "deepseek-v2-lite", 128, 128),  # "% 64 != 0": kept
    ("0.14.0", "h100", "deepseek-v2-lite", 16, 64),
    ("0.17.0", "b200", "deepseek-v2-lite", 32, 32),  # FlashInfer MLA: "!= 32 and % 64 != 0"
    ("0.17.0", "b200", "deepseek-v2-lite", 16, 64),
    ("0.14.0", "h100", "deepseek-v3.2-exp", 128, 64),  # FlashMLASparse: "!= 64"
    ("0.17.0", "a100-sxm-80gb", "deepseek-v2-lite", 32, 32),  # Triton MLA forces nothing
    ("0.19.0", "h100", "deepseek-v2-lite", 32, 32),  # 0.18 on: a given size is kept
    ("0.11.0", "h100", "llama3.1-8b", 32, 32),
]


@pytest.mark.parametrize(("version", "gpu", "model", "given", "block"), FORCED)
def test_0_10_to_0_17_force_the_mla_block_over_a_given_one(
    version: str, gpu: str, model: str, given: int, block: int
) -> None:
    dep = deployment(registry_model(model), parse_gpu_set(f"8x{gpu}"), tp=8, block_size=given,
                     kv_memory_bytes=10 * GiB)
    result = vllm_kv_cache_for(dep, 8192, vllm_inputs(dep, version))
    assert {s.block_size for s in result.layer_specs} == {block}
    chosen = deployment_backend_block(dep, vllm_release(version))
    assert (chosen is None) == (block == given)


def test_a_given_block_size_is_kept() -> None:
    dep = deployment(registry_model("deepseek-v2-lite"), parse_gpu_set("1xh100"), block_size=32)
    assert deployment_backend_block(dep, vllm_release("0.19")) is None
    result = vllm_kv_cache_for(dep, 8192, vllm_inputs(dep, "0.19"))
    assert isinstance(result, VLLMKVCache)
    assert {s.block_size for s in result.layer_specs} == {32}


# One 576-wide bf16 latent a layer and token, 27 layers.
V2_LITE_TOKEN = 27 * 576 * 2


def test_the_0_19_h100_deepseek_v2_lite_log_is_paged_at_16() -> None:
    # The 0.19.0 H100 log prints 1,505,552 tokens (tests/test_weights_vs_logs.py's run
    # "deepseek-ai-deepseek-v2---h100-80gb--tp1pp1dp1--8192"): not a multiple of 64, so no
    # FlashMLA block; FLASH_ATTN_MLA's 16 gives it from 94,097 blocks.
    logged = 1_505_552
    assert logged % 64 and logged % 32 and not logged % 16
    memory = 94_097 * 16 * V2_LITE_TOKEN
    dep = deployment(registry_model("deepseek-v2-lite"), parse_gpu_set("1xh100"),
                     kv_memory_bytes=memory)
    for version, tokens in (("0.19.0", logged), ("0.11.0", logged // 64 * 64)):
        result = vllm_kv_cache_for(dep, 8192, vllm_inputs(dep, version))
        assert isinstance(result, VLLMKVCache)
        assert result.kv_cache_size_tokens == tokens


KIMI_LOG = Path(__file__).parent / "fixtures" / "vllm_serve" / "kimi-k2-thinking-tp8-dcp8.log"


def test_the_kimi_k2_h200_log_of_nov_2025_is_a_whole_number_of_flashmla_blocks() -> None:
    # vLLM of Nov 2025 (0.11) on 8x H200: FlashMLA forced to 64. The line is 11,173 blocks of
    # 64 at the logged 46.80 GiB, and kvcalc, given no block size, pages at 64.
    text = KIMI_LOG.read_text(encoding="utf-8")
    tokens = int(re.findall(r"GPU KV cache size: ([\d,]+)", text)[0].replace(",", ""))
    assert tokens % 64 == 0
    block = 61 * 64 * 576 * 2
    memory = tokens // 64 * block
    assert round(memory / GiB, 2) == 46.80
    dep = deployment(registry_model("kimi-k2-thinking"), parse_gpu_set("8xh200"), tp=8,
                     kv_memory_bytes=memory)
    result = vllm_kv_cache_for(dep, 262_144, vllm_inputs(dep, "0.11"))
    assert isinstance(result, VLLMKVCache)
    assert {s.block_size for s in result.layer_specs} == {64}
    assert result.kv_cache_size_tokens == tokens


def test_the_header_and_json_name_the_block_chosen() -> None:
    runner = CliRunner()
    out = runner.invoke(app, ["batch", "deepseek-v2-lite", "--gpus", "1xb200", "--engine",
                              "vllm", "--vllm-version", "0.27"])
    assert out.exit_code == 0, out.output
    assert "block 32 (backend default, FLASHINFER_MLA)" in out.output.splitlines()[0]
    given = runner.invoke(app, ["batch", "deepseek-v2-lite", "--gpus", "1xb200", "--engine",
                                "vllm", "--block-size", "64"])
    assert "block 64," in given.output.splitlines()[0] or given.output.splitlines()[0].endswith(
        "block 64")
    data = runner.invoke(app, ["batch", "deepseek-v2-lite", "--gpus", "1xh100", "--engine",
                               "vllm", "--kv-dtype", "fp8", "--format", "json"])
    assert data.exit_code == 0, data.output
    assert '"block_size": 64' in data.output


def test_every_release_and_nvidia_gpu_pages_an_mla_model_at_the_block_chosen() -> None:
    # Invariant: the pool's specs are at the block the rule names, for every release row and
    # every NVIDIA GPU of the registry; and the block is one the named backend declares.
    from kvcalc.engine.vllm_releases import RELEASES
    from kvcalc.registry.gpus import all_gpus

    # FLASH_ATTN_MLA and TRITON_MLA take any multiple of 16: the release's default block.
    declared = {"FLASH_ATTN_MLA": (16, 64), "TRITON_MLA": (16, 64), "FLASHMLA": 64,
                "CUTLASS_MLA": 128, "FLASHINFER_MLA": (32, 64)}
    model = registry_model("deepseek-v2-lite")
    gpus = [g for g in all_gpus() if g.compute_capability is not None]
    assert len(gpus) > 30
    for gpu in gpus:
        for release in RELEASES:
            dep = deployment(model, parse_gpu_set(f"1x{gpu.id}"), kv_memory_bytes=GiB)
            chosen = deployment_backend_block(dep, release)
            assert chosen is not None
            sizes = declared[chosen.backend]
            assert chosen.block_size in (sizes if isinstance(sizes, tuple) else (sizes,))
            # (a GPU too small for the weights still reports the specs it would page)
            result = vllm_kv_cache_for(dep, 8192, vllm_inputs(dep, release.family))
            assert {s.block_size for s in result.layer_specs} == {chosen.block_size}


# Gemma 4 (head sizes 256 and 512): Gemma4Config.verify_and_update_config forces one backend,
# vllm/model_executor/models/config.py of 0.20.0, 0.21.0, 0.22.1 (TRITON_ATTN: 512 is above
# FlashAttention's 256) and 0.25.0, 0.27.1, 0.28.0, 0.33.0 (FlashAttention 4 on 9.x-11.x, the
# priority list's backend kept; TRITON_ATTN elsewhere). Before 0.20 each layer takes its own.
@pytest.mark.parametrize(
    ("version", "gpu", "backend"),
    [
        ("0.19.0", "rtx-3090", "FLASH_ATTN"),
        ("0.20.0", "h100", "TRITON_ATTN"),
        ("0.22.1", "rtx-3090", "TRITON_ATTN"),
        ("0.25.0", "h100", "FLASH_ATTN"),
        ("0.27.1", "b200", "FLASHINFER"),
        ("0.27.1", "rtx-pro-6000", "TRITON_ATTN"),  # 12.0: no FlashAttention 4
        ("0.33.0", "a100-sxm-80gb", "TRITON_ATTN"),
        # ROCm: Gemma4Config tests no platform, and FlashAttention 4 (vllm_flash_attn's CuTe
        # interface) is a CUDA build's only, so TRITON_ATTN is forced there in both rules.
        ("0.22.1", "mi300x", "TRITON_ATTN"),
        ("0.33.0", "mi300x", "TRITON_ATTN"),
    ],
)
def test_gemma_4_s_two_head_sizes_get_one_backend(version: str, gpu: str, backend: str) -> None:
    dep = deployment(registry_model("gemma-4-e4b"), parse_gpu_set(f"1x{gpu}"))
    chosen = deployment_backend_block(dep, vllm_release(version))
    assert chosen is not None and (chosen.backend, chosen.block_size) == (backend, 16)


def test_the_0_22_1_gemma_4_log_forces_the_backend_kvcalc_names() -> None:
    log = Path(__file__).parent / "fixtures" / "vllm_logs" / "v0221-rtx3090ti-gemma-4-e4b.log"
    forced = re.search(r"Forcing (\w+) backend", log.read_text(encoding="utf-8"))
    assert forced is not None
    dep = deployment(registry_model("gemma-4-e4b"), parse_gpu_set("1xrtx-3090"))
    chosen = deployment_backend_block(dep, vllm_release("0.22.1"))
    assert chosen is not None and chosen.backend == forced.group(1)


@pytest.mark.parametrize(
    ("version", "block", "needle"),
    [
        ("0.14", "8", "multiples of 16 tokens"),
        ("0.19", "24", "give e.g. 16"),
        ("0.34", "7", "multiples of 16 tokens"),
    ],
)
def test_a_block_size_vllm_refuses_is_refused(
    runner: CliRunner, version: str, block: str, needle: str
) -> None:
    # In every release full attention pages in multiples of 16 (FlashAttention's check, then
    # MultipleOf(16) and "No common block size").
    refused(runner, ["batch", "llama3-8b", "--gpus", "h100", "--engine", "vllm", "--ctx", "8k",
                     "--vllm-version", version, "--block-size", block],
            "--block-size", needle)


def test_a_block_size_vllm_takes_is_kept(runner: CliRunner) -> None:
    # A multiple of 16 pages as given; an MLA backend forces its own block over any size
    # (FlashMLA's 64 on an H100, 0.14).
    later = run_json(runner, "batch", "llama3-8b", "--gpus", "h100", "--engine", "vllm",
                     "--ctx", "8k", "--vllm-version", "0.18", "--block-size", "48")
    assert later["block_size"] == 48
    mla = run_json(runner, "batch", "deepseek-v2-lite", "--gpus", "h100", "--engine", "vllm",
                   "--ctx", "8k", "--vllm-version", "0.14", "--block-size", "8")
    assert mla["block_size"] == 64
