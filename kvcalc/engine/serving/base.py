"""The serving-engine protocol: what every engine that sizes a KV cache tells the rest of kvcalc.

An engine is one module of this package holding one object that satisfies
:class:`ServingEngine`; :mod:`kvcalc.engine.serving` registers it by name. Nothing outside this
package compares an engine's name: a command asks the engine (which inputs it reads, its KV
pool, the batch it holds at a context, the longest context, its part of the report) and a
renderer turns the pure data it answers (:class:`EnginePart`) into rows and lines.

Refusals are :class:`InputRefusal`: they name the input at fault by its field (``kv_memory``),
which each front end spells its own way (``--kv-memory`` on the command line, ``kv_memory:`` in
a spec file). Only this module is imported at start-up: each engine imports its formulas when
asked for a pool.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kvcalc.engine.profiles import REGISTRY_PROFILE, DecodeProfile
from kvcalc.engine.units import GiB
from kvcalc.errors import InputError, literal

if TYPE_CHECKING:
    from kvcalc.engine.capacity import Capacity
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.inputs import Input
    from kvcalc.engine.kvformat import KVFormat
    from kvcalc.engine.spec import ModelSpec

#: The inputs given: field name -> its value (an input not given is absent).
Given = Mapping[str, Any]


@dataclass(frozen=True, eq=False)  # compared by identity: no __eq__/__hash__ to build
class BatchRequest:
    """What `kvcalc batch` asks of an engine: the contexts given (``--ctx``; None: not given)
    and, for an engine that starts at request lengths, those given (``--max-model-len``)."""

    contexts: Sequence[int] | None = None
    lengths: Sequence[int] | None = None


#: The CSV columns of a GPU set (``Setup.gpus`` flattened), in every record that names one.
GPUS_COLUMNS = ("gpus_id", "gpus_label", "gpus_accelerator", "gpus_count")


def log_gib(value: float) -> str:
    """Bytes in GiB as the engines' start-up logs print them (two decimals, no separators)."""
    return f"{value / GiB:.2f} GiB"


def cuda_total_note(dep: Deployment) -> list[str]:
    """The one line an engine sized from the CUDA total prints when that total is estimated
    (:attr:`~kvcalc.engine.deployment.Deployment.cuda_total_estimated`): a guess is never
    silent."""
    if not dep.cuda_total_estimated:
        return []
    from kvcalc.engine.hardware import SMI_ABOVE_CUDA_BYTES
    from kvcalc.engine.units import MiB

    acc = dep.gpus.accelerator
    smi = acc.smi_memory_bytes or 0
    return [
        f"CUDA total per GPU estimated at {log_gib(dep.cuda_total_bytes_per_gpu)} (nvidia-smi's "
        f"{smi // MiB:,} MiB less the {SMI_ABOVE_CUDA_BYTES // MiB} MiB median gap of the GPUs "
        "measured); for the exact figure give --gpu-memory (a spec's gpu_memory) with "
        "torch.cuda.mem_get_info()'s total"
    ]


@dataclass(frozen=True, eq=False)  # compared by identity: no __eq__/__hash__ to build
class Setup:
    """What the render layer states of every deployment, handed to an engine so that its part of
    the report places those figures where its own output puts them."""

    gpus: Mapping[str, Any]
    """The GPU set's JSON object (``id``, ``label``, ``accelerator``, ``count``)."""
    layout: Mapping[str, Any]
    """The layout's JSON keys (replicas, the split when it was chosen, ...)."""
    layout_notes: Sequence[str]
    kv_label: str
    """The KV format as the header names it (``fp8``, ``kivi2 (2-bit, g32)``)."""
    kv_bits_per_value: float | None


@dataclass(frozen=True, eq=False)  # compared by identity: no __eq__/__hash__ to build
class EnginePart:
    """An engine's part of a report, as pure data: the JSON object, the CSV records (with their
    columns), the lines people read, and whether every request fits. A renderer turns it into a
    report without knowing which engine made it."""

    payload: Mapping[str, Any]
    records: Sequence[Mapping[str, Any]] = ()
    fields: Sequence[str] = ()
    lines: Sequence[str] = ()
    fits: bool = True
    lengths: Sequence[int] = ()
    """The request lengths answered, checked against the model's maximum by the renderer."""
    capacity: Capacity | None = None
    """The budget formula's capacity at each context, rendered as its table (then the other
    fields are unused)."""


class KVPool(Protocol):
    """One replica's KV cache as an engine sizes it for one deployment."""

    def max_batches(self, contexts: Sequence[int]) -> tuple[list[int], str | None]:
        """The most sequences of each context one replica runs at once, and why none fits when
        the cache holds nothing (the list stops at the first context that fits none)."""
        ...

    def max_batch(self, context: int) -> int:
        """Sequences of ``context`` one replica holds; 0 when none fits or the engine would
        refuse the layout (a planner tries thousands: no error)."""
        ...

    def fraction(self, batch_per_replica: int, context: int) -> float:
        """The share of the cache ``batch_per_replica`` sequences of ``context`` take (inf: the
        engine does not start)."""
        ...

    def longest_context(self) -> int | None:
        """The longest single sequence (None: no limit below 2^30 tokens)."""
        ...

    def batch(self, request: BatchRequest) -> Answer:
        """`kvcalc batch`'s answer for this deployment."""
        ...

    def caveats(self) -> list[str]:
        """What every answer sized from this pool must say beside it (a figure it is only a
        bound of); empty for a pool kvcalc sizes as the engine does."""
        ...

    def step_tokens(self) -> int:
        """The most tokens one scheduler step carries, prompt chunks and decodes together: as
        given, else the engine's own default for the GPU and release (what a request-rate
        workload's steps are timed with)."""
        ...

    def started_with(self) -> dict[str, Any] | None:
        """The inputs the engine sized this pool with, its defaults for the GPU and release
        filled in, named as its `kvcalc batch` JSON names them (the ``engine_inputs`` of
        decode, plan and check); None for the budget formula, which reads no engine's."""
        ...


class Answer(Protocol):
    """An engine's answer to `kvcalc batch`, turned into its part of the report."""

    def part(self, setup: Setup) -> EnginePart: ...


class ServingEngine(Protocol):
    """A serving engine: its name, its inputs, its KV pool and its part of the report."""

    name: str
    """``--engine``'s value and the JSON ``engine``."""
    label: str
    """The engine as prose names it (``vLLM``); empty for the budget formula, which goes
    unnamed in titles."""
    summary: str
    """Its part of ``--engine``'s help: ``vllm: vLLM 0.19's exact block count``."""
    inputs: tuple[Input, ...]
    """The declarations of the inputs only this engine reads (:mod:`kvcalc.engine.inputs`):
    the command line's options and the spec file's keys follow from them."""
    options: tuple[str, ...]
    """Their names: refused with any other engine."""
    evicts: bool
    """Whether it sizes an evicting cache (the eviction options apply)."""
    sizes_registry: bool
    """Whether `kvcalc batch` without a MODEL (every model) sizes with it."""
    plans: bool
    """Whether `kvcalc plan`'s search sizes layouts with it."""
    default_contexts: tuple[int, ...] | None
    """The contexts `kvcalc batch` answers for without --ctx; None: the model's maximum."""
    takes_lengths: bool
    """Whether it starts at request lengths of its own (`kvcalc batch --max-model-len`)."""
    decode_profile: DecodeProfile
    """How its decode steps run (per-step overhead, all-reduce, CUDA graphs), each figure
    sourced (:mod:`kvcalc.engine.profiles`): what `decode` and `plan` time a step with."""

    def check_inputs(self, given: Given) -> None:
        """Refuse (InputRefusal naming the field) a deployment input given that this engine
        would not read, or a pair of inputs it reads that contradict each other."""
        ...

    def check_model(self, model: ModelSpec, given: Given) -> None:
        """Refuse an input given that this engine ignores for ``model`` (e.g. a block size
        for a model its backend pages at its own blocks)."""
        ...

    def check_kv_format(self, kv: KVFormat) -> None:
        """Refuse (InputRefusal on ``kv_dtype``) a KV format this engine cannot store."""
        ...

    def check_timed(self, given: Given, timed_by: str) -> None:
        """Refuse (InputRefusal naming the field) an option given under which kvcalc cannot
        time this engine's decode steps (:attr:`decode_profile`); ``timed_by`` names what
        would time them (``decode``, a check spec's ``require.max_tpot_ms``)."""
        ...

    def engine_options(self, given: Given) -> Any:
        """Its own options (:attr:`options`) from their values, defaults filled in; a value it
        refuses raises InputRefusal naming the field."""
        ...

    def pool(self, dep: Deployment, options: Any) -> KVPool:
        """Its KV pool for ``dep`` with ``options`` (from :meth:`engine_options`)."""
        ...


def cli_name(name: str) -> str:
    """An input as the command line spells it, for an error's own ``str()`` (the front ends
    word it with :meth:`InputRefusal.worded`)."""
    return "--weights" if name == "weights_total" else "--" + name.replace("_", "-")


class InputRefusal(InputError, ValueError):
    """An input an engine refuses. Its message names inputs in its text: ``template`` holds
    ``{kv_memory}`` where each named input goes, spelled by the front end (``--kv-memory``,
    ``kv_memory``); ``fields`` are the inputs it names, the one at fault first. (It reads as a
    :class:`~kvcalc.engine.deployment.DeploymentError` does -- ``fields``, ``model_specific``,
    :meth:`worded` -- without importing the deployment at start-up.)"""

    def __init__(self, template: str, *fields: str, model_specific: bool = False) -> None:
        self.template = template
        self.model_specific = model_specific
        message = template.format_map({f: cli_name(f) for f in fields})
        super().__init__(message, fields=fields)

    def worded(self, name: Callable[[str], str], fields: tuple[str, ...] = ()) -> str:
        return self.template.format_map({f: name(f) for f in fields or self.fields})

    def __str__(self) -> str:
        return self.worded(cli_name)


class EngineRefusal(InputRefusal):
    """A set-up the engine would refuse to start with (or that is not modelled): one line in
    its own words, naming the fix. With ``fields``, ``message`` is a template naming those
    inputs as ``{kv_dtype}`` (literal braces doubled), worded by each front end as any
    :class:`InputRefusal`; without, it is the line as it reads."""

    def __init__(self, message: str, *fields: str) -> None:
        super().__init__(message if fields else literal(message), *fields)

    @classmethod
    def at(cls, field: str, reason: str) -> EngineRefusal:
        """``field`` refused for ``reason`` (literal text)."""
        return cls("{" + field + "}: " + literal(reason), field)


def refusal(name: str, reason: str) -> InputRefusal:
    """``name`` refused for ``reason``, which may name other inputs (``{page_size}``; literal
    braces doubled)."""
    others = tuple(f for f in named_inputs(reason) if f != name)
    return InputRefusal("{" + name + "}: " + reason, name, *others)


@dataclass(frozen=True, eq=False)  # compared by identity: no __eq__/__hash__ to build
class Refusals:
    """The deployment inputs an engine does not read, each with why (the usual way to write
    :meth:`ServingEngine.check_inputs`)."""

    reasons: Mapping[str, str] = field(default_factory=dict)

    def check(self, given: Given) -> None:
        for name, reason in self.reasons.items():
            if name in given:
                raise refusal(name, reason)


def named_inputs(template: str) -> tuple[str, ...]:
    """The inputs a reason names (``{page_size}``), in order, each once."""
    import string

    return tuple(dict.fromkeys(f for _, f, _, _ in string.Formatter().parse(template) if f))


class Engine:
    """The defaults of an engine (the usual base of a :class:`ServingEngine`): no options of
    its own, no eviction, no registry-wide table, not planned, the model's maximum as the
    default context; each input in :attr:`refusals` refused, every model and KV format taken."""

    label = ""
    inputs: tuple[Input, ...] = ()
    options: tuple[str, ...] = ()
    evicts = False
    sizes_registry = False
    plans = False
    default_contexts: tuple[int, ...] | None = None
    takes_lengths = False
    refusals = Refusals()
    #: The GPU's registry figures as they are (an engine that states none of its own).
    decode_profile = REGISTRY_PROFILE

    def check_inputs(self, given: Given) -> None:
        self.refusals.check(given)

    def check_model(self, model: ModelSpec, given: Given) -> None:
        return None

    def check_kv_format(self, kv: KVFormat) -> None:
        return None

    def check_timed(self, given: Given, timed_by: str) -> None:
        return None

    def engine_options(self, given: Given) -> Any:
        return None
