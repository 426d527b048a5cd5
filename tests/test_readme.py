"""The README's console examples are real: each ```console block starting with `$ kvcalc ...`
is run and must print exactly what the README shows.

Regenerate the blocks after a deliberate change with: python tests/test_readme.py --update
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

README = Path(__file__).parent.parent / "README.md"
BLOCK = re.compile(r"```console\n\$ (kvcalc [^\n]*)\n(.*?)```", re.DOTALL)


#: The environment of every example, set for the one run and restored after it (CliRunner's
#: ``env``; None removes a variable), so neither the caller's shell nor other tests change it.
#: Hugging Face repo ids resolve offline from the fixture hub cache (Qwen/Qwen2.5-7B-Instruct).
EXAMPLE_ENV: dict[str, str | None] = {
    "NO_COLOR": "1",
    "COLUMNS": "160",
    "KVCALC_REGISTRY": None,
    "HF_HUB_CACHE": str(Path(__file__).parent / "fixtures" / "hub"),
    "HF_HUB_OFFLINE": "1",
    "HF_TOKEN": None,
}


def run_example(command: str) -> tuple[str, int]:
    from kvcalc.cli.app import app

    result = CliRunner().invoke(app, shlex.split(command)[1:], env=EXAMPLE_ENV)
    # Trailing spaces (rich pads table titles) are dropped so editors cannot break the README.
    text = "\n".join(line.rstrip() for line in (result.stdout + result.stderr).splitlines())
    return text + "\n", result.exit_code


def examples() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(README.read_text())]


def test_readme_has_examples() -> None:
    assert len(examples()) >= 3


@pytest.mark.parametrize(("command", "expected"), examples(), ids=lambda v: v[:40])
def test_readme_example_output(command: str, expected: str) -> None:
    output, _ = run_example(command)
    assert output == expected, f"README block for `{command}` is stale; run --update"


def update() -> None:
    text = README.read_text()

    def replace(match: re.Match[str]) -> str:
        output, _ = run_example(match.group(1))
        return f"```console\n$ {match.group(1)}\n{output}```"

    README.write_text(BLOCK.sub(replace, text))


if __name__ == "__main__" and "--update" in sys.argv:
    update()
