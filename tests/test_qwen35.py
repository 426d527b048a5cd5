"""Qwen3.5 / Qwen3.6 (qwen3_5, qwen3_5_moe): Gated DeltaNet with its float32 temporal state,
output-gated full attention, the vision tower, against independent references only:

- shared/reference/arch-2026.md section 3's worked examples, recomputed by hand below from the
  official config values (Qwen3.6-27B's config.json, tests/fixtures/hf/qwen3.6-27b, whose text
  model is Qwen3.5-27B's; Qwen3.5-35B-A3B's as its registry file's sources state them);
- vLLM start-up lines for Qwen3.5-27B (vllm-project/vllm #40691, vLLM 0.19) and Qwen3.6-35B-A3B
  (noonghunna/club-3090 #612, vLLM 0.24, fp8 KV), stored with their
  sources in tests/fixtures/engine_logs/.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from specs import registry_deployment, registry_model
from specs import write_config as write
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine.kv import cache_format, kv_size
from kvcalc.engine.sglang import (
    SGLangConfigError,
    SGLangOptions,
    SGLangPool,
    sglang_pool,
    sglang_version,
)
from kvcalc.engine.units import GiB, dtype
from kvcalc.engine.vllm import (
    VLLMKVCache,
    blocks_per_request,
    group_layers,
    layer_cache_specs,
    stage_bytes_per_block,
    vllm_kv_cache,
)
from kvcalc.engine.weights import param_counts
from kvcalc.registry.hf import load_hf_config
from kvcalc.registry.load import RegistryError

BF16, FP8 = dtype("bf16"), dtype("fp8")
K128 = 131_072
FIXTURES = Path(__file__).parent / "fixtures"
QWEN36_27B = FIXTURES / "hf" / "qwen3.6-27b" / "config.json"

# Qwen3.5-27B / Qwen3.6-27B (config.json): 64 layers, every fourth full attention (16), 4 KV
# heads of 256; 48 Gated DeltaNet layers of 16 key / 48 value heads of 128, conv kernel 4.
GDN_27B_CONV = (2 * 16 * 128 + 48 * 128) * (4 - 1) * 2  # 10,240 x 3 x bf16 = 61,440
GDN_27B_SSM = 48 * 128 * 128 * 4  # float32 (mamba_ssm_dtype): 3,145,728
GDN_27B = GDN_27B_CONV + GDN_27B_SSM  # 3,207,168
ATTN_27B_TOKEN = 2 * 4 * 256 * 2  # K and V, 4 heads x 256, bf16: 4,096 per layer
# Qwen3.5-35B-A3B: 40 layers (10 attention, 2 KV heads of 256); 30 GDN of 16 / 32 heads of 128.
GDN_35B = (2 * 16 * 128 + 32 * 128) * 3 * 2 + 32 * 128 * 128 * 4  # 49,152 + 2,097,152
ATTN_35B_TOKEN = 2 * 2 * 256 * 2  # 2,048


def config() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(QWEN36_27B.read_text(encoding="utf-8"))
    return data


# ---------------------------------------------------------------- the cache (arch-2026 section 3)


def test_27b_state_is_a_bf16_conv_and_a_float32_recurrent_matrix() -> None:
    assert GDN_27B == 3_207_168
    size = kv_size(registry_model("qwen3.5-27b"), K128, BF16)
    gdn, attn = size.groups
    assert (gdn.kind, gdn.layers, gdn.state_bytes) == ("gated_deltanet", 48, 48 * GDN_27B)
    assert 48 * GDN_27B == 153_944_064  # "153.9 MB per sequence"
    # 16 layers x 4,096 = 65,536 B/token: 8.59 GB at 128k.
    assert (attn.layers, attn.bytes) == (16, 16 * ATTN_27B_TOKEN * K128) == (16, 8_589_934_592)


def test_fp8_kv_halves_the_attention_and_leaves_the_states() -> None:
    # "--kv-cache-dtype fp8 affects only the attention layers."
    # The CLI's cache format: KV entries in fp8, the states at the model's (and stated) dtypes.
    model = registry_model("qwen3.5-27b")
    bf16 = kv_size(model, K128, cache_format(model, BF16))
    fp8 = kv_size(model, K128, cache_format(model, FP8))
    assert fp8.groups[0].state_bytes == bf16.groups[0].state_bytes == 48 * GDN_27B
    assert fp8.groups[1].bytes == 16 * (ATTN_27B_TOKEN // 2) * K128


def test_the_states_follow_the_stated_dtype_not_the_kv_dtype() -> None:
    # Without mamba_ssm_dtype the temporal state is at the model dtype: half the bytes.
    model = replace(registry_model("qwen3.5-27b"), ssm_state_dtype=None)
    state = kv_size(model, K128, BF16).groups[0].state_bytes
    assert state == 48 * (GDN_27B_CONV + GDN_27B_SSM // 2)


# ---------------------------------------------------------------- vLLM (arch-2026 section 3)


def test_27b_vllm_block_of_784_tokens_and_171_blocks_at_128k() -> None:
    specs = layer_cache_specs(registry_model("qwen3.5-27b"), 1, BF16, 16, K128)
    gdn, attn = specs[0], specs[3]
    assert gdn.state_bytes == GDN_27B
    # FLASH_ATTN block multiple 16: 16 x ceil(3,207,168 / (16 x 4,096)) = 16 x 49 = 784 tokens;
    # the page is 784 x 4,096 = 3,211,264 B and the state is padded up to it (0.13%).
    assert attn.block_size == 784
    assert attn.page_bytes == gdn.page_bytes == 784 * 4096 == 3_211_264
    g = group_layers(specs)
    # 3 Mamba groups + 1 attention group of 16 layers: 16 x 3,211,264 = 51,380,224 per block.
    assert (g.group_size, len(g.groups)) == (16, 4)
    assert stage_bytes_per_block(g, range(64)) == 51_380_224
    # 128k: ceil(131,072 / 784) = 168 attention blocks + one state page per Mamba group.
    assert blocks_per_request(g, K128, 8192) == 168 + 3 == 171


def test_35b_a3b_vllm_block_of_1056_tokens_and_128_blocks_at_128k() -> None:
    specs = layer_cache_specs(registry_model("qwen3.5-35b-a3b"), 1, BF16, 16, K128)
    assert specs[0].state_bytes == GDN_35B == 2_146_304
    # 16 x ceil(2,146,304 / (16 x 2,048)) = 16 x 66 = 1,056 tokens; 10 layers per group.
    assert specs[3].block_size == 1056
    g = group_layers(specs)
    assert (g.group_size, len(g.groups)) == (10, 4)
    per_block = stage_bytes_per_block(g, range(40))
    assert per_block == 10 * 1056 * ATTN_35B_TOKEN == 21_626_880
    # ceil(131,072 / 1,056) = 125 + 3 = 128 blocks: 2.77 GB per sequence.
    assert blocks_per_request(g, K128, 8192) == 128
    assert 128 * per_block == 2_768_240_640


def logged(line: str, name: str = "vllm-40691-qwen3.5-27b.log") -> str:
    log = (FIXTURES / "engine_logs" / name).read_text(encoding="utf-8")
    match = re.search(line, log)
    assert match, line
    return match.group(1)


def test_the_qwen35_27b_startup_log_of_vllm_40691() -> None:
    tokens = int(logged(r"GPU KV cache size: ([\d,]+) tokens").replace(",", ""))
    concurrency = logged(r"Maximum concurrency for 32,768 tokens per request: ([\d.]+)x")
    # vLLM 0.19's token line is num_blocks // 4 groups x 784 (the smallest block): 290,864 =
    # 371 x 784, so 1,484 to 1,487 blocks; of those only 1,487 / (42 + 3) prints as 33.04
    # (ceil(32,768 / 784) = 42 attention blocks per request, one page per Mamba group). The
    # log states no memory: any budget of 1,487 blocks of 51,380,224 B (hand-derived above).
    for memory in (1487 * 51_380_224, 1488 * 51_380_224 - 1):
        result = vllm_kv_cache(
            registry_model("qwen3.5-27b"),
            memory,
            max_model_len=32_768,
            kv_dtype=BF16,
            max_num_batched_tokens=16_384,
        )
        assert isinstance(result, VLLMKVCache), result
        assert result.num_blocks == 1487
        assert result.blocks_per_request == 45
        assert result.kv_cache_size_tokens == tokens == 290_864
        assert f"{result.max_concurrency:.2f}" == concurrency == "33.04"


def test_the_qwen36_35b_a3b_fp8_startup_log_of_club_3090_612() -> None:
    log = "vllm-club3090-612-qwen3.6-35b-a3b.log"
    available = Fraction(logged(r"Available KV cache memory: ([\d.]+) GiB", log)) * GiB
    tokens = int(logged(r"GPU KV cache size: ([\d,]+) tokens", log).replace(",", ""))
    concurrency = logged(r"Maximum concurrency for 131,072 tokens per request: ([\d.]+)x", log)
    # fp8 KV: 2 x 2 heads x 256 x 1 B = 1,024 B/token per attention layer; the state stays
    # 2,146,304 B (bf16 conv, fp32 recurrent): block 16 x ceil(2,146,304 / 16,384) = 2,096
    # tokens, 10 layers per group: 10 x 2,096 x 1,024 = 21,463,040 B per block; 5.98 GiB
    # (6,420,926,791 B) holds 299 of them.
    result = vllm_kv_cache(
        registry_model("qwen3.6-35b-a3b"),
        int(available),
        max_model_len=K128,
        kv_dtype=FP8,
        max_num_batched_tokens=8192,
    )
    assert isinstance(result, VLLMKVCache), result
    assert result.layer_specs[3].block_size == 2096
    assert stage_bytes_per_block(result.grouping, range(40)) == 21_463_040
    assert result.num_blocks == 299
    # ceil(131,072 / 2,096) = 63 attention blocks + 1 page per Mamba group (kvcalc: vLLM 0.19,
    # "none" mode). The log's run has prefix caching on ("align" mode, 0.24): 2 pages per Mamba
    # group, 63 + 6 = 69 per request; 299 / 69 = 4.33x, and 0.24's token line is
    # int(299 / 69 x 131,072) = 567,978 (vllm-kv-algorithm.md: the 0.20+ formula).
    assert result.blocks_per_request == 63 + 3
    align = result.blocks_per_request + 3
    assert f"{result.num_blocks / align:.2f}" == concurrency == "4.33"
    assert int(Fraction(result.num_blocks, align) * K128) == tokens == 567_978


def test_a_bf16_recurrent_state_would_not_reproduce_the_40691_log() -> None:
    # At bf16 the state is 61,440 + 1,572,864 B: a 16 x ceil(1,634,304 / 65,536) = 400-token
    # block, so vLLM's 784 shows that it stores the float32 state the config states.
    model = replace(registry_model("qwen3.5-27b"), ssm_state_dtype=None)
    assert layer_cache_specs(model, 1, BF16, 16, 32_768)[3].block_size == 400


def test_tp2_splits_the_states_and_the_kv_heads() -> None:
    specs = layer_cache_specs(registry_model("qwen3.5-27b"), 2, BF16, 16, 32_768)
    # Per rank 8 key / 24 value heads: conv (2,048 + 3,072) x 3 x 2, state 24 x 128 x 128 x 4;
    # 2 KV heads: 2,048 B/token, 16 x ceil(1,603,584 / 32,768) = 784 tokens again.
    assert specs[0].state_bytes == (2 * 8 * 128 + 24 * 128) * 3 * 2 + 24 * 128 * 128 * 4
    assert specs[3].block_size == 784 and specs[3].page_bytes == 784 * 2048


# ---------------------------------------------------------------- SGLang (arch-2026 section 8)


SGLANG_059 = SGLangOptions(version=sglang_version("0.5.9"))


def test_sglang_serves_qwen35_from_0_5_9() -> None:
    # sglang 0.5.8's wheel has no srt/models/qwen3_5.py and reads no config mamba_ssm_dtype;
    # 0.5.9's has both (configs/mamba_utils.py: "Config file (config.mamba_ssm_dtype or
    # config.text_config.mamba_ssm_dtype)").
    dep = registry_deployment("qwen3.5-27b", "h100")
    with pytest.raises(SGLangConfigError, match=r"from 0\.5\.9 on, not 0\.5\.8; use 0\.5\.9"):
        sglang_pool(dep, SGLangOptions(version=sglang_version("0.5.8")))


def test_sglang_charges_the_float32_state_per_request() -> None:
    result = sglang_pool(registry_deployment("qwen3.5-27b", "h100"), SGLANG_059)
    assert isinstance(result, SGLangPool), result
    assert result.cells.state_bytes_per_request == 48 * GDN_27B
    assert result.cells.cell_size == 16 * ATTN_27B_TOKEN
    assert result.mamba_cache_size is not None and result.mamba_cache_size > 0


def test_sglang_honours_a_bf16_stated_state() -> None:
    # The config's mamba_ssm_dtype overrides SGLang's float32 default.
    model = replace(registry_model("qwen3.5-27b"), ssm_state_dtype="bf16")
    dep = replace(registry_deployment("qwen3.5-27b", "h100"), model=model)
    dep = replace(dep, cache=cache_format(model, BF16))
    result = sglang_pool(dep, SGLANG_059)
    assert isinstance(result, SGLangPool), result
    assert result.cells.state_bytes_per_request == 48 * (GDN_27B_CONV + GDN_27B_SSM // 2)


# ---------------------------------------------------------------- weights


def test_the_output_gate_doubles_q_proj() -> None:
    gated = registry_model("qwen3.6-27b")
    attn = gated.mixer_at(3)
    pattern = (*gated.mixer_pattern[:3], replace(attn, output_gate=False))
    plain = replace(gated, mixer_pattern=pattern)
    # 16 layers x the gate half of q_proj, 24 heads x 256 x hidden 5,120.
    assert param_counts(gated).total - param_counts(plain).total == 16 * 24 * 256 * 5120


def test_27b_weights_plus_the_mtp_layer_are_the_released_safetensors() -> None:
    # Qwen3.6-27B's model.safetensors.index.json: total_size 55.56 GB of bf16 (eadst.com/blog/325,
    # "Qwen3.6-27B 深度技术解读", citing the index), text model, vision tower and one MTP layer.
    # The MTP layer (vLLM loads it only for speculative decoding): fc 2 x 5,120 -> 5,120; one
    # gated-attention decoder layer (q 2 x 24 x 256, k and v 4 x 256, o 24 x 256, each x 5,120;
    # q/k norms of 256; MLP 3 x 5,120 x 17,408); norms: two pre-fc, two in the layer, one final.
    mtp = (
        2 * 5120 * 5120
        + (2 * 24 * 256 + 2 * 4 * 256 + 24 * 256) * 5120
        + 2 * 256
        + 3 * 5120 * 17408
        + 5 * 5120
    )
    total = param_counts(registry_model("qwen3.6-27b")).total + mtp
    assert abs(total * 2 - 55.56e9) < 0.005e9


# ---------------------------------------------------------------- config.json import


def test_the_official_config_states_the_gate_and_the_state_dtype() -> None:
    model = load_hf_config(QWEN36_27B)
    assert model.ssm_state_dtype == "fp32"
    assert model.mixer_at(3).output_gate and model.mixer_at(3).kind == "full"
    assert model.vision is not None and model.vision.layers == 27
    assert model.assumed == ()  # the file states every key read


def test_qwen3_5_moe_imports_as_the_35b_a3b_entry(tmp_path: Path) -> None:
    # The 35B-A3B's text_config and vision out_hidden_size (its registry file's sources) in the
    # wrapper of the same release family.
    data = config() | {"model_type": "qwen3_5_moe"}
    text = data["text_config"] | {
        "model_type": "qwen3_5_moe_text", "hidden_size": 2048, "num_hidden_layers": 40,
        "num_attention_heads": 16, "num_key_value_heads": 2, "linear_num_value_heads": 32,
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 10, "num_experts": 256,
        "num_experts_per_tok": 8, "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512,
    }  # fmt: skip
    del text["intermediate_size"]
    data["text_config"] = text
    data["vision_config"] = data["vision_config"] | {"out_hidden_size": 2048}
    imported = load_hf_config(write(tmp_path, data))
    registry = registry_model("qwen3.5-35b-a3b")
    layers = range(40)
    assert [imported.mixer_at(i) for i in layers] == [registry.mixer_at(i) for i in layers]
    assert imported.moe == registry.moe and imported.vision == registry.vision
    assert imported.ssm_state_dtype == registry.ssm_state_dtype == "fp32"


@pytest.mark.parametrize(
    ("key", "value"), [("mlp_only_layers", [0]), ("decoder_sparse_step", 2), ("num_experts", 0)]
)
def test_qwen3_5_moe_with_dense_layers_is_refused(tmp_path: Path, key: str, value: object) -> None:
    # vLLM's Qwen3_5DecoderLayer builds the MoE block on every layer of qwen3_5_moe_text.
    data = config() | {"model_type": "qwen3_5_moe"}
    data["text_config"] = data["text_config"] | {"model_type": "qwen3_5_moe_text", key: value}
    with pytest.raises(RegistryError, match=f"text_config.{key}"):
        load_hf_config(write(tmp_path, data))


def test_a_stated_bf16_state_and_no_gate_are_read(tmp_path: Path) -> None:
    data = config()
    data["text_config"] |= {"mamba_ssm_dtype": "bfloat16", "attn_output_gate": False}
    model = load_hf_config(write(tmp_path, data))
    assert model.ssm_state_dtype == "bf16" and not model.mixer_at(3).output_gate


def test_no_stated_state_dtype_keeps_the_model_dtype(tmp_path: Path) -> None:
    data = config()
    del data["text_config"]["mamba_ssm_dtype"]
    model = load_hf_config(write(tmp_path, data))
    assert model.ssm_state_dtype is None  # --mamba-ssm-cache-dtype auto: the model dtype


def test_deepstack_mergers_join_the_projector(tmp_path: Path) -> None:
    data = config()
    data["vision_config"] |= {"deepstack_visual_indexes": [8, 16, 24]}
    vision = load_hf_config(write(tmp_path, data)).vision
    assert vision is not None
    # The merger and three DeepStack mergers: 4608 -> 4608 -> 5120 each; LayerNorms of 1,152
    # (the merger) and 4,608 (each DeepStack one), weight and bias.
    assert vision.projector == ((4608, 4608), (4608, 5120)) * 4
    assert vision.projector_norm == 2 * 1152 + 3 * 2 * 4608


def test_a_text_only_copy_imports_the_language_model(tmp_path: Path) -> None:
    data = config()
    del data["vision_config"]
    assert load_hf_config(write(tmp_path, data)).vision is None
    text = data["text_config"]  # a Qwen3_5ForCausalLM config.json: the text model alone
    model = load_hf_config(write(tmp_path, text | {"tie_word_embeddings": False}))
    assert model.ssm_state_dtype == "fp32" and model.num_layers == 64


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("mamba_ssm_dtype", "int8", "text_config.mamba_ssm_dtype"),
        ("partial_rotary_factor", 0, "partial_rotary_factor"),
    ],
)
def test_unreadable_values_are_refused(
    tmp_path: Path, key: str, value: object, named: str
) -> None:
    data = config()
    data["text_config"][key] = value
    with pytest.raises(RegistryError, match=re.escape(named)):
        load_hf_config(write(tmp_path, data))


def test_the_cli_refuses_a_bad_state_dtype_in_one_line(tmp_path: Path) -> None:
    data = config()
    data["text_config"]["mamba_ssm_dtype"] = "int8"
    result = CliRunner().invoke(app, ["size", str(write(tmp_path, data))])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "mamba_ssm_dtype" in lines[0] and "float32" in lines[0]


def test_a_vision_width_other_than_the_text_model_is_refused(tmp_path: Path) -> None:
    data = config()
    data["vision_config"]["out_hidden_size"] = 4096
    with pytest.raises(RegistryError, match="out_hidden_size"):
        load_hf_config(write(tmp_path, data))


# ---------------------------------------------------------------- Qwen3-VL (the same tower)

QWEN3_VL_4B = FIXTURES / "hf" / "qwen3-vl-4b" / "config.json"


def test_qwen3_vl_moe_imports_as_the_30b_a3b_entry(tmp_path: Path) -> None:
    # The fields of Qwen/Qwen3-VL-30B-A3B-Instruct's config.json that the registry file's source
    # transcribes; deepstack_visual_indexes left out takes Qwen3VLMoeVisionConfig's (8, 16, 24).
    data = json.loads(QWEN3_VL_4B.read_text(encoding="utf-8"))
    data |= {"model_type": "qwen3_vl_moe", "tie_word_embeddings": False}
    data["text_config"] = {
        "model_type": "qwen3_vl_moe_text", "hidden_size": 2048, "num_hidden_layers": 48,
        "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
        "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
        "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "vocab_size": 151936, "max_position_embeddings": 262144, "dtype": "bfloat16",
    }  # fmt: skip
    vision = {k: v for k, v in data["vision_config"].items() if k != "deepstack_visual_indexes"}
    data["vision_config"] = vision | {
        "depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "out_hidden_size": 2048
    }
    imported = load_hf_config(write(tmp_path, data))
    registry = registry_model("qwen3-vl-30b-a3b")
    assert imported.mixer_pattern == registry.mixer_pattern and imported.moe == registry.moe
    assert imported.vision == registry.vision
    assert param_counts(imported) == param_counts(registry)
    # Three DeepStack mergers beside the merger: LayerNorms of 1,152 and 3 x 4,608, with biases.
    assert registry.vision is not None
    assert registry.vision.projector_norm == 2 * 1152 + 3 * 2 * 4608


def test_qwen3_vl_holds_no_recurrent_state() -> None:
    model = load_hf_config(QWEN3_VL_4B)
    assert model.ssm_state_dtype is None and model.tied_embeddings
    # 36 layers x 8 KV heads x 128, K and V, bf16.
    assert kv_size(model, K128, BF16).bytes_per_token == 2 * 36 * 8 * 128 * 2
