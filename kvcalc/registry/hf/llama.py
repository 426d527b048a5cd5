"""Llama-style decoders: llama, granite, mistral, mixtral, phi, phi3.

Defaults: transformers 5.24.0, models/<type>/configuration_<type>.py.
"""

from __future__ import annotations

from typing import ClassVar

from kvcalc.registry.hf.base import (
    DecoderAdapter,
    DecoderConfig,
    LayerCount,
    MoEFlags,
    PosInt,
    UniformWindowAdapter,
    WindowConfig,
    experts_field,
    moe_on_every_layer,
)


class LlamaConfig(DecoderConfig):
    """LlamaConfig; GraniteConfig has the same values for these keys."""

    vocab_size: PosInt = 32000
    hidden_size: PosInt = 4096
    intermediate_size: PosInt = 11008
    num_hidden_layers: LayerCount = 32
    num_attention_heads: PosInt = 32
    num_key_value_heads: PosInt | None = None
    head_dim: PosInt | None = None
    max_position_embeddings: PosInt = 2048
    tie_word_embeddings: bool = False


class Llama(DecoderAdapter[LlamaConfig]):
    model_types = ("llama", "granite")
    config_class = LlamaConfig


class MistralConfig(WindowConfig):
    vocab_size: PosInt = 32000
    hidden_size: PosInt = 4096
    intermediate_size: PosInt = 14336
    num_hidden_layers: LayerCount = 32
    num_attention_heads: PosInt = 32
    num_key_value_heads: PosInt | None = 8
    head_dim: PosInt | None = None
    max_position_embeddings: PosInt = 131072
    tie_word_embeddings: bool = False
    sliding_window: PosInt | None = 4096


class Mistral(UniformWindowAdapter[MistralConfig]):
    model_types = ("mistral",)
    config_class = MistralConfig


class MixtralConfig(MistralConfig):
    sliding_window: PosInt | None = None
    num_experts_per_tok: PosInt = 2
    num_local_experts: PosInt = experts_field(8, "num_local_experts", "num_experts")


class Mixtral(Mistral):
    model_types = ("mixtral",)
    family = "mistral"
    config_class = MixtralConfig
    config: MixtralConfig

    def moe_flags(self) -> MoEFlags:
        c = self.config
        return moe_on_every_layer(
            c.num_local_experts, c.num_experts_per_tok, c.intermediate_size, self.num_layers
        )


class PhiConfig(DecoderConfig):
    vocab_size: PosInt = 51200
    hidden_size: PosInt = 2048
    intermediate_size: PosInt = 8192
    num_hidden_layers: LayerCount = 24
    num_attention_heads: PosInt = 32
    num_key_value_heads: PosInt | None = None
    head_dim: PosInt | None = None
    max_position_embeddings: PosInt = 2048
    tie_word_embeddings: bool = False


class Phi(DecoderAdapter[PhiConfig]):
    model_types = ("phi",)
    config_class = PhiConfig
    gated_mlp: ClassVar[bool] = False  # Phi-1/2: fc1/fc2, no gate


class Phi3Config(WindowConfig):
    vocab_size: PosInt = 32064
    hidden_size: PosInt = 3072
    intermediate_size: PosInt = 8192
    num_hidden_layers: LayerCount = 32
    num_attention_heads: PosInt = 32
    num_key_value_heads: PosInt | None = None
    head_dim: PosInt | None = None
    max_position_embeddings: PosInt = 4096
    tie_word_embeddings: bool = False
    sliding_window: PosInt | None = None


class Phi3(UniformWindowAdapter[Phi3Config]):
    """Phi-3 fuses gate and up (gate_up_proj): a gated MLP."""

    model_types = ("phi3",)
    config_class = Phi3Config
