"""kvcalc: a calculator for the KV cache of LLM inference.

The package is layered; imports only point down:

- ``kvcalc.engine``: pure formulas over typed specs (no I/O).
- ``kvcalc.registry``: YAML registry and Hugging Face ``config.json`` import, validated by pydantic.
- ``kvcalc.render``: tables and machine-readable output built from engine results.
- ``kvcalc.api``: the Python API, one function per command (``kvcalc.size(...)``), over the
  library beside it (``results``, ``errors``, ``deploy``, ``options``, ``values``,
  ``comparison``, ``techniques``, ``capacity_check``, ``planning``).
- ``kvcalc.cli``: the typer shell: parse, call the API, render.

Every name is exported lazily (module ``__getattr__``), so ``import kvcalc`` costs nothing
until a function is called: the command line's start-up does not pay for the API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Exported name -> the module defining it.
_EXPORTS = {
    "size": "kvcalc.api",
    "batch": "kvcalc.api",
    "decode": "kvcalc.api",
    "plan": "kvcalc.api",
    "sweep": "kvcalc.api",
    "offload": "kvcalc.api",
    "compare": "kvcalc.api",
    "check": "kvcalc.api",
    "calibrate": "kvcalc.api",
    "SizeResult": "kvcalc.results",
    "BatchResult": "kvcalc.results",
    "DecodeResult": "kvcalc.results",
    "PlanResult": "kvcalc.results",
    "CompareResult": "kvcalc.results",
    "OffloadResult": "kvcalc.results",
    "SweepResult": "kvcalc.results",
    "CheckResult": "kvcalc.results",
    "CalibrateResult": "kvcalc.results",
    "KvcalcError": "kvcalc.errors",
    "InputError": "kvcalc.errors",
    "LayoutError": "kvcalc.errors",
    "RegistryError": "kvcalc.errors",
    "UnknownNameError": "kvcalc.errors",
}

if TYPE_CHECKING:
    from kvcalc.api import batch as batch
    from kvcalc.api import calibrate as calibrate
    from kvcalc.api import check as check
    from kvcalc.api import compare as compare
    from kvcalc.api import decode as decode
    from kvcalc.api import offload as offload
    from kvcalc.api import plan as plan
    from kvcalc.api import size as size
    from kvcalc.api import sweep as sweep
    from kvcalc.errors import (
        InputError as InputError,
    )
    from kvcalc.errors import (
        KvcalcError as KvcalcError,
    )
    from kvcalc.errors import (
        LayoutError as LayoutError,
    )
    from kvcalc.errors import (
        RegistryError as RegistryError,
    )
    from kvcalc.errors import (
        UnknownNameError as UnknownNameError,
    )
    from kvcalc.results import (
        BatchResult as BatchResult,
    )
    from kvcalc.results import (
        CalibrateResult as CalibrateResult,
    )
    from kvcalc.results import (
        CheckResult as CheckResult,
    )
    from kvcalc.results import (
        CompareResult as CompareResult,
    )
    from kvcalc.results import (
        DecodeResult as DecodeResult,
    )
    from kvcalc.results import (
        OffloadResult as OffloadResult,
    )
    from kvcalc.results import (
        PlanResult as PlanResult,
    )
    from kvcalc.results import (
        SizeResult as SizeResult,
    )
    from kvcalc.results import (
        SweepResult as SweepResult,
    )

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kvcalc' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later reads do not come back here
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
