"""Spec types: what the engine knows about a model.

A model is a stack of layers. Each layer has a *mixer* (the part that caches something per
sequence: an attention kind, or a recurrent state) and a feed-forward block. Every mixer kind is
one frozen dataclass in its own module of :mod:`kvcalc.engine.mixers` that implements
:class:`~kvcalc.engine.mixers.base.Mixer`: its cache, weight, FLOP and vLLM page formulas and its
table text are members of the type, so a new kind is one new module, not a branch in every
command. The kinds are re-exported here.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from kvcalc.engine.checkpoint import CheckpointFormat
from kvcalc.engine.mixers.base import Mixer, ParallelismError, split_heads

if TYPE_CHECKING:
    from kvcalc.engine.audio import ConformerAudioEncoder
    from kvcalc.engine.mixers.attention import (
        ChunkedLocalAttention,
        FullAttention,
        SlidingWindowAttention,
    )
    from kvcalc.engine.mixers.compressed import CompressedAttention
    from kvcalc.engine.mixers.deltanet import GatedDeltaNet
    from kvcalc.engine.mixers.lightning import LightningAttention
    from kvcalc.engine.mixers.mamba import Mamba
    from kvcalc.engine.mixers.mamba2 import Mamba2
    from kvcalc.engine.mixers.mla import MultiHeadLatentAttention
    from kvcalc.engine.mixers.mla_indexed import IndexedLatentAttention
    from kvcalc.engine.mixers.shared_kv import SharedKVAttention
    from kvcalc.engine.mixers.short_conv import ShortConv
    from kvcalc.engine.vision import VisionEncoder

#: Re-exported kind -> its module. Imported on first use: a command loading a cached Llama spec
#: needs the attention module only (each module's dataclasses cost start-up time to create).
_KINDS = {
    "FullAttention": "attention",
    "SlidingWindowAttention": "attention",
    "ChunkedLocalAttention": "attention",
    "CompressedAttention": "compressed",
    "MultiHeadLatentAttention": "mla",
    "IndexedLatentAttention": "mla_indexed",
    "Mamba": "mamba",
    "Mamba2": "mamba2",
    "GatedDeltaNet": "deltanet",
    "LightningAttention": "lightning",
    "SharedKVAttention": "shared_kv",
    "ShortConv": "short_conv",
}


#: Other re-exports loaded on first use: only multimodal checkpoints have a vision tower.
_LAZY = {
    "ConformerAudioEncoder": "kvcalc.engine.audio",
    "VisionEncoder": "kvcalc.engine.vision",
}


def __getattr__(name: str) -> Any:
    if name in _KINDS:
        return getattr(importlib.import_module(f"kvcalc.engine.mixers.{_KINDS[name]}"), name)
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "FFN",
    "ChunkedLocalAttention",
    "CompressedAttention",
    "DenseMLP",
    "FullAttention",
    "GatedDeltaNet",
    "IndexedLatentAttention",
    "Layer",
    "LightningAttention",
    "Mamba",
    "Mamba2",
    "Mixer",
    "ModelSpec",
    "MoE",
    "MoELayout",
    "MultiHeadLatentAttention",
    "ParallelismError",
    "SharedKVAttention",
    "ShortConv",
    "SlidingWindowAttention",
    "split_heads",
]

# --------------------------------------------------------------------------------------------
# Feed-forward blocks (needed for weights and FLOPs, not for the KV cache)


@dataclass(frozen=True)
class DenseMLP:
    """A feed-forward block: gated (SwiGLU/GeGLU: gate, up, down) or plain (up, down)."""

    intermediate_size: int
    gated: bool = True


@dataclass(frozen=True)
class MoE:
    """A mixture-of-experts block: ``experts`` routed experts, ``top_k`` active per token, plus
    ``shared_experts`` always-on experts of ``shared_intermediate_size``."""

    experts: int
    top_k: int
    intermediate_size: int
    shared_experts: int = 0
    shared_intermediate_size: int = 0
    gated: bool = True


FFN = DenseMLP | MoE


@dataclass(frozen=True)
class MoELayout:
    """Which layers are MoE: layer i is MoE when i >= first_dense and (i - offset) % period == 0."""

    first_dense: int = 0
    period: int = 1
    offset: int = 0

    def is_moe(self, layer: int) -> bool:
        return layer >= self.first_dense and (layer - self.offset) % self.period == 0


@dataclass(frozen=True)
class Layer:
    mixer: Mixer
    ffn: FFN


# --------------------------------------------------------------------------------------------
# Model


@dataclass(frozen=True)
class ModelSpec:
    """The architecture of a model, as the engine needs it.

    ``mixer_pattern`` repeats cyclically over ``num_layers`` (Gemma-3: five sliding, one full;
    a uniform model has a pattern of one). ``dense_mlp`` is used on layers the MoE layout skips.
    """

    id: str
    name: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    tied_embeddings: bool
    mixer_pattern: tuple[Mixer, ...]
    dense_mlp: DenseMLP | None = None
    moe: MoE | None = None
    moe_layout: MoELayout = field(default_factory=MoELayout)
    default_dtype: str = "bf16"
    max_context: int | None = None
    checkpoint: CheckpointFormat | None = None
    """The released weight format; None: every weight at ``default_dtype``."""
    vision: VisionEncoder | None = None
    """A multimodal checkpoint's image encoder and projector; None: text only."""
    audio: ConformerAudioEncoder | None = None
    """A multimodal checkpoint's audio encoder and projector (Gemma 4 E2B / E4B); None: none."""
    per_layer_input: tuple[int, int] | None = None
    """Gemma 4's per-layer embeddings (PLE): (vocab rows, width per layer) of the table that
    gives every layer a small embedding of each token; None: the model has none."""
    rotary_caches: tuple[tuple[int, int], ...] | None = None
    """(positions, rotary dims) of each RoPE cos/sin table the engine builds with the weights;
    None: one table of ``max_context`` positions per rotary width of the attention kinds."""
    ssm_state_dtype: str | None = None
    """The dtype the model states for the temporal (SSM) part of its recurrent states (Qwen3.5's
    ``mamba_ssm_dtype`` float32, which vLLM and SGLang honour); None: the model dtype (vLLM) or
    SGLang's float32 default."""
    mtp_layers: int = 0
    """Multi-token-prediction layers the checkpoint carries past ``num_layers`` (DeepSeek-V4's
    ``num_nextn_predict_layers``, Qwen3.5's ``mtp_num_hidden_layers``). The engines load them,
    weights and cache, only with speculative decoding: vLLM's ``--num-speculative-tokens``
    (:mod:`kvcalc.engine.vllm_parallel`) is the one answer that counts them."""
    assumed: tuple[str, ...] = field(default=(), compare=False)
    """Warnings for every answer about the model: the family defaults an imported config.json
    left to kvcalc (none for a registry model)."""

    def __post_init__(self) -> None:
        # Equal layers of the pattern become one object (a spec read back from the cache has a
        # copy per layer), so that grouping blocks by identity, which is cheap, groups all
        # equal ones: Gemma-3's five sliding layers are then one block to size and weigh.
        shared: dict[Mixer, Mixer] = {}
        pattern = tuple(shared.setdefault(m, m) for m in self.mixer_pattern)
        object.__setattr__(self, "mixer_pattern", pattern)

    @property
    def kv_default(self) -> str:
        """The KV format a practitioner gets without asking for one: what the engines store for
        the model's kinds (DeepSeek-V4: the packed fp8 entry), else the model's dtype."""
        for mixer in self.mixer_pattern:
            engine = mixer.engine_kv_dtype()
            if engine is not None:
                return engine
        return self.default_dtype

    def block_counts(self, layers: range) -> list[tuple[Mixer, FFN, int]]:
        """The distinct (mixer, FFN) pairs of ``layers``, in order of first appearance, with how
        many layers use each. Pairs are told apart by identity (the layers share their block
        objects, and equal mixers are one object: ``__post_init__``).

        The blocks repeat: the mixer with the pattern's length, the FFN with the MoE layout's
        period once past its dense layers. So each residue class of the combined period is
        counted whole, and a model of any depth costs a few steps, not one per layer.

        Kept per range on the (frozen) spec: sizing one deployment asks for the same layers
        from its weights, overhead and cache."""
        kept: dict[range, tuple[tuple[Mixer, FFN, int], ...]] | None = self.__dict__.get(
            "_block_counts"
        )
        if kept is None:
            kept = {}
            object.__setattr__(self, "_block_counts", kept)
        found = kept.get(layers)
        if found is None:
            found = kept[layers] = tuple(self._count_blocks(layers))
        return list(found)

    def _count_blocks(self, layers: range) -> list[tuple[Mixer, FFN, int]]:
        counts: dict[tuple[int, int], tuple[Mixer, FFN, int]] = {}

        def count_every(first: int, stop: int, period: int, step: int) -> None:
            for i in range(first, min(first + period * step, stop), step):
                mixer, ffn = self.mixer_at(i), self.ffn_at(i)
                n = len(range(i, stop, period * step))
                seen = counts.get((id(mixer), id(ffn)))
                counts[id(mixer), id(ffn)] = (mixer, ffn, n + (seen[2] if seen else 0))

        if not layers:
            return []
        pattern = len(self.mixer_pattern)
        # Past first_dense the block at layer i depends on i mod lcm(pattern, MoE period); a
        # stride of ``step`` layers revisits a block every period / gcd(period, step) items.
        combined = math.lcm(pattern, self.moe_layout.period) if self.moe is not None else pattern
        split = layers.start
        if self.moe is not None:
            dense_items = len(range(layers.start, min(self.moe_layout.first_dense, layers.stop),
                                    layers.step))
            split = layers.start + dense_items * layers.step
            if dense_items:
                count_every(layers.start, split, _cycle(pattern, layers.step), layers.step)
        if split < layers.stop:
            count_every(split, layers.stop, _cycle(combined, layers.step), layers.step)
        return list(counts.values())

    @cached_property
    def layers(self) -> tuple[Layer, ...]:
        return tuple(Layer(self.mixer_at(i), self.ffn_at(i)) for i in range(self.num_layers))

    def mixer_at(self, layer: int) -> Mixer:
        return self.mixer_pattern[layer % len(self.mixer_pattern)]

    def ffn_at(self, layer: int) -> FFN:
        if self.moe is not None and self.moe_layout.is_moe(layer):
            return self.moe
        if self.dense_mlp is None:
            raise ValueError(f"{self.id}: layer {layer} is not MoE and no dense MLP is given")
        return self.dense_mlp

    def with_overrides(
        self,
        kv_heads: int | None = None,
        head_dim: int | None = None,
        num_layers: int | None = None,
    ) -> ModelSpec:
        """A what-if variant: other KV heads (64 turns Llama-3-70B into MHA, 1 into MQA), another
        head dim, or another depth. Kinds without KV heads (MLA, states) are left unchanged;
        :meth:`accepts_head_overrides` tells whether the heads what-ifs change anything.
        Raises ValueError for KV heads that do not divide a layer's query heads."""
        pattern = tuple(m.with_heads(kv_heads, head_dim) for m in self.mixer_pattern)
        return replace(
            self,
            mixer_pattern=pattern,
            num_layers=num_layers if num_layers is not None else self.num_layers,
        )

    def accepts_head_overrides(self) -> bool:
        """Whether any layer has KV heads for ``kv_heads`` / ``head_dim`` what-ifs to change
        (false for an all-MLA or all-state model, where they would silently do nothing)."""
        return any(m.has_kv_heads for m in self.mixer_pattern)

    def per_rank(self, tp: int) -> ModelSpec:
        """What one tensor-parallel rank of ``tp`` holds (heads split, MLA latent replicated).

        Kept per tp on the (frozen) spec: laying a model out asks whether the heads split at a
        tp, then the deployment built at that tp asks for the same rank again."""
        kept: dict[int, ModelSpec] | None = self.__dict__.get("_per_rank")
        if kept is None:
            kept = {}
            object.__setattr__(self, "_per_rank", kept)
        rank = kept.get(tp)
        if rank is None:
            # Each distinct mixer is split once (a pattern repeats its objects: __post_init__).
            ranks: dict[Mixer, Mixer] = {}
            for mixer in self.mixer_pattern:
                if mixer not in ranks:
                    ranks[mixer] = mixer.per_rank(tp)
            rank = kept[tp] = replace(
                self, mixer_pattern=tuple(ranks[m] for m in self.mixer_pattern)
            )
        return rank


def _cycle(period: int, step: int) -> int:
    """After how many items a stride of ``step`` layers meets the same residue mod ``period``."""
    return period // math.gcd(period, step)
