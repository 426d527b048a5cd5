"""The KV cache format options, declared once for every command that sizes a cache (`size`
directly, `batch` and `decode` through the deployment options), and their parsing into the
engine's :class:`~kvcalc.engine.kvformat.KVFormat`.

Kept apart from the deployment options so that `kvcalc size` does not pay for those at start-up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, TypeVar

import typer

from kvcalc.cli.app import (
    KV_PANEL,
    KvDtypeOption,
    grouped_options,
    in_panel,
    token_option,
)
from kvcalc.options import KvFormatOptions as KvFormatOptions

F = TypeVar("F", bound=Callable[..., Any])


KV_PARAMETERS: dict[str, tuple[Any, Any]] = in_panel(KV_PANEL, {
    "kv_dtype": (str | None, KvDtypeOption),
    "kv_group": (
        int | None,
        typer.Option(
            None,
            "--kv-group",
            min=1,
            max=1 << 20,
            help="quantised KV: values per scale (KIVI: tokens per key scale) "
            "[default: per format; KIVI: 32]",
        ),
    ),
    "kv_scale_dtype": (
        str | None,
        typer.Option(
            None,
            "--kv-scale-dtype",
            metavar="DTYPE",
            help="quantised KV: scale (and zero-point) dtype, fp16, bf16, fp32, fp8 or e8m0 "
            "[default: fp16]",
        ),
    ),
    "kv_zero_point": (
        bool,
        typer.Option(
            False, "--kv-zero-point", help="quantised KV: asymmetric, a zero point per scale"
        ),
    ),
    "kv_quant": (
        str | None,
        typer.Option(
            None,
            "--kv-quant",
            metavar="NAME",
            help="KV quantiser: kivi (with --kv-bits, --kv-residual)",
        ),
    ),
    "kv_bits": (
        int | None,
        typer.Option(None, "--kv-bits", help="KIVI: bits per value, 2 or 4 [default: 2]"),
    ),
    "kv_residual": (
        int | None,
        token_option(
            None,
            "--kv-residual",
            minimum=0,
            help="KIVI: most recent tokens kept at full precision [default: 128]",
        ),
    ),
})
assert set(KV_PARAMETERS) == {f.name for f in fields(KvFormatOptions)}


def kv_format_options(command: F) -> F:
    """Add the KV format options to ``command``, which receives them as ``kv``."""
    return grouped_options(command, "kv", KvFormatOptions, KV_PARAMETERS)
