"""Units: data types, byte sizes and token counts.

Bytes are exact integers everywhere in the engine. Data types are kept as a number of bits per
element (a Fraction, so sub-byte types such as int4 and int2 stay exact) and are turned into bytes
only when a whole tensor is sized, rounding up.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from kvcalc.errors import InputError

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40
KB = 10**3
MB = 10**6
GB = 10**9
TB = 10**12

#: The largest context we accept: 2^30 tokens. Anything larger is a typo, not a deployment.
MAX_CONTEXT_TOKENS = 1 << 30


class UnitError(InputError, ValueError):
    """A quantity could not be parsed; the message names the input and the accepted forms."""


class BareBytesError(UnitError):
    """A size in bare ``B`` that reads like a parameter count (``140B``)."""


#: The longest number kvcalc reads, in characters. Far longer than any real figure (2^63 has
#: 19 digits) and far below the 4,300 digits Python's int() refuses to convert.
MAX_NUMBER_CHARS = 64


def number_text_problem(text: str) -> str | None:
    """Why ``text`` is not a number kvcalc reads, or None. One rule for every number, on every
    option and in every file: ASCII only (Python would read full-width or Arabic-Indic digits
    as numbers, so ``１２８`` would be 128 in one place and refused in another) and at most
    :data:`MAX_NUMBER_CHARS` characters."""
    if not text.isascii():
        return "use ASCII digits (0-9)"
    if len(text.strip()) > MAX_NUMBER_CHARS:
        return f"{len(text.strip()):,} characters is longer than any number kvcalc reads"
    return None


def not_a_number(text: str, whole: bool) -> str | None:
    """Why ``text`` is not the number an option takes -- a whole one (``whole``, a count such
    as --tp) or any (a fraction such as --gpu-util) -- or None; the range is checked apart."""
    try:
        int(text) if whole else float(text)
    except ValueError:
        kind, example = ("a whole number", "8") if whole else ("a number", "0.9")
        return f"{shown(text)!r} is not {kind}; give one such as {example}"
    return None


def check_number_text(text: str, what: str) -> None:
    """Raise UnitError naming ``what`` when ``text`` breaks :func:`number_text_problem`."""
    problem = number_text_problem(text)
    if problem is not None:
        raise UnitError(f"invalid {what} {shown(text)!r}: {problem}")


def shown(text: str, limit: int = 40) -> str:
    """``text`` cut to ``limit`` characters for an error message (a value can be megabytes)."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class DType:
    """A storage data type, as bits per element (scale overhead included where it is fixed)."""

    name: str
    bits: Fraction

    def bytes_for(self, elements: int) -> int:
        """Bytes needed to store ``elements`` values, rounded up to whole bytes."""
        # Integer ceil-division on the fraction's parts: exact, and far cheaper than Fraction
        # arithmetic in the capacity searches that call this per layer.
        return -(-elements * self.bits.numerator // (8 * self.bits.denominator))


# Block-scaled weight formats (MXFP4, FP8 with 128x128 scales) are not a fixed number of bits
# per element: they are kvcalc.engine.quant formats, sized from each tensor's shape.
_DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("fp32", Fraction(32)),
        DType("bf16", Fraction(16)),
        DType("fp16", Fraction(16)),
        DType("fp8", Fraction(8)),
        DType("int8", Fraction(8)),
        DType("int4", Fraction(4)),
        DType("int2", Fraction(2)),
    )
}
_DTYPE_ALIASES = {
    "float32": "fp32",
    "float": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "float8": "fp8",
}


def canonical_dtype_name(name: str) -> str:
    """``bfloat16`` -> ``bf16``, ``float8`` -> ``fp8``, ...; unknown names come back lowercased."""
    key = name.strip().lower()
    return _DTYPE_ALIASES.get(key, key)


KV_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8", "int4", "int2")


def dtype(name: str, allowed: tuple[str, ...] | None = None) -> DType:
    """Look up a data type by name (``bf16``, ``fp8``, ``bfloat16``, ...)."""
    key = canonical_dtype_name(name)
    found = _DTYPES.get(key)
    if found is not None and (allowed is None or key in allowed):
        return found
    choices = allowed if allowed is not None else tuple(_DTYPES)
    raise UnitError(f"unknown dtype {name!r}; choose one of {', '.join(choices)}")


_CTX_RE = re.compile(r"^\s*([0-9]+)\s*([km]?)\s*$", re.IGNORECASE)
_CTX_SCALE = {"": 1, "k": 1 << 10, "m": 1 << 20}


def parse_context(text: str) -> int:
    """Parse a context length: ``8192``, ``8k`` (8,192), ``128k`` (131,072), ``1m`` (1,048,576).

    ``k`` and ``m`` are binary (2^10, 2^20), as context lengths are quoted in the field.
    """
    return parse_tokens(text)


#: One number grouped by thousands as kvcalc prints token counts (``32,768``; no space, no k).
_GROUPED = re.compile(r"\d{1,3}(?:,\d{3})+")


def parse_context_list(text: str) -> list[int]:
    """One context or a comma-separated list of them (``8k,32k,128k``), in tokens; refused as
    empty or as one count grouped by thousands (:func:`check_context_list`)."""
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise UnitError("give at least one context, e.g. 8k or 8k,32k,128k")
    check_context_list(text)
    return [parse_context(p) for p in parts]


def check_context_list(text: str) -> None:
    """Refuse a list of contexts that reads as one count with thousands separators:
    ``32,768`` is how kvcalc prints 32768, and split at its comma it would be the contexts 32
    and 768 tokens. A list of short contexts keeps a space after each comma (``512, 768``)."""
    grouped = text.strip()
    if _GROUPED.fullmatch(grouped):
        raise UnitError(
            f"{grouped!r} reads as {grouped.replace(',', '')} with thousands separators; "
            f"write {grouped.replace(',', '')}, or for a list put a space after each comma"
        )


def parse_tokens(
    text: str, minimum: int = 1, maximum: int = MAX_CONTEXT_TOKENS, what: str = "context"
) -> int:
    """Parse a token count as a context is spelled (:func:`parse_context`), held to
    [``minimum``, ``maximum``]: every option that counts tokens reads its value here."""
    check_number_text(text, what)
    match = _CTX_RE.match(text)
    if not match:
        raise UnitError(
            f"invalid {what} {text!r}: use a whole number of tokens such as 8192, 8k, 128k or 1m"
        )
    tokens = int(match.group(1)) * _CTX_SCALE[match.group(2).lower()]
    if tokens < minimum:
        unit = "token" if minimum == 1 else "tokens"
        raise UnitError(f"invalid {what} {text!r}: it must be at least {minimum:,} {unit}")
    if tokens > maximum:
        raise UnitError(
            f"invalid {what} {text!r}: {tokens:,} tokens is above the limit of "
            f"{maximum:,}{_spelled_tokens(maximum)}"
        )
    return tokens


def _spelled_tokens(tokens: int) -> str:
    """`` (1024m)`` or `` (64k)`` for a limit that is a whole number of m or k, else nothing."""
    for suffix, scale in (("m", 1 << 20), ("k", 1 << 10)):
        if tokens % scale == 0:
            return f" ({tokens // scale}{suffix})"
    return ""


_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]i?b|b)\s*$", re.IGNORECASE)
_SIZE_SCALE = {
    "b": 1,
    "kb": KB,
    "mb": MB,
    "gb": GB,
    "tb": TB,
    "kib": KiB,
    "mib": MiB,
    "gib": GiB,
    "tib": TiB,
}


#: The smallest size written in bare bytes (``B``) that is read as bytes: 1 MiB. ``140B`` is how
#: the field writes 140 billion parameters, never a memory size, and no parameter count is
#: written with seven digits before its ``B``; a byte count copied from a tool
#: (``torch.cuda.mem_get_info``) is far above it.
MIN_BARE_BYTES = MiB


def bare_bytes_problem(text: str, number: str) -> str:
    """Why a size in bare ``B`` below :data:`MIN_BARE_BYTES` (or with a fraction) is refused."""
    n = shown(number)
    return (
        f"invalid size {shown(text)!r}: B is bytes, and {n}B reads as a parameter count; give "
        f"the size with a byte unit, e.g. {n}GB (10^9 bytes) or {n}GiB (2^30 bytes); bare B is "
        f"for whole byte counts from {MIN_BARE_BYTES:,}B"
    )


def parse_bytes(text: str) -> int:
    """Parse a memory size with an explicit unit: ``80GB`` (10^9), ``79.2GiB`` (2^30), ``512MiB``.

    A bare number is refused: "80" could be GB or GiB, a 7% difference on an H100. So is a
    bare ``B`` below 1 MiB (:data:`MIN_BARE_BYTES`): ``140B`` is a parameter count.
    """
    check_number_text(text, "size")
    match = _SIZE_RE.match(text)
    if not match:
        raise UnitError(
            f"invalid size {text!r}: give a number and a unit, e.g. 80GB (10^9 bytes) "
            "or 80GiB (2^30 bytes)"
        )
    number, written = match.group(1), match.group(2)
    unit = written.lower()
    # Gb with a capital prefix is gigabits, as parse_rate reads 400Gb/s (NICs are sold so):
    # read as bytes here, the same unit would be 8x apart from one option to the next.
    if len(written) == 2 and written[0].isupper() and written[1] == "b":
        raise UnitError(
            f"invalid size {text!r}: {written} is bits, as in 400Gb/s; give bytes, e.g. "
            "80GB (10^9 bytes) or 80GiB (2^30 bytes)"
        )
    if unit == "b" and (Fraction(number) < MIN_BARE_BYTES or "." in number):
        raise BareBytesError(bare_bytes_problem(text, number))
    value = Fraction(number) * _SIZE_SCALE[unit]
    if value <= 0:
        raise UnitError(f"invalid size {text!r}: it must be positive")
    if value > 1 << 60:
        raise UnitError(f"invalid size {text!r}: larger than any accelerator (1 EiB)")
    return math.floor(value)


_TIME_RE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*(us|µs|ms|s)\s*$", re.IGNORECASE)
_TIME_SCALE = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}


def parse_duration(text: str) -> float:
    """Parse a latency target into seconds: ``50ms``, ``2s``, ``0.5s``, ``800us``. The unit is
    required: a bare 50 could be milliseconds or seconds."""
    match = _TIME_RE.match(text)
    if not match:
        raise UnitError(
            f"invalid time {_quoted(text)}: give a number with its unit, e.g. 50ms or 2s"
        )
    seconds = float(match.group(1)) * _TIME_SCALE[match.group(2).lower()]
    if not 0 < seconds < math.inf:
        raise UnitError(f"invalid time {_quoted(text)}: give a number above 0 such as 50ms")
    return seconds


_RATE_RE = re.compile(
    r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*([GT])(b|bit|B)(?:/s|ps)\s*$", re.IGNORECASE
)


def parse_rate(text: str) -> int:
    """Parse a network rate into bytes per second: ``400Gb/s`` (bits, as NICs are sold),
    ``50GB/s`` (bytes), ``1.6Tb/s``; decimal prefixes. The unit is required."""
    match = _RATE_RE.match(text)
    if not match:
        raise UnitError(
            f"invalid rate {_quoted(text)}: give a number with its unit, e.g. 400Gb/s or 50GB/s"
        )
    number, prefix, unit = match.groups()
    scale = 10**9 if prefix.upper() == "G" else 10**12
    value = float(number) * scale / (1 if unit == "B" else 8)
    if not 0 < value < math.inf:
        raise UnitError(f"invalid rate {_quoted(text)}: give a number above 0 such as 400Gb/s")
    return int(value)


def _quoted(text: str) -> str:
    """``text`` quoted for an error line, shortened when it is long (a pasted 400-digit value)."""
    return repr(text if len(text) <= 40 else text[:37] + "...")


#: The most points a sweep range may have: beyond this a table or chart is no longer readable
#: (1..1024m in powers of two is 31 points).
MAX_SWEEP_POINTS = 64


def parse_count(text: str) -> int:
    """A whole, positive count (sequences): ``1``, ``256``."""
    check_number_text(text, "count")
    stripped = text.strip()
    if not stripped.isdigit() or int(stripped) < 1:
        raise UnitError(
            f"invalid count {shown(text)!r}: use a whole number of at least 1, such as 64"
        )
    return int(stripped)


def parse_range(text: str, parse_point: Callable[[str], int] = parse_context) -> list[int]:
    """Parse a log-spaced range: ``4k..1m`` is both ends and every power of two between them;
    ``4k..1m:5`` is 5 points spaced evenly on a log scale, both ends included, each rounded to
    a whole number (exact counts, so output can echo them).

    ``parse_point`` reads each end (contexts by default; :func:`parse_count` for batches).
    """
    check_number_text(text, "range")
    bounds, sep, count = text.partition(":")
    start_text, dots, end_text = bounds.partition("..")
    if not dots or not start_text.strip() or not end_text.strip():
        raise UnitError(
            f"invalid range {shown(text)!r}: give both ends as START..END, e.g. 4k..1m "
            "(or START..END:N for N points)"
        )
    start, end = parse_point(start_text), parse_point(end_text)
    if start >= end:
        raise UnitError(
            f"invalid range {shown(text)!r}: START must be below END, e.g. "
            f"{end_text.strip()}..{start_text.strip()}"
            if start > end
            else f"invalid range {shown(text)!r}: both ends are {start:,}; give one value"
        )
    if sep:
        points = log_points(start, end, _point_count(text, count))
        if len(set(points)) != len(points):
            raise UnitError(
                f"invalid range {shown(text)!r}: {len(points)} log-spaced points between "
                f"{start:,} and {end:,} repeat a whole number; give fewer points or a wider range"
            )
    else:
        points = powers_between(start, end)
    if len(points) > MAX_SWEEP_POINTS:
        raise UnitError(
            f"invalid range {shown(text)!r}: {len(points)} points, more than {MAX_SWEEP_POINTS}; "
            "narrow it or give fewer with :N"
        )
    return points


def _point_count(text: str, count: str) -> int:
    if not count.strip().isdigit() or not 2 <= int(count) <= MAX_SWEEP_POINTS:
        raise UnitError(
            f"invalid range {shown(text)!r}: the number of points after ':' must be a whole "
            f"number from 2 to {MAX_SWEEP_POINTS}"
        )
    return int(count)


def powers_between(start: int, end: int) -> list[int]:
    """``start``, every power of two strictly between, and ``end``."""
    power = 1 << start.bit_length()  # the smallest power of two above start
    inner = []
    while power < end:
        inner.append(power)
        power <<= 1
    return [start, *inner, end]


def log_points(start: int, end: int, count: int) -> list[int]:
    """``count`` whole numbers from ``start`` to ``end``, evenly spaced on a log scale (rounded,
    so close ends can repeat a number: :func:`parse_range` refuses that rather than merge them
    and answer with fewer points than asked)."""
    ratio = end / start
    inner = (round(start * ratio ** (i / (count - 1))) for i in range(1, count - 1))
    return [start, *inner, end]
