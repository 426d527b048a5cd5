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
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from kvcalc.engine.checkpoint import CheckpointFormat
from kvcalc.engine.mixers.base import Mixer, ParallelismError, split_heads

if TYPE_CHECKING:
    from kvcalc.engine.mixers.attention import (
        ChunkedLocalAttention,
        FullAttention,
        SlidingWindowAttention,
    )
    from kvcalc.engine.mixers.deltanet import GatedDeltaNet
    from kvcalc.engine.mixers.lightning import LightningAttention
    from kvcalc.engine.mixers.mamba import Mamba
    from kvcalc.engine.mixers.mamba2 import Mamba2
    from kvcalc.engine.mixers.mla import MultiHeadLatentAttention
    from kvcalc.engine.mixers.mla_indexed import IndexedLatentAttention
    from kvcalc.engine.vision import VisionEncoder

#: Re-exported kind -> its module. Imported on first use: a command loading a cached Llama spec
#: needs the attention module only (each module's dataclasses cost start-up time to create).
_KINDS = {
    "FullAttention": "attention",
    "SlidingWindowAttention": "attention",
    "ChunkedLocalAttention": "attention",
    "MultiHeadLatentAttention": "mla",
    "IndexedLatentAttention": "mla_indexed",
    "Mamba": "mamba",
    "Mamba2": "mamba2",
    "GatedDeltaNet": "deltanet",
    "LightningAttention": "lightning",
}


#: Other re-exports loaded on first use: only multimodal checkpoints have a vision tower.
_LAZY = {"VisionEncoder": "kvcalc.engine.vision"}


def __getattr__(name: str) -> Any:
    if name in _KINDS:
        return getattr(importlib.import_module(f"kvcalc.engine.mixers.{_KINDS[name]}"), name)
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "FFN",
    "ChunkedLocalAttention",
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
    rotary_caches: tuple[tuple[int, int], ...] | None = None
    """(positions, rotary dims) of each RoPE cos/sin table the engine builds with the weights;
    None: one table of ``max_context`` positions per rotary width of the attention kinds."""

    @cached_property
    def block_runs(self) -> tuple[tuple[range, Mixer, FFN], ...]:
        """Maximal runs of consecutive layers that share their mixer and FFN objects: what
        counting the blocks of a range of layers walks instead of every layer (most models are
        one run or a few)."""
        if len(self.mixer_pattern) == 1 and self.moe is None and self.num_layers:
            return ((range(self.num_layers), self.mixer_at(0), self.ffn_at(0)),)  # one block
        blocks = [(self.mixer_at(i), self.ffn_at(i)) for i in range(self.num_layers)]
        starts = [i for i in range(len(blocks))
                  if not i or blocks[i][0] is not blocks[i - 1][0]
                  or blocks[i][1] is not blocks[i - 1][1]]
        ends = [*starts[1:], len(blocks)]
        return tuple((range(a, b), *blocks[a]) for a, b in zip(starts, ends, strict=True))

    def block_counts(self, layers: range) -> list[tuple[Mixer, FFN, int]]:
        """The distinct (mixer, FFN) pairs of ``layers``, in order of first appearance, with how
        many layers use each. Pairs are told apart by identity (the layers share their block
        objects, and hashing frozen blocks layer by layer is slow); callers that need equal
        blocks merged merge these few entries."""
        if layers.step != 1:
            runs = [(range(i, i + 1), self.mixer_at(i), self.ffn_at(i)) for i in layers]
        else:
            runs = list(self.block_runs)
        counts: dict[tuple[int, int], tuple[Mixer, FFN, int]] = {}
        for run, mixer, ffn in runs:
            n = len(range(max(run.start, layers.start), min(run.stop, layers.stop)))
            if n > 0:
                seen = counts.get((id(mixer), id(ffn)))
                counts[id(mixer), id(ffn)] = (mixer, ffn, n + (seen[2] if seen else 0))
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
        """What one tensor-parallel rank of ``tp`` holds (heads split, MLA latent replicated)."""
        return replace(self, mixer_pattern=tuple(m.per_rank(tp) for m in self.mixer_pattern))
