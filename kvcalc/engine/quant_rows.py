"""Weight formats with one scale per tensor or per output row: what quantized Hugging Face
checkpoints declare in their ``quantization_config`` (the registry's own formats are in
:mod:`kvcalc.engine.quant`, which re-exports these). A module of their own so that commands
that never read such a config do not pay for the classes at start-up."""

from __future__ import annotations

from dataclasses import dataclass

from kvcalc.engine.checkpoint import WeightFormat


@dataclass(frozen=True)
class TensorScaled(WeightFormat):
    """One ``scale_bits`` scale per tensor (per TP shard: vLLM keeps one per loaded shard)."""

    name: str
    bits: int
    scale_bits: int = 32

    def matrix_bits(self, rows: int, cols: int) -> int:
        return rows * cols * self.bits + self.scale_bits

    @property
    def element_bits(self) -> int:
        return self.bits


@dataclass(frozen=True)
class ChannelScaled(WeightFormat):
    """One ``scale_bits`` scale per output row (``weight_scale`` of shape ``[rows, 1]``)."""

    name: str
    bits: int
    scale_bits: int

    def matrix_bits(self, rows: int, cols: int) -> int:
        return rows * (cols * self.bits + self.scale_bits)

    @property
    def element_bits(self) -> int:
        return self.bits
