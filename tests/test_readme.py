"""README.md is the front page: at most 400 lines, opening with the two set-up commands CI runs
(.ci/run), the three uses kvcalc is for, a short tour, the Python API and links to docs/, where
the rest lives. Its console examples, prose figures and links are checked with every page of
docs/ by tests/test_docs.py.

Regenerate the README's examples (and the docs') with: python tests/test_readme.py --update
(the same as python tests/test_docs.py --update)
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
CI = ROOT / ".ci" / "run"
MAX_LINES = 400


def section(heading: str) -> str:
    """The README's text under ``## heading``, up to the next ``## `` heading."""
    text = README.read_text()
    assert f"\n## {heading}\n" in text, f"README has no `## {heading}` section"
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def ci_commands() -> list[str]:
    """The commands .ci/run runs, one per line, comments and blank lines dropped."""
    lines = (line.split(" #", 1)[0].strip() for line in CI.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def test_readme_is_short() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_LINES, f"README.md has {lines} lines; move detail into docs/"


def test_readme_opens_with_the_set_up_commands_ci_runs() -> None:
    text = README.read_text()
    opening = text.split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", opening, re.S)
    assert block, "the README opens with a ```sh block of its set-up commands"
    steps = [line.split(" #", 1)[0].strip() for line in block.group(1).splitlines()]
    assert len(steps) == 2, "two set-up commands: install and run; install and run the tests"
    ci = ci_commands()
    for step in steps:
        install, run = (part.strip() for part in step.split("&&"))
        # Each installs this checkout (`.` or `.[extras]`, editable or not) ...
        words = shlex.split(install)
        assert words[:2] == ["pip", "install"] and re.fullmatch(r"\.(\[[\w,]+\])?", words[-1])
        # ... and CI runs what it then runs, from a fresh install of the same checkout.
        assert run in ci, f"`{run}` is not run by .ci/run"
    # The tests' install is CI's, to the letter (the test extra is what pytest needs).
    assert steps[1].split("&&")[0].strip() in ci
    # The main command's output is shown, so tests/test_docs.py runs it as a fresh install would.
    main = steps[0].split("&&")[1].strip()
    assert f"```console\n$ {main}\n" in text


def test_readme_names_the_three_uses_each_with_an_example() -> None:
    uses = re.split(r"^### ", section("Who it is for"), flags=re.M)[1:]
    titles = [use.split("\n", 1)[0] for use in uses]
    assert len(titles) == 3
    for title, words in zip(
        titles, ("Serving engineers", "Researchers", "CI pipelines"), strict=True
    ):
        assert title.startswith(words)
    for use in uses:
        assert "```console\n$ kvcalc " in use, "each use shows a real example"


def test_readme_has_a_short_tour() -> None:
    assert section("A short tour").count("```console\n$ kvcalc ") >= 3


def test_readme_python_api_section_is_a_short_pointer() -> None:
    api = section("Python API")
    assert len(api.strip().splitlines()) <= 30
    assert "```python\nimport kvcalc\n" in api  # an example, run by tests/test_api.py
    assert "(docs/api.md)" in api


def test_readme_links_every_topic_page() -> None:
    links = set(re.findall(r"\]\((docs/[^)#\s]+)", README.read_text()))
    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")}
    assert pages - links == set(), "every page under docs/ is linked from the README"
    assert "docs/commands/README.md" in links


def requirement_names(block: str) -> list[str]:
    """The distribution names of a pyproject.toml list of requirements (``"typer>=0.27,<0.29"``
    is typer), comments dropped."""
    lines = (line.split("#", 1)[0] for line in block.splitlines())
    return [re.split(r"[<>=!~\[; ]", m)[0] for m in re.findall(r'"([^"]+)"', "\n".join(lines))]


def test_readme_names_the_dependencies_pyproject_declares() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    runtime = re.search(r"^dependencies = \[\n(.*?)^\]", pyproject, re.S | re.M)
    tests = re.search(r"^test = \[(.*?)\]", pyproject, re.M)
    assert runtime and tests
    text = " ".join(README.read_text().split())
    names = ", ".join(requirement_names(runtime.group(1)))
    assert f"Dependencies: {names} (tests: {', '.join(requirement_names(tests.group(1)))};" in text


if __name__ == "__main__" and "--update" in sys.argv:
    from test_docs import update

    update()
