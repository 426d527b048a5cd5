"""``--weight-dtype`` names as a model's weights, and back: every name kvcalc prints for a
model's weights is a name ``--weight-dtype`` takes for that model, giving the same weights.

A single name (``fp8``, ``mxfp4``, ``int4-g32``) follows :func:`checkpoint_precision`'s rule of
how checkpoints ship it. The tables print the formats of a model's weights joined by ``+``
(:attr:`CheckpointFormat.name`: ``fp8+bf16``, ``bf16+mxfp4``), which depends on the model (which
roles a name quantizes, its dtype), so a joined name is read against the model: the released
format when it is named so (Kimi-K2-Thinking's ``bf16+int4-g32``, which no single name gives),
else the single name whose weights are named so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.engine.quant import WEIGHT_FORMAT_NAMES, weight_format
from kvcalc.engine.units import UnitError, canonical_dtype_name
from kvcalc.engine.weights import checkpoint_precision, released_format

if TYPE_CHECKING:
    from kvcalc.engine.checkpoint import CheckpointFormat
    from kvcalc.engine.spec import ModelSpec


def weight_precision(model: ModelSpec, name: str | None) -> CheckpointFormat:
    """The weights ``--weight-dtype NAME`` gives ``model``; None: as released."""
    if name is None:
        return released_format(model)
    if "+" not in name:
        return checkpoint_precision(model, weight_format(name))
    key = "+".join(_canonical(part) for part in name.split("+"))
    for candidate in joined_candidates(model):
        if candidate.name == key:
            return candidate
    joined = sorted({c.name for c in joined_candidates(model) if "+" in c.name})
    raise UnitError(
        f"unknown dtype {name!r} for {model.name}: choose one of "
        f"{', '.join(WEIGHT_FORMAT_NAMES)}, or a joined name its weights print as "
        f"({', '.join(joined) or 'none: they are one format'})"
    )


def weight_dtype_name(model: ModelSpec, precision: CheckpointFormat) -> str:
    """The name to print for ``model``'s weights in ``precision``: its joined name when
    ``--weight-dtype`` reads that back to these weights, else the single name that gives them
    (a config.json's per-tensor ``fp8`` release and ``--weight-dtype fp8`` share the joined
    name ``fp8+bf16``, which reads as the release)."""
    if weight_precision(model, precision.name) == precision:
        return precision.name
    for single in WEIGHT_FORMAT_NAMES:
        if checkpoint_precision(model, weight_format(single)) == precision:
            return single
    return precision.name  # weights no name gives: not from a --weight-dtype or a release


def joined_candidates(model: ModelSpec) -> list[CheckpointFormat]:
    """The weights a joined name may mean, in the order they win: the release, then what
    each single name gives."""
    singles = (checkpoint_precision(model, weight_format(n)) for n in WEIGHT_FORMAT_NAMES)
    return [released_format(model), *singles]


def _canonical(part: str) -> str:
    """One part of a joined name as the tables print it (``BF16``, ``bfloat16`` -> ``bf16``;
    ``int4_g32`` -> ``int4-g32``)."""
    return canonical_dtype_name(part).replace("_", "-")
