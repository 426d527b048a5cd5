"""Importing Hugging Face config.json files.

The fixtures under tests/fixtures/hf/<registry id>/config.json are written from
shared/reference/model-configs.yaml (model-configs-2025.yaml for MiniMax-M2 and GLM-4.6) with
the official key names and the sparseness of the real files; each must import to the same KV
cache as its hand-written registry entry.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from specs import registry_model, write_config
from test_weights import stated_tolerance

from kvcalc.engine import spec
from kvcalc.engine.kv import kv_bytes_per_sequence, kv_bytes_per_token
from kvcalc.engine.units import dtype
from kvcalc.engine.weights import param_counts, rotary_caches
from kvcalc.registry.hf import ADAPTERS, DEFAULTS, SUPPORTED_MODEL_TYPES, load_hf_config
from kvcalc.registry.load import RegistryError, resolve_model

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
BF16 = dtype("bf16")
CTX = 131_072

#: fixture folder -> registry id (the same name except for the old-format Falcon-7B copy).
REGISTRY_ID = {p.name: p.name for p in FIXTURES.iterdir() if (p / "config.json").is_file()}
REGISTRY_ID["falcon-7b-rw"] = "falcon-7b"


def fixture_data(name: str) -> dict[str, Any]:
    return fixture_of(FIXTURES / name)


def fixture_of(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "config.json").read_text(encoding="utf-8"))


def layers(model: spec.ModelSpec) -> list[spec.Mixer]:
    return [model.mixer_at(i) for i in range(model.num_layers)]


# ------------------------------------------------------------------ fixtures vs registry


def test_every_registry_family_has_a_fixture() -> None:
    wanted = {
        "llama3-70b", "llama3.1-405b", "llama4-scout", "llama4-maverick", "mistral-7b-v0.1",
        "mixtral-8x7b", "qwen2.5-7b", "qwen3-8b", "qwen3-235b-a22b", "qwen3-next-80b-a3b",
        "deepseek-v2-lite", "deepseek-v3", "kimi-k2", "gemma2-9b", "gemma3-27b", "gpt-oss-20b",
        "gpt-oss-120b", "phi3-mini", "falcon-7b", "falcon-40b", "jamba-v0.1",
        "deepseek-v3.2-exp", "granite-4.0-h-small", "granite-4.0-h-tiny", "granite-4.0-h-micro",
        "deepseek-v4-flash",
    }  # fmt: skip
    assert wanted <= set(REGISTRY_ID)


@pytest.mark.parametrize("folder", sorted(REGISTRY_ID))
def test_fixture_matches_registry_kv(folder: str) -> None:
    imported = load_hf_config(FIXTURES / folder)
    registry = registry_model(REGISTRY_ID[folder])
    assert kv_bytes_per_token(imported, BF16) == kv_bytes_per_token(registry, BF16)
    assert kv_bytes_per_sequence(imported, CTX, BF16) == kv_bytes_per_sequence(registry, CTX, BF16)
    # Stronger than the totals: the same mixer on every layer, the same model dtype and depth.
    assert layers(imported) == layers(registry)
    assert imported.default_dtype == registry.default_dtype


@pytest.mark.parametrize("folder", sorted(REGISTRY_ID))
def test_fixture_matches_registry_shape(folder: str) -> None:
    imported = load_hf_config(FIXTURES / folder)
    registry = registry_model(REGISTRY_ID[folder])
    assert (imported.hidden_size, imported.vocab_size) == (
        registry.hidden_size,
        registry.vocab_size,
    )
    moe_layers = [i for i in range(imported.num_layers) if imported.ffn_at(i) is imported.moe]
    registry_moe = [i for i in range(registry.num_layers) if registry.ffn_at(i) is registry.moe]
    assert moe_layers == registry_moe
    assert imported.moe == registry.moe


# Hand-derived from the reference values (model-configs.yaml), independent of the registry.
GOLDEN_BYTES_PER_TOKEN = {
    "llama3-70b": 2 * 80 * 8 * 128 * 2,  # seed 004: 320 KiB
    "deepseek-v3": 61 * (512 + 64) * 2,  # MLA latent + RoPE key, no factor 2
    "gemma3-27b": 2 * 62 * 16 * 128 * 2,  # defaults supply nothing here: heads are stated
    "falcon-7b": 2 * 32 * 1 * 64 * 2,  # MQA
    "falcon-7b-rw": 2 * 32 * 1 * 64 * 2,
    "falcon-40b": 2 * 60 * 8 * 64 * 2,  # 8 KV groups with new_decoder_architecture
    "jamba-v0.1": 2 * 4 * 8 * 128 * 2,  # attention on 4 of 32 layers
    "qwen3-next-80b-a3b": 2 * 12 * 2 * 256 * 2,  # gated attention on every 4th layer
    # MLA latent + RoPE key, plus the indexer's 128 fp8 keys and one fp32 scale
    "deepseek-v3.2-exp": 61 * ((512 + 64) * 2 + 128 + 4),
    "granite-4.0-h-small": 2 * 4 * 8 * 128 * 2,  # attention at layers 5, 15, 25, 35
    "granite-4.0-h-micro": 2 * 4 * 8 * 64 * 2,
    # DeepSeek-V4-Flash, bf16 rows of 512 values while the 128-token window fills: every layer's
    # row, plus ceil((1,024 + 132 indexer) / 4) on the 21 ratio-4 and ceil(1,024 / 128) on the
    # 20 ratio-128 layers of compress_ratios
    "deepseek-v4-flash": 43 * 1024 + 21 * 289 + 20 * 8,
}


@pytest.mark.parametrize("folder", sorted(GOLDEN_BYTES_PER_TOKEN))
def test_golden_bytes_per_token(folder: str) -> None:
    model = load_hf_config(FIXTURES / folder)
    assert kv_bytes_per_token(model, BF16) == GOLDEN_BYTES_PER_TOKEN[folder]


# ------------------------------------------------------------------ layer patterns and fields


def test_gemma3_sparse_text_config_takes_gemma3_text_defaults() -> None:
    model = load_hf_config(FIXTURES / "gemma3-27b")
    # Not in the file: vocab 262208, 131072 positions, 5 local : 1 global, tied embeddings.
    assert model.vocab_size == 262_208
    assert model.max_context == 131_072
    assert model.tied_embeddings is True
    globals_ = [i for i, m in enumerate(layers(model)) if m.kind == "full"]
    assert globals_ == list(range(5, 62, 6))
    assert {m.window for m in layers(model) if m.kind == "sliding"} == {1024}


def test_gemma3_text_config_without_heads_uses_class_defaults(tmp_path: Path) -> None:
    # Smaller Gemma-3 configs state no heads or head_dim: Gemma3TextConfig has 8, 4 and 256.
    data = {"model_type": "gemma3", "text_config": {"hidden_size": 2560, "num_hidden_layers": 34}}
    model = load_hf_config(write_config(tmp_path, data))
    attn = model.mixer_at(5)
    assert (attn.q_heads, attn.kv_heads, attn.head_dim_k) == (8, 4, 256)
    assert model.mixer_at(0).window == 4096  # the class default window


def test_qwen25_unused_window_is_no_window() -> None:
    model = load_hf_config(FIXTURES / "qwen2.5-7b")
    assert {m.kind for m in layers(model)} == {"full"}


def test_qwen2_window_applies_from_max_window_layers_when_enabled(tmp_path: Path) -> None:
    data = fixture_data("qwen2.5-7b") | {
        "use_sliding_window": True,
        "sliding_window": 4096,
        "max_window_layers": 20,
    }
    model = load_hf_config(write_config(tmp_path, data))
    assert [m.kind for m in layers(model)] == ["full"] * 20 + ["sliding"] * 8


def test_llama4_nope_layers_are_full_and_the_rest_chunked() -> None:
    model = load_hf_config(FIXTURES / "llama4-scout")
    full = [i for i, m in enumerate(layers(model)) if m.kind == "full"]
    assert full == list(range(3, 48, 4))
    assert {m.chunk for m in layers(model) if m.kind == "chunked"} == {8192}


def test_llama4_explicit_no_rope_layers(tmp_path: Path) -> None:
    data = fixture_data("llama4-scout")
    data["text_config"]["no_rope_layers"] = [0, 1] * 24  # 0 = NoPE = full attention
    model = load_hf_config(write_config(tmp_path, data))
    assert [m.kind for m in layers(model)][:4] == ["full", "chunked", "full", "chunked"]


def test_explicit_layer_types_win(tmp_path: Path) -> None:
    data = fixture_data("gemma2-9b") | {"layer_types": ["full_attention"] * 42}
    model = load_hf_config(write_config(tmp_path, data))
    assert {m.kind for m in layers(model)} == {"full"}


def test_mla_uncompressed_queries_and_first_dense_layers() -> None:
    lite = load_hf_config(FIXTURES / "deepseek-v2-lite")
    assert lite.mixer_at(0).q_lora_rank is None
    assert lite.ffn_at(0) is lite.dense_mlp and lite.ffn_at(1) is lite.moe
    v3 = load_hf_config(FIXTURES / "deepseek-v3")
    assert [v3.ffn_at(i) is v3.moe for i in range(4)] == [False, False, False, True]


def test_jamba_attention_and_moe_layers() -> None:
    model = load_hf_config(FIXTURES / "jamba-v0.1")
    assert [i for i, m in enumerate(layers(model)) if m.kind == "full"] == [4, 12, 20, 28]
    assert [i for i in range(8) if model.ffn_at(i) is model.moe] == [1, 3, 5, 7]
    mamba = model.mixer_at(0)
    assert (mamba.d_inner, mamba.d_state, mamba.d_conv, mamba.dt_rank) == (8192, 16, 4, 256)


def test_jamba_auto_dt_rank(tmp_path: Path) -> None:
    data = {k: v for k, v in fixture_data("jamba-v0.1").items() if k != "mamba_dt_rank"}
    model = load_hf_config(write_config(tmp_path, data))
    assert model.mixer_at(0).dt_rank == 4096 // 16  # JambaConfig "auto": ceil(hidden / 16)


def test_granite_layers_and_mamba2_shape() -> None:
    model = load_hf_config(FIXTURES / "granite-4.0-h-small")
    assert [i for i, m in enumerate(layers(model)) if m.kind == "full"] == [5, 15, 25, 35]
    assert model.mixer_at(0) == spec.Mamba2(
        n_heads=128, head_dim=64, n_groups=1, d_state=128, d_conv=4
    )
    assert model.moe == spec.MoE(72, 10, 768, shared_experts=1, shared_intermediate_size=1536)
    assert all(model.ffn_at(i) is model.moe for i in range(40))


def test_granite_without_routed_experts_is_dense_on_its_shared_mlp() -> None:
    model = load_hf_config(FIXTURES / "granite-4.0-h-micro")
    assert model.moe is None and model.dense_mlp == spec.DenseMLP(8192)


@pytest.mark.parametrize(
    ("key", "names"),
    [
        ("layer_types", ("linear_attention", "full_attention")),  # transformers 5 names
        ("layers_block_type", ("mamba", "attention")),  # the attribute_map alias
    ],
)
def test_granite_layer_type_spellings(tmp_path: Path, key: str, names: tuple[str, str]) -> None:
    data = fixture_data("granite-4.0-h-small")
    types = [names[1] if t == "attention" else names[0] for t in data.pop("layer_types")]
    model = load_hf_config(write_config(tmp_path, data | {key: types}))
    assert layers(model) == layers(load_hf_config(FIXTURES / "granite-4.0-h-small"))


def test_granite_defaults_auto_head_dim_and_all_mamba(tmp_path: Path) -> None:
    data = fixture_data("granite-4.0-h-small")
    del data["layer_types"], data["mamba_d_head"]
    model = load_hf_config(write_config(tmp_path, data))
    # No layer_types: every layer is Mamba-2; "auto" head dim: 2 x 4096 / 128 heads.
    assert {m.kind for m in layers(model)} == {"mamba2"}
    assert model.mixer_at(0).head_dim == 64


def test_deepseek_v32_indexer_keys_are_read_not_assumed(tmp_path: Path) -> None:
    model = load_hf_config(FIXTURES / "deepseek-v3.2-exp")
    mla = model.mixer_at(0)
    assert (mla.index_heads, mla.index_head_dim, mla.index_topk) == (64, 128, 2048)
    # A top-level config that leaves them out is no checkpoint's: refused, not sized with
    # DeepseekV32Config's defaults.
    data = {k: v for k, v in fixture_data("deepseek-v3.2-exp").items() if not k.startswith("index")}
    with pytest.raises(RegistryError, match=r"index_n_heads, index_head_dim, index_topk: missing"):
        load_hf_config(write_config(tmp_path, data))


def test_qwen3_moe_mlp_only_layers_prefix_becomes_dense(tmp_path: Path) -> None:
    data = fixture_data("qwen3-235b-a22b") | {"mlp_only_layers": [0, 1]}
    model = load_hf_config(write_config(tmp_path, data))
    assert [model.ffn_at(i) is model.moe for i in range(3)] == [False, False, True]
    assert model.dense_mlp == spec.DenseMLP(12288)


def test_irregular_moe_layers_are_refused(tmp_path: Path) -> None:
    data = fixture_data("qwen3-235b-a22b") | {"mlp_only_layers": [5, 17]}
    with pytest.raises(RegistryError, match=r"mlp_only_layers: .*not a regular pattern"):
        load_hf_config(write_config(tmp_path, data))


def test_falcon_multi_query_off_is_mha(tmp_path: Path) -> None:
    data = fixture_data("falcon-7b") | {"multi_query": False}
    assert load_hf_config(write_config(tmp_path, data)).mixer_at(0).kv_heads == 71


# ------------------------------------------------------------------ dtype, names, nesting


def test_quantization_config_does_not_change_kv_dtype(tmp_path: Path) -> None:
    v3 = load_hf_config(FIXTURES / "deepseek-v3")  # FP8 weights, torch_dtype bfloat16
    assert v3.default_dtype == "bf16"
    data = fixture_data("qwen3-8b") | {
        "torch_dtype": "float16",
        "quantization_config": {"quant_method": "fp8"},
    }
    assert load_hf_config(write_config(tmp_path, data)).default_dtype == "fp16"


def test_dtype_key_of_newer_transformers(tmp_path: Path) -> None:
    data = {k: v for k, v in fixture_data("qwen3-8b").items() if k != "torch_dtype"}
    data["dtype"] = "float32"
    assert load_hf_config(write_config(tmp_path, data)).default_dtype == "fp32"


def test_text_config_nesting_equals_the_flat_text_model(tmp_path: Path) -> None:
    nested = fixture_data("llama4-maverick")
    # Flat, the file states what the nested text_config leaves to Llama4TextConfig's default.
    flat = dict(nested["text_config"]) | {"no_rope_layer_interval": 4}
    wrapped = load_hf_config(FIXTURES / "llama4-maverick")
    assert layers(load_hf_config(write_config(tmp_path, flat))) == layers(wrapped)


def test_mistral3_wrapper_reads_its_mistral_text_config(tmp_path: Path) -> None:
    text = {
        "head_dim": 128,
        "hidden_size": 5120,
        "num_hidden_layers": 40,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "sliding_window": None,
    }
    data = {"model_type": "mistral3", "text_config": text, "torch_dtype": "bfloat16"}
    model = load_hf_config(write_config(tmp_path, data))
    assert kv_bytes_per_token(model, BF16) == 2 * 40 * 8 * 128 * 2
    assert model.vocab_size == DEFAULTS["mistral"]["vocab_size"]
    # Untied, as vLLM loads Mistral-Small-3.1 (its logged weights are the untied count).
    assert model.tied_embeddings is False


def test_ids_and_names(tmp_path: Path) -> None:
    assert load_hf_config(FIXTURES / "llama3.1-405b").name == "meta-llama/Llama-3.1-405B"
    data = fixture_data("qwen3-8b") | {"_name_or_path": "/data/checkpoints/run7"}
    model = load_hf_config(write_config(tmp_path, data, folder="My Qwen3_8B"))
    assert (model.id, model.name) == ("my-qwen3-8b", "My Qwen3_8B")
    other = tmp_path / "Custom.JSON"
    other.write_text(json.dumps(fixture_data("qwen3-8b")), encoding="utf-8")
    assert load_hf_config(other).id == "custom"


def test_resolve_model_takes_paths_and_names() -> None:
    by_folder = resolve_model(str(FIXTURES / "qwen3-8b"))
    by_file = resolve_model(str(FIXTURES / "qwen3-8b" / "config.json"))
    by_name = resolve_model("qwen3-8b")
    assert layers(by_folder) == layers(by_file) == layers(by_name)


# ------------------------------------------------------------------ errors: one line each


def one_line_error(path: Path) -> str:
    with pytest.raises(RegistryError) as info:
        load_hf_config(path)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_unknown_model_type_lists_the_supported_ones(tmp_path: Path) -> None:
    path = write_config(tmp_path, {"model_type": "bert", "hidden_size": 768})
    message = one_line_error(path)
    assert str(path) in message and "'bert'" in message
    assert all(t in message for t in SUPPORTED_MODEL_TYPES)


def test_missing_model_type(tmp_path: Path) -> None:
    path = write_config(tmp_path, {"hidden_size": 4096})
    assert "model_type: missing required field" in one_line_error(path)


def test_bad_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama",', encoding="utf-8")
    message = one_line_error(path)
    assert message.startswith(f"{path}: invalid JSON") and "line 1" in message


def test_not_an_object(tmp_path: Path) -> None:
    path = write_config(tmp_path, ["llama"])
    assert "expected a JSON object" in one_line_error(path)


def test_folder_without_config_json(tmp_path: Path) -> None:
    assert one_line_error(tmp_path) == f"{tmp_path}: no config.json in this folder"


def test_missing_json_path_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="file not found"):
        resolve_model(str(tmp_path / "nope.json"))


def test_wrapper_without_text_config(tmp_path: Path) -> None:
    path = write_config(tmp_path, {"model_type": "llama4"})
    assert "text_config: missing required field" in one_line_error(path)


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("num_hidden_layers", 0, "must be at least 1"),
        ("num_hidden_layers", 10**9, "must be at most 100,000"),
        ("num_key_value_heads", -8, "must be at least 1"),
        ("hidden_size", "4096", "must be an integer"),
        ("num_attention_heads", True, "must be an integer"),
        ("vocab_size", None, "not null"),
        ("tie_word_embeddings", "no", "must be true or false"),
        ("torch_dtype", "float8_e4m3fn", "unsupported dtype"),
        ("torch_dtype", ["bfloat16"], "unsupported dtype"),
    ],
)
def test_bad_field_names_file_and_field(tmp_path: Path, key: str, value: Any, problem: str) -> None:
    path = write_config(tmp_path, fixture_data("llama3-70b") | {key: value})
    message = one_line_error(path)
    assert message.startswith(f"{path}: {key}: ") and problem in message


def test_nested_field_errors_name_the_text_config(tmp_path: Path) -> None:
    data = fixture_data("gemma3-27b")
    data["text_config"]["sliding_window"] = 0
    assert "text_config.sliding_window: must be at least 1" in one_line_error(
        write_config(tmp_path, data)
    )


def test_schema_validation_is_shared(tmp_path: Path) -> None:
    path = write_config(tmp_path, fixture_data("llama3-70b") | {"num_key_value_heads": 7})
    assert "not divisible by 7 kv_heads" in one_line_error(path)


# ------------------------------------------------------------------ properties


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_dropping_keys_equal_to_their_default_changes_nothing(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    # Sparseness is lossless: a key stating its class default can be omitted, as save_pretrained
    # omits it, without changing the import.
    folder = data.draw(st.sampled_from(sorted(REGISTRY_ID)))
    config = fixture_data(folder)
    text = config.get("text_config", config)
    model_type = "gemma3_text" if config["model_type"] == "gemma3" else text["model_type"]
    defaults = DEFAULTS.get({"llama4": "llama4_text"}.get(model_type, model_type), {})
    # save_pretrained writes every top-level key a config class adds; it may omit only those
    # of a nested text_config, and at the top level the defaults the family documents (others
    # are refused, test_hf_adapters).
    top_level = text is config
    documented = ADAPTERS[model_type].config_class.documented_defaults if top_level else set()
    redundant = sorted(
        k
        for k, v in text.items()
        if k in defaults and defaults[k] == v and (not top_level or k in documented)
    )
    drop = data.draw(
        st.lists(st.sampled_from(redundant), unique=True) if redundant else st.just([])
    )
    for key in drop:
        del text[key]
    tmp = tmp_path_factory.mktemp("cfg")
    assert load_hf_config(write_config(tmp, config, folder)) == load_hf_config(FIXTURES / folder)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    folder=st.sampled_from(sorted(REGISTRY_ID)),
    quant=st.sampled_from(
        [
            {"quant_method": "fp8", "weight_block_size": [128, 128]},
            {"quant_method": "fp8"},
            {"quant_method": "mxfp4"},
            {"quant_method": "awq", "bits": 4, "group_size": 128},
            {"quant_method": "gptq", "bits": 8, "group_size": -1},
            {"quant_method": "bitsandbytes", "load_in_4bit": True},
        ]
    ),
)
def test_quantization_config_changes_the_weights_never_the_kv_cache(
    tmp_path_factory: pytest.TempPathFactory, folder: str, quant: dict[str, Any]
) -> None:
    config = fixture_data(folder) | {"quantization_config": quant}
    tmp = tmp_path_factory.mktemp("cfg")
    quantized = load_hf_config(write_config(tmp, config, folder))
    assert quantized.checkpoint is not None and quantized.checkpoint.is_quantized
    unquantized = load_hf_config(FIXTURES / folder)
    assert replace(quantized, checkpoint=None) == replace(unquantized, checkpoint=None)


# ---------------------------------------------------------------- multimodal towers

GEMMA3_SIGLIP = {  # google/gemma-3-27b-it vision_config (model-configs-2025.yaml)
    "model_type": "siglip_vision_model",
    "num_hidden_layers": 27,
    "hidden_size": 1152,
    "num_attention_heads": 16,
    "intermediate_size": 4304,
    "patch_size": 14,
    "image_size": 896,
    "vision_use_head": False,
}
LLAMA4_VISION = {  # meta-llama/Llama-4-Scout-17B-16E-Instruct vision_config
    "hidden_size": 1408,
    "image_size": 336,
    "intermediate_size": 5632,
    "model_type": "llama4_vision_model",
    "multi_modal_projector_bias": False,
    "num_attention_heads": 16,
    "num_channels": 3,
    "num_hidden_layers": 34,
    "patch_size": 14,
    "pixel_shuffle_ratio": 0.5,
    "projector_input_dim": 4096,
    "projector_output_dim": 4096,
    "vision_output_dim": 4096,
}


@pytest.mark.parametrize(
    ("fixture", "registry_id", "vision"),
    [
        ("gemma3-27b", "gemma3-27b", GEMMA3_SIGLIP),
        ("llama4-scout", "llama4-scout", LLAMA4_VISION),
        ("llama4-maverick", "llama4-maverick", LLAMA4_VISION),
    ],
)
def test_vision_config_is_the_registry_tower(
    tmp_path: Path, fixture: str, registry_id: str, vision: dict[str, Any]
) -> None:
    # The registry describes the towers by hand from the same vision_config: both paths agree.
    data = fixture_data(fixture) | {"vision_config": vision}
    imported = load_hf_config(write_config(tmp_path, data))
    assert imported.vision is not None
    assert imported.vision == registry_model(registry_id).vision
    # Without vision_config (a text-only copy) the language model alone is imported.
    assert load_hf_config(FIXTURES / fixture).vision is None


def test_gemma3_rope_tables_follow_its_linear_scaling() -> None:
    # rope_scaling {rope_type: linear, factor: 8}: the global table spans 8 x 131,072 positions.
    assert load_hf_config(FIXTURES / "gemma3-27b").rotary_caches == (
        (131_072, 128),
        (1_048_576, 128),
    )


def test_pixtral_tower_of_mistral3(tmp_path: Path) -> None:
    # Pixtral (Mistral-Small-3.1's vision_config): patch conv 3 x 14^2 x 1024 = 602,112, ln_pre
    # 1024; per block q/k/v/o 4 x 1024^2, gated MLP 3 x 1024 x 4096, two RMSNorms 2 x 1024 =
    # 16,779,264, x 24 = 402,702,336; projector RMSNorm 1024, patch merger 4096 x 1024 =
    # 4,194,304, linear_1 1024 x 5120 = 5,242,880, linear_2 5120 x 5120 = 26,214,400.
    vision = {
        "hidden_size": 1024,
        "image_size": 1540,
        "intermediate_size": 4096,
        "model_type": "pixtral",
        "num_attention_heads": 16,
        "num_channels": 3,
        "num_hidden_layers": 24,
        "patch_size": 14,
    }
    text = {"hidden_size": 5120, "num_hidden_layers": 40, "num_attention_heads": 32}
    data = {"model_type": "mistral3", "text_config": text, "vision_config": vision}
    model = load_hf_config(write_config(tmp_path, data))
    expected = 602_112 + 1024 + 402_702_336 + 1024 + 4_194_304 + 5_242_880 + 26_214_400
    assert param_counts(model).encoder == expected
    # (1540 / 14 / 2)^2 = 3,025 merged patches and one [IMG_BREAK] per row of 55.
    assert model.vision is not None and model.vision.tokens_per_image == 3080


#: Qwen/Qwen2.5-VL-7B-Instruct's config.json (tests/fixtures/multimodal/README.md cites it).
QWEN2_5_VL_7B = Path(__file__).parent / "fixtures" / "multimodal" / "qwen2.5-vl-7b-instruct"


def test_qwen2_5_vl_tower_of_the_7b() -> None:
    # Qwen2.5-VL's ViT: Conv3d patch embedding 3 x 2 frames x 14^2 x 1280 = 1,505,280, no bias;
    # per block qkv 1280 x 3840 + 3840, proj 1280^2 + 1280, gated MLP 2 x (1280 x 3420 + 3420)
    # + 3420 x 1280 + 1280, two RMSNorms 2,560 = 19,702,200, x 32 = 630,470,400. Patch merger:
    # RMSNorm 1280, 5120 -> 5120 (26,219,520 with bias) -> 3584 (18,353,664 with bias).
    model = load_hf_config(QWEN2_5_VL_7B)
    expected = 1_505_280 + 630_470_400 + 1280 + 26_219_520 + 18_353_664
    counts = param_counts(model)
    assert counts.encoder == expected
    # The checkpoint's safetensors metadata states 8,292,166,656 (8.29B), of which the language
    # model is 7,615,616,512 (the count trained with the visual tower frozen, in public training
    # logs): the tower and merger are exactly the 676,550,144 above. The total is within the
    # tolerance a three-digit stated figure supports (kvcalc leaves out the text model's q/k/v
    # biases, 28 x 4,608 = 129,024).
    assert expected == 8_292_166_656 - 7_615_616_512
    assert counts.total == 8_292_166_656 - 28 * 4608
    assert abs(counts.total / 8.29e9 - 1) <= stated_tolerance(8.29e9)
    # 3584-pixel images (max_pixels 12,845,056): 256 x 256 patches merged 2 x 2.
    assert model.vision is not None and model.vision.tokens_per_image == 16_384
    # The language model is Qwen2.5-7B's: 28 layers of 4 KV heads x 128.
    assert kv_bytes_per_token(model, BF16) == 2 * 28 * 4 * 128 * 2
    assert model.max_context == 128_000


def test_qwen2_5_vl_reads_text_config_or_the_top_level(tmp_path: Path) -> None:
    top = fixture_of(QWEN2_5_VL_7B)
    own = ("model_type", "vision_config", "architectures")
    text = {k: v for k, v in top.items() if k not in own}
    nested = {k: top[k] for k in own} | {"text_config": text | {"model_type": "qwen2_5_vl_text"}}
    flat_model = load_hf_config(QWEN2_5_VL_7B)
    nested_model = load_hf_config(write_config(tmp_path, nested))
    assert param_counts(nested_model) == param_counts(flat_model)
    assert layers(nested_model) == layers(flat_model)
    # A key neither states takes Qwen2_5_VLTextConfig's default, not Qwen2's (vocab 151936).
    del text["vocab_size"]
    sparse = load_hf_config(write_config(tmp_path, nested | {"text_config": text}, "sparse"))
    assert sparse.vocab_size == 152_064


def test_qwen2_5_vl_refusals_name_the_field(tmp_path: Path) -> None:
    top = fixture_of(QWEN2_5_VL_7B)
    wrong = top | {"vision_config": top["vision_config"] | {"out_hidden_size": 4096}}
    with pytest.raises(RegistryError, match="vision_config.out_hidden_size"):
        load_hf_config(write_config(tmp_path, wrong, "wrong"))
    # A bad key of a top-level language model is named where it stands, not under text_config.
    with pytest.raises(RegistryError, match=r"json: num_key_value_heads:"):
        load_hf_config(write_config(tmp_path, top | {"num_key_value_heads": 0}, "kv"))
    bare = {"model_type": "qwen2_5_vl", "vision_config": top["vision_config"]}
    with pytest.raises(RegistryError, match="text_config"):
        load_hf_config(write_config(tmp_path, bare, "bare"))


def test_a_bad_vision_config_is_named(tmp_path: Path) -> None:
    data = fixture_data("llama4-scout") | {"vision_config": LLAMA4_VISION | {"hidden_size": 0}}
    with pytest.raises(RegistryError, match="vision_config.hidden_size"):
        load_hf_config(write_config(tmp_path, data))


def test_moonvit_tower_of_kimi_vl(tmp_path: Path) -> None:
    # MoonViT (Kimi-VL's vision_config, MoonViT-SO-400M): SigLIP-shaped blocks of 15,239,504
    # x 27 = 411,466,608; patch conv 3 x 14^2 x 1152 + 1152 = 678,528; a learned 64 x 64 table
    # 4,718,592; final LayerNorm 2304. Projector: LayerNorm 2304, 4 x 1152 -> 4608 (21,233,664)
    # -> the text hidden, here Kimi-K2's 7168 (33,030,144).
    vision = {
        "hidden_size": 1152,
        "init_pos_emb_height": 64,
        "init_pos_emb_width": 64,
        "intermediate_size": 4304,
        "merge_kernel_size": [2, 2],
        "model_type": "moonvit",
        "num_attention_heads": 16,
        "num_hidden_layers": 27,
        "patch_size": 14,
    }
    text = fixture_data("kimi-k2")
    data = {"model_type": "kimi_vl", "text_config": text, "vision_config": vision}
    model = load_hf_config(write_config(tmp_path, data))
    expected = 411_466_608 + 678_528 + 4_718_592 + 2304 + 2304 + 21_233_664 + 33_030_144
    assert param_counts(model).encoder == expected
    assert model.vision is not None and model.vision.tokens_per_image == 64 * 64 // 4


@pytest.mark.parametrize(
    ("fixture", "tables"),
    [
        ("jamba-v0.1", ()),  # no positional encoding
        ("granite-4.0-h-micro", ()),  # position_embedding_type nope
        ("qwen3-next-80b-a3b", ((262_144, 64),)),  # partial_rotary_factor 0.25 of 256
        ("llama3-70b", ((8192, 128),)),  # one table of max_position_embeddings x head_dim
    ],
)
def test_rope_tables_as_the_engine_builds_them(
    fixture: str, tables: tuple[tuple[int, int], ...]
) -> None:
    model = load_hf_config(FIXTURES / fixture)
    assert rotary_caches(model) == tables
    # The registry entry of the same model states the same tables.
    assert rotary_caches(registry_model(fixture)) == tables
