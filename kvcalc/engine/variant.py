"""Architecture what-ifs: the same model with another attention (``--as mha|gqa:G|mqa|mla:L+R``).

The other dimensions are kept (layers, hidden size, query heads, head dims, FFN, recurrent
layers) and the cache is re-derived from the new attention. Each mixer kind says how it turns
into the variant (:meth:`~kvcalc.engine.mixers.base.Mixer.as_attention`):

- ``mha`` / ``gqa:G`` / ``mqa``: every layer with per-head keys and values (full, sliding,
  chunked) gets ``q_heads``, ``G`` or 1 KV heads; an MLA layer becomes plain attention over its
  query heads with keys of ``qk_nope + qk_rope`` and values of ``v_head_dim`` (seed 004: the
  MHA design with DeepSeek-V3's 128 heads "of dimension 128+64, values of 128");
- ``mla:LATENT+ROPE``: every full-attention layer caches one latent of LATENT plus a decoupled
  RoPE key of ROPE (0 when not given) instead of its K/V heads; of the query's head dim, ROPE
  values become the RoPE part and the rest the no-RoPE part, and the values keep their head dim.
  Sliding and chunked layers keep their heads (their window already bounds the cache), and an
  MLA layer takes the new latent and RoPE widths.

Weights and FLOPs follow the new layers' own formulas (K/V projections for MHA/GQA/MQA;
DeepSeek's kv_a / kv_b projections, with no query compression, for MLA): a what-if model has the
projections its cache implies.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from kvcalc.errors import InputError

if TYPE_CHECKING:
    from kvcalc.engine.spec import ModelSpec

VariantKind = Literal["mha", "gqa", "mqa", "mla"]
MAX_KV_HEADS = 4096
MAX_WIDTH = 65536


class VariantError(InputError, ValueError):
    """A variant this model cannot take; the message names the fix."""

    def __init__(self, message: str) -> None:
        super().__init__(message, field="attention")


def check_rope(rope: int, width: int, example: str = "") -> None:
    """Refuse an MLA RoPE key wider than the ``width``-wide query heads it is split from;
    ``example`` is appended to the fix."""
    if rope > width:
        raise VariantError(
            f"a RoPE key of {rope} is wider than the {width}-wide query heads; "
            f"use at most {width}{example}"
        )


@dataclass(frozen=True)
class AttentionVariant:
    """``kind`` with its numbers: ``kv_heads`` for gqa, ``latent`` and ``rope`` for mla."""

    kind: VariantKind
    kv_heads: int | None = None
    latent: int = 0
    rope: int = 0

    def __post_init__(self) -> None:
        # The bounds of --kv-heads and --head-dim: beyond them a figure is a typo, not a model.
        if self.kind == "gqa" and not 1 <= (self.kv_heads or 0) <= MAX_KV_HEADS:
            raise VariantError(f"gqa needs 1 to {MAX_KV_HEADS:,} KV heads, e.g. gqa:8")
        widths = 1 <= self.latent <= MAX_WIDTH and 0 <= self.rope <= MAX_WIDTH
        if self.kind == "mla" and not widths:
            raise VariantError(
                f"mla needs a latent of 1 to {MAX_WIDTH:,} and a RoPE key of at most "
                f"{MAX_WIDTH:,}, e.g. mla:512+64"
            )

    @property
    def label(self) -> str:
        """How the variant is written on the command line."""
        if self.kind == "gqa":
            return f"gqa:{self.kv_heads}"
        if self.kind == "mla":
            return f"mla:{self.latent}" + (f"+{self.rope}" if self.rope else "")
        return self.kind

    def kv_heads_for(self, q_heads: int) -> int:
        """KV heads of a layer with ``q_heads`` query heads; raises :class:`VariantError` when
        G does not divide them (grouped-query attention shares a KV head among a whole group)."""
        if self.kind == "mha":
            return q_heads
        if self.kind == "mqa":
            return 1
        assert self.kv_heads is not None
        if q_heads % self.kv_heads:
            raise VariantError(
                f"{q_heads} query heads cannot be grouped over {self.kv_heads} KV heads; use a "
                f"divisor of {q_heads}"
            )
        return self.kv_heads


def as_attention(spec: ModelSpec, variant: AttentionVariant) -> ModelSpec:
    """``spec`` with every attention layer turned into ``variant``; raises
    :class:`VariantError` when no layer takes it (a pure recurrent model, or mla on a model
    without full attention or MLA) or when a layer cannot (G not dividing its query heads)."""
    pattern = tuple(m.as_attention(variant) for m in spec.mixer_pattern)
    # Each kind decides whether the variant applies to it; one that does not comes back as
    # itself (a recurrent state; a window or chunk under mla).
    if all(new is old for new, old in zip(pattern, spec.mixer_pattern, strict=True)):
        what = "full-attention or MLA" if variant.kind == "mla" else "attention"
        raise VariantError(f"{spec.id} has no {what} layers for {variant.label} to re-derive")
    return replace(spec, mixer_pattern=pattern, name=f"{spec.name} as {variant.label}")
