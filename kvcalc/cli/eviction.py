"""The eviction and bounding options (`--window`, `--sinks`/`--recent`, `--h2o-budget`,
`--snapkv-budget`/`--observation-window`/`--prompt`/`--gen`, `--keep-ratio`), declared once for
`size`, `batch` and `decode`, and their parsing into one engine policy
(:mod:`kvcalc.engine.eviction`).

Kept apart from :mod:`kvcalc.cli.deploy` so that `size`, which takes no deployment, does not pay
for the deployment options at start-up; the policy types are imported only when one is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from kvcalc.cli.app import (
    EVICTION_PANEL,
    TOKENS,
    WordedInputError,
    grouped_options,
    in_panel,
    one_length,
    option_name,
    parse_ctx_list,
    token_option,
)

if TYPE_CHECKING:
    from kvcalc.engine.eviction import Eviction
    from kvcalc.engine.serving.base import InputRefusal, ServingEngine
    from kvcalc.engine.spec import ModelSpec

F = TypeVar("F", bound=Callable[..., Any])


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
            raise self.refused(reason.replace("{", "{{").replace("}", "}}"))
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


_EVICTION_PARAMETERS: dict[str, tuple[Any, Any]] = in_panel(EVICTION_PANEL, {
    "window": (
        int | None,
        token_option(None, "--window", help="keep the last W tokens (lossy)"),
    ),
    "sinks": (
        int | None,
        token_option(
            None, "--sinks", minimum=0, help="StreamingLLM: sink tokens [default: 4]"
        ),
    ),
    "recent": (
        int | None,
        token_option(
            None, "--recent", help="StreamingLLM: keep the sinks + the last R tokens (lossy)"
        ),
    ),
    "h2o_budget": (
        int | None,
        token_option(
            None, "--h2o-budget", help="H2O: keep N heavy-hitter + recent tokens (lossy)"
        ),
    ),
    "snapkv_budget": (
        int | None,
        token_option(
            None,
            "--snapkv-budget",
            help="SnapKV: compress the --prompt to N tokens once (lossy)",
        ),
    ),
    "observation_window": (
        int | None,
        token_option(
            None,
            "--observation-window",
            help="SnapKV: voting prompt tokens, within the budget [default: 32]",
        ),
    ),
    "prompt": (
        str | None,
        typer.Option(None, "--prompt", metavar=TOKENS, help="SnapKV: prompt length, e.g. 32k"),
    ),
    "gen": (
        str | None,
        typer.Option(None, "--gen", metavar=TOKENS, help="SnapKV: generated tokens, e.g. 1k"),
    ),
    "keep_ratio": (
        float | None,
        typer.Option(
            None, "--keep-ratio", help="token pruning: keep this share, in (0, 1] (lossy)"
        ),
    ),
})
assert set(_EVICTION_PARAMETERS) == {f.name for f in fields(EvictionOptions)}


def eviction_option_bounds(name: str) -> tuple[float | None, float | None]:
    """The (min, max) the command line allows for an eviction option (a spec file's field is
    held to the same range)."""
    option = _EVICTION_PARAMETERS.get(name, (None, None))[1]
    return getattr(option, "min", None), getattr(option, "max", None)


def eviction_options(command: F) -> F:
    """Add the eviction options to ``command``, which receives them as ``evict``."""
    return grouped_options(command, "evict", EvictionOptions, _EVICTION_PARAMETERS)
