"""Liquid AI LFM2 (lfm2, lfm2_moe): gated short-convolution layers beside a few grouped-query
attention layers, against independent references only:

- the engines' rules, read in their own code and worked by hand below from each config.json
  (tests/fixtures/hf/lfm2-*, each with its SOURCE.txt): vLLM 0.33's
  MambaStateShapeCalculator.short_conv_state_shape (conv_dim / tp x (conv_L_cache - 1), dtype
  --mamba-cache-dtype, auto = the model's) and SGLang 0.5.23's Lfm2Config.mamba2_cache_params
  (hidden_size / tp x (conv_L_cache - 1), no temporal state); attention layers are plain
  full-attention GQA pages / pool rows (8 KV heads of hidden / heads = 64 at every size);
- the model cards' parameter counts (1,170,340,608 and 354,483,968);
- a real SGLang 0.5.6.post2 start-up with LiquidAI/LFM2-700M, quoted with its figures in
  shared/reference/sglang-kv-algorithm.md section 4 ("Mamba Cache is allocated.
  max_mamba_cache_size: 85292", "KV Cache is allocated. #tokens: 473854").
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from specs import GPU_16GB, registry_deployment, registry_model
from specs import write_config as write
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine.deployment import deployment
from kvcalc.engine.kv import cache_format, kv_bytes_per_token, kv_size
from kvcalc.engine.sglang import SGLangOptions, SGLangPool, sglang_pool, sglang_version
from kvcalc.engine.spec import Mixer, ModelSpec, ShortConv
from kvcalc.engine.units import GiB, dtype
from kvcalc.engine.vllm import (
    VLLMConfigError,
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

BF16, FP8, FP32 = dtype("bf16"), dtype("fp8"), dtype("fp32")
K128 = 131_072
FIXTURES = Path(__file__).parent / "fixtures" / "hf"
SIZES = ("lfm2-350m", "lfm2-700m", "lfm2-1.2b", "lfm2-2.6b", "lfm2-8b-a1b")

# An attention layer: (K + V) x 8 KV heads x 64 x 2 bytes (bf16) = 2,048 B/token at every size.
ATTN_LAYER = 2 * 8 * 64 * 2
# 6 attention layers in each size but the 2.6B's 8: 12,288 B/token.
ATTN_TOKEN = 6 * ATTN_LAYER
# One conv layer keeps conv_L_cache - 1 = 2 past inputs of its hidden_size channels, in bf16.
# name -> (attention layers, conv layers, bytes of one conv layer's state)
LAYOUT = {
    "lfm2-350m": (6, 10, 1024 * 2 * 2),
    "lfm2-700m": (6, 10, 1536 * 2 * 2),
    "lfm2-1.2b": (6, 10, 2048 * 2 * 2),
    "lfm2-2.6b": (8, 22, 2048 * 2 * 2),
    "lfm2-8b-a1b": (6, 18, 2048 * 2 * 2),
}


def config(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name / "config.json").read_text())
    return data


def layers(model: ModelSpec) -> list[Mixer]:
    return [model.mixer_at(i) for i in range(model.num_layers)]


def refusal(path: Path) -> str:
    with pytest.raises(RegistryError) as info:
        load_hf_config(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return message


# ---------------------------------------------------------------- the cache, from config.json


@pytest.mark.parametrize("name", SIZES)
def test_only_the_attention_layers_grow(name: str) -> None:
    n_attn, n_conv, conv_state = LAYOUT[name]
    model = load_hf_config(FIXTURES / name)
    assert kv_bytes_per_token(model, BF16) == n_attn * ATTN_LAYER
    conv, attn = kv_size(model, K128, BF16).groups
    assert (conv.kind, conv.layers) == ("short_conv", n_conv)
    assert conv.bytes == conv.state_bytes == n_conv * conv_state
    assert (attn.kind, attn.layers, attn.bytes) == ("full", n_attn, n_attn * ATTN_LAYER * K128)


def test_the_700m_state_is_the_61440_bytes_sglang_logged_per_request() -> None:
    # sglang-kv-algorithm.md section 4: "61,440 bytes of conv state per request".
    conv = kv_size(load_hf_config(FIXTURES / "lfm2-700m"), 1, BF16).groups[0]
    assert conv.state_bytes == 10 * 1536 * (3 - 1) * 2 == 61_440


def test_fp8_kv_halves_the_attention_and_leaves_the_conv_state() -> None:
    # vLLM short_conv_state_dtype follows --mamba-cache-dtype (auto: the model's), not the KV's.
    model = registry_model("lfm2-1.2b")
    conv, attn = kv_size(model, K128, cache_format(model, FP8)).groups
    assert conv.state_bytes == 10 * 2048 * 2 * 2 == 81_920
    assert attn.bytes == 6 * 2 * 8 * 64 * 1 * K128


def test_the_registry_files_are_the_imported_configs() -> None:
    for name in SIZES:
        imported = load_hf_config(FIXTURES / name)
        registry = registry_model(name)
        assert layers(imported) == layers(registry), name
        assert (imported.dense_mlp, imported.moe) == (registry.dense_mlp, registry.moe), name
        assert imported.num_layers == registry.num_layers
        assert imported.max_context == registry.max_context == 128_000


def test_full_attn_idxs_and_layer_types_give_the_same_layers(tmp_path: Path) -> None:
    data = config("lfm2-1.2b")
    attention = data.pop("full_attn_idxs")
    data["layer_types"] = ["full_attention" if i in attention else "conv" for i in range(16)]
    assert layers(load_hf_config(write(tmp_path, data))) == layers(registry_model("lfm2-1.2b"))


def test_the_conv_layers_are_short_convs_of_the_hidden_width() -> None:
    model = registry_model("lfm2-1.2b")
    kinds = [model.mixer_at(i).kind for i in range(16)]
    assert [i for i, k in enumerate(kinds) if k == "full"] == [2, 5, 8, 10, 12, 14]
    conv = model.mixer_at(0)
    assert conv == ShortConv(channels=2048, conv_kernel=3)
    assert conv.detail() == "2048 channels, conv 3"


# ---------------------------------------------------------------- refusals


def test_a_conv_dim_other_than_hidden_size_is_refused(tmp_path: Path) -> None:
    # vLLM builds the conv over conv_dim, SGLang and transformers over hidden_size.
    message = refusal(write(tmp_path, config("lfm2-1.2b") | {"conv_dim": 1024}))
    assert "conv_dim: is 1,024, not hidden_size 2,048" in message


def test_a_head_dim_other_than_hidden_over_heads_is_refused(tmp_path: Path) -> None:
    message = refusal(write(tmp_path, config("lfm2-1.2b") | {"head_dim": 128}))
    assert "head_dim: is 128, not hidden_size / num_attention_heads (64)" in message


def test_no_layer_layout_is_refused_not_all_attention(tmp_path: Path) -> None:
    # Lfm2Config would make every layer attention: another model's layout.
    data = config("lfm2-1.2b")
    del data["full_attn_idxs"]
    message = refusal(write(tmp_path, data))
    assert "layer_types: missing required field" in message and "Lfm2Config" in message
    moe = config("lfm2-8b-a1b")
    del moe["layer_types"]
    assert "Lfm2MoeConfig" in refusal(write(tmp_path, moe))


def test_unknown_layer_types_and_indices_past_the_model_are_refused(tmp_path: Path) -> None:
    moe = config("lfm2-8b-a1b")
    moe["layer_types"][0] = "mamba"
    assert "layer_types[0]: unsupported entry 'mamba'" in refusal(write(tmp_path, moe))
    dense = config("lfm2-1.2b") | {"full_attn_idxs": [2, 16]}
    assert "full_attn_idxs: names layer 16" in refusal(write(tmp_path, dense))


def test_a_null_ffn_multiplier_is_refused(tmp_path: Path) -> None:
    # transformers then skips the rounding to block_multiple_of that vLLM still applies.
    data = config("lfm2-1.2b") | {"block_ffn_dim_multiplier": None}
    assert "block_ffn_dim_multiplier" in refusal(write(tmp_path, data))


def test_the_cli_refuses_in_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, config("lfm2-1.2b") | {"conv_dim": 1024})
    result = CliRunner().invoke(app, ["size", str(path)])
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "conv_dim" in result.stderr


# ---------------------------------------------------------------- weights


def test_the_mlp_is_two_thirds_of_block_ff_dim_rounded_to_256() -> None:
    # Lfm2MLP: int(2 x 6656 / 3) = 4437 -> 4608; int(2 x 12288 / 3) = 8192; 10240 -> 6826 -> 6912.
    sizes = {n: registry_model(n).dense_mlp.intermediate_size for n in SIZES[:4]}  # type: ignore[union-attr]
    # The 2.6B's is the 10,752 its file states, not adjusted.
    assert sizes == {"lfm2-350m": 4608, "lfm2-700m": 6912, "lfm2-1.2b": 8192, "lfm2-2.6b": 10752}
    # lfm2_moe's dense layers take intermediate_size as stated.
    assert registry_model("lfm2-8b-a1b").dense_mlp.intermediate_size == 7168  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("name", "card"), [("lfm2-350m", 354_483_968), ("lfm2-1.2b", 1_170_340_608)]
)
def test_parameters_are_the_model_cards_less_the_qk_norms(name: str, card: int) -> None:
    # The model card's count, less the 6 attention layers' QK RMSNorms (64 + 64 values each),
    # which kvcalc does not count (kvcalc/engine/weights.py leaves per-head QK norms out).
    counts = param_counts(load_hf_config(FIXTURES / name))
    assert counts.total == counts.active == card - 6 * 2 * 64


def test_the_700m_and_2_6b_counts_by_hand() -> None:
    # Stated only to three digits (742M, 2.57B); by hand from the shapes, tied embedding
    # 65,536 x hidden, per conv layer 4 x hidden^2 + 3 x hidden, per attention layer 2 x hidden^2
    # + 2 x hidden x 512, per layer a SwiGLU of 3 x hidden x FF and two norms, a final norm:
    def by_hand(hidden: int, ff: int, n_attn: int, n_conv: int) -> int:
        conv = 4 * hidden**2 + 3 * hidden
        attn = 2 * hidden**2 + 2 * hidden * 512
        per_layer = 3 * hidden * ff + 2 * hidden
        embedding = 65_536 * hidden
        return embedding + n_conv * conv + n_attn * attn + (n_attn + n_conv) * per_layer + hidden

    assert by_hand(1536, 6912, 6, 10) == 742_488_576  # 742M with the QK norms (+768)
    assert by_hand(2048, 10752, 8, 22) == 2_569_271_296  # 2.57B (+1,024)
    for name, hand in (("lfm2-700m", 742_488_576), ("lfm2-2.6b", 2_569_271_296)):
        assert param_counts(load_hf_config(FIXTURES / name)).total == hand


def test_the_short_conv_weights_by_hand() -> None:
    # vLLM ShortConv at hidden 2048: in_proj 2048 x 3 x 2048, conv1d 2048 x 3 taps, out_proj
    # 2048 x 2048, no biases (conv_bias false).
    conv = registry_model("lfm2-1.2b").mixer_at(0)
    assert sum(t.params for t in conv.weight_tensors(2048)) == 3 * 2048**2 + 2048 * 3 + 2048**2
    # conv_bias true adds a bias to each: 3 x 2048 (in_proj), 2048 (conv), 2048 (out_proj).
    biased = ShortConv(channels=2048, conv_kernel=3, bias=True)
    assert sum(t.params for t in biased.weight_tensors(2048)) == 16_783_360 + 5 * 2048


def test_tp2_halves_every_conv_weight() -> None:
    # Column-parallel in_proj and conv1d, row-parallel out_proj: all split by channel.
    conv = registry_model("lfm2-1.2b").mixer_at(0)
    per_rank = sum(t.params_per_rank(2) for t in conv.weight_tensors(2048))
    assert per_rank == (3 * 2048**2 + 2048 * 3 + 2048**2) // 2


# ---------------------------------------------------------------- vLLM


def test_vllm_pages_of_the_12b_on_one_rank() -> None:
    specs = layer_cache_specs(registry_model("lfm2-1.2b"), 1, BF16, 16, K128)
    conv, attn = specs[0], specs[2]
    # short_conv_state_shape: (2048, 3 - 1) at bf16 = 8,192 B; the attention page at block 16
    # is 16 x 2 x 8 x 64 x 2 = 32,768 B >= 8,192, so the block stays 16 and the state page is
    # padded up to the attention page.
    assert (conv.kind, conv.state_bytes) == ("mamba", 8192)
    assert (attn.kind, attn.block_size, attn.page_bytes) == ("full", 16, 32_768)
    assert conv.page_bytes == 32_768
    # 6 attention layers set the group size: one attention group of 6 and ceil(10 / 6) = 2
    # state groups, 6 x 32,768 = 196,608 B per block.
    g = group_layers(specs)
    assert (g.group_size, len(g.groups)) == (6, 3)
    assert stage_bytes_per_block(g, range(16)) == 196_608
    # 128k: 131,072 / 16 = 8,192 attention blocks plus one state page per state group.
    assert blocks_per_request(g, K128, 8192) == 8192 + 2


def test_vllm_tp_splits_the_conv_channels() -> None:
    # conv_dim / tp: 1024 x 2 x 2 = 4,096 B at TP 2; KV heads 4 per rank.
    specs = layer_cache_specs(registry_model("lfm2-1.2b"), 2, BF16, 16, K128)
    assert specs[0].state_bytes == 1024 * 2 * 2 == 4096
    assert specs[2].page_bytes == 16 * 2 * 4 * 64 * 2
    # divide(2048, 3) fails in vLLM (as do the 32 query heads).
    with pytest.raises(VLLMConfigError, match="tensor-parallel size 3"):
        layer_cache_specs(registry_model("lfm2-1.2b"), 3, BF16, 16, K128)


def test_vllm_mamba_cache_dtype_sets_the_conv_state() -> None:
    # --mamba-cache-dtype float32: 2048 x 2 x 4 = 16,384 B, still under the 32,768 B page.
    specs = layer_cache_specs(
        registry_model("lfm2-1.2b"), 1, BF16, 16, K128, conv_state_dtype=FP32
    )
    assert specs[0].state_bytes == 16_384 and specs[2].block_size == 16


def test_vllm_kv_cache_on_a_budget_by_hand() -> None:
    # 10,000 blocks of 196,608 B; at max_model_len 32,768: 2,048 + 2 blocks per request.
    result = vllm_kv_cache(
        registry_model("lfm2-1.2b"),
        10_000 * 196_608,
        max_model_len=32_768,
        kv_dtype=BF16,
        max_num_batched_tokens=8192,
    )
    assert isinstance(result, VLLMKVCache), result
    assert result.num_blocks == 10_000
    assert result.blocks_per_request == 2048 + 2
    assert f"{result.max_concurrency:.2f}" == f"{10_000 / 2050:.2f}" == "4.88"
    # vLLM 0.19's token line: num_blocks // 3 groups x 16 tokens.
    assert result.kv_cache_size_tokens == 10_000 // 3 * 16


# ---------------------------------------------------------------- SGLang


HALF_CENT_GIB = Fraction("0.005") * GiB


def lfm2_700m_pool(delta: Fraction = Fraction(0)) -> SGLangPool:
    """SGLang 0.5.6.post2 with the log's free memory ("avail mem=15.33 GB" before the weights,
    13.81 GB after), moved by ``delta`` within its two-decimal rounding."""
    result = sglang_pool(
        deployment(registry_model("lfm2-700m"), GPU_16GB),
        SGLangOptions(
            version=sglang_version("0.5.6.post2"),
            free_before_load_bytes=int(Fraction("15.33") * GiB + delta),
            free_after_load_bytes=int(Fraction("13.81") * GiB - delta),
        ),
    )
    assert isinstance(result, SGLangPool), result
    return result


def test_the_lfm2_700m_sglang_startup_log() -> None:
    r = lfm2_700m_pool()
    # Default mem_fraction_static of a 16,303 MiB GPU: 0.771 (as the log's run used).
    assert r.memory.mem_fraction_static == Fraction("0.771")
    assert r.cell_size == ATTN_TOKEN == 12_288
    assert r.cells.state_bytes_per_request == 61_440
    # handle_max_mamba_cache: rest = 13.81 - 15.33 x 0.229 GiB = 10.29943 GiB; the mamba pool
    # takes 0.9 / 1.9 of it: int(4.878677 GiB / 61,440 B) = 85,261 slots; the attention pool
    # the remaining 5.420756 GiB / 12,288 B = 473,672 tokens (the section-4 prediction).
    assert (r.mamba_cache_size, r.max_total_num_tokens) == (85_261, 473_672)
    # The log's 85,292 slots and 473,854 tokens lie within the rounding of its GiB figures.
    low, high = lfm2_700m_pool(HALF_CENT_GIB), lfm2_700m_pool(-HALF_CENT_GIB)
    assert low.mamba_cache_size <= 85_292 <= high.mamba_cache_size  # type: ignore[operator]
    assert low.max_total_num_tokens <= 473_854 <= high.max_total_num_tokens


def test_sglang_tp2_halves_the_state_and_the_cell() -> None:
    result = sglang_pool(registry_deployment("lfm2-8b-a1b", "2xh100", tp=2), SGLangOptions())
    assert isinstance(result, SGLangPool), result
    # 18 conv layers x 1024 channels x 2 x 2 B; 6 layers x 2 x 4 heads x 64 x 2 B.
    assert result.cells.state_bytes_per_request == 18 * 1024 * 2 * 2 == 73_728
    assert result.cell_size == 6 * 2 * 4 * 64 * 2 == 6144


# ---------------------------------------------------------------- every command


@pytest.mark.parametrize(
    "args",
    [
        ["size", "lfm2-1.2b", "--ctx", "32k"],
        ["size", str(FIXTURES / "lfm2-8b-a1b" / "config.json")],
        ["batch", "lfm2-1.2b", "--gpus", "1xh100"],
        ["batch", "lfm2-1.2b", "--gpus", "1xh100", "--engine", "vllm"],
        ["batch", "lfm2-8b-a1b", "--gpus", "2xh100", "--tp", "2", "--engine", "sglang"],
        ["decode", "lfm2-1.2b", "--gpus", "h100", "--engine", "vllm"],
        ["decode", "lfm2-700m", "--gpus", "h100", "--engine", "sglang"],
        ["sweep", "lfm2-350m", "--gpus", "h100"],
        ["plan", "lfm2-8b-a1b", "--gpus", "h100", "--users", "64", "--ctx", "32k"],
        ["plan", "lfm2-1.2b", "--gpus", "h100", "--users", "64", "--engine", "vllm"],
        ["compare", "lfm2-1.2b", "--gpus", "h100"],
    ],
    ids=lambda a: " ".join(a[:2] + a[3:4]),
)
def test_every_command_runs(args: list[str]) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.stdout + result.stderr


def test_size_json_states_the_conv_state(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["size", "lfm2-1.2b", "--ctx", "128k", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    text = json.dumps(data)
    assert "short_conv" in text
    assert ATTN_TOKEN * K128 + 81_920 in _ints(data)


def test_check_passes_an_lfm2_deployment(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "deployments:\n"
        "  - {name: edge, model: lfm2-1.2b, gpus: 1xh100, engine: vllm, ctx: 32k,\n"
        "     require: {min_batch: 8, min_context: 96k}}\n"
        "  - {name: moe, model: lfm2-8b-a1b, gpus: 2xh100, tp: 2, engine: sglang, ctx: 32k,\n"
        "     require: {min_batch: 8}}\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(app, ["check", str(spec)])
    assert result.exit_code == 0, result.stdout + result.stderr


def _ints(value: Any) -> set[int]:
    if isinstance(value, bool):
        return set()
    if isinstance(value, int):
        return {value}
    if isinstance(value, dict):
        return set().union(*(_ints(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_ints(v) for v in value))
    return set()


# ------------------------------------------------------------------ LFM2-VL (issue 17)


@pytest.mark.parametrize(
    ("model_id", "text_id", "tower", "projector"),
    [
        # SigLIP2 base: 12 layers of 768 (MLP 3072), 256 positions; projector 3072 -> 2048 -> 1024.
        ("lfm2-vl-450m", "lfm2-350m", (12, 768, 3072), (768 * 4, 2048, 1024)),
        # SigLIP2 so400m: 27 layers of 1152 (MLP 4304); projector 4608 -> 2048 -> 2048.
        ("lfm2-vl-1.6b", "lfm2-1.2b", (27, 1152, 4304), (1152 * 4, 2048, 2048)),
    ],
)
def test_lfm2_vl_is_its_text_model_with_the_siglip2_tower_and_projector(
    model_id: str,
    text_id: str,
    tower: tuple[int, int, int],
    projector: tuple[int, int, int],
) -> None:
    # By hand from vLLM 0.19 lfm2_siglip2.py and lfm2_vl.py: each encoder layer is biased q, k,
    # v, o (4 x (h^2 + h)), fc1 and fc2 (2 h m + m + h) and two LayerNorms (4 h); the embedding
    # a biased Linear of 3 x 16 x 16 and a 256-row position table; one post_layernorm; the
    # projector linear_1 and linear_2 with biases and no LayerNorm (projector_use_layernorm
    # false).
    layers, h, m = tower
    inputs, hidden, out = projector
    per_layer = 4 * (h * h + h) + 2 * h * m + m + h + 4 * h
    encoder = layers * per_layer + (3 * 16 * 16 * h + h) + 256 * h + 2 * h
    projector_params = inputs * hidden + hidden + hidden * out + out
    vl, text = registry_model(model_id), registry_model(text_id)
    counts, text_counts = param_counts(vl), param_counts(text)
    assert counts.encoder == encoder + projector_params
    # The language model, and so the cache, is the text model's.
    assert counts.total - counts.encoder == text_counts.total
    assert kv_bytes_per_token(vl, dtype("bf16")) == kv_bytes_per_token(text, dtype("bf16"))
    # The names' sizes: 450M (LFM2-350M and SigLIP2's 86M base), 1.6B (1.2B and 400M).
    stated = {"lfm2-vl-450m": 0.45e9, "lfm2-vl-1.6b": 1.6e9}[model_id]
    assert abs(counts.total / stated - 1) < 0.01


def test_an_lfm2_vl_config_imports_as_its_registry_entry() -> None:
    # tests/fixtures/hf/lfm2-vl-1.6b: the port's pinned copy of the official config.json.
    model = load_hf_config(FIXTURES / "lfm2-vl-1.6b", "lfm2-vl-1.6b", "LFM2-VL-1.6B")
    entry = registry_model("lfm2-vl-1.6b")
    assert param_counts(model) == param_counts(entry)
    assert model.vision == entry.vision
    assert [model.mixer_at(i) for i in range(16)] == [entry.mixer_at(i) for i in range(16)]


def test_an_lfm2_vl_projector_layernorm_is_counted(tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "lfm2-vl-1.6b" / "config.json").read_text())
    data["projector_use_layernorm"] = True  # Lfm2VlConfig's default
    model = load_hf_config(write(tmp_path, data))
    plain = load_hf_config(FIXTURES / "lfm2-vl-1.6b")
    # nn.LayerNorm(1152 x 4): weight and bias.
    assert param_counts(model).encoder - param_counts(plain).encoder == 2 * 4 * 1152
