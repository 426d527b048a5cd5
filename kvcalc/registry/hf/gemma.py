"""Gemma: gemma, gemma2, gemma3_text (the language model of the gemma3 wrapper), gemma4_text
(of the gemma4 wrapper).

Defaults: transformers 5.24.0, models/<type>/configuration_<type>.py.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import model_validator

from kvcalc.registry.hf.base import (
    DecoderAdapter,
    DecoderConfig,
    LayerCount,
    Mixers,
    MoEFlags,
    NonNegInt,
    PosInt,
    WindowAdapter,
    WindowConfig,
    every_nth,
    field_error,
    routed_experts,
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


class Gemma4TextConfig(WindowConfig):
    """Gemma4TextConfig. ``global_head_dim`` and ``num_global_key_value_heads`` are keyword
    arguments its ``__post_init__`` pops into ``per_layer_config`` (their defaults 512 and None);
    a config.json that states ``per_layer_config`` itself is refused (its shape is not read)."""

    vocab_size: PosInt = 262144
    hidden_size: PosInt = 2304
    intermediate_size: PosInt = 9216
    num_hidden_layers: LayerCount = 30
    num_attention_heads: PosInt = 8
    num_key_value_heads: PosInt | None = 4
    head_dim: PosInt | None = 256
    max_position_embeddings: PosInt = 131072
    tie_word_embeddings: bool = True
    sliding_window: PosInt | None = 512
    global_head_dim: PosInt = 512
    num_global_key_value_heads: PosInt | None = None
    attention_k_eq_v: bool = False
    num_kv_shared_layers: NonNegInt = 0
    use_double_wide_mlp: bool = False
    vocab_size_per_layer_input: PosInt = 262144
    hidden_size_per_layer_input: NonNegInt | None = 256
    enable_moe_block: bool = False
    num_experts: PosInt | None = None
    top_k_experts: PosInt | None = None
    moe_intermediate_size: PosInt | None = None
    use_bidirectional_attention: Literal["vision"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_per_layer_config(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("per_layer_config") is not None:
            raise field_error(
                "per_layer_config",
                "a stated per_layer_config is not read by kvcalc; give the config with "
                "global_head_dim and num_global_key_value_heads instead",
            )
        return data


class Gemma4Text(WindowAdapter[Gemma4TextConfig]):
    """Gemma 4's language model: sliding layers of num_key_value_heads x head_dim, full layers
    of global_head_dim (and num_global_key_value_heads when attention_k_eq_v), the last
    num_kv_shared_layers reading an earlier layer's cache, per-layer embeddings, and in the MoE
    sizes a routed-expert block beside the dense MLP of every layer."""

    model_types = ("gemma4_text",)
    config_class = Gemma4TextConfig

    def default_layer_kinds(self) -> list[str]:
        # Gemma4TextConfig.__post_init__: sliding_window_pattern 6 (five sliding, one full).
        return ["full" if f else "sliding" for f in every_nth(self.num_layers, 6)]

    def layer_kinds(self) -> list[str]:
        # __post_init__ forces the last layer to full attention, whatever layer_types says.
        kinds = super().layer_kinds()
        return [*kinds[:-1], "full"]

    def full_shape(self) -> dict[str, int]:
        """The full layers' KV heads and head dim (per_layer_config): global_head_dim always;
        num_global_key_value_heads only when attention_k_eq_v (otherwise the sliding count)."""
        global_heads = self.config.num_global_key_value_heads
        k_eq_v = self.config.attention_k_eq_v
        heads = global_heads if k_eq_v and global_heads is not None else self.kv_heads()
        return {"kv_heads": heads, "head_dim": self.config.global_head_dim}

    def first_shared_layer(self) -> int:
        shared = self.config.num_kv_shared_layers
        if shared >= self.num_layers:
            self.fail(
                "num_kv_shared_layers",
                f"must be below num_hidden_layers ({self.num_layers}): some layer must store "
                "the cache the others reuse",
            )
        return self.num_layers - shared

    def mixers(self) -> Mixers:
        window = self.config.sliding_window
        kinds = ["full" if k == "sliding" and window is None else k for k in self.layer_kinds()]
        first_shared = self.first_shared_layer()
        shapes = {"sliding": self.attention_shape(), "full": self.full_shape()}
        mixers: dict[str, dict[str, Any]] = {}
        names: list[str] = []
        # vLLM/SGLang: a shared layer reuses the last layer of its type before first_shared.
        # attention_k_eq_v loads the K weights into both the K and V slots: K and V both cached.
        wide = self.config.intermediate_size if self.config.use_double_wide_mlp else 0
        for i, kind in enumerate(kinds):
            if kind not in ("sliding", "full"):
                self.fail("layer_types", f"unsupported entry for gemma4_text: {kind}_attention")
            extra = {"window": window} if kind == "sliding" else {}
            mixers.setdefault(kind, {"kind": kind, **shapes[kind], **extra})
            if i < first_shared:
                names.append(kind)
                continue
            if kind not in kinds[:first_shared]:
                self.fail(
                    "num_kv_shared_layers",
                    f"layer {i} is {kind} attention and shares its cache, but no earlier "
                    f"{kind} layer stores one",
                )
            name = f"shared_{kind}"
            mixers[name] = {"kind": "shared_kv", "source": kind, "wide_mlp": wide}
            names.append(name)
        return mixers, names

    def moe_flags(self) -> MoEFlags:
        if not self.config.enable_moe_block:
            return None, [False] * self.num_layers
        experts, top_k = self.config.num_experts, self.config.top_k_experts
        size = self.config.moe_intermediate_size
        if experts is None or top_k is None or size is None:
            missing = "num_experts" if experts is None else "top_k_experts" if top_k is None else (
                "moe_intermediate_size"
            )
            self.fail(missing, "must be stated when enable_moe_block is true")
        # Gemma4TextDecoderLayer: the dense MLP runs beside the routed experts on every layer,
        # an always-on expert of intermediate_size.
        moe = routed_experts(experts, top_k, size) | {
            "shared_experts": 1,
            "shared_intermediate_size": self.config.intermediate_size,
        }
        return moe, [True] * self.num_layers

    def architecture(self, tied_embeddings: bool) -> dict[str, Any]:
        out = super().architecture(tied_embeddings)
        width = self.config.hidden_size_per_layer_input
        if width:
            out["per_layer_input"] = {
                "vocab_size": self.config.vocab_size_per_layer_input,
                "hidden_size": width,
            }
        return out
