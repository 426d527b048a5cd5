"""Warnings: answers that still hold but rest on an input the user should know is unusual.

One convention for every command: each warning is one line on stderr (``warning: ...``) in every
format, and JSON and YAML add a ``warnings`` list of the same texts to the payload, present only
when there is one (so an answer without warnings keeps its documented shape).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcalc.engine.spec import ModelSpec


def max_context_warnings(model: ModelSpec, contexts: Iterable[int]) -> list[str]:
    """One warning naming the contexts beyond ``model``'s maximum context, or none; after the
    defaults an imported config.json left to kvcalc (``model.assumed``), which every answer
    about the model rests on."""
    from kvcalc.engine.kv import beyond_max_context

    beyond = beyond_max_context(model, contexts)
    if not beyond:
        return list(model.assumed)
    listed = [f"{c:,}" for c in dict.fromkeys(beyond)]
    which = (
        f"context {listed[0]} is"
        if len(listed) == 1
        else f"contexts {', '.join(listed[:-1])} and {listed[-1]} are"
    )
    return [
        *model.assumed,
        f"{model.id}: {which} beyond its maximum context of {model.max_context:,} tokens; "
        "sized as asked, but the model was not trained that long",
    ]


def registry_context_warnings(models: Iterable[ModelSpec], contexts: list[int]) -> list[str]:
    """One short warning for the whole registry: how many rows some context exceeds the
    model's maximum context of (their cells are marked ``*``, JSON says which)."""
    from kvcalc.engine.kv import beyond_max_context

    over = sum(1 for m in models if beyond_max_context(m, contexts))
    if not over:
        return []
    rows = "1 row" if over == 1 else f"{over} rows"
    return [
        f"{rows} at contexts beyond the model's maximum context (marked *): sized as asked, "
        "but not trained that long"
    ]
