"""NVIDIA ModelOpt checkpoints (quant_method "modelopt": the nvidia/*-NVFP4 and *-FP8 repos),
read as vLLM 0.19's ModelOptQuantConfigBase.from_config reads them
(vllm/model_executor/layers/quantization/modelopt.py).

References, by hand from vLLM 0.19's ModelOptNvFp4LinearMethod.create_weights: the weight is
uint8 [out, in / 2] (two E2M1 values a byte), weight_scale float8_e4m3fn [out, in / group_size]
(group_size 16 unless stated), plus the fp32 scalars weight_scale_2 and input_scale (8 bytes a
matrix, not counted). The quantization_config below is the shape of nvidia's MiniMax-M2 NVFP4
release as public test code copies it (ignore: lm_head, the router, every self_attn).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from specs import write_config

from kvcalc.errors import RegistryError
from kvcalc.registry.hf import load_hf_config
from kvcalc.registry.hf.base import Where
from kvcalc.registry.hf.quantization import checkpoint_format

WHERE = Where(Path("config.json"))

MINIMAX_M2_NVFP4 = {
    "quant_algo": "NVFP4",
    "quant_method": "modelopt",
    "weights": {"num_bits": 4, "type": "float", "group_size": 16},
    "input_activations": {"num_bits": 4, "type": "float", "group_size": 16},
    "ignore": ["lm_head", "model.layers.*.block_sparse_moe.gate", "model.layers.*.self_attn*"],
}


def test_nvfp4_is_four_bits_and_an_fp8_scale_per_16() -> None:
    fmt = checkpoint_format(WHERE, MINIMAX_M2_NVFP4, "bf16")
    assert fmt is not None
    # MiniMax-M2's expert down_proj: 3,072 out x 1,536 in.
    rows, cols = 3_072, 1_536
    by_hand = rows * cols // 2 + rows * (cols // 16)  # uint8 pairs + one e4m3 byte per 16
    assert fmt.experts.matrix_bits(rows, cols) == 8 * by_hand
    assert fmt.layers == fmt.experts and fmt.experts.name == "nvfp4"
    # The wildcard ignore entries keep every attention layer at the model dtype.
    assert fmt.format_for("mixer") == fmt.other and fmt.other.name == "bf16"
    assert fmt.format_for("routed_experts") == fmt.experts


def test_the_legacy_hf_quant_config_form_and_a_stated_group() -> None:
    legacy = {
        "quant_method": "modelopt",
        "quantization": {
            "quant_algo": "NVFP4",
            "group_size": 32,
            "kv_cache_quant_algo": "FP8",
            "exclude_modules": ["lm_head"],
        },
    }
    fmt = checkpoint_format(WHERE, legacy, "bf16")
    assert fmt is not None
    assert fmt.layers.matrix_bits(16, 64) == 8 * (16 * 64 // 2 + 16 * 2)
    assert fmt.format_for("mixer") == fmt.layers  # attention quantized: not excluded


@pytest.mark.parametrize(
    ("algo", "bits_16x64"),
    [
        ("FP8", 16 * 64 * 8 + 32),  # ModelOptFp8LinearMethod: one fp32 weight_scale per tensor
        ("FP8_PER_CHANNEL_PER_TOKEN", 16 * 64 * 8 + 16 * 32),  # one fp32 scale per output row
    ],
)
def test_modelopt_fp8(algo: str, bits_16x64: int) -> None:
    fmt = checkpoint_format(WHERE, {"quant_method": "modelopt", "quant_algo": algo}, "bf16")
    assert fmt is not None and fmt.layers.matrix_bits(16, 64) == bits_16x64


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ({"quant_algo": "MIXED_PRECISION", "quantized_layers": {}}, "MIXED_PRECISION"),
        ({}, "quant_algo: missing required field"),
        ({"quant_algo": "NVFP4", "group_size": 0}, "group_size: must be a positive integer"),
    ],
)
def test_what_is_not_read_is_refused(config: dict[str, Any], needle: str) -> None:
    with pytest.raises(RegistryError, match=needle):
        checkpoint_format(WHERE, {"quant_method": "modelopt", **config}, "bf16")


def test_an_nvfp4_minimax_m2_config_imports_with_its_experts_in_nvfp4(tmp_path: Path) -> None:
    import json

    from kvcalc.engine.weights import released_format, weight_bytes

    fixture = Path(__file__).parent / "fixtures" / "hf" / "minimax-m2" / "config.json"
    data = json.loads(fixture.read_text()) | {"quantization_config": MINIMAX_M2_NVFP4}
    model = load_hf_config(write_config(tmp_path, data))
    fp8 = load_hf_config(fixture)
    nvfp4_bytes = weight_bytes(model, released_format(model))
    # The experts are nearly all of MiniMax-M2's 230B: 4.5 bits a value against fp8-block's
    # 8 and a bit, so the NVFP4 release weighs a little over half the FP8 one.
    assert 0.5 < nvfp4_bytes / weight_bytes(fp8, released_format(fp8)) < 0.62
