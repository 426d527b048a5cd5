"""The README cannot drift from the CLI: each ```console block starting with `$ kvcalc ...` is
run and must print exactly what the README shows, and the command reference between the
REFERENCE markers is every command's --help (commands enumerated from COMMANDS in
kvcalc/cli/app.py, so a new command appears after an update with no change here). Figures in
prose are checked too: under a ``<!-- figures:`` marker against the commands it names, and
every other one must be listed in UNPRINTED with why no command prints it.

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


# ------------------------------------------------- every figure of the prose checked or explained

#: The figures of the README's prose that no command prints, each with why: a phrase of the
#: README as written (any run of spaces and line breaks matches a space) -> the reason and, for
#: a quoted figure, its source. A figure outside every figures span must sit in one of these
#: phrases; a phrase no longer in the README, or holding no figure, fails the test too.
UNPRINTED: dict[str, str] = {
    "Python 3.10 or newer": "the Python kvcalc requires (pyproject.toml requires-python)",
    "'huggingface_hub>=0.20'": "the hub extra's requirement (pyproject.toml; tests/test_hub.py "
    "checks it against kvcalc's metadata)",
    "'matplotlib>=3.7'": "the plot extra's requirement (pyproject.toml; tests/test_sweep.py "
    "checks it against kvcalc's metadata); the --plot refusal prints it only without matplotlib",
    "vLLM 0.19": "the vLLM release the vllm engine and profile reproduce "
    "(kvcalc/engine/vllm.py, kvcalc/engine/overhead.py): a version, not a computed figure",
    "(r = 0.9)": "SGLang's --mamba-full-memory-ratio default (kvcalc/engine/sglang.py, after "
    "SGLang's server_args.py), which no kvcalc option shows",
    "more than 20,000 keys and values": "check's node cap (MAX_NODES in "
    "kvcalc/registry/check_spec.py); tests/test_check_spec.py holds the refusal at it",
    "four\nrequirements each holds 17,500": "the node count of a 500-deployment spec, worked in "
    "the README's own sentence; tests/test_check_spec.py loads such a spec",
    "which vLLM 0.33": "a vLLM release that honours mamba_ssm_dtype: a version",
    "holds 61,440 B of bf16 conv state and 3,145,728 B": "the two parts of one Gated DeltaNet "
    "layer's state, worked from Qwen3.5-27B's config in tests/test_qwen35.py; size prints "
    "their sum per layer group",
    "(r = 4: 81,920 bytes; r = 128: 524,288)": "one layer's compressor state, worked from "
    "DeepSeek-V4-Flash's config in tests/test_dsv4.py; size prints the sum over a"
    " group's layers",
    "at\nvLLM 0.33's own blocks": "the vLLM release whose DeepSeek-V4 blocks are modelled: a"
    " version",
    "5 groups, 1,002,240 bytes per block": "arch-2026.md's worked vLLM block of DeepSeek-V4-Flash, "
    "recomputed in tests/test_dsv4.py; the vLLM report prints blocks and"
    " tokens, not bytes per block",
    "YAML 1.1": "the YAML version whose implicit typing a spec does not follow: a version",
    "(`32`, `0.9`, `1e3`)": "examples of how a check spec writes numbers: inputs",
    "int4 0.5, int2 0.25 per value": "a dtype's bytes per value, the definition of the dtype "
    "(kvcalc/engine/units.py); commands print bytes per token and per sequence",
    "at most 100,000 layers": "a bound of the registry loader (kvcalc/registry/schema.py "
    "MAX_LAYERS), printed only in the refusal of a file beyond it",
    "but 2.5 GiB for Llama-4-Scout's 10M positions and 0.56 GiB for Gemma-3-4B's and -12B's": (
        "the RoPE tables' bytes (kvcalc/engine/weights.py rotary_cache_bytes: positions x "
        "rotary dims x 2 bytes; tests/test_weights_vs_logs.py checks Scout's and 27B's), which "
        "commands print only inside the weights per GPU"
    ),
    "(0.28 GiB for 27B's 128-wide heads)": "as above: Gemma-3-27B's two tables, "
    "9 x 131,072 x 128 x 2 bytes (tests/test_weights_vs_logs.py)",
    "are within 0.9% for plain bf16/fp16": "the largest error of kvcalc's weights per GPU over "
    "tests/test_weights_vs_logs.py's 32 vLLM 0.19.0 logs (llm-d-planner accuracy runs), which "
    "that test bounds (4%, median 1%)",
    "median 0.05% over 32 runs": "as above: the median error of those 32 runs",
    "+1.5% and +2.3%": "as above: the two gpt-oss TP 1 runs of llm-d-planner's empirical notes",
    "less non-torch memory (0.25 GiB at TP 1, 2.1 GiB with TP >= 2, 0.07 GiB": "vLLM 0.19.0's "
    "non-torch memory as its H100 logs show it (kvcalc/engine/overhead.py NON_TORCH_*), a part "
    "of the overhead that no command prints apart",
    "(3.72 copies of 1,024 rows of fp32 logits": "the sampler's peak as vLLM 0.19.0's logs show "
    "it (kvcalc/engine/overhead.py) over its default max_num_seqs, not printed apart",
    "is within 2.6% of the logged one, median 0.1%": "the largest and median error of the KV "
    "cache size over tests/test_weights_vs_logs.py's 40 vLLM 0.19.0 start-ups, which that test "
    "bounds (5%, median 1%)",
    "3,080 tokens per image": "Pixtral's image tokens (1540 / 14 = 110 patches a side, merged "
    "2 x 2: 55 rows of 55 and a break token, 55 x 56; tests/test_hf.py); no command prints "
    "tokens per image",
    "107.77B text + 0.87B vision = 108.64B": "parameter counts (kvcalc/engine/weights.py "
    "param_counts; the tower's 871,932,416 is tests/test_weights.py's), which no command prints",
    "7.62B text + 0.68B vision = 8.29B": "as above (tests/test_hf.py: the checkpoint's "
    "safetensors total 8,292,166,656, the tower's 676,550,144)",
    "the tower's 676,550,144 exactly": "as above (tests/test_hf.py)",
    "one image costs 16,384 tokens": "the image processor's largest image, 256 x 256 patches "
    "merged 2 x 2 (tests/test_hf.py); no command prints tokens per image",
    "loads 44.76 GiB": "vLLM's logged weights, which kvcalc's weights per GPU match "
    "(tests/test_weights_vs_logs.py holds the log figure); quoted from the log",
    "its RedHat w8a8 24.06 / 24.07 GiB": "kvcalc's and the log's weights of that checkpoint "
    "(tests/test_weights_vs_logs.py, quoted from the log)",
    "(24.01B parameters, 0.44B of them vision)": "parameter counts (tests/test_weights.py "
    "test_mistral_small_3_1_count: 24,011,361,280 and 438,958,080), which no command prints",
    "3,000 examples": "the fuzz test's example count under CI (tests/test_fuzz.py EXAMPLES)",
}

#: What is not prose: fenced blocks (console examples, code, text) and HTML comments (the
#: markers); the generated command reference is cut out by REFERENCE.
NOT_PROSE = re.compile(r"^```.*?^```[^\n]*|<!--.*?-->", re.S | re.M)


def _blank(match: re.Match[str]) -> str:
    """The match as spaces, its line breaks kept, so that offsets and lines stay put."""
    return re.sub(r"[^\n]", " ", match.group(0))


def prose_figures(text: str) -> list[tuple[int, str]]:
    """(offset, figure) of every figure of the prose: outside fenced blocks, comments and the
    command reference."""
    prose = NOT_PROSE.sub(_blank, REFERENCE.sub(_blank, text))
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
        f"line {text.count(chr(10), 0, at) + 1}: {figure}"
        for at, figure in figures
        if not any(at in span for span in covered)
    ]
    return unchecked, stale


def test_every_prose_figure_is_checked_or_explained() -> None:
    unchecked, stale = unchecked_figures(README.read_text(), UNPRINTED)
    assert not unchecked, (
        f"README figures no command checks: {'; '.join(unchecked)}. Put the prose under a "
        "`<!-- figures:` marker naming the command that prints them, or, if none does, add the "
        "phrase and why to UNPRINTED in tests/test_readme.py"
    )
    assert not stale, f"UNPRINTED phrases not in the README's prose or without a figure: {stale}"


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
