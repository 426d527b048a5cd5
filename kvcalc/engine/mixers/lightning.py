"""Lightning (linear) attention (MiniMax-Text-01 / M1).

- state (vLLM MambaStateShapeCalculator.linear_attention_state_shape; MiniMax-M1 modeling
  code): a head_dim x head_dim matrix per head, no convolution;
- weights (transformers MiniMaxLightningAttention): qkv_proj, output_gate, out_proj and the
  RMSNorm over heads x head_dim, all split by heads;
- decode FLOPs: 4 per state element per token (decay-and-update, one multiply-add, and the
  read-out q.S, another); the decay exponentials are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from kvcalc.engine.mixers.base import RecurrentMixer, split_heads
from kvcalc.engine.tensors import StateTensor, Tensor


@dataclass(frozen=True)
class LightningAttention(RecurrentMixer):
    """A head_dim x head_dim state per head."""

    kind: ClassVar[str] = "lightning"
    heads: int
    head_dim: int

    def state_tensors(self) -> tuple[StateTensor, ...]:
        return (StateTensor("ssm", (self.heads, self.head_dim, self.head_dim)),)

    def weight_tensors(self, hidden: int) -> tuple[Tensor, ...]:
        return (
            Tensor("mixer", self.heads, 3 * hidden * self.head_dim),  # qkv_proj
            Tensor("mixer", self.heads, hidden * self.head_dim),  # output_gate
            Tensor("mixer", self.heads, self.head_dim * hidden),  # out_proj
            Tensor("norm", self.heads, self.head_dim),  # RMSNorm over heads x head_dim
        )

    def state_flops_per_token(self) -> int:
        return 4 * self.heads * self.head_dim * self.head_dim

    def detail(self) -> str:
        return f"{self.heads} heads x {self.head_dim}x{self.head_dim}"

    def listed_head_dim(self) -> int:
        return self.head_dim

    def per_rank(self, tp: int) -> LightningAttention:
        return replace(self, heads=split_heads(self.heads, tp, "linear-attention heads"))
