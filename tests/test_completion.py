"""Shell completion: `kvcalc --show-completion` / `--install-completion` write typer's scripts,
and the script's requests complete every command of COMMANDS (the lazy group hides none) and
their options."""

from __future__ import annotations

from pathlib import Path

import pytest
import shellingham
from typer.testing import CliRunner

from kvcalc.cli.app import COMMANDS, app


def detect_as(monkeypatch: pytest.MonkeyPatch, shell: str | None) -> None:
    def detect() -> tuple[str, str]:
        if shell is None:
            raise shellingham.ShellDetectionFailure()
        return shell, f"/bin/{shell}"

    monkeypatch.setattr(shellingham, "detect_shell", detect)


def complete_bash(runner: CliRunner, line: str) -> list[str]:
    cword = str(len(line.split(" ")) - 1)
    env = {"_KVCALC_COMPLETE": "complete_bash", "COMP_WORDS": line, "COMP_CWORD": cword}
    result = runner.invoke(app, [], prog_name="kvcalc", env=env)
    assert result.exit_code == 0, result.stderr
    return result.stdout.split()


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_show_completion_prints_the_script_for_the_shell(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, shell: str
) -> None:
    detect_as(monkeypatch, shell)
    result = runner.invoke(app, ["--show-completion"])
    assert result.exit_code == 0, result.stderr
    assert f"_KVCALC_COMPLETE=complete_{shell}" in result.stdout


def test_an_unknown_shell_is_one_line_and_exit_2(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    for found, shown in (("sh", "sh"), (None, "none")):
        detect_as(monkeypatch, found)
        for option in ("--show-completion", "--install-completion"):
            result = runner.invoke(app, [option])
            assert result.exit_code == 2
            assert result.stderr == (
                f"Error: {option}: cannot tell which shell runs kvcalc (found {shown}); "
                "run it from bash, zsh, fish or PowerShell\n"
            )


def test_install_completion_writes_the_script_and_sources_it(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    detect_as(monkeypatch, "bash")
    monkeypatch.setenv("HOME", str(tmp_path))
    result = runner.invoke(app, ["--install-completion"])
    assert result.exit_code == 0, result.stderr
    script = tmp_path / ".bash_completions" / "kvcalc.sh"
    assert result.stdout == (
        f"bash completion installed in {script}; it takes effect in a new shell\n"
    )
    assert "_KVCALC_COMPLETE=complete_bash" in script.read_text()
    assert str(script) in (tmp_path / ".bashrc").read_text()


def test_commands_complete_from_the_lazy_table(runner: CliRunner) -> None:
    assert complete_bash(runner, "kvcalc ") == list(COMMANDS)
    assert complete_bash(runner, "kvcalc sw") == ["sweep"]


def test_options_of_a_lazily_loaded_command_complete(runner: CliRunner) -> None:
    assert complete_bash(runner, "kvcalc sweep llama3-70b --pl") == ["--plot"]
    assert "--engine" in complete_bash(runner, "kvcalc batch --")
