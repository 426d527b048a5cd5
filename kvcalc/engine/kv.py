"""KV-cache size: bytes per token, per sequence and per batch, by layer group.

The per-kind formulas live on the mixer types in :mod:`kvcalc.engine.mixers`; this module only sums
them over the layers of a model, and the bytes of the tokens a layer holds come from the cache
format (:mod:`kvcalc.engine.kvformat`). Bytes are exact integers: for a linear format one layer's
entry for one token is rounded up to whole bytes, then multiplied by the tokens the layer holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import lru_cache

from kvcalc.engine.eviction import KEEP_ALL, Eviction, layer_tokens_held
from kvcalc.engine.kvformat import KVFormat, as_kv_format, model_effective_bits
from kvcalc.engine.spec import Mixer, ModelSpec
from kvcalc.engine.units import DType, dtype


@dataclass(frozen=True)
class CacheFormat:
    """How a sequence's cache is stored: ``kv`` for what grows with the tokens (keys and values,
    an MLA latent), ``state`` for the fixed state of Mamba-like layers, and ``ssm_state`` for
    its temporal (SSM) part when an engine stores that apart (SGLang keeps it in fp32).

    ``kv`` is a :class:`~kvcalc.engine.kvformat.KVFormat` (a dtype, or scales, groups and a
    full-precision residual). The KV and state dtypes differ on purpose: a quantized KV cache
    leaves the recurrent state at the model's dtype (vLLM 0.19: ``--mamba-cache-dtype auto``
    follows the model, not ``--kv-cache-dtype``).
    """

    kv: KVFormat
    state: DType
    ssm_state: DType | None = None

    @classmethod
    def uniform(cls, dtype: DType) -> CacheFormat:
        return cls(as_kv_format(dtype), dtype)

    @property
    def name(self) -> str:
        return self.kv.name

    def token_bytes(self, mixer: Mixer) -> int:
        """Bytes one token adds to one layer of ``mixer`` (rounded up to whole bytes; the
        long-context slope when the format is not linear in tokens), side caches at their own
        fixed format included; a kind that sizes its own tokens says it (DeepSeek-V4)."""
        slope = mixer.slope_bytes(self.kv)
        if slope is not None:
            return slope
        return self.kv.token_bytes(mixer) + side_cache_bytes(mixer)

    def tokens_bytes(self, mixer: Mixer, tokens: int) -> int:
        """Bytes ``tokens`` tokens of one sequence occupy in one layer of ``mixer``, side caches
        included: the one formula every engine sizes a layer's tokens with."""
        held = mixer.held_bytes(self.kv, tokens)
        if held is not None:
            return held
        return self.kv.tokens_bytes(mixer, tokens) + tokens * side_cache_bytes(mixer)

    def state_bytes(self, mixer: Mixer) -> int:
        """Bytes of one layer's fixed state: each state tensor (conv, temporal) at its dtype,
        rounded up per tensor, as the engines allocate them."""
        ssm = self.ssm_state or self.state
        return mixer.state_cache_bytes() + sum(
            (self.state if t.role == "conv" else ssm).bytes_for(t.elements)
            for t in mixer.state_tensors()
        )


def side_cache_bytes(mixer: Mixer) -> int:
    """Bytes one token adds to ``mixer``'s fixed-format side caches (DeepSeek-V3.2's indexer
    keys), whatever the KV format."""
    return sum(s.bytes_per_token for s in mixer.side_caches())


def cache_format(model: ModelSpec, kv: KVFormat | DType) -> CacheFormat:
    """The cache of ``model`` with its KV entries in ``kv``: recurrent states stay at the model's
    dtype (see :class:`CacheFormat`), their temporal part at the dtype the model states for it
    (Qwen3.5's ``mamba_ssm_dtype`` float32, which vLLM 0.33 adopts while
    ``--mamba-ssm-cache-dtype`` is ``auto``)."""
    ssm = dtype(model.ssm_state_dtype) if model.ssm_state_dtype else None
    return CacheFormat(as_kv_format(kv), dtype(model.default_dtype), ssm)


def as_cache_format(fmt: CacheFormat | KVFormat | DType) -> CacheFormat:
    """A bare dtype stores everything, states included, in that dtype; a bare KV format keeps
    recurrent states at bf16 (use :func:`cache_format` for the model's own dtype)."""
    if isinstance(fmt, CacheFormat):
        return fmt
    if isinstance(fmt, DType):
        return CacheFormat.uniform(fmt)
    return CacheFormat(fmt, dtype("bf16"))


def model_cache_format(model: ModelSpec, fmt: CacheFormat | KVFormat | DType) -> CacheFormat:
    """:func:`as_cache_format`, but a bare dtype or KV format leaves the temporal state of a
    model that states its dtype (Qwen3.5's float32 ``mamba_ssm_dtype``) at that dtype: it is the
    model's, as the engines store it whatever the KV dtype."""
    if isinstance(fmt, CacheFormat) or model.ssm_state_dtype is None:
        return as_cache_format(fmt)
    return replace(as_cache_format(fmt), ssm_state=dtype(model.ssm_state_dtype))


@dataclass(frozen=True, eq=False)  # compared by identity: no __eq__/__hash__ to build
class GroupKV:
    """The cache of one layer group (layers sharing one mixer spec) for one sequence."""

    kind: str
    mixer: Mixer
    layers: int
    bytes_per_token: int
    """Bytes one token adds across the group's layers, while no window is full."""
    tokens_held: int
    """Tokens of the sequence each layer keeps (the context, or a window / chunk / policy)."""
    state_bytes: int
    """Fixed per-sequence state across the group's layers (recurrent + conv), else 0."""
    bytes: int
    """The group's bytes for one sequence: bytes_per_token x tokens_held + state_bytes."""


@dataclass(frozen=True, eq=False)  # compared by identity: no __eq__/__hash__ to build
class KVSize:
    """KV-cache size of a model at a context and batch."""

    model_id: str
    context_tokens: int
    batch: int
    kv_dtype: str
    groups: tuple[GroupKV, ...]
    kv_bits: Fraction | None = None
    """Bits per stored value at long context, scales included (None: no layer holds tokens)."""
    kv_format: KVFormat | None = None
    eviction: Eviction = KEEP_ALL
    mtp: GroupKV | None = None
    """The checkpoint's multi-token-prediction layers as one more group, counted in no total:
    the engines load them only with speculative decoding (None: the model has none)."""

    @property
    def bytes_per_token(self) -> int:
        """Bytes one token adds to a sequence while no window is full (states excluded); for a
        format not linear in tokens (KIVI) the long-context slope."""
        return sum(g.bytes_per_token for g in self.groups)

    @property
    def bytes_per_sequence(self) -> int:
        return sum(g.bytes for g in self.groups)

    @property
    def bytes_total(self) -> int:
        return self.bytes_per_sequence * self.batch


def layer_groups(model: ModelSpec) -> tuple[tuple[Mixer, int], ...]:
    """Layers grouped by identical mixer spec, in order of first appearance, with their counts."""
    return mixer_counts(model, range(model.num_layers))


@lru_cache(maxsize=256)
def mixer_counts(model: ModelSpec, layers: range) -> tuple[tuple[Mixer, int], ...]:
    """The distinct mixers of ``layers`` (e.g. one pipeline stage) with their layer counts.

    Cached: capacity searches ask for the same model and stage many times."""
    # The spec's block counts, merged by equality: equal mixers are one group.
    counts: dict[Mixer, int] = {}
    for mixer, _, n in model.block_counts(layers):
        counts[mixer] = counts.get(mixer, 0) + n
    return tuple(counts.items())


def layer_bytes_per_token(mixer: Mixer, fmt: CacheFormat | KVFormat | DType) -> int:
    """Bytes one token adds to one layer's cache (the long-context slope for KIVI)."""
    return as_cache_format(fmt).token_bytes(mixer)


def layer_tokens_bytes(mixer: Mixer, tokens: int, fmt: CacheFormat | KVFormat | DType) -> int:
    """Bytes ``tokens`` tokens of one sequence occupy in one layer's cache."""
    return as_cache_format(fmt).tokens_bytes(mixer, tokens)


def layer_state_bytes(mixer: Mixer, fmt: CacheFormat | KVFormat | DType) -> int:
    """Bytes of one layer's fixed per-sequence state (0 for attention)."""
    return as_cache_format(fmt).state_bytes(mixer)


def layer_bytes_per_sequence(
    mixer: Mixer,
    context_tokens: int,
    fmt: CacheFormat | KVFormat | DType,
    eviction: Eviction = KEEP_ALL,
) -> int:
    """Bytes one layer keeps for one sequence of ``context_tokens`` tokens."""
    held = layer_tokens_held(mixer, context_tokens, eviction)
    return layer_tokens_bytes(mixer, held, fmt) + layer_state_bytes(mixer, fmt)


def kv_bytes_per_token(model: ModelSpec, dtype: CacheFormat | KVFormat | DType) -> int:
    """Bytes one token adds across all layers while no window is full (fixed states excluded)."""
    return sum(layer_bytes_per_token(m, dtype) * n for m, n in layer_groups(model))


def kv_bytes_per_sequence(
    model: ModelSpec,
    context_tokens: int,
    dtype: CacheFormat | KVFormat | DType,
    eviction: Eviction = KEEP_ALL,
) -> int:
    """Bytes of cache for one sequence at ``context_tokens``: windows (and an eviction policy)
    capped, states included."""
    fmt = model_cache_format(model, dtype)
    return sum(
        layer_bytes_per_sequence(m, context_tokens, fmt, eviction) * n
        for m, n in layer_groups(model)
    )


def kv_bytes_read_per_sequence(
    model: ModelSpec,
    context_tokens: int,
    dtype: CacheFormat | KVFormat | DType,
    eviction: Eviction = KEEP_ALL,
) -> int:
    """Bytes of cache one decode step reads for one sequence: every layer reads the cache it
    attends over, so a layer reusing another's cache (Gemma 4's KV-shared layers) reads its
    source's once more. Equal to :func:`kv_bytes_per_sequence` when no layer shares."""
    return sum(
        layer_bytes_per_sequence(m.cache_read(), context_tokens, dtype, eviction) * n
        for m, n in layer_groups(model)
    )


def kv_size(
    model: ModelSpec,
    context_tokens: int,
    dtype: CacheFormat | KVFormat | DType,
    batch: int = 1,
    eviction: Eviction = KEEP_ALL,
) -> KVSize:
    """The full breakdown: per group, per token, per sequence and for ``batch`` sequences."""
    if context_tokens < 1 or batch < 1:
        raise ValueError("context_tokens and batch must be at least 1")
    fmt = model_cache_format(model, dtype)

    def group(mixer: Mixer, n: int) -> GroupKV:
        return GroupKV(
            kind=mixer.kind,
            mixer=mixer,
            layers=n,
            bytes_per_token=layer_bytes_per_token(mixer, fmt) * n,
            tokens_held=layer_tokens_held(mixer, context_tokens, eviction),
            state_bytes=layer_state_bytes(mixer, fmt) * n,
            bytes=layer_bytes_per_sequence(mixer, context_tokens, fmt, eviction) * n,
        )

    mtp = mtp_mixer(model)
    return KVSize(
        model.id,
        context_tokens,
        batch,
        fmt.name,
        tuple(group(mixer, n) for mixer, n in layer_groups(model)),
        eviction=eviction,
        kv_bits=model_effective_bits(fmt.kv, model),
        kv_format=fmt.kv,
        mtp=None if mtp is None else group(mtp, model.mtp_layers),
    )


def mtp_mixer(model: ModelSpec) -> Mixer | None:
    """The mixer of the model's multi-token-prediction layers: its first kind that holds
    tokens, as an MTP layer builds it (:meth:`~kvcalc.engine.spec.Mixer.mtp_layer`); None when
    the checkpoint has no MTP layer (or no attention to build one on)."""
    if not model.mtp_layers:
        return None
    for mixer, _ in layer_groups(model):
        if mixer.holds_tokens:
            return mixer.mtp_layer()
    return None


def beyond_max_context(model: ModelSpec, contexts: Iterable[int]) -> list[int]:
    """The contexts longer than the model's stated maximum (the positions it was trained for).
    The cache of such a context is still what it is, so commands answer and warn."""
    if model.max_context is None:
        return []
    return [c for c in contexts if c > model.max_context]
