"""The option groups every command takes, as given (None: not given), and their resolution
into the engine's objects: the KV cache format (``kv_dtype`` refined by ``kv_group``, ...) into a
:class:`~kvcalc.engine.kvformat.KVFormat`, the eviction and bounding inputs (``window``,
``sinks``/``recent``, ...) into one :class:`~kvcalc.engine.eviction.Eviction`.

The Python API builds them from its keywords, the command line from its options (declared in
:mod:`kvcalc.cli.kvformat` and :mod:`kvcalc.cli.eviction`); a refusal names the input as the
command line spells it, the error's ``field`` as the API's keyword.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import cached_property
from typing import TYPE_CHECKING

from kvcalc.engine.inputs import Input
from kvcalc.errors import WordedInputError, WordedLayoutError, literal
from kvcalc.values import one_length, option_name, parse_ctx_list

if TYPE_CHECKING:
    from kvcalc.engine.eviction import Eviction
    from kvcalc.engine.kv import CacheFormat
    from kvcalc.engine.kvformat import KVFormat, KVFormatRequest
    from kvcalc.engine.serving.base import InputRefusal, ServingEngine
    from kvcalc.engine.spec import ModelSpec


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



# Never compared or printed: no generated __eq__/__hash__/__repr__ (each costs start-up time).
@dataclass(frozen=True, eq=False, repr=False)
class EvictionOptions:
    """The eviction and bounding options as given (None: not given); :meth:`policy` turns them
    into the engine's one :class:`~kvcalc.engine.eviction.Eviction`."""

    window: int | None
    sinks: int | None
    recent: int | None
    h2o_budget: int | None
    snapkv_budget: int | None
    observation_window: int | None
    prompt: str | None
    gen: str | None
    keep_ratio: float | None

    def given(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name) is not None]

    def flags(self) -> str:
        """The options given, as typed (``--sinks and --recent``)."""
        return " and ".join(option_name(n) for n in self.given())

    def refused(self, reason: str, *named: str) -> InputRefusal:
        """The options given refused for ``reason`` (a template that may name ``named``
        inputs, ``{engine}``), each front end spelling them its own way."""
        from kvcalc.engine.serving.base import InputRefusal

        given = self.given()
        lead = " and ".join("{" + name + "}" for name in given)
        return InputRefusal(f"{lead}: {reason}", *given, *named)

    def policy(self) -> Eviction:
        """The one policy the options describe (no eviction when none is given); a missing
        partner option, two policies at once or a bad value fails with one line."""
        from kvcalc.engine.eviction import KEEP_ALL, EvictionError

        given = self.given()
        chosen = [p for p, (names, _) in _POLICIES.items() if any(n in given for n in names)]
        if len(chosen) > 1:
            raise self.refused(
                f"{' and '.join(chosen)} are different eviction policies; give one at a time"
            )
        if not chosen:
            return KEEP_ALL
        try:
            return _POLICIES[chosen[0]][1](self)
        except EvictionError as exc:
            raise WordedInputError(exc) from None

    def _window(self) -> Eviction:
        from kvcalc.engine.eviction.policies import SlidingWindow

        return SlidingWindow(self._int("window"))

    def _streamingllm(self) -> Eviction:
        from kvcalc.engine.eviction.policies import DEFAULT_SINKS, StreamingLLM

        if self.recent is None:
            raise _refusal("{sinks}: StreamingLLM keeps sinks and recent tokens; give {recent} too",
                           "sinks", "recent")
        return StreamingLLM(DEFAULT_SINKS if self.sinks is None else self.sinks, self.recent)

    def _h2o(self) -> Eviction:
        from kvcalc.engine.eviction.policies import H2O

        return H2O(self._int("h2o_budget"))

    def _snapkv(self) -> Eviction:
        from kvcalc.engine.eviction.policies import DEFAULT_OBSERVATION_WINDOW, SnapKV

        if self.snapkv_budget is None:
            first = self.given()[0]
            raise _refusal(f"{{{first}}}: applies to SnapKV only; give {{snapkv_budget}} too",
                           first, "snapkv_budget")
        if self.prompt is None or self.gen is None:
            raise _refusal(
                "{snapkv_budget}: SnapKV compresses the prompt once after prefill, then keeps "
                "each generated token; give {prompt} and {gen} lengths, e.g. {prompt} 32k "
                "{gen} 1k",
                "snapkv_budget", "prompt", "gen",
            )
        window = self.observation_window
        return SnapKV(
            self.snapkv_budget,
            prompt=one_length(self.prompt, "--prompt"),
            gen=one_length(self.gen, "--gen"),
            observation_window=DEFAULT_OBSERVATION_WINDOW if window is None else window,
        )

    def _keep_ratio(self) -> Eviction:
        from kvcalc.engine.deployment import as_fraction
        from kvcalc.engine.eviction.policies import KeepRatio

        return KeepRatio(as_fraction(self._float("keep_ratio")))

    def _int(self, name: str) -> int:
        value = getattr(self, name)
        assert isinstance(value, int)
        return value

    def _float(self, name: str) -> float:
        value = getattr(self, name)
        assert isinstance(value, float)
        return value

    def contexts(self, ctx: str | None, default: Callable[[], list[int]]) -> list[int]:
        """The contexts a command answers for: ``--ctx`` (else ``default()``), or with SnapKV
        the sequence at its end, --prompt + --gen."""
        fixed = self.policy().fixed_context
        if fixed is not None:
            if ctx is not None:
                raise _refusal(
                    "{ctx}: with {snapkv_budget} the context is {prompt} + {gen}; drop {ctx}",
                    "ctx", "snapkv_budget", "prompt", "gen",
                )
            return [fixed]
        return parse_ctx_list(ctx) if ctx is not None else default()

    def check_applies(self, engine: ServingEngine) -> None:
        """Refuse a policy for an engine that keeps every token."""
        from kvcalc.engine.serving import engines

        if self.given() and not engine.evicts:
            evicting = next(e.name for e in engines() if e.evicts)
            raise self.refused(
                f"{engine.label} keeps every token of a request (it does not evict); size an "
                f"evicting cache with {{engine}} {evicting}",
                "engine",
            )

    def checked(self, model: ModelSpec, contexts: list[int]) -> tuple[Eviction, list[str]]:
        """The policy, once it evicts something of ``model`` at one of ``contexts`` at least
        (else the options would change no answer: refused), and a warning for each context
        where it evicts nothing."""
        from kvcalc.engine.eviction import evicts, no_eviction_reason

        policy = self.policy()
        reason = no_eviction_reason(model, contexts, policy)
        if reason is not None:
            raise self.refused(literal(reason))
        notes = [
            f"{policy.describe()} evicts nothing at {c:,} tokens"
            for c in contexts
            if policy.lossy and not evicts(model, c, policy)
        ]
        return policy, notes


def _refusal(template: str, *fields: str) -> InputRefusal:
    from kvcalc.engine.serving.base import InputRefusal

    return InputRefusal(template, *fields)


#: The policies: the options that choose each, and how they build it.
_POLICIES: dict[str, tuple[tuple[str, ...], Callable[[EvictionOptions], Eviction]]] = {
    "window": (("window",), EvictionOptions._window),
    "streamingllm": (("sinks", "recent"), EvictionOptions._streamingllm),
    "h2o": (("h2o_budget",), EvictionOptions._h2o),
    "snapkv": (
        ("snapkv_budget", "observation_window", "prompt", "gen"),
        EvictionOptions._snapkv,
    ),
    "keep_ratio": (("keep_ratio",), EvictionOptions._keep_ratio),
}


#: Where the command line's help lists the eviction inputs.
EVICTION = "Eviction"

#: The eviction and bounding inputs, each declared once (as the deployment's are in
#: :mod:`kvcalc.engine.inputs`): the command line's options, the spec file's ranges and the
#: API's keywords come from them.
EVICTION_INPUTS: tuple[Input, ...] = (
    Input("window", "tokens", "keep the last W tokens (lossy)", panel=EVICTION),
    Input(
        "sinks", "tokens", "StreamingLLM: sink tokens [default: 4]", minimum=0, panel=EVICTION
    ),
    Input(
        "recent", "tokens", "StreamingLLM: keep the sinks + the last R tokens (lossy)",
        panel=EVICTION,
    ),
    Input(
        "h2o_budget", "tokens", "H2O: keep N heavy-hitter + recent tokens (lossy)",
        panel=EVICTION,
    ),
    Input(
        "snapkv_budget", "tokens", "SnapKV: compress the --prompt to N tokens once (lossy)",
        panel=EVICTION,
    ),
    Input(
        "observation_window", "tokens",
        "SnapKV: voting prompt tokens, within the budget [default: 32]", panel=EVICTION,
    ),
    Input("prompt", "context", "SnapKV: prompt length, e.g. 32k", panel=EVICTION),
    Input("gen", "context", "SnapKV: generated tokens, e.g. 1k", panel=EVICTION),
    Input(
        "keep_ratio", "fraction", "token pruning: keep this share, in (0, 1] (lossy)",
        panel=EVICTION,
    ),
)
assert [i.name for i in EVICTION_INPUTS] == [f.name for f in fields(EvictionOptions)]


def eviction_bounds(name: str) -> tuple[float | None, float | None]:
    """The (min, max) an eviction input is held to (a spec file's field as the option)."""
    declared = {i.name: i for i in EVICTION_INPUTS}.get(name)
    return (None, None) if declared is None else declared.bounds()
