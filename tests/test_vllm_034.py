"""vLLM 0.34: Model Runner V1 removed, the extensible KV cache sized after warmup, block 64.

Each expectation is what the 0.34.0 wheel's code does (vllm/v1/worker/extensible_kv_cache.py,
vllm/config/cache.py, vllm/platforms/interface.py, vllm/v1/attention/backends), checked as the
relations it implies between kvcalc's answers; no public 0.34 start-up log exists yet to set
beside them (tests/fixtures/vllm_logs/README.md).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from specs import registry_model
from typer.testing import CliRunner

from kvcalc.calibration.lines import log_lines
from kvcalc.calibration.vllm_log import parse_vllm_log
from kvcalc.cli.app import app
from kvcalc.engine.deployment import deployment
from kvcalc.engine.units import GiB
from kvcalc.engine.vllm import (
    consumed_runner_buffers,
    runs_on_model_runner_v2,
    vllm_inputs,
    vllm_memory_terms,
)
from kvcalc.engine.vllm_backends import deployment_backend_block
from kvcalc.engine.vllm_releases import vllm_release
from kvcalc.engine.vllm_warmup import MARGIN_FLOOR_BYTES_CUDA, AfterWarmup
from kvcalc.registry.gpus import parse_gpu_set


def batch(*args: str) -> dict[str, Any]:
    out = CliRunner().invoke(app, ["batch", *args, "--engine", "vllm", "-f", "json"])
    assert out.exit_code == 0, out.output
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def available(doc: dict[str, Any]) -> int:
    value: int = doc["contexts"][0]["available_bytes_per_gpu"]
    return value


def test_model_runner_v2_runs_every_model_from_0_29() -> None:
    # 0.25-0.28 keep MoE and hybrid models on Model Runner V1 (_is_default_v2_model_runner_model,
    # vllm/config/vllm.py of 0.28.0); from 0.29 use_v2_model_runner takes V2 for every model
    # whose features it supports (0.29.0-0.33.0), and 0.34 removed V1 ("Model Runner V1 has been
    # removed", Platform.validate_environ, 0.34.0). With V1 goes its inputs_embeds in consumed
    # memory; V2's sampler penalty state takes its place.
    from kvcalc.engine.overhead import runner_inputs_embeds, v2_penalty_buffers

    moe, hybrid = registry_model("qwen3-30b-a3b"), registry_model("qwen3.5-0.8b")
    for model in (moe, hybrid):
        assert not runs_on_model_runner_v2(model, vllm_release("0.28"))
        assert runs_on_model_runner_v2(model, vllm_release("0.29"))
        assert runs_on_model_runner_v2(model, vllm_release("0.34"))
    assert consumed_runner_buffers(moe, vllm_release("0.28"), 8192, 1024) == (
        runner_inputs_embeds(moe, 8192))
    for version in ("0.29", "0.33", "0.34"):
        assert consumed_runner_buffers(moe, vllm_release(version), 8192, 1024) == (
            v2_penalty_buffers(moe, 1024)), version


def test_the_default_block_is_64_from_0_34_but_rocm_attn_keeps_16() -> None:
    def block(gpu: str, version: str) -> int:
        dep = deployment(registry_model("llama3.1-8b"), parse_gpu_set(gpu))
        chosen = deployment_backend_block(dep, vllm_release(version))
        assert chosen is not None
        return chosen.block_size

    assert (block("h100", "0.33"), block("h100", "0.34")) == (16, 64)
    assert (block("b200", "0.33"), block("b200", "0.34")) == (16, 64)  # FLASHINFER
    assert (block("mi300x", "0.33"), block("mi300x", "0.34")) == (16, 16)  # ROCM_ATTN


def test_the_cache_takes_the_free_memory_at_the_default_share() -> None:
    # measure_kv_cache_bytes: min(requested - used, headroom - margin) - transient. At the
    # default 1.0 the headroom binds, so 0.99 changes nothing; a low share binds instead.
    base = ("llama3.1-8b", "--gpus", "a100", "--ctx", "8k")
    default, near, low = (batch(*base), batch(*base, "--gpu-util", "0.99"),
                          batch(*base, "--gpu-util", "0.5"))
    assert default["gpu_memory_utilization"] == 1.0 and default["kv_sized_after_warmup"]
    assert available(near) == available(default)
    assert available(low) < available(default)


def test_the_margin_and_the_transient_are_kept_free() -> None:
    # The bytes the cache may take are the device's headroom less max(1 GiB, 0.75 x transient)
    # and the transient itself: a larger transient costs 1.75 of itself above the floor.
    warm = AfterWarmup(device_total_bytes=80 * GiB, in_use_at_snapshot_bytes=GiB // 2,
                       graph_pool_bytes=GiB // 4)
    small, large = (warm.kv_cache_bytes(80 * GiB, 16 * GiB, t) for t in (GiB // 2, 4 * GiB))
    assert small == 80 * GiB - GiB // 2 - 16 * GiB - MARGIN_FLOOR_BYTES_CUDA - GiB // 2
    assert small - large == (4 * GiB - GiB // 2) + (3 * GiB - MARGIN_FLOOR_BYTES_CUDA)


def test_rocm_keeps_a_larger_margin() -> None:
    dep = deployment(registry_model("llama3.1-8b"), parse_gpu_set("mi300x"))
    (terms,) = vllm_memory_terms(dep, vllm_inputs(dep, "0.34"))
    assert terms.after_warmup is not None and terms.after_warmup.margin_floor_bytes == 3 * GiB


def test_a_given_kv_budget_turns_the_measurement_off() -> None:
    # _resolve_extensible_kv_cache: "kv_cache_memory_bytes overrides" it; the budget stands.
    doc = batch("llama3.1-8b", "--gpus", "h100", "--ctx", "8k", "--kv-cache-memory", "40GiB")
    assert not doc["kv_sized_after_warmup"]
    assert available(doc) == 40 * GiB
    assert not any("after warmup" in w for w in doc.get("warnings") or [])


def test_the_figure_says_once_what_it_rests_on() -> None:
    out = CliRunner().invoke(app, ["batch", "llama3.1-8b", "--gpus", "h100", "--engine", "vllm",
                                   "--ctx", "8k,32k"])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert text.count("no public 0.34 log checked yet") == 1
    assert "CUDA graph pool" in text and "Estimated CUDA graph memory" not in text


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(["llama3.1-8b", "qwen3-30b-a3b", "qwen3.5-0.8b", "gemma3-27b"]),
       st.sampled_from(["h100", "a100", "l40s", "rtx-4090", "2xh100"]))
def test_the_cache_never_exceeds_the_free_memory_it_is_measured_from(model: str,
                                                                     gpus: str) -> None:
    # Whatever the model: the cache, the engine's own use, the margin and the transient fit in
    # the device less what was in use at the snapshot.
    dep = deployment(registry_model(model), parse_gpu_set(gpus), tp=2 if "2x" in gpus else 1)
    for terms in vllm_memory_terms(dep, vllm_inputs(dep, "0.34")):
        warm = terms.after_warmup
        assert warm is not None
        transient = warm.transient_bytes(
            terms.activation_peak_bytes + terms.cudagraph_estimate_bytes)
        assert transient >= warm.warmup_transient_bytes
        used = (terms.weights_bytes + terms.non_torch_bytes + warm.graph_pool_bytes
                + warm.held_workspace_bytes)
        assert (terms.available_bytes + used + transient + warm.margin_bytes(transient)
                <= warm.device_total_bytes - warm.in_use_at_snapshot_bytes)


@pytest.mark.parametrize("version", ["0.33", "0.34"])
def test_max_batch_never_rises_with_context(version: str) -> None:
    doc = batch("llama3.1-8b", "--gpus", "h100", "--ctx", "4k,16k,64k", "--vllm-version",
                version)
    batches = [c["max_batch"] for c in doc["contexts"]]
    assert batches == sorted(batches, reverse=True)


def test_calibrate_reads_the_size_0_34_commits_after_warmup() -> None:
    # The two lines as 0.34.0's format strings print them (determine_available_memory's
    # "Available KV cache memory" is the reserved capacity; extend_kv_cache's line the cache).
    log = parse_vllm_log(log_lines(
        "INFO [gpu_worker.py:790] Available KV cache memory: 64.61 GiB\n"
        "INFO [extensible_kv_cache.py:570] Extended KV cache to 7776 blocks (60.75 GiB).\n"
        "INFO [kv_cache_utils.py:1180] GPU KV cache size: 497,664 tokens, Maximum concurrency "
        "for 8,192 tokens per request: 60.75x\n"
    ))
    assert log.kv_memory is not None and log.kv_memory.text == "60.75"


def test_the_table_prints_the_size_extend_kv_cache_logs_under_0_34() -> None:
    # 0.34's log gives the cache's size in extend_kv_cache's line, after warmup: the committed
    # blocks and their bytes; "Available KV cache memory" there is the reserved range. Up to
    # 0.33 the available line is the cache's budget.
    def table(version: str) -> str:
        out = CliRunner().invoke(app, ["batch", "llama3.1-8b", "--gpus", "a100", "--ctx", "8k",
                                       "--engine", "vllm", "--vllm-version", version])
        assert out.exit_code == 0, out.output
        return out.stdout

    doc = batch("llama3.1-8b", "--gpus", "a100", "--ctx", "8k", "--vllm-version", "0.34")
    blocks = doc["contexts"][0]["num_blocks"]
    # Llama-3.1-8B's page at block 64: 64 tokens x 32 layers x 2 x 8 heads x 128 x 2 bytes.
    committed = blocks * 64 * 32 * 2 * 8 * 128 * 2
    assert committed <= available(doc) < committed + 64 * 32 * 2 * 8 * 128 * 2
    line = f"Extended KV cache to {blocks} blocks ({committed / GiB:.2f} GiB)."
    new, old = table("0.34"), table("0.33")
    assert line in new and "Available KV cache memory" not in new
    assert "Available KV cache memory" in old and "Extended KV cache" not in old


def test_model_runner_v2_keeps_inputs_embeds_for_multimodal_models_on_the_first_stage() -> None:
    # EncoderRunner.inputs_embeds (vllm/v1/worker/gpu/mm/encoder_runner.py of 0.28.0 and
    # 0.34.0): max_num_tokens x the text hidden size in the model dtype, made by
    # init_model_state after "Model loading took" when the runner has an encoder cache
    # (multimodal inputs, first PP rank); 0.27's consumed memory holds it, 0.26's split not.
    from kvcalc.engine.overhead import v2_penalty_buffers

    gemma, llama = registry_model("gemma-4-e2b"), registry_model("llama3.1-8b")
    assert gemma.vision is not None and llama.vision is None
    for version in ("0.29", "0.34"):
        release = vllm_release(version)
        assert runs_on_model_runner_v2(gemma, release)
        penalties = v2_penalty_buffers(gemma, 1024)
        assert consumed_runner_buffers(gemma, release, 16384, 1024) - penalties == (
            16384 * 1536 * 2)
        assert consumed_runner_buffers(gemma, release, 16384, 1024, first_stage=False) == (
            penalties)
        assert consumed_runner_buffers(llama, release, 16384, 1024) == (
            v2_penalty_buffers(llama, 1024))
    assert consumed_runner_buffers(gemma, vllm_release("0.26"), 16384, 1024) == 0


@pytest.mark.parametrize(
    ("extra", "remedy"),
    [
        # vLLM 0.34 at its default utilization of 1.0: "The extensible KV cache already takes all
        # device memory left after the model, its activations, CUDA graphs and warmup; decrease
        # `max_model_len` or `max_num_seqs`" (_more_kv_cache_memory_hint, kv_cache_planning.py).
        ([], "lower --max-model-len or --max-num-seqs, or use more GPUs"),
        (["--gpu-util", "0.9"], "lower --max-model-len or raise --gpu-memory-utilization"),
        (["--vllm-version", "0.33"], "lower --max-model-len or raise --gpu-memory-utilization"),
        (["--kv-memory", "4GiB"], "lower --max-model-len or raise --kv-cache-memory"),
    ],
)
def test_a_context_that_does_not_fit_names_the_input_that_gives_room(
    extra: list[str], remedy: str
) -> None:
    # Llama-3.1-8B's 128k request needs 16 GiB of KV cache, more than a 24 GB card has left.
    out = CliRunner().invoke(app, ["batch", "llama3.1-8b", "--gpus", "rtx-4090", "--ctx", "128k",
                                   "--engine", "vllm", "-f", "json", *extra])
    assert out.exit_code == 1, out.output
    reason = json.loads(out.stdout)["contexts"][0]["reason"]
    assert "needs 16.00 GiB of KV cache" in reason and reason.endswith(remedy + (
        ": the cache already takes all the memory left after the model, its activations, CUDA "
        "graphs and warmup)" if not extra else ")"))


def test_calibrate_reads_what_0_34_keeps_free_after_warmup() -> None:
    # measure_kv_cache_blocks' line as 0.34.0's format string prints it (extensible_kv_cache.py).
    log = parse_vllm_log(log_lines(
        "(EngineCore pid=7) INFO [extensible_kv_cache.py:693] Memory after warmup: 61.22 GiB "
        "free, 0.01 GiB committed to the KV cache, 1.44 GiB kept for transient activations "
        "(1.44 GiB allocated at peak, 0.12 GiB of torch reservation growth); 7776 KV cache "
        "blocks (60.75 GiB) fit within the requested 79.25 GiB. Torch may reserve up to 19.1 "
        "GiB.\n"
    ))
    (worker,) = log.workers
    assert worker.free_after_warmup is not None and worker.free_after_warmup.text == "61.22"
    assert worker.transient_kept is not None and worker.transient_kept.text == "1.44"


def test_plan_says_the_after_warmup_note_once_for_every_gpu_it_holds_for() -> None:
    # The same caveat on several GPUs' layouts is one warning naming them, not one per GPU.
    out = CliRunner().invoke(app, ["plan", "llama3.1-8b", "--engine", "vllm", "--users", "4",
                                   "--gpus", "h100,a100,l40s", "-f", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    accelerators = {row["gpus"]["accelerator"] for row in doc["layouts"]}
    said = [w for w in doc["warnings"] if "sizes the KV cache from the memory free" in w]
    assert len(accelerators) > 1 and len(said) == 1
    named = said[0].split(": ", 1)[0].split(", ")
    assert sorted(named) == sorted(accelerators)


def test_0_34_captures_wider_grids_of_its_own_on_the_10_x_family() -> None:
    # _split_cudagraph_capture_sizes (vllm/config/vllm.py of 0.34.0): on SM100 the prefill
    # graphs take prefill_cudagraph_capture_grid up to min(8192, max_num_batched_tokens) ("54
    # sizes at 8192") and the decode graphs decode_cudagraph_capture_grid up to max_num_seqs
    # ("64 sizes at 1024"), where 0.33 captured 51 + 51 on the shared grid.
    from kvcalc.engine.vllm_releases import (
        capture_sizes,
        decode_request_grid,
        full_graph_sizes,
        prefill_token_grid,
    )

    assert len(prefill_token_grid(8192)) == 54 and len(decode_request_grid(1024)) == 64
    assert decode_request_grid(1024)[:7] == [1, 2, 3, 4, 5, 6, 8]
    release, b200 = vllm_release("0.34"), (10, 0)
    assert (capture_sizes(release, 1024, 16384, b200),
            full_graph_sizes(release, 1024, 16384, b200)) == (54, 64)
    assert capture_sizes(release, 1024, 2048, b200) == len(prefill_token_grid(2048))
    # Elsewhere the shared grid stands at the defaults, so Hopper's counts are 0.33's.
    for seqs, tokens in ((1024, 8192), (256, 2048)):
        assert capture_sizes(release, seqs, tokens, (9, 0)) == capture_sizes(
            vllm_release("0.33"), seqs, tokens)
        assert full_graph_sizes(release, seqs, tokens, (9, 0)) == full_graph_sizes(
            vllm_release("0.33"), seqs, tokens)


def test_0_34_captures_max_num_seqs_and_the_batched_tokens_off_the_grid() -> None:
    # _set_cudagraph_sizes appends max_num_seqs (uniform_decode_sizes) and
    # max_num_batched_tokens where they fit below the ceiling; the decode sizes are the
    # shared sizes capped at max_num_seqs: 100 sequences capture 1, 2, 4, 8..96 and 100.
    from kvcalc.engine.vllm_releases import capture_grids, full_graph_sizes

    prefill, decode = capture_grids(vllm_release("0.34"), 100, 2048, (9, 0))
    assert decode == [1, 2, 4, *range(8, 97, 8), 100]
    assert 100 in prefill and max(prefill) == 200
    assert full_graph_sizes(vllm_release("0.34"), 100, 2048, (9, 0)) == 16
    prefill, _ = capture_grids(vllm_release("0.34"), 1024, 300, (9, 0))
    assert prefill[-2:] == [288, 300]


def test_chunked_local_attention_captures_no_full_graphs_from_0_28() -> None:
    # ChunkedLocalAttentionBuilder reports AttentionCGSupport.NEVER, so
    # resolve_cudagraph_mode_and_sizes turns FULL_AND_PIECEWISE into PIECEWISE: Llama 4's
    # graphs are the PIECEWISE sizes alone, Llama 3's both kinds.
    from kvcalc.engine.vllm import captured_graphs
    from kvcalc.engine.vllm_releases import capture_sizes

    release = vllm_release("0.34")
    scout, llama = registry_model("llama4-scout"), registry_model("llama3.1-8b")
    assert captured_graphs(scout, release, 1024, 8192, (9, 0)) == capture_sizes(
        release, 1024, 8192, (9, 0)) == 51
    assert captured_graphs(llama, release, 1024, 8192, (9, 0)) == 102


def test_the_warmup_steps_transient_is_kept_free_where_it_exceeds_the_profiles() -> None:
    # _compile_or_warm_up_model resets the peak before warmup_kernels, whose prefill samples
    # max_num_seqs requests with every sampling feature (for_sampler_warmup): the logits in
    # bf16, Sampler.apply_sampling_params' fp32 copy, and FlashInfer's top-k-masked logits and
    # their softmax, fp32 each: 14 bytes a logit. From 0.33 the profile's _dummy_sampler_run
    # makes the same pass beside the whole step's hidden states, so the profile's peak holds
    # it (Gemma 3 1B's 262k vocabulary at 1,024 sequences on an H100).
    from dataclasses import replace

    gemma = registry_model("gemma3-1b")
    dep = deployment(gemma, parse_gpu_set("h100"))
    (terms,) = vllm_memory_terms(dep, vllm_inputs(dep, "0.34"))
    warm = terms.after_warmup
    assert warm is not None
    rows = 1024 * gemma.vocab_size
    assert warm.warmup_transient_bytes == 2 * 2048 * gemma.hidden_size + 14 * rows
    assert terms.activation_peak_bytes == 2 * 8192 * gemma.hidden_size + 14 * rows
    # The larger of the two is kept free, and its margin: a larger warmup transient costs
    # itself and 0.75 of itself above the profile's.
    profile = terms.activation_peak_bytes + terms.cudagraph_estimate_bytes
    assert warm.transient_bytes(profile) == profile
    larger = profile + GiB
    bigger = replace(terms, after_warmup=replace(warm, warmup_transient_bytes=larger))
    assert terms.available_bytes - bigger.available_bytes == (
        larger + warm.margin_bytes(larger) - profile - warm.margin_bytes(profile))


def test_the_sizing_steps_prompt_logprobs_take_1024_rows_of_logits() -> None:
    # run_kv_cache_sizing_warmup asks for max_logprobs (20) prompt logprobs over a step of
    # max_num_batched_tokens; compute_prompt_logprobs_with_chunking takes 1,024 rows of bf16
    # logits at a time (CHUNK_SIZE, prompt_logprob.py): four times the 256 rows the small
    # tier's profile samples. Without FlashInfer's tensors that step is the larger.
    from kvcalc.engine.vllm_warmup import warmup_transient_bytes

    qwen = registry_model("qwen3-8b")
    sizing = 2 * (2048 * qwen.hidden_size + 1024 * qwen.vocab_size)
    assert warmup_transient_bytes(qwen, 2048, 256, 1, True, flashinfer_sampler=False) == sizing
    sampler = 2 * (512 * qwen.hidden_size) + 256 * qwen.vocab_size * (2 + 12)
    assert warmup_transient_bytes(qwen, 2048, 256, 1, True, flashinfer_sampler=True) == sampler
    assert warmup_transient_bytes(qwen, 2048, 256, 2, False, flashinfer_sampler=True) == 0


def test_the_held_moe_workspaces_are_resident_not_transient_under_0_34() -> None:
    # transient_peak_headroom (vllm/utils/mem_utils.py) and record_transient_peak
    # (extensible_kv_cache.py) are allocated peaks less what stays allocated: the fused-MoE
    # workspaces the profile sizes and keeps are used memory, outside the transient whose 0.75
    # the margin takes. Up to 0.33 the activation peak holds them (their sum is the same).
    from kvcalc.engine.overhead import activation_peak, moe_workspace
    from kvcalc.engine.vllm import dense_sampler_copies

    moe = registry_model("qwen3-30b-a3b")
    dep = deployment(moe, parse_gpu_set("h100"))
    (terms,) = vllm_memory_terms(dep, vllm_inputs(dep, "0.34"))
    workspace = moe_workspace(moe, 1, 8192)
    assert terms.after_warmup is not None
    assert terms.after_warmup.held_workspace_bytes == workspace > GiB // 4
    copies = dense_sampler_copies(moe, vllm_release("0.34"), (9, 0))
    held = activation_peak(moe, 1, 8192, 1024, last_stage=True, v2_sampler_fp32_copies=copies)
    assert terms.activation_peak_bytes == held - workspace
    dense = deployment(registry_model("llama3.1-8b"), parse_gpu_set("h100"))
    (terms,) = vllm_memory_terms(dense, vllm_inputs(dense, "0.34"))
    assert terms.after_warmup is not None and terms.after_warmup.held_workspace_bytes == 0


def test_a_hybrids_attention_block_is_aligned_to_0_34s_default_block() -> None:
    # Platform._align_hybrid_block_size: kernel_block_alignment_size = max(the backend's
    # smallest kernel block, cache_config.block_size), and the attention block is the first
    # multiple of it whose page holds a state: at 0.34's default 64 a multiple of 64 (Qwen3.5-
    # 0.8B: 576, where 0.33's 16 gave 544, "Setting attention block size to 544 tokens" in the
    # 0.28 A100 PCIe log of tests/fixtures/vllm_logs).
    from kvcalc.engine.vllm import hybrid_attention_block_size, vllm_kv_cache_for

    # (On an A100: Hopper's FlashInfer GDN prefill aligns the block to 64 from 0.33 anyway.)
    dep = deployment(registry_model("qwen3.5-0.8b"), parse_gpu_set("a100"))

    def block(version: str) -> int:
        result = vllm_kv_cache_for(dep, 8192, vllm_inputs(dep, version))
        (size,) = {s.block_size for s in result.layer_specs if s.kind != "mamba"}
        return size

    assert (block("0.33"), block("0.34")) == (544, 576)
    # A block asked for that holds a state already is kept; one that does not is rounded up
    # in steps of itself.
    assert hybrid_attention_block_size(100, 5_000, 64) == 64
    assert hybrid_attention_block_size(100, 7_000, 64) == 128
    assert hybrid_attention_block_size(100, 7_000, 16) == 80


def test_gemma_4_on_capability_11_pages_at_fa4s_head_256_block() -> None:
    # Gemma4Config sets FA4 for every layer; off the 10.x family FLASH_ATTN leads the
    # priority list, and FlashAttentionBackend.get_preferred_block_size is max(default,
    # FA4_HD256_PAGE_SIZE = 128) where FA4's head-size-256 kernel runs (capability 10.x or
    # 11.x, uses_fa4_hd256_kernel; 0.29.0 on). Hopper keeps the default block.
    def block(gpu: str, version: str, model: str = "gemma-4-e4b") -> int:
        dep = deployment(registry_model(model), parse_gpu_set(gpu))
        chosen = deployment_backend_block(dep, vllm_release(version))
        assert chosen is not None and chosen.backend in ("FLASH_ATTN", "FLASHINFER")
        return chosen.block_size

    assert (block("jetson-agx-thor", "0.28"), block("jetson-agx-thor", "0.33"),
            block("jetson-agx-thor", "0.34")) == (16, 128, 128)
    assert block("h100", "0.34") == block("b200", "0.34") == 64
    assert block("jetson-agx-thor", "0.34", "llama3.1-8b") == 64


def test_align_mode_states_take_a_prefill_checkpoint_page() -> None:
    # MambaSpec.max_memory_usage_bytes in align mode: page x (2 + speculative blocks +
    # num_prefill_checkpoint_blocks). MambaMixer2.get_kv_cache_spec sets 1 from 0.32; Qwen's
    # Gated DeltaNet layer from 0.33 where FlashInfer runs its prefill (Hopper), which also
    # aligns the attention block to FLASHINFER_GDN_CHECKPOINT_ALIGNMENT (64). Jamba's Mamba1
    # layers keep two pages.
    from kvcalc.engine.vllm import vllm_kv_cache_for

    def pages(model: str, gpu: str, version: str) -> tuple[set[int], set[int]]:
        tp = 2 if model == "jamba-v0.1" else 1
        dep = deployment(registry_model(model), parse_gpu_set(f"{tp}x{gpu}"), tp=tp)
        result = vllm_kv_cache_for(dep, 8192, vllm_inputs(dep, version))
        specs = result.layer_specs
        return ({s.state_pages for s in specs if s.kind == "mamba"},
                {s.block_size for s in specs if s.kind != "mamba"})

    assert pages("nemotron-h-8b", "a100", "0.31")[0] == {2}
    assert pages("nemotron-h-8b", "a100", "0.32")[0] == {3}
    assert pages("qwen3.5-0.8b", "h100", "0.32") == ({2}, {544})
    assert pages("qwen3.5-0.8b", "h100", "0.33") == ({3}, {576})
    assert pages("qwen3.5-0.8b", "a100", "0.33") == ({2}, {544})
    assert pages("jamba-v0.1", "h100", "0.34")[0] == {2}


def test_calibrate_sets_0_34_s_after_warmup_terms_beside_kvcalc_s(tmp_path: Any) -> None:
    # An excerpt in 0.34.0's format strings (no public 0.34 log exists yet): its "Memory after
    # warmup" figures are rows of their own, beside kvcalc's terms for the same start-up.
    log = tmp_path / "v034.log"
    log.write_text(
        "INFO [core.py:99] Initializing a V1 LLM engine (v0.34.0) with config: "
        "model='meta-llama/Llama-3.1-8B-Instruct', max_seq_len=8192, tensor_parallel_size=1, "
        "pipeline_parallel_size=1, data_parallel_size=1\n"
        "INFO [extensible_kv_cache.py:693] Memory after warmup: 62.90 GiB free, 0.01 GiB "
        "committed to the KV cache, 1.61 GiB kept for transient activations (1.61 GiB "
        "allocated at peak, 0.10 GiB of torch reservation growth); 7700 KV cache blocks "
        "(60.16 GiB) fit within the requested 79.25 GiB. Torch may reserve up to 19.1 GiB.\n"
        "INFO [extensible_kv_cache.py:537] Extended KV cache to 7700 blocks (60.16 GiB).\n"
        "INFO [kv_cache_utils.py:1169] GPU KV cache size: 492,800 tokens, Maximum concurrency "
        "for 8,192 tokens per request: 60.16x\n"
    )
    out = CliRunner().invoke(app, ["calibrate", str(log), "--gpus", "a100", "--model",
                                   "llama3.1-8b", "-f", "json"])
    assert out.exit_code in (0, 1), out.output
    terms = {t["term"]: t for t in json.loads(out.stdout)["terms"]}
    dep = deployment(registry_model("llama3.1-8b"), parse_gpu_set("a100"))
    (ours,) = vllm_memory_terms(dep, vllm_inputs(dep, "0.34.0"))
    assert terms["free_after_warmup"]["logged"] == pytest.approx(62.90 * GiB, abs=GiB / 200)
    assert terms["free_after_warmup"]["kvcalc"] == ours.free_after_warmup_bytes
    assert terms["transient_kept"]["logged"] == pytest.approx(1.61 * GiB, abs=GiB / 200)
    assert terms["transient_kept"]["kvcalc"] == ours.transient_kept_bytes
    assert terms["kv_memory"]["logged"] == pytest.approx(60.16 * GiB, abs=GiB / 200)
    assert terms["kv_memory"]["kvcalc"] == ours.available_bytes


def test_a_utilization_below_1_that_withholds_memory_is_warned_of_as_0_34_does() -> None:
    # measure_kv_cache_blocks (extensible_kv_cache.py of 0.34.0) warns when a utilization in
    # (0.7, 1) keeps 1 GiB or more of free memory out of the cache: the cache at 0.9 is that
    # much below the cache at the default 1.0.
    def run(*extra: str) -> tuple[str, int]:
        args = ["batch", "llama3.1-8b", "--gpus", "a100", "--ctx", "8k", "--engine", "vllm"]
        table = CliRunner().invoke(app, [*args, *extra])
        assert table.exit_code == 0, table.output
        return " ".join(table.stdout.split()), available(batch(*args[1:6], *extra))

    at_90, kv_90 = run("--gpu-util", "0.9")
    _, kv_default = run()
    withheld = f"gpu_memory_utilization=0.9 keeps {(kv_default - kv_90) / GiB:.2f} GiB of free"
    assert withheld in at_90
    assert "keeps" not in run("--gpu-util", "0.99")[0]  # 0.79 GiB: below vLLM's 1 GiB
    assert "keeps" not in run("--gpu-util", "0.9", "--vllm-version", "0.33")[0]


def test_model_runner_v2_holds_its_sampler_penalty_state_whole() -> None:
    # PenaltiesState.__init__ (v1/worker/gpu/sample/penalties.py of 0.28.0, 0.33.0, 0.34.0):
    # output_bin_counts, max_num_seqs x vocabulary int32, and prompt_bin_mask, max_num_seqs
    # x ceil(vocabulary / 32) int32, made by load_model after the weights are measured, so
    # in "consumed memory" (0.27 on) and in what 0.34 measures as used. Llama-3.1-8B at 256
    # sequences: 256 x (128,256 + 4,008) x 4 B.
    from kvcalc.engine.overhead import v2_penalty_buffers

    llama = registry_model("llama3.1-8b")
    assert v2_penalty_buffers(llama, 256) == 256 * (128_256 + 4_008) * 4
    dep = deployment(llama, parse_gpu_set("a100"))
    (v26,) = vllm_memory_terms(dep, vllm_inputs(dep, "0.26"))
    (v33,) = vllm_memory_terms(dep, vllm_inputs(dep, "0.33"))
    assert v33.non_torch_bytes - v26.non_torch_bytes == v2_penalty_buffers(llama, 256)


def test_the_table_prints_memory_after_warmup_as_0_34_logs_it_and_calibrate_reads_it() -> None:
    # The line in measure_kv_cache_blocks' words, so that a user's log can be set beside it;
    # calibrate's own reader takes it back to kvcalc's terms (to the 0.01 GiB printed).
    out = CliRunner().invoke(app, ["batch", "llama3.1-8b", "--gpus", "a100", "--ctx", "8k",
                                   "--engine", "vllm"])
    assert out.exit_code == 0, out.output
    line = next(x for x in out.stdout.splitlines() if x.startswith("Memory after warmup:"))
    (worker,) = parse_vllm_log(log_lines(line + "\n")).workers
    dep = deployment(registry_model("llama3.1-8b"), parse_gpu_set("a100"))
    (ours,) = vllm_memory_terms(dep, vllm_inputs(dep))
    assert worker.free_after_warmup is not None and worker.transient_kept is not None
    assert abs(worker.free_after_warmup.bytes - (ours.free_after_warmup_bytes or 0)) < GiB / 200
    assert abs(worker.transient_kept.bytes - (ours.transient_kept_bytes or 0)) < GiB / 200
    assert "fit within the requested 79.25 GiB." in line  # the A100's CUDA total at 1.0


def test_the_extensible_cache_makes_no_graph_estimate_so_none_is_kept_free() -> None:
    # Model Runner V2's profile_cudagraph_memory returns 0 under the extensible KV cache ("The
    # extensible KV cache measures the capture footprint after warmup", gpu/model_runner.py
    # of 0.34.0), so the profiled peak kept free (reserved_headroom_bytes) holds no estimate;
    # 0.33 estimates and subtracts it.
    dep = deployment(registry_model("llama3.1-8b"), parse_gpu_set("a100"))
    (v33,) = vllm_memory_terms(dep, vllm_inputs(dep, "0.33"))
    (v34,) = vllm_memory_terms(dep, vllm_inputs(dep, "0.34"))
    assert v33.cudagraph_estimate_bytes > 0 and v34.cudagraph_estimate_bytes == 0
    warm = v34.after_warmup
    assert warm is not None and warm.graph_pool_bytes > 0
    assert v34.transient_kept_bytes == max(v34.activation_peak_bytes,
                                           warm.warmup_transient_bytes)


def test_gemma_3s_image_prefix_takes_the_composite_backends_from_0_30() -> None:
    # _get_backend_priorities (platforms/cuda.py) puts TRITON_FLASH_ATTN first on Hopper and
    # TRITON_FLASHINFER (kernel_block_sizes=(64,)) first on the 10.x family for an mm-prefix
    # LM (gemma3 on model_arch_config_convertor.py's list) at head size 256 or 512; their
    # MMPrefixAttentionRouting reports AttentionCGSupport.NEVER where a sliding layer is not
    # clamped, so FULL_AND_PIECEWISE falls back to PIECEWISE (composite.py, 0.30.0 on).
    from kvcalc.engine.vllm import captured_graphs

    def backend(model: str, gpu: str, version: str) -> tuple[str, int, int]:
        dep = deployment(registry_model(model), parse_gpu_set(gpu))
        release = vllm_release(version)
        chosen = deployment_backend_block(dep, release)
        assert chosen is not None
        capability = dep.gpus.accelerator.compute_capability
        graphs = captured_graphs(dep.model, release, 1024, 8192, capability)
        return chosen.backend, chosen.block_size, graphs

    assert backend("gemma3-4b", "h100", "0.29") == ("FLASH_ATTN", 16, 102)
    assert backend("gemma3-4b", "h100", "0.33") == ("TRITON_FLASH_ATTN", 16, 51)
    assert backend("gemma3-12b", "b200", "0.33")[:2] == ("TRITON_FLASHINFER", 64)
    assert backend("gemma3-4b", "a100", "0.34") == ("FLASH_ATTN", 64, 102)
    # Head size 128 (27B) and text-only (1B) keep the usual backend and both kinds of graph.
    assert backend("gemma3-27b", "h100", "0.34") == ("FLASH_ATTN", 64, 102)
    assert backend("gemma3-1b", "h100", "0.34") == ("FLASH_ATTN", 64, 102)


def test_the_profiled_sampler_runs_a_fully_featured_pass_from_0_33() -> None:
    # _dummy_sampler_run of 0.33.0 and 0.34.0 (not 0.32.0): after the greedy pass, one with
    # SamplingParams.for_sampler_warmup, so the profile holds the fp32 copy and, where
    # FlashInfer samples (capability 8.0 to 12.1), its masked logits and softmax.
    from kvcalc.engine.vllm import dense_sampler_copies

    llama = registry_model("llama3.1-8b")
    assert dense_sampler_copies(llama, vllm_release("0.32"), (9, 0)) == 0
    assert dense_sampler_copies(llama, vllm_release("0.33"), (9, 0)) == 3
    assert dense_sampler_copies(llama, vllm_release("0.34"), (7, 5)) == 1
    assert dense_sampler_copies(llama, vllm_release("0.34"), None) == 1  # ROCm
    moe = registry_model("qwen3-30b-a3b")
    assert dense_sampler_copies(moe, vllm_release("0.28"), (9, 0)) is None  # V1 in 0.28
    assert dense_sampler_copies(moe, vllm_release("0.33"), (9, 0)) == 3  # V2 from 0.29
    assert dense_sampler_copies(moe, vllm_release("0.34"), (9, 0)) == 3


# ------------------------------------------------------------------ --no-enable-extensible-kv-cache


def test_without_the_extensible_cache_0_34_sizes_from_the_profile_at_0_92() -> None:
    # _resolve_extensible_kv_cache and CacheConfig.resolved_gpu_memory_utilization (0.34.0):
    # off, the cache is sized as up to 0.33, at DEFAULT_GPU_MEMORY_UTILIZATION 0.92. A dense
    # model ran on Model Runner V2 in 0.33 already, so its budget is 0.33's to the byte.
    on = batch("llama3.1-8b", "--gpus", "h100", "--ctx", "8k")
    off = batch("llama3.1-8b", "--gpus", "h100", "--ctx", "8k", "--no-enable-extensible-kv-cache")
    older = batch("llama3.1-8b", "--gpus", "h100", "--ctx", "8k", "--vllm-version", "0.33")
    assert on["enable_extensible_kv_cache"] and on["kv_sized_after_warmup"]
    assert on["gpu_memory_utilization"] == 1.0
    assert not off["enable_extensible_kv_cache"] and not off["kv_sized_after_warmup"]
    assert off["gpu_memory_utilization"] == 0.92 and off["vllm_version"] == "0.34.0"
    assert available(off) == available(older) < available(on)
    assert off["cudagraph_memory_bytes"] == older["cudagraph_memory_bytes"] > 0
    assert off["block_size"] == 64 == on["block_size"] != older["block_size"]  # 0.34 still
    table = CliRunner().invoke(app, ["batch", "llama3.1-8b", "--gpus", "h100", "--ctx", "8k",
                                     "--engine", "vllm", "--no-enable-extensible-kv-cache"])
    assert "no extensible KV cache" in table.stdout.splitlines()[0]
    assert "Memory after warmup" not in table.stdout and "Available KV cache memory" in table.stdout


@pytest.mark.parametrize(("args", "named"), [
    (["--vllm-version", "0.33", "--enable-extensible-kv-cache"], "--vllm-version 0.34"),
    (["--vllm-version", "0.21", "--no-enable-extensible-kv-cache"], "--vllm-version 0.34"),
    (["--enable-extensible-kv-cache", "--kv-cache-memory", "40GiB"], "drop one of them"),
])
def test_the_extensible_cache_option_is_refused_where_vllm_refuses_it(
    args: list[str], named: str
) -> None:
    out = CliRunner().invoke(app, ["batch", "llama3.1-8b", "--gpus", "h100", "--ctx", "8k",
                                   "--engine", "vllm", *args])
    assert out.exit_code == 2 and "Traceback" not in out.output
    line = out.stderr.strip()
    assert "\n" not in line and "--enable-extensible-kv-cache" in line and named in line


def test_turned_off_beside_a_kv_budget_the_budget_stands() -> None:
    doc = batch("llama3.1-8b", "--gpus", "h100", "--ctx", "8k", "--kv-cache-memory", "40GiB",
                "--no-enable-extensible-kv-cache")
    assert available(doc) == 40 * GiB and not doc["enable_extensible_kv_cache"]


def test_a_check_spec_and_calibrate_take_the_extensible_cache_off(tmp_path: Any) -> None:
    spec = tmp_path / "c.yaml"
    spec.write_text("deployments:\n  - {name: a, model: llama3.1-8b, gpus: h100, engine: vllm, "
                    "enable_extensible_kv_cache: false, ctx: 8k, require: {min_batch: 4}}\n")
    out = CliRunner().invoke(app, ["check", str(spec), "-f", "json"])
    assert out.exit_code == 0, out.output
    # vLLM's own words when it turns the cache off, and the argument (0.34.0's
    # _resolve_extensible_kv_cache; EngineArgs' non-default args line).
    for line, expected in [
        ("INFO 12-01 [vllm.py:3251] Extensible KV cache off: without an IMEX channel, KV "
         "transfers within a host (e.g. NIXL) would lose NVLink and fall back to RDMA or TCP.",
         False),
        ("INFO non-default args: {'model': 'x', 'enable_extensible_kv_cache': False}", False),
        ("INFO non-default args: {'model': 'x', 'enable_extensible_kv_cache': True}", True),
        ("INFO non-default args: {'model': 'x'}", None),
    ]:
        assert parse_vllm_log(log_lines(line + "\n")).enable_extensible_kv_cache is expected
