"""The deployment and engine options, declared once for every command that takes them
(`batch`, `decode`), and their parsing into the engine's
:class:`~kvcalc.engine.deployment.Deployment` (the eviction options, which `size` takes too,
are in :mod:`kvcalc.cli.eviction`).

A command opts in with :func:`deployment_options`: the options are added to its signature and
reach it as one :class:`DeploymentOptions` value, so no command repeats the option block and
no command holds domain logic: defaults and validation live in the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import typer

from kvcalc.cli.app import (
    DEPLOYMENT_PANEL,
    InputError,
    LayoutError,
    complete_names,
    fail,
    grouped_options,
    input_option,
    input_options,
    option_name,
)
from kvcalc.cli.kvformat import KV_PARAMETERS, KvFormatOptions
from kvcalc.engine.inputs import DEPLOYMENT_INPUTS, GPUS_HELP, engine_inputs
from kvcalc.engine.serving import DEFAULT_ENGINE, ENGINE_NAMES, engines

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment, DeploymentError
    from kvcalc.engine.eviction import Eviction
    from kvcalc.engine.hardware import GpuSet
    from kvcalc.engine.serving.base import KVPool, ServingEngine
    from kvcalc.engine.spec import ModelSpec

F = TypeVar("F", bound=Callable[..., Any])


def input_error(exc: DeploymentError) -> InputError:
    """The engine's refusal as the CLI's one-line error, naming the options at fault."""
    cls = LayoutError if exc.model_specific else InputError
    return cls(exc.worded(option_name))


# ------------------------------------------------------------------ the deployment


# Never compared or printed: no generated __eq__/__hash__/__repr__ (each costs start-up time).
@dataclass(frozen=True, eq=False, repr=False)
class DeploymentOptions(KvFormatOptions):
    """The deployment options as given on the command line (None: not given), the KV format
    options included."""

    gpus: str | None
    """None only for a command whose GPUs are optional (`compare`)."""
    tp: int | None
    pp: int
    gpu_util: float | None
    reserve: float | None
    overhead: str | None
    gpu_memory: str | None
    weights: str | None
    kv_memory: str | None
    weight_dtype: str | None
    block_size: int
    prefix_shared: int
    max_num_batched_tokens: int | None

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> DeploymentOptions:
        """The options a spec file gives by field name (``kv_memory``), the others at their
        command-line defaults, so a spec file and the command line build the same deployment."""
        return cls(**{name: values.get(name, _DECLARED[name].default) for name in _PARAMETERS})

    def given(self, name: str) -> bool:
        """Whether an option was given (a non-default value; the defaults are None, 16 and 0)."""
        return _DECLARED[name].given(getattr(self, name))

    def resolve_gpus(self) -> GpuSet:
        from kvcalc.registry.gpus import parse_gpu_set

        if self.gpus is None:
            fail("--gpus: give the GPUs, e.g. --gpus 8xH100")
        return parse_gpu_set(self.gpus)

    def refuse_without_gpus(self, *, keep: tuple[str, ...]) -> None:
        """Without --gpus, refuse every deployment option but ``keep``: it sizes the GPUs."""
        if self.gpus is None:
            others = [name for name in _PARAMETERS if name not in keep and name != "gpus"]
            self.refuse(*others, because="it describes the GPUs; give --gpus too")

    def refuse(self, *names: str, because: str) -> None:
        """Refuse each of ``names`` that was given: it would not change the answer."""
        for name in names:
            if self.given(name):
                fail(f"{option_name(name)}: {because}")

    def refuse_if(self, condition: bool, *names: str, because: str) -> None:
        if condition:
            self.refuse(*names, because=because)

    def given_values(self) -> dict[str, Any]:
        """The options given, by field name (what an engine is asked whether it reads)."""
        return {name: getattr(self, name) for name in _PARAMETERS if self.given(name)}

    def build(
        self,
        model: ModelSpec,
        gpus: GpuSet,
        engine: ServingEngine | None = None,
        eviction: Eviction | None = None,
    ) -> Deployment:
        """The deployment these options describe for ``model`` on ``gpus``, served by
        ``engine`` (None: the budget formula), keeping the tokens ``eviction`` keeps (None:
        every token)."""
        from kvcalc.engine.deployment import DeploymentError
        from kvcalc.engine.inputs import deployment_from

        try:
            return deployment_from(
                model, gpus, self.given_values(), engine=engine, eviction=eviction,
                kv_format=self.kv_format,
            )
        except DeploymentError as exc:
            raise input_error(exc) from None


_GPUS = DEPLOYMENT_INPUTS[0]
# The KV format's options as `kvcalc size` builds them; --gpus required.
_PARAMETERS: dict[str, tuple[Any, Any]] = {
    i.name: KV_PARAMETERS[i.name] if i.name in KV_PARAMETERS else input_option(i)
    for i in DEPLOYMENT_INPUTS
} | {"gpus": input_option(_GPUS, default=...)}
assert set(_PARAMETERS) == {f.name for f in fields(DeploymentOptions)}
_DECLARED = {i.name: i for i in DEPLOYMENT_INPUTS}


def deployment_options(command: F) -> F:
    """Add the deployment options to ``command``, which receives them as ``deploy``."""
    return grouped_options(command, "deploy", DeploymentOptions, _PARAMETERS)


_OPTIONAL_GPUS = input_option(_GPUS, help=f"{GPUS_HELP} [default: no GPUs, bytes only]")[1]


def optional_deployment_options(command: F) -> F:
    """The deployment options with --gpus optional (``deploy.gpus`` is then None)."""
    parameters = {**_PARAMETERS, "gpus": (str | None, _OPTIONAL_GPUS)}
    return grouped_options(command, "deploy", DeploymentOptions, parameters)


def deployment_sets_options(command: F) -> F:
    """As :func:`deployment_options`, with ``--gpus`` repeatable: ``command`` receives
    ``deploys``, one :class:`DeploymentOptions` per GPU set, in the order given."""
    gpus = input_option(_GPUS, default=..., help=f"{GPUS_HELP}; repeat for one line per GPU set")
    parameters = {**_PARAMETERS, "gpus": (list[str], gpus[1])}
    return grouped_options(command, "deploys", _per_gpu_set, parameters)


def _per_gpu_set(gpus: list[str], **options: Any) -> list[DeploymentOptions]:
    return [DeploymentOptions(gpus=g, **options) for g in gpus]


# ------------------------------------------------------------------ the engines' own options


class EngineFlags:
    """Every engine's own options as given on the command line or in a spec file (None: not
    given), by field name (SGLang's named as SGLang names them); :meth:`options` turns the
    chosen engine's into its options."""

    __slots__ = ("values",)

    def __init__(self, **values: Any) -> None:
        self.values = values

    def named(self) -> dict[str, Any]:
        """The options given, as given."""
        return {name: value for name, value in self.values.items() if value is not None}

    def given(self) -> dict[str, Any]:
        """The options given, each read (free memory in bytes, the context in tokens)."""
        from kvcalc.engine.inputs import read_values

        return read_values(self.named())

    def options(self, engine: ServingEngine) -> Any:
        """``engine``'s options; a bad value raises the engine's refusal naming the flag."""
        return engine.engine_options(self.given())


_ENGINE_INPUT_PARAMETERS: dict[str, tuple[Any, Any]] = input_options(engine_inputs())
#: The field names of every engine's own options.
ENGINE_INPUT_NAMES = tuple(_ENGINE_INPUT_PARAMETERS)


def option_bounds(name: str) -> tuple[float | None, float | None]:
    """The (min, max) the command line allows for a deployment or engine option, so that a
    spec file giving the same field is held to the same range."""
    from kvcalc.engine.inputs import all_inputs

    declared = all_inputs().get(name)
    return (None, None) if declared is None else declared.bounds()


def engine_input_options(command: F) -> F:
    """Add every engine's own options to ``command``, which receives them as ``flags``."""
    return grouped_options(command, "flags", EngineFlags, _ENGINE_INPUT_PARAMETERS)


# ------------------------------------------------------------------ the engine


def complete_engines(incomplete: str) -> list[str]:
    return complete_names(incomplete, ENGINE_NAMES)


# A NamedTuple, not a frozen dataclass: several times cheaper to create at start-up.
class EngineChoice(NamedTuple):
    """``--engine`` as given: which engine's rule sizes the KV cache."""

    engine: str

    def checked(self, deploy: DeploymentOptions, flags: EngineFlags) -> ServingEngine:
        """The engine, once it is known and no option it would ignore was given."""
        from kvcalc.engine.serving import check_inputs, engine_named

        engine = engine_named(self.engine)  # a spec file's engine, as --engine, any case
        check_inputs(engine, {**deploy.given_values(), **flags.named()})
        return engine


_ENGINE_PARAMETERS: dict[str, tuple[Any, Any]] = {
    "engine": (
        str,
        typer.Option(
            DEFAULT_ENGINE,
            "--engine",
            metavar="[" + "|".join(ENGINE_NAMES) + "]",
            autocompletion=complete_engines,
            rich_help_panel=DEPLOYMENT_PANEL,
            help="; ".join(engine.summary for engine in engines()),
        ),
    ),
}
assert set(_ENGINE_PARAMETERS) == set(EngineChoice._fields)


def engine_options(command: F) -> F:
    """Add ``--engine`` and the engines' own options to ``command``, which receives them as
    ``engine`` (an :class:`EngineChoice`) and ``flags``."""
    return engine_input_options(
        grouped_options(command, "engine", EngineChoice, _ENGINE_PARAMETERS)
    )


def engine_pool(dep: Deployment, engine: ServingEngine, flags: EngineFlags) -> KVPool:
    """``engine``'s KV pool for ``dep``, with its options from ``flags``."""
    return engine.pool(dep, flags.options(engine))
