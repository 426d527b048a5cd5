"""`kvcalc offload`: the tokens and sequences each tier holds, loading a cached prefix back against
recomputing its prefill, and the break-even prefix length, from Llama-3.1-8B's published
dimensions and the H100 SXM's datasheet (989 dense bf16 TFLOPS)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from report_check import refused, run_json
from specs import registry_deployment, registry_model
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine.deployment import deployment
from kvcalc.engine.flops import attended_tokens_in_prefill, prefill_flops
from kvcalc.engine.offload import Tier, break_even_tokens
from kvcalc.registry.gpus import parse_gpu_set

#: Llama-3.1-8B: 32 layers x 8 KV heads x 128 x (K and V) x 2 bytes per token.
BYTES_PER_TOKEN = 32 * 8 * 128 * 2 * 2
#: The weights a token is multiplied with: 8,030,261,248 parameters less the embedding table
#: (128,256 x 4,096) and the 65 RMSNorms of 4,096 (the untied LM head is a matmul).
MATMUL_PARAMS = 8_030_261_248 - 128_256 * 4_096 - 65 * 4_096
#: Attention FLOPs per held token: 32 layers x 2 x 32 query heads x (128 + 128).
ATTENTION_PER_HELD = 32 * 2 * 32 * (128 + 128)
#: The H100 SXM's dense bf16 rate (NVIDIA datasheet: 1,979 TFLOPS with sparsity, halved).
H100_DENSE_BF16 = 989 * 10**12
TIERS = ("--tier", "cpu:512GB@64GB/s", "--tier", "ssd:4TB@7GB/s")


def flops(prompt: int) -> int:
    return 2 * MATMUL_PARAMS * prompt + ATTENTION_PER_HELD * prompt * (prompt + 1) // 2


def tiers(runner: CliRunner, *args: str) -> dict[str, dict[str, Any]]:
    return {t["tier"]: t for t in run_json(runner, "offload", *args)["tiers"]}


def test_prefill_flops_are_2_params_tokens_plus_causal_attention() -> None:
    model = registry_model("llama3.1-8b")
    for prompt in (1, 1000, 32_768):
        assert prefill_flops(model, prompt).total == flops(prompt)
    assert prefill_flops(model, 32_768).total == 773_308_861_644_800


def test_causal_attention_of_a_window_is_capped() -> None:
    assert attended_tokens_in_prefill(4, 4) == 1 + 2 + 3 + 4
    assert attended_tokens_in_prefill(4, 6) == 1 + 2 + 3 + 4 + 4 + 4
    assert attended_tokens_in_prefill(0, 6) == 0  # a recurrent layer holds no tokens


def test_each_tier_holds_its_capacity_over_the_bytes_per_token_and_sequence(
    runner: CliRunner,
) -> None:
    out = tiers(runner, "llama3.1-8b", "--gpus", "h100", "--ctx", "32k", *TIERS)
    assert out["cpu"]["kv_tokens_capacity"] == 512 * 10**9 // BYTES_PER_TOKEN == 3_906_250
    assert out["cpu"]["max_batch"] == 512 * 10**9 // (32_768 * BYTES_PER_TOKEN) == 119
    assert out["ssd"]["kv_tokens_capacity"] == 4 * 10**12 // BYTES_PER_TOKEN == 30_517_578
    assert out["ssd"]["max_batch"] == 931
    batch = json.loads(
        runner.invoke(app, ["batch", "llama3.1-8b", "--gpus", "h100", "--ctx", "32k",
                            "--format", "json"]).stdout
    )
    assert out["hbm"]["kv_tokens_capacity"] == batch["kv_tokens_capacity"]
    assert out["hbm"]["max_batch"] == batch["contexts"][0]["max_batch"]


def test_a_shared_prefix_is_stored_once_in_every_tier(runner: CliRunner) -> None:
    # Sequences of 32k sharing their first 8k: the tier holds that 8k once and 24k per sequence.
    # HBM does the same in whole blocks, as batch says.
    shared = ("--prefix-shared", "8k")
    out = tiers(runner, "llama3.1-8b", "--gpus", "h100", "--ctx", "32k", *TIERS, *shared)
    prefix, own = 8_192 * BYTES_PER_TOKEN, 24_576 * BYTES_PER_TOKEN
    assert out["cpu"]["max_batch"] == (512 * 10**9 - prefix) // own == 158
    assert out["ssd"]["max_batch"] == (4 * 10**12 - prefix) // own == 1_241
    assert out["cpu"]["kv_tokens_capacity"] == 3_906_250  # tokens: the store's, not a share
    batch = run_json(runner, "batch", "llama3.1-8b", "--gpus", "h100", "--ctx", "32k", *shared)
    assert out["hbm"]["max_batch"] == batch["contexts"][0]["max_batch"]
    # A window that has slid past the prefix shares nothing of it (Gemma 3's local layers):
    # more sequences than without sharing, fewer than if every layer shared it.
    args = ("gemma3-27b", "--gpus", "8xh100", "--ctx", "128k", *TIERS)
    gemma, alone = tiers(runner, *args, *shared), tiers(runner, *args)
    per_sequence = run_json(runner, "offload", *args)["kv_bytes_per_sequence"]
    if_every_layer = per_sequence // 16  # 8k of 128k in every layer
    upper = (4 * 10**12 - if_every_layer) // (per_sequence - if_every_layer)
    assert alone["ssd"]["max_batch"] < gemma["ssd"]["max_batch"] < upper


def test_loading_against_recomputing_a_32k_prefix(runner: CliRunner) -> None:
    out = tiers(runner, "llama3.1-8b", "--gpus", "h100", "--ctx", "32k", *TIERS)
    prefix = 32_768 * BYTES_PER_TOKEN  # 4 GiB
    assert out["cpu"]["load_seconds"] == pytest.approx(prefix / 64e9)  # 67.11 ms
    assert out["ssd"]["load_seconds"] == pytest.approx(prefix / 7e9)  # 613.57 ms
    recompute = flops(32_768) / H100_DENSE_BF16  # 781.91 ms
    assert out["cpu"]["recompute_seconds"] == pytest.approx(recompute)
    assert out["cpu"]["faster"] == out["ssd"]["faster"] == "load"


def test_break_even_prefix_is_where_loading_catches_up(runner: CliRunner) -> None:
    out = tiers(runner, "llama3.1-8b", "--gpus", "h100", "--ctx", "32k", *TIERS)

    def loading_wins(prompt: int, bandwidth: int) -> bool:
        return prompt * BYTES_PER_TOKEN * H100_DENSE_BF16 <= flops(prompt) * bandwidth

    # From the SSD, recomputing is faster for short prefixes (16 us vs 19 us per token); the
    # growing attention term makes loading win from 13,386 tokens on.
    assert out["ssd"]["break_even_tokens"] == 13_386
    assert loading_wins(13_386, 7 * 10**9) and not loading_wins(13_385, 7 * 10**9)
    # From host memory loading wins at every length.
    assert out["cpu"]["break_even_tokens"] == 1
    assert loading_wins(1, 64 * 10**9)


def test_a_tier_too_slow_never_breaks_even() -> None:
    # At 1 byte/s a token takes 131,072 s to load; recomputing even the 2^30th costs well under
    # a second, so loading never catches up below the 2^30-token limit.
    llama = registry_model("llama3.1-8b")
    cache = registry_deployment("llama3.1-8b").cache
    assert break_even_tokens(llama, cache, Tier("tape", 10**12, 1), H100_DENSE_BF16) is None
    assert break_even_tokens(llama, cache, Tier("hbm", 10**12, 10**12), H100_DENSE_BF16) == 1


def test_a_window_caps_the_bytes_to_load_so_loading_wins_eventually() -> None:
    # Mistral-7B-v0.1 holds a 4,096-token window in every layer: from 4,096 tokens on the load
    # stops growing while the prefill keeps growing.
    mistral = registry_model("mistral-7b-v0.1")
    cache = registry_deployment("mistral-7b-v0.1").cache
    slow = Tier("slow", 10**12, 10**6)
    found = break_even_tokens(mistral, cache, slow, H100_DENSE_BF16)
    assert found is not None and found > 4096


def test_default_tiers_are_the_hosts_memory_and_nvme(runner: CliRunner) -> None:
    out = tiers(runner, "llama3-70b", "--gpus", "8xH100", "--ctx", "32k")
    assert list(out) == ["hbm", "cpu", "ssd"]
    # Host memory twice the 8 GPUs' 81,082 MiB (what CUDA reports), over PCIe 5.0 x16 one way
    # per GPU (the registry's 128 GB/s is both directions); one 4 TB NVMe at 7 GB/s per GPU.
    assert out["cpu"]["capacity_bytes"] == 2 * 8 * 81_082 * 2**20
    assert out["cpu"]["bandwidth_bytes_per_s"] == 8 * 64 * 10**9
    assert out["ssd"]["capacity_bytes"] == 8 * 4 * 10**12
    assert out["ssd"]["bandwidth_bytes_per_s"] == 8 * 7 * 10**9


@pytest.mark.parametrize(
    ("tier", "needle"),
    [
        ("cpu:512GB", "--tier cpu:512GB: give the bandwidth"),
        ("cpu:512GB@", "--tier cpu:512GB@: give the bandwidth"),
        ("cpu:512GB@64GB", "give the bandwidth per second"),
        ("512GB@64GB/s", "name the tier and its size"),
        ("cpu:512@64GB/s", "invalid size '512'"),
        ("cpu:512GB@fastGB/s", "invalid size 'fastGB'"),
    ],
)
def test_bad_tier_is_one_line_and_exit_2(runner: CliRunner, tier: str, needle: str) -> None:
    refused(runner, ["offload", "llama3.1-8b", "--gpus", "h100", "--tier", tier], needle)


def test_a_tier_named_twice_is_refused(runner: CliRunner) -> None:
    args = ["offload", "llama3.1-8b", "--gpus", "h100", "--tier", "cpu:1TB@1GB/s",
            "--tier", "cpu:2TB@1GB/s"]
    refused(runner, args, "--tier: cpu is given twice")


@pytest.mark.parametrize("name", ["hbm", "HBM"])
def test_a_tier_named_as_the_gpus_memory_is_refused(runner: CliRunner, name: str) -> None:
    # --tier hbm:100GB@10GB/s printed two "hbm" rows, the second with its break-even cell
    # blanked as the GPUs' own row's is.
    args = ["offload", "llama3.1-8b", "--gpus", "h100", "--tier", f"{name}:100GB@10GB/s"]
    refused(runner, args, "--tier: hbm is the GPUs' own memory, the first row; name the tier")


def test_one_prefix_length(runner: CliRunner) -> None:
    args = ["offload", "llama3.1-8b", "--gpus", "h100", "--ctx", "8k,32k"]
    refused(runner, args, "--ctx: give one prefix length")


def test_a_gpu_without_a_listed_pcie_link_gets_pcie_5_x16() -> None:
    from dataclasses import replace

    from kvcalc.engine.hardware import GpuSet
    from kvcalc.engine.offload import default_tiers

    llama = registry_model("llama3.1-8b")
    a100 = parse_gpu_set("a100").accelerator
    (listed, _) = default_tiers(deployment(llama, GpuSet(a100, 2)))
    assert listed.bandwidth_bytes_per_s == 2 * 32 * 10**9  # PCIe 4.0 x16 one way, per GPU
    bare = GpuSet(replace(a100, pcie_bytes_per_s=None), 2)
    cpu, ssd = default_tiers(deployment(llama, bare))
    assert cpu.bandwidth_bytes_per_s == 2 * 64 * 10**9  # one way of PCIe 5.0 x16, per GPU
    assert cpu.capacity_bytes == 2 * 2 * a100.memory_bytes
    assert (ssd.capacity_bytes, ssd.bandwidth_bytes_per_s) == (2 * 4 * 10**12, 2 * 7 * 10**9)
