"""The budget formula (``--engine simple``): the KV budget per GPU over the bytes per sequence
(:mod:`kvcalc.engine.capacity`), with any eviction policy, on every GPU set of the registry."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kvcalc.engine.profiles import REGISTRY_PROFILE
from kvcalc.engine.serving.base import (
    BatchRequest,
    Engine,
    EnginePart,
    Given,
    InputRefusal,
    ServingEngine,
    Setup,
)

if TYPE_CHECKING:
    from kvcalc.engine.capacity import Capacity
    from kvcalc.engine.deployment import Deployment

#: The contexts `kvcalc batch` answers for when --ctx is not given.
DEFAULT_CONTEXTS = (8192, 32768, 131072)


class BudgetFormula(Engine):
    name = "simple"
    summary = "simple: the budget formula"
    evicts = True
    sizes_registry = True
    plans = True
    default_contexts: tuple[int, ...] | None = DEFAULT_CONTEXTS
    #: The budget formula times a step with the GPU's registry figures as they are.
    decode_profile = replace(REGISTRY_PROFILE, name="simple", label="budget formula")

    def check_inputs(self, given: Given) -> None:
        if "max_num_batched_tokens" in given and any(
            o in given for o in ("overhead", "reserve", "kv_memory")
        ):
            raise InputRefusal(
                "{max_num_batched_tokens}: sizes only the estimated overhead, which {overhead}, "
                "{reserve} or {kv_memory} replaces",
                "max_num_batched_tokens",
                "overhead",
                "reserve",
                "kv_memory",
            )

    def pool(self, dep: Deployment, options: Any = None) -> BudgetPool:
        return BudgetPool(dep)


class BudgetPool:
    """The budget formula's cache of one replica: every token at full cost (or what the
    deployment's eviction policy keeps), whole blocks, the shared prefix once."""

    def __init__(self, dep: Deployment) -> None:
        from kvcalc.engine.capacity import layout_of

        self.dep = dep
        self.layout = layout_of(dep)

    def max_batches(self, contexts: Sequence[int]) -> tuple[list[int], str | None]:
        cap = self.capacity(contexts)
        return [fit.max_batch_per_replica for fit in cap.contexts], cap.reason

    def max_batch(self, context: int) -> int:
        from kvcalc.engine.capacity import max_batch

        return max_batch(self.layout, context)

    def fraction(self, batch_per_replica: int, context: int) -> float:
        """Whole blocks (and the shared prefix) over the fullest stage's budget."""
        from kvcalc.engine.capacity import kv_budget_fraction

        return kv_budget_fraction(self.layout, batch_per_replica, context)

    def longest_context(self) -> int | None:
        from kvcalc.engine.capacity import max_context_at_batch_1

        return max_context_at_batch_1(self.layout)

    def capacity(self, contexts: Sequence[int]) -> Capacity:
        from kvcalc.engine.capacity import capacity

        return capacity(self.dep, contexts)

    def batch(self, request: BatchRequest) -> BudgetAnswer:
        return BudgetAnswer(self.capacity(request.contexts or DEFAULT_CONTEXTS))

    def caveats(self) -> list[str]:
        return []

    def step_tokens(self) -> int:
        return self.dep.batched_tokens

    def started_with(self) -> None:
        return None


class BudgetAnswer:
    def __init__(self, capacity: Capacity) -> None:
        self.capacity = capacity

    def part(self, setup: Setup) -> EnginePart:
        return EnginePart(payload={}, capacity=self.capacity, fits=self.capacity.fits)


ENGINE: ServingEngine = BudgetFormula()
