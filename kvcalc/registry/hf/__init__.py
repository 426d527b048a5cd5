"""Import a Hugging Face ``config.json`` as a ModelSpec, so MODEL can be a path as well as a name.

Real config.json files are sparse: ``save_pretrained`` writes what the checkpoint set, and a key
the file omits takes the default of that model_type's configuration class in transformers (the
official Gemma-3 text_config states no vocab_size, sliding_window_pattern or tie flag). Each
family declares those defaults as a pydantic model beside its adapter (one module per family),
read from the transformers sources, so importing never needs transformers itself. A model_type
without an adapter is refused, never guessed.

The architecture an adapter builds is validated by the registry schema (:class:`Architecture`),
the same checks a registry file passes, and turned into a ModelSpec by the same code.

Imported only when MODEL is a path or a Hub repo id (``kvcalc.registry.load.resolve_model``):
pydantic and the family modules cost start-up time a registry name does not need.
"""

from __future__ import annotations

from kvcalc.registry.hf.base import MAX_LAYERS, moe_layout, shortest_cycle
from kvcalc.registry.hf.families import ADAPTERS, DEFAULTS, SUPPORTED_MODEL_TYPES, WRAPPERS
from kvcalc.registry.hf.importer import (
    ImportedConfig,
    import_hf_config,
    load_hf_config,
    read_config_json,
    slug,
)

#: The transformers release whose configuration_*.py files the family defaults were read from.
TRANSFORMERS_VERSION = "5.24.0"

__all__ = [
    "ADAPTERS",
    "DEFAULTS",
    "ImportedConfig",
    "MAX_LAYERS",
    "SUPPORTED_MODEL_TYPES",
    "TRANSFORMERS_VERSION",
    "WRAPPERS",
    "import_hf_config",
    "load_hf_config",
    "moe_layout",
    "read_config_json",
    "shortest_cycle",
    "slug",
]
