"""Mixer kinds, one module each: attention (full, sliding, chunked), mla, mla_indexed, mamba,
mamba2, deltanet, lightning, shared_kv, short_conv. The interface is
:class:`kvcalc.engine.mixers.base.Mixer`; the kinds are re-exported by :mod:`kvcalc.engine.spec`.

A new kind is one new module here (a frozen dataclass implementing :class:`Mixer`, which
registers it in :data:`MIXER_KINDS`) plus its entry in the registry schema
(kvcalc/registry/schema.py), which builds it from a model file.
"""

from kvcalc.engine.mixers.base import (
    MIXER_KINDS,
    AttentionMixer,
    Mixer,
    ParallelismError,
    RecurrentMixer,
    split_heads,
)

__all__ = [
    "MIXER_KINDS",
    "AttentionMixer",
    "Mixer",
    "ParallelismError",
    "RecurrentMixer",
    "split_heads",
]

#: PageLayout (kvcalc.engine.mixers.caches) and SideCache (kvcalc.engine.mixers.side_cache) are
#: imported where they are read, not here: most commands never need them.
