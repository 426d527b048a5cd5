"""The deployment's inputs, each declared once: its name, unit, default, bounds, help and which
engines take it. The command line's options (:mod:`kvcalc.cli.deploy`), the spec file's keys
(:mod:`kvcalc.registry.check_spec`), the range a value is held to and the errors naming an
input all come from these declarations; adding an input is one entry here (or, for an input
only one serving engine reads, one entry in that engine's ``inputs``).

Pure data, cheap to import: every command with deployment options reads it at start-up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from kvcalc.errors import literal

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.eviction import Eviction
    from kvcalc.engine.hardware import GpuSet
    from kvcalc.engine.kvformat import KVFormat
    from kvcalc.engine.serving.base import InputRefusal, ServingEngine
    from kvcalc.engine.spec import ModelSpec

#: How an input's value is written and read. ``bytes``: a size with its unit (``80GB``; with
#: ``bare_unit``, a bare number is read in it); ``tokens``: a token count (``8k``), ``context``
#: one context length read as ``--ctx`` reads it, ``contexts`` one or several (``8k,32k``, a
#: range), read by the command; ``count``: a whole number; ``fraction``: a share such as 0.9;
#: ``text``: a name; ``path``: a file or directory; ``flag``: on or off.
Unit = Literal[
    "bytes", "tokens", "context", "contexts", "count", "fraction", "text", "path", "flag"
]

#: The largest token count an input takes unless it says otherwise (the longest context).
MAX_TOKENS = 1 << 30

DEPLOYMENT = "Deployment"
KV_FORMAT = "KV cache format"


# A NamedTuple: several times cheaper to create at start-up than a frozen dataclass.
class Input(NamedTuple):
    """One input of a deployment or a command."""

    name: str
    """The field: the spec file's key and the API's keyword (``kv_memory``)."""
    unit: Unit
    help: str
    default: Any = None
    """The value when it is not given (None: not given, the engine's default applies)."""
    minimum: float | None = None
    maximum: float | None = None
    engine: str | None = None
    """The one engine that reads it (None: every engine that does not refuse it)."""
    panel: str = DEPLOYMENT
    """Where the command line's help lists it."""
    option: str | None = None
    """The command line's spelling when it is not the field's (``weights_total``)."""
    short: str | None = None
    metavar: str | None = None
    completion: str | None = None
    """The values the shell completes (``gpu_sets``, ``weight_dtypes``, ``kv_dtypes``)."""
    bare_unit: str | None = None
    repeatable: bool = False
    """Given once per value (``--tier A --tier B``): its value is a list."""
    aliases: tuple[str, ...] = ()
    """Other spellings the command line takes (vLLM's ``--kv-cache-memory`` for
    ``--kv-memory``); errors name the input by :attr:`flag`."""

    @property
    def flag(self) -> str:
        """The command line's option: ``--kv-memory``."""
        return self.option or "--" + self.name.replace("_", "-")

    def bounds(self) -> tuple[float | None, float | None]:
        """The (min, max) a value is held to, on the command line and in a spec file alike."""
        if self.unit == "tokens":
            return (1 if self.minimum is None else self.minimum), self.maximum or MAX_TOKENS
        return self.minimum, self.maximum

    def given(self, value: Any) -> bool:
        """Whether ``value`` gives the input (not None, not its default)."""
        return value is not None and value != self.default


def _tokens(name: str, help: str, **settings: Any) -> Input:
    return Input(name, "tokens", help, **settings)


#: --gpus: the GPUs of every deployment (its help names the forms it takes).
GPUS_HELP = "COUNTxGPU, e.g. 8xH100 (also H100x8, h100:8, 8*h100), 4xMI300X, or h200 for one"

#: The inputs every engine is asked about, in the order of the command line's help.
DEPLOYMENT_INPUTS: tuple[Input, ...] = (
    Input("gpus", "text", GPUS_HELP, short="-g", metavar="COUNTxGPU", completion="gpu_sets"),
    Input(
        "tp", "count",
        "tensor parallel [default: the largest that splits the heads in one node]",
        minimum=1, maximum=4096,
    ),
    Input("pp", "count", "pipeline parallel stages", default=1, minimum=1, maximum=1024),
    Input(
        "nodes", "count",
        "nodes the GPUs are spread over: a TP group or pipeline across nodes crosses the "
        "network [default: as many as the GPU's node size needs]",
        minimum=1, maximum=100_000,
    ),
    Input(
        "internode", "text",
        "each GPU's inter-node network, e.g. 400Gb/s or 50GB/s [default: 400Gb/s]",
        metavar="RATE",
    ),
    Input(
        "gpu_util", "fraction",
        "share of GPU memory the engine takes [default: 0.9; vLLM: the release's, 0.9, "
        "0.92 from 0.20, 1.0 from 0.34]",
        aliases=("--gpu-memory-utilization",),
    ),
    Input(
        "reserve", "fraction", "instead of --gpu-util/--overhead: fraction of memory reserved"
    ),
    Input(
        "overhead", "bytes", "runtime overhead per GPU, e.g. 5GiB [default: estimated]",
        metavar="SIZE",
    ),
    Input(
        "gpu_memory", "bytes", "memory per GPU, e.g. 80GB [default: the GPU's]", metavar="SIZE"
    ),
    Input(
        "weights", "bytes", "total weight bytes, e.g. 140GB [default: from the model]",
        metavar="SIZE",
    ),
    Input(
        "kv_memory", "bytes",
        "KV budget per GPU directly, e.g. 52GiB [default: what the memory leaves]",
        metavar="SIZE", aliases=("--kv-cache-memory",),
    ),
    Input(
        "weight_dtype", "text",
        "bf16, fp16, fp8, int8, int4, fp8-block, mxfp4, nvfp4, int4-g128, int4-g32 "
        "[default: as released]",
        metavar="DTYPE", completion="weight_dtypes",
    ),
    Input(
        "kv_dtype", "text",
        "KV cache format: fp32, bf16, fp16, fp8, int8, int4, int2, nvfp4, mxfp4, "
        "fp8_per_token_head, int8_per_token_head, kivi2, kivi4 [default: the model's dtype]",
        panel=KV_FORMAT, metavar="DTYPE", completion="kv_dtypes",
    ),
    Input(
        "kv_group", "count",
        "quantised KV: values per scale (KIVI: tokens per key scale) "
        "[default: per format; KIVI: 32]",
        minimum=1, maximum=1 << 20, panel=KV_FORMAT,
    ),
    Input(
        "kv_scale_dtype", "text",
        "quantised KV: scale (and zero-point) dtype, fp16, bf16, fp32, fp8 or e8m0 "
        "[default: fp16]",
        panel=KV_FORMAT, metavar="DTYPE",
    ),
    Input(
        "kv_zero_point", "flag", "quantised KV: asymmetric, a zero point per scale",
        default=False, panel=KV_FORMAT,
    ),
    Input(
        "kv_quant", "text", "KV quantiser: kivi (with --kv-bits, --kv-residual)",
        panel=KV_FORMAT, metavar="NAME",
    ),
    Input("kv_bits", "count", "KIVI: bits per value, 2 or 4 [default: 2]", panel=KV_FORMAT),
    _tokens(
        "kv_residual", "KIVI: most recent tokens kept at full precision [default: 128]",
        minimum=0, panel=KV_FORMAT,
    ),
    # No default: a given 16 is given (vLLM keeps it); not given, vLLM pages at its attention
    # backend's block (kvcalc.engine.vllm_backends) and the other engines at 16.
    _tokens(
        "block_size", "tokens per KV block [default: 16; vLLM: its attention backend's]",
        maximum=65536,
    ),
    _tokens(
        "prefix_shared", "prompt-prefix tokens shared by all sequences", default=0, minimum=0
    ),
    Input(
        "calibration", "path",
        "calibration.yaml from `kvcalc calibrate LOG --write`: the start-up's measured terms "
        "in place of kvcalc's estimates (same GPU, model, engine)",
        metavar="FILE",
    ),
    _tokens(
        "max_num_batched_tokens",
        "scheduler step: sizes the activation estimate (and vLLM's window charge) "
        "[default: 8192; vLLM: vllm serve's for the GPU and release, 8192; 2048 on A100s, "
        "GB10 and GPUs under 70 GiB; 16384 on GPUs of 160 GiB or more from 0.28; at least "
        "2496 for a Gemma 4 that is a multimodal prefix LM, from 0.22]",
        maximum=1 << 24, panel="vLLM engine",
    ),
)

#: The KV format's inputs (the ones `kvcalc size` takes as well).
KV_FORMAT_INPUTS = tuple(i for i in DEPLOYMENT_INPUTS if i.panel == KV_FORMAT)


def engine_inputs() -> tuple[Input, ...]:
    """Every serving engine's own inputs, each engine's in the order it declares them."""
    from kvcalc.engine.serving import engines

    return tuple(i for engine in engines() for i in engine.inputs)


def all_inputs() -> dict[str, Input]:
    """Every input by name: the deployment's, then the engines' own."""
    return {i.name: i for i in (*DEPLOYMENT_INPUTS, *engine_inputs())}


# ------------------------------------------------------------------ reading a value


def refused(inp: Input, reason: str) -> InputRefusal:
    """``inp`` refused for ``reason`` (literal text), the field named by each front end."""
    from kvcalc.engine.serving.base import InputRefusal

    return InputRefusal("{" + inp.name + "}: " + literal(reason),
                        inp.name)


def no_value(inp: Input, raw: Any, required: bool = False) -> InputRefusal | None:
    """The refusal of ``raw`` when it is blank text (``--engine ''``, ``--ctx ''``; for a
    repeatable input, any of its values), else None. Given, a blank is no value: read as "not
    given", it would apply the default while the caller asked for something, so every front
    end refuses it, as a spec file refuses a key with no value. ``required``: the input has no
    default to fall back on (batch's --gpus), so leaving it out is no fix."""
    values = raw if isinstance(raw, (list, tuple)) else (raw,)
    if not any(isinstance(v, str) and not v.strip() for v in values):
        return None
    # Only now: every option is checked at start-up, which must not load the engines.
    from kvcalc.engine.serving.base import InputRefusal

    field = "{" + inp.name + "}"
    fix = "give one" if required else f"give one or leave {field} out"
    return InputRefusal(f"{field}: no value; {fix}", inp.name)


def read_value(inp: Input, raw: Any) -> Any:
    """``raw`` (as typed or as a spec file gives it) as the engine reads ``inp``: sizes in bytes,
    token counts and contexts in tokens, fractions as floats; a value it cannot take raises
    :class:`~kvcalc.engine.serving.base.InputRefusal` naming the field."""
    from kvcalc.engine.units import BareBytesError, UnitError, parse_bytes

    if raw is None:
        return None
    blank = no_value(inp, raw)
    if blank is not None:
        raise blank
    try:
        if inp.unit == "bytes":
            text = str(raw)
            if inp.bare_unit is not None and _is_number(text):
                text = f"{text.strip()}{inp.bare_unit}"
            return parse_bytes(text)
        if inp.unit == "context":
            return _one_context(str(raw))
        if inp.unit == "tokens" and not isinstance(raw, int):
            from kvcalc.engine.units import parse_tokens

            low, high = inp.bounds()
            return parse_tokens(str(raw), int(low or 0), int(high or MAX_TOKENS),
                                what="token count")
    except BareBytesError as exc:
        # weights 140B is most likely the parameter count, which the model already has.
        hint = "; or leave {weights} out: kvcalc sizes the weights from the model" * (
            inp.name == "weights"
        )
        raise _with_hint(inp, str(exc), hint) from None
    except UnitError as exc:
        raise refused(inp, str(exc)) from None
    return raw


def _with_hint(inp: Input, reason: str, hint: str) -> InputRefusal:
    from kvcalc.engine.serving.base import InputRefusal

    return InputRefusal(
        "{" + inp.name + "}: " + literal(reason) + hint,
        inp.name,
    )


def _is_number(text: str) -> bool:
    try:
        float(text.strip())
    except ValueError:
        return False
    return True


def _one_context(text: str) -> int:
    """One context as ``--ctx`` reads it (a list of them is refused)."""
    from kvcalc.engine.units import UnitError, parse_context_list

    lengths = parse_context_list(text)
    if len(lengths) != 1:
        raise UnitError("give one length, e.g. 32k")
    return lengths[0]


def read_values(given: Mapping[str, Any]) -> dict[str, Any]:
    """Every input given, read (:func:`read_value`); inputs not declared pass as they are."""
    declared = all_inputs()
    return {
        name: read_value(declared[name], raw) if name in declared else raw
        for name, raw in given.items()
    }


# ------------------------------------------------------------------ building a deployment


def deployment_from(
    model: ModelSpec,
    gpus: GpuSet,
    given: Mapping[str, Any],
    *,
    engine: ServingEngine | None = None,
    eviction: Eviction | None = None,
    kv_format: Callable[[ModelSpec], KVFormat] | None = None,
) -> Deployment:
    """The deployment the inputs ``given`` (raw values by field name, only those given: sizes
    as text such as ``80GB``) describe for ``model`` on ``gpus``, served by ``engine`` (None:
    the budget formula), keeping the tokens ``eviction`` keeps (None: every token), its KV
    format from ``kv_format`` (None: from the KV inputs given).

    An input the engine does not read, or a value it cannot take, raises
    :class:`~kvcalc.engine.serving.base.InputRefusal`; a deployment that cannot be built, a
    :class:`~kvcalc.engine.deployment.DeploymentError`: both name the fields at fault."""
    from kvcalc.engine.deployment import deployment
    from kvcalc.engine.eviction import KEEP_ALL
    from kvcalc.engine.serving import DEFAULT_ENGINE, check_inputs, engine_named

    engine = engine or engine_named(DEFAULT_ENGINE)
    check_inputs(engine, given)
    engine.check_model(model, given)
    # Only the deployment's own inputs are read here: no need to load every engine's.
    values = {k: read_value(_DEPLOYMENT[k], v) for k, v in given.items() if k in _DEPLOYMENT}
    sizes = {
        f"{field}_bytes": values.get(name)
        for name, field in (
            ("overhead", "overhead"),
            ("gpu_memory", "gpu_memory"),
            ("weights", "weights_total"),
            ("kv_memory", "kv_memory"),
        )
    }
    return deployment(
        model,
        gpus,
        tp=values.get("tp"),
        pp=values.get("pp", 1),
        weight_dtype=values.get("weight_dtype"),
        kv_dtype=(kv_format or _kv_format(values))(model),
        gpu_util=values.get("gpu_util"),
        reserve=values.get("reserve"),
        block_size=values.get("block_size"),  # None: the engine's default block
        prefix_shared_tokens=values.get("prefix_shared", _DEFAULTS["prefix_shared"]),
        max_num_batched_tokens=values.get("max_num_batched_tokens"),
        eviction=eviction or KEEP_ALL,
        nodes=values.get("nodes"),
        internode_bytes_per_s=_internode(values.get("internode")),
        **sizes,
    )


def _internode(text: str | None) -> int | None:
    """``--internode`` in bytes per second (None: not given)."""
    from kvcalc.engine.units import UnitError, parse_rate

    if text is None:
        return None
    try:
        return parse_rate(str(text))
    except UnitError as exc:
        raise refused(_DEPLOYMENT["internode"], str(exc)) from None


_DEPLOYMENT = {i.name: i for i in DEPLOYMENT_INPUTS}
_DEFAULTS = {i.name: i.default for i in DEPLOYMENT_INPUTS}


def _kv_format(values: Mapping[str, Any]) -> Callable[[ModelSpec], KVFormat]:
    """The KV format the KV inputs given ask for, for a model (its dtype when none is)."""
    from kvcalc.engine.kvformat import KVFormatRequest, check_stores, kv_format

    request = KVFormatRequest(
        dtype=values.get("kv_dtype"),
        group=values.get("kv_group"),
        scale_dtype=values.get("kv_scale_dtype"),
        zero_point=bool(values.get("kv_zero_point")),
        quant=values.get("kv_quant"),
        bits=values.get("kv_bits"),
        residual=values.get("kv_residual"),
    )

    def for_model(model: ModelSpec) -> KVFormat:
        fmt = kv_format(request, model.default_dtype, model.kv_default)
        check_stores(fmt, model)
        return fmt

    return for_model


def engine_options_from(engine: ServingEngine, given: Mapping[str, Any]) -> Any:
    """``engine``'s own options from their raw values (by field name, only those given)."""
    return engine.engine_options(read_values(given))
