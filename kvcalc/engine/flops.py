"""FLOPs per decode step: one new token for each of ``batch`` sequences at a context length.

Three parts, each for the whole batch:

- matmul: 2 FLOPs (one multiply-add) per weight a token is multiplied with. That is every active
  parameter except the embedding table (a row lookup, no arithmetic) and the norms (elementwise,
  not counted); the LM head is a matmul, and a tied head multiplies with the embedding matrix.
  Routed experts count top_k per token, whatever the batch. The few elementwise mixer parameters
  (Mamba A and D, Gated DeltaNet A_log and dt_bias, the depthwise convolutions) are counted at
  2 FLOPs each too: one multiply-add per value per token.
- attention: scores and weighted sum over the tokens each attention layer holds (windows,
  chunks and an eviction policy capped by ``layer_tokens_held``), the layer's
  ``attention_flops_per_held_token`` per held token (softmax attention 2 x q_heads x
  (head_dim_k + head_dim_v); MLA in the absorbed form vLLM decodes with, whose up-projections
  are then in the matmul part);
- state: the recurrent update of state mixers, the layer's ``state_flops_per_token``, a few
  FLOPs per state element. Exponentials, gating and the discretisation are not counted; the
  convolution is in the matmul part.

Each kind's count, and why, is in its module of :mod:`kvcalc.engine.mixers`.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcalc.engine.eviction import KEEP_ALL, Eviction, layer_tokens_held
from kvcalc.engine.kv import layer_groups
from kvcalc.engine.spec import ModelSpec
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


def decode_flops(
    model: ModelSpec, batch: int, context_tokens: int, eviction: Eviction = KEEP_ALL
) -> DecodeFlops:
    """FLOPs of one decode step: ``batch`` sequences, each attending to the tokens its layers
    hold of ``context_tokens`` (an eviction policy attends over what it keeps)."""
    if batch < 1 or context_tokens < 1:
        raise ValueError(
            f"batch and context must be at least 1 (got batch={batch}, context={context_tokens})"
        )
    attention = 0
    state = 0
    for mixer, n in layer_groups(model):
        held = layer_tokens_held(mixer, context_tokens, eviction)
        attention += mixer.attention_flops_per_held_token() * held * n
        state += mixer.state_flops_per_token() * n
    return DecodeFlops(
        matmul=2 * matmul_params_per_token(model) * batch,
        attention=attention * batch,
        state=state * batch,
    )


def attended_tokens_in_prefill(held_at_prompt: int, prompt_tokens: int) -> int:
    """Tokens a causal prefill of ``prompt_tokens`` attends to, summed over its positions:
    position t attends to min(t, W) tokens, W the tokens the layer holds at the full prompt
    (the prompt itself for full attention: P(P+1)/2). A chunked layer is counted as a sliding
    window of its chunk, an upper bound."""
    window = held_at_prompt
    return window * (window + 1) // 2 + (prompt_tokens - window) * window


def prefill_flops(model: ModelSpec, prompt_tokens: int) -> DecodeFlops:
    """FLOPs of prefilling one prompt: every token through the matmuls (2 x weights it is
    multiplied with), causal attention over the positions before it, and the state updates.

    Attention per attended token is the decode count of each kind. For MLA that is the absorbed
    form decode runs (scores over the latent), which prefill engines avoid by expanding keys and
    values first: an upper bound there, about 3x the expanded form's attention FLOPs."""
    if prompt_tokens < 1:
        raise ValueError(f"prompt must be at least 1 token (got {prompt_tokens})")
    attention = 0
    state = 0
    for mixer, n in layer_groups(model):
        attended = attended_tokens_in_prefill(mixer.tokens_held(prompt_tokens), prompt_tokens)
        attention += mixer.attention_flops_per_held_token() * attended * n
        state += mixer.state_flops_per_token() * prompt_tokens * n
    return DecodeFlops(
        matmul=2 * matmul_params_per_token(model) * prompt_tokens,
        attention=attention,
        state=state,
    )
