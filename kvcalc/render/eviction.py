"""How every report states an eviction policy: the same JSON object and the same note.

JSON (``eviction``): ``policy`` (``none``, ``window``, ``streamingllm``, ``h2o``, ``snapkv``,
``keep_ratio``), ``lossy``, ``consequence`` (what is lost, null when nothing is) and the
policy's inputs under ``parameters`` (``window``, ``sinks`` and ``recent``, ``h2o_budget``,
``snapkv_budget`` / ``observation_window`` / ``prompt`` / ``gen``, ``keep_ratio``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvcalc.engine.eviction import Eviction


def eviction_payload(eviction: Eviction) -> dict[str, Any]:
    return {
        "policy": eviction.policy,
        "lossy": eviction.lossy,
        "consequence": eviction.consequence,
        "parameters": eviction.parameters(),
    }


def eviction_notes(eviction: Eviction) -> list[str]:
    """The lines under a table that say a policy evicts, and what that loses (none without)."""
    if not eviction.lossy:
        return []
    return [f"lossy: {eviction.consequence}"]


def eviction_title(eviction: Eviction) -> str:
    """A title's suffix naming the policy (empty without one)."""
    return f", {eviction.describe()}" if eviction.lossy else ""
