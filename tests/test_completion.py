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


def test_model_arguments_complete_the_registry_ids(runner: CliRunner) -> None:
    from kvcalc.registry.load import model_paths

    ids = [p.stem for p in model_paths()]
    assert complete_bash(runner, "kvcalc size llama3-7") == [
        i for i in ids if i.startswith("llama3-7")
    ] == ["llama3-70b"]
    for command in ("batch", "decode", "plan", "compare", "offload", "sweep"):
        # Names are read in any case: a completion keeps what was typed.
        assert complete_bash(runner, f"kvcalc {command} DeepSeek-V3.") == [
            "DeepSeek-V3.1", "DeepSeek-V3.2-exp", "DeepSeek-V3.2",
        ], command
    assert complete_bash(runner, "kvcalc sweep llama3-8b llama3-7") == ["llama3-70b"]


def test_gpu_names_complete_alone_after_a_count_and_in_a_list(runner: CliRunner) -> None:
    from kvcalc.registry.gpus import gpu_paths

    ids = [p.stem for p in gpu_paths()]
    h100s = ["h100-nvl", "h100-pcie", "h100-sxm"]
    line = "kvcalc batch llama3-70b --gpus"
    assert complete_bash(runner, f"{line} h100") == h100s
    assert complete_bash(runner, f"{line} H100") == [f"H100{s[4:]}" for s in h100s]
    assert complete_bash(runner, f"{line} 8xh100") == [f"8xh100{s[4:]}" for s in h100s]
    assert complete_bash(runner, f"{line} 8") == [f"8x{i}" for i in ids]
    assert complete_bash(runner, "kvcalc plan llama3-70b --gpus h100-sxm,mi30") == [
        "h100-sxm,mi300x",
    ]
    assert complete_bash(runner, "kvcalc gpus mi32") == ["mi325x"]


def test_engine_and_dtype_values_complete(runner: CliRunner) -> None:
    from kvcalc.engine.kvformat import PRESETS
    from kvcalc.engine.quant import WEIGHT_FORMAT_NAMES

    line = "kvcalc batch llama3-70b --gpus 8xH100"
    assert complete_bash(runner, f"{line} --engine ") == ["simple", "vllm", "sglang", "trtllm"]
    assert complete_bash(runner, f"{line} --engine v") == ["vllm"]
    assert complete_bash(runner, f"{line} --engine SG") == ["SGlang"]
    assert complete_bash(runner, "kvcalc plan llama3-70b --engine ") == ["simple", "vllm", "trtllm"]
    assert complete_bash(runner, f"{line} --kv-dtype ") == list(PRESETS)
    assert complete_bash(runner, "kvcalc size llama3-70b --kv-dtype kiv") == ["kivi2", "kivi4"]
    assert complete_bash(runner, f"{line} --weight-dtype ") == list(WEIGHT_FORMAT_NAMES)
    assert complete_bash(runner, f"{line} --weight-dtype int4-") == ["int4-g128", "int4-g32"]
    assert complete_bash(runner, "kvcalc plan llama3-70b --weight-dtype bf16,fp") == [
        "bf16,fp32", "bf16,fp16", "bf16,fp8", "bf16,fp8-block",
    ]


def test_an_unreadable_registry_completes_nothing(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KVCALC_REGISTRY", str(tmp_path / "missing"))
    assert complete_bash(runner, "kvcalc size llama") == []
    assert complete_bash(runner, "kvcalc batch --gpus 8xh") == []


def test_completion_lists_are_not_imported_to_run_a_command() -> None:
    import subprocess
    import sys

    # A fresh interpreter: the commands with completion build their options, and none of the
    # modules the completions list from is loaded for it (they load when the shell asks).
    code = (
        "import sys, typer\n"
        "from kvcalc.cli.app import COMMANDS\n"
        "import importlib\n"
        "for name in ('size', 'batch', 'plan', 'gpus'):\n"
        "    typer.main.get_command(importlib.import_module(COMMANDS[name]).command_app)\n"
        "lazy = ('kvcalc.engine.kvformat', 'kvcalc.engine.quant', 'kvcalc.registry.gpus',\n"
        "        'kvcalc.registry.load')\n"
        "print([m for m in lazy if m in sys.modules])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (result.returncode, result.stdout) == (0, "[]\n"), result.stderr
