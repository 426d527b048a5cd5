"""Spec types: what the engine knows about a model and an accelerator.

A model is a stack of layers. Each layer has a *mixer* (the part that caches something per
sequence: an attention kind, or a recurrent state) and a feed-forward block. Every mixer kind is
one frozen dataclass that carries its own cache formula, so a new attention kind is one new type,
not a branch in every command:

- ``cache_elements_per_token``: values one token adds to this layer's cache;
- ``tokens_held(context)``: how many of a sequence's tokens the layer keeps;
- ``state_elements``: a fixed per-sequence state (recurrent + convolution), independent of context;
- ``per_rank(tp)``: what one tensor-parallel rank stores.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import ClassVar


class ParallelismError(ValueError):
    """A tensor-parallel size the model's heads cannot be split over; names what failed so that
    a caller (e.g. the vLLM model) can word it its own way."""

    def __init__(self, heads: int, what: str, tp: int) -> None:
        super().__init__(f"tensor parallel size {tp} does not divide the {heads} {what}")
        self.heads = heads
        self.what = what
        self.tp = tp


def split_heads(heads: int, tp: int, what: str) -> int:
    """Heads per rank. Serving engines require tp to divide the heads, or (for KV heads, which
    are then replicated) the heads to divide tp; vLLM refuses anything else at start-up."""
    if heads % tp == 0:
        return heads // tp
    if tp % heads == 0 and what == "KV heads":
        return 1
    raise ParallelismError(heads, what, tp)


# --------------------------------------------------------------------------------------------
# Mixers: attention kinds and recurrent states


@dataclass(frozen=True)
class FullAttention:
    """Softmax attention over the whole context: MHA (kv_heads = q_heads), GQA, or MQA (1)."""

    kind: ClassVar[str] = "full"
    kv_heads: int
    head_dim_k: int
    head_dim_v: int
    q_heads: int

    def cache_elements_per_token(self) -> int:
        # One key and one value vector per KV head (seed 004: 2 x n_kv x d_h when K and V match).
        return self.kv_heads * (self.head_dim_k + self.head_dim_v)

    def tokens_held(self, context_tokens: int) -> int:
        return context_tokens

    def state_elements(self) -> int:
        return 0

    def per_rank(self, tp: int) -> FullAttention:
        # KV heads split across ranks; beyond kv_heads ranks, each holds one replicated head
        # (vLLM ModelConfig.get_num_kv_heads: max(1, kv_heads // tp)).
        return replace(
            self,
            kv_heads=split_heads(self.kv_heads, tp, "KV heads"),
            q_heads=split_heads(self.q_heads, tp, "query heads"),
        )

    def with_heads(self, kv_heads: int | None, head_dim: int | None) -> FullAttention:
        new = self
        if kv_heads is not None:
            new = replace(new, kv_heads=kv_heads)
        if head_dim is not None:
            new = replace(new, head_dim_k=head_dim, head_dim_v=head_dim)
        return new


@dataclass(frozen=True)
class SlidingWindowAttention(FullAttention):
    """Attention over the last ``window`` tokens only (Mistral-7B-v0.1, Gemma local, gpt-oss)."""

    kind: ClassVar[str] = "sliding"
    window: int = 0

    def tokens_held(self, context_tokens: int) -> int:
        return min(context_tokens, self.window)


@dataclass(frozen=True)
class ChunkedLocalAttention(FullAttention):
    """Attention within fixed chunks of ``chunk`` tokens (Llama-4); at most a chunk is held."""

    kind: ClassVar[str] = "chunked"
    chunk: int = 0

    def tokens_held(self, context_tokens: int) -> int:
        return min(context_tokens, self.chunk)


@dataclass(frozen=True)
class MultiHeadLatentAttention:
    """MLA (DeepSeek-V2/V3, Kimi-K2): one compressed latent plus a decoupled RoPE key per token.

    The cache holds ``kv_lora_rank + qk_rope_head_dim`` values per token per layer, with no factor
    2 and no head count (seed 004). The latent is not split by tensor parallelism: every rank keeps
    all of it (vLLM MLAAttentionSpec, one "head" of 576).
    """

    kind: ClassVar[str] = "mla"
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_heads: int
    q_lora_rank: int | None = None

    def cache_elements_per_token(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim

    def tokens_held(self, context_tokens: int) -> int:
        return context_tokens

    def state_elements(self) -> int:
        return 0

    def per_rank(self, tp: int) -> MultiHeadLatentAttention:
        return replace(self, q_heads=split_heads(self.q_heads, tp, "query heads"))

    def with_heads(self, kv_heads: int | None, head_dim: int | None) -> MultiHeadLatentAttention:
        return self  # the latent has no KV heads to change


@dataclass(frozen=True)
class Mamba:
    """Mamba (S6) mixer, as in Jamba: a fixed conv + SSM state per sequence.

    State per layer = conv state d_inner x (d_conv - 1) + SSM state d_inner x d_state. The conv
    keeps d_conv - 1 past inputs, as vLLM's MambaSpec does (transformers' cache keeps d_conv).
    """

    kind: ClassVar[str] = "mamba"
    d_inner: int
    d_state: int
    d_conv: int
    dt_rank: int

    def cache_elements_per_token(self) -> int:
        return 0

    def tokens_held(self, context_tokens: int) -> int:
        return 0

    def state_elements(self) -> int:
        return self.d_inner * (self.d_conv - 1) + self.d_inner * self.d_state

    def per_rank(self, tp: int) -> Mamba:
        return replace(self, d_inner=split_heads(self.d_inner, tp, "Mamba channels"))

    def with_heads(self, kv_heads: int | None, head_dim: int | None) -> Mamba:
        return self


@dataclass(frozen=True)
class GatedDeltaNet:
    """Gated DeltaNet linear attention (Qwen3-Next): matrix state per value head plus a conv.

    Recurrent state = v_heads x k_head_dim x v_head_dim; the causal conv runs over q, k and v
    (conv_dim = 2 x k_heads x k_head_dim + v_heads x v_head_dim) and keeps conv_kernel - 1 inputs.
    """

    kind: ClassVar[str] = "gated_deltanet"
    k_heads: int
    v_heads: int
    k_head_dim: int
    v_head_dim: int
    conv_kernel: int

    def cache_elements_per_token(self) -> int:
        return 0

    def tokens_held(self, context_tokens: int) -> int:
        return 0

    def conv_dim(self) -> int:
        return 2 * self.k_heads * self.k_head_dim + self.v_heads * self.v_head_dim

    def state_elements(self) -> int:
        recurrent = self.v_heads * self.k_head_dim * self.v_head_dim
        return recurrent + self.conv_dim() * (self.conv_kernel - 1)

    def per_rank(self, tp: int) -> GatedDeltaNet:
        return replace(
            self,
            k_heads=split_heads(self.k_heads, tp, "linear-attention key heads"),
            v_heads=split_heads(self.v_heads, tp, "linear-attention value heads"),
        )

    def with_heads(self, kv_heads: int | None, head_dim: int | None) -> GatedDeltaNet:
        return self


@dataclass(frozen=True)
class LightningAttention:
    """Lightning (linear) attention (MiniMax-Text-01 / M1): a head_dim x head_dim state per head,
    no convolution (MiniMax-M1 modeling code)."""

    kind: ClassVar[str] = "lightning"
    heads: int
    head_dim: int

    def cache_elements_per_token(self) -> int:
        return 0

    def tokens_held(self, context_tokens: int) -> int:
        return 0

    def state_elements(self) -> int:
        return self.heads * self.head_dim * self.head_dim

    def per_rank(self, tp: int) -> LightningAttention:
        return replace(self, heads=split_heads(self.heads, tp, "linear-attention heads"))

    def with_heads(self, kv_heads: int | None, head_dim: int | None) -> LightningAttention:
        return self


Mixer = (
    FullAttention
    | SlidingWindowAttention
    | ChunkedLocalAttention
    | MultiHeadLatentAttention
    | Mamba
    | GatedDeltaNet
    | LightningAttention
)

#: Mixers whose cache grows with the tokens they hold (as opposed to a fixed state).
ATTENTION_KINDS = ("full", "sliding", "chunked", "mla")

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
        head dim, or another depth. Kinds without KV heads (MLA, states) are left unchanged."""
        pattern = tuple(m.with_heads(kv_heads, head_dim) for m in self.mixer_pattern)
        return replace(
            self,
            mixer_pattern=pattern,
            num_layers=num_layers if num_layers is not None else self.num_layers,
        )

    def per_rank(self, tp: int) -> ModelSpec:
        """What one tensor-parallel rank of ``tp`` holds (heads split, MLA latent replicated)."""
        return replace(self, mixer_pattern=tuple(m.per_rank(tp) for m in self.mixer_pattern))
