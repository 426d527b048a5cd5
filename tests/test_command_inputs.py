"""The commands' own inputs, declared once (kvcalc/command_inputs.py): each command's options are
its declarations, each declaration is a keyword of the command's API function, and the API
holds a keyword to the range the option is held to."""

from __future__ import annotations

import importlib
import inspect

import pytest
import typer
from typer.testing import CliRunner

import kvcalc.api as api
from kvcalc.command_inputs import (
    BATCH_INPUTS,
    CHECK_INPUTS,
    DECODE_INPUTS,
    KV_HEADS,
    LAYERS,
    OFFLOAD_INPUTS,
    REGISTRY_INPUTS,
    SIZE_INPUTS,
    SWEEP_INPUTS,
    compare_inputs,
    plan_inputs,
)
from kvcalc.engine.inputs import Input
from kvcalc.errors import InputError
from tests.report_check import refused

COMMANDS: dict[str, tuple[Input, ...]] = {
    "size": SIZE_INPUTS,
    "batch": BATCH_INPUTS,
    "decode": DECODE_INPUTS,
    "sweep": SWEEP_INPUTS,
    "plan": plan_inputs(),
    "compare": compare_inputs(),
    "offload": OFFLOAD_INPUTS,
    "check": CHECK_INPUTS,
    "models": REGISTRY_INPUTS,
    "gpus": REGISTRY_INPUTS,
}
#: The commands whose inputs are keywords of the API function of the same name.
API_COMMANDS = ("size", "batch", "decode", "sweep", "plan", "compare", "offload", "check")


def _options(command: str) -> dict[str, object]:
    module = importlib.import_module(f"kvcalc.cli.{command}")
    click_command = typer.main.get_command(module.command_app)
    return {p.name: p for p in click_command.params if p.name}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_option_is_its_declaration(command: str) -> None:
    options = _options(command)
    for inp in COMMANDS[command]:
        option = options[inp.name]
        assert inp.flag in option.opts, (command, inp.name)  # type: ignore[attr-defined]
        assert option.help == inp.help, (command, inp.name)  # type: ignore[attr-defined]
        assert (inp.short in option.opts) if inp.short else True  # type: ignore[attr-defined]
        if inp.unit == "count" and inp.minimum is not None:
            kind = option.type  # type: ignore[attr-defined]
            assert (kind.min, kind.max) == (inp.minimum, inp.maximum), (command, inp.name)


@pytest.mark.parametrize("command", API_COMMANDS)
def test_each_declaration_is_a_keyword_of_the_api(command: str) -> None:
    keywords = inspect.signature(getattr(api, command)).parameters
    missing = [i.name for i in COMMANDS[command] if i.name not in keywords]
    assert not missing, (command, missing)


@pytest.mark.parametrize(
    ("inp", "value"),
    [(KV_HEADS, 0), (KV_HEADS, 4097), (LAYERS, 0), (LAYERS, 100_001)],
)
def test_the_api_and_the_option_hold_a_what_if_to_one_range(
    runner: CliRunner, inp: Input, value: int
) -> None:
    with pytest.raises(InputError, match=f"^{inp.flag}: {value} is out of range"):
        api.size("llama3-8b", **{inp.name: value})  # type: ignore[arg-type]
    refused(runner, ["size", "llama3-8b", inp.flag, str(value)], inp.flag)


def test_the_api_takes_a_what_if_at_its_declared_bound() -> None:
    assert LAYERS.maximum is not None
    result = api.size("llama3-8b", layers=int(LAYERS.maximum), ctx="8k")
    one = api.size("llama3-8b", layers=1, ctx="8k")
    # Llama-3-8B at bf16: 2 (K, V) x 8 KV heads x 128 dims x 2 bytes = 4 KiB per layer and
    # token, the 128 KiB per token of its 32 layers that KV-cache guides quote.
    assert result.kv_bytes_per_token == 100_000 * one.kv_bytes_per_token == 100_000 * 4096
