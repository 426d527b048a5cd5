"""The README cannot drift from the CLI: each ```console block starting with `$ kvcalc ...` is
run and must print exactly what the README shows, and the command reference between the
REFERENCE markers is every command's --help (commands enumerated from COMMANDS in
kvcalc/cli/app.py, so a new command appears after an update with no change here).

Regenerate both after a deliberate change with: python tests/test_readme.py --update
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

README = Path(__file__).parent.parent / "README.md"
#: A command may start with environment assignments (``HF_HUB_CACHE=tests/fixtures/hub kvcalc``).
BLOCK = re.compile(r"```console\n\$ ((?:[A-Z_]+=\S+ )*kvcalc [^\n]*)\n(.*?)```", re.DOTALL)


#: The environment of every example, set for the one run and restored after it (CliRunner's
#: ``env``; None removes a variable), so neither the caller's shell nor other tests change it.
#: A fresh install: an empty Hugging Face cache (under a home that does not exist) and no
#: downloads; an example that reads a cache names it (``HF_HUB_CACHE=tests/fixtures/hub``).
EXAMPLE_ENV: dict[str, str | None] = {
    "NO_COLOR": "1",
    "COLUMNS": "160",
    "KVCALC_REGISTRY": None,
    "HF_HOME": "/home/you/.cache/huggingface",
    "HF_HUB_CACHE": None,
    "HUGGINGFACE_HUB_CACHE": None,
    "HF_HUB_OFFLINE": "1",
    "HF_TOKEN": None,
}


def run_example(command: str) -> tuple[str, int]:
    from kvcalc.cli.app import app

    words = shlex.split(command)
    start = words.index("kvcalc")
    env = EXAMPLE_ENV | dict(word.split("=", 1) for word in words[:start])
    result = CliRunner().invoke(app, words[start + 1 :], env=env)
    # Trailing spaces (rich pads table titles) are dropped so editors cannot break the README.
    text = "\n".join(line.rstrip() for line in (result.stdout + result.stderr).splitlines())
    return text + "\n", result.exit_code


#: The generated reference sits between these lines (the update rewrites what is between them).
REFERENCE_BEGIN = "<!-- BEGIN command reference (python tests/test_readme.py --update) -->"
REFERENCE_END = "<!-- END command reference -->"
REFERENCE = re.compile(re.escape(REFERENCE_BEGIN) + r"\n.*?" + re.escape(REFERENCE_END), re.DOTALL)
#: --help is wrapped by the option parser at the terminal's width: fixed, so the reference is the
#: same on every machine (click caps it at 80 and wraps two columns earlier).
HELP_WIDTH = 80


def help_text(args: list[str]) -> str:
    """``kvcalc ARGS --help`` at a fixed width, without colour, trailing spaces dropped."""
    from kvcalc.cli.app import app

    env = {**EXAMPLE_ENV, "COLUMNS": str(HELP_WIDTH)}
    result = CliRunner().invoke(app, [*args, "--help"], env=env, terminal_width=HELP_WIDTH)
    assert result.exit_code == 0, result.stderr
    return "\n".join(line.rstrip() for line in result.stdout.splitlines()) + "\n"


def reference() -> str:
    """The marked section: `kvcalc --help`, then each command's --help in COMMANDS order."""
    from kvcalc.cli.app import COMMANDS

    parts = [REFERENCE_BEGIN, ""]
    for args in [[], *([name] for name in COMMANDS)]:
        command = " ".join(["kvcalc", *args, "--help"])
        parts += [f"### `{command}`", "", "```text", help_text(args).rstrip("\n"), "```", ""]
    return "\n".join([*parts, REFERENCE_END])


def examples() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(README.read_text())]


def test_readme_has_examples() -> None:
    assert len(examples()) >= 3


@pytest.mark.parametrize(("command", "expected"), examples(), ids=lambda v: v[:40])
def test_readme_example_output(
    command: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(README.parent)  # examples name files relative to the repository
    output, _ = run_example(command)
    assert output == expected, f"README block for `{command}` is stale; run --update"


def test_readme_reference_is_every_commands_help() -> None:
    found = REFERENCE.findall(README.read_text())
    assert len(found) == 1, "README needs one REFERENCE_BEGIN ... REFERENCE_END section"
    assert found[0] == reference(), "README command reference is stale; run --update"


def test_reference_lists_every_command() -> None:
    from kvcalc.cli.app import COMMANDS

    headings = re.findall(r"^### `kvcalc (\w[\w-]*) --help`$", reference(), re.MULTILINE)
    assert headings == list(COMMANDS)


def test_help_width_is_the_generators_whatever_the_terminal() -> None:
    from kvcalc.cli.app import app

    # terminal_width reaches the subcommand's context: a narrow COLUMNS does not re-wrap it.
    env = {**EXAMPLE_ENV, "COLUMNS": "40"}
    narrow = CliRunner().invoke(app, ["sweep", "--help"], env=env, terminal_width=HELP_WIDTH)
    text = "\n".join(line.rstrip() for line in narrow.stdout.splitlines()) + "\n"
    assert text == help_text(["sweep"])
    assert max(map(len, text.splitlines())) <= HELP_WIDTH


def test_readme_documents_shell_completion() -> None:
    section = README.read_text().split("## Shell completion", 1)[1].split("\n## ", 1)[0]
    root_help = help_text([])
    for option in ("--install-completion", "--show-completion"):
        assert f"kvcalc {option}" in section
        assert option in root_help


# ---------------------------------------------------------------- figures quoted in prose

#: A marker before prose that quotes the CLI: the commands whose output holds its figures, one per
#: line, and optionally a ``given:`` line of figures it states that no command prints (inputs,
#: defaults). Its span is the prose after it, up to ``<!-- end figures -->``, the next marker,
#: heading or fenced block.
FIGURES = re.compile(
    r"<!-- figures:\n(.*?)-->\n(.*?)(?=<!-- end figures -->|<!-- figures:|^#|^```|\Z)", re.S | re.M
)
#: A figure: a number written with a decimal point or thousands separators (16.5, 441,152,
#: 53.85x, 7.62B), not part of a version (0.5.6), a name (Llama-3.1-8B) or a longer number.
FIGURE = re.compile(
    r"(?<![\w.,\-])(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+)(?!\d|[.,]\d|(?![xB])\w)"
)


def without_separators(text: str) -> str:
    """Thousands separators dropped, so that 413,442 in prose matches a log's 413442."""
    return re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)


def printed(figure: str, output: str) -> bool:
    """Whether ``figure`` appears in ``output`` as a whole number (0.9 is not in 0.90)."""
    value = re.escape(without_separators(figure))
    return re.search(rf"(?<![\d.]){value}(?!\d|\.\d)", without_separators(output)) is not None


def figure_spans() -> list[tuple[int, list[str], set[str], str]]:
    """(README line, commands, given figures, prose) of each figures marker."""
    text = README.read_text()
    spans = []
    for match in FIGURES.finditer(text):
        lines = [line.strip() for line in match.group(1).splitlines() if line.strip()]
        given = {f for line in lines if line.startswith("given:") for f in line[6:].split()}
        commands = [line for line in lines if line.startswith("kvcalc ")]
        assert len(commands) + any(line.startswith("given:") for line in lines) == len(lines), (
            f"README line {text.count(chr(10), 0, match.start()) + 1}: a figures marker holds "
            "`kvcalc ...` lines and one `given:` line"
        )
        spans.append((text.count("\n", 0, match.start()) + 1, commands, given, match.group(2)))
    return spans


def test_readme_ties_prose_figures_to_commands() -> None:
    spans = figure_spans()
    assert len(spans) >= 3
    for line, commands, _, prose in spans:
        assert commands, f"README line {line}: a figures marker names no command"
        assert FIGURE.search(prose), f"README line {line}: a figures marker over no figure"


def test_figures_are_found_as_whole_numbers() -> None:
    text = "53.85 GiB, 441,152 tokens (53.85x); 0.5.6, Llama-3.1-8B, 8k, 2048, 107.77B, 4.5a"
    assert FIGURE.findall(text) == ["53.85", "441,152", "53.85", "107.77"]
    assert printed("413,442", "#tokens: 413442, pool") and printed("0.9", "util 0.9)")
    assert not printed("0.9", "util 0.90") and not printed("53.85", "153.85")
    assert not printed("441,152", "4,441,152")


@pytest.mark.parametrize(
    ("line", "commands", "given", "prose"),
    figure_spans(),
    ids=[f"line {span[0]}" for span in figure_spans()],
)
def test_readme_prose_figures_are_what_the_cli_prints(
    line: int, commands: list[str], given: set[str], prose: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(README.parent)
    outputs = [run_example(command)[0] for command in commands]
    output = "\n".join(outputs)
    quoted = FIGURE.findall(prose)
    missing = [f for f in quoted if f not in given and not printed(f, output)]
    assert not missing, (
        f"README line {line}: {', '.join(missing)} quoted but not printed by "
        f"{' / '.join(commands)}; fix the prose (or list an input under given:)"
    )
    unused = sorted(given - set(quoted))
    assert not unused, f"README line {line}: given figures {unused} are not in the prose"


def update() -> None:
    text = README.read_text()

    def replace(match: re.Match[str]) -> str:
        output, _ = run_example(match.group(1))
        return f"```console\n$ {match.group(1)}\n{output}```"

    text = BLOCK.sub(replace, text)
    if not REFERENCE.search(text):
        raise SystemExit(f"README.md has no {REFERENCE_BEGIN!r} ... {REFERENCE_END!r} section")
    README.write_text(REFERENCE.sub(lambda _: reference(), text))


if __name__ == "__main__" and "--update" in sys.argv:
    update()
