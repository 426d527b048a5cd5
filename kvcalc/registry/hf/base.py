"""The shared base of the config.json importers: validated configs, error lines, adapters.

A family's config is a pydantic model whose field defaults are its transformers configuration
class defaults, so a key the sparse config.json omits takes the value transformers would give it.
An adapter turns one validated config into the ``architecture`` mapping of a registry file
(:class:`kvcalc.registry.schema.Architecture`); families override the methods that differ
(layer kinds, mixers, feed-forward) instead of branching on model_type.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    ClassVar,
    Generic,
    Literal,
    NoReturn,
    TypeVar,
    cast,
)

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from kvcalc.registry.load import RegistryError

if TYPE_CHECKING:
    from kvcalc.engine.checkpoint import CheckpointFormat
from kvcalc.registry.schema import MAX_LAYERS  # more than any model has: per-layer lists stay small

#: torch dtype names in config.json -> kvcalc dtype names.
TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}

# Strictness comes from the model config (strict=True): a bool is not an int, "4096" is not an
# int, and null is accepted only where a field's type says ``| None``.
PosInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]
LayerCount = Annotated[int, Field(ge=1, le=MAX_LAYERS)]


def _torch_dtype(value: Any) -> Any:
    if value is not None and not (isinstance(value, str) and value in TORCH_DTYPES):
        raise PydanticCustomError(
            "dtype",
            "unsupported dtype {value}; expected one of {expected}",
            {"value": repr(value), "expected": ", ".join(TORCH_DTYPES)},
        )
    return value


TorchDtype = Annotated[str | None, BeforeValidator(_torch_dtype)]


def experts_field(default: int, *keys: str) -> Any:
    """A field read under the first of several keys the file uses: the families disagree on
    the name of the routed-expert count (num_experts, num_local_experts, n_routed_experts)."""
    return Field(default, validation_alias=AliasChoices(*keys))


def field_error(field: str, problem: str) -> PydanticCustomError:
    """A cross-field error from a model validator, carrying the field it is about (a model
    validator's own location is the whole object)."""
    return PydanticCustomError("field", problem, {"field": field})


# ---------------------------------------------------------------- validated configs


class HFConfig(BaseModel):
    """Any config object of a config.json: unknown keys (rope_scaling, architectures, ...) are
    ignored, the keys read here are strictly typed."""

    # allow_inf_nan=False: a float the sizing reads must be finite (JSON's Infinity and NaN
    # are accepted only in keys no field declares).
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True, allow_inf_nan=False)

    # PretrainedConfig: ``dtype`` since transformers 4.56, ``torch_dtype`` before.
    dtype: TorchDtype = None
    torch_dtype: TorchDtype = None

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """The class defaults by config.json key, as transformers fills an omitted key."""
        return {name: info.default for name, info in cls.model_fields.items()}

    def stated_dtype(self) -> str | None:
        """The kvcalc dtype this object states (``dtype`` wins over ``torch_dtype``), if any."""
        value = self.dtype or self.torch_dtype
        return TORCH_DTYPES[value] if value else None


class TextConfig(HFConfig):
    """The keys every language model's config has. Families redeclare each with their class
    default; none here, so a default a family forgot is a required key (tests catch that)."""

    #: Keys a top-level config.json may omit and still size its model: the family documents
    #: the value (see :func:`kvcalc.registry.hf.importer.defaults_taken`). tie_word_embeddings
    #: is a base PretrainedConfig key, which save_pretrained drops when it equals the base
    #: default (true). Every other key a formula reads, when absent, is refused: the class
    #: defaults are some other model's (LlamaConfig's 32 layers are Llama-7B's).
    documented_defaults: ClassVar[frozenset[str]] = frozenset({"tie_word_embeddings"})

    vocab_size: PosInt
    hidden_size: PosInt
    num_hidden_layers: LayerCount
    num_attention_heads: PosInt
    max_position_embeddings: PosInt
    tie_word_embeddings: bool

    @model_validator(mode="after")
    def _one_layer_type_per_layer(self) -> TextConfig:
        # layer_types is declared by the families whose layers state their kind (attention
        # kinds, DeepSeek-V3.2's indexed layers), each with its own entries; where it is
        # declared, it has one entry per layer.
        layer_types = getattr(self, "layer_types", None)
        if layer_types is not None and len(layer_types) != self.num_hidden_layers:
            raise field_error(
                "layer_types", f"must be a list of {self.num_hidden_layers} entries, one per layer"
            )
        return self


AttentionLayerType = Literal["full_attention", "sliding_attention", "chunked_attention"]


class AttentionConfig(TextConfig):
    """A softmax-attention model whose layers may state their kind (``layer_types``, None in
    every transformers class: the class derives it)."""

    layer_types: list[AttentionLayerType] | None = None


class DecoderConfig(AttentionConfig):
    """The Llama-style decoder: grouped KV heads and a dense MLP of intermediate_size."""

    intermediate_size: PosInt
    # None: as many KV heads as query heads; head_dim None: hidden_size // num_attention_heads
    # (what the modeling code does when the config carries none).
    num_key_value_heads: PosInt | None
    head_dim: PosInt | None


class WindowConfig(DecoderConfig):
    """A decoder with sliding-window layers; a null window makes them full attention."""

    sliding_window: PosInt | None


# ---------------------------------------------------------------- errors

H = TypeVar("H", bound=HFConfig)


@dataclass(frozen=True)
class Where:
    """Where a config object sits: the file, and the key path of a nested one ("text_config.")."""

    path: Path
    prefix: str = ""

    def fail(self, field: str, problem: str) -> NoReturn:
        raise RegistryError(f"{self.path}: {self.prefix}{field}: {problem}")

    def nested(self, key: str) -> Where:
        return Where(self.path, f"{self.prefix}{key}.")

    def parse(self, schema: type[H], data: dict[str, Any]) -> H:
        """``data`` validated by ``schema``; the first error as one line naming file and field."""
        try:
            return schema.model_validate(data)
        except ValidationError as exc:
            errors = exc.errors()
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            self.fail(_location(errors[0]), _problem(errors[0]) + more)


def non_finite_problem(value: float) -> str:
    """The refusal of JSON's Infinity / -Infinity / NaN in a field a formula reads."""
    return (
        f"must be a finite number, got {value!r}: kvcalc reads this field to size the model "
        "(Infinity and NaN are accepted only in fields it does not read)"
    )


def _location(error: ErrorDetails) -> str:
    ctx = error.get("ctx") or {}
    if not error["loc"] and "field" in ctx:
        return str(ctx["field"])
    out = ""
    for part in error["loc"]:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out or "(top level)"


def _problem(error: ErrorDetails) -> str:
    """Pydantic's error in the importer's words: the rule broken and the value found."""
    kind, value, ctx = error["type"], error["input"], error.get("ctx") or {}
    if kind == "missing":
        return "missing required field"
    if isinstance(value, float) and not math.isfinite(value):
        return non_finite_problem(value)
    expected = {
        "int_type": "an integer",
        "bool_type": "true or false",
        "list_type": "a list",
        "dict_type": "a JSON object",
        "model_type": "a JSON object",
        "string_type": "a string",
    }.get(kind)
    if expected is not None:
        return (
            f"must be {expected}, not null"
            if value is None
            else f"must be {expected}, got {value!r}"
        )
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']}, got {value}"
    if kind == "less_than_equal":
        return f"must be at most {ctx['le']:,}, got {value:,}"
    if kind == "literal_error":
        return f"unsupported entry {value!r}; expected {ctx['expected']}"
    return error["msg"]  # our own PydanticCustomError messages are already in these words


# ---------------------------------------------------------------- helpers


Mixers = tuple[dict[str, dict[str, Any]], list[str]]
"""Registry mixer definitions by name, and the mixer name of every layer."""

MoEFlags = tuple[dict[str, Any] | None, list[bool]]
"""An MoE block (registry schema fields, layout excluded) and, per layer, whether it is MoE."""


def shortest_cycle(names: list[str]) -> list[str]:
    """The shortest prefix that, repeated, gives ``names`` (the whole list if none does)."""
    for period in range(1, len(names) + 1):
        if all(names[i] == names[i % period] for i in range(len(names))):
            return names[:period]
    return names


def moe_layout(flags: list[bool]) -> dict[str, int] | None:
    """first_dense_layers / period / offset reproducing the MoE layers exactly, else None."""
    moe_at = [i for i, f in enumerate(flags) if f]
    if not moe_at:
        return None
    first = moe_at[0]
    period = moe_at[1] - first if len(moe_at) > 1 else len(flags)
    offset = first % period
    layout = {
        "first_dense_layers": 0 if first < period else first,
        "period": period,
        "offset": offset,
    }
    expected = [
        i >= layout["first_dense_layers"] and (i - offset) % period == 0 for i in range(len(flags))
    ]
    return layout if expected == flags else None


def routed_experts(experts: int, per_token: int, size: int) -> dict[str, Any]:
    return {"experts": experts, "experts_per_token": per_token, "intermediate_size": size}


def moe_on_every_layer(experts: int, per_token: int, size: int, n: int) -> MoEFlags:
    """Mixtral and gpt-oss: every layer routes over experts of intermediate_size."""
    return routed_experts(experts, per_token, size), [True] * n


def every_nth(n: int, every: int) -> list[bool]:
    """Per layer: whether it is an every-th one (layers every-1, 2*every-1, ...), the 1-based
    ``(i + 1) % every == 0`` rule the transformers classes use for their interleavings."""
    return [(i + 1) % every == 0 for i in range(n)]


# ---------------------------------------------------------------- adapters


#: Defaults that are rules deriving the value from stated keys, not values: None (head_dim:
#: hidden_size / heads; num_key_value_heads: the query heads) and "auto" (Jamba's mamba_dt_rank:
#: hidden_size / 16; Granite's mamba_d_head: the inner width / heads).
DERIVED = (None, "auto")


class FieldReads:
    """A validated config that records which of its fields are read, so the importer knows
    which defaults a figure rests on (a field no formula reads may take any default)."""

    def __init__(self, config: TextConfig) -> None:
        self.target = config
        self.read: dict[str, None] = {}  # in the order first read

    def __getattr__(self, name: str) -> Any:
        if name in type(self.target).model_fields:
            self.read.setdefault(name)
        return getattr(self.target, name)

    def defaulted(self) -> list[str]:
        """The fields read that the file does not state, and whose default is a value (a
        :data:`DERIVED` default is a derivation rule: head_dim None is hidden_size / heads)."""
        fields = type(self.target).model_fields
        stated = self.target.model_fields_set
        return [n for n in self.read if n not in stated and fields[n].default not in DERIVED]



C = TypeVar("C", bound=TextConfig)
A = TypeVar("A", bound=AttentionConfig)
D = TypeVar("D", bound=DecoderConfig)
W = TypeVar("W", bound=WindowConfig)


class Adapter(ABC, Generic[C]):
    """One model_type family: its validated config in, the registry architecture mapping out."""

    #: The config.json model_type values this adapter reads (they share one config class).
    model_types: ClassVar[tuple[str, ...]]
    #: The pydantic model holding the family's transformers defaults.
    config_class: ClassVar[type[TextConfig]]
    #: The registry ``family`` when the model_type does not spell it (see :meth:`family_of`).
    family: ClassVar[str | None] = None

    @classmethod
    def family_of(cls, model_type: str) -> str:
        """The registry family of a config: the adapter's own, else the letters its model_type
        starts with (qwen3_moe -> qwen, gemma3 -> gemma, kimi_vl -> kimi)."""
        if cls.family:
            return cls.family
        letters = re.match(r"[a-z]+", model_type.lower())
        return letters.group(0) if letters else model_type.lower()

    def __init__(self, config: C, where: Where) -> None:
        self.reads = FieldReads(config)
        # Typed as the config itself: the adapter reads fields through the recorder.
        self.config = cast(C, self.reads)
        self.where = where

    def fail(self, field: str, problem: str) -> NoReturn:
        self.where.fail(field, problem)

    @property
    def num_layers(self) -> int:
        return self.config.num_hidden_layers

    @abstractmethod
    def mixers(self) -> Mixers:
        """The sequence mixers, by name, and which one each layer uses."""

    @abstractmethod
    def dense_mlp(self) -> dict[str, Any]:
        """The dense feed-forward block (registry ``mlp`` fields)."""

    def moe_flags(self) -> MoEFlags:
        """The MoE block and which layers use it; a dense model has none."""
        return None, [False] * self.num_layers

    def irregular_moe_field(self) -> str:
        """The key to blame when the MoE layers form no pattern kvcalc can represent. Only a
        family that lists its MoE (or dense) layers can get there; it overrides this."""
        return "num_hidden_layers"

    def feed_forward(self) -> dict[str, Any]:
        moe, flags = self.moe_flags()
        if moe is None or not any(flags):
            return {"mlp": self.dense_mlp()}
        layout = moe_layout(flags)
        if layout is None:
            self.fail(
                self.irregular_moe_field(),
                "this set of MoE layers is not a regular pattern kvcalc can represent",
            )
        out: dict[str, Any] = {"moe": moe | layout}
        if not all(flags):
            out["mlp"] = self.dense_mlp()
        return out

    def architecture(self, tied_embeddings: bool) -> dict[str, Any]:
        """The ``architecture`` mapping of a registry file. The tie flag comes from outside: a
        multimodal wrapper's lm_head may follow the wrapper's flag, not the text config's."""
        mixers, names = self.mixers()
        return {
            "hidden_size": self.config.hidden_size,
            "num_layers": self.num_layers,
            "vocab_size": self.config.vocab_size,
            "tied_embeddings": tied_embeddings,
            "num_attention_heads": self.config.num_attention_heads,
            "mixers": mixers,
            "pattern": shortest_cycle(names),
            **self.feed_forward(),
        }

    def released_checkpoint(self, stated: CheckpointFormat | None) -> CheckpointFormat | None:
        """The released weight format, given what the quantization_config states: that, for
        most families (DeepSeek-V4 adds its FP4 experts)."""
        return stated

    def derived_head_dim(self) -> int:
        hidden, heads = self.config.hidden_size, self.config.num_attention_heads
        if hidden % heads:
            self.fail(
                "head_dim", f"absent, and hidden_size {hidden} is not divisible by {heads} heads"
            )
        return hidden // heads


class AttentionAdapter(Adapter[A]):
    """Softmax attention on every layer; each layer full, sliding-window or chunked."""

    @abstractmethod
    def kv_heads(self) -> int: ...

    @abstractmethod
    def head_dim(self) -> int: ...

    def attention_shape(self) -> dict[str, int]:
        """KV heads and head dim of an attention layer, as the modeling code derives them."""
        return {"kv_heads": self.kv_heads(), "head_dim": self.head_dim()}

    def hybrid_mixers(
        self,
        names: list[str],
        attention: str,
        recurrent: str,
        recurrent_mixer: Callable[[], dict[str, Any]],
    ) -> Mixers:
        """The mixers of a hybrid whose layers are named ``attention`` (full attention) or
        ``recurrent``, attention first. Each is built only when some layer uses it: a model
        without a kind of layer need not state sound keys for it."""
        mixers: dict[str, dict[str, Any]] = {}
        if attention in names:
            mixers[attention] = {"kind": "full", **self.attention_shape()}
        if recurrent in names:
            mixers[recurrent] = recurrent_mixer()
        return mixers, names

    def default_layer_kinds(self) -> list[str]:
        """Per layer full/sliding/chunked when the config states no layer_types: what the
        configuration class derives."""
        return ["full"] * self.num_layers

    def layer_kinds(self) -> list[str]:
        explicit = self.config.layer_types
        if explicit is None:
            return self.default_layer_kinds()
        return [kind.removesuffix("_attention") for kind in explicit]

    def sliding_window(self) -> int | None:
        """The window of sliding layers; None: they attend to everything."""
        return None

    def attention_chunk(self) -> int | None:
        """The chunk of chunked layers; None: they attend to everything."""
        return None

    def mixers(self) -> Mixers:
        kinds = self.layer_kinds()
        shape = self.attention_shape()
        window = self.sliding_window() if "sliding" in kinds else None
        chunk = self.attention_chunk() if "chunked" in kinds else None
        mixers: dict[str, dict[str, Any]] = {}
        names: list[str] = []
        for kind in kinds:
            # A sliding or chunked layer without a size attends to everything, as in transformers.
            if kind == "sliding" and window is not None:
                mixers["sliding"] = {"kind": "sliding", **shape, "window": window}
            elif kind == "chunked" and chunk is not None:
                mixers["chunked"] = {"kind": "chunked", **shape, "chunk": chunk}
            else:
                kind = "full"
                mixers["full"] = {"kind": "full", **shape}
            names.append(kind)
        return mixers, names


class DecoderAdapter(AttentionAdapter[D]):
    """The Llama-style decoder: KV heads and head_dim as stated or derived, a gated MLP."""

    #: SwiGLU/GeGLU (gate, up, down); Phi-1/2 use an ungated fc1/fc2 MLP.
    gated_mlp: ClassVar[bool] = True

    def kv_heads(self) -> int:
        return self.config.num_key_value_heads or self.config.num_attention_heads

    def head_dim(self) -> int:
        return self.config.head_dim or self.derived_head_dim()

    def dense_mlp(self) -> dict[str, Any]:
        return {"intermediate_size": self.config.intermediate_size, "gated": self.gated_mlp}


class WindowAdapter(DecoderAdapter[W]):
    """A decoder whose sliding layers use the config's sliding_window."""

    def sliding_window(self) -> int | None:
        return self.config.sliding_window


class UniformWindowAdapter(WindowAdapter[W]):
    """Mistral, Mixtral, Phi-3: one window on every layer (None: no window)."""

    def default_layer_kinds(self) -> list[str]:
        return ["sliding"] * self.num_layers
