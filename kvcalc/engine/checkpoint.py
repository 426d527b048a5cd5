"""A checkpoint's weight format per role: the :class:`WeightFormat` interface and
:class:`CheckpointFormat`, which a model spec holds.

The format families (plain, per-tensor, per-channel, group and block scales) and the named
formats live in :mod:`kvcalc.engine.quant`, which re-exports these two: a spec names only this
light module, so reading a spec (``kvcalc size``) does not build the format classes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING

from kvcalc.engine.tensors import Role

if TYPE_CHECKING:
    from kvcalc.engine.units import DType


class WeightFormat(ABC):
    """How one weight matrix is stored. ``name`` is the word the tables print."""

    name: str

    @abstractmethod
    def matrix_bits(self, rows: int, cols: int) -> int | Fraction:
        """Bits of a ``[rows, cols]`` weight (rows: outputs, cols: inputs), scales included."""

    @property
    @abstractmethod
    def element_bits(self) -> int:
        """Bits of one stored value (without scales): what the matmul reads per weight."""

    @property
    def expert_alignment(self) -> tuple[int, int] | None:
        """Multiples the engine pads a routed expert's shard to when it loads this format:
        (intermediate rows per TP shard, hidden size); None: stored as shipped."""
        return None

    @property
    def compute(self) -> str:
        """The dtype the matmuls run in: FP8 weights run FP8 GEMMs (vLLM's CUTLASS FP8 kernels);
        other quantized weights are dequantized to 16 bits by weight-only kernels (Marlin)."""
        return "fp8" if self.name.startswith("fp8") else "bf16"


# --------------------------------------------------------------------------------------------
# A whole checkpoint

_LAYER_ROLES: frozenset[Role] = frozenset({"mixer", "mlp", "shared_experts"})


@dataclass(frozen=True)
class CheckpointFormat:
    """The storage format of each part of a model.

    Quantized checkpoints rarely quantize everything: DeepSeek-V3's FP8 release keeps the
    embedding, LM head, norms and router in bf16; gpt-oss stores only its routed experts in
    MXFP4. ``kept`` lists roles that the checkpoint leaves at ``other`` although their group is
    quantized (a compressed-tensors ``ignore`` list naming the attention, say).
    """

    experts: WeightFormat
    """Routed experts."""
    layers: WeightFormat
    """Mixer projections, dense MLPs and shared experts."""
    other: WeightFormat
    """Embedding, LM head, norms and router: the model dtype."""
    kept: frozenset[Role] = field(default_factory=frozenset)
    source: str | None = field(default=None, compare=False)
    """Where the format was read (a registry ``weights.source``, a quantization_config)."""

    @classmethod
    def uniform(cls, fmt: WeightFormat | DType) -> CheckpointFormat:
        from kvcalc.engine.quant import as_format

        f = as_format(fmt)
        return cls(f, f, f)

    @classmethod
    def quantized_layers(
        cls, fmt: WeightFormat | DType, keep: WeightFormat | DType
    ) -> CheckpointFormat:
        """Layer matrices (experts included) in ``fmt``; embeddings, head, norms, router in
        ``keep`` (the usual FP8 / INT8 / INT4 checkpoint layout)."""
        from kvcalc.engine.quant import as_format

        return cls(as_format(fmt), as_format(fmt), as_format(keep))

    def format_for(self, role: Role) -> WeightFormat:
        if role in self.kept:
            return self.other
        if role == "routed_experts":
            return self.experts
        if role in _LAYER_ROLES:
            return self.layers
        return self.other

    @property
    def name(self) -> str:
        """``bf16``, or the distinct formats from the layers outwards (``mxfp4+bf16``)."""
        names = (self.layers.name, self.experts.name, self.other.name)
        return "+".join(dict.fromkeys(names))

    @property
    def is_quantized(self) -> bool:
        return self.layers != self.other or self.experts != self.other
