"""The lossy policies, one type and one ``tokens_held`` formula each (see
:mod:`kvcalc.engine.eviction` for the interface, the composition with a model's layers and the
sources)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

from kvcalc.engine.eviction import Eviction, EvictionError

#: StreamingLLM's attention sinks: "the first ~4 tokens" (seed 004; the paper's default).
DEFAULT_SINKS = 4
#: SnapKV's observation window, the last prompt tokens whose attention votes (the SnapKV
#: paper's LongBench setting).
DEFAULT_OBSERVATION_WINDOW = 32


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
            f"only the first {self.sinks:,} and the last {self.recent:,} tokens are kept; "
            "anything between cannot be recalled (fluent, but no long-range memory)"
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
    def fixed_context(self) -> int:
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
            f"{self.observation_window:,} attend to; the rest cannot be recalled by a later "
            "question (prefill still holds the whole prompt of the sequence it runs)"
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
