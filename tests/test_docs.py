"""The docs cannot drift from the CLI. Every Markdown file of the project's docs (README.md and
docs/**/*.md) is held to what kvcalc prints:

- each ```console block starting with `$ kvcalc ...` is run and must print exactly what it shows;
- each command has a page, docs/commands/<command>.md, whose options section is the command's
  --help (commands enumerated from COMMANDS in kvcalc/cli/app.py, so a new command gets a stub
  page from the update, which fails until someone writes it), and docs/commands/README.md's index
  is generated the same way;
- figures quoted in prose sit under a ``<!-- figures:`` marker and are checked against the
  commands it names, or are listed in UNPRINTED with why no command prints them;
- a fenced block under ``<!-- file: PATH -->`` is that file of the repository, as it is;
- the JSON keys prose names under a ``<!-- json-keys: ... -->`` marker are keys the commands it
  names print, so a renamed key fails the prose that still names the old one;
- every relative link leads to a file that exists, and every #anchor to one of its headings.

Regenerate the console blocks, the options sections and the index after a deliberate change with:
python tests/test_docs.py --update
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
COMMAND_PAGES = DOCS / "commands"
INDEX = COMMAND_PAGES / "README.md"


def doc_files() -> list[Path]:
    """README.md, then every page under docs/ in path order."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def name_of(path: Path) -> str:
    """A doc's path from the repository root, as UNPRINTED and the messages name it."""
    return path.relative_to(ROOT).as_posix()


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


# ------------------------------------------------------------------------ console examples

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


@functools.cache
def run_example(command: str) -> tuple[str, int]:
    """What ``command`` prints (stdout then stderr) and its exit code, run in-process from the
    repository root (examples name files relative to it). Cached: the docs quote many commands
    more than once (a block and the figures of the prose around it)."""
    from kvcalc.cli.app import app

    words = shlex.split(command)
    start = words.index("kvcalc")
    env = EXAMPLE_ENV | dict(word.split("=", 1) for word in words[:start])
    cwd = Path.cwd()
    os.chdir(ROOT)
    try:
        result = CliRunner().invoke(app, words[start + 1 :], env=env)
    finally:
        os.chdir(cwd)
    # Trailing spaces (rich pads table titles) are dropped so editors cannot break the docs.
    text = "\n".join(line.rstrip() for line in (result.stdout + result.stderr).splitlines())
    return text + "\n", result.exit_code


def examples() -> list[tuple[str, int, str, str]]:
    """(doc, line, command, expected output) of every console block of the docs."""
    found = []
    for path in doc_files():
        text = path.read_text()
        found += [
            (name_of(path), line_of(text, m.start()), m.group(1), m.group(2))
            for m in BLOCK.finditer(text)
        ]
    return found


def test_docs_have_examples() -> None:
    assert len([e for e in examples() if e[0] == "README.md"]) >= 3
    assert len(examples()) >= 40


@pytest.mark.parametrize(
    ("doc", "line", "command", "expected"),
    examples(),
    ids=[f"{e[0]}:{e[1]}" for e in examples()],
)
def test_example_output(doc: str, line: int, command: str, expected: str) -> None:
    output, _ = run_example(command)
    assert output == expected, (
        f"{doc} line {line}: the block for `{command}` is stale; run python tests/test_docs.py "
        "--update"
    )


# ------------------------------------------------------------- files shown as they are

#: A file of the repository shown whole (an example spec, a workflow): the marker names it and the
#: fenced block after it is its text.
SHOWN = re.compile(r"<!-- file: (\S+) -->\n```(\w*)\n(.*?)^```", re.S | re.M)


def shown_files() -> list[tuple[str, int, str, str]]:
    """(doc, line, file, the block's text) of every file a doc shows."""
    found = []
    for path in doc_files():
        text = path.read_text()
        found += [
            (name_of(path), line_of(text, m.start()), m.group(1), m.group(3))
            for m in SHOWN.finditer(text)
        ]
    return found


def test_shown_files_are_the_files() -> None:
    shown = shown_files()
    assert {file for _, _, file, _ in shown} >= {
        "examples/capacity.yaml",
        "examples/capacity-fails.yaml",
        "examples/github-workflow.yml",
    }
    for doc, line, file, block in shown:
        assert (ROOT / file).read_text() == block, f"{doc} line {line}: {file} differs; --update"


# ----------------------------------------------------- command pages, generated from --help

#: --help is wrapped by the option parser at the terminal's width: fixed, so the reference is the
#: same on every machine (click caps it at 80 and wraps two columns earlier).
HELP_WIDTH = 80
#: A command page's options sit between these lines (the update rewrites what is between them).
OPTIONS_BEGIN = "<!-- BEGIN options (python tests/test_docs.py --update) -->"
OPTIONS_END = "<!-- END options -->"
OPTIONS = re.compile(re.escape(OPTIONS_BEGIN) + r"\n.*?" + re.escape(OPTIONS_END), re.DOTALL)
INDEX_BEGIN = "<!-- BEGIN command index (python tests/test_docs.py --update) -->"
INDEX_END = "<!-- END command index -->"
INDEX_SECTION = re.compile(re.escape(INDEX_BEGIN) + r"\n.*?" + re.escape(INDEX_END), re.DOTALL)
#: What the update writes into a page it creates for a new command; a page holding it fails.
STUB = "STUB (written by tests/test_docs.py --update):"


def help_text(args: list[str]) -> str:
    """``kvcalc ARGS --help`` at a fixed width, without colour, trailing spaces dropped."""
    from kvcalc.cli.app import app

    env = {**EXAMPLE_ENV, "COLUMNS": str(HELP_WIDTH)}
    result = CliRunner().invoke(app, [*args, "--help"], env=env, terminal_width=HELP_WIDTH)
    assert result.exit_code == 0, result.stderr
    return "\n".join(line.rstrip() for line in result.stdout.splitlines()) + "\n"


def commands() -> list[str]:
    from kvcalc.cli.app import COMMANDS

    return list(COMMANDS)


def page_of(command: str) -> Path:
    return COMMAND_PAGES / f"{command}.md"


def options_section(args: list[str]) -> str:
    """The generated section of a page: ``kvcalc ARGS --help`` as the CLI prints it."""
    command = " ".join(["kvcalc", *args, "--help"])
    help_block = help_text(args).rstrip("\n")
    return "\n".join(
        [OPTIONS_BEGIN, "", f"`{command}`:", "", "```text", help_block, "```", "", OPTIONS_END]
    )


def short_help(command: str) -> str:
    """The command's one-line description, as `kvcalc --help` lists it but not cut short."""
    import typer

    from kvcalc.cli.app import app

    group = typer.main.get_command(app)
    found = group.get_command(None, command)  # type: ignore[attr-defined]
    return " ".join(str(found.get_short_help_str(limit=1000)).split())


def index_section() -> str:
    """docs/commands/README.md's generated part: a link per command and `kvcalc --help`."""
    rows = ["| command | what it answers |", "|---|---|"]
    rows += [f"| [`kvcalc {c}`]({c}.md) | {short_help(c).replace('|', '/')} |" for c in commands()]
    root = help_text([]).rstrip("\n")
    return "\n".join(
        [INDEX_BEGIN, "", *rows, "", "`kvcalc --help`:", "", "```text", root, "```", "", INDEX_END]
    )


def stub_page(command: str) -> str:
    return "\n".join(
        [
            f"# `kvcalc {command}`",
            "",
            f"{STUB} say what `kvcalc {command}` answers, show it on a real example (a console",
            "block the tests run) and explain the formulas and sources behind its figures.",
            "",
            "## Options",
            "",
            options_section([command]),
            "",
        ]
    )


def test_every_command_has_a_page() -> None:
    missing = [c for c in commands() if not page_of(c).is_file()]
    assert not missing, (
        f"no docs/commands page for {missing}: run python tests/test_docs.py --update, then "
        "write the page it creates"
    )


def test_every_command_page_is_a_command() -> None:
    pages = {p.stem for p in COMMAND_PAGES.glob("*.md") if p != INDEX}
    assert pages - set(commands()) == set(), "a docs/commands page names no command"


@pytest.mark.parametrize("command", commands())
def test_command_page_options_are_its_help(command: str) -> None:
    text = page_of(command).read_text()
    found = OPTIONS.findall(text)
    assert len(found) == 1, f"{name_of(page_of(command))} needs one {OPTIONS_BEGIN!r} section"
    assert found[0] == options_section([command]), (
        f"{name_of(page_of(command))}: the options are stale; run python tests/test_docs.py "
        "--update"
    )


def page_problems(command: str, text: str) -> list[str]:
    """What a command page lacks: written prose (not the update's stub), its title, and a real
    output of the command itself (which test_example_output runs)."""
    problems = []
    if STUB in text:
        problems.append("it is the update's stub")
    if not text.startswith(f"# `kvcalc {command}`\n"):
        problems.append(f"its title is not # `kvcalc {command}`")
    if not re.search(rf"```console\n\$ (?:[A-Z_]+=\S+ )*kvcalc {re.escape(command)}[ \n]", text):
        problems.append(f"no console example of `kvcalc {command}`")
    return problems


@pytest.mark.parametrize("command", commands())
def test_command_page_is_written(command: str) -> None:
    problems = page_problems(command, page_of(command).read_text())
    assert not problems, f"{name_of(page_of(command))}: {'; '.join(problems)}"


def test_a_stub_page_fails_until_written() -> None:
    stub = stub_page("size")
    assert len(page_problems("size", stub)) == 2  # the stub, and no example
    example = "```console\n$ kvcalc size llama3-8b\n...\n```\n"
    written = stub.replace(STUB, "What it answers.").replace("## Options", example + "## Options")
    assert page_problems("size", written) == []
    assert page_problems("sweep", written) == [
        "its title is not # `kvcalc sweep`",
        "no console example of `kvcalc sweep`",
    ]


def test_command_index_is_generated() -> None:
    found = INDEX_SECTION.findall(INDEX.read_text())
    assert found == [index_section()], "docs/commands/README.md is stale; run --update"


def test_help_width_is_the_generators_whatever_the_terminal() -> None:
    from kvcalc.cli.app import app

    # terminal_width reaches the subcommand's context: a narrow COLUMNS does not re-wrap it.
    env = {**EXAMPLE_ENV, "COLUMNS": "40"}
    narrow = CliRunner().invoke(app, ["sweep", "--help"], env=env, terminal_width=HELP_WIDTH)
    text = "\n".join(line.rstrip() for line in narrow.stdout.splitlines()) + "\n"
    assert text == help_text(["sweep"])
    assert max(map(len, text.splitlines())) <= HELP_WIDTH


def test_units_lists_every_option_that_counts_tokens() -> None:
    """docs/units.md names every option whose --help metavar is TOKENS, and no other."""
    option = re.compile(r"(--[a-z][a-z0-9-]*)(?:, --[a-z0-9-]+)* TOKENS")
    counted = {name for command in commands() for name in option.findall(help_text([command]))}
    page = " ".join((DOCS / "units.md").read_text().split())
    listed = page.split("(`TOKENS` in `--help`):", 1)[1].split("(`--window 4k`", 1)[0]
    assert set(re.findall(r"`(--[a-z][a-z0-9-]*)`", listed)) == counted


def test_exit_codes_are_the_cli_s() -> None:
    """docs/exit-codes.md has a row per exit code the command line ends with, and no other."""
    from kvcalc.cli import app as cli

    page = (DOCS / "exit-codes.md").read_text()
    rows = {int(code) for code in re.findall(r"^\| (\d+) \|", page, re.M)}
    codes = {cli.EXIT_OK, cli.EXIT_DOES_NOT_FIT, cli.EXIT_USAGE, cli.EXIT_INTERNAL}
    assert rows == codes == {0, 1, 2, 3}
    assert "`KVCALC_DEBUG=1` shows the traceback" in page


def test_docs_document_shell_completion() -> None:
    page = (DOCS / "shell-completion.md").read_text()
    root_help = help_text([])
    for option in ("--install-completion", "--show-completion"):
        assert f"kvcalc {option}" in page
        assert option in root_help


# ------------------------------------------------------------------------------------- links

#: Pages other branches of issue 16 write; until they land a link to them may lead nowhere.
#: Drop an entry once its page exists (a test says so).
PENDING: dict[str, str] = {
}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```[^\n]*", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = heading.strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    found: set[str] = set()
    for m in re.finditer(r"^#{1,6} (.+)$", FENCE.sub("", text), re.M):
        base = slug(m.group(1))
        name, n = base, 0
        while name in found:  # GitHub numbers a repeated heading's anchor
            n += 1
            name = f"{base}-{n}"
        found.add(name)
    return found


def broken_links(path: Path) -> Iterator[str]:
    text = path.read_text()
    for m in LINK.finditer(FENCE.sub("", text)):
        target = m.group(1)
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        file, _, anchor = target.partition("#")
        goal = (path.parent / file).resolve() if file else path
        where = f"{name_of(path)}: ({target})"
        if not goal.exists():
            if goal.is_relative_to(ROOT) and name_of(goal) in PENDING:
                continue
            yield f"{where} leads to no file"
        elif anchor and goal.suffix == ".md" and anchor not in anchors(goal.read_text()):
            yield f"{where}: {name_of(goal)} has no heading #{anchor}"


def test_every_link_leads_somewhere() -> None:
    broken = [problem for path in doc_files() for problem in broken_links(path)]
    assert not broken, "; ".join(broken)


def test_pending_pages_are_still_pending() -> None:
    landed = [page for page in PENDING if (ROOT / page).exists()]
    assert not landed, f"{landed} exist now: drop them from PENDING in tests/test_docs.py"


#: A path of the repository named in prose (``kvcalc/engine/vllm.py``, ``tests/test_hf.py``).
PATH = re.compile(
    r"(?<![\w/.\-])((?:kvcalc|tests|model_configs|examples|benchmarks|\.ci)/[\w./\-]*[\w/])"
)
#: Paths the docs name that are not files of the repository: path -> (the doc naming it, why).
NOT_FILES: dict[str, tuple[str, str]] = {
    "model_configs/models/qwen2.5-7b-instruct.yaml": (
        "docs/commands/import-hf.md",
        "where import-hf's example writes its entry",
    ),
    "kvcalc/engine/serving/NAME.py": ("docs/serving.md", "the module a new engine adds"),
}


def test_paths_named_exist() -> None:
    """A module moved or renamed fails the prose still naming its old path."""
    missing: list[str] = []
    for path in doc_files():
        # Not the generated sections: the CLI's own help may name a path as an example.
        text = FENCE.sub("", OPTIONS.sub("", INDEX_SECTION.sub("", path.read_text())))
        named = sorted({m.group(1) for m in PATH.finditer(text)} - set(NOT_FILES))
        missing += [f"{name_of(path)}: {p}" for p in named if not (ROOT / p).exists()]
    assert not missing, f"paths named in the docs that do not exist: {'; '.join(missing)}"
    for p, (doc, _) in NOT_FILES.items():  # each still named where it says (or that doc pending)
        assert p in (ROOT / doc).read_text() if (ROOT / doc).exists() else doc in PENDING


def test_anchors_are_githubs() -> None:
    assert slug("Architecture what-ifs (`--as`)") == "architecture-what-ifs---as"
    assert slug("`kvcalc size`") == "kvcalc-size"
    assert anchors("# A\n```\n# not a heading\n```\n## A\n") == {"a", "a-1"}


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


def figure_spans() -> list[tuple[str, int, list[str], set[str], str]]:
    """(doc, line, commands, given figures, prose) of each figures marker of the docs."""
    spans = []
    for path in doc_files():
        text = path.read_text()
        for match in FIGURES.finditer(text):
            line = line_of(text, match.start())
            lines = [part.strip() for part in match.group(1).splitlines() if part.strip()]
            given = {f for part in lines if part.startswith("given:") for f in part[6:].split()}
            names = [part for part in lines if part.startswith("kvcalc ")]
            assert len(names) + any(part.startswith("given:") for part in lines) == len(lines), (
                f"{name_of(path)} line {line}: a figures marker holds `kvcalc ...` lines and "
                "one `given:` line"
            )
            spans.append((name_of(path), line, names, given, match.group(2)))
    return spans


def test_docs_tie_prose_figures_to_commands() -> None:
    spans = figure_spans()
    assert len(spans) >= 3
    for doc, line, names, _, prose in spans:
        assert names, f"{doc} line {line}: a figures marker names no command"
        assert FIGURE.search(prose), f"{doc} line {line}: a figures marker over no figure"


def test_figures_are_found_as_whole_numbers() -> None:
    text = "53.85 GiB, 441,152 tokens (53.85x); 0.5.6, Llama-3.1-8B, 8k, 2048, 107.77B, 4.5a"
    assert FIGURE.findall(text) == ["53.85", "441,152", "53.85", "107.77"]
    assert printed("413,442", "#tokens: 413442, pool") and printed("0.9", "util 0.9)")
    assert not printed("0.9", "util 0.90") and not printed("53.85", "153.85")
    assert not printed("441,152", "4,441,152")


@pytest.mark.parametrize(
    ("doc", "line", "names", "given", "prose"),
    figure_spans(),
    ids=[f"{span[0]}:{span[1]}" for span in figure_spans()],
)
def test_prose_figures_are_what_the_cli_prints(
    doc: str, line: int, names: list[str], given: set[str], prose: str
) -> None:
    output = "\n".join(run_example(command)[0] for command in names)
    quoted = FIGURE.findall(NOT_PROSE.sub(_blank, prose))  # not the commands of a marker
    missing = [f for f in quoted if f not in given and not printed(f, output)]
    assert not missing, (
        f"{doc} line {line}: {', '.join(missing)} quoted but not printed by "
        f"{' / '.join(names)}; fix the prose (or list an input under given:)"
    )
    unused = sorted(given - set(quoted))
    assert not unused, f"{doc} line {line}: given figures {unused} are not in the prose"


# ------------------------------------------------- every figure of the prose checked or explained

#: The figures of the docs' prose that no command prints, each with why, per doc: a phrase of the
#: doc as written (any run of spaces and line breaks matches a space) -> the reason and, for a
#: quoted figure, its source. A figure outside every figures span must sit in one of these
#: phrases; a phrase no longer in its doc, or holding no figure, fails the test too.
UNPRINTED: dict[str, dict[str, str]] = {
    "README.md": {
        "Python 3.10 or newer": "the Python kvcalc requires (pyproject.toml requires-python)",
        "'huggingface_hub>=0.20'": (
            "the hub extra's requirement (pyproject.toml; tests/test_hub.py checks it against "
            "kvcalc's metadata)"
        ),
        "'matplotlib>=3.7'": (
            "the plot extra's requirement (pyproject.toml; tests/test_sweep.py checks it against "
            "kvcalc's metadata); the --plot refusal prints it only without matplotlib"
        ),
    },
    "docs/commands/check.md": {
        "more than 20,000 keys and values": (
            "check's node cap (MAX_NODES in kvcalc/registry/check_spec.py); "
            "tests/test_check_spec.py holds the refusal at it"
        ),
        "four\nrequirements each holds 17,500": (
            "the node count of a 500-deployment spec, worked in the README's own sentence; "
            "tests/test_check_spec.py loads such a spec"
        ),
        "YAML 1.1": "the YAML version whose implicit typing a spec does not follow: a version",
        "(`32`, `0.9`, `1e3`)": "examples of how a check spec writes numbers: inputs",
    },
    "docs/commands/sweep.md": {
        "'matplotlib>=3.7'": (
            "the plot extra's requirement (pyproject.toml; tests/test_sweep.py checks it against "
            "kvcalc's metadata); the --plot refusal prints it only without matplotlib"
        ),
    },
    "docs/engines.md": {
        "DeepSeek-V3 to V4, GLM-4.6 to 5, Qwen3.5/3.6": "model families' names, not figures",
        "1,024 on a GPU of at least 70 GiB that is not an A100, else 256": (
            "vllm serve's default --max-num-seqs (kvcalc/engine/vllm_releases.py, after vLLM's "
            "get_batch_defaults), a rule, printed as max_num_seqs in the JSON"
        ),
        "vLLM 0.19": (
            "the vLLM release whose profiler the budget formula's overhead follows and whose "
            "logs set its constants (kvcalc/engine/overhead.py): a version, not a computed figure"
        ),
        "(r = 0.9)": (
            "SGLang's --mamba-full-memory-ratio default (kvcalc/engine/sglang.py, after SGLang's "
            "server_args.py), which no kvcalc option shows"
        ),
        "less non-torch memory (0.25 GiB at TP 1, 2.1 GiB with TP >= 2, 0.07 GiB": (
            "vLLM 0.19.0's non-torch memory as its H100 logs show it (kvcalc/engine/overhead.py "
            "NON_TORCH_*), a part of the overhead that no command prints apart"
        ),
        "(3.72 copies of 1,024 rows of fp32 logits": (
            "the sampler's peak as vLLM 0.19.0's logs show it (kvcalc/engine/overhead.py) over its "
            "default max_num_seqs, not printed apart"
        ),
        "is within 2.6% of the logged one, median 0.1%": (
            "the largest and median error of the KV cache size over "
            "tests/test_weights_vs_logs.py's 40 vLLM 0.19.0 start-ups, which that test bounds (5%, "
            "median 1%)"
        ),
    },
    "docs/huggingface.md": {
        "'huggingface_hub>=0.20'": (
            "the hub extra's requirement (pyproject.toml; tests/test_hub.py checks it against "
            "kvcalc's metadata)"
        ),
    },
    "docs/registry.md": {
        "at most 100,000 layers": (
            "a bound of the registry loader (kvcalc/registry/schema.py MAX_LAYERS), printed only "
            "in the refusal of a file beyond it"
        ),
        "but 2.5 GiB for Llama-4-Scout's 10M positions and 0.56 GiB for Gemma-3-4B's and -12B's": (
            "the RoPE tables' bytes (kvcalc/engine/weights.py rotary_cache_bytes: positions x "
            "rotary dims x 2 bytes; tests/test_weights_vs_logs.py checks Scout's and 27B's), which "
            "commands print only inside the weights per GPU"
        ),
        "(0.28 GiB for 27B's 128-wide heads)": (
            "as above: Gemma-3-27B's two tables, 9 x 131,072 x 128 x 2 bytes "
            "(tests/test_weights_vs_logs.py)"
        ),
        "are within 0.9% for plain bf16/fp16": (
            "the largest error of kvcalc's weights per GPU over tests/test_weights_vs_logs.py's 32 "
            "vLLM 0.19.0 logs (llm-d-planner accuracy runs), which that test bounds (4%, median 1%)"
        ),
        "median 0.05% over 32 runs": "as above: the median error of those 32 runs",
        "+1.5% and +2.3%": "as above: the two gpt-oss TP 1 runs of llm-d-planner's empirical notes",
        "3,080 tokens per image": (
            "Pixtral's image tokens (1540 / 14 = 110 patches a side, merged 2 x 2: 55 rows of 55 "
            "and a break token, 55 x 56; tests/test_hf.py); no command prints tokens per image"
        ),
        "107.77B text + 0.87B vision = 108.64B": (
            "parameter counts (kvcalc/engine/weights.py param_counts; the tower's 871,932,416 is "
            "tests/test_weights.py's), which no command prints"
        ),
        "7.62B text + 0.68B vision = 8.29B": (
            "as above (tests/test_hf.py: the checkpoint's safetensors total 8,292,166,656, the "
            "tower's 676,550,144)"
        ),
        "the tower's 676,550,144 exactly": "as above (tests/test_hf.py)",
        "one image costs 16,384 tokens": (
            "the image processor's largest image, 256 x 256 patches merged 2 x 2 "
            "(tests/test_hf.py); no command prints tokens per image"
        ),
        "loads 44.76 GiB": (
            "vLLM's logged weights, which kvcalc's weights per GPU match "
            "(tests/test_weights_vs_logs.py holds the log figure); quoted from the log"
        ),
        "its RedHat w8a8 24.06 / 24.07 GiB": (
            "kvcalc's and the log's weights of that checkpoint (tests/test_weights_vs_logs.py, "
            "quoted from the log)"
        ),
        "(24.01B parameters, 0.44B of them vision)": (
            "parameter counts (tests/test_weights.py test_mistral_small_3_1_count: 24,011,361,280 "
            "and 438,958,080), which no command prints"
        ),
        "3,000 examples": "the fuzz test's example count under CI (tests/test_fuzz.py EXAMPLES)",
    },
    "docs/sizing.md": {
        "vLLM 0.19": (
            "the vLLM release whose --mamba-cache-dtype default the state bytes follow "
            "(kvcalc/engine/kv.py): a version, not a computed figure"
        ),
        "which vLLM 0.33": "a vLLM release that honours mamba_ssm_dtype: a version",
        "holds 61,440 B of bf16 conv state and 3,145,728 B": (
            "the two parts of one Gated DeltaNet layer's state, worked from Qwen3.5-27B's config "
            "in tests/test_qwen35.py; size prints their sum per layer group"
        ),
        "(r = 4: 81,920 bytes; r = 128: 524,288)": (
            "one layer's compressor state, worked from DeepSeek-V4-Flash's config in "
            "tests/test_dsv4.py; size prints the sum over a group's layers"
        ),
        "at\nvLLM 0.33's own blocks": (
            "the vLLM release whose DeepSeek-V4 blocks are modelled: a version"
        ),
        "5 groups, 1,002,240 bytes per block": (
            "arch-2026.md's worked vLLM block of DeepSeek-V4-Flash, recomputed in "
            "tests/test_dsv4.py; the vLLM report prints blocks and tokens, not bytes per block"
        ),
    },
    "docs/units.md": {
        "int4 0.5, int2 0.25 per value": (
            "a dtype's bytes per value, the definition of the dtype (kvcalc/engine/units.py); "
            "commands print bytes per token and per sequence"
        ),
    },
}

#: What is not prose: fenced blocks (console examples, code, text) and HTML comments (the
#: markers); the generated sections are fenced blocks too.
NOT_PROSE = re.compile(r"^```.*?^```[^\n]*|<!--.*?-->", re.S | re.M)


def _blank(match: re.Match[str]) -> str:
    """The match as spaces, its line breaks kept, so that offsets and lines stay put."""
    return re.sub(r"[^\n]", " ", match.group(0))


def prose_figures(text: str) -> list[tuple[int, str]]:
    """(offset, figure) of every figure of the prose: outside fenced blocks and comments."""
    prose = NOT_PROSE.sub(_blank, text)
    return [(m.start(), m.group(0)) for m in FIGURE.finditer(prose)]


def unchecked_figures(text: str, unprinted: dict[str, str]) -> tuple[list[str], list[str]]:
    """The figures of ``text``'s prose neither in a figures span (whose test runs its commands)
    nor in a phrase of ``unprinted`` (``line N: FIGURE``), and the phrases that are stale: not
    in the prose, or holding no figure."""
    figures = prose_figures(text)
    covered = [range(*m.span(2)) for m in FIGURES.finditer(text)]
    stale = []
    for phrase in unprinted:
        found = [
            range(*m.span())
            for m in re.finditer(r"\s+".join(map(re.escape, phrase.split())), text)
        ]
        if not any(at in span for at, _ in figures for span in found):
            stale.append(phrase)
        covered += found
    unchecked = [
        f"line {line_of(text, at)}: {figure}"
        for at, figure in figures
        if not any(at in span for span in covered)
    ]
    return unchecked, stale


@pytest.mark.parametrize("doc", [name_of(p) for p in doc_files()])
def test_every_prose_figure_is_checked_or_explained(doc: str) -> None:
    unchecked, stale = unchecked_figures((ROOT / doc).read_text(), UNPRINTED.get(doc, {}))
    assert not unchecked, (
        f"{doc}: figures no command checks: {'; '.join(unchecked)}. Put the prose under a "
        "`<!-- figures:` marker naming the command that prints them, or, if none does, add the "
        f"phrase and why to UNPRINTED[{doc!r}] in tests/test_docs.py"
    )
    assert not stale, f"UNPRINTED phrases not in {doc}'s prose or without a figure: {stale}"


def test_unprinted_names_docs_that_exist() -> None:
    assert set(UNPRINTED) <= {name_of(p) for p in doc_files()} | set(PENDING)


SYNTHETIC = """# kvcalc
Python 3.10 or newer; the cache holds 1.25 GiB at 8,192 tokens.

<!-- figures:
kvcalc size llama3-70b --ctx 8k
given: 4.75
-->
Checked: 2.50 GiB and 4.75 GiB.

```console
$ kvcalc size llama3-70b
3.75 GiB
```

After the block: 6.25 GiB. <!-- 7.25 in a comment -->
"""


def test_a_new_unchecked_figure_fails() -> None:
    table = {"Python 3.10 or newer": "a requirement"}
    # Outside the span and the table: 1.25, 8,192 and the figure after the fenced block (a span
    # ends there); the span's, the block's and the comment's are not the prose's to explain.
    assert unchecked_figures(SYNTHETIC, table) == (
        ["line 2: 1.25", "line 2: 8,192", "line 15: 6.25"],
        [],
    )
    explained = {**table, "holds 1.25 GiB at 8,192": "why", "After the block: 6.25": "why"}
    assert unchecked_figures(SYNTHETIC, explained) == ([], [])
    # A phrase gone from the prose, or without a figure, is stale; a block's figure is no prose.
    stale = {**explained, "no such phrase 9.5": "why", "Checked:": "why", "3.75 GiB": "why"}
    assert unchecked_figures(SYNTHETIC, stale)[1] == ["no such phrase 9.5", "Checked:", "3.75 GiB"]
    added = SYNTHETIC.replace("6.25 GiB.", "6.25 GiB, then 8.5 GiB.")
    assert unchecked_figures(added, explained) == (["line 15: 8.5"], [])


# ----------------------------------------------------------------- JSON keys named in prose

#: A marker in prose that names JSON (or CSV) keys: the commands whose output holds them, separated
#: by ``;``. Its span is the rest of the paragraph (up to a blank line) or up to
#: ``<!-- end json-keys -->``; every key written in backticks there (``kv_bytes_per_token``,
#: ``steps``: a lower-case name) or as a JSON object's key (``{"accelerators": [...]}``) must be
#: a whole word of those commands' output, unless it is one of NOT_KEYS.
JSON_KEYS = re.compile(
    r"<!-- json-keys:\n(.*?)-->(.*?)(?=<!-- end json-keys -->|\n[ \t]*\n|\Z)", re.S
)
KEY = re.compile(r"`([a-z][a-z0-9]*(?:_[a-z0-9]+)*)`|\"([a-z][a-z0-9]*(?:_[a-z0-9]+)*)\":")
#: Words the json-keys spans write in backticks that are not keys, and why: values of a key,
#: command and format names. A one-word key (`steps`,
#: `contexts`) is checked like any other, so a paragraph naming one the JSON lacks fails.
NOT_KEYS: dict[str, str] = {
    **dict.fromkeys(
        ("size", "batch", "decode", "sweep", "plan", "compare", "offload", "check"),
        "a command's name (layout.md lists the commands whose JSON has the layout keys)",
    ),
    **dict.fromkeys(("csv", "table", "markdown"), "an output format (import-hf's)"),
    **dict.fromkeys(
        ("measured", "generic", "pcie", "network", "unknown"),
        "a value of decode's `efficiency_basis` or `link`",
    ),
    **dict.fromkeys(
        ("none", "streamingllm", "h2o", "snapkv"), "a value of eviction's `policy`"
    ),
    "hbm": "offload's first `tier`",
    **dict.fromkeys(("load", "recompute"), "a value of offload's `faster`"),
    **dict.fromkeys(("estimate", "roofline"), "a value of plan's `latency`"),
    **dict.fromkeys(("closed_batch", "disaggregated"), "a value of plan's `workload_kind`"),
    "weights": "import-hf's block for a quantized checkpoint, which the example is not",
}
COMMAND = re.compile(r"(?:[A-Z_]+=\S+ )*kvcalc ")


def key_spans() -> list[tuple[str, int, list[str], list[str]]]:
    """(doc, line, commands, keys named) of every json-keys marker of the docs."""
    spans = []
    for path in doc_files():
        text = path.read_text()
        for m in JSON_KEYS.finditer(text):
            names = [" ".join(c.split()) for c in m.group(1).split(";") if c.strip()]
            written = KEY.findall(NOT_PROSE.sub(_blank, m.group(2)))
            keys = [k for pair in written for k in pair if k and k not in NOT_KEYS]
            spans.append((name_of(path), line_of(text, m.start()), names, keys))
    return spans


@pytest.mark.parametrize(
    ("doc", "line", "names", "keys"),
    key_spans(),
    ids=[f"{span[0]}:{span[1]}" for span in key_spans()],
)
def test_json_keys_in_prose_are_printed(
    doc: str, line: int, names: list[str], keys: list[str]
) -> None:
    assert names and all(COMMAND.match(n) for n in names), f"{doc} line {line}: `kvcalc ...`s"
    assert all(re.search(r"--format (json|csv)$", n) for n in names), (
        f"{doc} line {line}: each command of a json-keys marker ends in --format json or csv"
    )
    assert keys, f"{doc} line {line}: a json-keys marker over no key"
    printed_keys = sorted(set().union(*(printed_keys_of(command) for command in names)))
    missing = [k for k in dict.fromkeys(keys) if k not in printed_keys]
    hints = [f"{k} (now {' or '.join(close(k, printed_keys)) or 'gone'}?)" for k in missing]
    assert not missing, (
        f"{doc} line {line}: {'; '.join(hints)} named but not printed by "
        f"{' / '.join(names)}; a key was renamed or dropped: fix the prose"
    )


def printed_keys_of(command: str) -> set[str]:
    """The keys ``command`` prints: a JSON document's object keys at any depth, or a CSV
    header's columns (a key's word elsewhere, in a value or a warning, is not a key)."""
    output, _ = run_example(command)
    if command.endswith("--format csv"):
        return set(output.splitlines()[0].split(",")) if output.strip() else set()
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            found.update(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    import json

    # stdout holds the document; warnings (stderr) follow it on lines of their own.
    walk(json.JSONDecoder().raw_decode(output.lstrip())[0])
    return found


def test_one_word_and_object_keys_are_keys() -> None:
    written = KEY.findall('`steps`, `kv_bytes_per_token`, {"accelerators": [...]}, `--ctx`, `Foo`')
    assert [k for pair in written for k in pair if k] == [
        "steps",
        "kv_bytes_per_token",
        "accelerators",
    ]


def test_not_keys_are_written_in_a_span() -> None:
    """A word of NOT_KEYS no span writes any more is dropped, so the list cannot hide a key."""
    written = set()
    for path in doc_files():
        for m in JSON_KEYS.finditer(path.read_text()):
            written |= {k for pair in KEY.findall(NOT_PROSE.sub(_blank, m.group(2))) for k in pair}
    assert set(NOT_KEYS) - written == set()


def close(key: str, printed_keys: list[str]) -> list[str]:
    """The printed keys a renamed ``key`` most likely became, for the failure's hint."""
    import difflib

    return difflib.get_close_matches(key, printed_keys, n=2, cutoff=0.6)


@pytest.mark.parametrize("command", commands())
def test_command_page_ties_its_json_to_the_cli(command: str) -> None:
    doc = name_of(page_of(command))
    named = [n for d, _, names, _ in key_spans() if d == doc for n in names]
    assert any(COMMAND.match(n) and f"kvcalc {command} " in n for n in named), (
        f"{doc}: its JSON keys are under no `<!-- json-keys: kvcalc {command} ... -->` marker"
    )


# ------------------------------------------------------------------------------------ update


def update() -> None:
    """Rewrite every console block with what it prints now, every command page's options (a
    stub page for a command without one) and the command index."""
    COMMAND_PAGES.mkdir(parents=True, exist_ok=True)
    for command in commands():
        if not page_of(command).exists():
            page_of(command).write_text(stub_page(command))
            sys.stderr.write(f"wrote a stub {name_of(page_of(command))}: write it\n")
    for path in doc_files():
        text = path.read_text()

        def replace(match: re.Match[str]) -> str:
            output, _ = run_example(match.group(1))
            return f"```console\n$ {match.group(1)}\n{output}```"

        new = BLOCK.sub(replace, text)
        new = SHOWN.sub(
            lambda m: f"<!-- file: {m.group(1)} -->\n```{m.group(2)}\n"
            f"{(ROOT / m.group(1)).read_text()}```",
            new,
        )
        if path.parent == COMMAND_PAGES and path.stem in commands():
            found = OPTIONS.search(new)
            if not found:
                raise SystemExit(f"{name_of(path)} has no {OPTIONS_BEGIN!r} ... section")
            new = new[: found.start()] + options_section([path.stem]) + new[found.end() :]
        if path == INDEX:
            if not INDEX_SECTION.search(new):
                raise SystemExit(f"{name_of(path)} has no {INDEX_BEGIN!r} ... section")
            new = INDEX_SECTION.sub(lambda _: index_section(), new)
        if new != text:
            path.write_text(new)


if __name__ == "__main__" and "--update" in sys.argv:
    update()
