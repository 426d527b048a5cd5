"""Options that would be silently ignored are refused, with one line and exit 2."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from report_check import refused
from typer.testing import CliRunner

from kvcalc.cli.app import app


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["size", "llama3-70b", "--ctx", "8k", "--ctx", "32k"], "--ctx: given 2 times"),
        (["size", "llama3-70b", "-c8k", "--ctx=32k"], "--ctx: given 2 times"),
        (["size", "llama3-70b", "--kv-dtype", "fp8", "--kv-dtype", "bf16"], "--kv-dtype: given 2"),
        (["batch", "llama3-70b", "-g", "8xH100", "--gpus", "4xH100"], "--gpus: given 2 times"),
        (["decode", "llama3-70b", "-g", "8xH100", "--tp", "8", "--tp", "4"], "--tp: given 2 times"),
    ],
)
def test_a_repeated_option_is_refused(runner: CliRunner, args: list[str], needle: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.stdout
    assert result.stderr.strip().splitlines() == [f"Error: {result.stderr.strip()[7:]}"]
    assert needle in result.stderr


def test_a_value_after_the_separator_is_not_an_option(runner: CliRunner) -> None:
    # Only options count: `--` ends them, as in click.
    result = runner.invoke(app, ["size", "--ctx", "8k", "--format", "json", "--", "llama3-70b"])
    assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["size", "deepseek-v3", "--kv-heads", "8"], "--kv-heads: deepseek-v3 has no KV heads"),
        (["size", "deepseek-v3", "--head-dim", "64"], "--head-dim: deepseek-v3 has no KV heads"),
        (["size", "llama3-70b", "--kv-heads", "7"], "64 query heads cannot be grouped over 7"),
    ],
)
def test_a_what_if_that_cannot_apply_is_refused(
    runner: CliRunner, args: list[str], needle: str
) -> None:
    refused(runner, args, needle)


def test_kv_heads_apply_to_the_attention_layers_of_a_hybrid(runner: CliRunner) -> None:
    base = runner.invoke(app, ["size", "jamba-v0.1", "--ctx", "8k", "--format", "json"])
    mqa = runner.invoke(app, ["size", "jamba-v0.1", "--ctx", "8k", "--kv-heads", "1", "-f", "json"])
    assert base.exit_code == mqa.exit_code == 0
    assert base.stdout != mqa.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["gpus", "h100", "--check"], "drop the names (h100)"),
        (["batch", "--gpus", "8xH100", "--weights", "140GB"], "--weights: it is one model's"),
        # --internode changed none of these commands' figures, even with tp across two nodes.
        (["batch", "llama3-70b", "-g", "16xH100", "--tp", "16", "--internode", "1GB/s"],
         "--internode: batch sizes memory and times no step; decode and check time"),
        (["sweep", "llama3-70b", "-g", "16xH100", "--tp", "16", "--internode", "1GB/s"],
         "--internode: sweep times the roofline step"),
        (["compare", "llama3-70b", "-g", "16xH100", "--tp", "16", "--internode", "1GB/s"],
         "--internode: compare times the roofline step"),
        (["offload", "llama3-70b", "-g", "16xH100", "--tp", "16", "--internode", "1GB/s"],
         "--internode: offload times loads"),
    ],
)
def test_an_option_that_would_be_ignored_is_refused(
    runner: CliRunner, args: list[str], needle: str
) -> None:
    refused(runner, args, needle)


def test_decode_applies_the_inter_node_network() -> None:
    # The commands above refuse --internode; decode's realistic step crosses it.
    runner = CliRunner()
    args = ["decode", "llama3-70b", "-g", "16xH100", "--tp", "16", "-f", "json"]
    slow, fast = (runner.invoke(app, [*args, "--internode", rate]) for rate in ("1GB/s", "50GB/s"))
    assert slow.exit_code == fast.exit_code == 0, slow.stderr
    assert slow.stdout != fast.stdout


#: What each command needs before the option under test reaches it (its value checked).
NEEDS = {
    "size": ["llama3-8b"], "models": [], "gpus": [],
    "batch": ["llama3-8b", "-g", "h100"], "decode": ["llama3-8b", "-g", "h100"],
    "sweep": ["llama3-8b", "-g", "h100"], "plan": ["llama3-8b", "--users", "10"],
    "compare": ["llama3-8b"], "offload": ["llama3-8b", "-g", "h100"],
    "import-hf": ["tests/fixtures/hf/qwen3-8b", "--hf-repo", "org/m"],
    "check": ["examples/capacity.yaml"],
    "calibrate": ["tests/fixtures/calibrate/sglang-0.4.1-llama3.1-8b-h100-tp1.log", "-g", "h100"],
}
#: The engine an engine's own option needs.
ENGINE_OF = {"--vllm-version": "vllm", "--sglang-version": "sglang"}


def text_options() -> list[tuple[str, str]]:
    """(command, option) of every option that takes text, each command's."""
    from kvcalc.cli.app import COMMANDS

    return [
        (command, param.opts[0])
        for command in COMMANDS
        for param in command_params(command)
        if param.param_type_name == "option" and param.type.name == "str"
    ]


def command_params(command: str) -> list[Any]:
    import importlib

    import typer

    from kvcalc.cli.app import COMMANDS

    module = importlib.import_module(COMMANDS[command])
    return list(typer.main.get_command(module.command_app).params)


@pytest.mark.parametrize(("command", "option"), text_options())
def test_a_blank_value_is_refused_by_every_option(
    runner: CliRunner, command: str, option: str
) -> None:
    # `--engine ''` ran the default engine and `--ctx ''` the default context: a blank read
    # as "not given". Every text option refuses it, naming itself.
    needs = NEEDS[command]
    if option in needs:  # given here instead
        at = needs.index(option)
        needs = needs[:at] + needs[at + 2:]
    engine = ENGINE_OF.get(option)
    args = [command, *needs, *(["--engine", engine] if engine and command != "calibrate" else [])]
    refused(runner, [*args, option, ""], f"{option}: ")


@pytest.mark.parametrize(
    "args",
    [
        ["batch", "llama3-8b", "-g", "h100", "--engine", ""],
        ["decode", "llama3-8b", "-g", "h100", "--engine", "vllm", "--vllm-version", ""],
        ["batch", "llama3-8b", "-g", "h100", "--engine", "sglang", "--sglang-version", ""],
        ["plan", "llama3-8b", "--users", "10", "-g", "h100", "--engine", ""],
        ["plan", "llama3-8b", "--users", "10", "-g", "h100", "--ctx", ""],
        ["plan", "llama3-8b", "--users", "10", "-g", "h100", "--price", ""],
        ["offload", "llama3-8b", "-g", "h100", "--ctx", ""],
        ["models", "--registry", ""],
        ["gpus", "--registry", ""],
        ["calibrate", "tests/fixtures/calibrate/sglang-0.4.1-llama3.1-8b-h100-tp1.log",
         "-g", "h100", "--release", " "],
    ],
)
def test_a_blank_value_is_no_value_not_the_default(runner: CliRunner, args: list[str]) -> None:
    # Each of these answered (exit 0 or 1) as if the option had not been given.
    refused(runner, args, f"{args[-2]}: no value; give one or leave {args[-2]} out")


@pytest.mark.parametrize("command", ["batch", "decode", "offload", "sweep"])
def test_a_blank_required_option_is_not_told_to_be_left_out(
    runner: CliRunner, command: str
) -> None:
    # --gpus is required there: "leave --gpus out" would only lead to "--gpus: give the GPUs".
    line = refused(runner, [command, "llama3-8b", "-g", ""], "--gpus: no value; give one")
    assert "leave" not in line


def test_a_blank_import_name_or_repo_is_refused(runner: CliRunner) -> None:
    # --name '' wrote the entry under the repo's name, as if --name had not been given.
    config = "tests/fixtures/hf/qwen3-8b"
    refused(runner, ["import-hf", config, "--hf-repo", "org/m", "--name", ""], "--name: ''")
    refused(runner, ["import-hf", config, "--hf-repo", ""], "--hf-repo: '' is not")


def test_the_api_refuses_a_blank_engine_option() -> None:
    # The library reads an engine's option as the command line does: a blank is no value.
    from kvcalc import api
    from kvcalc.errors import InputError

    with pytest.raises(InputError, match="vllm_version|--vllm-version"):
        api.batch("llama3-8b", gpus="h100", engine="vllm", vllm_version="")


# ---------------------------------------------------------------- token counts

#: Every option that counts tokens, with the command that takes it and the bounds it held as an
#: integer option before it read token forms (the bounds are the interface: a spec file's field
#: is held to them too).
TOKEN_OPTIONS = {
    "--window": ("size", 1, 1 << 30),
    "--sinks": ("size", 0, 1 << 30),
    "--recent": ("size", 1, 1 << 30),
    "--h2o-budget": ("size", 1, 1 << 30),
    "--snapkv-budget": ("size", 1, 1 << 30),
    "--observation-window": ("size", 1, 1 << 30),
    "--kv-residual": ("size", 0, 1 << 30),
    "--prefix-shared": ("batch", 0, 1 << 30),
    "--max-num-batched-tokens": ("batch", 1, 1 << 24),
    "--block-size": ("batch", 1, 65536),
    "--max-total-tokens": ("batch", 1, 1 << 40),
    "--chunked-prefill-size": ("batch", 1, 1 << 24),
    "--page-size": ("batch", 1, 65536),
    # TensorRT-LLM's block, as --block-size and --page-size are vLLM's and SGLang's: it was a
    # plain integer option, refusing 1k.
    "--tokens-per-block": ("batch", 1, 65536),
    "--max-tokens": ("batch", 1, 1 << 30),
}


def command_param(command: str, option: str) -> Any:
    return next(p for p in command_params(command) if option in p.opts)


@pytest.mark.parametrize("option", sorted(TOKEN_OPTIONS))
def test_every_token_option_reads_the_forms_of_ctx(option: str) -> None:
    from kvcalc.engine.units import parse_context

    command, low, high = TOKEN_OPTIONS[option]
    param = command_param(command, option)
    assert param.metavar == "TOKENS"
    for text in ("8192", "8k", "8K", "64k", "1m"):
        if parse_context(text) <= high:
            assert param.type.convert(text, param, None) == parse_context(text), text


@pytest.mark.parametrize("option", sorted(TOKEN_OPTIONS))
def test_every_token_option_keeps_its_bounds_and_names_itself(option: str) -> None:
    from kvcalc.cli.app import InputError

    command, low, high = TOKEN_OPTIONS[option]
    param = command_param(command, option)
    assert param.type.convert(str(low), param, None) == low
    assert param.type.convert(str(high), param, None) == high
    for outside in (low - 1, high + 1, "12q"):
        with pytest.raises(InputError) as info:
            param.type.convert(str(outside), param, None)
        assert str(info.value).startswith(f"{option}: invalid token count {str(outside)!r}: ")
        assert "\n" not in str(info.value)


def test_a_token_option_is_the_same_number_in_either_form(runner: CliRunner) -> None:
    def json_of(*args: str) -> Any:
        result = runner.invoke(app, [*args, "-f", "json"])
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)

    size = ["size", "llama3-70b", "--ctx", "32k"]
    assert json_of(*size, "--window", "4k") == json_of(*size, "--window", "4096")
    batch = ["batch", "llama3-70b", "--gpus", "8xH100", "--ctx", "8k"]
    assert json_of(*batch, "--prefix-shared", "2k") == json_of(*batch, "--prefix-shared", "2048")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["size", "llama3-70b", "--ctx", "8k", "--window", "0"],
         "--window: invalid token count '0': it must be at least 1 token"),
        (["batch", "llama3-70b", "-g", "8xH100", "--block-size", "128k"],
         "--block-size: invalid token count '128k': 131,072 tokens is above the limit of 65,536"),
        (["size", "llama3-70b", "--ctx", "8k", "--sinks", "4x", "--recent", "1k"],
         "--sinks: invalid token count '4x': use a whole number of tokens such as 8192, 8k"),
        (["size", "llama3-70b", "--ctx", "8k", "--window", "１k"],
         "--window: invalid token count '１k': use ASCII digits"),
    ],
)
def test_a_bad_token_count_is_one_line_naming_the_option(
    runner: CliRunner, args: list[str], needle: str
) -> None:
    refused(runner, args, needle)


# ---------------------------------------------------------------- GPU sets


@pytest.mark.parametrize("text", ["8xH100", "h100:8", "H100x8", "8*h100", "8 x H100", "h100 x 8"])
def test_a_gpu_set_takes_the_count_before_or_after_the_name(text: str) -> None:
    from kvcalc.registry.gpus import parse_gpu_set

    gpus = parse_gpu_set(text)
    assert (gpus.accelerator.id, gpus.count) == ("h100-sxm", 8)


@pytest.mark.parametrize(
    ("text", "gpu_id", "count"),
    [
        ("mi300x", "mi300x", 1),  # a name ending in x is a name, not a count
        ("MI300Xx4", "mi300x", 4),
        ("mi300x4", "mi300x", 4),  # mi300 is an alias of mi300x
        ("4090x2", "rtx-4090", 2),  # not 4,090 GPUs named "2"
        ("2x4090", "rtx-4090", 2),
    ],
)
def test_a_gpu_set_with_a_name_that_looks_like_a_count(text: str, gpu_id: str, count: int) -> None:
    from kvcalc.registry.gpus import parse_gpu_set

    gpus = parse_gpu_set(text)
    assert (gpus.accelerator.id, gpus.count) == (gpu_id, count)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("h100:0", "invalid GPU count '0' in 'h100:0': it must be at least 1"),
        ("h100x1.5", "the count is a whole number"),
        ("8x", "names no GPU: use COUNTxGPU such as 8xH100 (or H100x8, h100:8, 8*h100)"),
    ],
)
def test_a_bad_gpu_set_in_either_order_is_one_line(
    runner: CliRunner, text: str, needle: str
) -> None:
    refused(runner, ["batch", "llama3-70b", "--gpus", text], needle)


def test_the_gpu_forms_answer_alike(runner: CliRunner) -> None:
    outputs = {
        runner.invoke(app, ["batch", "llama3-70b", "-g", text, "--ctx", "8k", "-f", "json"]).stdout
        for text in ("8xH100", "h100:8", "H100x8")
    }
    assert len(outputs) == 1 and json.loads(outputs.pop())["gpus"]["count"] == 8


# ---------------------------------------------------------------- choices in any case


@pytest.mark.parametrize(
    ("args", "option", "lower", "other"),
    [
        (["size", "llama3-70b", "--ctx", "8k"], "--format", "json", "JSON"),
        (["size", "llama3-70b", "--ctx", "8k"], "-f", "yaml", "Yaml"),
        (["batch", "llama3-70b", "-g", "8xH100", "--ctx", "8k", "-f", "json"],
         "--engine", "vllm", "VLLM"),
        # 4k: SGLang admits at most context_len - 1 (8,191) tokens of Llama-3-70B per request.
        (["batch", "llama3-70b", "-g", "8xH100", "--ctx", "4k", "-f", "json"],
         "--engine", "sglang", "SGLang"),
        (["plan", "llama3-8b", "--users", "10", "--gpus", "h100", "-f", "json"],
         "--engine", "vllm", "Vllm"),
        (["batch", "llama3-70b", "-g", "8xH100", "--ctx", "8k", "-f", "json"],
         "--weight-dtype", "fp8", "FP8"),
        (["size", "llama3-70b", "--ctx", "8k", "-f", "json"], "--kv-dtype", "fp8", "FP8"),
        (["check", "examples/capacity.yaml"], "--format", "junit", "JUnit"),
    ],
)
def test_choices_take_any_case(
    runner: CliRunner, args: list[str], option: str, lower: str, other: str
) -> None:
    expected = runner.invoke(app, [*args, option, lower])
    assert expected.exit_code == 0, expected.stderr
    result = runner.invoke(app, [*args, option, other])
    assert (result.exit_code, result.stdout) == (0, expected.stdout)


def test_an_unknown_choice_is_still_one_line(runner: CliRunner) -> None:
    refused(runner, ["size", "llama3-70b", "--format", "JSONL"], "'JSONL' is not one of 'table'")
    refused(runner, ["batch", "llama3-70b", "-g", "8xH100", "--engine", "TGI"],
            "--engine: unknown engine 'TGI'; choose simple, vllm, sglang")


# ---------------------------------------------------------------- help

#: The usage line of every command: required arguments bare, optional ones in brackets.
USAGE = re.compile(r"^Usage: kvcalc [a-z-]+ \[OPTIONS\]( \[?[A-Z_]+(\.\.\.)?\]?)*$")


def command_help(runner: CliRunner, command: str) -> str:
    result = runner.invoke(app, [command, "--help"], terminal_width=80)
    assert result.exit_code == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def helps() -> dict[str, str]:
    from kvcalc.cli.app import COMMANDS

    return {command: command_help(CliRunner(), command) for command in COMMANDS}


def test_every_usage_line_has_one_style(helps: dict[str, str]) -> None:
    for text in helps.values():
        usage = text.splitlines()[0]
        assert USAGE.match(usage), usage
    assert helps["batch"].startswith("Usage: kvcalc batch [OPTIONS] [MODEL]\n")
    assert helps["sweep"].startswith("Usage: kvcalc sweep [OPTIONS] MODEL...\n")


def test_every_default_has_one_notation(helps: dict[str, str]) -> None:
    for command, text in helps.items():
        options = "".join(sections(text).values())  # the options and arguments, not the prose
        flat = " ".join(options.split())
        assert "<" not in flat.replace("<=", ""), command  # typer's <str>, <int range>
        assert re.findall(r".default: ", flat) == re.findall(r"\[default: ", flat), command
        assert not re.search(r"\[\d|\(SGLang: ", flat), command  # [8192], [4], (SGLang: 0.8)
        assert not re.search(r"\d<=x<=", flat), command


def sections(text: str) -> dict[str, str]:
    """The help's sections (``Title:`` at the start of a line) -> their text."""
    parts = re.split(r"^(\S[^\n]*):\n", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_options_are_grouped_in_panels(helps: dict[str, str]) -> None:
    batch = sections(helps["batch"])
    assert list(batch) == [
        "Arguments", "Model", "Deployment", "KV cache format", "Eviction", "vLLM engine",
        "SGLang engine", "TensorRT-LLM engine", "Output",
    ]
    for option, (command, _, _) in TOKEN_OPTIONS.items():
        assert f"{option} TOKENS" in helps[command], option
    for panel, options in {
        "Model": ["--ctx", "--as"],
        "Deployment": ["--gpus", "--tp", "--engine", "--weight-dtype"],
        "KV cache format": ["--kv-dtype", "--kv-residual"],
        "Eviction": ["--window", "--sinks", "--prompt"],
        "vLLM engine": ["--max-model-len", "--max-num-batched-tokens"],
        "SGLang engine": ["--page-size", "--mem-fraction-static"],
        "TensorRT-LLM engine": ["--free-gpu-memory-fraction", "--free-memory"],
        "Output": ["--format", "--help"],
    }.items():
        for option in options:
            assert re.search(rf"(^|[ ,]){option}\b", batch[panel], re.MULTILINE), (panel, option)
    assert list(sections(helps["size"])) == [
        "Arguments", "Model", "KV cache format", "Eviction", "Output",
    ]


@pytest.mark.parametrize(
    "args",
    [
        ["size", "llama3-70b", "--ctx", "8k", "--kv-quant", "kivi", "--kv-bits", "４"],
        ["plan", "llama3-70b", "--gpus", "h100", "--users", "８"],
        ["plan", "llama3-70b", "--users", "8", "--gpus", "h100", "--top", "٣"],
    ],
)
def test_a_plain_integer_option_follows_the_number_rule(runner: CliRunner, args: list[str]) -> None:
    # click names its plain integer type "int" (not "integer"): those options are held to the
    # number rule too, and show the one placeholder N.
    refused(runner, args, "use ASCII digits (0-9)")
    assert command_param(args[0], args[-2]).metavar == "N"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["batch", "llama3-8b", "-g", "h100", "--tp", "abc"], "'abc' is not a whole number"),
        (["batch", "llama3-8b", "-g", "h100", "--tp", "1.5"], "'1.5' is not a whole number"),
        (["size", "llama3-8b", "--batch", "1e3"], "'1e3' is not a whole number"),
        (["plan", "llama3-8b", "--users", "x"], "'x' is not a whole number"),
        (["batch", "llama3-8b", "-g", "h100", "--gpu-util", "abc"], "'abc' is not a number"),
        (["decode", "llama3-8b", "-g", "h100", "--mbu", "half"], "'half' is not a number"),
    ],
)
def test_a_number_option_given_no_number_says_what_it_takes(
    runner: CliRunner, args: list[str], needle: str
) -> None:
    # click said "'abc' is not a valid int range." (its type's name) and no fix.
    line = refused(runner, args, needle, "give one such as")
    assert "valid int" not in line and "valid float" not in line


@pytest.mark.parametrize(
    ("args", "bounds"),
    [
        (["size", "llama3-70b", "--batch", "0"], "1<=x<=1000000"),
        (["size", "llama3-70b", "--layers", "0"], "1<=x<=100000"),
        (["batch", "llama3-70b", "--gpus", "8xH100", "--tp", "0"], "1<=x<=4096"),
    ],
)
def test_a_number_out_of_range_names_the_range(
    runner: CliRunner, args: list[str], bounds: str
) -> None:
    # The help states no bounds (the error does): the range must not be left blank in it.
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert f"is not in the range {bounds}." in result.stderr
