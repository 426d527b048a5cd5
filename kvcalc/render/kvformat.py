"""How a deployment's KV format is shown: its name, with the effective bits when scales or a
full-precision part make them differ from the nominal bits (int4 g32 fp16+zero: 5.0 bits)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.engine.kvformat import format_bits, model_effective_bits

if TYPE_CHECKING:
    from fractions import Fraction

    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.kvformat import KVFormat


def kv_bits_per_value(dep: Deployment) -> float | None:
    """JSON ``kv_bits_per_value``: bits per stored value at long context, scales included
    (None when no layer holds tokens)."""
    bits = model_effective_bits(dep.kv_dtype, dep.model)
    return None if bits is None else float(bits)


def shows_bits(fmt: KVFormat, bits: Fraction) -> bool:
    """Whether a format's effective bits are worth printing: they differ from its nominal bits
    (scales) or its bytes are not linear in tokens (a full-precision part)."""
    return not (bits == fmt.nominal_bits and fmt.linear)


def kv_label(dep: Deployment) -> str:
    """The format's name, and its effective bits when they are not its nominal bits."""
    fmt = dep.kv_dtype
    bits = model_effective_bits(fmt, dep.model)
    if bits is None or not shows_bits(fmt, bits):
        return fmt.name
    return f"{fmt.name} ({format_bits(bits)} bits)"
