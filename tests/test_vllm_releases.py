"""vLLM's per-release rules (kvcalc/engine/vllm_releases.py) against real public start-up logs
(tests/fixtures/vllm_logs/, each with its source and its role: "used to set constants" or
"held back"; README.md there tabulates them) and against the released wheels' code.

(a) given the KV memory the log reports, the token line within 0.01% (the log rounds the GiB to
two decimals, which alone moves a 56 GiB pool by up to 0.01%);
(b) from the GPU alone (no measured figure), within 2%; a log kvcalc cannot reach is a strict
xfail naming why.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from specs import registry_model
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine.deployment import Deployment, deployment
from kvcalc.engine.serving.base import EngineRefusal
from kvcalc.engine.units import GiB, dtype
from kvcalc.engine.vllm import (
    CUDAGRAPH_BYTES_PER_GRAPH_LAYER,
    CUDAGRAPH_BYTES_PER_GRAPH_LAYER_V2,
    ProfiledMemory,
    VLLMKVCache,
    cudagraph_estimate,
    vllm_inputs,
    vllm_kv_cache,
    vllm_kv_cache_for,
    vllm_memory_terms,
    vllm_memory_terms_for,
)
from kvcalc.engine.vllm_parallel import VLLMServing
from kvcalc.engine.vllm_releases import (
    NEWEST_VERSION,
    capture_sizes,
    full_graph_sizes,
    serve_batch_defaults,
    vllm_release,
)
from kvcalc.registry.gpus import parse_gpu_set

LOGS = Path(__file__).parent / "fixtures" / "vllm_logs"


def logged(name: str, pattern: str) -> str:
    """The first group of ``pattern`` in the log ``name`` (read from the fixture, never typed)."""
    match = re.search(pattern, (LOGS / name).read_text(encoding="utf-8"))
    assert match, (name, pattern)
    return match[1]


def log_tokens(name: str) -> int:
    return int(logged(name, r"GPU KV cache size: ([\d,]+) tokens").replace(",", ""))


def log_kv_bytes(name: str) -> int:
    # "Available KV cache memory" (or, from 0.27, "Current kv cache memory in use is"), printed
    # with two decimals: the exact figure is within 0.005 GiB.
    pattern = r"(?:Available KV cache memory: |Current kv cache memory in use is )([\d.]+) GiB"
    return int(Fraction(logged(name, pattern)) * GiB)


#: Each log's set-up as its command line states it (model, GPUs, release, options).
CASES: dict[str, dict[str, Any]] = {
    "v031-a100-llama31-8b.log": {
        "model": "llama3.1-8b", "gpus": "a100-sxm-80gb", "version": "0.31.0", "length": 131072,
    },
    "v027-rtxpro6000-qwen3-235b-fp8-tp4.log": {
        "model": "qwen3-235b-a22b-2507", "gpus": "4xrtx-pro-6000", "version": "0.27.1",
        "length": 32768, "tp": 4, "weight_dtype": "fp8", "gpu_util": 0.9, "max_num_seqs": 32,
    },
    "v0102-l40s-qwen3-235b-fp8-tp8.log": {
        "model": "qwen3-235b-a22b-2507", "gpus": "8xl40s", "version": "0.10.2", "length": 32768,
        "tp": 8, "weight_dtype": "fp8", "gpu_util": 0.9,
    },
    "v011-h200-qwen3-next-80b-tp2.log": {
        "model": "qwen3-next-80b-a3b", "gpus": "2xh200", "version": "0.11.0", "length": 262144,
        "tp": 2, "gpu_util": 0.9,
    },
    "v013-dgx-spark-qwen3-30b-a3b-fp8.log": {
        "model": "qwen3-30b-a3b", "gpus": "dgx-spark", "version": "0.13.0", "length": 32768,
        "weight_dtype": "fp8", "kv_dtype": "fp8", "gpu_util": 0.3,
    },
    # Offline LLM() on a GCE a2-highgpu-1g (one A100 40GB): the LLM class's 8192 batched tokens
    # (logged) and 256 sequences (get_batch_defaults below 70 GiB).
    "v0151-a100-40gb-llama31-8b.log": {
        "model": "llama3.1-8b", "gpus": "a100-sxm-40gb", "version": "0.15.1", "length": 131072,
        "max_num_batched_tokens": 8192, "max_num_seqs": 256,
    },
    # An RTX 3090 Ti, not in the registry: as its RTX 3090 (24 GB, 12 MiB more by nvidia-smi).
    "v0221-rtx3090ti-gemma-4-e4b.log": {
        "model": "gemma-4-e4b", "gpus": "rtx-3090", "version": "0.22.1", "length": 32768,
        "gpu_util": 0.9,
    },
    # Offline LLM(): the LLM class's 8192 batched tokens (logged) and 256 sequences (FULL
    # graphs to 256) on an A100.
    "v028-a100pcie-qwen3.5-0.8b.log": {
        "model": "qwen3.5-0.8b", "gpus": "a100-pcie-80gb", "version": "0.28.0",
        "length": 262144, "max_num_batched_tokens": 8192, "max_num_seqs": 256,
    },
    # Offline LLM() with a Qwen3-Reranker-8B (the Qwen3-8B architecture) on an RTX PRO 6000
    # Server Edition (Colab), 0.20 by its source locations (the header): the LLM class's 16384
    # batched tokens and 1024 sequences (>= 70 GiB, not an A100), none of them logged.
    "v020-rtxpro6000-qwen3-8b-reranker.log": {
        "model": "qwen3-8b", "gpus": "rtx-pro-6000", "version": "0.20.2", "length": 1024,
        "gpu_util": 0.85, "max_num_batched_tokens": 16384, "max_num_seqs": 1024,
    },
    # The calibrate fixture's five quoted lines (Qwen3-0.6B at 0.6, its header): the excerpt
    # quotes no max_model_len, so the model's own 40,960; the pool of this dense model is the
    # same whatever the length that fits.
    "../calibrate/vllm-0.27.1-qwen3-0.6b-dgx-spark-excerpt.log": {
        "model": "qwen3-0.6b", "gpus": "dgx-spark", "version": "0.27.1", "length": 40960,
        "gpu_util": 0.6,
    },
    # A 0.29.1rc1 nightly (vllm-openai-rocm:nightly-rocm100) on an MI300X VF, 191.69 GiB as the
    # registry's: the 0.29 family's rules, serve's batch defaults on a device of 70 GiB or more.
    "v0291-mi300x-gemma-4-e2b.log": {
        "model": "gemma-4-e2b", "gpus": "mi300x", "version": "0.29.1rc1.dev187",
        "length": 32768, "gpu_util": 0.9,
    },
    # Three serve starts of one GB10 benchmark run at 0.55 (the header): FP8 checkpoints as the
    # registry's fp8 weights, bf16 KV, the GB10 small tier (2048 / 256) vLLM takes up to 0.32.
    "v030-gb10-qwen3-30b-a3b-fp8.log": {
        "model": "qwen3-30b-a3b", "gpus": "dgx-spark", "version": "0.30.0", "length": 32768,
        "weight_dtype": "fp8", "gpu_util": 0.55,
    },
    "v030-gb10-gpt-oss-20b.log": {
        "model": "gpt-oss-20b", "gpus": "dgx-spark", "version": "0.30.0", "length": 32768,
        "gpu_util": 0.55,
    },
    "v030-gb10-qwen3.6-35b-a3b-fp8.log": {
        "model": "qwen3.6-35b-a3b", "gpus": "dgx-spark", "version": "0.30.0", "length": 32768,
        "weight_dtype": "fp8", "gpu_util": 0.55,
    },
    # Offline LLM(Qwen/Qwen3.5-9B) on an L40S: the LLM class's 8192 batched tokens (logged) and
    # 256 sequences (get_batch_defaults below 70 GiB; FULL graphs to 256), the model's 262,144
    # tokens, 0.9 by default, prefix caching off (0.19's default for a hybrid).
    "v019-l40s-qwen3.5-9b.log": {
        "model": "qwen3.5-9b", "gpus": "l40s", "version": "0.19.0", "length": 262144,
        "max_num_batched_tokens": 8192, "max_num_seqs": 256,
    },
    # A 0.19.1rc1 nightly serving MiniMax-M2.5 (block FP8) at TP 4 on 4 H100 80GB HBM3 (the SXM
    # part), 0.95, 128,000 tokens, 10 sequences and 8192 batched tokens, as its note's table
    # and the quoted engine line give them; bf16 KV.
    "v019-4xh100-minimax-m2.5-fp8-tp4.log": {
        "model": "minimax-m2.5", "gpus": "4xh100-sxm", "version": "0.19.1rc1.dev71",
        "length": 128000, "tp": 4, "weight_dtype": "fp8", "gpu_util": 0.95,
        "max_num_batched_tokens": 8192, "max_num_seqs": 10,
    },
    # A 0.18.1rc1 nightly serving Qwen3.5-35B-A3B-FP8 on a GB10 at 0.8 with prefix caching
    # (Mamba "align" mode, logged): block FP8 as the registry's fp8 weights, bf16 KV, the GB10
    # small tier (2048 / 256: its compile range and FULL graphs to 256).
    "v018-gb10-qwen3.5-35b-a3b-fp8.log": {
        "model": "qwen3.5-35b-a3b", "gpus": "dgx-spark", "version": "0.18.1rc1.dev147",
        "length": 262144, "weight_dtype": "fp8", "gpu_util": 0.8, "enable_prefix_caching": True,
    },
    # vllm serve Qwen/Qwen3-0.6B at 0.90 and 8,192 tokens on a RunPod RTX 4090 under 0.30.0:
    # serve's batch defaults below 70 GiB (2048 / 256), bf16.
    "v030-rtx4090-qwen3-0.6b.log": {
        "model": "qwen3-0.6b", "gpus": "rtx-4090", "version": "0.30.0", "length": 8192,
        "gpu_util": 0.9,
    },
    # vllm serve Qwen/Qwen3-8B --max-model-len 8192 on a RunPod RTX 4090 under 0.27.1, nothing
    # else: the release's 0.92, serve's 2048 / 256; the worker's first start (cold compile).
    "v027-rtx4090-qwen3-8b-cold-compile.log": {
        "model": "qwen3-8b", "gpus": "rtx-4090", "version": "0.27.1", "length": 8192,
    },
    # The same worker's next start, the compiled model loaded from the first start's cache.
    "v027-rtx4090-qwen3-8b-warm-compile.log": {
        "model": "qwen3-8b", "gpus": "rtx-4090", "version": "0.27.1", "length": 8192,
    },
    # vllm serve Qwen/Qwen3-1.7B at 0.92, 2,048 tokens, 256 sequences, no prefix caching, on a
    # RunPod RTX 4090 under 0.27.1 (serve's 2048 batched), the compiled model from the cache.
    "v027-rtx4090-qwen3-1.7b-warm-compile.log": {
        "model": "qwen3-1.7b", "gpus": "rtx-4090", "version": "0.27.1", "length": 2048,
        "gpu_util": 0.92, "max_num_seqs": 256, "enable_prefix_caching": False,
    },
    # The engine before it on the same card and command, which compiled the model.
    "v027-rtx4090-qwen3-1.7b-cold-compile.log": {
        "model": "qwen3-1.7b", "gpus": "rtx-4090", "version": "0.27.1", "length": 2048,
        "gpu_util": 0.92, "max_num_seqs": 256, "enable_prefix_caching": False,
    },
    # vllm serve Qwen/Qwen3.5-4B --max-model-len 32768 on an L4 under 0.29.0: the release's
    # 0.92, serve's 2048 / 256, prefix caching on (Mamba align mode, logged).
    "v029-l4-qwen3.5-4b.log": {
        "model": "qwen3.5-4b", "gpus": "l4", "version": "0.29.0", "length": 32768,
    },
    # vllm serve Qwen3.5-4B --max-model-len 4096 --gpu-memory-utilization 0.9 on an RTX 4090 D
    # (as the registry's RTX 4090, the same 24 GB) under 0.23.0: serve's 2048 / 256, bf16.
    "v023-rtx4090d-qwen3.5-4b.log": {
        "model": "qwen3.5-4b", "gpus": "rtx-4090", "version": "0.23.0", "length": 4096,
        "gpu_util": 0.9,
    },
    # Offline LLM(Qwen2.5-7B-Instruct, dtype="float16", gpu_memory_utilization=0.9,
    # enforce_eager=True) on a V100 32 GB (as the registry's SXM2 part) under 0.18.0: the LLM
    # class's 8192 batched tokens (logged) and 256 sequences, the model's 32,768 tokens.
    "v018-v100-qwen2.5-7b.log": {
        "model": "qwen2.5-7b", "gpus": "v100-sxm-32gb", "version": "0.18.0", "length": 32768,
        "weight_dtype": "fp16", "max_num_batched_tokens": 8192, "max_num_seqs": 256,
    },
    # vllm serve of Gemma 4 26B A4B in FP8 on an L40S under 0.25.1 at 0.92 and 32,768 tokens:
    # serve's 2048 / 256 below 70 GiB (FULL graphs to 256, logged), the batched tokens raised
    # to 2,496 for this multimodal prefix LM; bf16 KV.
    "v0251-l40s-gemma-4-26b-a4b-fp8.log": {
        "model": "gemma-4-26b-a4b", "gpus": "l40s", "version": "0.25.1", "length": 32768,
        "weight_dtype": "fp8", "gpu_util": 0.92,
    },
    # vllm serve Qwen/Qwen2.5-14B-Instruct (as the registry's deepseek-r1-distill-qwen-14b, the
    # same Qwen2 architecture) on an MI300X under 0.17.1 (ROCm 7.0): 0.9 by default, the
    # model's 32,768 tokens, serve's batch defaults on a device of 70 GiB or more, bf16.
    "v017-mi300x-qwen2.5-14b.log": {
        "model": "deepseek-r1-distill-qwen-14b", "gpus": "mi300x", "version": "0.17.1",
        "length": 32768,
    },
}

#: Logs whose excerpt quotes the token line but not the KV memory it came from: no test (a).
NO_KV_LINE = {
    "v030-gb10-qwen3-30b-a3b-fp8.log",
    "v030-gb10-gpt-oss-20b.log",
    "v030-gb10-qwen3.6-35b-a3b-fp8.log",
}

#: Logs kvcalc cannot reach within 2% from the GPU alone, and why (strict xfail).
UNREACHED = {
    "v0251-l40s-gemma-4-26b-a4b-fp8.log": (
        "+3.9%: 0.51 GiB more KV than the log's 12.75, in three parts. The post names no "
        "checkpoint: its 25.8 GiB of weights against 25.65 for the registry's model in fp8 "
        "(which layers the FP8 export keeps in bf16 is not stated); Model Runner V1's graph "
        "estimate, 0.66 GiB logged against 0.50 (86 graphs x 30 layers at the 0.19 H100 logs' "
        "pooled figure: Gemma 4 runs above it, as the 0.22.1 E4B log does); and the rest of "
        "the 0.92 x 44.39 GiB budget, 1.63 GiB of peak activation and non-torch memory, "
        "against kvcalc's 1.43, on a card the post says another service shares"
    ),
    "v030-gb10-gpt-oss-20b.log": (
        "+2.3%: on a GB10's unified memory kvcalc's figure from the GPU alone is an upper bound "
        "(kv_cache_upper_bound): the host's use while vLLM starts comes out of the pool "
        "(MemAvailable, vllm/utils/mem_utils.py), and the run lies below it, as a bound allows"
    ),
    "v027-rtx4090-qwen3-8b-cold-compile.log": (
        "+17.1%: the worker's first start, with a cold torch.compile cache (38.96 s compiling, "
        "logged). The profile run is the model's first forward and compiles it inside the "
        "measured window (profile_run within memory_profiling, determine_available_memory in "
        "vllm/v1/worker/gpu_worker.py of 0.27.1: 'still need a profile run which compiles the "
        "model'), so what Dynamo and Inductor allocate while compiling counts in the transient "
        "peak (peak allocated less allocated after, vllm/utils/mem_utils.py): 1.18 GiB of peak "
        "activation here against 0.19 in the same worker's next start, which loaded the "
        "compiled model from this run's cache with the same 15.54 GiB of consumed memory "
        "(v027-rtx4090-qwen3-8b-warm-compile.log), and kvcalc's 0.22, whose peak holds no "
        "compilation. What the compile allocates follows Inductor's choices, which no line "
        "prints: not modelled"
    ),
    "v027-rtx4090-qwen3-1.7b-cold-compile.log": (
        "+5.8%: the first engine of the job compiled the model (25.14 s, logged) inside the "
        "profile (profile_run within memory_profiling, gpu_worker.py of 0.27.1): 0.59 GiB of "
        "peak activation and 4.11 of consumed memory against 0.09 and 3.55 for the next engine "
        "on the same card and command, which loaded the compiled model from this one's cache "
        "(v027-rtx4090-qwen3-1.7b-warm-compile.log, -0.44%), so the compile also left 0.56 GiB "
        "of the free-memory drop (total_consumed, measured after empty_cache, "
        "vllm/utils/mem_utils.py) that no line splits; kvcalc's peak (0.11) and consumed "
        "memory (3.61) hold no compilation. Not modelled, as for the Qwen3-8B first start"
    ),
    "v027-rtx4090-qwen3-8b-warm-compile.log": (
        "-2.6%: kvcalc's consumed memory is 15.66 GiB (15.26 weights, the 0.25 GiB TP 1 "
        "non-torch figure of the 0.19 H100 logs and 0.15 of Model Runner V2's penalty state, "
        "PenaltiesState in vllm/v1/worker/gpu/sample/penalties.py of 0.27.1) against the 15.54 "
        "logged: the run leaves 0.27 GiB beyond its 15.27 of weights, so about 0.12 for "
        "non-torch memory and V2's other buffers where kvcalc counts 0.25; its peak is 0.19 "
        "against kvcalc's 0.22. The A100 0.31 log leaves 0.26 GiB beyond its weights where "
        "kvcalc counts 0.38 (0.25 + 0.13), which its fitted graph figure absorbs; the "
        "non-torch growth these Model Runner V2 runs print is not in the code read, and no "
        "constant is set from held-back logs"
    ),
    "v023-rtx4090d-qwen3.5-4b.log": (
        "+2.5%: 0.25 GiB more pool than the log's 10.21 of 0.9 x 23.52 = 21.17 GiB requested: "
        "the logged 8.61 GiB of weights against kvcalc's 8.49 (the 0.29 L4 start of the same "
        "checkpoint logs 8.61 too; the registry entry's config was not read from the official "
        "config.json, so the 0.12 GiB is not looked for here) and 2.35 GiB the log leaves to "
        "peak, non-torch memory and the graph estimate against kvcalc's 2.22 (1.44 peak, the "
        "encoder pass of one 4,096-pixel image; 0.25 non-torch; 0.54 graph estimate). This was "
        "a first start that compiled the model (torch.compile 48.51 s, logged) inside the "
        "profile run (profile_run within memory_profiling, gpu_worker.py), whose allocations "
        "count in the torch peak as in the 0.27 RTX 4090 first starts; the excerpt prints no "
        "peak to split it. Not modelled"
    ),
    "v018-v100-qwen2.5-7b.log": (
        "-3.4%: the registry holds no CUDA total for the V100 and starts it from nvidia-smi's "
        "32,768 MiB less the median gap of the GPUs measured (609 MiB), 31.41 GiB, where a "
        "public torch line on a Tesla V100-SXM2-32GB prints 'a total capacity of 31.74 GiB' "
        "(search index file id 56934688327), 0.30 GiB of the 0.9 budget more; at 31.74 the "
        "row is about -1.1%. Not set this round: that total lies 266 MiB below nvidia-smi's, "
        "outside the 300-1,024 MiB tests/test_gpus.py admits for a logged total (older drivers "
        "printed 32,510 MiB for this card), and it would move the median gap every GPU "
        "without a logged total starts from. kvcalc's other terms: weights 14.22 GiB against "
        "the logged 14.25, peak 1.14 (Model Runner V1's sampler at 256 sequences) and 0.25 "
        "non-torch, 1.39 where the log leaves 1.22 at 31.74"
    ),
    "v013-dgx-spark-qwen3-30b-a3b-fp8.log": (
        "+44%: the log leaves 3.43 GiB of the 36.51 requested beyond the 29.04 GiB of weights "
        "(36.51 - 29.04 - 4.04 KV), kvcalc 1.65 (1.40 sampler peak + 0.25 non-torch). On the "
        "GB10's unified memory the free memory vLLM 0.13 reads is the whole system's, so what "
        "the host took during the 170 s load (page cache, the containers sharing the device, "
        "which the log says ran beside it) counts as this process's non-torch memory "
        "(non_torch_increase, vllm/utils/mem_utils.py 0.13.0); kvcalc cannot see it and states "
        "its figure there as an upper bound (kv_cache_upper_bound). Not a constant: the public "
        "GB10 reports move it by GiBs between two starts of one machine (the README)"
    ),
    "v028-a100pcie-qwen3.5-0.8b.log": (
        "+3.6%, 2.4 GiB of a 67 GiB pool, all in the consumed memory: the report's 4.31 GiB is "
        "0.28.0's 'consumed memory (weights + non-torch)' (total_consumed: the free-memory drop "
        "from the snapshot after NCCL init to the end of the profile, taken after gc.collect() "
        "and empty_cache(), vllm/utils/mem_utils.py memory_profiling) against kvcalc's 1.89 "
        "(1.62 weights + 0.25 non-torch + 0.02 Model Runner V1's inputs_embeds buffer): 2.42 GiB "
        "that the 0.28.0 code read does not hold. "
        "Ruled out there: the encoder cache (cleared in profile_run before the measure), the "
        "dummy pixel values and encoder outputs (locals freed when profile_run returns), the "
        "workspace manager (DCP, MLA and MoE buffers only), the GDN kernels' buffers "
        "(transient), the Qwen Triton warm-up and encoder CUDA graphs (after the measure; "
        "encoder graphs are opt-in), a device-side multimodal processor (refused unless "
        "encode-only), the frontend multimodal reservation (mm_ipc_gpu_memory_gb 0), the "
        "startup plan (off), the tied lm_head (a view of embed_tokens: ParallelLMHead."
        "tie_weights; the log's 1.72 GiB of weights hold no second copy) and the model "
        "runner's persistent buffers (tens of MiB). What is left is reserved memory "
        "empty_cache cannot return or memory outside torch, neither printed. The same host's "
        "Qwen3.8-27B (same qwen3_5 architecture and defaults) leaves 0.51 GiB beyond its 51.1 "
        "of weights, its serve run of this model 4.18: about 2.2 GiB fixed to this model. "
        "Peak + graphs are 1.52 logged against kvcalc's 1.53 (the dummy encoder pass, 1.13, "
        "and the graph estimate, 0.40; before that rule the sampler's 0.96). The candidate "
        "cause: on GPUs other than SM90 the GDN layers' Triton prefill kernels are autotuned "
        "inside the profile run (_warmup_prefill_kernels, qwen_gdn_linear_attn.py 0.28.0; "
        "vLLM PR #36599), and what autotuning leaves outside torch's allocator (the driver's "
        "local memory for configs that spill) counts as consumed; its size follows the configs "
        "tried, which no line prints, so it is not modelled"
    ),
    "../calibrate/vllm-0.27.1-qwen3-0.6b-dgx-spark-excerpt.log": (
        "+3.1%: 'consumed memory' is 3.35 GiB against kvcalc's 1.37 (1.12 weights + 0.25 "
        "non-torch): on the GB10's unified memory 0.27's free-memory drop (total_consumed, "
        "MemAvailable before the load less after the profile) holds host-side use kvcalc cannot "
        "see and states as an upper bound (kv_cache_upper_bound; no constant, the README); the "
        "printed peak (transient_peak_headroom alone: this dense model runs on Model Runner "
        "V2, whose profile_cudagraph_memory returns 0 in 0.27.1) is 0.26 GiB (73.01 - 3.35 - "
        "69.4) against kvcalc's 0.08, V2's sampler at 256 sequences as its code has it "
        "(hidden states and the bf16 logits; its dummy batch is greedy, so no fp32 copy, "
        "vllm/v1/worker/gpu/sample/sampler.py 0.27.1): 0.18 GiB the code read does not hold "
        "(the excerpt names neither its batched tokens nor its sequences; at 8,192 / 1,024 V2's "
        "sampler would be 0.31)"
    ),
    "v018-gb10-qwen3.5-35b-a3b-fp8.log": (
        "+10.3%: the log leaves 7.41 GiB of the 97.35 requested (0.8 x 121.69) beyond its "
        "weights and KV (97.35 - 34.22 - 55.72), kvcalc 1.77 (1.52 peak + 0.25 non-torch) "
        "beside its 34.11 GiB of weights. On the GB10's unified memory the free memory vLLM "
        "reads is the host's MemAvailable, so what the host took between the worker's first "
        "snapshot and the end of the profile counts as this process's non-torch memory "
        "(non_torch_increase, vllm/utils/mem_utils.py, as in 0.13.0 and 0.22.1: the README); "
        "this start downloaded its checkpoint inside that span (1,089 s, logged), whose page "
        "cache is the likely part, which no line measures. kvcalc states its figure there as "
        "an upper bound (kv_cache_upper_bound) and the log lies below it; not a constant (the "
        "README)"
    ),
    "v030-gb10-qwen3.6-35b-a3b-fp8.log": (
        "-14.6%, below kvcalc's figure, which on unified memory is meant as an upper bound: the "
        "logged 1,468,523 tokens are 1,703 blocks at the 38 a 32,768-token request takes "
        "(kvcalc's layout for this hybrid: 32 attention blocks of 1,056 tokens and 2 pages for "
        "each of 3 GDN groups, int(1,703 / 38 x 32,768)), 34.30 GiB of kvcalc's 21.6 MB page, "
        "while the 66.93 GiB requested (0.55 x 121.69) less the logged 33.38 GiB of weights and "
        "the graph estimate its line implies ((0.5500 - 0.5413) x 121.69 = 1.06 GiB) leaves "
        "32.49: the run's consumed memory and transient peak together (31.57 GiB) are 1.81 GiB "
        "below its weights alone. On the GB10 consumed memory is the drop of the host's "
        "MemAvailable from the worker's first snapshot to the end of the profile "
        "(total_consumed, vllm/utils/mem_utils.py memory_profiling; gpu_worker.py "
        "determine_available_memory of 0.31.0), so the host released memory during this load "
        "(the benchmark's first start of the day; the excerpt does not say what), which no "
        "model of the GPU sees. kvcalc's own terms: weights 34.11 GiB (0.73 above the log), "
        "graph estimate 1.50 (Model Runner V2's figure per graph and layer, 0.44 above the "
        "line's), peak 1.52, non-torch 0.50 (0.25 and V2's sampler penalty state)"
    ),
}


def case_deployment(
    name: str,
    kv_memory: int | None = None,
    cases: dict[str, dict[str, Any]] | None = None,
    **extra: Any,
) -> tuple[Deployment, str, int]:
    """The deployment of log ``name``'s case (``cases``, else :data:`CASES`; ``extra`` on top),
    given its KV memory or not, with the release and request length it starts at."""
    case = {**(CASES if cases is None else cases)[name], **extra}
    model, gpus = registry_model(case.pop("model")), parse_gpu_set(case.pop("gpus"))
    version, length = case.pop("version"), case.pop("length")
    case.pop("enable_prefix_caching", None)  # a serving option (start), not the deployment's
    if kv_memory is not None:
        case.pop("gpu_util", None)  # the budget is given: the utilization plays no part
    return deployment(model, gpus, kv_memory_bytes=kv_memory, **case), version, length


def case_terms(
    name: str, cases: dict[str, dict[str, Any]] | None = None, **extra: Any
) -> tuple[ProfiledMemory, ...]:
    """kvcalc's profiler terms per stage for log ``name``'s case, from the GPU alone."""
    dep, version, _ = case_deployment(name, None, cases, **extra)
    return vllm_memory_terms(dep, vllm_inputs(dep, version))


def start(
    name: str, kv_memory: int | None = None, cases: dict[str, dict[str, Any]] | None = None
) -> VLLMKVCache:
    """The start-up of log ``name`` as kvcalc models it from its case (``cases``, else
    :data:`CASES`), given its KV memory or from the GPU alone."""
    dep, version, length = case_deployment(name, kv_memory, cases)
    # --enable-prefix-caching as the log gives it (None: the release's default), which sets
    # a hybrid's Mamba cache mode.
    given = (CASES if cases is None else cases)[name].get("enable_prefix_caching")
    serving = VLLMServing(enable_prefix_caching=given)
    result = vllm_kv_cache_for(dep, length, vllm_inputs(dep, version), serving)
    assert isinstance(result, VLLMKVCache), result
    return result


def marked(names: Iterable[str], reasons: dict[str, str]) -> list[Any]:
    """``names`` as test parameters, each in ``reasons`` a strict xfail naming why."""
    return [
        pytest.param(n, marks=pytest.mark.xfail(reason=reasons[n], strict=True))
        if n in reasons else n
        for n in names
    ]


#: Logs whose token line kvcalc does not reproduce from their own KV memory (strict xfail).
UNEXPLAINED = {
    "v0102-l40s-qwen3-235b-fp8-tp8.log": (
        "238,208 tokens are 14,888 blocks of 770,048 B (94 layers x 16 x 2 x 1 head x 128 x 2), "
        "10.68 GiB per worker, above the 10.65 GiB one worker prints and the 10.64 GiB another "
        "reports in use: kvcalc gets 237,600 from 10.65"
    ),
}


@pytest.mark.parametrize(
    "name",
    marked(sorted(set(CASES) - NO_KV_LINE), UNEXPLAINED),
)
def test_given_the_logged_kv_memory_the_token_line_is_exact(name: str) -> None:
    # The log prints the GiB to two decimals: the true budget is within 0.005 GiB of it, so the
    # logged count must lie between kvcalc's counts at either end of that interval, and those
    # lie no further apart than that 0.01 GiB is of the pool (0.02% of a 56 GiB pool, 0.25%
    # of a 4 GiB one), give or take a block: the pool is a whole number of blocks, so the
    # interval's ends can be one block further apart than its width (a block is 0.05% of a
    # 5 GiB pool of 16-token blocks).
    half = GiB // 200
    low = start(name, log_kv_bytes(name) - half).kv_cache_size_tokens
    top = start(name, log_kv_bytes(name) + half)
    high = top.kv_cache_size_tokens
    assert low <= log_tokens(name) <= high
    one_block = Fraction(1, top.num_blocks)
    assert (high - low) / log_tokens(name) < (
        Fraction(GiB, 100) / log_kv_bytes(name) + one_block + Fraction(1, 10_000)
    )


def gpu_alone_error(name: str) -> float:
    return start(name).kv_cache_size_tokens / log_tokens(name) - 1


@pytest.mark.parametrize(
    "name",
    marked(sorted(CASES), UNREACHED),
)
def test_from_the_gpu_alone_within_2_percent(name: str) -> None:
    assert abs(gpu_alone_error(name)) < 0.02, f"{gpu_alone_error(name):+.2%}"


#: The logs that print vLLM's CUDA-graph estimate ("Estimated CUDA graph memory: X GiB total",
#: or from 0.27 the summary's "X GiB for CUDAGraph memory"), and why kvcalc's misses it.
GRAPH_UNREACHED = {
    "v0251-l40s-gemma-4-26b-a4b-fp8.log": (
        "0.50 GiB against 0.66: 86 graphs x 30 layers at Model Runner V1's pooled figure (Gemma "
        "4's MoE runs on V1 in 0.25, gpu_model_runner.py in the log). The log gives 268 KiB "
        "per graph and layer, above the 0.22.1 E4B log's 229 and the calibration logs' 174-240: "
        "a model's own figure is not modelled"
    ),
    "v0221-rtx3090ti-gemma-4-e4b.log": (
        "0.70 GiB against 0.79: 86 graphs x 42 layers at Model Runner V1's figure per graph "
        "and layer (set on the 0.19 H100 TP 1 logs). The layer count is vLLM 0.22.1's: the "
        "default splitting ops are the attention ops alone (CompilationConfig._attention_ops), "
        "every layer, KV-shared ones too, calls unified_attention_with_output once "
        "(Attention.forward; those skip only unified_kv_cache_update, not a splitting op) and "
        "Gemma4Model is compiled whole (its YOCO halves only under kv_sharing_fast_prefill), so "
        "43 pieces per PIECEWISE size as for any 42-layer model. Per graph and layer the log "
        "gives 229 KiB, inside the calibration logs' own spread (Gemma-3-27B 174, Qwen2.5-7B "
        "224, Qwen3-8B 240 KiB; pooled 204): what sets a model's figure (its kernels per "
        "layer, the first captures' part) is not modelled"
    ),
}


def log_graph_bytes(name: str) -> int:
    pattern = r"(?:Estimated CUDA graph memory: |and )([\d.]+) GiB(?: total| for CUDAGraph)"
    return int(Fraction(logged(name, pattern)) * GiB)


def kvcalc_graph_bytes(name: str) -> int:
    terms = case_terms(name)
    return max(t.cudagraph_estimate_bytes for t in terms)


@pytest.mark.parametrize(
    "name",
    marked(["v027-rtxpro6000-qwen3-235b-fp8-tp4.log", *sorted(GRAPH_UNREACHED)], GRAPH_UNREACHED),
)
def test_the_graph_estimate_is_the_printed_one_within_0_01_gib(name: str) -> None:
    # Qwen3-235B (MoE, so Model Runner V1 in 0.27.1) and Gemma 4 E4B (0.22.1) are held back.
    # From 0.27 the line's "X GiB for CUDAGraph memory" is the pool capture_model took after
    # the KV cache, the nearest figure it prints to the estimate (which sits inside its peak
    # activation, gpu_worker.py of 0.27.1).
    assert abs(kvcalc_graph_bytes(name) - log_graph_bytes(name)) <= GiB // 100


V2_ESTIMATE_LOGS = {  # log: (graphs, layers) as kvcalc counts them
    "v029-l4-qwen3.5-4b.log": (86, 32),
    "v030-gb10-qwen3-30b-a3b-fp8.log": (86, 48),
    "v030-gb10-qwen3.6-35b-a3b-fp8.log": (86, 40),
}


def printed_v2_estimate(name: str) -> int:
    """Model Runner V2's estimate as a log's utilization line states it: the current share less
    the equivalent one without graph profiling, times the CUDA total."""
    current = Fraction(logged(name, r"The current --gpu-memory-utilization=([\d.]+)"))
    equivalent = Fraction(logged(name, r"equivalent to --gpu-memory-utilization=([\d.]+)"))
    total = Fraction(parse_gpu_set(CASES[name]["gpus"]).accelerator.cuda_total_bytes or 0)
    if name.startswith("v029-l4"):
        total = Fraction("22.03") * GiB  # this host's, logged (the registry's L4: 22.05)
    return int((current - equivalent) * total)


def test_model_runner_v2_s_graph_figure_is_the_printed_estimates_pooled() -> None:
    # The three logs set the constant, so this checks the arithmetic against their own lines,
    # and that kvcalc counts their graphs and layers as the constant's derivation does.
    from kvcalc.engine.vllm import CUDAGRAPH_BYTES_PER_GRAPH_LAYER_V2

    printed = {name: printed_v2_estimate(name) for name in V2_ESTIMATE_LOGS}
    assert abs(printed["v029-l4-qwen3.5-4b.log"] - Fraction("0.47") * GiB) < GiB // 100
    graph_layers = sum(g * n for g, n in V2_ESTIMATE_LOGS.values())
    assert abs(CUDAGRAPH_BYTES_PER_GRAPH_LAYER_V2 - sum(printed.values()) // graph_layers) < 2**10
    for name, (graphs, layers) in V2_ESTIMATE_LOGS.items():
        assert kvcalc_graph_bytes(name) == graphs * layers * CUDAGRAPH_BYTES_PER_GRAPH_LAYER_V2
        # One figure for three models: each within a factor 1.6 of its own printed estimate.
        assert 1 / 1.6 < kvcalc_graph_bytes(name) / printed[name] < 1.6, name


def test_the_0_31_a100_peak_holds_half_a_gib_more_than_its_headroom_and_estimate() -> None:
    # Its "1.44 GiB for peak activation" is transient_peak_headroom + the estimate
    # (determine_available_memory, vllm/v1/worker/gpu_worker.py 0.31.0); kvcalc's headroom is
    # the forward over 2,048 tokens: 2,048 x (5 x 4,096 + 3 x 14,336) x 2 B = 260,046,848 B,
    # above V2's sampler (2,048 x 4,096 x 2 + 256 x 128,256 x 2 = 82,444,288 B). Beside V2's
    # estimate as the logs that print it give it, about 0.5 GiB of the 1.44 is neither: the
    # size of a first start's compile inside the profile (the 0.27.1 RTX 4090 pairs: 0.5-1.0
    # GiB of peak over their warm restarts); the excerpt does not say whether it compiled.
    name = "v031-a100-llama31-8b.log"
    (terms,) = case_terms(name)
    assert terms.activation_peak_bytes == 260_046_848
    printed = int(Fraction(logged(name, r"([\d.]+) GiB for peak activation")) * GiB)
    left = printed - terms.activation_peak_bytes - terms.cudagraph_bytes
    assert Fraction("0.45") * GiB < left < Fraction("0.55") * GiB
    # The estimate is larger than the pool captured after the KV cache, as in the L4 log
    # (0.47 estimated, 0.24 captured).
    assert terms.cudagraph_bytes > 2 * log_graph_bytes(name)


def test_model_runner_v2_s_profiled_sampler_holds_the_logits_in_the_model_dtype() -> None:
    # Qwen3-0.6B (hidden 1,024, FFN 3,072, vocabulary 151,936, bf16) at 2,048 batched tokens
    # and 256 sequences, on the last stage. V2's dummy batch is greedy with no top-k/top-p,
    # so from 0.26 the sampler holds the forward's hidden states and the bf16 logits:
    # 2,048 x 1,024 x 2 + 256 x 151,936 x 2 = 4,194,304 + 77,791,232 = 81,985,536 B (above the
    # forward's 2,048 x (5 x 1,024 + 3 x 3,072) x 2 = 58,720,256). 0.25.0 copies the logits to
    # fp32 first: + 256 x 151,936 x 4 = 155,582,464 B. Model Runner V1 (0.24, and MoE models
    # in any release) holds 3.72 fp32 copies: 4,194,304 + ceil(3.72 x 155,582,464).
    from kvcalc.engine.overhead import activation_peak
    from kvcalc.engine.vllm import dense_sampler_copies

    model = registry_model("qwen3-0.6b")

    def peak(version: str) -> int:
        rules = vllm_release(version)
        return activation_peak(
            model, 1, 2048, 256, last_stage=True, logit_copies=rules.sampler_logit_copies,
            v2_sampler_fp32_copies=dense_sampler_copies(model, rules),
        )

    for version in ("0.26", "0.27.1", "0.28", "0.31", "0.32"):
        assert peak(version) == 81_985_536, version
    assert peak("0.25") == 81_985_536 + 155_582_464
    # From 0.33 a second pass with every sampling feature (for_sampler_warmup) makes the fp32
    # copy, and with FlashInfer its masked logits and softmax (3 copies on an H100).
    assert peak("0.33") == 81_985_536 + 155_582_464
    h100 = activation_peak(model, 1, 2048, 256, last_stage=True, v2_sampler_fp32_copies=(
        dense_sampler_copies(model, vllm_release("0.33"), (9, 0))))
    assert h100 == 81_985_536 + 3 * 155_582_464
    assert peak("0.24") == 4_194_304 + 578_766_767  # ceil(3.72 x 155,582,464)
    # MoE and hybrid models ran on Model Runner V1 up to 0.28 (V1's 3.72 copies), on V2 from
    # 0.29 (use_v2_model_runner, vllm/config/vllm.py of 0.29.0).
    moe = registry_model("qwen3-30b-a3b")
    assert dense_sampler_copies(moe, vllm_release("0.28")) is None
    assert dense_sampler_copies(moe, vllm_release("0.31")) == 0


#: Logs whose "Model loading took X GiB" kvcalc's weights term misses by more than 0.01 GiB.
WEIGHTS_UNREACHED = {
    "v0221-rtx3090ti-gemma-4-e4b.log": (
        "15.12 GiB against 15.18: the checkpoint's 7.94e9 parameters in bf16 (14.79 GiB), the "
        "two RoPE tables (131,072 x 256 and x 512, 0.19 GiB), the K/V slots of the 18 "
        "KV-shared layers (0.10 GiB) and the per-layer-embedding buffer at 2,048 tokens (0.04 "
        "GiB) leave 0.06 GiB not found in the 0.22.1 code read: the vocabulary (262,144) needs "
        "no padding, the tied lm_head's own table is dropped by tie_weights, the towers are "
        "bf16 (their configs' dtype), their buffers and the attention layers' scales are "
        "scalars, and kv_sharing_fast_prefill (off) alone adds static buffers"
    ),
}


def log_weights_bytes(name: str) -> int:
    return int(Fraction(logged(name, r"Model loading took ([\d.]+) GiB")) * GiB)


@pytest.mark.parametrize(
    "name",
    marked(sorted(WEIGHTS_UNREACHED), WEIGHTS_UNREACHED),
)
def test_the_weights_term_is_the_logged_model_loading_within_0_01_gib(name: str) -> None:
    (terms,) = case_terms(name)
    assert abs(terms.weights_bytes - log_weights_bytes(name)) <= GiB // 100


def test_model_runner_v1_graph_figure_is_the_0_19_tp1_logs_pooled() -> None:
    # CUDAGRAPH_BYTES_PER_GRAPH_LAYER from the 0.19.0 H100 TP 1 logs that print the estimate
    # (read from the fixtures, not typed): their summed estimates over their summed graphs x
    # layers, 51 + 51 graphs each at 1,024 sequences.
    logs = {"qwen2.5-7b": "qwen2.5-7b", "qwen3-8b": "qwen3-8b", "gemma3-27b": "gemma3-27b"}
    calibrate = Path(__file__).parent / "fixtures" / "calibrate"
    printed = layer_graphs = 0
    for model, stem in logs.items():
        text = (calibrate / f"vllm-0.19.0-{stem}-h100-tp1.log").read_text(encoding="utf-8")
        match = re.search(r"Estimated CUDA graph memory: ([\d.]+) GiB", text)
        assert match
        printed += int(Fraction(match[1]) * GiB)
        graphs = capture_sizes(vllm_release("0.19"), 1024, 8192) + full_graph_sizes(
            vllm_release("0.19"), 1024, 8192
        )
        layer_graphs += graphs * registry_model(model).num_layers
    assert abs(CUDAGRAPH_BYTES_PER_GRAPH_LAYER - printed // layer_graphs) <= 1
    # Dense models on Model Runner V2 get 0 in 0.25-0.28 and its own figure from 0.29.
    llama = registry_model("llama3.1-8b")
    assert cudagraph_estimate(llama, vllm_release("0.28"), 256, 8192) == 0
    v2 = cudagraph_estimate(llama, vllm_release("0.29"), 256, 8192)
    assert v2 == 86 * 32 * CUDAGRAPH_BYTES_PER_GRAPH_LAYER_V2


# ------------------------------------------------- a multimodal model's dummy encoder pass
# vLLM's profile run encodes the budget's largest images before the text model's dummy run,
# inside the same peak counter (kvcalc.engine.overhead.encoder_run_peak, read from the wheels).


def test_the_encoder_pass_is_one_largest_image_or_the_budget_s_worth_of_them() -> None:
    from kvcalc.engine.overhead import encoder_run_peak

    # Qwen3.5: the processor's 16,777,216-pixel limit is a 4,096-pixel square, 256 x 256
    # patches of 16 (16,384 tokens after the 2 x 2 merger): one image fills an 8,192 budget.
    qwen = registry_model("qwen3.5-0.8b")
    assert qwen.vision is not None and qwen.vision.patches_per_image == 256 * 256
    one = encoder_run_peak(qwen, 1, 8192)
    assert encoder_run_peak(qwen, 1, 2048) == one  # the serve run's budget holds one as well
    # Gemma-3: 896 / 14 = 64 x 64 patches pooled to 256 tokens, 32 images in 8,192 tokens.
    gemma = registry_model("gemma3-27b")
    assert gemma.vision is not None and gemma.vision.patches_per_image == 64 * 64
    assert encoder_run_peak(gemma, 1, 8192) == 32 * encoder_run_peak(gemma, 1, 256)


def test_the_0_8b_serve_run_s_peak_is_its_encoder_pass() -> None:
    # Not a fixture: the same report's summary of its serve run of Qwen3.5-0.8B on the A100
    # PCIe (section 6.2: 0.85, max_model_len 8192, 32 sequences, 2,048 batched, "峰值激活 1.36
    # GiB", 0.28's peak activation, which holds the graph estimate; 0.09 GiB captured). At 32
    # sequences the sampler is small (kvcalc's text-model peak 0.18 GiB): the peak is the
    # encoder's, the same as the offline run's. Held back: no constant is set from it.
    inputs, (serve,) = vllm_memory_terms_for(
        registry_model("qwen3.5-0.8b"), parse_gpu_set("a100-pcie-80gb"), "0.28.0",
        gpu_util=Fraction(85, 100), max_num_seqs=32, max_num_batched_tokens=2048,
    )  # fmt: skip
    assert inputs.max_num_batched_tokens == 2048
    peak = serve.activation_peak_bytes + serve.cudagraph_estimate_bytes
    assert abs(peak - Fraction("1.36") * GiB) < Fraction("0.2") * GiB  # 1.21 GiB


# ---------------------------------------------------------------- the rules, from the wheels


def test_utilization_default_is_0_9_until_0_20_then_0_92() -> None:
    # vllm/config/cache.py: Field(default=0.9) in 0.17.0, Field(default=0.92) in 0.20.0.
    assert vllm_release("0.19.1").gpu_memory_utilization == Fraction(9, 10)
    assert vllm_release("0.20").gpu_memory_utilization == Fraction(92, 100)
    assert vllm_release("0.33.0").gpu_memory_utilization == Fraction(92, 100)
    # 0.34: None, resolved to 1.0 under the extensible KV cache, its default on CUDA and ROCm
    # (CacheConfig.resolved_gpu_memory_utilization, vllm/config/cache.py of 0.34.0).
    assert vllm_release("0.34").gpu_memory_utilization == 1


def test_graph_estimate_is_subtracted_from_0_20() -> None:
    assert vllm_release("0.10.2").cudagraph == "after_kv"
    assert vllm_release("0.19").cudagraph == "printed"
    assert vllm_release("0.20.1").cudagraph == "subtracted"


def test_token_line_is_concurrency_based_from_0_21() -> None:
    assert vllm_release("0.20").token_line == "blocks"
    assert vllm_release("0.21").token_line == "concurrency"


def test_consumed_memory_holds_model_runner_v1_s_inputs_embeds_from_0_27() -> None:
    # GPUModelRunner.__init__ (vllm/v1/worker/gpu_model_runner.py, 0.22.1 to 0.33.0)
    # keeps inputs_embeds, max_num_batched_tokens x hidden_size in the model dtype, made after
    # the init snapshot; 0.27's free-memory drop counts it, 0.26's weights + torch peak increase
    # + non-torch does not. Qwen3-235B (MoE: V1) at 8,192 batched tokens and hidden 4,096 (its
    # HF config.json, quoted in the RTX PRO 6000 log's source): 8192 x 4096 x 2 B = 64 MiB.
    # Llama-3.1-8B is dense: Model Runner V2 from 0.25, which keeps no such buffer but its
    # sampler's penalty state (PenaltiesState, gpu/sample/penalties.py), counted the same way.
    from kvcalc.engine.overhead import v2_penalty_buffers
    from kvcalc.engine.vllm import vllm_memory_terms_for

    def non_torch(model: str, gpus: str, version: str, **kw: Any) -> int:
        _, terms = vllm_memory_terms_for(registry_model(model), parse_gpu_set(gpus), version,
                                         max_num_batched_tokens=8192, **kw)
        return terms[0].non_torch_bytes

    moe = ("qwen3-235b-a22b-2507", "4xrtx-pro-6000")
    assert non_torch(*moe, "0.27.1", tp=4) - non_torch(*moe, "0.26.0", tp=4) == 64 * 2**20
    assert non_torch("llama3.1-8b", "a100-sxm-80gb", "0.27.1") - non_torch(
        "llama3.1-8b", "a100-sxm-80gb", "0.26.0") == v2_penalty_buffers(
        registry_model("llama3.1-8b"), 256)


def test_serve_batch_defaults_follow_the_device() -> None:
    newest, old = vllm_release(NEWEST_VERSION), vllm_release("0.19")
    assert serve_batch_defaults(old, 80 * GiB, "NVIDIA A100-SXM4-80GB").max_num_seqs == 256
    h100 = serve_batch_defaults(old, 79 * GiB, "NVIDIA H100 80GB HBM3")
    assert h100.max_num_batched_tokens == 8192
    assert serve_batch_defaults(old, 44 * GiB, "NVIDIA L40S").max_num_batched_tokens == 2048
    # >= 160 GiB from 0.28 (B200: 178 GiB).
    assert serve_batch_defaults(old, 178 * GiB, "NVIDIA B200").max_num_batched_tokens == 8192
    assert serve_batch_defaults(newest, 178 * GiB, "NVIDIA B200").max_num_batched_tokens == 16384
    assert serve_batch_defaults(newest, 121 * GiB, "NVIDIA GB10").max_num_batched_tokens == 2048


def test_capture_sizes_51_at_256_sequences_67_in_0_11() -> None:
    # "PIECEWISE=51 (largest=512), FULL=35 (largest=256)" (LMCache #3430); 0.11 "67/67".
    assert capture_sizes(vllm_release("0.21"), 256, 2048) == 51
    assert capture_sizes(vllm_release("0.11"), 1024, 8192) == 67
    assert capture_sizes(vllm_release("0.21"), 16, 8192) == 7  # 1 2 4 8 16 24 32


def test_the_sampler_profile_held_more_logits_before_0_17() -> None:
    # Qwen3-14B on an H100 (8192 tokens, 1024 sequences): 5.64 GiB in 0.16, 2.23 in 0.17
    # (the reference's measured drift; 0.16's figure set the pre-0.17 copies, 0.17's was
    # set by the 0.19 logs).
    dep = deployment(registry_model("qwen3-14b"), parse_gpu_set("h100"))
    old = vllm_memory_terms(dep, vllm_inputs(dep, "0.16"))[0].activation_peak_bytes
    new = vllm_memory_terms(dep, vllm_inputs(dep, "0.17"))[0].activation_peak_bytes
    assert round(old / GiB, 2) == 5.64 and round(new / GiB, 2) == 2.23


def test_sliding_window_reserve_doubles_from_0_26() -> None:
    assert vllm_release("0.25").in_flight_tokens(8192, 1) == 8192
    assert vllm_release("0.26").in_flight_tokens(8192, 1) == 16384


def test_versions_outside_the_table_are_refused() -> None:
    for text in ("0.9.2", "0.35", "banana"):
        with pytest.raises(EngineRefusal, match="vllm-version"):
            vllm_release(text)


@pytest.mark.parametrize("text", ["0.34x", "0.34....", "0.19.0_foo", "0.34.abc", "0.34-x"])
def test_a_version_with_trailing_text_is_no_release(text: str) -> None:
    # The pattern took any word characters after X.Y: `--vllm-version 0.34x` sized with
    # 0.34's rules and printed "vLLM 0.34x" as a release.
    with pytest.raises(EngineRefusal, match="is not a vLLM release"):
        vllm_release(text)


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("0.10.1.1", (0, 10, 1)),  # a four-part release on PyPI
        ("v0.26.1rc0", (0, 26, 1)),
        ("0.8.5.post1", (0, 8, 5)),
        ("0.11.1rc2.dev161+g1234abcd", (0, 11, 1)),  # a nightly, as a log prints it
        ("0.34.0+cu129", (0, 34, 0)),
    ],
)
def test_release_spellings_pip_uses_are_read(text: str, version: tuple[int, int, int]) -> None:
    from kvcalc.engine.vllm_releases import parse_version

    assert parse_version(text) == version


def test_memory_terms_for_calibration_add_up() -> None:
    inputs, (terms,) = vllm_memory_terms_for(
        registry_model("llama3.1-8b"), parse_gpu_set("a100-sxm-80gb"), "0.31"
    )
    assert inputs.max_num_seqs == 256 and inputs.gpu_memory_utilization == Fraction(92, 100)
    parts = terms.weights_bytes + terms.activation_peak_bytes + terms.non_torch_bytes
    assert terms.available_bytes == terms.requested_bytes - parts - terms.cudagraph_bytes
    assert terms.cudagraph_bytes > 0


# ---------------------------------------------------------------- the command line


def test_cli_names_the_release_and_reports_its_inputs() -> None:
    import json

    runner = CliRunner()
    out = runner.invoke(app, ["batch", "llama3.1-8b", "--gpus", "a100-sxm-80gb", "--engine",
                              "vllm", "--max-model-len", "8k", "--format", "json"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.output)
    assert payload["vllm_version"] == NEWEST_VERSION
    assert payload["gpu_memory_utilization"] == 1.0  # 0.34's extensible KV cache
    assert payload["kv_sized_after_warmup"] is True
    assert payload["max_num_batched_tokens"] == 2048 and payload["max_num_seqs"] == 256


def test_cli_refuses_an_unknown_release_in_one_line() -> None:
    out = CliRunner().invoke(app, ["batch", "llama3.1-8b", "--gpus", "h100", "--engine",
                                   "vllm", "--vllm-version", "0.9"])
    assert out.exit_code == 2
    assert "--vllm-version" in out.output and "Traceback" not in out.output


def test_plan_takes_the_release_and_refuses_it_for_another_engine() -> None:
    runner = CliRunner()
    base = ["plan", "llama3.1-8b", "--users", "16", "--gpus", "h100"]
    ok = runner.invoke(app, [*base, "--engine", "vllm", "--vllm-version", "0.19"])
    assert ok.exit_code == 0, ok.output
    refused = runner.invoke(app, [*base, "--vllm-version", "0.19"])
    assert refused.exit_code == 2 and "--engine vllm only" in refused.output


def test_a_spec_file_takes_the_release(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "deployments:\n  - model: llama3.1-8b\n    gpus: a100\n    engine: vllm\n"
        "    vllm_version: '0.21'\n    ctx: 8k\n    require: {min_batch: 1}\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(app, ["check", str(spec)])
    assert result.exit_code == 0, result.output


def test_the_help_names_the_table_s_range_and_default() -> None:
    from kvcalc.engine.serving import engine_named
    from kvcalc.engine.vllm_releases import DEFAULT_VERSION, OLDEST_VERSION, RELEASES

    (declared,) = (i for i in engine_named("vllm").inputs if i.name == "vllm_version")
    newest = RELEASES[-1].family
    assert f"{OLDEST_VERSION}-{newest}" in declared.help
    assert f"[default: {DEFAULT_VERSION}]" in declared.help


def test_align_mode_of_0_28_reproduces_a_prefix_caching_log() -> None:
    # tests/fixtures/engine_logs/vllm-club3090-612-qwen3.6-35b-a3b.log: vLLM 0.24.0, one RTX
    # 5090, fp8 KV, max_model_len 131072, with --enable-prefix-caching (so Mamba "align" mode,
    # which 0.28 makes the default for hybrids): 5.98 GiB -> 567,978 tokens, 4.33x.
    text = (LOGS.parent / "engine_logs" / "vllm-club3090-612-qwen3.6-35b-a3b.log").read_text(
        encoding="utf-8"
    )
    kv = re.search(r"Available KV cache memory: ([\d.]+) GiB", text)
    tokens = re.search(r"GPU KV cache size: ([\d,]+) tokens", text)
    assert kv and tokens
    # The checkpoint is NVFP4 (weights only): the pool is sized from the logged KV memory.
    def start(version: str) -> VLLMKVCache:
        result = vllm_kv_cache(
            registry_model("qwen3.6-35b-a3b"), int(Fraction(kv[1]) * GiB),
            max_model_len=131072, kv_dtype=dtype("fp8"), max_num_batched_tokens=8192,
            release=vllm_release(version),
        )  # fmt: skip
        assert isinstance(result, VLLMKVCache), result
        return result

    align = start("0.28")
    assert align.kv_cache_size_tokens == int(tokens[1].replace(",", ""))
    assert f"{align.max_concurrency:.2f}" == "4.33"
    # Without align mode (0.27's default) the same pool holds more requests.
    assert start("0.27").max_concurrency > align.max_concurrency


def test_0_13_on_a_gb10_runs_the_small_tier_and_its_capture_grid() -> None:
    # The 0.13 DGX Spark log: "max_num_batched_tokens=2048" and "PIECEWISE 51/51", "FULL
    # 35/35", vllm serve's 2048 / 256 (NVML's memory query fails on the GB10 up to 0.32, so
    # get_batch_defaults reads 0 GiB) on the 0.12+ grid (steps of 16 from 256).
    from kvcalc.engine.vllm_releases import full_graph_sizes

    name = "v013-dgx-spark-qwen3-30b-a3b-fp8.log"
    release = vllm_release("0.13.0")
    defaults = serve_batch_defaults(release, int(Fraction("121.69") * GiB), "NVIDIA GB10")
    assert defaults.max_num_batched_tokens == int(logged(name, r"max_num_batched_tokens=(\d+)"))
    seqs, batched = defaults.max_num_seqs, defaults.max_num_batched_tokens
    bar = r"\): 100%\|[^|\n]*\| ?(\d+)/"
    assert capture_sizes(release, seqs, batched) == int(logged(name, "PIECEWISE" + bar))
    assert full_graph_sizes(release, seqs, batched) == int(logged(name, "FULL" + bar))


@pytest.mark.parametrize(
    ("name", "max_num_seqs", "batched"),
    [
        ("v011-h200-qwen3-next-80b-tp2.log", 1024, 8192),
        ("v011-l40s-granite-4.0-micro.log", 256, 8192),
    ],
)
def test_0_11_captures_the_graph_counts_its_logs_print(
    name: str, max_num_seqs: int, batched: int
) -> None:
    # The bars "Capturing CUDA graphs (... PIECEWISE): 67/67" and "(decode, FULL): N/N".
    from kvcalc.engine.vllm_releases import full_graph_sizes

    release = vllm_release("0.11.0")
    piecewise = int(logged(name, r"PIECEWISE\): 100%\|(?:[^|\n]*\|)? ?(\d+)/"))
    full = int(logged(name, r"FULL\): 100%\|(?:[^|\n]*\|)? ?(\d+)/"))
    assert capture_sizes(release, max_num_seqs, batched) == piecewise
    assert full_graph_sizes(release, max_num_seqs, batched) == full


# ------------------------------------------------------------------ a unified part's start-up
# vLLM on an integrated GPU reads the OS's MemAvailable as its free memory and refuses to start
# when it requests more (vllm/v1/worker/utils.py request_memory). On a DGX Spark, vLLM's own
# recipe starts at 0.85 and says the default 0.92 cannot be satisfied (vllm-project/recipes
# PR #632); two headless GB10s never started at 0.87 (MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks
# issue #47, 101.3-102.2 GiB free at boot).

# request_memory's refusal of a share the OS does not leave free, up to 0.33 (0.34's
# extensible KV cache takes the share as a cap only).
SPARK = ["batch", "qwen3-30b-a3b", "--gpus", "dgx-spark", "--engine", "vllm", "--ctx", "32k",
         "--vllm-version", "0.33"]


def test_vllm_s_default_share_of_a_dgx_spark_is_refused_with_the_share_that_starts() -> None:
    out = CliRunner().invoke(app, SPARK)
    assert out.exit_code == 2, out.output
    line = out.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "--gpu-util" in line and "0.92" in line and "give 0.85 or less" in line
    assert "111.95 GiB" in line  # ceil(0.92 x 121.69 GiB), what vLLM would request


@pytest.mark.parametrize(("share", "starts"), [("0.85", True), ("0.6", True), ("0.87", False)])
def test_a_dgx_spark_starts_at_the_shares_the_sources_started_it_at(share: str,
                                                                     starts: bool) -> None:
    out = CliRunner().invoke(app, [*SPARK, "--gpu-util", share])
    assert (out.exit_code == 0) is starts, out.output


def test_the_refusal_holds_for_decode_and_not_for_a_given_kv_budget() -> None:
    # vLLM's request_memory runs whatever --kv-cache-memory says, but a budget given comes from
    # a run that started (kvcalc refuses --gpu-util beside it): that run's share is not known.
    runner = CliRunner()
    given = runner.invoke(app, [*SPARK, "--kv-cache-memory", "40GiB"])
    decode = runner.invoke(app, ["decode", "qwen3-30b-a3b", "--gpus", "dgx-spark", "--engine",
                                 "vllm", "--vllm-version", "0.33"])
    assert given.exit_code == 0, given.output
    assert decode.exit_code == 2 and "--gpu-util" in decode.stderr


def test_0_34_starts_a_dgx_spark_at_its_default_share_and_sizes_it_from_the_free_memory() -> None:
    # 0.34's request_memory refuses no share under the extensible KV cache ("the budget is only
    # a cap"), and measure_kv_cache_bytes caps the cache at the memory free after warmup less
    # its margin: on a unified part that free memory is what the OS leaves, so the pool is
    # below 0.33's at the share the OS was measured to leave (0.85). A dense model, which both
    # releases run on Model Runner V2, so that only the sizing differs (an MoE model's 0.33
    # pool also pays V2's graph estimate, which 0.34's extensible cache does not make).
    base = ["batch", "llama3.1-8b", "--gpus", "dgx-spark", "--engine", "vllm", "--ctx", "32k",
            "-f", "json"]
    runner = CliRunner()
    new = runner.invoke(app, base)
    old = runner.invoke(app, [*base, "--vllm-version", "0.33", "--gpu-util", "0.85"])
    assert new.exit_code == 0 and old.exit_code == 0, new.output + old.output
    new_doc, old_doc = json.loads(new.stdout), json.loads(old.stdout)
    assert new_doc["gpu_memory_utilization"] == 1.0 and new_doc["kv_sized_after_warmup"]
    assert new_doc["kv_cache_upper_bound"]
    available = [d["contexts"][0]["available_bytes_per_gpu"] for d in (new_doc, old_doc)]
    assert available[0] < available[1]


def test_a_discrete_gpu_has_no_start_up_limit_below_its_total() -> None:
    out = CliRunner().invoke(app, ["batch", "llama3.1-8b", "--gpus", "h100", "--engine", "vllm",
                                   "--ctx", "8k", "--gpu-util", "0.99"])
    assert out.exit_code == 0, out.output


# ------------------------------------------------------------------ a unified part's KV bound
# On a unified part vLLM charges the host's use while it starts to the KV pool (MemAvailable
# drops: vllm/utils/mem_utils.py MemorySnapshot.measure and memory_profiling, 0.13.0 to 0.33.0),
# which varies with the run (NVIDIA/xr-ai PR #462: a cold load fails where a warm one of the same
# settings passes), so kvcalc states its figure from the GPU alone as an upper bound.

UNIFIED_LOGS = [
    "v013-dgx-spark-qwen3-30b-a3b-fp8.log",
    "../calibrate/vllm-0.27.1-qwen3-0.6b-dgx-spark-excerpt.log",
    "v030-gb10-qwen3-30b-a3b-fp8.log",
    "v030-gb10-gpt-oss-20b.log",
    "v030-gb10-qwen3.6-35b-a3b-fp8.log",
    "v018-gb10-qwen3.5-35b-a3b-fp8.log",
]

#: Unified logs whose pool is larger than kvcalc's bound, and why (strict xfail).
ABOVE_THE_BOUND = {
    "v030-gb10-qwen3.6-35b-a3b-fp8.log": (
        "the host released memory while this run loaded: its 34.30 GiB of KV exceed what the "
        "requested memory leaves after its own logged weights and graph estimate (32.49 GiB; "
        "test_the_0_30_gb10_qwen3_6_pool_is_larger_than_its_budget_less_its_weights), so its "
        "consumed memory, the host's MemAvailable drop, was below its weights. A bound from the "
        "GPU alone cannot hold for such a run"
    ),
}


@pytest.mark.parametrize("name", marked(UNIFIED_LOGS, ABOVE_THE_BOUND))
def test_the_unified_logs_lie_below_kvcalcs_bound(name: str) -> None:
    # The bound's claim against the held-back GB10 logs: vLLM's pool, measured on the
    # machine, is at most kvcalc's from the GPU alone.
    assert start(name).kv_cache_size_tokens >= log_tokens(name)


def test_the_0_30_gb10_qwen3_6_pool_is_larger_than_its_budget_less_its_weights() -> None:
    # Read from the log (not typed): the token line, the weights and the utilization the graph
    # line says it is equivalent to without the estimate ((u - equivalent) x total, vLLM's own
    # cg_util_delta, gpu_worker.py of 0.31.0). kvcalc's layout for this hybrid gives the blocks
    # a request takes and the bytes of a block; the logged tokens are a whole number of blocks.
    name = "v030-gb10-qwen3.6-35b-a3b-fp8.log"
    layout = start(name)
    (stage,) = layout.stages
    per_request, tokens, length = layout.blocks_per_request, log_tokens(name), 32768
    (blocks,) = [b for b in range(tokens * per_request // length + 2)
                 if int(Fraction(b, per_request) * length) == tokens]
    kv = blocks * stage.bytes_per_block
    total = case_deployment(name)[0].cuda_total_bytes_per_gpu
    requested = Fraction(55, 100) * total
    equivalent = Fraction(logged(name, r"equivalent to --gpu-memory-utilization=([\d.]+)"))
    graphs = (Fraction(55, 100) - equivalent) * total
    weights = Fraction(logged(name, r"Model loading took ([\d.]+) GiB")) * GiB
    # 34.30 GiB of KV against 32.49 GiB left once the weights and the estimate are taken.
    assert kv - (requested - weights - graphs) > Fraction("1.8") * GiB


def test_a_unified_part_from_the_gpu_alone_says_its_figures_are_an_upper_bound() -> None:
    two_lengths = [*SPARK[:-3], "8k,32k", "--vllm-version", "0.33", "--gpu-util", "0.85"]
    out = CliRunner().invoke(app, two_lengths)
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "upper bound" in text and "--kv-cache-memory" in text and "--calibration" in text
    assert text.count("upper bound") == 1  # one note, not one per request length
    assert text.count("GPU KV cache size") == 2
    doc = json.loads(CliRunner().invoke(app, [*SPARK, "--gpu-util", "0.85", "-f", "json"]).output)
    assert doc["kv_cache_upper_bound"] is True


@pytest.mark.parametrize(
    "args",
    [
        [*SPARK, "--kv-cache-memory", "40GiB"],  # a budget given: the machine's own
        ["batch", "qwen3-30b-a3b", "--gpus", "h100", "--engine", "vllm", "--ctx", "32k"],
    ],
)
def test_a_given_budget_or_a_discrete_gpu_is_no_bound(args: list[str]) -> None:
    runner = CliRunner()
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    assert "upper bound" not in out.output
    assert json.loads(runner.invoke(app, [*args, "-f", "json"]).output)[
        "kv_cache_upper_bound"
    ] is False


def test_decode_sized_by_vllm_on_a_unified_part_warns_its_batch_is_a_bound() -> None:
    # decode's default batch is the same pool's concurrency: the same bound, said once.
    args = ["decode", "qwen3-0.6b", "--gpus", "dgx-spark", "--engine", "vllm",
            "--vllm-version", "0.27.1", "--gpu-util", "0.6", "--ctx", "8k"]
    doc = json.loads(CliRunner().invoke(app, [*args, "-f", "json"]).stdout)
    assert [w for w in doc["warnings"] if "upper bound" in w] == [
        w for w in doc["warnings"] if "--calibration" in w
    ]
    assert len([w for w in doc["warnings"] if "upper bound" in w]) == 1
    given = json.loads(
        CliRunner().invoke(app, [*args[:-4], "--ctx", "8k", "--kv-cache-memory", "40GiB",
                                 "-f", "json"]).stdout
    )
    assert not any("upper bound" in w for w in given.get("warnings") or [])


# ------------------------------------------------ logs of an unnamed GPU, given its device total
# A log whose GPU is unnamed (or not in the registry) still tests the release's rules term by
# term: from about 0.24 each worker prints one accounting line, "Free memory on device (F/T
# GiB) on startup. Desired GPU memory utilization is (u, X GiB). Actual usage is W GiB for
# weight, P GiB for peak activation, N GiB for non-torch memory, and G GiB for CUDAGraph
# memory. ... Current kv cache memory in use is K GiB.", whose T is the CUDA total vLLM sized
# its budget from. These logs run on a registry GPU of the same architecture (the compute
# capability picks the attention backend and its block; the log's backend line says which)
# with T given as the GPU memory. They count toward "the release's rules", never toward "the
# GPU alone": they are kept out of CASES and its GPU-alone test.

#: Each such log's set-up (as CASES) and the registry GPU standing in for its unnamed one.
GIVEN_TOTAL_CASES: dict[str, dict[str, Any]] = {
    # AsyncEngineArgs(Qwen/Qwen2.5-0.5B, float16, util 0.9, 32768 batched tokens, 256
    # sequences) on an unnamed 15.55 GiB GPU using FLASH_ATTN with FlashAttention 2: as the
    # RTX 4090 (Ada: FLASH_ATTN, 16-token blocks) with the logged total.
    "v0260-unnamed16gb-qwen2.5-0.5b.log": {
        "model": "qwen2.5-0.5b", "gpus": "rtx-4090", "version": "0.26.0", "length": 32768,
        "weight_dtype": "fp16", "gpu_util": 0.9, "max_num_batched_tokens": 32768,
        "max_num_seqs": 256,
    },
}

#: Given-total logs kvcalc does not reach within 2%, and why (strict xfail).
GIVEN_TOTAL_UNREACHED = {
    "v0260-unnamed16gb-qwen2.5-0.5b.log": (
        "-2.3%, 0.28 GiB of an 11.94 GiB pool, term by term against the accounting line: "
        "weights 0.924 GiB against 0.93 (kvcalc's 494,032,768 fp16 parameters and the rotary "
        "cache); peak activation 1.164 against 1.06: the profile run's forward over the 32,768 "
        "batched tokens, 5 hidden-sized and 3 FFN-wide tensors per token (fitted on the 0.19 "
        "8B logs), where this 896-wide model measured about 3 hidden-sized ones (0.11 GiB at "
        "56 MiB each), not changed from a held-back log (Model Runner V2's sampler, 0.13 GiB: "
        "the hidden states and one fp16 copy of 256 rows of logits, is not the peak); "
        "non-torch 0.25 (the 0.19 H100 TP 1 "
        "figure) against 0.07, the growth of non-torch memory from the worker's start to the "
        "end of the profile (vllm/utils/mem_utils.py memory_profiling, 0.26.0), which the code "
        "does not fix (0.02-0.26 GiB at TP 1 in other public accounting lines); CUDA graphs 0 "
        "against 0, as the code has it (0.4 GiB printed is the captured pool, after the KV "
        "cache)"
    ),
}


def logged_cuda_total_bytes(name: str) -> int:
    """T of the log's "Free memory on device (F/T GiB)", two decimals (read, never typed)."""
    return int(Fraction(logged(name, r"Free memory on device \([\d.]+/([\d.]+) GiB\)")) * GiB)


def start_given_total(name: str, kv_memory: int | None = None) -> VLLMKVCache:
    # The logged total sizes the budget; a KV memory given replaces that budget.
    cases = GIVEN_TOTAL_CASES
    if kv_memory is None:
        cases = {name: {**cases[name], "gpu_memory_bytes": logged_cuda_total_bytes(name)}}
    return start(name, kv_memory, cases)


@pytest.mark.parametrize("name", sorted(GIVEN_TOTAL_CASES))
def test_given_total_logs_token_line_from_their_kv_memory(name: str) -> None:
    # As test_given_the_logged_kv_memory_the_token_line_is_exact: the logged count lies between
    # kvcalc's at either end of the two-decimal GiB.
    half = GiB // 200
    low = start_given_total(name, log_kv_bytes(name) - half).kv_cache_size_tokens
    high = start_given_total(name, log_kv_bytes(name) + half).kv_cache_size_tokens
    assert low <= log_tokens(name) <= high


@pytest.mark.parametrize(
    "name",
    marked(sorted(GIVEN_TOTAL_CASES), GIVEN_TOTAL_UNREACHED),
)
def test_given_the_device_total_within_2_percent(name: str) -> None:
    error = start_given_total(name).kv_cache_size_tokens / log_tokens(name) - 1
    assert abs(error) < 0.02, f"{error:+.2%}"


def accounting_terms(name: str) -> dict[str, int]:
    """The accounting line's figures in bytes (two decimals each)."""
    pattern = (
        r"Desired GPU memory utilization is \([\d.]+, ([\d.]+) GiB\)\. Actual usage is ([\d.]+) "
        r"GiB for weight, ([\d.]+) GiB for peak activation, ([\d.]+) GiB for non-torch memory, "
        r"and ([\d.]+) GiB for CUDAGraph memory"
    )
    match = re.search(pattern, (LOGS / name).read_text(encoding="utf-8"))
    assert match, name
    keys = ("requested", "weights", "peak", "non_torch", "graphs_captured")
    return {k: int(Fraction(v) * GiB) for k, v in zip(keys, match.groups(), strict=True)}


@pytest.mark.parametrize("name", sorted(GIVEN_TOTAL_CASES))
def test_given_total_logs_budget_and_weights_are_kvcalc_s(name: str) -> None:
    # The terms kvcalc reproduces: the requested memory (u x T), the weights, and 0.26's rule
    # that Model Runner V2 subtracts no graph estimate (profile_cudagraph_memory returns 0,
    # vllm/v1/worker/gpu/model_runner.py of 0.26.0), which the log's own sum shows: its KV
    # memory is requested - weights - peak - non-torch, the captured graphs not taken from it.
    log = accounting_terms(name)
    (terms,) = case_terms(name, GIVEN_TOTAL_CASES, gpu_memory_bytes=logged_cuda_total_bytes(name))
    rounding = GiB // 100
    assert abs(terms.requested_bytes - log["requested"]) <= rounding
    assert abs(terms.weights_bytes - log["weights"]) <= rounding
    assert terms.cudagraph_bytes == 0
    kv_by_the_log = log["requested"] - log["weights"] - log["peak"] - log["non_torch"]
    assert abs(kv_by_the_log - log_kv_bytes(name)) <= 2 * rounding


def test_0_26_captures_the_graph_counts_the_qwen2_5_log_prints() -> None:
    # "Capturing CUDA graphs (PIECEWISE): 51/51" and "(FULL): 35/35" at 256 sequences and
    # 32,768 batched tokens (the sizes list of its config line ends at 512).
    name = "v0260-unnamed16gb-qwen2.5-0.5b.log"
    case = GIVEN_TOTAL_CASES[name]
    release = vllm_release(case["version"])
    seqs, batched = case["max_num_seqs"], case["max_num_batched_tokens"]
    bar = r"\): 100%\|[^|\n]*\| ?(\d+)/"
    assert capture_sizes(release, seqs, batched) == int(logged(name, "PIECEWISE" + bar))
    assert full_graph_sizes(release, seqs, batched) == int(logged(name, r"\(FULL" + bar))


@pytest.mark.parametrize(
    ("given", "named"),
    [
        (["--gpus", "h100", "--max-num-batched-tokens", "128"], "--max-num-batched-tokens"),
        (["--gpus", "a100", "--max-num-seqs", "4096"], "--max-num-seqs"),  # 2,048 by default
    ],
)
def test_vllm_refuses_fewer_batched_tokens_than_sequences(given: list[str], named: str) -> None:
    # SchedulerConfig.verify_max_model_len (vllm/config/scheduler.py of 0.13.0, 0.22.1, 0.28.0).
    out = CliRunner().invoke(app, ["batch", "llama3.1-8b", "--engine", "vllm", "--ctx", "8k",
                                   *given])
    assert out.exit_code == 2
    lines = out.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {named}: vLLM does not start")
    assert "Traceback" not in out.output


@pytest.mark.parametrize(("version", "fits", "estimate"), [("0.28", True, None),
                                                           ("0.29", False, 8176),
                                                           ("0.34", False, 8128)])
def test_from_0_29_the_fit_check_holds_back_the_null_block(
    version: str, fits: bool, estimate: int | None
) -> None:
    # Llama-3.1-8B's 8k request is 1 GiB of KV cache exactly (512 blocks of 16 x 32 layers x
    # 2 x 8 heads x 128 x 2 B at 0.28/0.29; 128 of 64 tokens at 0.34). 0.28.0 checks the whole
    # budget; from 0.29.0 check_enough_kv_cache_memory and get_kv_cache_configs take one block
    # off it first ("Reserve the null block BlockPool permanently holds back",
    # kv_cache_utils.py of 0.29.0, kv_cache_planning.py of 0.34.0), so the request is a block
    # short and the estimated length is one block less.
    out = CliRunner().invoke(app, ["batch", "llama3.1-8b", "--gpus", "h100", "--ctx", "8k",
                                   "--engine", "vllm", "--kv-memory", "1GiB", "--vllm-version",
                                   version, "-f", "json"])
    assert out.exit_code == (0 if fits else 1), out.output
    context = json.loads(out.stdout)["contexts"][0]
    assert context["fits"] is fits and context["estimated_max_model_len"] == estimate


def test_the_capture_sizes_release_by_release_off_the_default_grid() -> None:
    # _set_cudagraph_sizes (vllm/config/vllm.py): the batched tokens captured off the steps
    # from 0.25.0; the 10.x family's ceiling of 1024 from 0.28.0 (512 in 0.27.1); max_num_seqs
    # off the steps from 0.31.0 (not 0.30.0); FULL graphs at the sizes up to max_num_seqs.
    from kvcalc.engine.vllm import captured_graphs
    from kvcalc.engine.vllm_releases import full_graph_sizes

    b200 = (10, 0)
    assert (capture_sizes(vllm_release("0.27"), 1024, 16384, b200),
            full_graph_sizes(vllm_release("0.27"), 1024, 16384, b200)) == (51, 51)
    # 1, 2, 4, 31 steps of 8 and 49 of 16 from 256 to 1024.
    assert (capture_sizes(vllm_release("0.28"), 1024, 16384, b200),
            full_graph_sizes(vllm_release("0.33"), 1024, 16384, b200)) == (83, 83)
    assert capture_sizes(vllm_release("0.33"), 1024, 8192, (9, 0)) == 51
    assert capture_sizes(vllm_release("0.21"), 1024, 300) == 37  # up to 288
    assert capture_sizes(vllm_release("0.25"), 1024, 300) == 38  # and 300
    assert full_graph_sizes(vllm_release("0.30"), 100, 2048) == 15  # up to 96
    assert full_graph_sizes(vllm_release("0.31"), 100, 2048) == 16  # and 100
    # Llama 4's chunked-local layers support no FULL graph: PIECEWISE alone from 0.28.
    scout = registry_model("llama4-scout")
    assert captured_graphs(scout, vllm_release("0.27"), 1024, 8192) == 102
    assert captured_graphs(scout, vllm_release("0.28"), 1024, 8192) == 51


def test_the_help_states_the_releases_defaults() -> None:
    """--help states vLLM's defaults as the release table holds them: the releases, the
    memory share of each family that changed it, and vllm serve's batch defaults by device (a
    new row or a changed rule fails the help that still states the old one)."""
    from kvcalc.engine.inputs import all_inputs
    from kvcalc.engine.serving.vllm import VLLM
    from kvcalc.engine.vllm_releases import (
        DEFAULT_VERSION,
        LARGE_DEVICE_BYTES,
        LARGEST_DEVICE_BYTES,
        OLDEST_VERSION,
        RELEASES,
    )

    inputs = all_inputs()
    span = f"{OLDEST_VERSION}-{NEWEST_VERSION.rsplit('.', 1)[0]}"
    assert f"release, {span} [default: {DEFAULT_VERSION}]" in inputs["vllm_version"].help
    assert f"({span})" in VLLM.summary
    # Each family that changed the share, from the first: "0.9, 0.92 from 0.20, 1.0 from 0.34".
    shares, last = [], None
    for row in RELEASES:
        if row.gpu_memory_utilization != last:
            last = row.gpu_memory_utilization
            share = f"{float(last):.2f}".rstrip("0").rstrip(".") if last != 1 else "1.0"
            shares.append(share if not shares else f"{share} from {row.family}")
    assert f"vLLM: the release's, {', '.join(shares)}]" in inputs["gpu_util"].help
    # vllm serve's defaults on a large GPU, a small one and, from the release that added the
    # tier, the largest.
    newest = vllm_release(NEWEST_VERSION)
    large = serve_batch_defaults(newest, LARGE_DEVICE_BYTES, "h100")
    small = serve_batch_defaults(newest, LARGE_DEVICE_BYTES, "a100")
    gb10 = serve_batch_defaults(newest, LARGEST_DEVICE_BYTES, "gb10")
    largest = serve_batch_defaults(newest, LARGEST_DEVICE_BYTES, "b200")
    assert small == gb10 == serve_batch_defaults(newest, LARGE_DEVICE_BYTES - 1, "h100")
    tier = next(row.family for row in RELEASES if row.large_device_tier)
    under, most = LARGE_DEVICE_BYTES // GiB, LARGEST_DEVICE_BYTES // GiB
    floor = next(row.family for row in RELEASES if row.mm_item_batched_floor)
    vision = registry_model("gemma-4-26b-a4b").vision
    assert vision is not None and vision.prefix_lm
    gemma_item = vision.max_item_tokens
    assert (
        f"vLLM: vllm serve's for the GPU and release, {large.max_num_batched_tokens}; "
        f"{small.max_num_batched_tokens} on A100s, GB10 and GPUs under {under} GiB; "
        f"{largest.max_num_batched_tokens} on GPUs of {most} GiB or more from {tier}; at least "
        f"{gemma_item} for a Gemma 4 that is a multimodal prefix LM, from {floor}]"
    ) in inputs["max_num_batched_tokens"].help
    assert largest.max_num_seqs == large.max_num_seqs
    assert (
        f"release: {large.max_num_seqs}; {small.max_num_seqs} on A100s, GB10 and GPUs under "
        f"{under} GiB]"
    ) in inputs["max_num_seqs"].help


def used_to_set(name: str) -> bool:
    """Whether log ``name`` set a constant or a rule (its header's role), else held back."""
    return "role: USED TO SET" in (LOGS / name).read_text(encoding="utf-8")


def unified(name: str) -> bool:
    return parse_gpu_set(CASES[name]["gpus"]).accelerator.unified_memory


def summary(names: list[str]) -> tuple[int, float, float, int]:
    """(logs, median |error|, worst |error|, within 2%) from the GPU alone."""
    import statistics

    errors = [abs(gpu_alone_error(n)) for n in names]
    return len(errors), statistics.median(errors), max(errors), sum(e < 0.02 for e in errors)


def test_the_readme_table_is_the_logs_errors() -> None:
    """Each row of tests/fixtures/vllm_logs/README.md states kvcalc's token count from the GPU
    alone and its error as kvcalc computes them now, and every case has its row."""
    text = (LOGS / "README.md").read_text(encoding="utf-8")
    table = text.split("| kvcalc, GPU alone | error (GPU alone) |\n", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| (\S+\.log) \|(?:[^|]*\|){6} ([\d,]+) \| ([+-]\d+\.\d\d)%", table, re.M)
    assert sorted(name for name, _, _ in rows) == sorted(CASES)
    for name, tokens, error in rows:
        assert int(tokens.replace(",", "")) == start(name).kv_cache_size_tokens, name
        assert error == f"{gpu_alone_error(name):+.2%}"[:-1], name


def test_the_summaries_are_the_logs_errors() -> None:
    """The README's and docs/engines.md's figures over every log, recomputed, so a new log or
    a moved figure fails the prose still stating the old ones."""
    names = sorted(CASES)
    held = [n for n in names if not used_to_set(n)]
    off, on = [n for n in held if not unified(n)], [n for n in held if unified(n)]
    readme = " ".join((LOGS / "README.md").read_text(encoding="utf-8").split())
    n, median, worst, within = summary(names)
    assert (
        f"GPU alone, all {n} logs: median |error| {median:.1%} ({median:.2%}), worst "
        f"{worst:.1%}, {within} within 2%"
    ) in readme
    n, median, worst, within = summary(held)
    assert f"held back ({n}): median {median:.1%}, worst {worst:.1%}, {within} within 2%" in readme
    n, median, worst, within = summary(off)
    assert (
        f"(the {n} not on unified memory): median {median:.1%} ({median:.2%}), worst "
        f"{worst:.1%}, {within} within 2%"
    ) in readme
    n, median, worst, within = summary(on)
    assert (
        f"held back on unified memory ({n}): median {median:.1%}, worst {worst:.1%}, {within} "
        "within 2%"
    ) in readme
    engines = " ".join((Path(__file__).parent.parent / "docs" / "engines.md").read_text().split())
    n, median, _, within = summary(names)
    assert f"From the GPU alone, all {n} logs: median error {median:.1%}, {within} within 2%" in (
        engines
    )
    words = {2: "Two", 3: "Three", 4: "Four", 5: "Five", 6: "Six"}[len(names) - len(held)]
    assert f"{words} set a constant or a rule" in engines
    n, median, worst, _ = summary(off)
    assert (
        f"Of the {len(held)} held back, the {n} off unified memory: median {median:.1%}, worst "
        f"{worst:.1%}"
    ) in engines
    worst_on = max(on, key=lambda x: abs(gpu_alone_error(x)))
    below = [x for x in on if gpu_alone_error(x) < 0]
    assert (
        f"{len(on)} held back on a DGX Spark (GB10) miss by up to "
        f"{abs(gpu_alone_error(worst_on)):.0%} "
        f"({CASES[worst_on]['version'].rsplit('.', 1)[0]})"
    ) in engines
    if below:
        deepest = max(-gpu_alone_error(x) for x in below)
        words = {1: "one", 2: "two", 3: "three"}[len(below)]
        assert f"({words} 0.30 run" in engines
        assert f"below that bound, by up to {deepest:.1%}" in engines


def test_the_docs_state_the_releases_and_the_default() -> None:
    """The prose that names the releases vLLM is modelled for and the default one (docs/engines.md,
    calibrate's page) names vllm_releases' constants."""
    from kvcalc.engine.vllm_releases import DEFAULT_VERSION, OLDEST_VERSION

    root = Path(__file__).resolve().parents[1]

    def text(path: str) -> str:
        return " ".join((root / path).read_text().split())

    newest = NEWEST_VERSION.rsplit(".", 1)[0]
    stated = f"{OLDEST_VERSION} to {newest} (default {DEFAULT_VERSION}, the newest on the package"
    assert stated in text("docs/engines.md")
    calibrate = text("docs/commands/calibrate.md")
    assert f"`kvcalc/engine/vllm_releases.py`, {OLDEST_VERSION} to {newest}:" in calibrate
    assert f"compared under the newest's ({NEWEST_VERSION}; give `--release`)" in calibrate
