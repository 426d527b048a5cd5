"""Weights per GPU against vLLM 0.19.0's "Model loading took X GiB" on an H100.

The logged figures are the llm-d-planner accuracy runs (PR 205, accuracy/results/v0.19.0,
the runs summarised in shared/reference/vllm-kv-algorithm.md), and two gpt-oss TP 1 runs from
its docs/empirical-vllm-memory-results.md. Each run's log is in the PR's history
(accuracy/results/v0.19.0/*.log, commit d3121e0), "Model loading took X GiB". Each quantized
checkpoint is the registry architecture it was quantized from with the quantization_config its
repository ships (RedHat's compressed-tensors w8a8 / FP8-dynamic: per-channel scales, lm_head
ignored; its w4a16: GPTQ int4, group 128, symmetric). A failing tolerance shows the whole table
(log figure, kvcalc figure, error).
"""

from __future__ import annotations

import json
import statistics
import tempfile
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from kvcalc.engine.deployment import deployment
from kvcalc.engine.quant import MXFP4, CheckpointFormat
from kvcalc.engine.spec import ModelSpec
from kvcalc.engine.units import GiB
from kvcalc.engine.vllm import VLLMKVCache, vllm_inputs, vllm_kv_cache_for
from kvcalc.engine.weights import released_format, rotary_cache_bytes, weights_per_gpu
from kvcalc.registry.gpus import parse_gpu_set
from kvcalc.registry.hf.base import Where
from kvcalc.registry.hf.importer import load_hf_config
from kvcalc.registry.hf.quantization import checkpoint_format
from kvcalc.registry.load import RegistryError, resolve_model


def _compressed(kind: str) -> dict[str, Any]:
    weights = {"num_bits": 8, "type": kind, "strategy": "channel", "symmetric": True}
    return {
        "quant_method": "compressed-tensors",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}},
        "ignore": ["lm_head"],
    }


W8A8 = _compressed("int")
FP8_DYNAMIC = _compressed("float")
W4A16 = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": True}

#: mistralai/Mistral-Small-3.1-24B-Instruct-2503 config.json (Mistral3ForConditionalGeneration:
#: Pixtral vision tower, Mistral text model), as public copies reproduce it verbatim (a C++ test
#: fixture "kRealConfig", a diffusers text-encoder loader). Not a registry model: it is imported
#: the way a user's config.json is.
MISTRAL_SMALL_31: dict[str, Any] = {
    "architectures": ["Mistral3ForConditionalGeneration"],
    "image_token_index": 10,
    "model_type": "mistral3",
    "multimodal_projector_bias": False,
    "projector_hidden_act": "gelu",
    "spatial_merge_size": 2,
    "text_config": {
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 5120,
        "intermediate_size": 32768,
        "max_position_embeddings": 131072,
        "model_type": "mistral",
        "num_attention_heads": 32,
        "num_hidden_layers": 40,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-05,
        "rope_theta": 1000000000.0,
        "sliding_window": None,
        "vocab_size": 131072,
    },
    "torch_dtype": "bfloat16",
    "vision_config": {
        "head_dim": 64,
        "hidden_act": "silu",
        "hidden_size": 1024,
        "image_size": 1540,
        "intermediate_size": 4096,
        "model_type": "pixtral",
        "num_attention_heads": 16,
        "num_channels": 3,
        "num_hidden_layers": 24,
        "patch_size": 14,
        "rope_theta": 10000.0,
    },
    "vision_feature_layer": -1,
}
#: Imported configs by the name the tables use.
CONFIGS = {"mistral-small-3.1": MISTRAL_SMALL_31}


@cache  # specs are frozen: every row of a model shares one
def model_spec(model: str) -> ModelSpec:
    """A registry model, or one of :data:`CONFIGS` imported as its config.json."""
    if model not in CONFIGS:
        return resolve_model(model)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.json"
        path.write_text(json.dumps(CONFIGS[model]))
        return load_hf_config(path)


#: (registry model, quantization_config, vLLM --dtype, tp, logged GiB)
RUNS: list[tuple[str, dict[str, Any] | None, str, int, float]] = [
    ("llama3.1-8b", None, "bf16", 1, 14.99),
    ("llama3.1-8b", None, "bf16", 2, 7.51),
    ("llama3.1-8b", None, "bf16", 4, 3.77),
    ("qwen2.5-7b", None, "bf16", 1, 14.25),
    ("qwen2.5-7b", None, "bf16", 2, 7.12),
    ("qwen2.5-7b", None, "bf16", 4, 3.55),
    ("qwen3-8b", None, "bf16", 1, 15.27),
    ("mixtral-8x7b", None, "bf16", 2, 43.51),
    ("qwen2.5-72b", None, "bf16", 2, 67.80),
    ("deepseek-v2-lite", None, "bf16", 1, 29.43),
    ("gemma2-9b", None, "bf16", 1, 17.22),
    ("gemma2-27b", None, "bf16", 1, 50.72),
    ("llama3.1-8b", W8A8, "fp16", 1, 8.49),
    ("llama3.1-8b", W4A16, "fp16", 1, 5.38),
    ("llama3.1-70b", FP8_DYNAMIC, "bf16", 2, 33.88),  # Llama-3.3-70B: the 3.1 architecture
    ("llama3.1-70b", FP8_DYNAMIC, "bf16", 4, 16.96),
    ("llama3.1-70b", W8A8, "bf16", 2, 33.88),
    ("qwen2.5-7b", FP8_DYNAMIC, "bf16", 1, 8.14),
    ("qwen2.5-7b", W8A8, "bf16", 1, 8.14),
    ("qwen3-30b-a3b", None, "bf16", 1, 56.88),
    ("gemma2-2b", None, "bf16", 1, 4.90),
    ("phi-4", None, "bf16", 1, 27.39),
    # Multimodal: the vision tower and projector, and the RoPE tables (Gemma-3's global table
    # spans 8 x 131,072 positions; Llama-4-Scout's 10,485,760).
    ("gemma3-4b", None, "bf16", 1, 8.58),
    ("gemma3-12b", None, "bf16", 1, 23.31),
    ("gemma3-27b", None, "bf16", 1, 51.45),
    ("llama4-scout", None, "bf16", 4, 53.12),
    ("mistral-small-3.1", None, "bf16", 1, 44.76),  # Pixtral tower and projector
    ("mistral-small-3.1", W8A8, "bf16", 1, 24.07),  # RedHatAI's w8a8: the tower stays bf16
    ("mistral-small-3.1", W8A8, "bf16", 2, 12.11),
    # MXFP4 experts as released (the registry's weights:), padded as vLLM loads them.
    ("gpt-oss-20b", None, "bf16", 2, 7.01),
    # llm-d-planner docs/empirical-vllm-memory-results.md (H100, vLLM release not stated).
    ("gpt-oss-20b", None, "bf16", 1, 13.47),
    ("gpt-oss-120b", None, "bf16", 1, 64.38),
]


def quantized_spec(model: str, quant: dict[str, Any] | None, dtype: str) -> ModelSpec:
    """The spec a vLLM run loads: the model at the run's --dtype, in the format of its
    checkpoint's quantization_config when it has one."""
    spec = replace(model_spec(model), default_dtype=dtype)
    if quant is not None:
        spec = replace(spec, checkpoint=checkpoint_format(Where(Path(model)), quant, dtype))
    return spec


def kvcalc_gib(spec: ModelSpec, tp: int) -> float:
    (stage,) = weights_per_gpu(spec, released_format(spec), tp)
    return stage.bytes_per_gpu / GiB


def test_weights_per_gpu_match_vllm_model_loading() -> None:
    errors = []
    table = [f"{'model':16} {'quantization':20} tp  {'log GiB':>8} {'kvcalc':>8} {'error':>7}"]
    for model, quant, dtype, tp, logged in RUNS:
        spec = quantized_spec(model, quant, dtype)
        ours = kvcalc_gib(spec, tp)
        error = (ours - logged) / logged
        errors.append(abs(error))
        method = quant["quant_method"] if quant else released_format(spec).name
        table.append(f"{model:16} {method:20} {tp:2}  {logged:8.2f} {ours:8.2f} {error:+7.2%}")
    shown = "\n".join(table)  # the whole table whenever a tolerance fails
    assert max(errors) < 0.04, shown
    assert statistics.median(errors) < 0.01, shown


def test_the_mistral_small_3_1_entry_is_its_config_json() -> None:
    # The registry entry (mistral-small-3.1-24b) describes the checkpoint whose config.json the
    # vLLM runs above import: the same text layers, tower and weights per GPU.
    imported = model_spec("mistral-small-3.1")
    registry = resolve_model("mistralai/Mistral-Small-3.1-24B-Instruct-2503")
    assert registry.vision == imported.vision
    assert registry.max_context == imported.max_context == 131_072
    fields = ("num_layers", "hidden_size", "vocab_size", "tied_embeddings", "mixer_pattern")
    assert [getattr(registry, f) for f in fields] == [getattr(imported, f) for f in fields]
    for tp in (1, 2):
        assert weights_per_gpu(registry, released_format(registry), tp) == weights_per_gpu(
            imported, released_format(imported), tp
        )


def test_mxfp4_experts_are_padded_as_vllm_loads_them() -> None:
    # gpt-oss-20b at TP 2: each shard's 1440 intermediate rows padded to 1536 and the hidden
    # 2880 to 3072 (vLLM mxfp4.py). Per layer, 32 experts of gate/up [3072, 3072] and down
    # [3072, 1536] at 4 bits plus one byte of scale per 32: 32 x (3072 x 1536 + 3072 x 96
    # + 3072 x 768 + 3072 x 48) = 240,648,192 B, x 24 layers = 5,775,556,608 B; unpadded
    # 32 x (2880 x 1440 + 2880 x 90 + 2880 x 720 + 2880 x 45) x 24 = 5,076,172,800 B.
    spec = resolve_model("gpt-oss-20b")
    (padded,) = weights_per_gpu(spec, released_format(spec), 2)
    (shipped,) = weights_per_gpu(spec, _unpadded(spec), 2)
    assert padded.bytes_per_gpu - shipped.bytes_per_gpu == 5_775_556_608 - 5_076_172_800
    assert padded.params_per_gpu == shipped.params_per_gpu  # padding is memory, not parameters


def _unpadded(spec: ModelSpec) -> CheckpointFormat:
    fmt = released_format(spec)
    return replace(fmt, experts=replace(MXFP4, expert_alignment=None))


def test_rope_tables_are_loaded_with_the_weights() -> None:
    # Llama-4-Scout: one table of 10,485,760 positions x 128 dims in bf16 = 2.5 GiB per GPU,
    # the gap between its weights and vLLM's "Model loading took 53.12 GiB" at TP 4.
    assert rotary_cache_bytes(resolve_model("llama4-scout")) == 10_485_760 * 128 * 2
    # Gemma-3-27B: local (131,072) and globally scaled (8 x 131,072) tables of 128 dims.
    assert rotary_cache_bytes(resolve_model("gemma3-27b")) == 9 * 131_072 * 128 * 2
    # DeepSeek-V3: MLA's 64-wide rope key over 163,840 positions.
    assert rotary_cache_bytes(resolve_model("deepseek-v3")) == 163_840 * 64 * 2


def test_an_unknown_quant_method_is_refused() -> None:
    with pytest.raises(RegistryError, match="unsupported quant_method 'hqq'"):
        checkpoint_format(Where(Path("config.json")), {"quant_method": "hqq"}, "bf16")


def test_fp8_block_scales_depend_on_both_dimensions() -> None:
    fmt = checkpoint_format(
        Where(Path("config.json")),
        {"quant_method": "fp8", "weight_block_size": [128, 128]},
        "bf16",
    )
    assert fmt is not None
    # A 7168 x 2048 matrix: 56 x 16 blocks of one fp32 scale; 129 rows need a second row.
    assert fmt.layers.matrix_bits(7168, 2048) == 7168 * 2048 * 8 + 56 * 16 * 32
    assert fmt.layers.matrix_bits(129, 128) == 129 * 128 * 8 + 2 * 32


def test_ignored_modules_stay_at_the_model_dtype() -> None:
    config = W8A8 | {"ignore": ["lm_head", "re:.*self_attn.*"]}
    fmt = checkpoint_format(Where(Path("config.json")), config, "bf16")
    assert fmt is not None
    assert fmt.format_for("mixer") == fmt.other
    assert fmt.format_for("mlp").name == "int8-channel"


# --------------------------------------------------------------------------------------------
# End to end: the KV cache vLLM sizes from an H100's memory, no figure taken from the log.

FP8_RUNTIME = {"quant_method": "fp8"}  # --quantization fp8: per-tensor FP8 weights on load

@dataclass(frozen=True)
class Run:
    """One vLLM 0.19.0 start-up on H100 80GB: the log (llm-d-planner
    accuracy/results/v0.19.0/<log>.log, PR 205, commit d3121e0), the registry architecture and
    the quantization_config of the checkpoint served, the engine options, and the logged
    "GPU KV cache size" in tokens. Defaults are the runs' own: --gpu-memory-utilization 0.95,
    --max-num-batched-tokens 8192, --max-num-seqs 1024."""

    log: str
    model: str
    logged_tokens: int
    tp: int = 1
    pp: int = 1
    quant: dict[str, Any] | None = None
    dtype: str = "bf16"
    kv: str | None = None
    max_model_len: int = 8192
    util: Fraction = Fraction(95, 100)


BLOCK_RUNS = [
    Run("meta-llama-llama-3-1-8b---h100-80gb--tp1pp1dp1--8192", "llama3.1-8b", 476_016),
    Run(
        "meta-llama-llama-3-1-8b---h100-80gb--tp1pp1dp1--2048",
        "llama3.1-8b",
        476_016,
        max_model_len=2048,
    ),
    Run(
        "meta-llama-llama-3-1-8b--h100-80gb--tp1pp1dp1--32768",
        "llama3.1-8b",
        476_016,
        max_model_len=32768,
    ),
    Run("meta-llama-llama-3-1-8b---h100-80gb--tp2pp1dp1--8192", "llama3.1-8b", 1_044_688, tp=2),
    Run("meta-llama-llama-3-1-8b---h100-80gb--tp4pp1dp1--8192", "llama3.1-8b", 2_209_792, tp=4),
    Run("meta-llama-llama-3-1-8b---h100-80gb--tp1pp2dp1--8192", "llama3.1-8b", 1_075_312, pp=2),
    Run("meta-llama-llama-3-1-8b---h100-80gb--tp1pp4dp1--8192", "llama3.1-8b", 2_257_264, pp=4),
    Run("meta-llama---h100-80gb--tp1pp1dp1--8192-dtbf16-kvfp8", "llama3.1-8b", 952_032, kv="fp8"),
    Run(
        "meta-llama-llama-3--h100-80gb--tp1pp1dp1--8192-dtf32",
        "llama3.1-8b",
        175_296,
        dtype="fp32",
    ),
    Run(
        "meta-llama-llama-3---h100-80gb--tp1pp1dp1--8192-qfp8",
        "llama3.1-8b",
        529_248,
        quant=FP8_RUNTIME,
    ),
    Run(
        "w8a8-redhatai-llam--h100-80gb--tp1pp1dp1--8192-dtf16",
        "llama3.1-8b",
        529_200,
        quant=W8A8,
        dtype="fp16",
    ),
    Run(
        "w4a16-redhatai-lla--h100-80gb--tp1pp1dp1--8192-dtf16",
        "llama3.1-8b",
        554_704,
        quant=W4A16,
        dtype="fp16",
    ),
    Run("qwen-qwen2-5-7b-instruct--h100-80gb--tp1pp1dp1--8192", "qwen2.5-7b", 1_096_000),
    Run("qwen-qwen2-5-7b-instruct--h100-80gb--tp2pp1dp1--8192", "qwen2.5-7b", 2_390_592, tp=2),
    Run("qwen-qwen2-5-7b-instruct--h100-80gb--tp4pp1dp1--8192", "qwen2.5-7b", 5_043_280, tp=4),
    Run("qwen-qwen2---h100-80gb--tp1pp1dp1--8192-dtbf16-kvfp8", "qwen2.5-7b", 2_192_000, kv="fp8"),
    Run(
        "fp8dyn-redhatai-qwen2-5---h100-80gb--tp1pp1dp1--8192",
        "qwen2.5-7b",
        1_210_304,
        quant=FP8_DYNAMIC,
    ),
    Run(
        "w8a8-redhatai-qwen2-5-7b--h100-80gb--tp1pp1dp1--8192",
        "qwen2.5-7b",
        1_210_272,
        quant=W8A8,
    ),
    Run("qwen-qwen3-8b--h100-80gb--tp1pp1dp1--8192", "qwen3-8b", 418_688),
    Run("qwen-qwen3-30b-a3b--h100-80gb--tp1pp1dp1--8192", "qwen3-30b-a3b", 168_288),
    Run("qwen-qwen2-5-72b-instruc--h100-80gb--tp2pp1dp1--8192", "qwen2.5-72b", 19_920, tp=2),
    # Kimi-Dev-72B is a Qwen2.5-72B fine-tune: the same architecture.
    Run("moonshotai-kimi-dev-72b--h100-80gb--tp2pp1dp1--8192", "qwen2.5-72b", 19_776, tp=2),
    Run("moonshotai-kimi-dev-72b--h100-80gb--tp4pp1dp1--8192", "qwen2.5-72b", 481_296, tp=4),
    Run(
        "fp8dyn-llama-3-3-70b--h100-80gb--tp2pp1dp1--8192",
        "llama3.3-70b",
        244_304,
        tp=2,
        quant=FP8_DYNAMIC,
    ),
    Run(
        "fp8dyn-llama-3-3-70b--h100-80gb--tp4pp1dp1--8192",
        "llama3.3-70b",
        708_992,
        tp=4,
        quant=FP8_DYNAMIC,
    ),
    Run(
        "redhatai-llama-3-3-70b-i--h100-80gb--tp2pp1dp1--8192",
        "llama3.3-70b",
        244_304,
        tp=2,
        quant=W8A8,
    ),
    Run("mistralai-mixtral-8x7b-i--h100-80gb--tp2pp1dp1--8192", "mixtral-8x7b", 465_936, tp=2),
    Run("deepseek-ai-deepseek-v2---h100-80gb--tp1pp1dp1--8192", "deepseek-v2-lite", 1_505_552),
    Run("google-gemma-2-2b-it--h100-80gb--tp1pp1dp1--8192", "gemma2-2b", 670_160),
    Run("google-gemma-2-9b-it--h100-80gb--tp1pp1dp1--8192", "gemma2-9b", 168_880),
    Run("google-gemma-2-27b-it--h100-80gb--tp1pp1dp1--8192", "gemma2-27b", 58_672),
    Run("google-gemma-3-4b-it--h100-80gb--tp1pp1dp1--8192", "gemma3-4b", 468_144),
    Run("google-gemma-3-12b-it--h100-80gb--tp1pp1dp1--8192", "gemma3-12b", 130_304),
    Run("google-gemma-3-27b-it--h100-80gb--tp1pp1dp1--8192", "gemma3-27b", 36_560),
    Run("microsoft-phi-4--h100-80gb--tp1pp1dp1--8192", "phi-4", 241_568),
    # its sampler warm-up ran out of memory at 0.95
    Run(
        "openai-gpt-oss-20b--h100-80gb--tp2pp1dp1--8192",
        "gpt-oss-20b",
        2_591_776,
        tp=2,
        util=Fraction(90, 100),
    ),
    Run("meta-llama-llama-4-scout--h100-80gb--tp4pp1dp1--8192", "llama4-scout", 365_968, tp=4),
    Run("mistralai-mistral-small---h100-80gb--tp1pp1dp1--8192", "mistral-small-3.1", 184_752),
    Run(
        "w8a8-mistral-small-24b--h100-80gb--tp1pp1dp1--8192",
        "mistral-small-3.1",
        319_344,
        quant=W8A8,
    ),
    Run(
        "w8a8-mistral-small-24b--h100-80gb--tp2pp1dp1--8192",
        "mistral-small-3.1",
        773_584,
        tp=2,
        quant=W8A8,
    ),
]


def kvcalc_tokens(run: Run) -> int:
    """kvcalc's "GPU KV cache size" for the run: weights, profile and blocks all estimated."""
    spec = quantized_spec(run.model, run.quant, run.dtype)
    gpus = parse_gpu_set(f"{run.tp * run.pp}xh100-sxm")
    dep = deployment(spec, gpus, tp=run.tp, pp=run.pp, kv_dtype=run.kv, gpu_util=run.util)
    # The runs are vLLM 0.19.0 start-ups: that release's rules.
    result = vllm_kv_cache_for(dep, run.max_model_len, vllm_inputs(dep, "0.19.0"))
    assert isinstance(result, VLLMKVCache), (run.log, result)
    return result.kv_cache_size_tokens


def test_kv_cache_size_matches_vllm_end_to_end() -> None:
    errors = []
    table = [f"{'log':56} {'log tokens':>10} {'kvcalc':>10} {'error':>7}"]
    for run in BLOCK_RUNS:
        ours = kvcalc_tokens(run)
        error = (ours - run.logged_tokens) / run.logged_tokens
        errors.append(abs(error))
        table.append(f"{run.log:56} {run.logged_tokens:>10,} {ours:>10,} {error:+7.2%}")
    shown = "\n".join(table)  # the whole table whenever a tolerance fails
    assert max(errors) < 0.05, shown
    assert statistics.median(errors) < 0.01, shown
