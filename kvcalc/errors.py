"""The errors of kvcalc: every refusal of an input is a :class:`KvcalcError`.

Pure (no I/O, no typer/rich/yaml), so the engine may raise them. Each error carries the input at
fault (``field``, as the API's keyword names it: ``kv_memory``, ``ctx``, ``model``) and the fix,
so a front end can word them its own way: the command line prints ``str(exc)``, one line,
``--kv-memory: ...; give ...``, and exits 2; the Python API raises them as they are.

A message follows one convention, which ``field`` and ``fix`` are read from when the raiser does
not give them: ``<input>: <problem>; <fix>``, the input spelled as its option (``--kv-memory``,
``--sinks and --recent``) or ``MODEL``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NoReturn

#: A message's leading inputs: ``--kv-memory: ``, ``--sinks and --recent: ``, ``MODEL: ``.
#: (Patterns, compiled by ``re`` when first used: every command imports this module.)
_LEAD = r"^((?:--[a-z][a-z0-9-]*|MODEL)(?: and (?:--[a-z][a-z0-9-]*|MODEL))*)[: ]"
#: Options whose keyword is not the option without dashes.
_KEYWORDS = {"--as": "attention", "MODEL": "model"}


def keyword(option: str) -> str:
    """The API keyword of a command-line option: ``--kv-memory`` -> ``kv_memory``."""
    return _KEYWORDS.get(option, option.removeprefix("--").replace("-", "_"))


def _lead_of(message: str) -> tuple[tuple[str, ...], str | None]:
    """The inputs a message leads with, as keywords, and the message after them (None: it
    leads with none)."""
    lead = re.match(_LEAD, message)
    if lead is None:
        return (), None
    return tuple(keyword(o) for o in lead.group(1).split(" and ")), message[lead.end(1):]


#: A clause that says what to do: after a separator, it starts with one of these verbs.
_FIX = (
    r"(?:^|[:;,] |\()((?:use|give|choose|drop|remove|raise|shorten|name|set|install|run|leave|"
    r"list|free|open|check|fix|size|pass|lower|add) .*?)\)?$"
)


def _fix_of(message: str) -> str | None:
    """The clause after the message's last ``; `` (the fix), else its last clause that says
    what to do (``...: use a whole number of tokens``), else its ``e.g.`` example."""
    _, semicolon, fix = message.rpartition("; ")
    if semicolon and fix.strip():
        return fix.strip()
    clauses = list(re.finditer(_FIX, message))
    if clauses:
        return clauses[-1].group(1).strip()
    _, eg, example = message.rpartition(", e.g. ")
    return f"e.g. {example.strip()}" if eg else None


class KvcalcError(Exception):
    """Anything kvcalc refuses: bad input, a model or GPU it does not know, a registry file it
    cannot read. ``field`` is the input at fault (None: no single input, e.g. a registry file),
    ``fields`` all of them; ``fix`` says what to do instead (None when the message names none)."""

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        fields: tuple[str, ...] | None = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message)
        self._after_lead: str | None = None
        if fields is not None:
            found = fields
        elif field:
            found = (field,)
        else:
            found, self._after_lead = _lead_of(message)
        self.fields: tuple[str, ...] = found
        self.field: str | None = field if field is not None else (found[0] if found else None)
        self.fix: str | None = fix if fix is not None else _fix_of(message)

    def worded(self, name: Callable[[str], str]) -> str:
        """The message with its inputs named by ``name`` (a front end's spelling): the inputs
        it leads with (``--kv-memory: ...`` is ``kv_memory: ...`` in a spec file's words);
        as given when it leads with none."""
        if self._after_lead is None:
            return str(self)
        return " and ".join(name(f) for f in self.fields) + self._after_lead


class InputError(KvcalcError):
    """A bad input: a value out of range, options that contradict each other, an option the
    chosen engine does not use. Not a ValueError: click would take one raised by an option's
    parser for its own and reword it (the engine's errors that were ValueErrors stay so)."""


class LayoutError(InputError):
    """Valid inputs that this particular model cannot be split or stored by (its heads or
    layers): a registry-wide table reports it as that model's row; any other bad input stops."""


class WordedInputError(InputError):
    """Bad input from an error that names its fields (``fields`` and ``worded``, as the engine's
    refusals do), worded by each front end its own way: the options' spellings on the command
    line, a spec file's keys there. ``suffix`` is literal text after the message."""

    def __init__(self, source: KvcalcError, suffix: str = "") -> None:
        self.source = source
        self.suffix = suffix
        super().__init__(self.worded(_option_name), fields=source.fields)

    def worded(self, name: Callable[[str], str]) -> str:
        return str(self.source.worded(name)) + self.suffix


class WordedLayoutError(WordedInputError, LayoutError):
    """A :class:`LayoutError` that names its fields."""


def _option_name(field: str) -> str:
    from kvcalc.values import option_name

    return option_name(field)


class RegistryError(KvcalcError):
    """Bad registry data or an unknown name. The message is one line naming the file and field."""


class UnknownNameError(RegistryError):
    """A model or accelerator name that is not in the registry; carries the closest names."""

    def __init__(self, what: str, name: str, suggestions: list[str]) -> None:
        from kvcalc.engine.units import shown

        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        listing = f"list them with `kvcalc {what}s`"
        super().__init__(
            f"unknown {what} {shown(name, 100)!r}{hint} ({listing})",
            field="model" if what == "model" else "gpus",
            fix=f"did you mean {', '.join(suggestions)}?" if suggestions else listing,
        )
        self.name = name
        self.suggestions = suggestions


def literal(text: str) -> str:
    """``text`` as literal text of a message template that names its inputs as ``{kv_dtype}``
    (each front end words them its own way): its braces doubled."""
    return text.replace("{", "{{").replace("}", "}}")


def fail(message: str) -> NoReturn:
    """Refuse an input: ``message`` reads ``<input>: <problem>; <fix>`` (see the module)."""
    raise InputError(message)

