"""Reference models for the tests, in one place.

The hand-built specs are written from the official config.json values recorded in
shared/reference/model-configs.yaml (each value commented with the config.json field it comes
from), deliberately not from the registry YAML: a golden figure worked by hand from these
specs checks the engine, and ``test_registry_models.py`` checks that the registry describes the
same architectures. Tests take the three main ones as session fixtures (conftest.py); the others
are imported where a single test file needs them.

``registry_model`` / ``registry_file`` / ``registry_deployment`` load the bundled registry
(never ``$KVCALC_REGISTRY``, so a test that points it elsewhere cannot poison the cache), once
per session: specs and deployments are frozen, so sharing them is safe.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from kvcalc.engine.deployment import Deployment, deployment
from kvcalc.engine.hardware import Accelerator, GpuSet
from kvcalc.engine.spec import (
    DenseMLP,
    FullAttention,
    ModelSpec,
    MoE,
    MoELayout,
    MultiHeadLatentAttention,
    SlidingWindowAttention,
)
from kvcalc.engine.units import MiB
from kvcalc.registry.gpus import parse_gpu_set
from kvcalc.registry.load import find_model
from kvcalc.registry.schema import ModelFile

#: The registry in the source tree, as the CLI sees it when $KVCALC_REGISTRY is unset.
BUNDLED_REGISTRY = Path(__file__).resolve().parent.parent / "model_configs"
#: The test fixtures: config.json folders (hf/, multimodal/) and a Hugging Face hub cache.
FIXTURES = Path(__file__).parent / "fixtures"
#: A hub cache holding Qwen/Qwen2.5-7B-Instruct's config.json at its published commit
#: (the ``fixture_cache`` fixture of conftest.py points HF_HUB_CACHE at it).
HUB_CACHE = FIXTURES / "hub"
QWEN_INSTRUCT = "Qwen/Qwen2.5-7B-Instruct"
QWEN_COMMIT = "a09a35458c702b33eeacc393d103063234e8bc28"

# --------------------------------------------------------------------------------------------
# Hand-built from the official configs (model-configs.yaml)

# meta-llama/Meta-Llama-3-70B (llama-models sku_list arch_args; shapes as Llama-3.1-70B's
# verbatim config.json).
LLAMA3_70B = ModelSpec(
    id="llama3-70b",
    name="Llama-3-70B",
    num_layers=80,  # num_hidden_layers
    hidden_size=8192,  # hidden_size
    vocab_size=128256,  # vocab_size
    tied_embeddings=False,  # tie_word_embeddings
    mixer_pattern=(
        FullAttention(
            kv_heads=8,  # num_key_value_heads
            head_dim_k=128,  # hidden_size / num_attention_heads = 8192 / 64 (no head_dim key)
            head_dim_v=128,  # the same
            q_heads=64,  # num_attention_heads
        ),
    ),
    dense_mlp=DenseMLP(28672),  # intermediate_size (SwiGLU: gate, up, down)
    max_context=8192,  # max_position_embeddings (model card "8k")
)

# deepseek-ai/DeepSeek-V3 config.json (DeepSeek-R1 has the same architecture).
DEEPSEEK_V3 = ModelSpec(
    id="deepseek-v3",
    name="DeepSeek-V3",
    num_layers=61,  # num_hidden_layers
    hidden_size=7168,  # hidden_size
    vocab_size=129280,  # vocab_size
    tied_embeddings=False,  # tie_word_embeddings
    mixer_pattern=(
        MultiHeadLatentAttention(
            kv_lora_rank=512,  # kv_lora_rank
            qk_rope_head_dim=64,  # qk_rope_head_dim
            qk_nope_head_dim=128,  # qk_nope_head_dim
            v_head_dim=128,  # v_head_dim
            q_heads=128,  # num_attention_heads
            q_lora_rank=1536,  # q_lora_rank
        ),
    ),
    dense_mlp=DenseMLP(18432),  # intermediate_size: the dense FFN of the first layers
    moe=MoE(
        experts=256,  # n_routed_experts
        top_k=8,  # num_experts_per_tok
        intermediate_size=2048,  # moe_intermediate_size
        shared_experts=1,  # n_shared_experts
        shared_intermediate_size=2048,  # moe_intermediate_size (a shared expert is one expert)
    ),
    moe_layout=MoELayout(first_dense=3),  # first_k_dense_replace 3, moe_layer_freq 1
    max_context=163840,  # max_position_embeddings
    mtp_layers=1,  # num_nextn_predict_layers
)

# openai/gpt-oss-120b config.json.
_GPT_OSS_ATTENTION = {
    "kv_heads": 8,  # num_key_value_heads
    "head_dim_k": 64,  # head_dim (explicit: 64 x 64 = 4096, not hidden 2880)
    "head_dim_v": 64,  # head_dim
    "q_heads": 64,  # num_attention_heads
}
GPT_OSS_120B = ModelSpec(
    id="gpt-oss-120b",
    name="gpt-oss-120b",
    num_layers=36,  # num_hidden_layers
    hidden_size=2880,  # hidden_size
    vocab_size=201088,  # vocab_size
    tied_embeddings=False,  # tie_word_embeddings
    # layer_types: sliding_attention on even layers (0, 2, ..., 34), full_attention on odd ones.
    mixer_pattern=(
        SlidingWindowAttention(**_GPT_OSS_ATTENTION, window=128),  # sliding_window
        FullAttention(**_GPT_OSS_ATTENTION),
    ),
    moe=MoE(
        experts=128,  # num_local_experts
        top_k=4,  # num_experts_per_tok
        intermediate_size=2880,  # intermediate_size (per expert)
    ),  # every layer is MoE, no shared expert
    max_context=131072,  # max_position_embeddings
)

# meta-llama/Llama-2-7b-hf config.json.
LLAMA2_7B = ModelSpec(
    id="llama2-7b",
    name="Llama-2-7B",
    num_layers=32,  # num_hidden_layers
    hidden_size=4096,  # hidden_size
    vocab_size=32000,  # vocab_size
    tied_embeddings=False,  # tie_word_embeddings
    mixer_pattern=(
        FullAttention(
            kv_heads=32,  # num_key_value_heads (MHA)
            head_dim_k=128,  # hidden_size / num_attention_heads = 4096 / 32
            head_dim_v=128,
            q_heads=32,  # num_attention_heads
        ),
    ),
    dense_mlp=DenseMLP(11008),  # intermediate_size
    default_dtype="fp16",  # torch_dtype float16 (the original upload)
    max_context=4096,  # max_position_embeddings
)

# meta-llama/Meta-Llama-3-8B config.json.
LLAMA3_8B = ModelSpec(
    id="llama3-8b",
    name="Llama-3-8B",
    num_layers=32,  # num_hidden_layers
    hidden_size=4096,  # hidden_size
    vocab_size=128256,  # vocab_size
    tied_embeddings=False,  # tie_word_embeddings
    mixer_pattern=(
        FullAttention(
            kv_heads=8,  # num_key_value_heads
            head_dim_k=128,  # hidden_size / num_attention_heads = 4096 / 32
            head_dim_v=128,
            q_heads=32,  # num_attention_heads
        ),
    ),
    dense_mlp=DenseMLP(14336),  # intermediate_size
    max_context=8192,  # max_position_embeddings
)

# mistralai/Mixtral-8x7B-v0.1 config.json.
MIXTRAL_8X7B = ModelSpec(
    id="mixtral-8x7b",
    name="Mixtral-8x7B-v0.1",
    num_layers=32,  # num_hidden_layers
    hidden_size=4096,  # hidden_size
    vocab_size=32000,  # vocab_size
    tied_embeddings=False,  # tie_word_embeddings
    mixer_pattern=(
        FullAttention(
            kv_heads=8,  # num_key_value_heads
            head_dim_k=128,  # hidden_size / num_attention_heads = 4096 / 32
            head_dim_v=128,
            q_heads=32,  # num_attention_heads
        ),
    ),
    moe=MoE(
        experts=8,  # num_local_experts
        top_k=2,  # num_experts_per_tok
        intermediate_size=14336,  # intermediate_size (per expert)
    ),  # every layer is MoE
    max_context=32768,  # max_position_embeddings
)

# bigcode/starcoder2-3b config.json (not in the registry nor in model-configs.yaml).
STARCODER2_3B = ModelSpec(
    id="starcoder2-3b",
    name="StarCoder2-3B",
    num_layers=30,  # num_hidden_layers
    hidden_size=3072,  # hidden_size
    vocab_size=49152,  # vocab_size
    tied_embeddings=True,  # tie_word_embeddings
    mixer_pattern=(
        SlidingWindowAttention(
            kv_heads=2,  # num_key_value_heads
            head_dim_k=128,  # hidden_size / num_attention_heads = 3072 / 24
            head_dim_v=128,
            q_heads=24,  # num_attention_heads
            window=4096,  # sliding_window, on every layer
        ),
    ),
    dense_mlp=DenseMLP(12288, gated=False),  # intermediate_size; c_fc and c_proj, no gate
    max_context=16384,  # max_position_embeddings
)

#: The hand-built specs that have a registry entry of the same id.
HAND_BUILT = (LLAMA3_70B, DEEPSEEK_V3, GPT_OSS_120B, LLAMA2_7B, LLAMA3_8B, MIXTRAL_8X7B)

# --------------------------------------------------------------------------------------------
# The bundled registry, loaded once per session


@cache
def registry_file(model_id: str) -> ModelFile:
    """The bundled registry file of ``model_id`` (names, params, verification and all)."""
    return find_model(model_id, BUNDLED_REGISTRY)


@cache
def registry_model(model_id: str) -> ModelSpec:
    """The engine spec of the bundled registry's ``model_id``."""
    return registry_file(model_id).to_spec()


@cache
def registry_deployment(model_id: str, gpus: str = "h100", **options: object) -> Deployment:
    """A deployment of a registry model on a GPU set, with ``deployment()``'s keyword options."""
    return deployment(registry_model(model_id), parse_gpu_set(gpus), **options)  # type: ignore[arg-type]


#: The 16 GB GPU of the LFM2-700M SGLang start-up (shared/reference/sglang-kv-algorithm.md
#: section 4): 16,303 MiB as nvidia-smi reports it; bandwidth and FLOPs play no part there.
GPU_16GB = GpuSet(
    Accelerator(
        id="gpu-16g",
        name="16 GB GPU",
        memory_bytes=16303 * MiB,
        memory_marketed="16 GB",
        bandwidth_bytes_per_s=10**12,
        dense_flops={"bf16": 10**14},
        smi_memory_bytes=16303 * MiB,
    )
)


def write_config(tmp_path: Path, data: Any, folder: str = "m") -> Path:
    """``data`` (an object, or text as it stands) as the ``config.json`` of a model folder under
    ``tmp_path`` (``folder`` empty: ``tmp_path`` itself)."""
    import json

    path = tmp_path / folder / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path
