"""Gated DeltaNet linear attention (Qwen3-Next).

- state (vLLM MambaStateShapeCalculator.gated_delta_net_state_shape): a recurrent matrix of
  k_head_dim x v_head_dim per value head, and a causal conv over q, k and v (conv_dim =
  2 x k_heads x k_head_dim + v_heads x v_head_dim) keeping conv_kernel - 1 inputs;
- weights (transformers Qwen3NextGatedDeltaNet): in_proj_qkvz (hidden x (2 key_dim +
  2 value_dim)), in_proj_ba (hidden x 2 v_heads), conv1d over q, k, v without bias, dt_bias,
  A_log, the gated RMSNorm (one vector of v_head_dim shared by all heads) and out_proj;
- decode FLOPs: 6 per recurrent state element per token: the decay-and-update and the read-out
  (2 each, as Mamba) plus the delta rule's product S.k; gating is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from kvcalc.engine.mixers.base import RecurrentMixer, split_heads
from kvcalc.engine.tensors import StateTensor, Tensor, replicated


@dataclass(frozen=True)
class GatedDeltaNet(RecurrentMixer):
    """A matrix state per value head plus a conv over q, k and v."""

    kind: ClassVar[str] = "gated_deltanet"
    k_heads: int
    v_heads: int
    k_head_dim: int
    v_head_dim: int
    conv_kernel: int

    def conv_dim(self) -> int:
        return 2 * self.k_heads * self.k_head_dim + self.v_heads * self.v_head_dim

    def state_tensors(self) -> tuple[StateTensor, ...]:
        return (
            StateTensor("conv", (self.conv_dim(), self.conv_kernel - 1)),
            StateTensor("ssm", (self.v_heads, self.k_head_dim, self.v_head_dim)),
        )

    def weight_tensors(self, hidden: int) -> tuple[Tensor, ...]:
        k, v = self.k_head_dim, self.v_head_dim
        return (
            Tensor("mixer", self.k_heads, 2 * hidden * k),  # in_proj q, k
            Tensor("mixer", self.v_heads, 2 * hidden * v),  # in_proj v, z
            Tensor("mixer", self.v_heads, 2 * hidden),  # in_proj_ba
            Tensor("mixer", self.k_heads, 2 * k * self.conv_kernel),  # conv1d over q, k
            Tensor("mixer", self.v_heads, v * self.conv_kernel),  # conv1d over v
            Tensor("mixer", self.v_heads, 2),  # dt_bias, A_log
            replicated("norm", v),  # gated RMSNorm
            Tensor("mixer", self.v_heads, v * hidden),  # out_proj
        )

    def state_flops_per_token(self) -> int:
        return 6 * self.v_heads * self.k_head_dim * self.v_head_dim

    def detail(self) -> str:
        return f"{self.v_heads} v heads x {self.k_head_dim}x{self.v_head_dim}"

    def per_rank(self, tp: int) -> GatedDeltaNet:
        return replace(
            self,
            k_heads=split_heads(self.k_heads, tp, "linear-attention key heads"),
            v_heads=split_heads(self.v_heads, tp, "linear-attention value heads"),
        )
