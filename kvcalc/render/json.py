"""JSON text: keys are stable; values are raw numbers (bytes, tokens), never humanised strings."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def finite(value: Any) -> Any:
    """The payload with every non-finite float as None: JSON has no Infinity or NaN (and
    ``allow_nan=False`` refuses them), and YAML readers disagree on ``.inf``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(payload: Any) -> str:
    import json  # lazily: a table run never needs it

    return json.dumps(finite(payload), indent=2, sort_keys=False, allow_nan=False) + "\n"
