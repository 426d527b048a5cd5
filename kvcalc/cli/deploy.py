"""The deployment options, declared once for every command that takes them (`batch`, `decode`),
and their parsing into the engine's :class:`~kvcalc.engine.deployment.Deployment`.

A command opts in with :func:`deployment_options`: the options are added to its signature and
reach it as one :class:`DeploymentOptions` value, so no command repeats the option block and
no command holds domain logic: defaults and validation live in the engine.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from kvcalc.cli.app import InputError, fail, parse_size

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment, DeploymentError
    from kvcalc.engine.hardware import GpuSet
    from kvcalc.engine.spec import ModelSpec

F = TypeVar("F", bound=Callable[..., Any])


class LayoutError(InputError):
    """Valid options that this particular model cannot be split by (its heads or layers): the
    registry-wide table reports it as that model's row; any other bad option stops the command."""


#: Engine field -> option, where the option's name is not the field's with dashes.
_OPTION_NAMES = {"weights_total": "--weights"}


def option_name(field: str) -> str:
    """The command-line spelling of a deployment field (``kv_memory`` -> ``--kv-memory``)."""
    return _OPTION_NAMES.get(field, "--" + field.replace("_", "-"))


def input_error(exc: DeploymentError) -> InputError:
    """The engine's refusal as the CLI's one-line error, naming the options at fault."""
    cls = LayoutError if exc.model_specific else InputError
    return cls(exc.worded(option_name))


@dataclass(frozen=True)
class DeploymentOptions:
    """The deployment options as given on the command line (None: not given)."""

    gpus: str
    tp: int | None
    pp: int
    gpu_util: float | None
    reserve: float | None
    overhead: str | None
    gpu_memory: str | None
    weights: str | None
    kv_memory: str | None
    weight_dtype: str | None
    kv_dtype: str | None
    block_size: int
    prefix_shared: int
    max_num_batched_tokens: int | None

    def given(self, name: str) -> bool:
        """Whether an option was given (a non-default value; the defaults are None, 16 and 0)."""
        value = getattr(self, name)
        return value is not None and value != _PARAMETERS[name][1].default

    def resolve_gpus(self) -> GpuSet:
        from kvcalc.registry.gpus import parse_gpu_set

        return parse_gpu_set(self.gpus)

    def refuse(self, *names: str, because: str) -> None:
        """Refuse each of ``names`` that was given: it would not change the answer."""
        for name in names:
            if self.given(name):
                fail(f"{option_name(name)}: {because}")

    def check_applies(self, engine: str) -> None:
        """Refuse the options ``engine`` would not use."""
        if engine == "vllm":
            self.refuse(
                "prefix_shared", because="vLLM's block count does not depend on prefix caching"
            )
        elif self.given("max_num_batched_tokens") and any(
            self.given(o) for o in ("overhead", "reserve", "kv_memory")
        ):
            fail(
                "--max-num-batched-tokens: sizes only the estimated overhead, which "
                "--overhead, --reserve or --kv-memory replaces"
            )

    def build(self, model: ModelSpec, gpus: GpuSet, engine: str = "simple") -> Deployment:
        """The deployment these options describe for ``model`` on ``gpus``, served by
        ``engine`` (``simple``: the budget formula, or ``vllm``)."""
        from kvcalc.engine.deployment import DeploymentError, deployment

        self.check_applies(engine)

        sizes = {
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
                kv_dtype=self.kv_dtype,
                gpu_util=self.gpu_util,
                reserve=self.reserve,
                block_size=self.block_size,
                prefix_shared_tokens=self.prefix_shared,
                max_num_batched_tokens=self.max_num_batched_tokens,
                **sizes,
            )
        except DeploymentError as exc:
            raise input_error(exc) from None


_PARAMETERS: dict[str, tuple[Any, Any]] = {
    "gpus": (str, typer.Option(..., "--gpus", "-g", help="COUNTxGPU, e.g. 8xH100, 4xMI300X, h200")),
    "tp": (
        int | None,
        typer.Option(None, "--tp", min=1, max=4096, help="tensor parallel [default: GPUs/pp]"),
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
            None, "--overhead", help="runtime overhead per GPU, e.g. 5GiB [default: estimated]"
        ),
    ),
    "gpu_memory": (
        str | None,
        typer.Option(None, "--gpu-memory", help="memory per GPU, e.g. 80GB"),
    ),
    "weights": (str | None, typer.Option(None, "--weights", help="total weight bytes, e.g. 140GB")),
    "kv_memory": (
        str | None,
        typer.Option(None, "--kv-memory", help="KV budget per GPU directly, e.g. 52GiB"),
    ),
    "weight_dtype": (
        str | None,
        typer.Option(
            None, "--weight-dtype", help="bf16, fp16, fp8, int8, int4, mxfp4 [default: model dtype]"
        ),
    ),
    "kv_dtype": (
        str | None,
        typer.Option(
            None,
            "--kv-dtype",
            help="KV cache dtype: fp32, bf16, fp16, fp8, int8, int4, int2 [default: model dtype]",
        ),
    ),
    "block_size": (
        int,
        typer.Option(16, "--block-size", min=1, max=65536, help="tokens per KV block"),
    ),
    "prefix_shared": (
        int,
        typer.Option(
            0,
            "--prefix-shared",
            min=0,
            max=1 << 30,
            help="prompt-prefix tokens shared by all sequences",
        ),
    ),
    "max_num_batched_tokens": (
        int | None,
        typer.Option(
            None,
            "--max-num-batched-tokens",
            min=1,
            max=1 << 24,
            help="scheduler step: sizes the activation estimate (and vLLM's window charge) [8192]",
        ),
    ),
}
assert set(_PARAMETERS) == {f.name for f in fields(DeploymentOptions)}


def deployment_options(command: F) -> F:
    """Add the deployment options to ``command``, which receives them as ``deploy``."""
    signature = inspect.signature(command)
    own = [p for p in signature.parameters.values() if p.name != "deploy"]
    added = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind)
        for name, (kind, option) in _PARAMETERS.items()
    ]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> Any:
        options = DeploymentOptions(**{name: kwargs.pop(name) for name in _PARAMETERS})
        return command(deploy=options, **kwargs)

    wrapper.__signature__ = signature.replace(parameters=[*own, *added])  # type: ignore[attr-defined]
    wrapper.__annotations__ = {
        **{p.name: p.annotation for p in own},
        **{name: kind for name, (kind, _) in _PARAMETERS.items()},
    }
    return wrapper  # type: ignore[return-value]
