"""Mamba-2 (SSD) mixer, as in IBM Granite-4.0-H, Bamba and Nemotron-H.

- state (vLLM MambaStateShapeCalculator.mamba2_state_shape): a conv state of conv_dim x
  (d_conv - 1) past inputs, conv_dim = d_inner + 2 x n_groups x d_state (the conv runs over x,
  B and C), and an SSM state of n_heads x head_dim x d_state. d_inner is n_heads x head_dim;
- tensor parallelism (vLLM MambaMixer2): heads are split; groups are split when tp divides
  them, and a single group is replicated on every rank (extra_groups_for_head_shards pads the
  groups up to tp, one per rank); any other group count is refused, as vLLM asserts;
- weights (transformers GraniteMoeHybridMambaLayer): in_proj (hidden x (2 d_inner +
  2 n_groups d_state + n_heads): gate z, x, B, C and dt), conv1d over x, B and C with its bias
  (mamba_conv_bias defaults to true), dt_bias, A_log and D per head, the gated RMSNorm over
  d_inner and out_proj. The per-head parts split by heads, B and C by groups;
- decode FLOPs: 4 per SSM state element per token, the convention of the Mamba-1 kind (the
  decay-and-update h = a*h + B x, one multiply-add, and the read-out C.h, another); the
  discretisation and gating are not counted and the convolution is counted with the weights.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from kvcalc.engine.mixers.base import ParallelismError, RecurrentMixer, split_heads
from kvcalc.engine.tensors import StateTensor, Tensor


def groups_per_rank(n_groups: int, tp: int) -> int:
    """B/C groups one of ``tp`` ranks holds. vLLM MambaMixer2 splits them when tp divides them
    and otherwise requires a single group, which every rank then keeps a copy of."""
    if n_groups % tp == 0:
        return n_groups // tp
    if n_groups == 1:
        return 1
    raise ParallelismError(n_groups, "Mamba-2 groups", tp)


@dataclass(frozen=True)
class Mamba2(RecurrentMixer):
    """A fixed conv + SSM state per sequence over ``n_heads`` heads of ``head_dim`` channels."""

    kind: ClassVar[str] = "mamba2"
    n_heads: int
    head_dim: int
    n_groups: int
    d_state: int
    d_conv: int

    def d_inner(self) -> int:
        return self.n_heads * self.head_dim

    def conv_dim(self) -> int:
        return self.d_inner() + 2 * self.n_groups * self.d_state

    def state_tensors(self) -> tuple[StateTensor, ...]:
        return (
            StateTensor("conv", (self.conv_dim(), self.d_conv - 1)),
            StateTensor("ssm", (self.n_heads, self.head_dim, self.d_state)),
        )

    def weight_tensors(self, hidden: int) -> tuple[Tensor, ...]:
        p, n, k = self.head_dim, self.d_state, self.d_conv
        return (
            Tensor("mixer", self.n_heads, (2 * p + 1) * hidden),  # in_proj z, x and dt
            Tensor("mixer", self.n_groups, 2 * n * hidden),  # in_proj B, C
            Tensor("mixer", self.n_heads, p * (k + 1)),  # conv1d over x, weight and bias
            Tensor("mixer", self.n_groups, 2 * n * (k + 1)),  # conv1d over B, C
            Tensor("mixer", self.n_heads, 3),  # dt_bias, A_log, D
            Tensor("norm", self.n_heads, p),  # gated RMSNorm over d_inner
            Tensor("mixer", self.n_heads, p * hidden),  # out_proj
        )

    def state_flops_per_token(self) -> int:
        return 4 * self.n_heads * self.head_dim * self.d_state

    def detail(self) -> str:
        return (
            f"{self.n_heads} heads x {self.head_dim}, d_state {self.d_state}, "
            f"groups {self.n_groups}, conv {self.d_conv}"
        )

    def per_rank(self, tp: int) -> Mamba2:
        return replace(
            self,
            n_heads=split_heads(self.n_heads, tp, "Mamba-2 heads"),
            n_groups=groups_per_rank(self.n_groups, tp),
        )
