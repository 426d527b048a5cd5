"""The serving engines, one module each, behind one protocol (:mod:`.base`).

The registry maps each ``--engine`` name to its module; a module's ``ENGINE`` is the object
that satisfies :class:`~kvcalc.engine.serving.base.ServingEngine`. Adding an engine is one new
module and one name in :data:`ENGINE_NAMES`. These names are the only place kvcalc spells an
engine: everything else asks the engine object.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from kvcalc.engine.serving.base import Given, InputRefusal, refusal
from kvcalc.errors import literal

if TYPE_CHECKING:
    from kvcalc.engine.serving.base import ServingEngine

#: Every engine, in the order ``--engine`` lists them (each is the module of that name).
ENGINE_NAMES: tuple[str, ...] = ("simple", "vllm", "sglang", "trtllm")
#: The engine of a command given none: the budget formula.
DEFAULT_ENGINE = ENGINE_NAMES[0]

_LOADED: dict[str, ServingEngine] = {}


def engine_named(name: str) -> ServingEngine:
    """The engine called ``name`` (any case, as ``--engine`` and a spec file's ``engine:``);
    an unknown name is refused with the list."""
    key = str(name).strip().lower()
    if key not in ENGINE_NAMES:
        raise InputRefusal(
            f"{{engine}}: unknown engine {literal(repr(name))}; choose {', '.join(ENGINE_NAMES)}",
            "engine",
        )
    engine = _LOADED.get(key)
    if engine is None:
        engine = importlib.import_module(f"{__name__}.{key}").ENGINE
        _LOADED[key] = engine
    return engine


def engines() -> list[ServingEngine]:
    """Every engine, in :data:`ENGINE_NAMES`' order."""
    return [engine_named(name) for name in ENGINE_NAMES]


def check_inputs(engine: ServingEngine, given: Given) -> None:
    """Refuse what ``engine`` would not read among ``given``: its own refusals, then any other
    engine's own options."""
    engine.check_inputs(given)
    for other in engines():
        if other is engine:
            continue
        for name in other.options:
            if name in given:
                raise refusal(name, "applies to {engine} " + other.name + " only")


