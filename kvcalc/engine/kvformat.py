"""KV-cache formats: the bytes that N tokens of one layer's keys and values occupy.

A format is more than a dtype. A quantised cache stores, beside its low-bit values, one scale per
group of values (and, when asymmetric, a zero point of the same dtype), and KIVI keeps the most
recent tokens at full precision, so its bytes are not even linear in the tokens. Each kind of
format is one type with its formula:

- :class:`LinearKV`: every token stored alike, with optional per-group or per-head scales (the
  plain dtypes, int4 with groups, nvfp4, mxfp4, vLLM's per-token-head fp8/int8);
- :class:`~kvcalc.engine.kivi.KiviKV`: KIVI (Liu et al., 2024; seed 004 "KIVI"): keys quantised
  per channel over groups of G tokens, values per token over groups of G channels, the R most
  recent tokens in full precision (its own module, loaded when a KIVI format is asked for).

Every engine (capacity, vLLM, SGLang, the decode step's KV read) sizes a layer through
:meth:`KVFormat.tokens_bytes`. :meth:`KVFormat.token_bytes` is the per-token figure: exact for a
linear format, the long-context slope for KIVI. A per-tensor scale (vLLM's default fp8: one
float per layer) is a few bytes per layer, not per token, and is not counted.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING

from kvcalc.engine.units import KV_DTYPES, DType, UnitError, dtype, shown
from kvcalc.errors import literal

if TYPE_CHECKING:
    from kvcalc.engine.kivi import KiviKV
    from kvcalc.engine.spec import Mixer, ModelSpec


class KVFormatError(UnitError):
    """A format that cannot be built, or cannot store a model's cache; names the option at
    fault (``--kv-group``, ...) so that the CLI reports it as one line. ``message`` may name
    other KV inputs as ``{kv_quant}`` (literal braces doubled: :func:`literal`); ``fields`` are
    the inputs named, the one at fault first, and :meth:`worded` spells them as a front end
    does (``--kv-quant``, ``kv_quant``)."""

    def __init__(self, option: str, message: str) -> None:
        import string

        self.option = option
        field = option.removeprefix("--").replace("-", "_")
        named = (f for _, f, _, _ in string.Formatter().parse(message) if f)
        fields = tuple(dict.fromkeys((field, *named)))
        self.template = "{" + field + "}: " + message
        super().__init__(
            self.template.format_map({f: "--" + f.replace("_", "-") for f in fields}),
            fields=fields,
        )

    def worded(self, name: Callable[[str], str]) -> str:
        return self.template.format_map({f: name(f) for f in self.fields})


def ceil_bytes(bits: Fraction | int) -> int:
    """Whole bytes that hold ``bits`` bits."""
    bits = Fraction(bits)
    return -(-bits.numerator // (8 * bits.denominator))


class KVFormat(ABC):
    """How the keys and values (or an MLA latent) of one layer are stored."""

    name: str

    @property
    @abstractmethod
    def nominal_bits(self) -> Fraction:
        """Bits of each stored value, before any scale or full-precision part."""

    @property
    def linear(self) -> bool:
        """Whether N tokens take exactly N x :meth:`token_bytes` (paged engines need it)."""
        return True

    @abstractmethod
    def token_bits(self, mixer: Mixer) -> Fraction:
        """Bits one token adds to one layer of ``mixer`` at long context, scales included."""

    def token_bytes(self, mixer: Mixer) -> int:
        """Bytes one token adds to one layer (rounded up to whole bytes): exact for a linear
        format, the long-context slope otherwise."""
        return ceil_bytes(self.token_bits(mixer))

    @abstractmethod
    def tokens_bytes(self, mixer: Mixer, tokens: int) -> int:
        """Bytes that ``tokens`` tokens of one sequence occupy in one layer of ``mixer``."""

    def effective_bits(self, mixer: Mixer) -> Fraction | None:
        """Bits per stored value at long context, scales included (None: the layer caches no
        value per token)."""
        elements = mixer.cache_elements_per_token()
        return self.token_bits(mixer) / elements if elements else None

    def check(self, mixer: Mixer) -> None:
        """Raise :class:`KVFormatError` when the format cannot store ``mixer``'s cache (most
        formats store every kind; a kind with its own layouts says which it has)."""
        mixer.check_format(self)

    @property
    def precision_note(self) -> str | None:
        """What a reader of a per-token figure must know when bytes are not linear in tokens."""
        return None


@dataclass(frozen=True)
class LinearKV(KVFormat):
    """Values of ``element`` bits; when ``scale`` is set, one scale (two with ``zero_point``) per
    ``group`` values along each key/value vector, or per whole vector (one per token and head,
    vLLM's per-token-head modes) when ``group`` is None."""

    name: str
    element: DType
    scale: DType | None = None
    group: int | None = None
    zero_point: bool = False

    @property
    def nominal_bits(self) -> Fraction:
        return self.element.bits

    def metadata_bits(self) -> Fraction:
        """Bits of one group's scale and zero point."""
        if self.scale is None:
            return Fraction(0)
        return self.scale.bits * (2 if self.zero_point else 1)

    def scale_groups(self, mixer: Mixer) -> int:
        """Scale groups one token adds to one layer."""
        if self.scale is None:
            return 0
        group = self.group
        return sum(v.groups(group) if group else v.number for v in mixer.cache_vectors())

    def token_bits(self, mixer: Mixer) -> Fraction:
        if self.scale is None:
            return Fraction(8 * self.token_bytes(mixer))
        values = mixer.cache_elements_per_token() * self.element.bits
        return values + self.scale_groups(mixer) * self.metadata_bits()

    def token_bytes(self, mixer: Mixer) -> int:
        if self.scale is None:
            # The kind's own entry at this dtype: most kinds store every value alike, and a kind
            # with its own layout at a dtype (DeepSeek-V3.2's fp8_ds_mla latent) says so.
            return mixer.main_token_bytes(self.element)
        return super().token_bytes(mixer)

    def tokens_bytes(self, mixer: Mixer, tokens: int) -> int:
        # One token's entry is rounded up to whole bytes, then multiplied: engines address a
        # token's slot in a page by whole bytes.
        return tokens * self.token_bytes(mixer)


# --------------------------------------------------------------------------------------------
# Names and options

#: Scale (and zero-point) dtypes: e8m0 is the OCP microscaling exponent-only scale.
E8M0 = DType("e8m0", Fraction(8))
#: FP4 E2M1 values (NVFP4 and MXFP4).
E2M1 = DType("e2m1", Fraction(4))
SCALE_DTYPES = ("fp16", "bf16", "fp32", "fp8", "e8m0")
KIVI_BITS = (2, 4)


def scale_dtype(name: str) -> DType:
    if name.strip().lower() == "e8m0":
        return E8M0
    try:
        return dtype(name, SCALE_DTYPES)
    except UnitError:
        raise KVFormatError(
            "--kv-scale-dtype",
            f"unknown scale dtype {literal(repr(shown(name)))}; choose {', '.join(SCALE_DTYPES)}",
        ) from None


def _plain_preset(name: str) -> Callable[[DType], KVFormat]:
    d = dtype(name)
    return lambda _full: plain(d)


def _kivi_preset(bits: int) -> Callable[[DType], KVFormat]:
    def build(full: DType) -> KVFormat:
        from kvcalc.engine.kivi import kivi

        return kivi(bits, full)

    return build


def _presets() -> dict[str, Callable[[DType], KVFormat]]:
    """Format name -> the format, given the model's dtype (KIVI's full precision)."""
    fp32, fp8, int8 = dtype("fp32"), dtype("fp8"), dtype("int8")
    return {
        **{name: _plain_preset(name) for name in KV_DTYPES},
        # NVFP4: E2M1 values, one E4M3 scale per 16 (vLLM's packed layout; SGLang fp4_e2m1).
        "nvfp4": lambda _full: LinearKV("nvfp4", E2M1, fp8, 16),
        # MXFP4 (OCP microscaling): E2M1 values, one E8M0 scale per 32.
        "mxfp4": lambda _full: LinearKV("mxfp4", E2M1, E8M0, 32),
        # vLLM per_token_head: one fp32 scale per token, head and K/V (2 x kv_heads x 4 bytes).
        "fp8_per_token_head": lambda _full: LinearKV("fp8_per_token_head", fp8, fp32),
        "int8_per_token_head": lambda _full: LinearKV("int8_per_token_head", int8, fp32),
        **{f"kivi{b}": _kivi_preset(b) for b in KIVI_BITS},
    }


PRESETS = _presets()
#: Other names of a preset: vLLM's default fp8 keeps one scale per tensor; SGLang calls nvfp4
#: by its element type.
PRESET_ALIASES = {"fp8_per_tensor": "fp8", "fp4_e2m1": "nvfp4"}


class KVFormatRequest:
    """The options that pick a format, as given (None / False: not given). A plain class, not a
    dataclass: it is built once per command, and every dataclass costs start-up time."""

    def __init__(
        self,
        dtype: str | None = None,
        *,
        group: int | None = None,
        scale_dtype: str | None = None,
        zero_point: bool = False,
        quant: str | None = None,
        bits: int | None = None,
        residual: int | None = None,
    ) -> None:
        self.dtype = dtype
        self.group = group
        self.scale_dtype = scale_dtype
        self.zero_point = zero_point
        self.quant = quant
        self.bits = bits
        self.residual = residual


def kv_format(request: KVFormatRequest, model_dtype: str, default: str | None = None) -> KVFormat:
    """The format ``request`` names, for a model whose dtype (KIVI's full precision, and the
    default cache unless ``default`` names the one the engines store) is ``model_dtype``.
    Raises :class:`KVFormatError` naming the option."""
    full = dtype(model_dtype)
    for option, value in (("--kv-group", request.group), ("--kv-residual", request.residual)):
        if value is not None and value < (1 if option == "--kv-group" else 0):
            raise KVFormatError(option, f"{value} is not a valid count; give a positive number")
    if request.quant is not None:
        return _kivi_format(request, _quantiser(request, full))
    # None is "not given"; an empty name is refused like any unknown one, never the default.
    base = _preset((default or full.name) if request.dtype is None else request.dtype, full)
    if not isinstance(base, LinearKV):
        from kvcalc.engine.kivi import KiviKV

        assert isinstance(base, KiviKV)  # every preset is linear or KIVI
        if request.bits is not None:
            raise KVFormatError(
                "--kv-bits", f"{base.name} already names its bits; use {{kv_quant}} kivi"
            )
        return _kivi_format(request, base)
    for option, value in (("--kv-bits", request.bits), ("--kv-residual", request.residual)):
        if value is not None:
            raise KVFormatError(
                option, "applies to KIVI only ({kv_dtype} kivi2|kivi4 or {kv_quant} kivi)"
            )
    return _linear_format(request, base)


def _preset(name: str, full: DType) -> KVFormat:
    key = name.strip().lower()
    key = PRESET_ALIASES.get(key, key)
    try:
        key = dtype(key).name  # bfloat16 -> bf16, float8 -> fp8, ...
    except UnitError:
        pass
    if key not in PRESETS:
        raise KVFormatError(
            "--kv-dtype",
            f"unknown dtype {literal(repr(shown(name)))} for the KV cache; choose one of "
            f"{', '.join(PRESETS)}",
        )
    return PRESETS[key](full)


def _linear_format(request: KVFormatRequest, base: LinearKV) -> KVFormat:
    """``base`` refined by --kv-group, --kv-scale-dtype and --kv-zero-point."""
    fmt = base
    if request.group is not None:
        if base.element.bits >= 16:
            raise KVFormatError(
                "--kv-group",
                f"a {base.name} cache is not quantised and has no scales; pick a low-bit "
                "{kv_dtype} such as int4 or int8",
            )
        scale = scale_dtype(request.scale_dtype) if request.scale_dtype else None
        fmt = replace(fmt, group=request.group, scale=scale or base.scale or dtype("fp16"))
    elif request.scale_dtype is not None:
        if base.scale is None:
            raise KVFormatError(
                "--kv-scale-dtype",
                f"{base.name} stores no scales; add {{kv_group}} G (values per scale) or pick "
                "a scaled format such as nvfp4",
            )
        fmt = replace(fmt, scale=scale_dtype(request.scale_dtype))
    if request.zero_point:
        if fmt.scale is None:
            raise KVFormatError(
                "--kv-zero-point",
                f"{base.name} stores no scales to pair a zero point with; add {{kv_group}} G",
            )
        fmt = replace(fmt, zero_point=True)
    return fmt if fmt == base else replace(fmt, name=_linear_name(fmt, base))


def _linear_name(fmt: LinearKV, base: LinearKV) -> str:
    """``int4 g32 fp16+zero``: the element, the group (``head``: per token and head), the scale
    dtype, and ``+zero`` when asymmetric."""
    group = f"g{fmt.group}" if fmt.group else "per-head"
    scale = fmt.scale.name if fmt.scale else ""
    return f"{base.name} {group} {scale}{'+zero' if fmt.zero_point else ''}"


def _quantiser(request: KVFormatRequest, full: DType) -> KiviKV:
    """KIVI as ``--kv-quant kivi --kv-bits B`` names it (B = 2 by default)."""
    from kvcalc.engine.kivi import kivi

    assert request.quant is not None
    if request.quant.strip().lower() != "kivi":
        raise KVFormatError(
            "--kv-quant",
            f"unknown quantiser {literal(repr(shown(request.quant)))}; the one modelled is kivi",
        )
    if request.dtype is not None:
        raise KVFormatError(
            "--kv-dtype", "{kv_quant} kivi sets the dtype itself; give its bits with {kv_bits}"
        )
    bits = request.bits if request.bits is not None else KIVI_BITS[0]
    if bits not in KIVI_BITS:
        raise KVFormatError("--kv-bits", f"KIVI stores 2 or 4 bits, not {bits}")
    return kivi(bits, full)


def _kivi_format(request: KVFormatRequest, base: KiviKV) -> KiviKV:
    """``base`` refined by --kv-group, --kv-residual and --kv-scale-dtype."""
    fmt = base
    if request.group is not None:
        fmt = replace(fmt, group=request.group)
    if request.residual is not None:
        fmt = replace(fmt, residual_tokens=request.residual)
    if request.scale_dtype is not None:
        fmt = replace(fmt, scale=scale_dtype(request.scale_dtype))
    # --kv-zero-point is what KIVI does already (asymmetric): accepted, changes nothing.
    if fmt == base:
        return fmt
    name = f"{base.name} g{fmt.group} r{fmt.residual_tokens}"
    return replace(fmt, name=name + (f" {fmt.scale.name}" if fmt.scale != base.scale else ""))


def plain(d: DType) -> LinearKV:
    """A plain dtype as a format: every value at ``d``, no scales."""
    return LinearKV(d.name, d)


def as_kv_format(fmt: KVFormat | DType) -> KVFormat:
    return fmt if isinstance(fmt, KVFormat) else plain(fmt)


def check_stores(fmt: KVFormat, model: ModelSpec) -> None:
    """Raise :class:`KVFormatError` when ``fmt`` cannot store one of ``model``'s layers."""
    for mixer in model.mixer_pattern:
        fmt.check(mixer)


def model_effective_bits(fmt: KVFormat, model: ModelSpec) -> Fraction | None:
    """Bits per stored value over the whole model at long context, scales included."""
    from kvcalc.engine.kv import layer_groups

    groups = layer_groups(model)
    elements = sum(m.cache_elements_per_token() * n for m, n in groups)
    if not elements:
        return None
    return sum((fmt.token_bits(m) * n for m, n in groups), Fraction(0)) / elements


def format_bits(bits: Fraction) -> str:
    """``5.0``, ``4.5``, ``4.25``: one decimal at least, two when needed."""
    text = f"{float(bits):.2f}".rstrip("0")
    return text + "0" if text.endswith(".") else text
