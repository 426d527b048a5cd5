"""The eviction and bounding options (`--window`, `--sinks`/`--recent`, `--h2o-budget`,
`--snapkv-budget`/`--observation-window`/`--prompt`/`--gen`, `--keep-ratio`) of `size`,
`batch`, `decode` and `compare`, from their declarations (:data:`kvcalc.options.EVICTION_INPUTS`).

Kept apart from :mod:`kvcalc.cli.deploy` so that `size`, which takes no deployment, does not pay
for the deployment options at start-up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from kvcalc.cli.app import grouped_options, input_options
from kvcalc.options import EVICTION_INPUTS
from kvcalc.options import EvictionOptions as EvictionOptions

F = TypeVar("F", bound=Callable[..., Any])


_EVICTION_PARAMETERS: dict[str, tuple[Any, Any]] = input_options(EVICTION_INPUTS)


def eviction_options(command: F) -> F:
    """Add the eviction options to ``command``, which receives them as ``evict``."""
    return grouped_options(command, "evict", EvictionOptions, _EVICTION_PARAMETERS)
