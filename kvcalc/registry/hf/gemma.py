"""Gemma: gemma, gemma2, gemma3_text (the language model of the gemma3 wrapper).

Defaults: transformers 5.24.0, models/<type>/configuration_<type>.py.
"""

from __future__ import annotations

from typing import Any

from kvcalc.registry.hf.base import (
    DecoderAdapter,
    DecoderConfig,
    LayerCount,
    PosInt,
    WindowAdapter,
    WindowConfig,
    every_nth,
)


class GemmaConfig(DecoderConfig):
    vocab_size: PosInt = 256000
    hidden_size: PosInt = 3072
    intermediate_size: PosInt = 24576
    num_hidden_layers: LayerCount = 28
    num_attention_heads: PosInt = 16
    num_key_value_heads: PosInt | None = 16
    head_dim: PosInt | None = 256
    max_position_embeddings: PosInt = 8192
    tie_word_embeddings: bool = True


class Gemma(DecoderAdapter[GemmaConfig]):
    model_types = ("gemma",)
    config_class = GemmaConfig


class Gemma2Config(WindowConfig):
    vocab_size: PosInt = 256000
    hidden_size: PosInt = 2304
    intermediate_size: PosInt = 9216
    num_hidden_layers: LayerCount = 26
    num_attention_heads: PosInt = 8
    num_key_value_heads: PosInt | None = 4
    head_dim: PosInt | None = 256
    max_position_embeddings: PosInt = 8192
    tie_word_embeddings: bool = True
    sliding_window: PosInt | None = 4096


class Gemma2(WindowAdapter[Gemma2Config]):
    model_types = ("gemma2",)
    config_class = Gemma2Config

    def default_layer_kinds(self) -> list[str]:
        # Gemma2Config: even-indexed layers slide, odd ones attend globally.
        return ["full" if f else "sliding" for f in every_nth(self.num_layers, 2)]


class Gemma3TextConfig(WindowConfig):
    vocab_size: PosInt = 262208
    hidden_size: PosInt = 2304
    intermediate_size: PosInt = 9216
    num_hidden_layers: LayerCount = 26
    num_attention_heads: PosInt = 8
    num_key_value_heads: PosInt | None = 4
    head_dim: PosInt | None = 256
    max_position_embeddings: PosInt = 131072
    tie_word_embeddings: bool = True
    sliding_window: PosInt | None = 4096
    sliding_window_pattern: PosInt = 6
    rope_scaling: dict[str, Any] | None = None


class Gemma3Text(WindowAdapter[Gemma3TextConfig]):
    model_types = ("gemma3_text",)
    config_class = Gemma3TextConfig

    def architecture(self, tied_embeddings: bool) -> dict[str, Any]:
        # Two RoPE tables (local base 10k, global base 1M); vLLM's linear scaling stretches the
        # global one's cos/sin table to factor x max_position_embeddings positions.
        positions = self.config.max_position_embeddings
        head_dim = self.head_dim()
        scaling = self.config.rope_scaling or {}
        factor = scaling.get("factor", 1) if scaling.get("rope_type") == "linear" else 1
        if not isinstance(factor, (int, float)) or isinstance(factor, bool) or factor < 1:
            self.fail("rope_scaling.factor", f"must be a number of at least 1, got {factor!r}")
        return super().architecture(tied_embeddings) | {
            "rotary_caches": [[positions, head_dim], [int(positions * factor), head_dim]]
        }

    def default_layer_kinds(self) -> list[str]:
        # Gemma3TextConfig: every sliding_window_pattern-th layer is global (5 local : 1 global).
        every = self.config.sliding_window_pattern
        return ["full" if f else "sliding" for f in every_nth(self.num_layers, every)]
