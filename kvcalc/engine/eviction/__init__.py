"""Eviction and bounding policies: which of a sequence's tokens the cache keeps.

This package's top holds what every command imports (the :class:`Eviction` interface, the
default :data:`KEEP_ALL` and the composition with the layers); the lossy policies live in
:mod:`kvcalc.engine.eviction.policies`, imported only when one is chosen.

A policy is one type with one formula, :meth:`Eviction.tokens_held` (the tokens it keeps of a
``context_tokens``-token sequence). It is composed with each layer's own bound in
:func:`layer_tokens_held`, the one place the engines ask how many tokens a layer holds: a layer
keeps what its own kind keeps of what the policy keeps, so a sliding-window layer holds the
smaller of its window and the policy's bound, and a recurrent layer (a fixed state) is
unaffected. Bytes per held token stay the cache format's, so a policy composes with KV
quantization by multiplication.

The policies and their sources (seed 000 and seed 004 of the reference texts):

- :class:`KeepAll`: no eviction (the default);

and, in :mod:`~kvcalc.engine.eviction.policies`:

- :class:`SlidingWindow`: the last W tokens (seed 000, "Sliding Window Attention");
- :class:`StreamingLLM`: the first S tokens (attention sinks) and the R most recent; nothing is
  evicted while the context is at most S + R (seed 000 ``streaming_attention``);
- :class:`H2O`: heavy hitters (largest cumulative attention) plus recent tokens under a fixed
  budget of N tokens (seed 004);
- :class:`SnapKV`: the prompt is compressed once after prefill to a budget chosen by the votes
  of its last w tokens (the observation window, kept within the budget), then the cache grows
  with each generated token (seed 004);
- :class:`KeepRatio`: token pruning, ``int(tokens x keep_ratio)`` kept by importance (seed 000
  ``prune_kv_cache``).

Every policy but :class:`KeepAll` is lossy: an evicted token's keys and values are gone, so a
question about it cannot be answered (seed 004: StreamingLLM with 4 + 1,020 tokens cannot
answer about a fact stated 5,000 tokens earlier).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from kvcalc.errors import InputError

if TYPE_CHECKING:
    from kvcalc.engine.spec import Mixer, ModelSpec

class EvictionError(InputError, ValueError):
    """A policy that cannot be built, naming its inputs at fault (``window``, ``keep_ratio``,
    ...) so that each front end words them its own way (``--keep-ratio`` on the command line)."""

    def __init__(self, fields: tuple[str, ...], reason: str) -> None:
        super().__init__(f"{' and '.join(fields)}: {reason}", fields=fields)
        self.reason = reason

    def worded(self, name: Callable[[str], str]) -> str:
        return f"{' and '.join(name(f) for f in self.fields)}: {self.reason}"


class Eviction(ABC):
    """One policy: the tokens it keeps of a sequence, whether that loses information, and what
    the loss means for the user."""

    policy: ClassVar[str]
    """The policy's name in JSON (``window``, ``streamingllm``, ...)."""
    lossy: ClassVar[bool] = True
    fields: ClassVar[tuple[str, ...]]
    """The inputs that set the policy, as the front ends name them."""

    @abstractmethod
    def tokens_held(self, context_tokens: int) -> int:
        """Tokens a layer holding the whole context keeps of a ``context_tokens`` sequence."""

    @abstractmethod
    def describe(self) -> str:
        """The policy and its bound in a few words, e.g. ``StreamingLLM 4 sinks + 1,020 recent``."""

    @property
    @abstractmethod
    def consequence(self) -> str | None:
        """What is lost, for the user (None when nothing is)."""

    @property
    def fixed_context(self) -> int | None:
        """The sequence length the policy itself fixes (SnapKV: prompt + generated), or None
        when it applies at any context."""
        return None

    def recallable(self, tokens_back: int, context_tokens: int) -> bool | None:
        """Whether a token ``tokens_back`` tokens before the end of a ``context_tokens``
        sequence (1 = the newest) is still in the cache: True or False when the policy decides
        by position, None when it depends on attention scores."""
        return None if self.tokens_held(context_tokens) < context_tokens else True

    def parameters(self) -> dict[str, Any]:
        """The inputs of the policy, by field name, for JSON."""
        return {name: getattr(self, name) for name in self.fields}


class KeepAll(Eviction):
    """Every token stays: what serving engines do."""

    policy: ClassVar[str] = "none"
    lossy: ClassVar[bool] = False
    fields: ClassVar[tuple[str, ...]] = ()

    def tokens_held(self, context_tokens: int) -> int:
        return context_tokens

    def describe(self) -> str:
        return "no eviction"

    @property
    def consequence(self) -> None:
        return None


KEEP_ALL = KeepAll()


# --------------------------------------------------------------------------------------------
# Composition with the layers of a model


def kept_by_engine(engine: str, eviction: Eviction) -> str:
    """Why an engine's exact pool refuses a lossy ``eviction``: the engine never evicts."""
    return (
        f"{eviction.describe()}: {engine} keeps every token of a request (it does not "
        "evict); size an evicting cache with the budget formula (--engine simple)"
    )


def layer_tokens_held(mixer: Mixer, context_tokens: int, eviction: Eviction = KEEP_ALL) -> int:
    """Tokens one layer of ``mixer`` holds of a ``context_tokens`` sequence under ``eviction``:
    its own kind's bound (a window, a chunk, none for a state) of what the policy keeps."""
    return mixer.tokens_held(eviction.tokens_held(context_tokens))


def evicts(model: ModelSpec, context_tokens: int, eviction: Eviction) -> bool:
    """Whether ``eviction`` drops any token of any layer of ``model`` at ``context_tokens``."""
    return any(
        layer_tokens_held(m, context_tokens, eviction) < m.tokens_held(context_tokens)
        for m in _mixers(model)
    )


def no_eviction_reason(model: ModelSpec, contexts: Iterable[int], eviction: Eviction) -> str | None:
    """Why ``eviction`` changes nothing for ``model`` at any of ``contexts`` (None when it
    evicts at one of them at least): a policy that keeps every token changes no answer."""
    contexts = list(contexts)
    if eviction is KEEP_ALL or any(evicts(model, c, eviction) for c in contexts):
        return None
    shown = ", ".join(f"{c:,}" for c in contexts)
    if all(eviction.tokens_held(c) >= c for c in contexts):
        return (
            f"{eviction.describe()} keeps every token of a {shown}-token context, so no "
            "eviction happens; give a bound below the context"
        )
    return (
        f"every layer of {model.id} already holds no more than the {eviction.describe()} "
        f"would keep (its own windows and states bound it), so no eviction happens at "
        f"{shown} tokens"
    )


def _mixers(model: ModelSpec) -> set[Mixer]:
    # The pattern repeats over the layers: its first num_layers entries are every mixer used.
    return set(model.mixer_pattern[: model.num_layers])
