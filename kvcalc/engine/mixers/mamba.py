"""Mamba (S6) mixer, as in Jamba.

- state (vLLM MambaStateShapeCalculator.mamba1_state_shape): a conv state of d_inner x
  (d_conv - 1) past inputs and an SSM state of d_inner x d_state. The conv keeps d_conv - 1
  inputs, as vLLM's MambaSpec does (transformers' cache keeps d_conv);
- weights (transformers JambaMambaMixer): in_proj, conv1d, x_proj, dt_proj, A, D, out_proj,
  every one split along d_inner (vLLM MambaMixer), so one unit is one channel;
- decode FLOPs: 4 per SSM state element per token (decay-and-update h = a*h + b, one
  multiply-add, and the read-out C.h, another); the discretisation is not counted and the
  convolution is counted with the weights.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from kvcalc.engine.mixers.base import RecurrentMixer, split_heads
from kvcalc.engine.tensors import StateTensor, Tensor


@dataclass(frozen=True)
class Mamba(RecurrentMixer):
    """A fixed conv + SSM state per sequence over ``d_inner`` channels."""

    kind: ClassVar[str] = "mamba"
    d_inner: int
    d_state: int
    d_conv: int
    dt_rank: int

    def state_tensors(self) -> tuple[StateTensor, ...]:
        return (
            StateTensor("conv", (self.d_inner, self.d_conv - 1)),
            StateTensor("ssm", (self.d_inner, self.d_state)),
        )

    def weight_tensors(self, hidden: int) -> tuple[Tensor, ...]:
        per_channel = (
            2 * hidden  # in_proj (x and gate z)
            + self.d_conv  # depthwise conv1d
            + self.dt_rank
            + 2 * self.d_state  # x_proj -> (dt, B, C)
            + self.dt_rank  # dt_proj
            + self.d_state  # A_log
            + 1  # D
            + hidden  # out_proj
        )
        return (Tensor("mixer", self.d_inner, per_channel),)

    def state_flops_per_token(self) -> int:
        return 4 * self.d_inner * self.d_state

    def detail(self) -> str:
        return f"d_inner {self.d_inner}, d_state {self.d_state}, conv {self.d_conv}"

    def per_rank(self, tp: int) -> Mamba:
        return replace(self, d_inner=split_heads(self.d_inner, tp, "Mamba channels"))
