"""Eviction and bounding policies: which of a sequence's tokens the cache keeps.

A policy is one type with one formula, :meth:`Eviction.tokens_held` (the tokens it keeps of a
``context_tokens``-token sequence). It is composed with each layer's own bound in
:func:`layer_tokens_held`, the one place the engines ask how many tokens a layer holds: a layer
keeps what its own kind keeps of what the policy keeps, so a sliding-window layer holds the
smaller of its window and the policy's bound, and a recurrent layer (a fixed state) is
unaffected. Bytes per held token stay the cache format's, so a policy composes with KV
quantization by multiplication.

The policies and their sources (seed 000 and seed 004 of the reference texts):

- :class:`KeepAll`: no eviction (the default);
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

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from kvcalc.engine.spec import Mixer, ModelSpec

#: StreamingLLM's attention sinks: "the first ~4 tokens" (seed 004; the paper's default).
DEFAULT_SINKS = 4
#: SnapKV's observation window, the last prompt tokens whose attention votes (the SnapKV
#: paper's LongBench setting).
DEFAULT_OBSERVATION_WINDOW = 32


class EvictionError(ValueError):
    """A policy that cannot be built, naming its inputs at fault (``window``, ``keep_ratio``,
    ...) so that each front end words them its own way (``--keep-ratio`` on the command line)."""

    def __init__(self, fields: tuple[str, ...], reason: str) -> None:
        super().__init__(f"{' and '.join(fields)}: {reason}")
        self.fields = fields
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

    def recallable(self, tokens_back: int, context_tokens: int) -> bool | None:
        """Whether a token ``tokens_back`` tokens before the end of a ``context_tokens``
        sequence (1 = the newest) is still in the cache: True or False when the policy decides
        by position, None when it depends on attention scores."""
        return None if self.tokens_held(context_tokens) < context_tokens else True

    def parameters(self) -> dict[str, Any]:
        """The inputs of the policy, by field name, for JSON."""
        return {name: getattr(self, name) for name in self.fields}


@dataclass(frozen=True)
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


def _at_least(value: int, least: int, name: str) -> None:
    if value < least:
        raise EvictionError((name,), f"must be at least {least}, not {value}")


@dataclass(frozen=True)
class SlidingWindow(Eviction):
    """Every layer attends to (and keeps) the last ``window`` tokens only."""

    policy: ClassVar[str] = "window"
    fields: ClassVar[tuple[str, ...]] = ("window",)
    window: int

    def __post_init__(self) -> None:
        _at_least(self.window, 1, "window")

    def tokens_held(self, context_tokens: int) -> int:
        return min(context_tokens, self.window)

    def describe(self) -> str:
        return f"sliding window of {self.window:,} tokens"

    @property
    def consequence(self) -> str:
        return (
            f"a token more than {self.window:,} tokens back is evicted and cannot be recalled"
        )

    def recallable(self, tokens_back: int, context_tokens: int) -> bool:
        return tokens_back <= self.window


@dataclass(frozen=True)
class StreamingLLM(Eviction):
    """The first ``sinks`` tokens (where softmax parks attention) plus the ``recent`` newest."""

    policy: ClassVar[str] = "streamingllm"
    fields: ClassVar[tuple[str, ...]] = ("sinks", "recent")
    sinks: int
    recent: int

    def __post_init__(self) -> None:
        _at_least(self.sinks, 0, "sinks")
        _at_least(self.recent, 1, "recent")

    @property
    def bound(self) -> int:
        return self.sinks + self.recent

    def tokens_held(self, context_tokens: int) -> int:
        # seed 000: "if seq_len <= n_sink + n_recent: return standard_attention(...)".
        return min(context_tokens, self.bound)

    def describe(self) -> str:
        return f"StreamingLLM {self.sinks:,} sinks + {self.recent:,} recent"

    @property
    def consequence(self) -> str:
        return (
            f"only the first {self.sinks:,} and the last {self.recent:,} tokens are kept: "
            "anything between is evicted and cannot be recalled (fluent over long streams, "
            "no long-range memory)"
        )

    def recallable(self, tokens_back: int, context_tokens: int) -> bool:
        position = context_tokens - tokens_back  # 0 = the first token
        return tokens_back <= self.recent or position < self.sinks


@dataclass(frozen=True)
class H2O(Eviction):
    """Heavy hitters (the tokens with the largest cumulative attention) and the most recent
    tokens, ``budget`` tokens in all."""

    policy: ClassVar[str] = "h2o"
    fields: ClassVar[tuple[str, ...]] = ("h2o_budget",)
    h2o_budget: int

    def __post_init__(self) -> None:
        _at_least(self.h2o_budget, 1, "h2o_budget")

    def tokens_held(self, context_tokens: int) -> int:
        return min(context_tokens, self.h2o_budget)

    def describe(self) -> str:
        return f"H2O heavy hitters + recent, budget {self.h2o_budget:,} tokens"

    @property
    def consequence(self) -> str:
        return (
            f"only {self.h2o_budget:,} tokens (heavy hitters and recent) are kept; a question "
            "about evicted text cannot be answered"
        )


@dataclass(frozen=True)
class SnapKV(Eviction):
    """The ``prompt``-token prompt compressed once to ``snapkv_budget`` tokens (the
    ``observation_window`` last prompt tokens and the positions they vote for); each of the
    ``gen`` generated tokens is then kept."""

    policy: ClassVar[str] = "snapkv"
    fields: ClassVar[tuple[str, ...]] = ("snapkv_budget", "observation_window", "prompt", "gen")
    snapkv_budget: int
    prompt: int
    gen: int
    observation_window: int = DEFAULT_OBSERVATION_WINDOW

    def __post_init__(self) -> None:
        _at_least(self.prompt, 1, "prompt")
        _at_least(self.gen, 1, "gen")
        _at_least(self.observation_window, 1, "observation_window")
        if self.snapkv_budget <= self.observation_window:
            # SnapKV keeps the observation window within the budget and selects the rest.
            raise EvictionError(
                ("snapkv_budget", "observation_window"),
                f"the budget ({self.snapkv_budget:,}) must exceed the observation window "
                f"({self.observation_window:,}), which it includes",
            )
        if self.observation_window > self.prompt:
            raise EvictionError(
                ("observation_window",),
                f"{self.observation_window:,} tokens exceed the {self.prompt:,}-token prompt "
                "they are taken from",
            )

    @property
    def context_tokens(self) -> int:
        """The sequence at its end: the prompt and every generated token."""
        return self.prompt + self.gen

    def tokens_held(self, context_tokens: int) -> int:
        # The prompt's part is compressed to the budget, what follows it is kept whole.
        prompt_part = min(context_tokens, self.prompt)
        return min(prompt_part, self.snapkv_budget) + (context_tokens - prompt_part)

    def describe(self) -> str:
        return (
            f"SnapKV prompt {self.prompt:,} -> {self.snapkv_budget:,} tokens "
            f"(observation window {self.observation_window:,}), then {self.gen:,} generated"
        )

    @property
    def consequence(self) -> str:
        return (
            f"the prompt is cut to the {self.snapkv_budget:,} tokens its last "
            f"{self.observation_window:,} tokens attend to; the rest cannot be recalled by a "
            "later question (prefill still holds the whole prompt of the sequence it runs)"
        )

    def recallable(self, tokens_back: int, context_tokens: int) -> bool | None:
        position = context_tokens - tokens_back
        kept_whole = position >= self.prompt - self.observation_window
        return True if kept_whole else super().recallable(tokens_back, context_tokens)


@dataclass(frozen=True)
class KeepRatio(Eviction):
    """Token pruning: the ``keep_ratio`` most important tokens are kept."""

    policy: ClassVar[str] = "keep_ratio"
    fields: ClassVar[tuple[str, ...]] = ("keep_ratio",)
    keep_ratio: Fraction

    def __post_init__(self) -> None:
        if not 0 < self.keep_ratio <= 1:
            raise EvictionError(
                ("keep_ratio",), f"{float(self.keep_ratio):g} is not a fraction in (0, 1], e.g. 0.5"
            )

    def tokens_held(self, context_tokens: int) -> int:
        # seed 000: n_keep = int(seq_len * keep_ratio); the newest token is always kept (its
        # keys and values are what the step attends with), so never fewer than one.
        return max(1, math.floor(context_tokens * self.keep_ratio))

    def describe(self) -> str:
        return f"token pruning, keep {float(self.keep_ratio):.0%}"

    @property
    def consequence(self) -> str:
        return (
            f"{float(1 - self.keep_ratio):.0%} of the tokens (the least important) are pruned "
            "and cannot be recalled"
        )

    def parameters(self) -> dict[str, Any]:
        return {"keep_ratio": float(self.keep_ratio)}


# --------------------------------------------------------------------------------------------
# Composition with the layers of a model


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
        f"every layer of {model.id} already holds no more than {eviction.describe()} keeps "
        f"at {shown} tokens, so no eviction happens"
    )


def _mixers(model: ModelSpec) -> set[Mixer]:
    return {model.mixer_at(i) for i in range(model.num_layers)}
