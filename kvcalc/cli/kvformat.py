"""The KV cache format options, declared once for every command that sizes a cache (`size`
directly, `batch` and `decode` through the deployment options), and their parsing into the
engine's :class:`~kvcalc.engine.kvformat.KVFormat`.

Kept apart from the deployment options so that `kvcalc size` does not pay for those at start-up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from kvcalc.cli.app import (
    WordedInputError,
    WordedLayoutError,
    grouped_options,
    input_options,
)
from kvcalc.engine.inputs import KV_FORMAT_INPUTS

if TYPE_CHECKING:
    from kvcalc.engine.kv import CacheFormat
    from kvcalc.engine.kvformat import KVFormat, KVFormatRequest
    from kvcalc.engine.spec import ModelSpec

F = TypeVar("F", bound=Callable[..., Any])


# Never compared or printed: no generated __eq__/__hash__/__repr__ (each costs start-up time).
@dataclass(frozen=True, eq=False, repr=False)
class KvFormatOptions:
    """The KV cache format options as given (None / False: not given): ``--kv-dtype`` (a format
    name) refined by ``--kv-group``, ``--kv-scale-dtype`` and ``--kv-zero-point``, or KIVI's
    ``--kv-quant kivi --kv-bits --kv-group --kv-residual``. Every command that sizes a cache
    takes them; the engine's :func:`~kvcalc.engine.kvformat.kv_format` decides what they mean."""

    kv_dtype: str | None
    kv_group: int | None
    kv_scale_dtype: str | None
    kv_zero_point: bool
    kv_quant: str | None
    kv_bits: int | None
    kv_residual: int | None

    @cached_property
    def _formats(self) -> dict[tuple[str, str], KVFormat]:
        return {}

    def format_given(self) -> bool:
        """Whether any KV format option was given (else every model keeps its own dtype)."""
        return any(getattr(self, f.name) not in (None, False) for f in fields(KvFormatOptions))

    def request(self) -> KVFormatRequest:
        from kvcalc.engine.kvformat import KVFormatRequest

        return KVFormatRequest(
            dtype=self.kv_dtype,
            group=self.kv_group,
            scale_dtype=self.kv_scale_dtype,
            zero_point=self.kv_zero_point,
            quant=self.kv_quant,
            bits=self.kv_bits,
            residual=self.kv_residual,
        )

    def kv_format(self, model: ModelSpec) -> KVFormat:
        """The format for ``model`` (default: its dtype); one line naming the option when the
        options contradict each other or the format cannot store the model's layers."""
        from kvcalc.engine.kvformat import KVFormatError, check_stores, kv_format

        # One format per model dtype: a whole-registry batch asks for 66 models of two dtypes.
        key = (model.default_dtype, model.kv_default)
        fmt = self._formats.get(key)
        if fmt is None:
            try:
                fmt = kv_format(self.request(), model.default_dtype, model.kv_default)
            except KVFormatError as exc:
                raise WordedInputError(exc) from None
            self._formats[key] = fmt
        try:
            check_stores(fmt, model)
        except KVFormatError as exc:
            raise WordedLayoutError(exc, f" ({model.id})") from None
        return fmt

    def cache_format(self, model: ModelSpec) -> CacheFormat:
        """The whole cache of ``model``: this KV format, recurrent states at the model's dtype."""
        from kvcalc.engine.kv import cache_format

        return cache_format(model, self.kv_format(model))


KV_PARAMETERS: dict[str, tuple[Any, Any]] = input_options(KV_FORMAT_INPUTS)
assert set(KV_PARAMETERS) == {f.name for f in fields(KvFormatOptions)}


def kv_format_options(command: F) -> F:
    """Add the KV format options to ``command``, which receives them as ``kv``."""
    return grouped_options(command, "kv", KvFormatOptions, KV_PARAMETERS)
