"""config.json import of MiniMax-M2, GLM-4.x MoE, the standard-decoder fallback for a model_type
without an adapter, and JSON's non-finite constants.

The fixtures tests/fixtures/hf/minimax-m2 and glm-4.6 are written, as the others are, from
shared/reference/model-configs-2025.yaml (its MiniMax-M2 and GLM-4.6 entries, with the
official key names and their sources there). Every golden figure is worked by hand below from
the engines' rules in shared/reference/arch-2026.md sections 4 and 6.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from specs import write_config as write
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine import spec
from kvcalc.engine.kv import kv_bytes_per_sequence, kv_bytes_per_token
from kvcalc.engine.units import dtype
from kvcalc.registry.hf import load_hf_config
from kvcalc.registry.load import RegistryError

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
BF16, FP8 = dtype("bf16"), dtype("fp8")


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name / "config.json").read_text())
    return data


def refusal(path: Path) -> str:
    with pytest.raises(RegistryError) as info:
        load_hf_config(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return message


# ------------------------------------------------------------------ MiniMax-M2 (section 4)


def test_minimax_m2_kv_is_62_full_gqa_layers() -> None:
    model = load_hf_config(FIXTURES / "minimax-m2")
    # 62 layers x (K + V) x 8 KV heads x 128 x 2 bytes = 253,952 B/token; the 3 MTP modules
    # are dropped by vLLM's loader and hold nothing.
    assert kv_bytes_per_token(model, BF16) == 62 * 2 * 8 * 128 * 2 == 253_952
    # 33.3 GB (31 GiB) at 128k in bf16, half with fp8.
    assert kv_bytes_per_sequence(model, 131_072, BF16) == 33_285_996_544
    assert kv_bytes_per_sequence(model, 131_072, FP8) == 33_285_996_544 // 2
    assert model.rotary_caches == ((196_608, 64),)  # RoPE on rotary_dim 64 of 128
    assert model.moe is not None and (model.moe.experts, model.moe.top_k) == (256, 8)


def test_minimax_m2_lightning_layer_is_refused(tmp_path: Path) -> None:
    data = fixture("minimax-m2")
    data["attn_type_list"] = [0] + [1] * 61
    assert "attn_type_list: minimax_m2 has softmax attention" in refusal(write(tmp_path, data))


def test_minimax_m2_attn_type_list_must_cover_every_layer(tmp_path: Path) -> None:
    data = fixture("minimax-m2") | {"attn_type_list": [1] * 61}
    assert "attn_type_list: must list 62 entries" in refusal(write(tmp_path, data))


# ------------------------------------------------------------------ GLM-4.x MoE (section 6)


def test_glm46_kv_is_92_full_gqa_layers_and_moe_from_layer_3() -> None:
    model = load_hf_config(FIXTURES / "glm-4.6")
    # head_dim 128 as stated (96 x 128 = 12,288, not hidden 5120 / 96): 92 x 2 x 8 x 128 x 2.
    assert kv_bytes_per_token(model, BF16) == 92 * 2 * 8 * 128 * 2 == 376_832
    assert [model.ffn_at(i) is model.moe for i in range(5)] == [False, False, False, True, True]
    assert model.moe is not None and model.moe.shared_experts == 1
    assert model.rotary_caches == ((202_752, 64),)  # partial_rotary_factor 0.5 of 128


def test_glm_without_head_dim_on_an_uneven_width_is_refused(tmp_path: Path) -> None:
    data = fixture("glm-4.6")
    del data["head_dim"]  # 5120 / 96 would floor to 53: not GLM's 128
    assert "head_dim: missing required field" in refusal(write(tmp_path, data))


def test_glm_without_head_dim_on_an_even_width_derives_it(tmp_path: Path) -> None:
    data = fixture("glm-4.6") | {"hidden_size": 6144}
    del data["head_dim"]
    model = load_hf_config(write(tmp_path, data))
    assert model.mixer_at(0) == spec.FullAttention(8, 64, 64, 96)


def test_glm_partial_rotary_factor_must_be_finite(tmp_path: Path) -> None:
    text = json.dumps(fixture("glm-4.6")).replace(
        '"partial_rotary_factor": 0.5', '"partial_rotary_factor": NaN'
    )
    assert "partial_rotary_factor: must be a finite number, got NaN" in refusal(
        write(tmp_path, text)
    )


# ------------------------------------------------------------------ JSON's non-finite constants


def test_infinity_and_nan_in_fields_no_formula_reads_are_accepted(tmp_path: Path) -> None:
    # Nemotron-H's official config.json holds "time_step_limit": [0.0, Infinity].
    text = json.dumps(fixture("minimax-m2"))[:-1] + (
        ', "time_step_limit": [0.0, Infinity], "router_jitter_noise": NaN, "floor": -Infinity}'
    )
    model = load_hf_config(write(tmp_path, text), "minimax-m2", "minimax-m2")
    assert model == load_hf_config(FIXTURES / "minimax-m2")


@pytest.mark.parametrize("constant", ["Infinity", "-Infinity", "NaN"])
def test_infinity_and_nan_in_a_field_the_sizing_reads_are_refused(
    tmp_path: Path, constant: str
) -> None:
    text = json.dumps(fixture("glm-4.6")).replace(
        '"num_key_value_heads": 8', f'"num_key_value_heads": {constant}'
    )
    message = refusal(write(tmp_path, text))
    assert f"num_key_value_heads: must be a finite number, got {constant}" in message


# ------------------------------------------------------------------ unknown model_type


def standard(**changes: Any) -> dict[str, Any]:
    """The Llama-3-70B fixture under a model_type kvcalc has no adapter for."""
    return fixture("llama3-70b") | {"model_type": "acme_decoder"} | changes


def test_a_standard_decoder_of_unknown_type_is_sized_as_its_llama_reading(
    tmp_path: Path,
) -> None:
    model = load_hf_config(write(tmp_path, standard()))
    llama = load_hf_config(FIXTURES / "llama3-70b", "m", "m")
    # The same mixers, FFNs, depth, widths and dtype as the llama adapter's reading of the file.
    assert model.mixer_pattern == llama.mixer_pattern
    assert (model.dense_mlp, model.moe, model.num_layers) == (llama.dense_mlp, None, 80)
    assert (model.hidden_size, model.vocab_size) == (llama.hidden_size, llama.vocab_size)
    assert kv_bytes_per_token(model, BF16) == 2 * 80 * 8 * 128 * 2  # seed 004: 320 KiB
    (warning,) = model.assumed
    assert "model_type 'acme_decoder' has no kvcalc adapter; sized as a standard decoder" in warning
    for name in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads"):
        assert name in warning
    assert "head_dim = hidden_size / num_attention_heads" in warning  # Llama-3 states none


def test_a_standard_decoder_follows_its_layer_types(tmp_path: Path) -> None:
    layer_types = ["sliding_attention", "full_attention"] * 40
    model = load_hf_config(write(tmp_path, standard(layer_types=layer_types, sliding_window=4096)))
    window = spec.SlidingWindowAttention(8, 128, 128, 64, window=4096)
    assert model.mixer_pattern == (window, spec.FullAttention(8, 128, 128, 64))
    assert "sliding where layer_types says so" in model.assumed[0]


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"kv_lora_rank": 512}, "kv_lora_rank"),  # MLA
        ({"compress_ratios": [0, 4, 128]}, "compress_ratios"),  # DeepSeek-V4
        ({"linear_num_value_heads": 32}, "linear_num_value_heads"),  # Gated DeltaNet
        ({"mamba_d_state": 128}, "mamba_d_state"),  # state-space layers
        ({"conv_L_cache": 3}, "conv_L_cache"),  # LFM2's short convolutions
        ({"num_local_experts": 8}, "num_local_experts"),  # experts a dense MLP would misstate
        ({"text_config": {"num_hidden_layers": 2}}, "text_config"),  # a wrapper
        ({"layer_types": ["full_attention"] * 79 + ["linear_attention"]}, "'linear_attention'"),
    ],
)
def test_signs_of_another_attention_are_refused_by_name(
    tmp_path: Path, changes: dict[str, Any], named: str
) -> None:
    message = refusal(write(tmp_path, standard(**changes)))
    assert "unsupported model_type 'acme_decoder', and not a standard decoder" in message
    assert named in message and "write a registry file" in message


def test_a_false_or_null_sign_is_no_sign(tmp_path: Path) -> None:
    model = load_hf_config(write(tmp_path, standard(use_mla=False, kv_lora_rank=None)))
    assert kv_bytes_per_token(model, BF16) == 2 * 80 * 8 * 128 * 2


def test_a_standard_decoder_without_kv_heads_is_refused(tmp_path: Path) -> None:
    data = standard()
    del data["num_key_value_heads"]  # MHA is not assumed
    assert "it states no num_key_value_heads" in refusal(write(tmp_path, data))


def test_a_window_without_layer_types_is_refused(tmp_path: Path) -> None:
    # Which layers slide is each family's rule (Mistral all, Qwen2 from max_window_layers on).
    message = refusal(write(tmp_path, standard(sliding_window=4096)))
    assert "sliding_window: stated without layer_types" in message


def test_sliding_layers_without_a_window_are_refused(tmp_path: Path) -> None:
    data = standard(layer_types=["sliding_attention"] * 80)
    assert "sliding_window: missing" in refusal(write(tmp_path, data))


def test_unknown_type_through_the_cli_warns_once_and_sizes(
    runner: CliRunner, tmp_path: Path
) -> None:
    path = write(tmp_path, standard())
    result = runner.invoke(app, ["size", str(path), "--ctx", "8k", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["kv_bytes_per_token"] == 327_680
    lines = [line for line in result.stderr.splitlines() if "no kvcalc adapter" in line]
    assert len(lines) == 1 and lines[0].startswith("warning: ")


def test_unknown_type_with_signs_through_the_cli_is_one_line_and_exit_2(
    runner: CliRunner, tmp_path: Path
) -> None:
    path = write(tmp_path, standard(kv_lora_rank=512))
    result = runner.invoke(app, ["size", str(path), "--ctx", "8k"])
    assert result.exit_code == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "kv_lora_rank" in result.stderr


# ------------------------------------------------------------------ Nemotron-H (section 5)
# The fixtures nemotron-h-8b / -56b carry the layer patterns and shapes of NVIDIA's own
# Megatron-Bridge providers (nemotron_h_provider.py, NemotronHModelProvider8B / 56B) in the
# key names of the released config.json files, Infinity included.


def nemotron(name: str) -> dict[str, Any]:
    text = (FIXTURES / name / "config.json").read_text()
    data: dict[str, Any] = json.loads(text.replace("Infinity", "1e308"))  # no constant inside
    return data


def test_nemotron_h_56b_caches_as_its_mamba_and_attention_blocks() -> None:
    model = load_hf_config(FIXTURES / "nemotron-h-56b")
    # 118 blocks: 54 Mamba-2 (M), 10 attention (*), 54 MLP (-); the kvcalc layers are the 64
    # blocks that cache something.
    kinds = [type(model.mixer_at(i)).__name__ for i in range(model.num_layers)]
    assert (kinds.count("Mamba2"), kinds.count("FullAttention"), len(kinds)) == (54, 10, 64)
    # Attention: 10 x 2 x 8 KV heads x 128 (hidden 8192 / 64 heads) x 2 bytes = 40,960 B/token.
    assert kv_bytes_per_token(model, BF16) == 10 * 4_096 == 40_960
    # Mamba-2 state, bf16: conv (256 x 64 + 2 x 8 x 256) x (4 - 1) + SSM 256 x 64 x 256 values.
    state = 54 * ((16_384 + 4_096) * 3 + 256 * 64 * 256) * 2
    assert kv_bytes_per_sequence(model, 8_192, BF16) == state + 8_192 * 40_960
    assert model.rotary_caches == ()  # NemotronHAttention has no RoPE


def test_nemotron_h_56b_mlp_blocks_spread_over_its_layers() -> None:
    model = load_hf_config(FIXTURES / "nemotron-h-56b")
    # 54 MLPs of 32,768 (up and down, squared ReLU) over 64 layers: 27,648 on each.
    assert model.dense_mlp == spec.DenseMLP(54 * 32_768 // 64, gated=False)
    assert model.moe is None


def test_nemotron_h_56b_vllm_pages_match_the_worked_example() -> None:
    from kvcalc.engine.vllm import VLLMKVCache, vllm_kv_cache

    model = load_hf_config(FIXTURES / "nemotron-h-56b")
    # arch-2026.md section 5, vLLM 0.33 with the SSM state in float32 (its Nemotron-H default):
    # a Mamba page of 20,480 x 3 x 2 + 256 x 64 x 256 x 4 = 16,900,096 B; attention block
    # 16 x ceil(16,900,096 / (16 x 4,096)) = 4,128 tokens, page 4,128 x 4,096 = 16,908,288 B;
    # 6 Mamba groups + 1 attention group of 10 layers: 169,082,880 B per block.
    for tokens, blocks in ((8_192, 6 + 2), (131_072, 6 + 32)):
        cache = vllm_kv_cache(
            model, 80 << 30, max_model_len=tokens, kv_dtype=BF16, ssm_state_dtype=dtype("fp32")
        )
        assert isinstance(cache, VLLMKVCache)
        grouping = cache.grouping
        assert (grouping.page_bytes, grouping.group_size, len(grouping.groups)) == (
            16_908_288,
            10,
            7,
        )
        assert grouping.groups[-1].spec.block_size == 4_128
        assert cache.stages[0].bytes_per_block == 169_082_880
        assert cache.blocks_per_request == blocks  # 1.35 GB at 8k, 6.43 GB at 128k


def test_nemotron_h_stated_ssm_cache_dtype_is_the_state_the_engines_store(tmp_path: Path) -> None:
    from kvcalc.engine.vllm import VLLMKVCache, vllm_kv_cache

    # Nemotron-3's config.json states "mamba_ssm_cache_dtype": "float32" (public copies of
    # nvidia/Nemotron-Cascade-2-30B-A3B's), and vLLM 0.19's
    # NemotronHForCausalLMConfig.verify_and_update_config sets --mamba-ssm-cache-dtype auto to
    # the config's value (float16 when absent: the bf16-sized state above). With it, the 56B's
    # Mamba page is arch-2026 section 5's float32 one with no option given: 16,900,096 B.
    data = nemotron("nemotron-h-56b") | {"mamba_ssm_cache_dtype": "float32"}
    model = load_hf_config(write(tmp_path, data), "nemotron-h-56b", "nemotron-h-56b")
    assert model.ssm_state_dtype == "fp32"
    assert kv_bytes_per_sequence(model, 1, BF16) == 54 * 16_900_096 + 40_960
    cache = vllm_kv_cache(model, 80 << 30, max_model_len=8_192, kv_dtype=BF16)
    assert isinstance(cache, VLLMKVCache)
    assert cache.grouping.page_bytes == 16_908_288
    assert load_hf_config(FIXTURES / "nemotron-h-56b").ssm_state_dtype is None


def test_nemotron_h_8b_reads_the_released_key_names() -> None:
    model = load_hf_config(FIXTURES / "nemotron-h-8b")
    # 24 Mamba-2 + 4 attention layers; 4 x 2 x 8 x 128 x 2 = 16,384 B/token.
    assert model.num_layers == 28 and kv_bytes_per_token(model, BF16) == 16_384
    assert model.mixer_at(0) == spec.Mamba2(
        n_heads=128, head_dim=64, n_groups=8, d_state=128, d_conv=4
    )
    assert model.dense_mlp == spec.DenseMLP(24 * 21_504 // 28, gated=False)


def test_nemotron_h_layers_block_type_is_the_same_model(tmp_path: Path) -> None:
    data = nemotron("nemotron-h-8b")
    names = {"M": "mamba", "*": "attention", "-": "mlp"}
    data["layers_block_type"] = [names[c] for c in data.pop("hybrid_override_pattern")]
    model = load_hf_config(write(tmp_path, data), "nemotron-h-8b", "nemotron-h-8b")
    assert model == load_hf_config(FIXTURES / "nemotron-h-8b")


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"hybrid_override_pattern": "MEM*E"}, "MoE blocks (E"),
        ({"hybrid_override_pattern": "M-M*X-"}, "must be blocks M, *, - or E"),
        # 4B's pattern with 8B's widths: 24 MLPs of 21,504 do spread, of 12,288 do not.
        ({"intermediate_size": 12_288}, "24 MLP blocks of 12,288 do not spread evenly over its 28"),
        ({"num_hidden_layers": 50}, "num_hidden_layers: is 50, but hybrid_override_pattern has 52"),
        ({"layers_block_type": ["mamba", "conv"], "hybrid_override_pattern": None}, "'conv'"),
    ],
)
def test_nemotron_h_what_kvcalc_cannot_represent_is_refused(
    tmp_path: Path, changes: dict[str, Any], needle: str
) -> None:
    data = nemotron("nemotron-h-8b") | changes
    assert needle in refusal(write(tmp_path, data))


def test_nemotron_h_without_a_pattern_is_refused_not_the_toy_default(tmp_path: Path) -> None:
    data = nemotron("nemotron-h-8b")
    del data["hybrid_override_pattern"]
    message = refusal(write(tmp_path, data))
    assert "hybrid_override_pattern: missing required field" in message


# ------------------------------------------------------------------ GLM-4.7-Flash (glm4_moe_lite)


def glm_lite(**changes: Any) -> dict[str, Any]:
    """A glm4_moe_lite config stating Glm4MoeLiteConfig's own shape (GLM-4.7-Flash's, per the
    public model cards: 47 layers, 20 heads, q_lora 768, kv_lora 512, 64 + 1 experts, top-4)."""
    return {
        "model_type": "glm4_moe_lite", "vocab_size": 154880, "hidden_size": 2048,
        "intermediate_size": 10240, "moe_intermediate_size": 1536, "num_hidden_layers": 47,
        "num_attention_heads": 20, "num_key_value_heads": 20, "n_shared_experts": 1,
        "n_routed_experts": 64, "kv_lora_rank": 512, "q_lora_rank": 768, "qk_rope_head_dim": 64,
        "v_head_dim": 256, "qk_nope_head_dim": 192, "num_experts_per_tok": 4,
        "max_position_embeddings": 202752, "tie_word_embeddings": False,
        "first_k_dense_replace": 1, "torch_dtype": "bfloat16",
    } | changes  # fmt: skip


def test_glm_lite_caches_an_mla_latent_per_layer(tmp_path: Path) -> None:
    model = load_hf_config(write(tmp_path, glm_lite()))
    # DeepseekV2MLAAttention: the 512 latent plus the 64-wide RoPE key, no K/V factor 2.
    assert kv_bytes_per_token(model, BF16) == 47 * (512 + 64) * 2 == 54_144
    assert [model.ffn_at(i) is model.moe for i in range(3)] == [False, True, True]
    assert model.moe is not None and (model.moe.experts, model.moe.top_k) == (64, 4)


def test_glm_lite_layer_list_must_agree_with_what_vllm_builds(tmp_path: Path) -> None:
    agreeing = glm_lite(mlp_layer_types=["dense"] + ["sparse"] * 46)
    assert load_hf_config(write(tmp_path, agreeing)).moe is not None
    other = glm_lite(mlp_layer_types=["dense"] * 2 + ["sparse"] * 45)
    assert "mlp_layer_types: disagrees with first_k_dense_replace" in refusal(
        write(tmp_path, other)
    )


def test_glm_lite_with_an_indexer_is_refused(tmp_path: Path) -> None:
    message = refusal(write(tmp_path, glm_lite(index_topk=2048)))
    assert "index_topk: a sparse-attention indexer is not modelled" in message


# ------------------------------------------------------------------ GLM-5 (glm_moe_dsa)


def test_glm_5_is_indexed_mla_on_78_layers_as_its_report_says() -> None:
    from kvcalc.engine.weights import param_counts

    model = load_hf_config(FIXTURES / "glm-5")
    # The GLM-5 report's table: 3 dense and 75 MoE layers, one MTP layer; 744B total.
    moe_layers = [i for i in range(model.num_layers) if model.moe_layout.is_moe(i)]
    assert (model.num_layers, len(moe_layers), moe_layers[0]) == (78, 75, 3)
    assert model.mtp_layers == 1
    assert abs(param_counts(model).total / 744e9 - 1) < 0.001
    # vLLM 0.19 DeepseekV2 with index_topk: per layer the 512 + 64 latent (bf16) and the
    # indexer's fp8 key of 128 with its fp32 scale.
    assert kv_bytes_per_token(model, BF16) == 78 * ((512 + 64) * 2 + 132)


def test_glm_5_indexer_types_do_not_change_what_vllm_caches(tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "glm-5" / "config.json").read_text())
    data["indexer_types"] = ["full", "shared", "shared", "full"] * 19 + ["full", "full"]
    model = load_hf_config(write(tmp_path, data))
    assert kv_bytes_per_token(model, BF16) == kv_bytes_per_token(
        load_hf_config(FIXTURES / "glm-5"), BF16
    )
    data["mlp_layer_types"] = ["dense"] * 78  # not what first_k_dense_replace 3 builds
    assert "mlp_layer_types: disagrees" in refusal(write(tmp_path / "b", data))
