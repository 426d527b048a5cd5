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
    SGLANG_PANEL,
    TOKENS,
    VLLM_PANEL,
    InputError,
    LayoutError,
    complete_gpu_sets,
    complete_names,
    complete_weight_dtypes,
    fail,
    grouped_options,
    in_panel,
    one_length,
    option_name,
    parse_size,
    token_option,
)
from kvcalc.cli.kvformat import KV_PARAMETERS, KvFormatOptions
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
        return cls(
            **{
                name: values.get(name, option.default)
                for name, (_, option) in _PARAMETERS.items()
            }
        )

    def given(self, name: str) -> bool:
        """Whether an option was given (a non-default value; the defaults are None, 16 and 0)."""
        value = getattr(self, name)
        return value is not None and value != _PARAMETERS[name][1].default

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
        from kvcalc.engine.deployment import DeploymentError, deployment
        from kvcalc.engine.eviction import KEEP_ALL
        from kvcalc.engine.serving import DEFAULT_ENGINE, check_inputs, engine_named

        # An input the engine refuses raises its InputRefusal, which names the field.
        engine = engine or engine_named(DEFAULT_ENGINE)
        given = self.given_values()
        check_inputs(engine, given)
        engine.check_model(model, given)

        sizes: dict[str, Any] = {
            f"{name}_bytes": parse_size(text, option_name(name)) if text else None
            for name, text in (
                ("overhead", self.overhead),
                ("gpu_memory", self.gpu_memory),
                ("weights_total", self.weights),
                ("kv_memory", self.kv_memory),
            )
        }
        try:
            return deployment(
                model,
                gpus,
                tp=self.tp,
                pp=self.pp,
                weight_dtype=self.weight_dtype,
                kv_dtype=self.kv_format(model),
                gpu_util=self.gpu_util,
                reserve=self.reserve,
                block_size=self.block_size,
                prefix_shared_tokens=self.prefix_shared,
                max_num_batched_tokens=self.max_num_batched_tokens,
                eviction=eviction or KEEP_ALL,
                **sizes,
            )
        except DeploymentError as exc:
            raise input_error(exc) from None


#: --gpus, the one option every deployment needs (its help says the forms it takes).
GPUS_HELP = "COUNTxGPU, e.g. 8xH100 (also H100x8, h100:8, 8*h100), 4xMI300X, or h200 for one"
_GPUS_SETTINGS: dict[str, Any] = {
    "metavar": "COUNTxGPU",
    "autocompletion": complete_gpu_sets,
    "rich_help_panel": DEPLOYMENT_PANEL,
}

_PARAMETERS: dict[str, tuple[Any, Any]] = in_panel(DEPLOYMENT_PANEL, {
    "gpus": (str, typer.Option(..., "--gpus", "-g", help=GPUS_HELP, **_GPUS_SETTINGS)),
    "tp": (
        int | None,
        typer.Option(
            None,
            "--tp",
            min=1,
            max=4096,
            help="tensor parallel [default: the largest that splits the heads in one node]",
        ),
    ),
    "pp": (int, typer.Option(1, "--pp", min=1, max=1024, help="pipeline parallel stages")),
    "gpu_util": (
        float | None,
        typer.Option(
            None, "--gpu-util", help="share of GPU memory the engine takes [default: 0.9]"
        ),
    ),
    "reserve": (
        float | None,
        typer.Option(
            None, "--reserve", help="instead of --gpu-util/--overhead: fraction of memory reserved"
        ),
    ),
    "overhead": (
        str | None,
        typer.Option(
            None,
            "--overhead",
            metavar="SIZE",
            help="runtime overhead per GPU, e.g. 5GiB [default: estimated]",
        ),
    ),
    "gpu_memory": (
        str | None,
        typer.Option(
            None,
            "--gpu-memory",
            metavar="SIZE",
            help="memory per GPU, e.g. 80GB [default: the GPU's]",
        ),
    ),
    "weights": (
        str | None,
        typer.Option(
            None,
            "--weights",
            metavar="SIZE",
            help="total weight bytes, e.g. 140GB [default: from the model]",
        ),
    ),
    "kv_memory": (
        str | None,
        typer.Option(
            None,
            "--kv-memory",
            metavar="SIZE",
            help="KV budget per GPU directly, e.g. 52GiB [default: what the memory leaves]",
        ),
    ),
    "weight_dtype": (
        str | None,
        typer.Option(
            None,
            "--weight-dtype",
            metavar="DTYPE",
            autocompletion=complete_weight_dtypes,
            help=(
                "bf16, fp16, fp8, int8, int4, fp8-block, mxfp4, int4-g128, int4-g32 "
                "[default: as released]"
            ),
        ),
    ),
    **KV_PARAMETERS,
    "block_size": (
        int,
        token_option(16, "--block-size", maximum=65536, help="tokens per KV block"),
    ),
    "prefix_shared": (
        int,
        token_option(
            0,
            "--prefix-shared",
            minimum=0,
            help="prompt-prefix tokens shared by all sequences",
        ),
    ),
    "max_num_batched_tokens": (
        int | None,
        token_option(
            None,
            "--max-num-batched-tokens",
            maximum=1 << 24,
            rich_help_panel=VLLM_PANEL,
            help="scheduler step: sizes the activation estimate (and vLLM's window charge) "
            "[default: 8192]",
        ),
    ),
})
assert set(_PARAMETERS) == {f.name for f in fields(DeploymentOptions)}


def deployment_options(command: F) -> F:
    """Add the deployment options to ``command``, which receives them as ``deploy``."""
    return grouped_options(command, "deploy", DeploymentOptions, _PARAMETERS)


_OPTIONAL_GPUS = typer.Option(
    None, "--gpus", "-g", help=f"{GPUS_HELP} [default: no GPUs, bytes only]", **_GPUS_SETTINGS
)


def optional_deployment_options(command: F) -> F:
    """The deployment options with --gpus optional (``deploy.gpus`` is then None)."""
    parameters = {**_PARAMETERS, "gpus": (str | None, _OPTIONAL_GPUS)}
    return grouped_options(command, "deploy", DeploymentOptions, parameters)


def deployment_sets_options(command: F) -> F:
    """As :func:`deployment_options`, with ``--gpus`` repeatable: ``command`` receives
    ``deploys``, one :class:`DeploymentOptions` per GPU set, in the order given."""
    gpus = typer.Option(
        ...,
        "--gpus",
        "-g",
        help=f"{GPUS_HELP}; repeat for one line per GPU set",
        **_GPUS_SETTINGS,
    )
    parameters = {**_PARAMETERS, "gpus": (list[str], gpus)}
    return grouped_options(command, "deploys", _per_gpu_set, parameters)


def _per_gpu_set(gpus: list[str], **options: Any) -> list[DeploymentOptions]:
    return [DeploymentOptions(gpus=g, **options) for g in gpus]


# ------------------------------------------------------------------ SGLang


# A NamedTuple, not a frozen dataclass: several times cheaper to create at start-up (every
# command with --engine loads this module).
class EngineFlags(NamedTuple):
    """SGLang's server arguments as given on the command line (None: not given), named as
    SGLang names them; :meth:`options` turns them into the engine's
    :class:`~kvcalc.engine.sglang.SGLangOptions`."""

    sglang_version: str | None
    mem_fraction_static: float | None
    page_size: int | None
    context_length: str | None
    chunked_prefill_size: int | None
    cuda_graph_max_bs: int | None
    max_total_tokens: int | None
    free_before_load: str | None
    free_after_load: str | None
    swa_full_tokens_ratio: float | None

    def given(self) -> dict[str, Any]:
        """The flags given, by field name, each parsed (free memory in bytes, the context
        length in tokens)."""
        return {
            name: _PARSERS[name](value) if name in _PARSERS else value
            for name, value in zip(self._fields, self, strict=True)
            if value is not None
        }

    def options(self, engine: ServingEngine) -> Any:
        """``engine``'s options; a bad value raises the engine's refusal naming the flag."""
        return engine.engine_options(self.given())


#: SGLang prints "avail mem=63.41 GB" meaning GiB (it divides by 2^30): a bare number is read so.
def _size(text: str, option: str) -> int:
    bare = text.strip()
    try:
        float(bare)
    except ValueError:
        return parse_size(text, option)
    return parse_size(f"{bare}GiB", option)


_PARSERS: dict[str, Callable[[Any], Any]] = {
    "context_length": lambda text: one_length(text, "--context-length"),
    "free_before_load": lambda text: _size(text, "--free-before-load"),
    "free_after_load": lambda text: _size(text, "--free-after-load"),
}

_SGLANG_PARAMETERS: dict[str, tuple[Any, Any]] = in_panel(SGLANG_PANEL, {
    "sglang_version": (
        str | None,
        typer.Option(
            None,
            "--sglang-version",
            metavar="X.Y.Z",
            help="release, 0.4.0-0.5.18 [default: 0.5.6]",
        ),
    ),
    "mem_fraction_static": (
        float | None,
        typer.Option(
            None,
            "--mem-fraction-static",
            help="share of free memory for weights + KV "
            "[default: the release's rule]",
        ),
    ),
    "page_size": (
        int | None,
        token_option(
            None,
            "--page-size",
            maximum=65536,
            help="tokens per page [default: 1]",
        ),
    ),
    "context_length": (
        str | None,
        typer.Option(
            None,
            "--context-length",
            metavar=TOKENS,
            help="context length [default: the model's maximum]",
        ),
    ),
    "chunked_prefill_size": (
        int | None,
        token_option(
            None,
            "--chunked-prefill-size",
            maximum=1 << 24,
            help="prefill chunk (feeds the default memory share)",
        ),
    ),
    "cuda_graph_max_bs": (
        int | None,
        typer.Option(
            None,
            "--cuda-graph-max-bs",
            min=1,
            max=1 << 16,
            help="largest CUDA-graph batch (feeds the default memory share)",
        ),
    ),
    "max_total_tokens": (
        int | None,
        token_option(
            None,
            "--max-total-tokens",
            maximum=1 << 40,
            help="pool cap [default: none]",
        ),
    ),
    "free_before_load": (
        str | None,
        typer.Option(
            None,
            "--free-before-load",
            metavar="GIB",
            help="'Load weight begin. avail mem' in GiB, e.g. 78.43 "
            "[default: estimated]",
        ),
    ),
    "free_after_load": (
        str | None,
        typer.Option(
            None,
            "--free-after-load",
            metavar="GIB",
            help="'Load weight end. avail mem' in GiB, e.g. 63.41 "
            "[default: estimated]",
        ),
    ),
    "swa_full_tokens_ratio": (
        float | None,
        typer.Option(
            None,
            "--swa-full-tokens-ratio",
            help="pool sliding-window layers apart at this ratio (SGLang's "
            "is 0.8) [default: one shared pool]",
        ),
    ),
})
assert set(_SGLANG_PARAMETERS) == set(EngineFlags._fields)


def option_bounds(name: str) -> tuple[float | None, float | None]:
    """The (min, max) the command line allows for a deployment or SGLang option, so that a
    spec file giving the same field is held to the same range."""
    option = {**_PARAMETERS, **_SGLANG_PARAMETERS}.get(name, (None, None))[1]
    return getattr(option, "min", None), getattr(option, "max", None)


def sglang_options(command: F) -> F:
    """Add SGLang's options to ``command``, which receives them as ``flags``."""
    return grouped_options(command, "flags", EngineFlags, _SGLANG_PARAMETERS)


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
        check_inputs(engine, {**deploy.given_values(), **flags.given()})
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
    return sglang_options(grouped_options(command, "engine", EngineChoice, _ENGINE_PARAMETERS))


def engine_pool(dep: Deployment, engine: ServingEngine, flags: EngineFlags) -> KVPool:
    """``engine``'s KV pool for ``dep``, with its options from ``flags``."""
    return engine.pool(dep, flags.options(engine))
