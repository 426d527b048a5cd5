"""Engine specs as plain JSON data and back, checked against their type annotations.

The validated-spec cache stores this form instead of a pickle: reading it back can only build
kvcalc's own frozen dataclasses, field by field, from JSON scalars whose types match the
annotations of those fields. Anything else -- a wrong type, an unknown or missing field, a class
outside kvcalc's engine, a non-finite float, a number out of range -- raises :class:`PlainError`,
which the cache treats as a miss.

Form: a dataclass is an object of its ``init`` fields plus ``"@type": "module:Class"``; a tuple,
list or frozenset is an array; a mapping is an object with string keys; a Path is its string; a
Fraction is ``[numerator, denominator]``. The declared type of a field picks the decoding, so a
list is turned back into a tuple where the field says tuple.
"""

from __future__ import annotations

import math
import sys
import types
import typing
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, get_args, get_origin

from kvcalc.engine.units import shown

#: The key naming a dataclass's class in its plain form.
TYPE_KEY = "@type"
#: Only dataclasses of these packages are built from a cache entry: kvcalc's own engine types.
_TRUSTED_PREFIX = "kvcalc.engine."
#: Every integer a spec holds is a count or a size: cached numbers outside this range are
#: corrupt (and would make the engine's arithmetic absurd), so they miss.
_MAX_INT = 1 << 63


class PlainError(ValueError):
    """A plain value that does not match the type it is read as."""


# ---------------------------------------------------------------- to plain data


def to_plain(value: Any) -> Any:
    """``value`` as JSON-compatible data (see the module docstring for the form)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PlainError(f"non-finite float {value!r}")
        return value
    if isinstance(value, Fraction):
        return [value.numerator, value.denominator]
    if isinstance(value, Path):
        return str(value)
    if is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        plain = {TYPE_KEY: f"{cls.__module__}:{cls.__qualname__}"}
        plain.update({f.name: to_plain(getattr(value, f.name)) for f in fields(cls) if f.init})
        return plain
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise PlainError("mapping keys must be strings")
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, frozenset):
        # Sorted by text so that equal sets give the same entry (a checkpoint's kept roles).
        return sorted((to_plain(v) for v in value), key=repr)
    raise PlainError(f"{type(value).__name__} has no plain form")


# ---------------------------------------------------------------- from plain data


def from_plain(data: Any, hint: Any) -> Any:
    """The value of type ``hint`` that ``data`` is the plain form of; PlainError otherwise."""
    return _decoder(hint)(data)


Decoder = typing.Callable[[Any], Any]
#: One decoder per declared type, worked out from the type once: the whole registry's specs
#: are some 3,500 values of a few dozen types, and inspecting each type for each value was most
#: of the time a whole-registry command spent reading them back.
_DECODERS: dict[Any, Decoder] = {}


def _decoder(hint: Any) -> Decoder:
    decoder = _DECODERS.get(hint)
    if decoder is None:
        decoder = _DECODERS[hint] = _new_decoder(hint)
    return decoder


def _new_decoder(hint: Any) -> Decoder:
    origin = get_origin(hint)
    args = get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        return _union_decoder(args)
    if origin is typing.Literal:
        return _literal_decoder(args)
    if origin is tuple:
        return lambda data: tuple(_sequence(data, args))
    if origin is list:
        return lambda data: list(_sequence(data, (*args, ...)))
    if origin is frozenset:
        return lambda data: frozenset(_sequence(data, (*args, ...)))
    if origin is dict or origin is Mapping:
        return lambda data: _mapping(data, args)
    if origin is not None:
        raise PlainError(f"no plain form for {hint!r}")
    return _scalar_or_class_decoder(hint)


def _union_decoder(options: tuple[Any, ...]) -> Decoder:
    optional = type(None) in options
    others = tuple(o for o in options if o is not type(None))

    def decode_union(data: Any) -> Any:
        if data is None and optional:  # most unions are ``X | None``: no failed X attempt
            return None
        for option in others:
            try:
                return _decoder(option)(data)
            except PlainError:
                continue
        raise PlainError(f"{_shown(data)} matches none of {options}")

    return decode_union


def _literal_decoder(values: tuple[Any, ...]) -> Decoder:
    has_bool = any(isinstance(a, bool) for a in values)

    def decode_literal(data: Any) -> Any:
        if data not in values or isinstance(data, bool) != has_bool:
            raise PlainError(f"{data!r} is not one of {values}")
        return data

    return decode_literal


def _sequence(data: Any, args: tuple[Any, ...]) -> list[Any]:
    if not isinstance(data, list):
        raise PlainError(f"expected an array, got {_shown(data)}")
    if len(args) == 2 and args[1] is Ellipsis:
        item = _decoder(args[0])
        return [item(v) for v in data]
    if len(args) != len(data):
        raise PlainError(f"expected {len(args)} items, got {len(data)}")
    return [_decoder(a)(v) for v, a in zip(data, args, strict=True)]


def _mapping(data: Any, args: tuple[Any, ...]) -> dict[str, Any]:
    key_type, value_type = args
    if key_type is not str or not isinstance(data, dict):
        raise PlainError(f"expected an object, got {_shown(data)}")
    value = _decoder(value_type)
    return {k: value(v) for k, v in data.items()}


def _scalar_or_class_decoder(hint: Any) -> Decoder:
    if hint is type(None) or hint is None:
        return _none
    if hint is bool or hint is str:
        return lambda data: _exact(data, hint)
    if hint is int:
        return _int
    if hint is float:
        return _float
    if hint is Fraction:
        return _fraction
    if isinstance(hint, type) and issubclass(hint, Path):
        return lambda data: hint(_exact(data, str))
    if isinstance(hint, type):
        return lambda data: _dataclass(data, hint)
    raise PlainError(f"no plain form for {hint!r}")


def _none(data: Any) -> None:
    if data is not None:
        raise PlainError(f"expected null, got {_shown(data)}")


def _exact(data: Any, kind: type) -> Any:
    if type(data) is not kind:
        raise PlainError(f"expected {kind.__name__}, got {_shown(data)}")
    return data


def _float(data: Any) -> float:
    if type(data) not in (int, float) or not math.isfinite(data):
        raise PlainError(f"expected a finite number, got {_shown(data)}")
    return float(data)


def _fraction(data: Any) -> Fraction:
    numerator, denominator = _sequence(data, (int, int))
    if denominator == 0:
        raise PlainError("a fraction with a zero denominator")
    return Fraction(numerator, denominator)


def _int(data: Any) -> int:
    if type(data) is not int or not 0 <= data < _MAX_INT:
        raise PlainError(f"expected a whole number in [0, 2^63), got {_shown(data)}")
    return data


def _dataclass(data: Any, base: type) -> Any:
    if not isinstance(data, dict) or not isinstance(data.get(TYPE_KEY), str):
        raise PlainError(f"expected a {base.__name__} object, got {_shown(data)}")
    cls, names, decoders = _class_fields(data[TYPE_KEY], base)
    if len(data) != len(names) + 1 or not all(name in data for name in names):
        given = sorted(set(data) - {TYPE_KEY})
        raise PlainError(f"{cls.__name__}: fields {given} differ from the class's")
    kwargs = {name: decode(data[name]) for name, decode in zip(names, decoders, strict=True)}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError, ArithmeticError) as exc:  # the class's own invariants
        raise PlainError(f"{cls.__name__}: {exc}") from None


_FIELDS: dict[tuple[str, type], tuple[type, tuple[str, ...], tuple[Decoder, ...]]] = {}


def _class_fields(tag: str, base: type) -> tuple[type, tuple[str, ...], tuple[Decoder, ...]]:
    """The class ``tag`` names, its init fields and their decoders."""
    key = (tag, base)
    if key not in _FIELDS:
        cls = _resolve_class(tag, base)
        hints = _hints(cls)
        names = tuple(f.name for f in fields(cls) if f.init)
        # Building a decoder inspects only its own type (a class's fields are looked up when a
        # value of it is first decoded), so a type may contain itself.
        decoders = tuple(_decoder(hints[name]) for name in names)
        _FIELDS[key] = (cls, names, decoders)
    return _FIELDS[key]


def _resolve_class(tag: str, base: type) -> type:
    """The class ``module:Class`` names, if it is a dataclass of kvcalc's engine deriving from
    ``base`` (the declared type of the field); imports only kvcalc's own modules. Not memoised:
    its one caller, :func:`_class_fields`, caches the class by the same (tag, base)."""
    module_name, _, name = tag.partition(":")
    if not module_name.startswith(_TRUSTED_PREFIX) or not name.isidentifier():
        raise PlainError(f"untrusted type {tag!r}")
    module = sys.modules.get(module_name)
    if module is None:
        import importlib

        try:
            module = importlib.import_module(module_name)
        except ImportError:
            raise PlainError(f"unknown module {module_name!r}") from None
    cls = getattr(module, name, None)
    if not (isinstance(cls, type) and is_dataclass(cls) and issubclass(cls, base)):
        raise PlainError(f"{tag!r} is not a {base.__name__}")
    return cls


_HINTS: dict[type, dict[str, Any]] = {}


class _ModuleNames(dict[str, Any]):
    """A module's names as its attributes, so that an annotation naming a class the module
    re-exports lazily (through its ``__getattr__``, as spec.py does) evaluates too."""

    def __init__(self, module: types.ModuleType | None) -> None:
        super().__init__()
        self.module = module

    def __missing__(self, name: str) -> Any:
        try:
            return getattr(self.module, name)
        except AttributeError:
            raise KeyError(name) from None


def _hints(cls: type) -> dict[str, Any]:
    """The evaluated annotations of ``cls``'s fields (memoised: a spec holds the same classes
    often). Only the fields' own annotations are evaluated, each in the module of the class that
    declares it: ``typing.get_type_hints`` evaluates every annotation of every base, which took
    longer than decoding the whole registry."""
    if cls not in _HINTS:
        try:
            _HINTS[cls] = {f.name: _evaluated(f.type, _declaring_module(cls, f.name))
                           for f in fields(cls)}
        except Exception as exc:  # noqa: BLE001 - an annotation that does not evaluate
            raise PlainError(f"{cls.__name__}: annotations do not evaluate: {exc}") from None
    return _HINTS[cls]


def _declaring_module(cls: type, name: str) -> types.ModuleType | None:
    for base in cls.__mro__:
        if name in base.__dict__.get("__annotations__", {}):
            return sys.modules.get(base.__module__)
    return sys.modules.get(cls.__module__)


_CODE: dict[str, types.CodeType] = {}


def _evaluated(annotation: Any, module: types.ModuleType | None) -> Any:
    """An annotation string (``from __future__ import annotations``) as the type it names."""
    if not isinstance(annotation, str):
        return annotation
    code = _CODE.get(annotation)
    if code is None:
        code = _CODE[annotation] = compile(annotation, "<annotation>", "eval")
    return eval(code, vars(module) if module else {}, _ModuleNames(module))


def _shown(data: Any) -> str:
    return shown(repr(data))
