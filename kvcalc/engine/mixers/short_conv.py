"""Gated short convolution (Liquid AI LFM2's conv layers).

- state (vLLM 0.33 MambaStateShapeCalculator.short_conv_state_shape, SGLang 0.5.23
  Lfm2Config.mamba2_cache_params): only a conv state of conv_dim x (L_cache - 1) past inputs,
  conv_dim being the layer's channels (hidden_size in every LFM2 release); no temporal state
  (SGLang's shape has state_size 0, so its temporal tensor is empty). Its dtype is the conv
  state's (vLLM short_conv_state_dtype: ``--mamba-cache-dtype``, auto = the model dtype;
  SGLang: bfloat16);
- tensor parallelism: the channels are split (vLLM divide(conv_dim, tp), SGLang
  divide(conv_dim, attn_tp_size)); a TP size that does not divide them is refused, as both
  engines assert;
- weights (vLLM ShortConv, transformers Lfm2ShortConv): in_proj (hidden -> 3 x channels: the
  gates B and C and the input x, column-parallel), the depthwise conv1d (L_cache taps per
  channel) and out_proj (channels -> hidden, row-parallel), each with a bias when conv_bias;
- decode FLOPs: the two gating products per channel (B * x before the conv, C * y after it);
  the conv's L_cache multiply-adds are its weights, counted with the weights as the Mamba kinds
  count theirs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from kvcalc.engine.mixers.base import RecurrentMixer, split_heads
from kvcalc.engine.tensors import StateTensor, Tensor, linear, replicated, row_parallel


@dataclass(frozen=True)
class ShortConv(RecurrentMixer):
    """A conv state of ``channels`` x (``conv_kernel`` - 1) past inputs per sequence."""

    kind: ClassVar[str] = "short_conv"
    channels: int
    conv_kernel: int
    bias: bool = False

    def state_tensors(self) -> tuple[StateTensor, ...]:
        return (StateTensor("conv", (self.channels, self.conv_kernel - 1)),)

    def weight_tensors(self, hidden: int) -> tuple[Tensor, ...]:
        b = int(self.bias)
        tensors = (
            linear("mixer", self.channels, 3, hidden, stacked=3),  # in_proj: B, C and x
            # conv1d taps, plus its bias and in_proj's three per channel
            Tensor("mixer", self.channels, self.conv_kernel + 4 * b),
            row_parallel("mixer", self.channels, hidden, 1),  # out_proj
        )
        return (*tensors, replicated("mixer", hidden)) if self.bias else tensors

    def state_flops_per_token(self) -> int:
        return 2 * self.channels

    def detail(self) -> str:
        return f"{self.channels} channels, conv {self.conv_kernel}"

    def per_rank(self, tp: int) -> ShortConv:
        return replace(self, channels=split_heads(self.channels, tp, "short-conv channels"))
