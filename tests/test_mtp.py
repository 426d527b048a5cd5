"""Multi-token-prediction layers: read from each family's config.json, stated by `size` with
what they would add, and counted in no total (vLLM and SGLang load them only with speculative
decoding).

References, by hand from the engines' rules (shared/reference/arch-2026.md sec. 7, vLLM 0.33):
- DeepSeek-V4: the MTP layer's index is past num_hidden_layers, so its compress_ratio is 1 and it
  adds "one SWA-only layer (584 B x window)": 584 x 128 = 74,752 B at any context past 128;
- Qwen3.5 / 3.6: Qwen3_5MTP adds mtp_num_hidden_layers full_attention layers, one of Qwen3.5-27B's
  being 2 x 4 KV heads x 256 x 2 B = 4,096 B per token (arch-2026 sec. 3's per-layer figure);
- GLM-4.x: Glm4MoeMTP adds num_nextn_predict_layers decoder layers of its attention: GLM-4.6's
  2 x 8 x 128 x 2 = 4,096 B per token;
- MiniMax-M2: the MTP modules' weights are dropped ("Drop spec-decode (MTP) layers"): none.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from report_check import run_json
from specs import registry_model
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine.kv import cache_format, kv_size
from kvcalc.engine.units import dtype
from kvcalc.registry.hf import load_hf_config

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
K128 = 131_072


@pytest.mark.parametrize(
    ("model_id", "kv", "per_token", "per_sequence_at_128k"),
    [
        ("deepseek-v4-flash", "fp8", 584, 584 * 128),
        ("deepseek-v4-pro", "fp8", 584, 584 * 128),
        ("qwen3.5-27b", "bf16", 4_096, 4_096 * K128),
        ("qwen3.6-27b", "bf16", 4_096, 4_096 * K128),
        ("glm-4.6", "bf16", 4_096, 4_096 * K128),
    ],
)
def test_the_mtp_layer_adds_what_the_engines_rules_give(
    model_id: str, kv: str, per_token: int, per_sequence_at_128k: int
) -> None:
    model = registry_model(model_id)
    size = kv_size(model, K128, cache_format(model, dtype(kv)))
    assert size.mtp is not None and size.mtp.layers == 1
    assert size.mtp.bytes_per_token == per_token
    assert size.mtp.bytes == per_sequence_at_128k
    # Counted in no total: the groups are the model's num_layers alone.
    assert sum(g.layers for g in size.groups) == model.num_layers
    assert size.bytes_per_sequence == sum(g.bytes for g in size.groups)


@pytest.mark.parametrize("model_id", ["minimax-m2", "kimi-k2", "llama3.1-8b", "gemma-4-31b"])
def test_a_model_without_a_loaded_mtp_layer_states_none(model_id: str) -> None:
    model = registry_model(model_id)
    assert kv_size(model, 8192, cache_format(model, dtype("bf16"))).mtp is None


@pytest.mark.parametrize(
    ("fixture", "layers"),
    [("deepseek-v3", 1), ("deepseek-v3.2-exp", 1), ("glm-4.6", 1), ("kimi-k2", 0)],
)
def test_num_nextn_predict_layers_is_read_from_the_config(fixture: str, layers: int) -> None:
    assert load_hf_config(FIXTURES / fixture / "config.json").mtp_layers == layers


def test_a_config_without_the_field_has_no_mtp_layer() -> None:
    # DeepSeek-V2-Lite's config.json states no num_nextn_predict_layers: no MTP layer, no
    # warning of a default taken (absence is the rule, not another model's value).
    spec = load_hf_config(FIXTURES / "deepseek-v2-lite" / "config.json")
    assert spec.mtp_layers == 0
    assert not any("num_nextn_predict_layers" in w for w in spec.assumed)


def test_size_says_the_mtp_layer_and_its_bytes(runner: CliRunner) -> None:
    result = runner.invoke(app, ["size", "deepseek-v4-flash", "--ctx", "128k"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "MTP: 1 multi-token-prediction layer" in text
    assert "not counted" in text and "speculative decoding" in text
    assert "584 B per token, 74,752 B per sequence here" in text
    doc = run_json(runner, "size", "qwen3.6-27b", "--ctx", "128k")
    (context,) = doc["contexts"]
    assert context["mtp"]["kv_bytes_per_token"] == 4_096
    assert context["mtp"]["layers"] == 1
    assert context["kv_bytes_per_sequence"] == sum(
        g["kv_bytes_per_sequence"] for g in context["groups"]
    )
