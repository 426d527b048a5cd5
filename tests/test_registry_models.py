"""The model registry: every required model is present and valid, and its KV cache matches the
reference values.

Golden figures are written as arithmetic from the reference (model-configs.yaml and the seed
texts), not computed by the code under test: for attention,
2 (K and V) x layers x kv_heads x head_dim x 2 bytes (bf16); for MLA,
(kv_lora_rank + qk_rope_head_dim) x layers x 2 bytes (seed 004); DeepSeek-V3.2's indexer adds
index_head_dim fp8 values and one fp32 scale per 128 of them per layer (model-configs-2025.yaml).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.engine.kv import kv_bytes_per_sequence, kv_bytes_per_token, kv_size
from kvcalc.engine.spec import ModelSpec
from kvcalc.engine.units import GiB, dtype
from kvcalc.registry.load import check_models, find_model, load_model_file, model_paths
from kvcalc.registry.schema import ModelFile

BF16 = dtype("bf16")
K128 = 131_072  # "128k" context, 2^17 tokens

REQUIRED = {
    "llama2-7b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3.1-8b", "llama3.1-70b",
    "llama3.1-405b", "llama4-scout", "llama4-maverick", "mistral-7b-v0.1", "mistral-small-24b",
    "mixtral-8x7b", "mixtral-8x22b", "qwen2.5-7b", "qwen2.5-72b", "qwen3-8b", "qwen3-32b",
    "qwen3-235b-a22b", "qwen3-next-80b-a3b", "deepseek-v2", "deepseek-v2-lite", "deepseek-v3",
    "deepseek-r1", "kimi-k2", "gemma2-9b", "gemma2-27b", "gemma3-27b", "gpt-oss-20b",
    "gpt-oss-120b", "phi3-mini", "falcon-7b", "falcon-40b", "jamba-v0.1", "minimax-text-01",
    "glm-4.5", "command-r",
}  # fmt: skip

# Bytes one token adds to a sequence's cache at bf16, before any window fills.
KV_BYTES_PER_TOKEN = {
    "llama2-7b": 2 * 32 * 32 * 128 * 2,  # MHA
    "llama2-70b": 2 * 80 * 8 * 128 * 2,
    "llama3-8b": 2 * 32 * 8 * 128 * 2,
    "llama3-70b": 2 * 80 * 8 * 128 * 2,
    "llama3.1-8b": 2 * 32 * 8 * 128 * 2,
    "llama3.1-70b": 2 * 80 * 8 * 128 * 2,
    "llama3.1-405b": 2 * 126 * 8 * 128 * 2,
    "llama4-scout": 2 * 48 * 8 * 128 * 2,  # 36 chunked + 12 full layers
    "llama4-maverick": 2 * 48 * 8 * 128 * 2,
    "mistral-7b-v0.1": 2 * 32 * 8 * 128 * 2,
    "mistral-small-24b": 2 * 40 * 8 * 128 * 2,  # explicit head_dim 128, not 5120 / 32
    "mixtral-8x7b": 2 * 32 * 8 * 128 * 2,
    "mixtral-8x22b": 2 * 56 * 8 * 128 * 2,
    "qwen2.5-7b": 2 * 28 * 4 * 128 * 2,
    "qwen2.5-72b": 2 * 80 * 8 * 128 * 2,
    "qwen3-8b": 2 * 36 * 8 * 128 * 2,
    "qwen3-32b": 2 * 64 * 8 * 128 * 2,
    "qwen3-235b-a22b": 2 * 94 * 4 * 128 * 2,
    "qwen3-next-80b-a3b": 2 * 12 * 2 * 256 * 2,  # only the 12 gated-attention layers grow
    "deepseek-v2": (512 + 64) * 60 * 2,
    "deepseek-v2-lite": (512 + 64) * 27 * 2,
    "deepseek-v3": (512 + 64) * 61 * 2,
    "deepseek-r1": (512 + 64) * 61 * 2,
    "kimi-k2": (512 + 64) * 61 * 2,
    "gemma2-9b": 2 * 42 * 8 * 256 * 2,  # explicit head_dim 256
    "gemma2-27b": 2 * 46 * 16 * 128 * 2,
    "gemma3-27b": 2 * 62 * 16 * 128 * 2,
    "gpt-oss-20b": 2 * 24 * 8 * 64 * 2,
    "gpt-oss-120b": 2 * 36 * 8 * 64 * 2,
    "phi3-mini": 2 * 32 * 32 * 96 * 2,
    "falcon-7b": 2 * 32 * 1 * 64 * 2,  # MQA
    "falcon-40b": 2 * 60 * 8 * 64 * 2,
    "jamba-v0.1": 2 * 4 * 8 * 128 * 2,  # 4 attention layers; Mamba layers hold a fixed state
    "minimax-text-01": 2 * 10 * 8 * 128 * 2,  # 10 softmax layers; lightning layers hold a state
    "minimax-m1": 2 * 10 * 8 * 128 * 2,
    "glm-4.5": 2 * 92 * 8 * 128 * 2,
    "command-r": 2 * 40 * 64 * 128 * 2,  # MHA
    # MLA latent + RoPE key at bf16, plus the indexer's 128 fp8 keys and one fp32 scale
    "deepseek-v3.2-exp": (512 + 64) * 61 * 2 + 61 * (128 * 1 + 4),
    "granite-4.0-h-small": 2 * 4 * 8 * 128 * 2,  # 4 attention layers; 36 Mamba-2 hold a state
    "granite-4.0-h-tiny": 2 * 4 * 4 * 128 * 2,
    "granite-4.0-h-micro": 2 * 4 * 8 * 64 * 2,  # head_dim 2048 / 32
}

# Bytes of one 128k-token sequence at bf16 for models with windows, chunks or fixed states.
# Full layers hold all 131,072 tokens, windowed layers their window, chunked layers one chunk.
# Mamba state: d_inner x (d_conv - 1) conv + d_inner x d_state SSM (vLLM MambaSpec).
# Gated DeltaNet: v_heads x k_dim x v_dim + (2 x k_heads x k_dim + v_heads x v_dim) x (kernel - 1).
# Lightning: heads x head_dim x head_dim.
# Mamba-2: (n_heads x head_dim + 2 x n_groups x d_state) x (d_conv - 1) conv + n_heads x head_dim
# x d_state SSM (vLLM mamba2_state_shape).
KV_BYTES_AT_128K = {
    "llama4-scout": 2 * 12 * 8 * 128 * 2 * K128 + 2 * 36 * 8 * 128 * 2 * 8192,
    "llama4-maverick": 2 * 12 * 8 * 128 * 2 * K128 + 2 * 36 * 8 * 128 * 2 * 8192,
    "mistral-7b-v0.1": 2 * 32 * 8 * 128 * 2 * 4096,
    "qwen3-next-80b-a3b": 2 * 12 * 2 * 256 * 2 * K128
    + 36 * (32 * 128 * 128 + (2 * 16 * 128 + 32 * 128) * (4 - 1)) * 2,
    "gemma2-9b": 2 * 21 * 8 * 256 * 2 * K128 + 2 * 21 * 8 * 256 * 2 * 4096,
    "gemma2-27b": 2 * 23 * 16 * 128 * 2 * K128 + 2 * 23 * 16 * 128 * 2 * 4096,
    "gemma3-27b": 2 * 10 * 16 * 128 * 2 * K128 + 2 * 52 * 16 * 128 * 2 * 1024,
    "gpt-oss-20b": 2 * 12 * 8 * 64 * 2 * K128 + 2 * 12 * 8 * 64 * 2 * 128,
    "gpt-oss-120b": 2 * 18 * 8 * 64 * 2 * K128 + 2 * 18 * 8 * 64 * 2 * 128,
    "phi3-mini": 2 * 32 * 32 * 96 * 2 * 2047,
    "jamba-v0.1": 2 * 4 * 8 * 128 * 2 * K128 + 28 * (8192 * (4 - 1) + 8192 * 16) * 2,
    "minimax-text-01": 2 * 10 * 8 * 128 * 2 * K128 + 70 * 64 * 128 * 128 * 2,
    "minimax-m1": 2 * 10 * 8 * 128 * 2 * K128 + 70 * 64 * 128 * 128 * 2,
    "granite-4.0-h-small": 2 * 4 * 8 * 128 * 2 * K128
    + 36 * ((128 * 64 + 2 * 1 * 128) * (4 - 1) + 128 * 64 * 128) * 2,
    "granite-4.0-h-tiny": 2 * 4 * 4 * 128 * 2 * K128
    + 36 * ((48 * 64 + 2 * 1 * 128) * (4 - 1) + 48 * 64 * 128) * 2,
    "granite-4.0-h-micro": 2 * 4 * 8 * 64 * 2 * K128
    + 36 * ((64 * 64 + 2 * 1 * 128) * (4 - 1) + 64 * 64 * 128) * 2,
}

# 0-based layers using the "special" mixer of each hybrid, from the reference's layer lists.
HYBRID_LAYERS = {
    "gemma3-27b": ("full", list(range(5, 62, 6))),  # 5, 11, ..., 59
    "gemma2-9b": ("full", list(range(1, 42, 2))),
    "gemma2-27b": ("full", list(range(1, 46, 2))),
    "gpt-oss-20b": ("sliding", list(range(0, 24, 2))),
    "gpt-oss-120b": ("sliding", list(range(0, 36, 2))),
    "llama4-scout": ("full", list(range(3, 48, 4))),
    "llama4-maverick": ("full", list(range(3, 48, 4))),
    "qwen3-next-80b-a3b": ("full", list(range(3, 48, 4))),
    "jamba-v0.1": ("full", [4, 12, 20, 28]),
    "minimax-text-01": ("full", list(range(7, 80, 8))),
    "minimax-m1": ("full", list(range(7, 80, 8))),
    "granite-4.0-h-small": ("full", [5, 15, 25, 35]),
    "granite-4.0-h-tiny": ("full", [5, 15, 25, 35]),
    "granite-4.0-h-micro": ("full", [5, 15, 25, 35]),
}

# Layers whose feed-forward block is MoE, for models where some layers are dense.
MOE_LAYERS = {
    "deepseek-v3": list(range(3, 61)),
    "deepseek-r1": list(range(3, 61)),
    "deepseek-v2": list(range(1, 60)),
    "deepseek-v2-lite": list(range(1, 27)),
    "kimi-k2": list(range(1, 61)),
    "glm-4.5": list(range(3, 92)),
    "llama4-maverick": list(range(1, 48, 2)),
    "jamba-v0.1": list(range(1, 32, 2)),
    "deepseek-v3.2-exp": list(range(3, 61)),
}

# Verification level per model-configs.md ("How well each model is verified"). Llama-3.1-8B and
# -70B have no entry there; their shapes are carried over from Llama-3, hence "secondary".
VERIFICATION = {
    "official_verbatim": {
        "llama3.1-405b", "llama4-scout", "llama4-maverick", "mixtral-8x7b", "mixtral-8x22b",
        "qwen2.5-7b", "qwen3-8b", "qwen3-32b", "qwen3-235b-a22b", "deepseek-v2-lite",
        "deepseek-v3", "deepseek-r1", "kimi-k2", "gpt-oss-20b", "gpt-oss-120b", "falcon-40b",
        "jamba-v0.1", "minimax-m1", "minimax-text-01",
    },
    "official_partial": {"deepseek-v2", "qwen3-next-80b-a3b", "deepseek-v3.2-exp"},
    "derived_copies": {
        "llama2-7b", "llama2-70b", "llama3-8b", "mistral-7b-v0.1", "mistral-small-24b",
        "qwen2.5-72b", "gemma2-9b", "gemma2-27b", "gemma3-27b", "phi3-mini", "falcon-7b",
        "glm-4.5", "command-r",
    },
    "secondary": {
        "llama3-70b", "llama3.1-8b", "llama3.1-70b",
        # model-configs-2025.yaml: Granite-4.0-H-Small is secondary; Tiny and Micro were sourced
        # the same way (copies of the config.json, not the file).
        "granite-4.0-h-small", "granite-4.0-h-tiny", "granite-4.0-h-micro",
    },
}  # fmt: skip

# Names people type, in the case they type them.
TYPED_NAMES = {
    "Llama3-70B": "llama3-70b",
    "meta-llama/Meta-Llama-3-70B": "llama3-70b",
    "LLAMA-3.1-8B": "llama3.1-8b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama3.1-8b",
    "meta-llama/Meta-Llama-3.1-70B": "llama3.1-70b",
    "DeepSeek-V3": "deepseek-v3",
    "deepseek-ai/DeepSeek-R1": "deepseek-r1",
    "Qwen/Qwen3-235B-A22B": "qwen3-235b-a22b",
    "qwen2.5-72B": "qwen2.5-72b",
    "openai/GPT-OSS-120B": "gpt-oss-120b",
    "google/gemma-3-27b-it": "gemma3-27b",
    "Gemma-2-9B": "gemma2-9b",
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mixtral-8x7b",
    "Kimi-K2": "kimi-k2",
    "ai21labs/Jamba-v0.1": "jamba-v0.1",
    "MiniMaxAI/MiniMax-Text-01": "minimax-text-01",
    "zai-org/GLM-4.5": "glm-4.5",
    "CohereForAI/c4ai-command-r-v01": "command-r",
    "Phi-3-Mini": "phi3-mini",
    "tiiuae/falcon-7b": "falcon-7b",
    "deepseek-ai/DeepSeek-V3.2-Exp": "deepseek-v3.2-exp",
    "IBM-Granite/Granite-4.0-H-Small": "granite-4.0-h-small",
}

MODEL_IDS = sorted(p.stem for p in model_paths())


@cache
def model_file(model_id: str) -> ModelFile:
    return load_model_file(_path(model_id))


@cache
def model_spec(model_id: str) -> ModelSpec:
    return model_file(model_id).to_spec()


def _path(model_id: str) -> Path:
    return next(p for p in model_paths() if p.stem == model_id)


# ---------------------------------------------------------------- presence and validity


def test_registry_checks_clean() -> None:
    assert check_models() == []


def test_every_required_model_is_present() -> None:
    assert sorted(REQUIRED - set(MODEL_IDS)) == []


def test_every_model_has_a_golden_kv_figure() -> None:
    assert set(KV_BYTES_PER_TOKEN) == set(MODEL_IDS)


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_file_loads_and_id_matches_file_name(model_id: str) -> None:
    model = load_model_file(_path(model_id))
    assert model.id == model_id


def test_names_are_unique_across_files() -> None:
    owners: dict[str, list[str]] = {}
    for model_id in MODEL_IDS:
        for name in {n.lower() for n in model_file(model_id).names()}:
            owners.setdefault(name, []).append(model_id)
    assert {name: ids for name, ids in owners.items() if len(ids) > 1} == {}


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_verification_level_is_the_references(model_id: str) -> None:
    expected = [level for level, ids in VERIFICATION.items() if model_id in ids]
    assert [model_file(model_id).verification] == expected


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_missing_parameter_counts_are_marked_unverified(model_id: str) -> None:
    model = model_file(model_id)
    if model.params.total is None:
        assert any(entry.startswith("params") for entry in model.unverified)
        assert "UNVERIFIED" in model.params.stated


# ---------------------------------------------------------------- name resolution


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_every_name_resolves_in_any_case(model_id: str) -> None:
    model = model_file(model_id)
    assert "/" in model.hf_repo
    assert any("/" not in alias for alias in model.aliases), "needs a short alias"
    for name in model.names():
        for typed in (name, name.lower(), name.upper(), name.swapcase()):
            assert find_model(typed).id == model_id


@pytest.mark.parametrize(("typed", "model_id"), sorted(TYPED_NAMES.items()))
def test_typed_names_resolve(typed: str, model_id: str) -> None:
    assert find_model(typed).id == model_id


# ---------------------------------------------------------------- KV cache: golden values


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_kv_bytes_per_token(model_id: str) -> None:
    assert kv_bytes_per_token(model_spec(model_id), BF16) == KV_BYTES_PER_TOKEN[model_id]


@pytest.mark.parametrize("model_id", sorted(KV_BYTES_AT_128K))
def test_kv_bytes_per_sequence_at_128k_windowed_and_state_models(model_id: str) -> None:
    assert kv_bytes_per_sequence(model_spec(model_id), K128, BF16) == KV_BYTES_AT_128K[model_id]


@pytest.mark.parametrize("model_id", sorted(set(MODEL_IDS) - set(KV_BYTES_AT_128K)))
def test_full_attention_models_grow_linearly(model_id: str) -> None:
    spec = model_spec(model_id)
    kinds = {spec.mixer_at(i).kind for i in range(spec.num_layers)}
    assert kinds <= {"full", "mla", "mla_indexed"}
    assert kv_bytes_per_sequence(spec, K128, BF16) == KV_BYTES_PER_TOKEN[model_id] * K128


@pytest.mark.parametrize(("model_id", "layers"), sorted(HYBRID_LAYERS.items()))
def test_hybrid_layer_positions(model_id: str, layers: tuple[str, list[int]]) -> None:
    kind, expected = layers
    spec = model_spec(model_id)
    assert [i for i in range(spec.num_layers) if spec.mixer_at(i).kind == kind] == expected


@pytest.mark.parametrize(("model_id", "expected"), sorted(MOE_LAYERS.items()))
def test_moe_layer_positions(model_id: str, expected: list[int]) -> None:
    spec = model_spec(model_id)
    assert spec.moe is not None
    assert [i for i in range(spec.num_layers) if spec.ffn_at(i) is spec.moe] == expected


def test_falcon_uses_a_plain_mlp() -> None:
    for model_id in ("falcon-7b", "falcon-40b"):
        mlp = model_spec(model_id).dense_mlp
        assert mlp is not None and not mlp.gated


# ---------------------------------------------------------------- seed figures


def test_seed_llama3_70b() -> None:
    spec = model_spec("llama3-70b")
    assert kv_bytes_per_token(spec, BF16) == 327_680  # 320 KiB
    assert kv_bytes_per_sequence(spec, 131_072, BF16) == 40 * GiB


def test_seed_llama3_8b() -> None:
    assert kv_bytes_per_token(model_spec("llama3-8b"), BF16) == 131_072


def test_seed_deepseek_v3() -> None:
    assert kv_bytes_per_token(model_spec("deepseek-v3"), BF16) == 70_272


@pytest.mark.parametrize(
    ("model_id", "window", "layers"),
    [
        ("gpt-oss-120b", 128, {"sliding": 18, "full": 18}),
        ("gemma3-27b", 1024, {"sliding": 52, "full": 10}),
    ],
)
def test_seed_windowed_layers_at_128k(model_id: str, window: int, layers: dict[str, int]) -> None:
    groups = kv_size(model_spec(model_id), K128, BF16).groups
    assert {g.kind: g.tokens_held for g in groups} == {"sliding": window, "full": K128}
    assert {g.kind: g.layers for g in groups} == layers


def test_seed_mistral_7b_is_flat_beyond_its_window() -> None:
    spec = model_spec("mistral-7b-v0.1")
    at_window = kv_bytes_per_sequence(spec, 4096, BF16)
    assert kv_bytes_per_sequence(spec, 4095, BF16) < at_window
    for context in (4097, 8192, 32_768, K128):
        assert kv_bytes_per_sequence(spec, context, BF16) == at_window


# ---------------------------------------------------------------- properties on real data


@settings(max_examples=200, deadline=None)
@given(
    model_id=st.sampled_from(MODEL_IDS),
    context=st.integers(min_value=1, max_value=1 << 22),
    extra=st.integers(min_value=0, max_value=1 << 16),
)
def test_sequence_bytes_grow_monotonically_and_never_exceed_full_attention(
    model_id: str, context: int, extra: int
) -> None:
    spec = model_spec(model_id)
    shorter = kv_bytes_per_sequence(spec, context, BF16)
    longer = kv_bytes_per_sequence(spec, context + extra, BF16)
    state = kv_bytes_per_sequence(spec, 1, BF16) - kv_bytes_per_token(spec, BF16)
    assert shorter <= longer
    assert shorter <= kv_bytes_per_token(spec, BF16) * context + state
