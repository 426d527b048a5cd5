"""Gemma 4 (issue 17): full layers of global_head_dim, sliding layers with their window, the
KV-shared layers that store nothing, per-layer embeddings and the towers.

Every expected figure is worked by hand below from the official config values (each registry
file's ``source``; tests/fixtures/hf/gemma-4-*/config.json) and the engines' rules as
/work/shared/reference/arch-2026.md section 2 states them, not computed by the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from specs import registry_model
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine import sglang, vllm
from kvcalc.engine.kv import CacheFormat, kv_bytes_per_sequence, kv_bytes_read_per_sequence
from kvcalc.engine.kv import kv_bytes_per_token as kv_per_token
from kvcalc.engine.units import dtype
from kvcalc.engine.weights import param_counts
from kvcalc.registry.hf import load_hf_config
from kvcalc.registry.load import RegistryError
from kvcalc.registry.schema import Architecture

BF16, FP8 = dtype("bf16"), dtype("fp8")
K128 = 131_072
FIXTURES = Path(__file__).parent / "fixtures" / "hf"


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name / "config.json").read_text("utf-8"))
    return data


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# ------------------------------------------------------------- arch-2026.md worked example


def test_26b_a4b_vllm_worked_example() -> None:
    """arch-2026.md section 2, recomputed from the 26B-A4B config (hidden 2816, 30 layers,
    5 sliding : 1 full, sliding 8 KV heads x head_dim 256 with window 1024, full layers
    num_global_key_value_heads 2 x global_head_dim 512 since attention_k_eq_v), bf16, TP 1,
    16-token blocks."""
    model = registry_model("gemma-4-26b-a4b")
    specs = vllm.layer_cache_specs(model, 1, BF16, 16, K128)
    # Per token: full 2 x 2 x 512 x 2 = 4,096 B; sliding 2 x 8 x 256 x 2 = 8,192 B.
    by_kind = {s.kind: s for s in specs}
    assert (by_kind["full"].bytes_per_token, by_kind["sliding"].bytes_per_token) == (4096, 8192)
    grouping = vllm.group_layers(specs)
    # Unify doubles the full layers' block to 32 (their page 32 x 4,096 = 16 x 8,192); 25 and 5
    # layers, 25 >= 1.5 x 5, so groups of 5: five sliding groups and one full group.
    assert sorted((g.spec.kind, g.spec.block_size, len(g.layers)) for g in grouping.groups) == [
        ("full", 32, 5),
        *[("sliding", 16, 5)] * 5,
    ]
    # bytes_per_block = 5 layers x 131,072 B = 655,360.
    assert vllm.stage_bytes_per_block(grouping, range(30)) == 5 * 16 * 8192 == 655_360
    # At 128k, steady decode (nothing in flight): the full group 131,072 / 32 = 4,096 blocks,
    # each sliding group cdiv(1,023, 16) + 1 = 65 blocks: 4,096 + 5 x 65 = 4,421 blocks.
    assert vllm.blocks_per_request(grouping, K128, 0) == 4096 + 5 * 65 == 4421
    # Full = 5 x 131,072 x 4,096 = 2,684,354,560 B; sliding 25 x 65 x 16 x 8,192 = 212,992,000 B;
    # about 2.90 GB together (the pool charges 4,421 x 655,360 = 2,897,346,560 B).
    full, sliding = 5 * K128 * 4096, 25 * 65 * 16 * 8192
    assert (full, sliding) == (2_684_354_560, 212_992_000)
    assert 4421 * 655_360 == full + sliding == 2_897_346_560


def test_26b_a4b_fp8_halves_and_tp4_splits_the_heads() -> None:
    model = registry_model("gemma-4-26b-a4b")
    # fp8 halves both figures: 2,048 B and 4,096 B per token and layer.
    assert kv_per_token(model, FP8) * 2 == kv_per_token(model, BF16) == 25 * 8192 + 5 * 4096
    # TP 4: the 2 global heads become 1 per rank (replicated x 2), the 8 sliding heads 2 per rank.
    rank = model.per_rank(4)
    heads = {m.kind: m.kv_head_count() for m in rank.mixer_pattern}
    assert heads == {"full": 1, "sliding": 2}


# ------------------------------------------------------------- KV-shared layers (E2B)

# E2B: 35 layers, 4 sliding : 1 full (full at 4, 9, ..., 34), num_kv_shared_layers 20, so layers
# 0-14 store a cache (12 sliding, 3 full) and 15-34 read layer 13's or 14's. One KV head: a
# sliding layer 2 x 1 x 256 x 2 = 1,024 B per token, a full one 2 x 1 x 512 x 2 = 2,048 B.
E2B_SLIDING, E2B_FULL = 1024, 2048


def test_e2b_shared_layers_store_nothing() -> None:
    model = registry_model("gemma-4-e2b")
    assert [model.mixer_at(i).owns_cache for i in range(35)] == [True] * 15 + [False] * 20
    # 512-token window: 12 x 512 x 1,024 + 3 x 131,072 x 2,048 at 128k.
    assert kv_bytes_per_sequence(model, K128, BF16) == 12 * 512 * 1024 + 3 * K128 * 2048


def test_e2b_decode_reads_the_shared_caches_again() -> None:
    """A shared layer attends over its source's cache: 16 sliding and 4 full shared layers read
    layer 13's 512 tokens and layer 14's 128k once more per step."""
    model = registry_model("gemma-4-e2b")
    stored = 12 * 512 * E2B_SLIDING + 3 * K128 * E2B_FULL
    reread = 16 * 512 * E2B_SLIDING + 4 * K128 * E2B_FULL
    assert kv_bytes_read_per_sequence(model, K128, BF16) == stored + reread


def test_e2b_vllm_gives_shared_layers_no_page() -> None:
    """vLLM: kv_sharing_target_layer_name layers report no spec. The 15 stored layers: sliding
    pages 16 x 1,024 are half the full ones 16 x 2,048, so the sliding block doubles to 32;
    12 sliding and 3 full layers, 12 >= 1.5 x 3, groups of 3: four sliding groups, one full."""
    model = registry_model("gemma-4-e2b")
    specs = vllm.layer_cache_specs(model, 1, BF16, 16, K128)
    assert len(specs) == 15
    grouping = vllm.group_layers(specs)
    assert sorted((g.spec.kind, g.spec.block_size, len(g.layers)) for g in grouping.groups) == [
        ("full", 16, 3),
        *[("sliding", 32, 3)] * 4,
    ]
    assert vllm.stage_bytes_per_block(grouping, range(35)) == 3 * 16 * 2048
    # At 128k with 8,192 tokens in flight: 131,072 / 16 = 8,192 full blocks; each sliding group
    # cdiv(511 + 8,192, 32) + 1 = 273.
    assert vllm.blocks_per_request(grouping, K128, 8192) == 8192 + 4 * 273


def test_e2b_sglang_pools_a_row_for_every_layer() -> None:
    """SGLang 0.5.23 sizes its pools over every layer of layer_types (HybridSWAPoolConfigurator:
    len(swa_attention_layer_ids), len(full_attention_layer_ids)): the 20 shared layers get rows
    like their sources', 28 sliding and 7 full in all."""
    model = registry_model("gemma-4-e2b")
    cells = sglang.stage_cells(model, range(35), 1, CacheFormat.uniform(BF16), True)
    assert (cells.swa_layers, cells.full_layers) == (28, 7)
    assert (cells.swa_bytes_per_token, cells.full_bytes_per_token) == (
        28 * E2B_SLIDING,
        7 * E2B_FULL,
    )


# ------------------------------------------------------------- weights

#: Per-layer embeddings: vocab_size_per_layer_input x (layers x hidden_size_per_layer_input).
PLE_TABLE = {"gemma-4-e2b": 262_144 * 35 * 256, "gemma-4-e4b": 262_144 * 42 * 256}


@pytest.mark.parametrize("model_id", sorted(PLE_TABLE))
def test_per_layer_embeddings_are_embedding_parameters(model_id: str) -> None:
    counts = param_counts(registry_model(model_id))
    hidden = registry_model(model_id).hidden_size
    assert counts.embedding == 262_144 * hidden + PLE_TABLE[model_id]


def test_e2b_weights_against_the_model_card() -> None:
    """Model card: 5.1B with embeddings, 2.3B effective (without the per-layer tables).

    By hand, E2B (hidden 1536, intermediate 6144, 8 q heads, one KV head):
    - embeddings 262,144 x 1,536 = 402,653,184; PLE table 262,144 x 35 x 256 = 2,348,810,240;
    - attention: 12 sliding x (q 2,048 + k 256 + v 256 + o 2,048) x 1,536 = 84,934,656 and
      3 full x (4,096 + 512 + 512 + 4,096) x 1,536 = 42,467,328; the 20 shared layers q and o
      only: 16 x 4,096 x 1,536 + 4 x 8,192 x 1,536 = 150,994,944;
    - MLP 3 x 1,536 x 6,144 = 28,311,552 per layer, double on the 20 shared ones: 55 x that =
      1,557,135,360;
    - PLE per layer: projection slice, gate and projection 3 x 1,536 x 256 = 1,179,648, x 35 =
      41,287,680;
    - vision 168,517,632 and audio 307,183,904 (below), norms 163,072 + PLE norms.
    """
    counts = param_counts(registry_model("gemma-4-e2b"))
    attention = 84_934_656 + 42_467_328 + 150_994_944
    assert counts.mixers == attention
    assert counts.dense_mlp == 1_557_135_360 + 41_287_680
    text = 402_653_184 + 2_348_810_240 + attention + counts.dense_mlp
    assert counts.total == text + counts.encoder + counts.norms
    assert counts.total == pytest.approx(5.1e9, rel=0.01)
    effective = counts.total - counts.encoder - PLE_TABLE["gemma-4-e2b"]
    assert effective == pytest.approx(2.3e9, rel=0.02)


def test_audio_tower_by_hand() -> None:
    """Gemma4AudioModel with the E2B config (hidden 1024, 12 layers, 8 heads, kernel 5,
    channels 128 / 32, output 1536) and embed_audio into hidden 1536:
    stem 9 x 128 + 128 + 9 x 128 x 32 + 32 + 32 x 32 x 1,024 = 1,086,752;
    per block: feed-forward 2 x (8 x 1,024^2 + 2 x 1,024) = 16,781,312, attention
    5 x 1,024^2 + 128 = 5,243,008, light conv 3 x 1,024^2 + 5 x 1,024 + 2 x 1,024 = 3,152,896,
    norms 3,072: 25,180,288, x 12 = 302,163,456; head 1,024 x 1,536 + 1,536 + 1,536 x 1,536 =
    3,933,696. Total 307,183,904."""
    audio = registry_model("gemma-4-e2b").audio
    assert audio is not None
    assert audio.params() == 1_086_752 + 302_163_456 + 3_933_696 == 307_183_904


def test_towers_are_whole_on_every_rank() -> None:
    """vLLM's gemma4_mm builds both towers with transformers' AutoModel: not split by TP."""
    from kvcalc.engine.weights import audio_tensors, encoder_tensors

    model = registry_model("gemma-4-e4b")
    assert model.vision is not None and model.audio is not None
    towers = (*encoder_tensors(model.vision), *audio_tensors(model.audio))
    assert all(t.params_per_rank(4) == t.params for t in towers)
    assert sum(t.params for t in towers) == param_counts(model).encoder


# ------------------------------------------------------------- a public vLLM start-up log

def test_31b_log_of_vllm_issue_39734() -> None:
    """https://github.com/vllm-project/vllm/issues/39734 (google/gemma-4-31B-it, vLLM
    0.19.1rc1, max model len 262144, bf16): "GPU KV cache size: 37,392 tokens" and "Maximum
    concurrency for 262,144 tokens per request: 1.53x". The run's max_num_batched_tokens is not
    shown; 2,048 is vLLM's default for it (vllm-project/recipes#572: "vLLM's default
    max_num_batched_tokens of 2048" for this family).

    By hand: 50 sliding layers (16 KV heads x 256, 16,384 B per token) and 10 full ones (4 x 512,
    8,192 B): the full block doubles to 32; groups of 10, five sliding and one full. The token
    line is num_blocks // 6 x 16 = 37,392, so num_blocks is 14,022 to 14,027. A request takes
    262,144 / 32 = 8,192 full blocks and 5 x (cdiv(1,023 + 2,048, 16) + 1) = 5 x 193 = 965
    sliding ones: 9,157; 14,022 / 9,157 = 1.531 and 14,027 / 9,157 = 1.532, logged as 1.53x."""
    model = registry_model("gemma-4-31b")
    grouping = vllm.group_layers(vllm.layer_cache_specs(model, 1, BF16, 16, 262_144))
    request = vllm.blocks_per_request(grouping, 262_144, 2048)
    assert request == 8192 + 5 * 193
    pools = [n for n in range(13_000, 15_000) if vllm.kv_cache_size_tokens(n, grouping) == 37_392]
    assert pools == list(range(14_022, 14_028))
    assert {round(vllm.max_concurrency(n, request), 2) for n in pools} == {1.53}


# ------------------------------------------------------------- import: refusals


def test_import_refuses_a_stated_per_layer_config(tmp_path: Path) -> None:
    data = fixture("gemma-4-31b")
    data["text_config"]["per_layer_config"] = {"5": {"head_dim": 512}}
    with pytest.raises(RegistryError, match="text_config.per_layer_config: .* not read"):
        load_hf_config(write(tmp_path, data))


def test_import_refuses_sharing_every_layer(tmp_path: Path) -> None:
    data = fixture("gemma-4-e2b")
    data["text_config"]["num_kv_shared_layers"] = 35
    with pytest.raises(RegistryError, match="num_kv_shared_layers: must be below"):
        load_hf_config(write(tmp_path, data))


def test_import_refuses_a_shared_type_no_layer_stores(tmp_path: Path) -> None:
    data = fixture("gemma-4-e2b")
    text = data["text_config"]
    text["num_hidden_layers"] = 4
    text["layer_types"] = ["sliding_attention"] * 3 + ["full_attention"]
    text["num_kv_shared_layers"] = 1
    with pytest.raises(RegistryError, match="layer 3 is full attention .* no earlier full"):
        load_hf_config(write(tmp_path, data))


def test_import_refuses_moe_without_its_experts(tmp_path: Path) -> None:
    data = fixture("gemma-4-26b-a4b")
    del data["text_config"]["top_k_experts"]
    with pytest.raises(RegistryError, match="top_k_experts: must be stated"):
        load_hf_config(write(tmp_path, data))


def test_import_refuses_all_bidirectional_attention(tmp_path: Path) -> None:
    data = fixture("gemma-4-e2b")
    data["text_config"]["use_bidirectional_attention"] = "all"
    with pytest.raises(RegistryError, match="use_bidirectional_attention: unsupported entry"):
        load_hf_config(write(tmp_path, data))


def test_k_eq_v_off_keeps_the_sliding_kv_heads_on_full_layers(tmp_path: Path) -> None:
    """Gemma4TextConfig applies num_global_key_value_heads only with attention_k_eq_v."""
    data = fixture("gemma-4-31b")
    data["text_config"]["attention_k_eq_v"] = False
    model = load_hf_config(write(tmp_path, data))
    full = next(m for m in model.mixer_pattern if m.kind == "full")
    assert (full.kv_head_count(), full.listed_head_dim()) == (16, 512)


def test_the_last_layer_is_forced_to_full_attention(tmp_path: Path) -> None:
    data = fixture("gemma-4-26b-a4b")
    data["text_config"]["layer_types"] = ["sliding_attention"] * 30
    model = load_hf_config(write(tmp_path, data))
    assert [model.mixer_at(i).kind for i in (28, 29)] == ["sliding", "full"]


def test_bad_gemma4_config_through_the_cli_is_one_line_and_exit_2(tmp_path: Path) -> None:
    data = fixture("gemma-4-e2b")
    data["text_config"]["num_kv_shared_layers"] = 99
    result = CliRunner().invoke(app, ["size", str(write(tmp_path, data))])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "num_kv_shared_layers" in lines[0]


# ------------------------------------------------------------- registry schema


def test_a_shared_layer_must_name_an_attention_mixer() -> None:
    arch = {
        "hidden_size": 64,
        "num_layers": 2,
        "vocab_size": 100,
        "tied_embeddings": True,
        "num_attention_heads": 4,
        "mixers": {
            "full": {"kind": "full", "kv_heads": 1, "head_dim": 16},
            "shared": {"kind": "shared_kv", "source": "nothing"},
        },
        "pattern": ["full", "shared"],
        "mlp": {"intermediate_size": 128},
    }
    with pytest.raises(ValueError, match="source 'nothing' must name a full, sliding"):
        Architecture.model_validate(arch)
    arch["mixers"]["shared"]["source"] = "full"  # type: ignore[index]
    spec = Architecture.model_validate(arch).to_spec("t", "t", "bf16", 1024)
    shared = spec.mixer_at(1)
    assert not shared.owns_cache and shared.cache_read() == spec.mixer_at(0)


# ------------------------------------------------------------- what vLLM allocates while loading


def test_vllm_up_to_0_29_keeps_the_shared_layers_k_v_slots() -> None:
    """Gemma4Attention of vLLM 0.20.0-0.29.0 builds every layer's QKVParallelLinear, the
    KV-shared layers' too (gemma4.py of those wheels); 0.30.0 on builds their q_proj alone. By
    hand, E4B: the shared layers 24-41 are 15 sliding (K and V of 2 heads x 256) and 3 full
    (2 heads x 512) of hidden 2,560: 15 x 2 x 2 x 256 x 2,560 + 3 x 2 x 2 x 512 x 2,560 =
    55,050,240 parameters, 110,100,480 B in bf16; at TP 2 each rank holds one of the 2 heads."""
    from kvcalc.engine.vllm_loading import unused_kv_projection_bytes
    from kvcalc.engine.vllm_releases import vllm_release
    from kvcalc.engine.weights import released_format

    e4b = registry_model("gemma-4-e4b")
    bf16 = released_format(e4b)
    assert unused_kv_projection_bytes(e4b, range(42), bf16, 1) == 2 * 55_050_240
    assert unused_kv_projection_bytes(e4b, range(42), bf16, 2) == 55_050_240
    # The first 24 layers store their own cache: none of them is KV-shared.
    assert unused_kv_projection_bytes(e4b, range(24), bf16, 1) == 0
    # E2B: 16 sliding and 4 full shared layers of one KV head, hidden 1,536:
    # 16 x 2 x 256 x 1,536 + 4 x 2 x 512 x 1,536 = 18,874,368 parameters; the one head is
    # replicated at TP 2, so each rank holds them all.
    e2b = registry_model("gemma-4-e2b")
    assert unused_kv_projection_bytes(e2b, range(35), released_format(e2b), 2) == 2 * 18_874_368
    assert vllm_release("0.29").shared_kv_projections
    assert not vllm_release("0.30").shared_kv_projections
    assert not vllm_release("0.33").shared_kv_projections


def test_the_multimodal_wrapper_s_per_layer_embedding_buffer() -> None:
    """Gemma4ForConditionalGeneration allocates torch.zeros(max_num_batched_tokens, layers,
    hidden_size_per_layer_input) in the model dtype (gemma4_mm.py, 0.20.0-0.33.0): E4B at
    vLLM serve's 2,048 tokens on a 24 GB card, 2,048 x 42 x 256 x 2 B = 44,040,192 B; the same
    text model without its towers is Gemma4ForCausalLM, which has none."""
    from dataclasses import replace

    from kvcalc.engine.vllm_loading import per_layer_input_buffer_bytes

    e4b = registry_model("gemma-4-e4b")
    assert per_layer_input_buffer_bytes(e4b, 2048) == 44_040_192
    assert per_layer_input_buffer_bytes(replace(e4b, vision=None, audio=None), 2048) == 0
    assert per_layer_input_buffer_bytes(registry_model("gemma-4-31b"), 2048) == 0


def test_vllm_s_weights_term_adds_them_unless_the_weights_are_measured() -> None:
    """The profiler's weights ("Model loading took") for E4B on one RTX 3090 under 0.22.1: the
    weights plus 110,100,480 + 44,040,192 B; under 0.33 the buffer alone; a measured total is
    taken as it is (it holds both)."""
    from kvcalc.engine.deployment import deployment
    from kvcalc.registry.gpus import parse_gpu_set

    e4b, gpu = registry_model("gemma-4-e4b"), parse_gpu_set("rtx-3090")
    dep = deployment(e4b, gpu)
    (weights,) = dep.weights_per_stage
    assert vllm.vllm_weights_per_stage(dep, vllm.vllm_inputs(dep, "0.22.1")) == (
        weights + 110_100_480 + 44_040_192,
    )
    assert vllm.vllm_weights_per_stage(dep, vllm.vllm_inputs(dep, "0.33")) == (
        weights + 44_040_192,
    )
    measured = deployment(e4b, gpu, weights_total_bytes=16 * 2**30)
    assert vllm.vllm_weights_per_stage(measured, vllm.vllm_inputs(measured, "0.22.1")) == (
        16 * 2**30,
    )


# ------------------------------------------------- vLLM's batched-token floor of a prefix LM
# From 0.22 vLLM raises an unset max_num_batched_tokens of a multimodal prefix LM to the largest
# item its processor states (_set_default_max_num_seqs_and_batched_tokens_args, arg_utils.py of
# 0.22.1, 0.25.1, 0.34.0; not 0.21.0). Gemma 4 is one where text_config states
# use_bidirectional_attention "vision" (Gemma4ModelArchConfigConvertor); its largest item is a
# video of 32 frames x (70 soft tokens + 2 + 6) = 2,496 tokens (gemma4_mm.py).


def test_import_reads_the_vision_prefix_and_the_largest_item(tmp_path: Path) -> None:
    data = fixture("gemma-4-26b-a4b")
    assert "use_bidirectional_attention" not in data["text_config"]
    plain = load_hf_config(write(tmp_path, data)).vision
    data["text_config"]["use_bidirectional_attention"] = "vision"
    prefix = load_hf_config(write(tmp_path, data)).vision
    assert plain is not None and prefix is not None
    assert (plain.prefix_lm, prefix.prefix_lm) == (False, True)
    assert plain.max_item_tokens == prefix.max_item_tokens == 32 * 78 == 2496
    # The registry entry states what the official config does (its source: "vision").
    registry = registry_model("gemma-4-26b-a4b").vision
    assert registry is not None
    assert (registry.prefix_lm, registry.max_item_tokens) == (True, 2496)
    assert registry.prefix_window_clamped and prefix.prefix_window_clamped


def batched_tokens(model: str, gpus: str, version: str, *extra: str) -> int:
    args = ["batch", model, "--gpus", gpus, "--engine", "vllm", "--ctx", "32k", "--format",
            "json", "--vllm-version", version, "--weight-dtype", "fp8", *extra]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.stderr
    tokens: int = json.loads(result.stdout)["max_num_batched_tokens"]
    return tokens


def test_vllm_raises_the_26b_a4b_s_default_batched_tokens_to_one_video_from_0_22() -> None:
    # An L40S (44.39 GiB, under 70) takes vllm serve's 2,048; the floor lifts it to 2,496.
    assert batched_tokens("gemma-4-26b-a4b", "l40s", "0.21") == 2048
    for version in ("0.22", "0.25.1", "0.30", "0.34"):
        assert batched_tokens("gemma-4-26b-a4b", "l40s", version) == 2496, version
    # Only an unset value is raised, and only up: a given 2,048 stays, an H100's 8,192 stays.
    assert batched_tokens("gemma-4-26b-a4b", "l40s", "0.25.1",
                          "--max-num-batched-tokens", "2048") == 2048
    assert batched_tokens("gemma-4-26b-a4b", "h100", "0.25.1") == 8192
    # E4B is no prefix LM (the 0.22.1 RTX 3090 Ti log's 2,048-token step fits its line).
    assert batched_tokens("gemma-4-e4b", "l40s", "0.25.1") == 2048


def test_the_floor_lengthens_every_sliding_layer_s_charge() -> None:
    # 0.25.1, 32,768 tokens: the full group's 32-token blocks, 1,024 a request; each of the five
    # sliding groups cdiv(1,023 + T, 16) + 1 blocks: 193 at T = 2,048, 221 at T = 2,496
    # (one step in flight before 0.26). The L40S log of tests/fixtures/vllm_logs prints
    # 321,600 tokens for 12.75 GiB, which only the latter reaches (test_vllm_releases).
    grouping = vllm.group_layers(vllm.layer_cache_specs(
        registry_model("gemma-4-26b-a4b"), 1, dtype("bf16"), 16, 32768))
    assert vllm.blocks_per_request(grouping, 32768, 2048) == 1024 + 5 * 193 == 1989
    assert vllm.blocks_per_request(grouping, 32768, 2496) == 1024 + 5 * 221 == 2129


def test_gemma_4_s_clamped_windows_keep_full_graphs_under_the_composite_backend() -> None:
    # From 0.30 the prefix LM takes the composite backend first on Hopper (TRITON_FLASH_ATTN);
    # Gemma 4 marks its sliding layers mm_prefix_clamp_sliding_window (gemma4.py of 0.30.0 and
    # 0.34.0), so MMPrefixAttentionRouting supports FULL decode graphs, unlike Gemma 3's.
    from kvcalc.engine.vllm import full_decode_graphs
    from kvcalc.engine.vllm_backends import mm_prefix_backend
    from kvcalc.engine.vllm_releases import vllm_release

    model = registry_model("gemma-4-26b-a4b")
    assert mm_prefix_backend(vllm_release("0.29"), model, (9, 0)) is None
    assert mm_prefix_backend(vllm_release("0.30"), model, (9, 0)) == "TRITON_FLASH_ATTN"
    assert full_decode_graphs(model, vllm_release("0.33"), (9, 0))
    assert not full_decode_graphs(registry_model("gemma3-4b"), vllm_release("0.33"), (9, 0))


@pytest.mark.parametrize("model_id", ["gemma-4-e2b", "gemma-4-e4b", "gemma-4-26b-a4b",
                                      "gemma-4-31b"])
def test_every_gemma_4_tower_states_what_the_import_gives(model_id: str) -> None:
    # The HF import gives every Gemma 4 tower vLLM's 2,496-token largest item and its clamped
    # windows (gemma4_mm.py, gemma4.py); the registry entries state the same.
    vision = registry_model(model_id).vision
    assert vision is not None
    assert (vision.max_item_tokens, vision.prefix_window_clamped) == (2496, True)
