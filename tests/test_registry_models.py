"""The model registry: every required model is present and valid, and its KV cache matches the
reference values.

Golden figures are written as arithmetic from the reference (model-configs.yaml and the seed
texts), not computed by the code under test: for attention,
2 (K and V) x layers x kv_heads x head_dim x 2 bytes (bf16); for MLA,
(kv_lora_rank + qk_rope_head_dim) x layers x 2 bytes (seed 004); DeepSeek-V3.2's indexer adds
index_head_dim fp8 values and one fp32 scale per 128 of them per layer (model-configs-2025.yaml).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from specs import HAND_BUILT, registry_file, registry_model

from kvcalc.engine.kv import kv_bytes_per_sequence, kv_bytes_per_token, kv_size
from kvcalc.engine.spec import ModelSpec
from kvcalc.engine.units import GiB, dtype
from kvcalc.engine.weights import param_counts
from kvcalc.registry.load import check_models, find_model, load_model_file, model_paths

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
    # issue 7: the 2024-2025 additions
    "llama3.3-70b", "mistral-large-2407", "deepseek-v3.1", "deepseek-r1-distill-qwen-7b",
    "deepseek-r1-distill-qwen-14b", "deepseek-r1-distill-qwen-32b", "deepseek-r1-distill-llama-8b",
    "deepseek-r1-distill-llama-70b", "gemma2-2b", "gemma3-1b", "gemma3-4b", "gemma3-12b", "phi-4",
    "glm-4.6", "kimi-k2-thinking", "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-14b",
    "qwen3-30b-a3b", "qwen3-235b-a22b-2507", "qwen3-coder-480b-a35b", "qwq-32b", "minimax-m2",
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
    "mistral-small-3.1-24b": 2 * 40 * 8 * 128 * 2,  # 2501's text model; the Pixtral tower has no KV
    "mixtral-8x7b": 2 * 32 * 8 * 128 * 2,
    "mixtral-8x22b": 2 * 56 * 8 * 128 * 2,
    "qwen2.5-0.5b": 2 * 24 * 2 * 64 * 2,  # 14 x 64 = 896: head_dim 64
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
    # Gemma 4 (issue 17), K and V per KV head (attention_k_eq_v still caches both): sliding
    # layers num_key_value_heads x head_dim 256, full layers global_head_dim 512 with
    # num_global_key_value_heads when attention_k_eq_v; KV-shared layers store nothing.
    # E2B: layers 0-14 store (12 sliding, 3 full at 4, 9, 14), 1 KV head each.
    "gemma-4-e2b": 2 * 12 * 1 * 256 * 2 + 2 * 3 * 1 * 512 * 2,
    # E4B: layers 0-23 store (20 sliding, 4 full at 5, 11, 17, 23), 2 KV heads each.
    "gemma-4-e4b": 2 * 20 * 2 * 256 * 2 + 2 * 4 * 2 * 512 * 2,
    # 26B-A4B: 25 sliding x 8 x 256, 5 full x 2 x 512 (arch-2026.md: 8,192 and 4,096 B).
    "gemma-4-26b-a4b": 2 * 25 * 8 * 256 * 2 + 2 * 5 * 2 * 512 * 2,
    # 31B: 50 sliding x 16 x 256, 10 full x 4 x 512.
    "gemma-4-31b": 2 * 50 * 16 * 256 * 2 + 2 * 10 * 4 * 512 * 2,
    # 12B: 40 sliding x 8 x 256, 8 full x 1 x 512.
    "gemma-4-12b": 2 * 40 * 8 * 256 * 2 + 2 * 8 * 1 * 512 * 2,
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
    "llama3.3-70b": 2 * 80 * 8 * 128 * 2,
    "mistral-large-2407": 2 * 88 * 8 * 128 * 2,
    "deepseek-v3.1": (512 + 64) * 61 * 2,
    "deepseek-r1-distill-qwen-7b": 2 * 28 * 4 * 128 * 2,
    "deepseek-r1-distill-qwen-14b": 2 * 48 * 8 * 128 * 2,
    "deepseek-r1-distill-qwen-32b": 2 * 64 * 8 * 128 * 2,
    "deepseek-r1-distill-llama-8b": 2 * 32 * 8 * 128 * 2,
    "deepseek-r1-distill-llama-70b": 2 * 80 * 8 * 128 * 2,
    "gemma2-2b": 2 * 26 * 4 * 256 * 2,
    "gemma3-1b": 2 * 26 * 1 * 256 * 2,  # one KV head
    "gemma3-4b": 2 * 34 * 4 * 256 * 2,
    "gemma3-12b": 2 * 48 * 8 * 256 * 2,
    "phi-4": 2 * 40 * 10 * 128 * 2,
    "glm-4.6": 2 * 92 * 8 * 128 * 2,
    "kimi-k2-thinking": (512 + 64) * 61 * 2,
    "qwen3-0.6b": 2 * 28 * 8 * 128 * 2,
    "qwen3-1.7b": 2 * 28 * 8 * 128 * 2,
    "qwen3-4b": 2 * 36 * 8 * 128 * 2,
    "qwen3-14b": 2 * 40 * 8 * 128 * 2,
    "qwen3-30b-a3b": 2 * 48 * 4 * 128 * 2,
    "qwen3-235b-a22b-2507": 2 * 94 * 4 * 128 * 2,
    "qwen3-coder-480b-a35b": 2 * 62 * 8 * 128 * 2,
    "qwq-32b": 2 * 64 * 8 * 128 * 2,
    "minimax-m2": 2 * 62 * 8 * 128 * 2,  # all 62 layers softmax, unlike minimax-m1
    # MLA latent + RoPE key at bf16, plus the indexer's 128 fp8 keys and one fp32 scale
    "deepseek-v3.2-exp": (512 + 64) * 61 * 2 + 61 * (128 * 1 + 4),
    "deepseek-v3.2": (512 + 64) * 61 * 2 + 61 * (128 * 1 + 4),  # the Exp architecture, final
    # DeepSeek-V4-Flash at bf16 (plain 512-value rows, 1,024 B) while the window fills: every
    # layer's window row, plus on 21 C4 layers (1,024 + 132 indexer) / 4 = 289 and on 20 C128
    # layers 1,024 / 128 = 8 (a compressed share, rounded up)
    "deepseek-v4-flash": 43 * 1024 + 21 * 289 + 20 * 8,
    # DeepSeek-V4-Pro (compress_ratios [128, 128, 4, 128 x 29, 4]): 30 C4 and 31 C128 layers
    "deepseek-v4-pro": 61 * 1024 + 30 * 289 + 31 * 8,
    "granite-4.0-h-small": 2 * 4 * 8 * 128 * 2,  # 4 attention layers; 36 Mamba-2 hold a state
    "granite-4.0-h-tiny": 2 * 4 * 4 * 128 * 2,
    "granite-4.0-h-micro": 2 * 4 * 8 * 64 * 2,  # head_dim 2048 / 32
    "qwen3-coder-30b-a3b": 2 * 48 * 4 * 128 * 2,
    "qwen3-vl-4b": 2 * 36 * 8 * 128 * 2,  # the vision tower holds no KV
    "qwen3-vl-8b": 2 * 36 * 8 * 128 * 2,
    "qwen3-vl-30b-a3b": 2 * 48 * 4 * 128 * 2,
    # Qwen3.5 / 3.6: only the gated-attention layers (every fourth) grow, KV heads x 256
    "qwen3.5-0.8b": 2 * 6 * 2 * 256 * 2,
    "qwen3.5-2b": 2 * 6 * 2 * 256 * 2,
    "qwen3.5-4b": 2 * 8 * 4 * 256 * 2,
    "qwen3.5-9b": 2 * 8 * 4 * 256 * 2,
    "qwen3.5-27b": 2 * 16 * 4 * 256 * 2,
    "qwen3.6-27b": 2 * 16 * 4 * 256 * 2,
    "qwen3.5-35b-a3b": 2 * 10 * 2 * 256 * 2,
    "qwen3.6-35b-a3b": 2 * 10 * 2 * 256 * 2,
    "qwen3.5-122b-a10b": 2 * 12 * 2 * 256 * 2,
    "qwen3.5-397b-a17b": 2 * 15 * 2 * 256 * 2,
    # issue 17 (arch-2026.md sections 4-6): GLM-4.7 and MiniMax-M2.5/M2.7 keep their
    # predecessors' attention; Nemotron-H caches only in its attention blocks (10 of 118, 4 of 52)
    "glm-4.7": 2 * 92 * 8 * 128 * 2,
    "minimax-m2.5": 2 * 62 * 8 * 128 * 2,
    "minimax-m2.7": 2 * 62 * 8 * 128 * 2,
    "nemotron-h-56b": 2 * 10 * 8 * 128 * 2,
    "nemotron-h-8b": 2 * 4 * 8 * 128 * 2,
    # issue 17: LFM2 caches only in its 6 grouped-query attention layers (8 KV heads of 64 at
    # every size); the short-conv layers hold a fixed state
    "lfm2-350m": 2 * 6 * 8 * 64 * 2,
    "lfm2-700m": 2 * 6 * 8 * 64 * 2,
    "lfm2-1.2b": 2 * 6 * 8 * 64 * 2,
    "lfm2-2.6b": 2 * 8 * 8 * 64 * 2,  # 8 attention layers of its 30
    "lfm2-8b-a1b": 2 * 6 * 8 * 64 * 2,
    # issue 17: GLM-5 (glm_moe_dsa) is DeepSeek-V3.2's layer on 78 layers: the 512 + 64 latent
    # in bf16 and the indexer's 128 fp8 values with a 4-byte scale
    "glm-5": 78 * ((512 + 64) * 2 + 128 + 4),
    # issue 17: LFM2-VL's language models are LFM2-350M's and LFM2-1.2B's
    "lfm2-vl-450m": 2 * 6 * 8 * 64 * 2,
    "lfm2-vl-1.6b": 2 * 6 * 8 * 64 * 2,
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
    "gemma2-2b": 2 * 13 * 4 * 256 * 2 * K128 + 2 * 13 * 4 * 256 * 2 * 4096,
    "gemma3-1b": 2 * 4 * 1 * 256 * 2 * K128 + 2 * 22 * 1 * 256 * 2 * 512,
    "gemma3-4b": 2 * 5 * 4 * 256 * 2 * K128 + 2 * 29 * 4 * 256 * 2 * 1024,
    "gemma3-12b": 2 * 8 * 8 * 256 * 2 * K128 + 2 * 40 * 8 * 256 * 2 * 1024,
    # Gemma 4: full layers hold 128k, sliding ones their window (512 for E2B/E4B, 1024 above).
    "gemma-4-e2b": 2 * 3 * 1 * 512 * 2 * K128 + 2 * 12 * 1 * 256 * 2 * 512,
    "gemma-4-e4b": 2 * 4 * 2 * 512 * 2 * K128 + 2 * 20 * 2 * 256 * 2 * 512,
    # arch-2026.md's raw per-sequence figures: 2,684,354,560 B full + 25 x 1024 x 8,192 sliding.
    "gemma-4-26b-a4b": 2 * 5 * 2 * 512 * 2 * K128 + 2 * 25 * 8 * 256 * 2 * 1024,
    "gemma-4-31b": 2 * 10 * 4 * 512 * 2 * K128 + 2 * 50 * 16 * 256 * 2 * 1024,
    "gemma-4-12b": 2 * 8 * 1 * 512 * 2 * K128 + 2 * 40 * 8 * 256 * 2 * 1024,
    # DeepSeek-V4-Flash (config.json compress_ratios [0, 0, 4, 128 x 20, 4]): every layer a
    # 128-token window of 1,024-byte bf16 rows; C4 layers 131,072 / 4 compressed rows plus a
    # 132-byte indexer key each and an fp32 compressor state of 8 rows x 2 x 2 x (512 + 128)
    # x 4 B; C128 layers 131,072 / 128 rows and a state of 128 rows x 2 x 512 x 4 B
    "deepseek-v4-flash": 43 * 128 * 1024
    + 21 * (K128 // 4 * (1024 + 132) + 8 * 2 * 2 * (512 + 128) * 4)
    + 20 * (K128 // 128 * 1024 + 128 * 2 * 1 * 512 * 4),
    "deepseek-v4-pro": 61 * 128 * 1024
    + 30 * (K128 // 4 * (1024 + 132) + 8 * 2 * 2 * (512 + 128) * 4)
    + 31 * (K128 // 128 * 1024 + 128 * 2 * 1 * 512 * 4),
    "granite-4.0-h-small": 2 * 4 * 8 * 128 * 2 * K128
    + 36 * ((128 * 64 + 2 * 1 * 128) * (4 - 1) + 128 * 64 * 128) * 2,
    "granite-4.0-h-tiny": 2 * 4 * 4 * 128 * 2 * K128
    + 36 * ((48 * 64 + 2 * 1 * 128) * (4 - 1) + 48 * 64 * 128) * 2,
    "granite-4.0-h-micro": 2 * 4 * 8 * 64 * 2 * K128
    + 36 * ((64 * 64 + 2 * 1 * 128) * (4 - 1) + 64 * 64 * 128) * 2,
    # Qwen3.5 / 3.6 Gated DeltaNet: the conv state at bf16, the v_heads x 128 x 128 recurrent
    # state at float32 (mamba_ssm_dtype, whatever the KV dtype); conv dim 2 x 16 x 128 + v x 128.
    **{
        model_id: 2 * (layers // 4) * kv * 256 * 2 * K128
        + (layers - layers // 4) * ((4096 + v * 128) * 3 * 2 + v * 128 * 128 * 4)
        for model_id, layers, kv, v in (
            ("qwen3.5-0.8b", 24, 2, 16), ("qwen3.5-2b", 24, 2, 16), ("qwen3.5-4b", 32, 4, 32),
            ("qwen3.5-9b", 32, 4, 32), ("qwen3.5-27b", 64, 4, 48), ("qwen3.6-27b", 64, 4, 48),
            ("qwen3.5-35b-a3b", 40, 2, 32), ("qwen3.6-35b-a3b", 40, 2, 32),
            ("qwen3.5-122b-a10b", 48, 2, 64), ("qwen3.5-397b-a17b", 60, 2, 64),
        )
    },  # fmt: skip
    # issue 17: Nemotron-H's Mamba-2 blocks (54 of 256 heads x 64, 8 groups, d_state 256; 24 of
    # 128 heads x 64, 8 groups, d_state 128), conv 4
    "nemotron-h-56b": 2 * 10 * 8 * 128 * 2 * K128
    + 54 * ((256 * 64 + 2 * 8 * 256) * (4 - 1) + 256 * 64 * 256) * 2,
    "nemotron-h-8b": 2 * 4 * 8 * 128 * 2 * K128
    + 24 * ((128 * 64 + 2 * 8 * 128) * (4 - 1) + 128 * 64 * 128) * 2,
    # issue 17: LFM2's short convs keep hidden x (conv_L_cache - 1) inputs and no SSM state
    # (vLLM short_conv_state_shape); 10 conv layers up to 1.2B, 22 in the 2.6B, 18 in the 8B-A1B
    **{
        model_id: 2 * attn * 8 * 64 * 2 * K128 + conv * hidden * (3 - 1) * 2
        for model_id, attn, conv, hidden in (
            ("lfm2-350m", 6, 10, 1024), ("lfm2-700m", 6, 10, 1536), ("lfm2-1.2b", 6, 10, 2048),
            ("lfm2-2.6b", 8, 22, 2048), ("lfm2-8b-a1b", 6, 18, 2048),
            ("lfm2-vl-450m", 6, 10, 1024), ("lfm2-vl-1.6b", 6, 10, 2048),
        )
    },  # fmt: skip
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
    "gemma2-2b": ("full", list(range(1, 26, 2))),
    "gemma3-1b": ("full", [5, 11, 17, 23]),
    "gemma3-4b": ("full", [5, 11, 17, 23, 29]),
    "gemma3-12b": ("full", list(range(5, 48, 6))),
    "gemma-4-e2b": ("full", [4, 9, 14]),  # 19, 24, 29, 34 are KV-shared full layers
    "gemma-4-e4b": ("full", [5, 11, 17, 23]),  # 29, 35, 41 are KV-shared
    "gemma-4-26b-a4b": ("full", list(range(5, 30, 6))),
    "gemma-4-31b": ("full", list(range(5, 60, 6))),
    "gemma-4-12b": ("full", list(range(5, 48, 6))),
    "granite-4.0-h-small": ("full", [5, 15, 25, 35]),
    "granite-4.0-h-tiny": ("full", [5, 15, 25, 35]),
    "granite-4.0-h-micro": ("full", [5, 15, 25, 35]),
    "qwen3.6-27b": ("full", list(range(3, 64, 4))),  # layer_types of the official config
    "qwen3.5-397b-a17b": ("full", list(range(3, 60, 4))),
    # issue 17: the attention blocks among Nemotron-H's Mamba-2 and attention blocks (the MLP
    # blocks hold no cache): after the 4th Mamba-2 block, then after every 5th
    "nemotron-h-56b": ("full", list(range(4, 59, 6))),
    "nemotron-h-8b": ("full", [4, 10, 16, 22]),
    # issue 17: LFM2's full_attn_idxs / layer_types
    "lfm2-350m": ("full", [2, 5, 8, 10, 12, 14]),
    "lfm2-700m": ("full", [2, 5, 8, 10, 12, 14]),
    "lfm2-1.2b": ("full", [2, 5, 8, 10, 12, 14]),
    "lfm2-2.6b": ("full", [2, 5, 9, 13, 17, 21, 24, 27]),
    "lfm2-8b-a1b": ("full", [2, 6, 10, 14, 18, 21]),
    "lfm2-vl-450m": ("full", [2, 5, 8, 10, 12, 14]),
    "lfm2-vl-1.6b": ("full", [2, 5, 8, 10, 12, 14]),
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
    "deepseek-v3.1": list(range(3, 61)),
    "kimi-k2-thinking": list(range(1, 61)),
    "glm-4.6": list(range(3, 92)),
    "deepseek-v3.2-exp": list(range(3, 61)),
    "deepseek-v3.2": list(range(3, 61)),
    "glm-4.7": list(range(3, 92)),  # issue 17
    "lfm2-8b-a1b": list(range(2, 24)),  # issue 17: num_dense_layers 2
}

# Verification level per model-configs.md ("How well each model is verified") and, for the
# 2024-2025 additions, model-configs-2025.yaml. Llama-3.1-8B and -70B have no entry there; their
# shapes are carried over from Llama-3, hence "secondary". Mistral-Large-2407 is "unverified" in
# the reference (no config seen); the registry has no such level, so it is "secondary" with its
# widths listed under `unverified`.
VERIFICATION = {
    "official_verbatim": {
        "llama3.1-405b", "llama4-scout", "llama4-maverick", "mixtral-8x7b", "mixtral-8x22b",
        "qwen2.5-7b", "qwen3-8b", "qwen3-32b", "qwen3-235b-a22b", "deepseek-v2-lite",
        "deepseek-v3", "deepseek-r1", "kimi-k2", "gpt-oss-20b", "gpt-oss-120b", "falcon-40b",
        "jamba-v0.1", "minimax-m1", "minimax-text-01",
        "qwen3-0.6b", "qwen3-1.7b", "qwen3-14b", "qwen3-30b-a3b", "qwen3-coder-480b-a35b",
        # issue 17: a verbatim copy of the official config.json (tests/fixtures/hf)
        "qwen3.6-27b",
    },
    "official_partial": {
        "deepseek-v2", "qwen3-next-80b-a3b", "kimi-k2-thinking", "deepseek-v3.2-exp",
    },
    "derived_copies": {
        "qwen2.5-0.5b",  # issue 18: a transformers config dump and a config.json copy
        "llama2-7b", "llama2-70b", "llama3-8b", "mistral-7b-v0.1", "mistral-small-24b",
        "mistral-small-3.1-24b", "qwen2.5-72b", "gemma2-9b", "gemma2-27b", "gemma3-27b",
        "phi3-mini", "falcon-7b", "glm-4.5", "command-r",
        "llama3.3-70b", "deepseek-v3.1", "deepseek-r1-distill-llama-70b", "gemma2-2b", "gemma3-1b",
        "gemma3-12b", "phi-4", "glm-4.6", "qwen3-4b", "qwen3-235b-a22b-2507", "minimax-m2",
        "qwen3.5-27b", "qwen3.5-35b-a3b", "qwen3-coder-30b-a3b", "qwen3-vl-4b", "qwen3-vl-30b-a3b",
        # issue 17: copies of the official config.json text_config (see each file's source)
        "gemma-4-12b", "gemma-4-26b-a4b", "gemma-4-31b", "gemma-4-e2b", "gemma-4-e4b",
        "deepseek-v3.2", "deepseek-v4-flash", "deepseek-v4-pro",
        "glm-4.7",  # issue 17
        "lfm2-350m", "lfm2-1.2b", "lfm2-8b-a1b",  # issue 17: public copies of config.json
        "lfm2-vl-450m", "lfm2-vl-1.6b",  # issue 17: a port's pinned copies, checked by digest
        "glm-5",  # issue 17: a family copy, the technical report and the class defaults agree
    },
    "secondary": {
        "llama3-70b", "llama3.1-8b", "llama3.1-70b", "mistral-large-2407",
        "deepseek-r1-distill-qwen-7b", "deepseek-r1-distill-qwen-14b",
        "deepseek-r1-distill-qwen-32b", "deepseek-r1-distill-llama-8b", "gemma3-4b", "qwq-32b",
        # model-configs-2025.yaml: Granite-4.0-H-Small is secondary; Tiny and Micro were sourced
        # the same way (copies of the config.json, not the file).
        "granite-4.0-h-small", "granite-4.0-h-tiny", "granite-4.0-h-micro",
        # issue 17: shapes from public copies and ports, not the official files
        "qwen3.5-0.8b", "qwen3.5-2b", "qwen3.5-4b", "qwen3.5-9b", "qwen3.5-122b-a10b",
        "qwen3.5-397b-a17b", "qwen3.6-35b-a3b", "qwen3-vl-8b",
        # issue 17: shapes from NVIDIA's Megatron-Bridge providers and MiniMax-M2's, not the
        # checkpoints' own config.json
        "minimax-m2.5", "minimax-m2.7", "nemotron-h-56b", "nemotron-h-8b",
        # issue 17: shapes from a real SGLang start-up and a port's presets, not config.json
        "lfm2-700m", "lfm2-2.6b",
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
    "Llama-3.3-70B": "llama3.3-70b",
    "Mistral-Large-2": "mistral-large-2407",
    "deepseek-ai/DeepSeek-V3.1": "deepseek-v3.1",
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B": "deepseek-r1-distill-qwen-32b",
    "Gemma-3-12B": "gemma3-12b",
    "microsoft/phi-4": "phi-4",
    "Qwen3-Coder": "qwen3-coder-480b-a35b",
    "QwQ-32B": "qwq-32b",
    "MiniMaxAI/MiniMax-M2": "minimax-m2",
    "deepseek-ai/DeepSeek-V3.2-Exp": "deepseek-v3.2-exp",
    "IBM-Granite/Granite-4.0-H-Small": "granite-4.0-h-small",
    "google/gemma-4-E2B-it": "gemma-4-e2b",
    "Gemma-4-26B-A4B-it": "gemma-4-26b-a4b",
    # issue 17
    "zai-org/GLM-4.7": "glm-4.7",
    "MiniMaxAI/MiniMax-M2.5": "minimax-m2.5",
    "MiniMax-M2.7": "minimax-m2.7",
    "nvidia/Nemotron-H-56B-Base-8K": "nemotron-h-56b",
    "Nemotron-H-8B": "nemotron-h-8b",
    "LiquidAI/LFM2-8B-A1B": "lfm2-8b-a1b",
    "LFM2-350M": "lfm2-350m",
    # Liquid Nanos (Liquid AI docs): fine-tunes of the size they are named after
    "LiquidAI/LFM2-1.2B-RAG": "lfm2-1.2b",
    "LiquidAI/LFM2-350M-Math": "lfm2-350m",
}

# Repo ids of instruction-tuned / chat releases that share their entry's architecture and
# context, so they resolve to it (issue 7). Releases whose config differs are deliberately absent:
# Qwen2.5-7B/72B-Instruct (max_position_embeddings 32768), Mixtral-8x22B-Instruct (vocab 32768),
# Command-R 08-2024 (8 KV heads), Qwen3-4B/30B-A3B-2507 (262144 context),
# Kimi-K2-Instruct-0905 (256K context).
INSTRUCT_RELEASES = {
    "meta-llama/Llama-2-7b-chat-hf": "llama2-7b",
    "meta-llama/Llama-2-70b-chat-hf": "llama2-70b",
    "meta-llama/Meta-Llama-3-8B-Instruct": "llama3-8b",
    "meta-llama/Meta-Llama-3-70B-Instruct": "llama3-70b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama3.1-8b",
    "meta-llama/Llama-3.1-70B-Instruct": "llama3.1-70b",
    "meta-llama/Llama-3.1-405B-Instruct": "llama3.1-405b",
    "meta-llama/Llama-3.3-70B-Instruct": "llama3.3-70b",
    "mistralai/Mistral-7B-Instruct-v0.1": "mistral-7b-v0.1",
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mixtral-8x7b",
    "mistralai/Mistral-Small-24B-Instruct-2501": "mistral-small-24b",
    # Its own entry, not 2501's: multimodal (Pixtral) with a 128k context (issue 7).
    "mistralai/Mistral-Small-3.1-24B-Instruct-2503": "mistral-small-3.1-24b",
    "google/gemma-2-2b-it": "gemma2-2b",
    "google/gemma-2-9b-it": "gemma2-9b",
    "google/gemma-2-27b-it": "gemma2-27b",
    "google/gemma-3-1b-it": "gemma3-1b",
    "google/gemma-3-4b-it": "gemma3-4b",
    "google/gemma-3-12b-it": "gemma3-12b",
    "google/gemma-3-27b-it": "gemma3-27b",
    "google/gemma-4-12B": "gemma-4-12b",
    "google/gemma-4-26B-A4B": "gemma-4-26b-a4b",
    "google/gemma-4-31B": "gemma-4-31b",
    "google/gemma-4-E2B": "gemma-4-e2b",
    "google/gemma-4-E4B": "gemma-4-e4b",
    "deepseek-ai/DeepSeek-V2-Chat": "deepseek-v2",
    "deepseek-ai/DeepSeek-V2-Lite-Chat": "deepseek-v2-lite",
    "moonshotai/Kimi-K2-Instruct": "kimi-k2",
    "tiiuae/falcon-7b-instruct": "falcon-7b",
    "tiiuae/falcon-40b-instruct": "falcon-40b",
    "Qwen/Qwen3-235B-A22B-Thinking-2507": "qwen3-235b-a22b-2507",
    "Qwen/Qwen3-Coder-480B-A35B-Instruct": "qwen3-coder-480b-a35b",
}

MODEL_IDS = sorted(p.stem for p in model_paths())


def _path(model_id: str) -> Path:
    return next(p for p in model_paths() if p.stem == model_id)


# ---------------------------------------------------------------- presence and validity


def test_registry_checks_clean() -> None:
    assert check_models() == []


def test_registry_holds_at_least_60_models() -> None:
    assert len(MODEL_IDS) >= 60


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
        for name in {n.lower() for n in registry_file(model_id).names()}:
            owners.setdefault(name, []).append(model_id)
    assert {name: ids for name, ids in owners.items() if len(ids) > 1} == {}


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_verification_level_is_the_references(model_id: str) -> None:
    expected = [level for level, ids in VERIFICATION.items() if model_id in ids]
    assert [registry_file(model_id).verification] == expected


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_missing_parameter_counts_are_marked_unverified(model_id: str) -> None:
    model = registry_file(model_id)
    if model.params.total is None:
        assert any(entry.startswith("params") for entry in model.unverified)
        assert "UNVERIFIED" in model.params.stated


# ---------------------------------------------------------------- name resolution


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_every_name_resolves_in_any_case(model_id: str) -> None:
    model = registry_file(model_id)
    assert "/" in model.hf_repo
    assert any("/" not in alias for alias in model.aliases), "needs a short alias"
    for name in model.names():
        for typed in (name, name.lower(), name.upper(), name.swapcase()):
            assert find_model(typed).id == model_id


@pytest.mark.parametrize(("repo", "model_id"), sorted(INSTRUCT_RELEASES.items()))
def test_instruct_releases_resolve_to_their_base_entry(repo: str, model_id: str) -> None:
    model = find_model(repo)
    assert model.id == model_id
    # Listed in the file itself, not matched by a looser rule.
    assert repo in registry_file(model_id).names()


def test_no_alias_is_claimed_by_two_models() -> None:
    claimed: dict[str, str] = {}
    clashes = []
    for model_id in MODEL_IDS:
        for alias in registry_file(model_id).aliases:
            owner = claimed.setdefault(alias.lower(), model_id)
            if owner != model_id:
                clashes.append((alias, owner, model_id))
    assert clashes == []


@pytest.mark.parametrize(("typed", "model_id"), sorted(TYPED_NAMES.items()))
def test_typed_names_resolve(typed: str, model_id: str) -> None:
    assert find_model(typed).id == model_id


# ---------------------------------------------------------------- KV cache: golden values


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_kv_bytes_per_token(model_id: str) -> None:
    assert kv_bytes_per_token(registry_model(model_id), BF16) == KV_BYTES_PER_TOKEN[model_id]


@pytest.mark.parametrize("model_id", sorted(KV_BYTES_AT_128K))
def test_kv_bytes_per_sequence_at_128k_windowed_and_state_models(model_id: str) -> None:
    assert kv_bytes_per_sequence(registry_model(model_id), K128, BF16) == KV_BYTES_AT_128K[model_id]


@pytest.mark.parametrize("model_id", sorted(set(MODEL_IDS) - set(KV_BYTES_AT_128K)))
def test_full_attention_models_grow_linearly(model_id: str) -> None:
    spec = registry_model(model_id)
    kinds = {spec.mixer_at(i).kind for i in range(spec.num_layers)}
    assert kinds <= {"full", "mla", "mla_indexed"}
    assert kv_bytes_per_sequence(spec, K128, BF16) == KV_BYTES_PER_TOKEN[model_id] * K128


@pytest.mark.parametrize(("model_id", "layers"), sorted(HYBRID_LAYERS.items()))
def test_hybrid_layer_positions(model_id: str, layers: tuple[str, list[int]]) -> None:
    kind, expected = layers
    spec = registry_model(model_id)
    assert [i for i in range(spec.num_layers) if spec.mixer_at(i).kind == kind] == expected


@pytest.mark.parametrize(("model_id", "expected"), sorted(MOE_LAYERS.items()))
def test_moe_layer_positions(model_id: str, expected: list[int]) -> None:
    spec = registry_model(model_id)
    assert spec.moe is not None
    assert [i for i in range(spec.num_layers) if spec.ffn_at(i) is spec.moe] == expected


def test_falcon_uses_a_plain_mlp() -> None:
    for model_id in ("falcon-7b", "falcon-40b"):
        mlp = registry_model(model_id).dense_mlp
        assert mlp is not None and not mlp.gated


# ---------------------------------------------------------------- seed figures


def test_seed_llama3_70b() -> None:
    spec = registry_model("llama3-70b")
    assert kv_bytes_per_token(spec, BF16) == 327_680  # 320 KiB
    assert kv_bytes_per_sequence(spec, 131_072, BF16) == 40 * GiB


def test_seed_llama3_8b() -> None:
    assert kv_bytes_per_token(registry_model("llama3-8b"), BF16) == 131_072


def test_seed_deepseek_v3() -> None:
    assert kv_bytes_per_token(registry_model("deepseek-v3"), BF16) == 70_272


@pytest.mark.parametrize(
    ("model_id", "window", "layers"),
    [
        ("gpt-oss-120b", 128, {"sliding": 18, "full": 18}),
        ("gemma3-27b", 1024, {"sliding": 52, "full": 10}),
    ],
)
def test_seed_windowed_layers_at_128k(model_id: str, window: int, layers: dict[str, int]) -> None:
    groups = kv_size(registry_model(model_id), K128, BF16).groups
    assert {g.kind: g.tokens_held for g in groups} == {"sliding": window, "full": K128}
    assert {g.kind: g.layers for g in groups} == layers


def test_seed_mistral_7b_is_flat_beyond_its_window() -> None:
    # Every layer slides over 4,096 tokens (sliding_window 4096): 2 x 32 x 8 x 128 x 2 =
    # 131,072 bytes per token up to the window, 512 MiB at it and beyond.
    spec = registry_model("mistral-7b-v0.1")
    assert kv_bytes_per_sequence(spec, 4095, BF16) == 131_072 * 4095
    for context in (4096, 4097, 8192, 32_768, K128):
        assert kv_bytes_per_sequence(spec, context, BF16) == 131_072 * 4096 == 512 * 2**20


# ---------------------------------------------------------------- properties on real data


@settings(max_examples=200, deadline=None)
@given(
    model_id=st.sampled_from(MODEL_IDS),
    context=st.integers(min_value=1, max_value=1 << 22),
    extra=st.integers(min_value=0, max_value=1 << 16),
)
@example(model_id="deepseek-v4-flash", context=4, extra=0)  # the first compressed entry
def test_sequence_bytes_grow_monotonically_and_never_exceed_full_attention(
    model_id: str, context: int, extra: int
) -> None:
    spec = registry_model(model_id)
    shorter = kv_bytes_per_sequence(spec, context, BF16)
    longer = kv_bytes_per_sequence(spec, context + extra, BF16)
    # What a sequence holds before its first token (recurrent states, DeepSeek-V4's compressor
    # state), not the first token's cost less the slope: a compressed layer adds its entry
    # once every ratio tokens (context // ratio), so the slope is an average that the 4th
    # token's step exceeds.
    state = kv_bytes_per_sequence(spec, 0, BF16)
    assert shorter <= longer
    assert shorter <= kv_bytes_per_token(spec, BF16) * context + state


# ---------------------------------------------------------------- hand-built specs


def architecture(spec: ModelSpec) -> ModelSpec:
    """``spec`` without the fields that describe no weight or cache: the registry fills a MoE's
    shared-expert width even when it has no shared expert. The released weight format
    (``checkpoint``) is not architecture: test_weights checks it against quantization_config."""
    moe = spec.moe
    if moe is not None and moe.shared_experts == 0:
        moe = replace(moe, shared_intermediate_size=0)
    return replace(spec, moe=moe, checkpoint=None)


@pytest.mark.parametrize("hand_built", HAND_BUILT, ids=lambda m: m.id)
def test_registry_describes_the_official_config(hand_built: ModelSpec) -> None:
    # tests/specs.py is written from config.json values (model-configs.yaml), not from the
    # registry YAML: the two agreeing field by field is an independent check of the registry.
    registry = registry_model(hand_built.id)
    assert architecture(registry) == architecture(hand_built)
    assert param_counts(registry) == param_counts(hand_built)


def test_the_shared_fixtures_are_the_hand_built_specs(
    llama3_70b: ModelSpec, deepseek_v3: ModelSpec, gpt_oss_120b: ModelSpec
) -> None:
    assert [m.id for m in (llama3_70b, deepseek_v3, gpt_oss_120b)] == [
        "llama3-70b",
        "deepseek-v3",
        "gpt-oss-120b",
    ]
    assert {llama3_70b, deepseek_v3, gpt_oss_120b} <= set(HAND_BUILT)
