"""The deployment and engine inputs as given (None: not given), by every front end -- the
command line's options (:mod:`kvcalc.cli.deploy`), a spec file's keys, the API's keywords -- and
their resolution into the engine's :class:`~kvcalc.engine.deployment.Deployment` and a serving
engine's options and pool. The inputs themselves are declared once, in
:mod:`kvcalc.engine.inputs`; a refusal names the input as the command line spells it and
carries its field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from kvcalc.engine.inputs import DEPLOYMENT_INPUTS
from kvcalc.errors import InputError, LayoutError, fail
from kvcalc.options import KvFormatOptions
from kvcalc.values import option_name

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment, DeploymentError
    from kvcalc.engine.eviction import Eviction
    from kvcalc.engine.hardware import GpuSet
    from kvcalc.engine.kvformat import KVFormat
    from kvcalc.engine.serving.base import KVPool, ServingEngine
    from kvcalc.engine.spec import ModelSpec


def input_error(exc: DeploymentError) -> InputError:
    """The engine's refusal as the one-line error, naming the inputs at fault."""
    cls = LayoutError if exc.model_specific else InputError
    return cls(exc.worded(option_name))


# ------------------------------------------------------------------ the deployment


class DeploymentOptions(KvFormatOptions):
    """The deployment options as given on the command line (None: not given), the KV format
    options included: one value per input of :data:`~kvcalc.engine.inputs.DEPLOYMENT_INPUTS`,
    by its name (``values``), so an input declared there is taken here with nothing more to
    write. The few the library reads by name have typed properties."""

    values: Mapping[str, Any]
    #: The inputs' names, in the order they are declared.
    names: ClassVar[tuple[str, ...]]

    def __init__(self, **given: Any) -> None:
        unknown = set(given) - set(_DECLARED)
        if unknown:
            raise TypeError(f"not deployment inputs: {', '.join(sorted(unknown))}")
        values = {name: given.get(name, i.default) for name, i in _DECLARED.items()}
        super().__init__(**{name: values[name] for name in _KV_NAMES})
        object.__setattr__(self, "values", MappingProxyType(values))  # frozen as the KV part

    @property
    def gpus(self) -> str | None:
        """None only for a command whose GPUs are optional (`compare`)."""
        return self.values["gpus"]  # type: ignore[no-any-return]

    @property
    def tp(self) -> int | None:
        return self.values["tp"]  # type: ignore[no-any-return]

    @property
    def pp(self) -> int:
        return self.values["pp"]  # type: ignore[no-any-return]

    @property
    def weight_dtype(self) -> str | None:
        return self.values["weight_dtype"]  # type: ignore[no-any-return]

    @property
    def prefix_shared(self) -> int:
        return self.values["prefix_shared"]  # type: ignore[no-any-return]

    def replace(self, **changes: Any) -> DeploymentOptions:
        """These options with ``changes`` (by name)."""
        return DeploymentOptions(**{**self.values, **changes})

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> DeploymentOptions:
        """The options a spec file gives by field name (``kv_memory``), the others at their
        command-line defaults, so a spec file and the command line build the same deployment."""
        return cls(**{name: values[name] for name in _DECLARED if name in values})

    def given(self, name: str) -> bool:
        """Whether an option was given (a non-default value; the defaults are None and 0)."""
        return _DECLARED[name].given(self.values[name])

    def resolve_gpus(self) -> GpuSet:
        from kvcalc.registry.gpus import parse_gpu_set

        if self.gpus is None:
            fail("--gpus: give the GPUs, e.g. --gpus 8xH100")
        return parse_gpu_set(self.gpus)

    def refuse_without_gpus(self, *, keep: tuple[str, ...]) -> None:
        """Without --gpus, refuse every deployment option but ``keep``: it sizes the GPUs."""
        if self.gpus is None:
            others = [name for name in _DECLARED if name not in keep and name != "gpus"]
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
        return dict(self._given_values)

    @cached_property
    def _given_values(self) -> dict[str, Any]:
        # Frozen options: a whole-registry batch builds 98 deployments from one set.
        return {name: value for name, value in self.values.items() if self.given(name)}

    def build(
        self,
        model: ModelSpec,
        gpus: GpuSet,
        engine: ServingEngine | None = None,
        eviction: Eviction | None = None,
        *,
        kv: KVFormat | None = None,
    ) -> Deployment:
        """The deployment these options describe for ``model`` on ``gpus``, served by
        ``engine`` (None: the budget formula), keeping the tokens ``eviction`` keeps (None:
        every token); ``kv`` is :meth:`kv_format` of ``model`` when the caller has it already
        (None: resolved here)."""
        from kvcalc.engine.deployment import DeploymentError
        from kvcalc.engine.inputs import deployment_from

        if "calibration" in self._given_values:  # its module loads only when one is given
            from kvcalc.calibration.calfile import check_calibration

            check_calibration(model, gpus, engine, self._given_values)
        try:
            return deployment_from(
                model, gpus, self.given_values(), engine=engine, eviction=eviction,
                kv_format=self.kv_format if kv is None else lambda _: kv,
            )
        except DeploymentError as exc:
            raise input_error(exc) from None


_DECLARED = {i.name: i for i in DEPLOYMENT_INPUTS}
_KV_NAMES = tuple(f.name for f in fields(KvFormatOptions))
DeploymentOptions.names = tuple(_DECLARED)


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


def engine_input_names() -> tuple[str, ...]:
    """The field names of every engine's own options."""
    from kvcalc.engine.inputs import engine_inputs

    return tuple(i.name for i in engine_inputs())


def option_bounds(name: str) -> tuple[float | None, float | None]:
    """The (min, max) the command line allows for a deployment or engine option, so that a
    spec file giving the same field is held to the same range."""
    from kvcalc.engine.inputs import all_inputs

    declared = all_inputs().get(name)
    return (None, None) if declared is None else declared.bounds()


# ------------------------------------------------------------------ the engine


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


def engine_pool(dep: Deployment, engine: ServingEngine, flags: EngineFlags) -> KVPool:
    """``engine``'s KV pool for ``dep``, with its options from ``flags``."""
    return engine.pool(dep, flags.options(engine))
