"""The config.json adapters: every model_type has one with declared defaults, the defaults are
what transformers fills in, and every bad input is one line and exit 2 through the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from specs import write_config
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine.kv import kv_bytes_per_token
from kvcalc.engine.units import dtype
from kvcalc.registry.hf import ADAPTERS, DEFAULTS, SUPPORTED_MODEL_TYPES, WRAPPERS, load_hf_config
from kvcalc.registry.hf.importer import SHAPE_FIELDS
from kvcalc.registry.load import RegistryError

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
BF16 = dtype("bf16")


def fixture_data(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name / "config.json").read_text(encoding="utf-8"))


def error_of(path: Path) -> str:
    with pytest.raises(RegistryError) as info:
        load_hf_config(path)
    return str(info.value)


# ------------------------------------------------------------------ the registry of adapters


def test_every_supported_model_type_has_exactly_one_reader() -> None:
    assert set(SUPPORTED_MODEL_TYPES) == set(ADAPTERS) | set(WRAPPERS)
    assert not set(ADAPTERS) & set(WRAPPERS)
    claimed = [t for a in set(ADAPTERS.values()) for t in a.model_types]
    assert sorted(claimed) == sorted(ADAPTERS)  # no model_type claimed by two adapters


@pytest.mark.parametrize("model_type", sorted(ADAPTERS))
def test_every_adapter_declares_a_default_for_every_key(model_type: str) -> None:
    config_class = ADAPTERS[model_type].config_class
    required = [name for name, info in config_class.model_fields.items() if info.is_required()]
    assert required == []
    assert config_class.model_validate({}).model_dump() == DEFAULTS[model_type]


def shape_of(model_type: str) -> dict[str, object]:
    """The shape fields a saved config.json always states, at the family's defaults."""
    return {"model_type": model_type, **{k: DEFAULTS[model_type][k] for k in SHAPE_FIELDS}}


@pytest.mark.parametrize("model_type", sorted(ADAPTERS))
def test_a_config_with_no_shape_field_is_refused(tmp_path: Path, model_type: str) -> None:
    # {"model_type": "llama"} alone was sized as the class defaults (a 32-layer Llama).
    message = error_of(write_config(tmp_path, {"model_type": model_type}))
    assert "hidden_size, num_hidden_layers, num_attention_heads: missing" in message


@pytest.mark.parametrize("model_type", sorted(t for t in ADAPTERS if t != "deepseek_v2"))
def test_a_default_no_family_documents_is_refused_not_assumed(
    tmp_path: Path, model_type: str
) -> None:
    # The shape fields alone were sized with the class defaults for the rest (LlamaConfig's
    # 32000 vocab and 11008 intermediate: Llama-7B's), silently.
    message = error_of(write_config(tmp_path, shape_of(model_type)))
    assert "missing required field" in message and "will not assume" in message
    assert ADAPTERS[model_type].config_class.__name__ in message


def test_every_missing_field_a_formula_reads_is_named_with_its_default(tmp_path: Path) -> None:
    data = fixture_data("llama3-70b")
    for key in ("num_hidden_layers", "vocab_size"):
        del data[key]
    message = error_of(write_config(tmp_path, data))
    assert "num_hidden_layers, vocab_size: missing required fields" in message
    assert "LlamaConfig's defaults (32, 32000)" in message


def test_a_missing_key_no_formula_reads_is_not_refused(tmp_path: Path) -> None:
    # head_dim absent is a rule (hidden_size / heads), not a default: Llama-3-70B states none.
    data = fixture_data("llama3-70b")
    assert "head_dim" not in data
    model = load_hf_config(write_config(tmp_path, data))
    assert model.mixer_at(0).head_dim_k == 128 and model.assumed == ()


def test_a_documented_default_is_taken_with_a_warning_naming_it(tmp_path: Path) -> None:
    # tie_word_embeddings is a base-config key save_pretrained drops when it is true.
    data = {k: v for k, v in fixture_data("qwen3-8b").items() if k != "tie_word_embeddings"}
    model = load_hf_config(write_config(tmp_path, data))
    assert model.tied_embeddings is DEFAULTS["qwen3"]["tie_word_embeddings"]
    (warning,) = model.assumed
    assert "states no tie_word_embeddings; took Qwen3Config's default" in warning
    assert "tie_word_embeddings false" in warning


def test_a_config_stating_some_shape_fields_is_refused_for_the_others(tmp_path: Path) -> None:
    message = error_of(write_config(tmp_path, {"model_type": "llama", "num_hidden_layers": 40}))
    assert "num_attention_heads, hidden_size, vocab_size" in message
    assert "missing required fields" in message


def test_falcon_shape_fields_count_under_their_old_names(tmp_path: Path) -> None:
    data = fixture_data("falcon-7b")
    data["n_layer"] = data.pop("num_hidden_layers")
    assert load_hf_config(write_config(tmp_path, data)).layers == load_hf_config(
        FIXTURES / "falcon-7b"
    ).layers


def test_deepseek_v2_defaults_leave_the_router_unset(tmp_path: Path) -> None:
    # DeepseekV2Config's num_experts_per_tok is None: 64 routed experts and no top-k.
    message = error_of(write_config(tmp_path, shape_of("deepseek_v2")))
    assert "num_experts_per_tok: must be an integer, not null" in message


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
def test_wrapper_with_empty_text_config_takes_its_text_class_defaults(
    tmp_path: Path, wrapper: str
) -> None:
    path = write_config(tmp_path, {"model_type": wrapper, "text_config": {}})
    if wrapper == "lfm2_vl":
        # Lfm2Config's defaults lay out no conv layer (every layer attention without
        # full_attn_idxs or layer_types): the lfm2 adapter refuses that for any LFM2 file.
        assert "text_config.layer_types: missing required field" in error_of(path)
        return
    model = load_hf_config(path)
    text_defaults = DEFAULTS[WRAPPERS[wrapper].text_model_type] | WRAPPERS[wrapper].text_defaults
    assert model.num_layers == text_defaults["num_hidden_layers"]
    assert model.tied_embeddings is WRAPPERS[wrapper].model_fields["tie_word_embeddings"].default


def test_kimi_vl_text_config_is_deepseek_v3(tmp_path: Path) -> None:
    data = {"model_type": "kimi_vl", "text_config": fixture_data("kimi-k2")}
    wrapped = load_hf_config(write_config(tmp_path, data))
    assert wrapped.layers == load_hf_config(FIXTURES / "kimi-k2").layers
    # DeepSeek-V3's MLA layout: (512 + 64) x 61 layers x 2 bytes.
    assert kv_bytes_per_token(wrapped, BF16) == 70_272


def test_fixed_wrapper_ignores_the_stated_text_model_type(tmp_path: Path) -> None:
    data = fixture_data("gemma3-27b")
    data["text_config"]["model_type"] = "llama"  # Gemma3Config builds Gemma3TextConfig anyway
    assert load_hf_config(write_config(tmp_path, data)) == load_hf_config(
        write_config(tmp_path / "b", fixture_data("gemma3-27b"))
    )


def test_wrapper_inside_a_wrapper_is_refused(tmp_path: Path) -> None:
    data = {"model_type": "mistral3", "text_config": {"model_type": "gemma3"}}
    assert "text_config.model_type: 'gemma3' is a wrapper" in error_of(write_config(tmp_path, data))


# ------------------------------------------------------------------ aliases and nulls


def test_falcon_new_key_wins_over_its_rwconfig_name(tmp_path: Path) -> None:
    data = fixture_data("falcon-7b-rw") | {"num_hidden_layers": 16}  # n_layer says 32
    assert load_hf_config(write_config(tmp_path, data)).num_layers == 16


def test_falcon_rwconfig_n_head_kv_means_grouped_kv(tmp_path: Path) -> None:
    # RWConfig's 40B layout states n_head_kv and no new_decoder_architecture; multi_query
    # (true in the 7B file) no longer applies.
    grouped = fixture_data("falcon-7b-rw") | {"n_head": 64, "hidden_size": 4096, "n_head_kv": 8}
    attn = load_hf_config(write_config(tmp_path, grouped)).mixer_at(0)
    assert (attn.kv_heads, attn.head_dim_k) == (8, 4096 // 64)


def test_experts_count_under_the_other_familys_key(tmp_path: Path) -> None:
    data = fixture_data("mixtral-8x7b")
    data["num_experts"] = data.pop("num_local_experts")
    assert load_hf_config(write_config(tmp_path, data)) == load_hf_config(
        write_config(tmp_path / "b", fixture_data("mixtral-8x7b"))
    )


def test_null_where_transformers_allows_it_means_derived(tmp_path: Path) -> None:
    data = fixture_data("llama3-70b") | {"num_key_value_heads": None, "head_dim": None}
    attn = load_hf_config(write_config(tmp_path, data)).mixer_at(0)
    assert (attn.kv_heads, attn.head_dim_k) == (64, 8192 // 64)  # MHA, hidden / heads


# ------------------------------------------------------------------ errors name file and field


@pytest.mark.parametrize(
    ("folder", "change", "expected"),
    [
        ("jamba-v0.1", {"attn_layer_offset": 8}, "attn_layer_offset: must be smaller than"),
        ("jamba-v0.1", {"mamba_dt_rank": "big"}, 'mamba_dt_rank: must be a positive integer or "'),
        ("qwen3-8b", {"layer_types": ["full_attention"] * 3}, "layer_types: must be a list of 36"),
        ("qwen3-8b", {"layer_types": ["linear_attention"] * 36}, "layer_types[0]: unsupported"),
        ("qwen3-235b-a22b", {"mlp_only_layers": [1, -2]}, "mlp_only_layers[1]: must be at least 0"),
        ("qwen3-8b", {"use_sliding_window": 1}, "use_sliding_window: must be true or false, got 1"),
        ("falcon-7b-rw", {"n_head": 0}, "n_head: must be at least 1, got 0"),
        ("deepseek-v3", {"num_experts_per_tok": None}, "num_experts_per_tok: must be an integer"),
        ("deepseek-v3.2-exp", {"index_head_dim": 0}, "index_head_dim: must be at least 1, got 0"),
        (
            "deepseek-v3.2-exp",
            {"layer_types": ["full_attention"] * 61},
            "layer_types[0]: unsupported entry 'full_attention'",
        ),
        ("deepseek-v3.2-exp", {"layer_types": []}, "layer_types: must be a list of 61"),
        ("granite-4.0-h-small", {"mamba_d_head": 48}, "mamba_d_head: x mamba_n_heads must equal"),
        ("granite-4.0-h-small", {"mamba_n_heads": 96}, "mamba_n_heads: must divide mamba_expand"),
        ("granite-4.0-h-small", {"layer_types": ["mamba"] * 39}, "layer_types: must be a list of"),
        ("granite-4.0-h-small", {"layer_types": ["moe"] * 40}, "layer_types[0]: unsupported"),
        ("granite-4.0-h-small", {"num_experts_per_tok": 73}, "num_experts_per_tok: must be betw"),
    ],
)
def test_error_names_the_field(
    tmp_path: Path, folder: str, change: dict[str, Any], expected: str
) -> None:
    path = write_config(tmp_path, fixture_data(folder) | change)
    message = error_of(path)
    assert message.startswith(f"{path}: ") and expected in message and "\n" not in message


# ------------------------------------------------------------------ the CLI: exit 2, one line


def llama(key: str, value: Any) -> dict[str, Any]:
    return fixture_data("llama3-70b") | {key: value}


def nested(key: str, value: Any) -> dict[str, Any]:
    data = fixture_data("gemma3-27b")
    data["text_config"][key] = value
    return data


@pytest.mark.parametrize(
    ("data", "needles"),
    [
        (llama("hidden_size", "8192"), ["hidden_size: must be an integer, got '8192'"]),
        (llama("num_hidden_layers", True), ["num_hidden_layers: must be an integer, got True"]),
        (llama("num_key_value_heads", -8), ["num_key_value_heads: must be at least 1, got -8"]),
        (llama("vocab_size", None), ["vocab_size: must be an integer, not null"]),
        (llama("tie_word_embeddings", None), ["tie_word_embeddings: must be true or false"]),
        (
            llama("model_type", "bert") | {"kv_lora_rank": 512},
            ["unsupported model_type 'bert'", "kv_lora_rank", "llama4"],
        ),
        ({"model_type": "llama4"}, ["text_config: missing required field"]),
        ({"model_type": "llama4", "text_config": "llama"}, ["text_config: must be a JSON object"]),
        (nested("num_hidden_layers", 0), ["text_config.num_hidden_layers: must be at least 1"]),
        (nested("head_dim", 1.5), ["text_config.head_dim: must be an integer, got 1.5"]),
        (
            fixture_data("granite-4.0-h-tiny") | {"mamba_n_groups": 0},
            ["mamba_n_groups: must be at least 1, got 0"],
        ),
    ],
)
def test_bad_config_through_the_cli_is_one_line_and_exit_2(
    runner: CliRunner, tmp_path: Path, data: dict[str, Any], needles: list[str]
) -> None:
    path = write_config(tmp_path, data)
    result = runner.invoke(app, ["size", str(path)])
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert str(path) in lines[0]
    for needle in needles:
        assert needle in lines[0]



def test_mtp_layers_are_read_from_the_official_configs() -> None:
    # The official configs (fixtures) state one MTP layer each: DeepSeek-V4's
    # num_nextn_predict_layers 1 and Qwen3.6-27B's text_config mtp_num_hidden_layers 1; the
    # registry files carry the same count, and it is not in num_layers (43, 61, 64).
    from pathlib import Path

    from specs import registry_model

    from kvcalc.registry.hf import load_hf_config

    fixtures = Path(__file__).parent / "fixtures" / "hf"
    for name, layers in (("deepseek-v4-flash", 43), ("deepseek-v4-pro", 61), ("qwen3.6-27b", 64)):
        imported = load_hf_config(fixtures / name / "config.json")
        assert (imported.mtp_layers, imported.num_layers) == (1, layers)
        assert registry_model(name).mtp_layers == 1
    assert registry_model("llama3-70b").mtp_layers == 0
