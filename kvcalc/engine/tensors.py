"""Tensor descriptions shared by the mixer kinds and the model-level sums.

- :class:`Tensor`: a weight tensor and how tensor parallelism splits it (summed by
  :mod:`kvcalc.engine.weights` into parameter counts and bytes per GPU);
- :class:`StateTensor`: one tensor of a recurrent state on one rank, split as vLLM allocates it
  (summed by :mod:`kvcalc.engine.vllm` into a state page);
- :class:`CacheVectors`: the vectors one token adds to a layer's cache (keys, values or an MLA
  latent), which a quantised cache format scales group by group (:mod:`kvcalc.engine.kvformat`).

They live below both the mixers and the sums so that each mixer kind can describe its own
tensors without importing the modules that add them up. They are NamedTuples, not dataclasses:
as immutable, and a fifth of the start-up time to define (every command imports them).
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

Role = Literal[
    "embedding",
    "lm_head",
    "mixer",
    "mlp",
    "routed_experts",
    "shared_experts",
    "router",
    "norm",
    "encoder",
]


class Tensor(NamedTuple):
    """One weight tensor (or a group split the same way).

    ``units`` is the dimension tensor parallelism splits (heads, intermediate rows, d_inner,
    vocabulary rows); a replicated tensor has ``units == 1``. Each unit holds ``per_unit`` values.

    A linear weight also states its matrix shape, which block and group scales depend on:
    ``cols`` is the input features of one unit's slice (its rows are ``per_unit // cols``
    outputs) and ``split_cols`` whether TP splits the inputs (a row-parallel layer: o_proj,
    down_proj) rather than the outputs (column-parallel: q/k/v, gate/up). A tensor without a
    shape (norms, convolutions, embedding tables) is sized as ``units`` rows of ``per_unit``.
    """

    role: Role
    units: int
    per_unit: int
    cols: int | None = None
    split_cols: bool = False
    stacked: int = 1
    """Separate outputs of one unit's rows, merged into one layer: gate and up of each of the
    MLPs stacked (vLLM's and SGLang's MergedColumnParallelLinear), so a rank's output
    partition is its rows / ``stacked``."""

    @property
    def params(self) -> int:
        return self.units * self.per_unit

    def params_per_rank(self, tp: int) -> int:
        """Values on the most loaded of ``tp`` ranks: ceil(units / tp) units."""
        return -(-self.units // tp) * self.per_unit

    def rank_matrix(self, tp: int) -> tuple[int, int]:
        """The ``[rows, cols]`` matrix the most loaded of ``tp`` ranks holds."""
        n = -(-self.units // tp)
        if self.cols is None:
            return n, self.per_unit
        rows = self.per_unit // self.cols
        return (rows, n * self.cols) if self.split_cols else (n * rows, self.cols)


def linear(role: Role, units: int, rows: int, cols: int, stacked: int = 1) -> Tensor:
    """A column-parallel linear weight: ``units`` slices of ``[rows, cols]`` stacked on the
    outputs (q/k/v by head, gate/up by intermediate row); ``units == 1`` is replicated.
    ``stacked``: the separate outputs merged in each slice's rows (gate and up: 2)."""
    return Tensor(role, units, rows * cols, cols, stacked=stacked)


def row_parallel(role: Role, units: int, rows: int, cols: int) -> Tensor:
    """A row-parallel linear weight ``[rows, units x cols]``: TP splits the inputs (o_proj by
    head, down_proj by intermediate row)."""
    return Tensor(role, units, rows * cols, cols, split_cols=True)


def replicated(role: Role, params: int) -> Tensor:
    return Tensor(role, 1, params)


class StateTensor(NamedTuple):
    """One tensor of a recurrent state on one rank: ``conv`` or ``ssm`` (temporal) role, the split
    of vLLM's MambaStateShapeCalculator; the two may be stored in different dtypes."""

    role: Literal["conv", "ssm"]
    shape: tuple[int, ...]

    @property
    def elements(self) -> int:
        return math.prod(self.shape)


class CacheVectors(NamedTuple):
    """``number`` vectors of ``length`` values that one token adds to one layer's cache: the keys
    or the values of its KV heads, or MLA's latent (which serves as both)."""

    role: Literal["key", "value", "latent"]
    number: int
    length: int

    @property
    def elements(self) -> int:
        return self.number * self.length

    def groups(self, group: int) -> int:
        """Scale groups of ``group`` values along each vector; a partial group still has one."""
        return self.number * -(-self.length // group)
