"""The KV cache format options, declared once for every command that sizes a cache (`size`
directly, `batch` and `decode` through the deployment options), and their parsing into the
engine's :class:`~kvcalc.engine.kvformat.KVFormat`.

Kept apart from the deployment options so that `kvcalc size` does not pay for those at start-up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, TypeVar

from kvcalc.cli.app import grouped_options, input_options
from kvcalc.engine.inputs import KV_FORMAT_INPUTS
from kvcalc.options import KvFormatOptions as KvFormatOptions

F = TypeVar("F", bound=Callable[..., Any])


KV_PARAMETERS: dict[str, tuple[Any, Any]] = input_options(KV_FORMAT_INPUTS)
assert set(KV_PARAMETERS) == {f.name for f in fields(KvFormatOptions)}


def kv_format_options(command: F) -> F:
    """Add the KV format options to ``command``, which receives them as ``kv``."""
    return grouped_options(command, "kv", KvFormatOptions, KV_PARAMETERS)
