"""The values a shell completes for kvcalc's arguments and options: registry ids, GPU sets,
format and engine names. The command line wires them to its options (an input's
``completion`` names one of :data:`COMPLETIONS`).

Each runs only when the shell asks (``_KVCALC_COMPLETE`` set) and imports what it lists then,
never at start-up. A registry that cannot be read completes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence


def complete_names(incomplete: str, names: Sequence[str], prefix: str = "") -> list[str]:
    """The ``names`` that start with ``incomplete`` in any case, completed as typed (names are
    read in any case, and typer keeps only the completions that start with what was typed)."""
    wanted = incomplete.lower()
    return [
        prefix + incomplete + n[len(incomplete) :] for n in names if n.lower().startswith(wanted)
    ]


def _registry_ids(kind: str) -> list[str]:
    from kvcalc.registry.load import RegistryError, model_paths

    try:
        if kind == "gpu":
            from kvcalc.registry.gpus import gpu_paths

            return [p.stem for p in gpu_paths()]
        return [p.stem for p in model_paths()]
    except (RegistryError, OSError):
        return []


def complete_models(incomplete: str) -> list[str]:
    """MODEL: the registry's model ids."""
    return complete_names(incomplete, _registry_ids("model"))


def complete_gpus(incomplete: str) -> list[str]:
    """A GPU name: the registry's accelerator ids."""
    return complete_names(incomplete, _registry_ids("gpu"))


def complete_gpu_sets(incomplete: str) -> list[str]:
    """--gpus COUNTxGPU: after a count (``8x``), the accelerator ids; a bare count gets its
    ``x``; else the ids alone (one GPU)."""
    ids = _registry_ids("gpu")
    if incomplete.isdigit():
        return [f"{incomplete}x{g}" for g in ids]
    counted = re.match(r"^(\d+\s*[x×*]\s*)(.*)$", incomplete, re.IGNORECASE)
    if counted is None:
        return complete_names(incomplete, ids)
    return complete_names(counted[2], ids, prefix=counted[1])


def complete_kv_dtypes(incomplete: str) -> list[str]:
    """--kv-dtype: the KV cache format names."""
    from kvcalc.engine.kvformat import PRESETS

    return complete_names(incomplete, list(PRESETS))


def complete_weight_dtypes(incomplete: str) -> list[str]:
    """--weight-dtype: the weight dtypes and formats."""
    from kvcalc.engine.quant import WEIGHT_FORMAT_NAMES

    return complete_names(incomplete, WEIGHT_FORMAT_NAMES)


def completing_lists(complete: Callable[[str], list[str]]) -> Callable[[str], list[str]]:
    """``complete`` for a comma-separated list (`plan --gpus H100,H2`): its last item."""

    def complete_last(incomplete: str) -> list[str]:
        head, comma, last = incomplete.rpartition(",")
        return [head + comma + name for name in complete(last)]

    return complete_last


def complete_engines(incomplete: str) -> list[str]:
    """--engine: the serving engines."""
    from kvcalc.engine.serving import ENGINE_NAMES

    return complete_names(incomplete, ENGINE_NAMES)


def complete_plan_engines(incomplete: str) -> list[str]:
    """plan --engine: the engines plan sizes the cache with."""
    from kvcalc.planning import plan_engines

    return complete_names(incomplete, [engine.name for engine in plan_engines()])


COMPLETIONS: dict[str, Callable[[str], list[str]]] = {
    "gpu_sets": complete_gpu_sets,
    "weight_dtypes": complete_weight_dtypes,
    "kv_dtypes": complete_kv_dtypes,
    "gpu_lists": completing_lists(complete_gpus),
    "weight_dtype_lists": completing_lists(complete_weight_dtypes),
    "kv_dtype_lists": completing_lists(complete_kv_dtypes),
    "engines": complete_engines,
    "plan_engines": complete_plan_engines,
}
