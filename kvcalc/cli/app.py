"""The typer application, its error handling and the options shared by several commands."""

from __future__ import annotations

import errno
import functools
import inspect
import math
import os
import re
import sys
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer
from typer.core import TyperCommand, TyperGroup

# Bad input is a KvcalcError, reported as one line on stderr with exit code 2; the commands
# read InputError, LayoutError (a layout one model refuses) and fail from here.
from kvcalc.completion import COMPLETIONS, complete_models
from kvcalc.engine.inputs import MAX_TOKENS
from kvcalc.errors import InputError as InputError
from kvcalc.errors import KvcalcError
from kvcalc.errors import LayoutError as LayoutError
from kvcalc.errors import WordedInputError as WordedInputError
from kvcalc.errors import WordedLayoutError as WordedLayoutError
from kvcalc.errors import fail as fail

# The values every command reads, read by the commands from here.
from kvcalc.values import MAX_BATCH as MAX_BATCH
from kvcalc.values import check_mbu as check_mbu
from kvcalc.values import check_mfu as check_mfu
from kvcalc.values import head_override_problem as head_override_problem
from kvcalc.values import load_model as load_model
from kvcalc.values import one_length as one_length
from kvcalc.values import option_name as option_name
from kvcalc.values import parse_attention_variant as parse_attention_variant
from kvcalc.values import parse_ctx_list as parse_ctx_list
from kvcalc.values import parse_size as parse_size

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from kvcalc.engine.inputs import Input
    from kvcalc.render.report import Report

EXIT_OK = 0
EXIT_DOES_NOT_FIT = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3


#: A word of an error line longer than this is cut: the line names a value, it does not echo
#: a megabyte of it.
_MAX_WORD_CHARS = 200


def _error_line(message: str) -> None:
    words = (
        w if len(w) <= _MAX_WORD_CHARS else w[: _MAX_WORD_CHARS - 3] + "..."
        for w in str(message).split()
    )
    try:
        sys.stderr.write(f"Error: {' '.join(words)}\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # stderr closed or full: the exit code tells
        pass


#: Errors writing the output that are the destination's, not kvcalc's, with the fix of each: a
#: full disk or quota, a file too large, an I/O error of the device, a descriptor not open for
#: writing (`kvcalc size ... 1</dev/null`).
_OUTPUT_ERRNOS = {
    errno.ENOSPC: "free space or write elsewhere",
    errno.EDQUOT: "free space or write elsewhere",
    errno.EFBIG: "free space or write elsewhere",
    errno.EIO: "free space or write elsewhere",
    errno.EBADF: "open standard output for writing (a file or a pipe)",
}

#: The exit code the running command ends with, once it knows it: a command records its verdict
#: before it writes the output (:func:`note_exit`), so that a reader closing the pipe early
#: (`kvcalc check spec.yaml | true`) cannot turn "does not fit" or "bad input" into success.
_verdict = EXIT_OK


def note_exit(code: int) -> None:
    """Record the exit code the command will end with, before writing what it found."""
    global _verdict
    _verdict = code


def _discard_stdout() -> None:
    """Point stdout at the null device, so that the interpreter's last flush of what is still
    buffered cannot fail a second time (and print a traceback) after the error was reported."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # a test runner's stdout has no descriptor
        pass


def _closed_pipe() -> NoReturn:
    """End quietly when the reader closed the pipe (`kvcalc models | head -1`): it has what it
    wanted, and the exit code is the command's verdict (:func:`note_exit`), 0 for a command
    that only lists. Caught before click, which would exit 1, the code of "does not fit" here."""
    _discard_stdout()
    raise typer.Exit(_verdict) from None


def _is_click_error(exc: Exception) -> bool:
    """Whether ``exc`` is a parsing error of the option parser (unknown option, bad value).

    Public API only: typer's vendored click derives its ClickException from the public
    ``typer.TyperException``; for a typer whose click does not, the duck type click documents
    for its exceptions (``format_message()`` and an integer ``exit_code``) identifies them.
    """
    return isinstance(exc, typer.TyperException) or (
        callable(getattr(exc, "format_message", None))
        and isinstance(getattr(exc, "exit_code", None), int)
    )


#: Command name -> module defining it (as ``command_app``). Modules are imported only when their
#: command runs (or help lists them), so start-up pays for one command's options, not all.
COMMANDS = {
    "size": "kvcalc.cli.size",
    "models": "kvcalc.cli.models",
    "gpus": "kvcalc.cli.gpus",
    "batch": "kvcalc.cli.batch",
    "decode": "kvcalc.cli.decode",
    "sweep": "kvcalc.cli.sweep",
    "plan": "kvcalc.cli.plan",
    "compare": "kvcalc.cli.compare",
    "offload": "kvcalc.cli.offload",
    "import-hf": "kvcalc.cli.import_hf",
    "check": "kvcalc.cli.check",
    "calibrate": "kvcalc.cli.calibrate",
}


class KvcalcGroup(TyperGroup):
    """Runs a command and turns every failure into one line on stderr and an exit code.

    Typer's default prints usage and rich error panels; for a calculator used in CI pipelines one
    line that names the problem and the fix is easier to read and to grep.
    """

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return None
        import importlib

        module = importlib.import_module(COMMANDS[cmd_name])
        return typer.main.get_command(module.command_app)

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:  # `kvcalc --help` prints while the context is made
            return super().make_context(*args, **kwargs)
        except BrokenPipeError:
            _closed_pipe()

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            _closed_pipe()

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        if os.environ.get(COMPLETE_VAR):  # the shell asks for completions (see _show_completion)
            from typer.completion import completion_init

            completion_init()
        global _verdict
        _verdict = EXIT_OK  # a fresh verdict for each run (tests run many in one process)
        if sys.stdout is None:  # started with stdout closed (`kvcalc size ... >&-`)
            _error_line("standard output is closed; give kvcalc a file or a pipe to write to")
            sys.exit(EXIT_USAGE)
        rv: Any = None
        try:
            try:
                rv = super().main(*args, **kwargs)
            except typer.Exit as exc:  # raised outside a context
                rv = exc.exit_code
            note_exit(rv if isinstance(rv, int) else EXIT_OK)
            sys.stdout.flush()  # a full disk or closed pipe shows here, not at interpreter exit
        except KvcalcError as exc:  # worded with the options at fault (--kv-memory)
            _error_line(exc.worded(option_name))
            sys.exit(EXIT_USAGE)
        except typer.Abort:
            _error_line("aborted")
            sys.exit(1)
        except BrokenPipeError:  # at the last flush; see invoke
            _discard_stdout()
            sys.exit(_verdict)
        except OSError as exc:
            if exc.errno not in _OUTPUT_ERRNOS:
                raise
            # Exit 2, not 1: 1 means "does not fit", and a script must not read a full disk as
            # an answer; the fix is the destination's, as for a bad input.
            _discard_stdout()
            _error_line(f"cannot write the output: {exc.strerror}; {_OUTPUT_ERRNOS[exc.errno]}")
            sys.exit(EXIT_USAGE)
        except Exception as exc:  # never show a traceback to the user
            if _is_click_error(exc):  # option parsing
                _error_line(exc.format_message())  # type: ignore[attr-defined]
                sys.exit(exc.exit_code)  # type: ignore[attr-defined]
            if os.environ.get("KVCALC_DEBUG"):
                raise
            _error_line(
                f"internal error: {type(exc).__name__}: {exc} (set KVCALC_DEBUG=1 "
                "for a traceback and please report it)"
            )
            sys.exit(EXIT_INTERNAL)
        sys.exit(rv if isinstance(rv, int) else EXIT_OK)


app = typer.Typer(
    cls=KvcalcGroup,
    name="kvcalc",
    add_completion=False,  # kvcalc's own --install-completion/--show-completion: see below
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            text = version("kvcalc")
        except PackageNotFoundError:  # run from a source tree without installing
            from kvcalc import __version__ as text
        typer.echo(f"kvcalc {text}")
        raise typer.Exit(EXIT_OK)


#: The variable a shell's completion script sets when it asks kvcalc for completions.
COMPLETE_VAR = "_KVCALC_COMPLETE"
#: The shells typer writes completion scripts for.
SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


def completion_shell(option: str) -> str:
    """The shell running kvcalc, as shellingham (typer's dependency) detects it."""
    import shellingham  # type: ignore[import-untyped]  # typer's dependency, without stubs

    try:
        name = str(shellingham.detect_shell()[0])
    except shellingham.ShellDetectionFailure:
        name = "none"
    if name not in SHELLS:
        fail(
            f"{option}: cannot tell which shell runs kvcalc (found {name}); "
            f"run it from {', '.join(SHELLS[:-2])} or PowerShell"
        )
    return name


# typer's own completion options (add_completion=True) print "Shell sh is not supported." to
# stdout and exit 1; these are the same scripts and installers with kvcalc's error handling.
def _show_completion(value: bool) -> None:
    if value:
        from typer.completion import get_completion_script

        shell = completion_shell("--show-completion")
        script = get_completion_script(prog_name="kvcalc", complete_var=COMPLETE_VAR, shell=shell)
        typer.echo(script)
        raise typer.Exit(EXIT_OK)


def _install_completion(value: bool) -> None:
    if value:
        from typer.completion import install

        shell = completion_shell("--install-completion")
        _, path = install(shell=shell, prog_name="kvcalc", complete_var=COMPLETE_VAR)
        typer.echo(f"{shell} completion installed in {path}; it takes effect in a new shell")
        raise typer.Exit(EXIT_OK)


@app.callback(invoke_without_command=True)
def _root(
    ctx: typer.Context,
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="print the version"
    ),
    install_completion: bool = typer.Option(
        False,
        "--install-completion",
        callback=_install_completion,
        is_eager=True,
        expose_value=False,
        help="install tab completion for your shell (bash, zsh, fish, PowerShell)",
    ),
    show_completion: bool = typer.Option(
        False,
        "--show-completion",
        callback=_show_completion,
        is_eager=True,
        expose_value=False,
        help="print the completion script for your shell, to install it yourself",
    ),
) -> None:
    """KV-cache calculator for LLM inference: bytes per token, sequences that fit, decode time."""
    # Bare `kvcalc` shows the help as `--help` does (click's no_args_is_help raises it as an
    # error, which the one-line error handler would squash).
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(EXIT_OK)


class OnceCommand(TyperCommand):
    """A command that refuses an option given twice: click would silently keep the last value,
    and `--ctx 8k --ctx 32k` would then answer for 32k alone. Its integer and float options
    follow the number rule of every number kvcalc reads (:func:`strict_number_type`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.type.name in _NUMBER_TYPES:
                param.type = strict_number_type(param.type)
            if param.param_type_name == "option" and param.metavar is None:
                param.metavar = _metavar(param.type)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        if option is not None:
            option.rich_help_panel = OUTPUT_PANEL
        return option

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        arguments = [p for p in self.get_params(ctx) if p.param_type_name == "argument"]
        return [self.options_metavar or "[OPTIONS]", *(usage_name(p) for p in arguments)]

    def format_options(self, ctx: Any, formatter: Any) -> None:
        """The options in their panels (:data:`PANELS` order), the arguments first."""
        sections: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            help_text = _DEFAULT_NOTE.sub(r"  [\1", record[1])
            if param.param_type_name == "argument":
                sections.setdefault("Arguments", []).append((usage_name(param, True), help_text))
            else:
                panel = getattr(param, "rich_help_panel", None) or "Options"
                sections.setdefault(panel, []).append((record[0], help_text))
        order = ["Arguments", *PANELS]
        # A panel not listed (a serving engine's own) goes before Output, in declaration order.
        unlisted = order.index(OUTPUT_PANEL) - 0.5
        for title in sorted(sections, key=lambda t: order.index(t) if t in order else unlisted):
            with formatter.section(title):
                formatter.write_dl(sections[title])

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        for param in self.params:
            if getattr(param, "multiple", True) or getattr(param, "count", False):
                continue  # arguments, repeatable and counting options
            names = [*param.opts, *getattr(param, "secondary_opts", ())]
            given = [a for a in _options_before_separator(args) if _spells(a, names)]
            if len(given) > 1:
                fail(f"{max(names, key=len)}: given {len(given)} times; give it once")
        return super().parse_args(ctx, args)


#: The help's sections of options, in their order: each option names its panel
#: (``rich_help_panel``); an option without one is listed under "Options".
MODEL_PANEL = "Model"
DEPLOYMENT_PANEL = "Deployment"
KV_PANEL = "KV cache format"
EVICTION_PANEL = "Eviction"
VLLM_PANEL = "vLLM engine"
SGLANG_PANEL = "SGLang engine"
OUTPUT_PANEL = "Output"
PANELS = (
    "Options", MODEL_PANEL, DEPLOYMENT_PANEL, KV_PANEL, EVICTION_PANEL, VLLM_PANEL, SGLANG_PANEL,
    OUTPUT_PANEL,
)
#: The one notation of a default (and of "required") in the help: ``  [default: X]`` at the
#: end, two spaces before it, whether typer writes it or the option's help does.
_DEFAULT_NOTE = re.compile(r"\s*\[(default: |required\])")


def usage_name(param: Any, bare: bool = False) -> str:
    """An argument as every usage line spells it: ``MODEL`` (required), ``[MODEL]`` (optional),
    ``MODEL...`` (one or more); ``bare``: without the brackets, as the Arguments section."""
    name = (param.metavar or param.name or "").strip("[]{}.").upper()
    name += "..." if param.nargs != 1 else ""
    return name if bare or param.required else f"[{name}]"


#: The placeholder of an option that names none, by its type: one style (an upper-case word,
#: or the choices) for every option of every command.
_METAVARS = {
    "int": "N",
    "integer": "N",
    "int range": "N",
    "float": "FRACTION",  # every float option is a share or a utilisation
    "float range": "FRACTION",
    "path": "PATH",
}


def _metavar(kind: Any) -> str:
    choices = getattr(kind, "choices", None)
    if choices is not None:
        return "[" + "|".join(str(getattr(c, "value", c)) for c in choices) + "]"
    return _METAVARS.get(kind.name, "TEXT")


#: click's names of its number types (plain and with a range).
_NUMBER_TYPES = frozenset({"int", "integer", "int range", "float", "float range"})
_STRICT_TYPES: dict[type, type] = {}


def strict_number_type(inner: Any) -> Any:
    """``inner`` (a click number type) refusing what kvcalc refuses in every number: non-ASCII
    digits (``int("８")`` is 8 to Python), more than 64 characters (Python's int() fails past
    4,300 digits), and, for floats, infinity and NaN."""
    base = type(inner)
    if base not in _STRICT_TYPES:
        _STRICT_TYPES[base] = type(
            f"Strict{base.__name__}",
            (base,),
            # The bounds are stated by the error that enforces them, not in the help's notes:
            # the range is described only while a value is converted (click words the error
            # "0 is not in the range x>=1." with it).
            {
                "convert": _strict_convert,
                "_describe_range": lambda self: (
                    base._describe_range(self) if getattr(self, "converting", False) else ""
                ),
            },
        )
    strict: Any = object.__new__(_STRICT_TYPES[base])  # the same settings, stricter text
    strict.__dict__.update(inner.__dict__)
    return strict


def _strict_convert(self: Any, value: Any, param: Any, ctx: Any) -> Any:
    from kvcalc.engine.units import not_a_number, number_text_problem, shown

    if isinstance(value, str):
        problem = number_text_problem(value)
        if problem is not None:
            self.fail(f"{shown(value)!r}: {problem}", param, ctx)
        # click names its type ("is not a valid int range."); say what the option takes.
        problem = not_a_number(value, whole=self.name in ("int", "integer", "int range"))
        if problem is not None:
            self.fail(problem, param, ctx)
    self.converting = True
    try:
        result = super(type(self), self).convert(value, param, ctx)
    finally:
        self.converting = False
    if isinstance(result, float) and not math.isfinite(result):
        self.fail(f"{value!r} is not a finite number", param, ctx)
    return result


def _options_before_separator(args: list[str]) -> list[str]:
    return args[: args.index("--")] if "--" in args else args


def _spells(arg: str, names: list[str]) -> bool:
    """Whether ``arg`` is one of ``names``: ``--ctx``, ``--ctx=8k``, ``-c`` or ``-c8k``."""
    return any(
        arg == n or arg.startswith(n + "=") or (not n.startswith("--") and arg.startswith(n))
        for n in names
    )


class _CommandTyper(typer.Typer):
    def command(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cls", OnceCommand)
        return super().command(*args, **kwargs)


def command_typer() -> typer.Typer:
    """The one-command Typer each command module defines its command on."""
    return _CommandTyper(
        add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False
    )


class ReportFormat(str, Enum):
    """The output formats; `kvcalc.render.formats.FORMATTERS` has one formatter per member."""

    table = "table"
    json = "json"
    yaml = "yaml"
    csv = "csv"
    markdown = "markdown"


ReportFormatOption = typer.Option(
    ReportFormat.table,
    "--format",
    "-f",
    case_sensitive=False,
    rich_help_panel=OUTPUT_PANEL,
    help="table for people; json, yaml or csv (raw numbers) for machines; markdown for docs",
)


def emit_report(
    report: Report, fmt: Enum, warnings: Sequence[str] = ()
) -> None:
    """Print a command's report in the chosen format (a ReportFormat, or `check`'s
    CheckFormat), with ``warnings`` added to its own, and end with its exit code."""
    from kvcalc.render.formats import emit

    if warnings:
        report.warnings = [*report.warnings, *warnings]
    note_exit(report.exit_code)
    code = emit(report, fmt.value)
    if code:
        raise typer.Exit(code)


#: The metavar of every option that counts tokens.
TOKENS = "TOKENS"


def token_option(
    default: Any,
    *names: str,
    help: str,
    minimum: int = 1,
    maximum: int = MAX_TOKENS,
    **settings: Any,
) -> Any:
    """An option counting tokens, read as --ctx reads one (8192, 8k, 128k, 1m) and held to
    [``minimum``, ``maximum``], which ``min``/``max`` keep for a spec file's same field."""
    return typer.Option(
        default,
        *names,
        min=minimum,
        max=maximum,
        parser=_token_parser(max(names, key=len), minimum, maximum),
        metavar=TOKENS,
        help=help,
        **settings,
    )


def _token_parser(option: str, minimum: int, maximum: int) -> Callable[[Any], int]:
    def tokens(value: Any) -> int:
        if isinstance(value, int):  # the default, or a spec file's number
            return value
        from kvcalc.engine.units import UnitError, parse_tokens

        try:
            return parse_tokens(str(value), minimum, maximum, what="token count")
        except UnitError as exc:
            fail(f"{option}: {exc}")

    return tokens


#: What MODEL may be, in the help of every command that takes one.
MODEL_HELP = (
    "registry name (`kvcalc models`), Hugging Face repo id (org/name[@revision]) "
    "or config.json path"
)


F = TypeVar("F", bound=Callable[..., Any])


def grouped_options(
    command: F,
    argument: str,
    group: Callable[..., Any],
    parameters: dict[str, tuple[Any, Any]],
    first: bool = False,
) -> F:
    """Add ``parameters`` to ``command``'s options; it receives them as one ``group`` value,
    passed as ``argument``; ``first``: listed before its own options."""
    signature = inspect.signature(command)
    own = [p for p in signature.parameters.values() if p.name != argument]
    # After the arguments, before the command's own options (``--format`` last in Output).
    at = sum(isinstance(p.default, typer.models.ArgumentInfo) for p in own) if first else len(own)
    place = inspect.Parameter.POSITIONAL_OR_KEYWORD if first else inspect.Parameter.KEYWORD_ONLY
    added = [
        inspect.Parameter(name, place, default=option, annotation=kind)
        for name, (kind, option) in parameters.items()
    ]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> Any:
        options = group(**{name: kwargs.pop(name) for name in parameters})
        return command(**{argument: options}, **kwargs)

    wrapper.__signature__ = signature.replace(parameters=[*own[:at], *added, *own[at:]])  # type: ignore[attr-defined]
    wrapper.__annotations__ = {
        **{p.name: p.annotation for p in own},
        **{name: kind for name, (kind, _) in parameters.items()},
    }
    return wrapper  # type: ignore[return-value]


# ------------------------------------------------------------------ declared inputs

def input_option(
    inp: Input, *, default: Any = None, help: str | None = None
) -> tuple[Any, Any]:
    """The command-line option of a declared input (:mod:`kvcalc.engine.inputs`), and the type
    its value reaches the command as; ``default`` (``...``: required) and ``help`` override the
    declaration's."""
    names = (inp.flag, *inp.aliases, *((inp.short,) if inp.short else ()))
    value = inp.default if default is None else default
    text = inp.help if help is None else help
    extra: dict[str, Any] = {"rich_help_panel": inp.panel}
    if inp.metavar:
        extra["metavar"] = inp.metavar
    if inp.completion:
        extra["autocompletion"] = COMPLETIONS[inp.completion]
    optional = value is None
    if inp.unit == "tokens":
        low, high = inp.bounds()
        option = token_option(
            value, *names, help=text, minimum=int(low or 0), maximum=int(high or 0), **extra
        )
        return (int | None if optional else int), option
    if inp.unit == "count":
        bounds: dict[str, Any] = {
            k: v for k, v in (("min", inp.minimum), ("max", inp.maximum)) if v is not None
        }
        option = typer.Option(value, *names, help=text, **bounds, **extra)
        return (int | None if optional else int), option
    if inp.unit == "fraction":
        return (float | None), typer.Option(value, *names, help=text, **extra)
    if inp.unit == "flag" and optional:
        # On, off or not given (the engine's default): --name/--no-name.
        pair = "/".join((names[0], "--no-" + names[0].removeprefix("--")))
        return (bool | None), typer.Option(None, pair, *names[1:], help=text, **extra)
    if inp.unit == "flag":
        return bool, typer.Option(bool(value), *names, help=text, **extra)
    # Every option typed as text refuses a blank value, which the library would read as not
    # given (its default applied unannounced).
    extra["callback"] = _with_a_value(inp, required=value is ...)
    if inp.unit == "path":
        # Text, made a Path by the library: typer's Path type stats the name as it parses it.
        extra.setdefault("metavar", "PATH")
        extra["callback"] = _with_a_value(inp, file_name(names[0]))
        return (str | None), typer.Option(value, *names, help=text, **extra)
    if inp.unit in ("context", "contexts"):
        extra.setdefault("metavar", TOKENS)
    if inp.repeatable:
        return list[str], typer.Option(value, *names, help=text, **extra)
    return (str | None if optional else str), typer.Option(value, *names, help=text, **extra)


def _with_a_value(
    inp: Input, then: Callable[[Any], Any] | None = None, *, required: bool = False
) -> Callable[[Any], Any]:
    """The callback of a text option: a blank value refused (:func:`~kvcalc.engine.inputs.
    no_value`), named as the command line spells the option; ``then`` checks it further."""

    def checked(value: Any) -> Any:
        from kvcalc.engine.inputs import no_value

        blank = no_value(inp, value, required)
        if blank is not None:  # field given: the line keeps the option's own spelling
            raise InputError(blank.worded(lambda _: inp.flag), field=inp.name)
        return value if then is None else then(value)

    return checked


def file_name(option: str) -> Callable[[str | None], str | None]:
    """A file name as given, refused in one line when no file can be called it here (a lone
    surrogate, which the file system's encoding cannot write: opening it would raise)."""

    def checked(value: str | None) -> str | None:
        if value is not None:
            try:
                os.fsencode(value)
            except UnicodeEncodeError:
                fail(f"{option}: {value!r} cannot name a file (a character no file name "
                     "encodes); give the path as the shell spells it")
        return value

    return checked


def input_options(inputs: Iterable[Input]) -> dict[str, tuple[Any, Any]]:
    """The options of ``inputs``, by field name."""
    return {inp.name: input_option(inp) for inp in inputs}


def declared_options(inputs: Iterable[Input]) -> Callable[[F], F]:
    """Add the options of ``inputs`` (declared in the library: :mod:`kvcalc.command_inputs`)
    to a command, which receives their values as ``given``, by keyword: the API's."""
    parameters = input_options(inputs)

    def add(command: F) -> F:
        return grouped_options(command, "given", dict, parameters, first=True)

    return add


#: MODEL, the argument of every command about one model.
ModelArgument = typer.Argument(..., help=MODEL_HELP, autocompletion=complete_models)
