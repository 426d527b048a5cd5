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

if TYPE_CHECKING:
    from fractions import Fraction

    from kvcalc.engine.deployment import Deployment, DeploymentError
    from kvcalc.engine.eviction import Eviction
    from kvcalc.engine.hardware import GpuSet
    from kvcalc.engine.sglang import SGLangOptions, SGLangPool, SGLangPoolTooSmall
    from kvcalc.engine.spec import ModelSpec
    from kvcalc.engine.vllm import KVCacheTooSmall, VLLMKVCache

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

    def check_applies(self, engine: str) -> None:
        """Refuse the options ``engine`` would not use."""
        if engine == "vllm":
            self.refuse(
                "prefix_shared", because="vLLM's block count does not depend on prefix caching"
            )
        elif engine == "sglang":
            self._check_applies_sglang()
        elif self.given("max_num_batched_tokens") and any(
            self.given(o) for o in ("overhead", "reserve", "kv_memory")
        ):
            fail(
                "--max-num-batched-tokens: sizes only the estimated overhead, which "
                "--overhead, --reserve or --kv-memory replaces"
            )

    def _check_applies_sglang(self) -> None:
        # SGLang sizes its pool from its own share of *free* memory (--mem-fraction-static),
        # with no profiled overhead, pages of --page-size and no prefix charge.
        self.refuse(
            "gpu_util",
            "reserve",
            "overhead",
            "kv_memory",
            because="SGLang's budget is --mem-fraction-static of the free memory "
            "(or --free-before-load / --free-after-load from its log)",
        )
        self.refuse("block_size", because="SGLang pages its pool with --page-size")
        self.refuse("prefix_shared", because="SGLang's token pool does not depend on it")
        self.refuse(
            "max_num_batched_tokens", because="SGLang's step is --chunked-prefill-size"
        )

    def build(
        self,
        model: ModelSpec,
        gpus: GpuSet,
        engine: str = "simple",
        eviction: Eviction | None = None,
    ) -> Deployment:
        """The deployment these options describe for ``model`` on ``gpus``, served by
        ``engine`` (``simple``: the budget formula, or ``vllm``), keeping the tokens
        ``eviction`` keeps (None: every token)."""
        from kvcalc.engine.deployment import DeploymentError, deployment
        from kvcalc.engine.eviction import KEEP_ALL

        self.check_applies(engine)
        if engine == "vllm":
            from kvcalc.engine.vllm import backend_blocks

            self.refuse_if(
                backend_blocks(model),
                "block_size",
                because=f"vLLM pages {model.id}'s caches at its backend's own blocks "
                "(64-token windows, 256-token latents); drop it",
            )

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
class SGLangFlags(NamedTuple):
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

    def given(self) -> list[str]:
        return [name for name, value in zip(self._fields, self, strict=True) if value is not None]

    def check_applies(self, engine: str, deploy: DeploymentOptions) -> None:
        """Refuse SGLang flags without ``--engine sglang``, and deployment options or flags that
        would not change SGLang's answer."""
        given = self.given()
        if engine != "sglang":
            if given:
                fail(f"{option_name(given[0])}: applies to --engine sglang only")
            return
        if self.free_after_load is not None:
            deploy.refuse(
                "weights",
                "weight_dtype",
                because="--free-after-load is the memory left once the weights are loaded",
            )
        if self.mem_fraction_static is not None:
            deploy.refuse_if(
                self.free_before_load is not None and self.free_after_load is not None,
                "gpu_memory",
                because="--mem-fraction-static and both free-memory figures leave nothing "
                "for the GPU's memory to decide",
            )

    def options(self) -> SGLangOptions:
        """The engine's options; bad values fail with one line naming the flag."""
        from kvcalc.engine.sglang import (
            DEFAULT_VERSION,
            SGLangConfigError,
            SGLangOptions,
            mfs_uses_graph_inputs,
            sglang_version,
        )

        try:
            version = (
                sglang_version(self.sglang_version) if self.sglang_version else DEFAULT_VERSION
            )
            for name in ("chunked_prefill_size", "cuda_graph_max_bs"):
                if getattr(self, name) is None:
                    continue
                if self.mem_fraction_static is not None:
                    fail(f"{option_name(name)}: only the default --mem-fraction-static reads it")
                if not mfs_uses_graph_inputs(version):
                    fail(
                        f"{option_name(name)}: SGLang {version}'s default "
                        "--mem-fraction-static does not read it (0.5.3 and later do)"
                    )
            return SGLangOptions(
                version=version,
                mem_fraction_static=_fraction(self.mem_fraction_static),
                page_size=self.page_size if self.page_size is not None else 1,
                context_length=(
                    None
                    if self.context_length is None
                    else one_length(self.context_length, "--context-length")
                ),
                chunked_prefill_size=self.chunked_prefill_size,
                cuda_graph_max_bs=self.cuda_graph_max_bs,
                max_total_tokens=self.max_total_tokens,
                free_before_load_bytes=_size(self.free_before_load, "--free-before-load"),
                free_after_load_bytes=_size(self.free_after_load, "--free-after-load"),
                swa_full_tokens_ratio=_fraction(self.swa_full_tokens_ratio),
            )
        except SGLangConfigError as exc:
            fail(str(exc))


def _fraction(value: float | None) -> Fraction | None:
    from kvcalc.engine.deployment import as_fraction

    return None if value is None else as_fraction(value)


#: SGLang prints "avail mem=63.41 GB" meaning GiB (it divides by 2^30): a bare number is read so.
def _size(text: str | None, option: str) -> int | None:
    if text is None:
        return None
    bare = text.strip()
    try:
        float(bare)
    except ValueError:
        return parse_size(text, option)
    return parse_size(f"{bare}GiB", option)


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
assert set(_SGLANG_PARAMETERS) == set(SGLangFlags._fields)


def option_bounds(name: str) -> tuple[float | None, float | None]:
    """The (min, max) the command line allows for a deployment or SGLang option, so that a
    spec file giving the same field is held to the same range."""
    option = {**_PARAMETERS, **_SGLANG_PARAMETERS}.get(name, (None, None))[1]
    return getattr(option, "min", None), getattr(option, "max", None)


def sglang_options(command: F) -> F:
    """Add SGLang's options to ``command``, which receives them as ``sglang``."""
    return grouped_options(command, "sglang", SGLangFlags, _SGLANG_PARAMETERS)


# ------------------------------------------------------------------ the engine

ENGINES = ("simple", "vllm", "sglang")


def complete_engines(incomplete: str) -> list[str]:
    return complete_names(incomplete, ENGINES)


# A NamedTuple, not a frozen dataclass: several times cheaper to create at start-up.
class EngineChoice(NamedTuple):
    """``--engine`` as given: which engine's rule sizes the KV cache."""

    engine: str

    def checked(self, deploy: DeploymentOptions, sglang: SGLangFlags) -> str:
        """The engine, once it is known and no option it would ignore was given."""
        engine = str(self.engine).lower()  # a spec file's engine, as --engine, any case
        if engine not in ENGINES:
            fail(f"--engine: unknown engine {self.engine!r}; choose {', '.join(ENGINES)}")
        deploy.check_applies(engine)
        sglang.check_applies(engine, deploy)
        return engine


_ENGINE_PARAMETERS: dict[str, tuple[Any, Any]] = {
    "engine": (
        str,
        typer.Option(
            "simple",
            "--engine",
            metavar="[" + "|".join(ENGINES) + "]",
            autocompletion=complete_engines,
            rich_help_panel=DEPLOYMENT_PANEL,
            help="simple: the budget formula; vllm: vLLM 0.19's exact block count; "
            "sglang: SGLang's token pool (0.4.0-0.5.18)",
        ),
    ),
}
assert set(_ENGINE_PARAMETERS) == set(EngineChoice._fields)


def engine_options(command: F) -> F:
    """Add ``--engine`` and SGLang's options to ``command``, which receives them as ``engine``
    (an :class:`EngineChoice`) and ``sglang``."""
    return sglang_options(grouped_options(command, "engine", EngineChoice, _ENGINE_PARAMETERS))


def vllm_start(dep: Deployment, max_model_len: int) -> VLLMKVCache | KVCacheTooSmall:
    """vLLM started with ``--max-model-len``; a setting vLLM rejects fails with its one line."""
    from kvcalc.engine.vllm import VLLMConfigError, vllm_kv_cache_for

    try:
        return vllm_kv_cache_for(dep, max_model_len)
    except VLLMConfigError as exc:
        fail(str(exc))


def sglang_start(dep: Deployment, flags: SGLangFlags) -> SGLangPool | SGLangPoolTooSmall:
    """SGLang's token pool with ``flags``; a setting SGLang rejects fails with its one line."""
    from kvcalc.engine.sglang import SGLangConfigError, sglang_pool

    try:
        return sglang_pool(dep, flags.options())
    except SGLangConfigError as exc:
        fail(str(exc))
