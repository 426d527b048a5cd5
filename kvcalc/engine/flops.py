"""FLOPs per decode step: one new token for each of ``batch`` sequences at a context length.

Three parts, each for the whole batch:

- matmul: 2 FLOPs (one multiply-add) per weight a token is multiplied with. That is every active
  parameter except the embedding table (a row lookup, no arithmetic) and the norms (elementwise,
  not counted); the LM head is a matmul, and a tied head multiplies with the embedding matrix.
  Routed experts count top_k per token, whatever the batch. The few elementwise mixer parameters
  (Mamba A and D, Gated DeltaNet A_log and dt_bias, the depthwise convolutions) are counted at
  2 FLOPs each too: one multiply-add per value per token.
- attention: scores and weighted sum over the tokens each attention layer holds (windows and
  chunks capped by ``tokens_held``), 2 x q_heads x (head_dim_k + head_dim_v) FLOPs per held token
  (QK^T and AV; 2 x 2 x q_heads x head_dim when K and V dims match). MLA is counted in the
  absorbed form vLLM decodes with: queries are mapped into the latent space, scores are taken
  against the kv_lora_rank latent plus the RoPE key and the output is a weighted sum of latents,
  2 x q_heads x (2 x kv_lora_rank + qk_rope_head_dim) per held token. The absorbed up-projections
  (kv_b) then run once per query token and are already in the matmul part.
- state: the recurrent update of state mixers, per state element per token: Mamba and lightning
  attention 4 FLOPs (decay-and-update h = a*h + b, one multiply-add, and the read-out C.h or q.S,
  another); Gated DeltaNet 6 (the delta rule adds the product S.k). Exponentials, gating and the
  discretisation are not counted; the convolution is in the matmul part.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import singledispatch

from kvcalc.engine.spec import (
    FullAttention,
    GatedDeltaNet,
    LightningAttention,
    Mamba,
    ModelSpec,
    MultiHeadLatentAttention,
)
from kvcalc.engine.weights import param_counts


@dataclass(frozen=True)
class DecodeFlops:
    """FLOPs of one decode step for a batch, by part."""

    matmul: int
    attention: int
    state: int

    @property
    def total(self) -> int:
        return self.matmul + self.attention + self.state


def matmul_params_per_token(model: ModelSpec) -> int:
    """Weights one token is multiplied with: active parameters less the embedding lookup and the
    norms, plus the embedding matrix again when it doubles as a tied LM head."""
    counts = param_counts(model)
    tied_head = model.vocab_size * model.hidden_size if model.tied_embeddings else 0
    return counts.active - counts.embedding - counts.norms + tied_head


@singledispatch
def attention_flops_per_held_token(mixer: object) -> int:
    """FLOPs one query token spends per held token in one layer (0 for state mixers)."""
    return 0


@attention_flops_per_held_token.register(FullAttention)
def _softmax(m: FullAttention) -> int:
    return 2 * m.q_heads * (m.head_dim_k + m.head_dim_v)


@attention_flops_per_held_token.register(MultiHeadLatentAttention)
def _mla_absorbed(m: MultiHeadLatentAttention) -> int:
    scores = m.kv_lora_rank + m.qk_rope_head_dim
    values = m.kv_lora_rank
    return 2 * m.q_heads * (scores + values)


@singledispatch
def state_flops_per_token(mixer: object) -> int:
    """FLOPs of one token's recurrent-state update in one layer (0 for attention)."""
    return 0


@state_flops_per_token.register(Mamba)
def _mamba(m: Mamba) -> int:
    return 4 * m.d_inner * m.d_state


@state_flops_per_token.register(LightningAttention)
def _lightning(m: LightningAttention) -> int:
    return 4 * m.heads * m.head_dim * m.head_dim


@state_flops_per_token.register(GatedDeltaNet)
def _gated_deltanet(m: GatedDeltaNet) -> int:
    return 6 * m.v_heads * m.k_head_dim * m.v_head_dim


def decode_flops(model: ModelSpec, batch: int, context_tokens: int) -> DecodeFlops:
    """FLOPs of one decode step: ``batch`` sequences, each attending to ``context_tokens``."""
    if batch < 1 or context_tokens < 1:
        raise ValueError(
            f"batch and context must be at least 1 (got batch={batch}, context={context_tokens})"
        )
    attention = 0
    state = 0
    for i in range(model.num_layers):
        mixer = model.mixer_at(i)
        held = mixer.tokens_held(context_tokens)
        attention += attention_flops_per_held_token(mixer) * held
        state += state_flops_per_token(mixer)
    return DecodeFlops(
        matmul=2 * matmul_params_per_token(model) * batch,
        attention=attention * batch,
        state=state * batch,
    )
