"""A config.json of a model_type kvcalc has no adapter for, sized as a standard decoder when its
fields are exactly the standard decoder set, and refused when any field hints at another
attention or layer kind.

A standard decoder here is the Llama-style one every engine sizes alike: softmax attention on
every layer with ``num_key_value_heads`` KV heads of ``head_dim`` (or hidden_size / heads), full
or, where ``layer_types`` says so, sliding over ``sliding_window`` tokens, and a gated MLP of
``intermediate_size``. The figures then rest on that reading, so the import carries a one-line
warning naming the fields it read. Anything else a config states that a formula of another kind
would read (a latent rank, compression ratios, linear-attention or state-space fields, experts,
unknown layer types, a nested text_config) makes the reading a guess, and is refused naming it.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from kvcalc.registry.hf.base import (
    LayerCount,
    PosInt,
    Where,
    WindowAdapter,
    WindowConfig,
)

#: Keys that, stated (and not null, false or 0), mean an attention or layer a standard decoder
#: does not have: MLA (DeepSeek, Kimi), compressed attention (DeepSeek-V4), DSA indexers,
#: MiniMax lightning layers, Gemma's global / shared-KV layers and patterns, chunked attention
#: (Llama 4), interleaved hybrids (Jamba, Nemotron-H, Qwen3-Next), experts (weights a dense MLP
#: would misstate), and a wrapper's nested language model.
OTHER_KIND_KEYS = (
    "attention_chunk_size", "attention_k_eq_v", "attention_pattern", "attn_layer_offset",
    "attn_layer_period", "attn_type_list", "block_types", "compress_ratios", "compress_rates",
    "cross_attention_layers", "decoder_sparse_step", "dual_chunk_attention_config",
    "first_k_dense_replace", "full_attention_interval", "global_attn_every_n_layers",
    "global_head_dim", "hybrid_override_pattern", "index_head_dim", "index_n_heads",
    "index_topk", "interleaved_sliding_window", "is_encoder_decoder", "kv_lora_rank",
    "layer_pattern", "layers_block_type", "n_routed_experts", "n_shared_experts",
    "no_rope_layers", "num_experts", "num_experts_per_tok", "num_global_key_value_heads",
    "num_kv_shared_layers", "num_local_experts", "q_lora_rank", "qk_nope_head_dim",
    "qk_rope_head_dim", "sliding_window_pattern", "text_config", "use_mla", "v_head_dim",
    "vision_config",
)  # fmt: skip
#: Key prefixes of the same: linear attention (Qwen3-Next's linear_*), state-space layers
#: (mamba_*, ssm_*, conv_*, time_step_*), short convolutions (LFM2), lightning attention,
#: experts (moe_*) and per-layer window lists (swa_*).
OTHER_KIND_PREFIXES = (
    "linear_", "mamba", "ssm_", "conv_", "time_step", "lightning", "rwkv", "moe_", "swa_",
)  # fmt: skip
#: The layer_types entries a standard decoder has.
KNOWN_LAYER_TYPES = ("full_attention", "sliding_attention")
#: The keys the standard-decoder reading needs; head_dim may be derived from these.
REQUIRED_KEYS = (
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "intermediate_size", "vocab_size", "max_position_embeddings",
)  # fmt: skip


class StandardDecoderConfig(WindowConfig):
    """The standard decoder set. No class defaults: every value is the file's (except the base
    PretrainedConfig's tie flag, true, and head_dim derived from hidden_size / heads)."""

    vocab_size: PosInt
    hidden_size: PosInt
    intermediate_size: PosInt
    num_hidden_layers: LayerCount
    num_attention_heads: PosInt
    num_key_value_heads: PosInt  # stated: no MHA assumed
    head_dim: PosInt | None = None
    max_position_embeddings: PosInt
    tie_word_embeddings: bool = True
    sliding_window: PosInt | None = None
    layer_types: list[Literal["full_attention", "sliding_attention"]] | None = None  # type: ignore[assignment]


class StandardDecoder(WindowAdapter[StandardDecoderConfig]):
    """Every layer full attention unless layer_types names sliding ones."""

    model_types: ClassVar[tuple[str, ...]] = ()  # reached for unknown model_types only
    config_class = StandardDecoderConfig

    def default_layer_kinds(self) -> list[str]:
        if self.config.sliding_window is not None:
            # Which layers slide is each family's own rule (Mistral: all; Qwen2: from
            # max_window_layers on, if use_sliding_window; Gemma: a pattern).
            self.fail(
                "sliding_window",
                "stated without layer_types: which layers slide is a family's own rule, and "
                "this model_type has no kvcalc adapter; write a registry file",
            )
        return ["full"] * self.num_layers

    def layer_kinds(self) -> list[str]:
        kinds = super().layer_kinds()
        if "sliding" in kinds and self.config.sliding_window is None:
            self.fail("sliding_window", "missing: layer_types names sliding layers")
        return kinds


def unknown_fields(data: dict[str, Any]) -> list[str]:
    """The keys of ``data`` that mean a kind a standard decoder does not have, and the unknown
    layer_types entries."""
    found = [
        key
        for key, value in data.items()
        if value not in (None, False, 0, [], {})
        and (key in OTHER_KIND_KEYS or key.startswith(OTHER_KIND_PREFIXES))
    ]
    layer_types = data.get("layer_types")
    if isinstance(layer_types, list):
        unknown = sorted({repr(t) for t in layer_types if t not in KNOWN_LAYER_TYPES})
        if unknown:
            found.append(f"layer_types {', '.join(unknown)}")
    return found


def standard_decoder(where: Where, data: dict[str, Any], model_type: str) -> StandardDecoder:
    """The standard-decoder reading of an unknown model_type, or a one-line refusal naming what
    makes it another architecture (or what it lacks)."""
    from kvcalc.registry.hf.families import SUPPORTED_MODEL_TYPES

    refusal = f"unsupported model_type {model_type!r}, and not a standard decoder"
    fix = (
        f"supported: {', '.join(SUPPORTED_MODEL_TYPES)} "
        "(for another architecture, write a registry file)"
    )
    others = unknown_fields(data)
    if others:
        where.fail(
            "model_type",
            f"{refusal}: it states {'; '.join(others)}, which a standard decoder has not "
            f"and kvcalc will not guess at; {fix}",
        )
    missing = [key for key in REQUIRED_KEYS if key not in data]
    if missing:
        where.fail("model_type", f"{refusal}: it states no {', '.join(missing)}; {fix}")
    return StandardDecoder(where.parse(StandardDecoderConfig, data), where)


def standard_decoder_warning(adapter: StandardDecoder, model_type: str) -> str:
    """``unknown model_type 'x': sized as a standard decoder from ...``, naming the fields read."""
    stated = adapter.reads.target.model_fields_set
    read = [n for n in adapter.reads.read if n in stated]
    if adapter.config.head_dim is None:
        read.append("head_dim = hidden_size / num_attention_heads")
    sliding = " (sliding where layer_types says so)" if adapter.config.layer_types else ""
    return (
        f"{adapter.where.path}: model_type {model_type!r} has no kvcalc adapter; sized as a "
        f"standard decoder, grouped-query attention on every layer{sliding} and a gated MLP, "
        f"from {', '.join(read)}; check it against the model card"
    )
