"""Weight formats: how a checkpoint stores a weight matrix, scales and zero points included.

A quantized checkpoint stores a linear weight ``[rows, cols]`` (rows = output features, cols =
input features) as low-bit values plus scales (and, for asymmetric integer formats, zero points).
How many scales there are depends on the tensor's shape, so each format family counts the bits
of a whole matrix from its shape, with one formula:

- :class:`Plain`: every value at ``bits`` (bf16, fp16, fp32, or a bare 8/4-bit what-if);
- :class:`TensorScaled`: one scale per tensor (FP8 per-tensor, compressed-tensors ``tensor``);
- :class:`ChannelScaled`: one scale per output row (compressed-tensors ``channel``: the RedHat
  ``w8a8`` and ``FP8-dynamic`` checkpoints; bitsandbytes LLM.int8's per-row absmax). These two
  only come from a config.json's ``quantization_config``, so they live in
  :mod:`kvcalc.engine.quant_rows` and load when one is read (re-exported here);
- :class:`GroupScaled`: one scale (and optionally one zero point) per ``group`` consecutive inputs
  of a row, values packed into words (GPTQ / AWQ / compressed-tensors ``group``: int4 packed in
  int32, scales at the model dtype, zeros packed 8 per int32; MXFP4: E2M1 pairs in a byte and one
  E8M0 scale per 32; bitsandbytes NF4: one absmax per 64);
- :class:`BlockScaled`: one scale per ``block_rows x block_cols`` tile (DeepSeek-V3 / Kimi-K2 FP8
  e4m3 with one fp32 scale per 128x128 block, ``weight_block_size`` in their config.json), so it
  depends on both dimensions.

Which roles of a model a checkpoint quantizes is a :class:`CheckpointFormat` (in
:mod:`kvcalc.engine.checkpoint` with the :class:`WeightFormat` interface, re-exported here): one
format for the routed experts, one for the other layer matrices, and the model dtype for what
stays unquantized (embedding, LM head, norms, router, and modules named in an ``ignore`` list).

This module sits below the spec (a model's released format is part of its spec) and imports none
of the engine above it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

# The interface and the per-role type live in the light module a spec imports; re-exported.
from kvcalc.engine.checkpoint import CheckpointFormat as CheckpointFormat
from kvcalc.engine.checkpoint import WeightFormat as WeightFormat
from kvcalc.engine.units import DType, UnitError, canonical_dtype_name, dtype

if TYPE_CHECKING:
    from kvcalc.engine.quant_rows import ChannelScaled as ChannelScaled
    from kvcalc.engine.quant_rows import TensorScaled as TensorScaled

#: Re-exported on first use (see the module docstring).
_ROW_FORMATS = ("TensorScaled", "ChannelScaled")


def __getattr__(name: str) -> Any:
    if name in _ROW_FORMATS:
        from kvcalc.engine import quant_rows

        return getattr(quant_rows, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def packed_bits(values: int, bits: int | Fraction, word_bits: int) -> int:
    """Bits of ``values`` values of ``bits`` each packed into ``word_bits``-bit words (GPTQ packs
    eight int4 values into an int32; MXFP4 two E2M1 values into a byte): whole words only."""
    return _ceil_div(math.ceil(values * bits), word_bits) * word_bits


@dataclass(frozen=True)
class Plain(WeightFormat):
    """Every value at ``bits``, no scales (bf16, fp16, fp32; or a flat ``--weight-dtype``)."""

    name: str
    bits: Fraction

    def matrix_bits(self, rows: int, cols: int) -> int | Fraction:
        # Whole bits as an int: Fraction arithmetic is slow, and a whole-registry batch sums
        # some thousand matrices.
        bits = self.bits
        return rows * cols * (bits.numerator if bits.denominator == 1 else bits)

    @property
    def element_bits(self) -> int:
        return math.ceil(self.bits)


@dataclass(frozen=True)
class GroupScaled(WeightFormat):
    """One scale (and zero point, when ``zero_bits``) per ``group`` consecutive inputs of a row.

    Values are packed along the input into ``word_bits`` words (GPTQ/AWQ int32: 8 int4 values);
    zero points, one per group and row, are packed the same way (GPTQ ``qzeros``)."""

    name: str
    bits: int
    scale_bits: int | Fraction
    group: int
    zero_bits: int = 0
    word_bits: int = 32
    expert_alignment: tuple[int, int] | None = None
    """How the engine pads routed experts in this format when it loads them: each TP shard's
    intermediate rows and the hidden size rounded up to these multiples (None: unpadded)."""

    def matrix_bits(self, rows: int, cols: int) -> int | Fraction:
        groups = _ceil_div(cols, self.group)
        values = rows * packed_bits(cols, self.bits, self.word_bits)
        zeros = groups * packed_bits(rows, self.zero_bits, self.word_bits) if self.zero_bits else 0
        return values + rows * groups * self.scale_bits + zeros

    @property
    def element_bits(self) -> int:
        return self.bits


@dataclass(frozen=True)
class BlockScaled(WeightFormat):
    """One ``scale_bits`` scale per ``block_rows x block_cols`` tile of the matrix."""

    name: str
    bits: int
    scale_bits: int = 32
    block_rows: int = 128
    block_cols: int = 128

    def matrix_bits(self, rows: int, cols: int) -> int:
        tiles = _ceil_div(rows, self.block_rows) * _ceil_div(cols, self.block_cols)
        return rows * cols * self.bits + tiles * self.scale_bits

    @property
    def element_bits(self) -> int:
        return self.bits


def plain(dt: DType) -> Plain:
    return Plain(dt.name, dt.bits)


#: DeepSeek-V3 / R1 / Kimi-K2: FP8 e4m3 values, one fp32 scale per 128x128 block (their
#: config.json: ``quant_method: fp8``, ``weight_block_size: [128, 128]``).
FP8_BLOCK = BlockScaled("fp8-block", 8, 32, 128, 128)
#: OCP MXFP4 as gpt-oss ships its experts: E2M1 values two to a byte, one E8M0 scale per 32.
#: vLLM loads them padded (vllm/model_executor/layers/quantization/mxfp4.py,
#: ``Mxfp4MoEMethod.create_weights``, the CUDA Marlin layout: "n % 256 == 0 and k % 128 == 0",
#: each shard's intermediate size rounded up to 128 and the hidden size to 256): gpt-oss-20b at
#: TP 2 loads 7.01 GiB per GPU in vLLM 0.19's log against 6.40 GiB unpadded.
MXFP4 = GroupScaled("mxfp4", 4, 8, 32, word_bits=8, expert_alignment=(128, 256))
#: The usual w4a16 checkpoint (GPTQ / AWQ / compressed-tensors pack-quantized): int4 packed in
#: int32, one 16-bit scale per 128 inputs, symmetric (no zero points).
INT4_G128 = GroupScaled("int4-g128", 4, 16, 128)
#: Kimi-K2-Thinking's routed experts (compressed-tensors pack-quantized, its config.json): int4
#: packed in int32, symmetric, one bf16 scale per 32 inputs.
INT4_G32 = GroupScaled("int4-g32", 4, 16, 32)

#: NVIDIA's NVFP4 as ModelOpt ships it (the nvidia/*-NVFP4 repos): E2M1 values two to a byte,
#: one FP8 e4m3 scale per 16 inputs (vLLM 0.19 ModelOptNvFp4LinearMethod.create_weights; its
#: two fp32 scalars per matrix, weight_scale_2 and input_scale, are not counted).
NVFP4 = GroupScaled("nvfp4", 4, 8, 16, word_bits=8)

#: ``--weight-dtype`` names that are formats rather than flat dtypes.
NAMED_FORMATS: dict[str, WeightFormat] = {
    f.name: f for f in (FP8_BLOCK, MXFP4, NVFP4, INT4_G128, INT4_G32)
}
#: Every ``--weight-dtype`` choice: the flat dtypes (values only, as a what-if) and the formats.
WEIGHT_FORMAT_NAMES = ("fp32", "bf16", "fp16", "fp8", "int8", "int4", *NAMED_FORMATS)


def weight_format(name: str) -> WeightFormat:
    """A ``--weight-dtype`` name as a format: a named format, else a flat dtype."""
    key = canonical_dtype_name(name).replace("_", "-")
    if key in NAMED_FORMATS:
        return NAMED_FORMATS[key]
    try:
        return plain(dtype(key, WEIGHT_FORMAT_NAMES))
    except UnitError:
        raise UnitError(
            f"unknown dtype {name!r}; choose one of {', '.join(WEIGHT_FORMAT_NAMES)}"
        ) from None


def as_format(value: DType | WeightFormat) -> WeightFormat:
    if isinstance(value, WeightFormat):
        return value
    return plain(value)
