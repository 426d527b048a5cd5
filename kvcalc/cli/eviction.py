"""The eviction and bounding options (`--window`, `--sinks`/`--recent`, `--h2o-budget`,
`--snapkv-budget`/`--observation-window`/`--prompt`/`--gen`, `--keep-ratio`), declared once for
`size`, `batch` and `decode`, and their parsing into one engine policy
(:mod:`kvcalc.engine.eviction`).

Kept apart from :mod:`kvcalc.cli.deploy` so that `size`, which takes no deployment, does not pay
for the deployment options at start-up; the policy types are imported only when one is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, TypeVar

import typer

from kvcalc.cli.app import (
    EVICTION_PANEL,
    TOKENS,
    grouped_options,
    in_panel,
    token_option,
)
from kvcalc.options import EvictionOptions as EvictionOptions

F = TypeVar("F", bound=Callable[..., Any])


_EVICTION_PARAMETERS: dict[str, tuple[Any, Any]] = in_panel(EVICTION_PANEL, {
    "window": (
        int | None,
        token_option(None, "--window", help="keep the last W tokens (lossy)"),
    ),
    "sinks": (
        int | None,
        token_option(
            None, "--sinks", minimum=0, help="StreamingLLM: sink tokens [default: 4]"
        ),
    ),
    "recent": (
        int | None,
        token_option(
            None, "--recent", help="StreamingLLM: keep the sinks + the last R tokens (lossy)"
        ),
    ),
    "h2o_budget": (
        int | None,
        token_option(
            None, "--h2o-budget", help="H2O: keep N heavy-hitter + recent tokens (lossy)"
        ),
    ),
    "snapkv_budget": (
        int | None,
        token_option(
            None,
            "--snapkv-budget",
            help="SnapKV: compress the --prompt to N tokens once (lossy)",
        ),
    ),
    "observation_window": (
        int | None,
        token_option(
            None,
            "--observation-window",
            help="SnapKV: voting prompt tokens, within the budget [default: 32]",
        ),
    ),
    "prompt": (
        str | None,
        typer.Option(None, "--prompt", metavar=TOKENS, help="SnapKV: prompt length, e.g. 32k"),
    ),
    "gen": (
        str | None,
        typer.Option(None, "--gen", metavar=TOKENS, help="SnapKV: generated tokens, e.g. 1k"),
    ),
    "keep_ratio": (
        float | None,
        typer.Option(
            None, "--keep-ratio", help="token pruning: keep this share, in (0, 1] (lossy)"
        ),
    ),
})
assert set(_EVICTION_PARAMETERS) == {f.name for f in fields(EvictionOptions)}


def eviction_option_bounds(name: str) -> tuple[float | None, float | None]:
    """The (min, max) the command line allows for an eviction option (a spec file's field is
    held to the same range)."""
    option = _EVICTION_PARAMETERS.get(name, (None, None))[1]
    return getattr(option, "min", None), getattr(option, "max", None)


def eviction_options(command: F) -> F:
    """Add the eviction options to ``command``, which receives them as ``evict``."""
    return grouped_options(command, "evict", EvictionOptions, _EVICTION_PARAMETERS)
