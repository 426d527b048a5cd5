"""The deployment's inputs, declared once (kvcalc/engine/inputs.py): the command line's options,
the spec file's keys and their ranges follow from the declarations, a refused value names its
field (worded by each front end), and the library builds the same deployment from raw values
as the command line does."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kvcalc.cli.app import app, option_name
from kvcalc.deploy import DeploymentOptions, engine_input_names, option_bounds
from kvcalc.engine.inputs import DEPLOYMENT_INPUTS, all_inputs, deployment_from, read_value
from kvcalc.engine.serving import engine_named
from kvcalc.engine.serving.base import InputRefusal
from kvcalc.engine.units import GiB
from kvcalc.registry.check_spec import DeploymentEntry
from tests.report_check import refused, run_json


def test_every_declared_input_is_a_spec_key_with_the_command_line_range() -> None:
    declared = all_inputs()
    assert set(declared) <= set(DeploymentEntry.model_fields)
    for name, inp in declared.items():
        assert option_bounds(name) == inp.bounds(), name


def test_the_command_line_groups_are_the_declarations() -> None:
    from dataclasses import fields

    assert {f.name for f in fields(DeploymentOptions)} == {i.name for i in DEPLOYMENT_INPUTS}
    own = [engine_named(name) for name in ("sglang", "trtllm", "vllm")]
    assert set(engine_input_names()) == {name for engine in own for name in engine.options}
    assert all(i.engine == engine.name for engine in own for i in engine.inputs)


def test_every_declared_option_is_in_the_help(runner: CliRunner) -> None:
    result = runner.invoke(app, ["batch", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for inp in all_inputs().values():
        assert inp.flag in result.stdout, inp.flag


def test_a_bad_size_names_its_field_each_front_end_its_own_way() -> None:
    with pytest.raises(InputRefusal) as info:
        read_value(all_inputs()["kv_memory"], "52")
    assert info.value.fields == ("kv_memory",)
    assert info.value.worded(option_name).startswith("--kv-memory: ")
    assert info.value.worded(str).startswith("kv_memory: ")
    with pytest.raises(InputRefusal) as weights:
        read_value(all_inputs()["weights"], "140B")
    assert "or leave --weights out" in weights.value.worded(option_name)
    assert "or leave weights out" in weights.value.worded(str)


def test_sglang_free_memory_reads_a_bare_number_as_its_log_does() -> None:
    # SGLang's "avail mem=78.43 GB" is GiB (it divides by 2^30).
    assert read_value(all_inputs()["free_before_load"], "78.43") == int(78.43 * GiB)
    assert read_value(all_inputs()["free_before_load"], "78GB") == 78 * 10**9


def test_the_library_builds_the_deployment_the_command_line_builds(runner: CliRunner) -> None:
    from kvcalc.registry.gpus import parse_gpu_set
    from kvcalc.registry.load import resolve_model

    args = ["llama3.1-8b", "--gpus", "h100", "--engine", "vllm", "--kv-memory", "58.109GiB"]
    doc = run_json(runner, "batch", *args, "--ctx", "8k")
    vllm = engine_named("vllm")
    dep = deployment_from(
        resolve_model("llama3.1-8b"), parse_gpu_set("h100"), {"kv_memory": "58.109GiB"},
        engine=vllm,
    )
    from kvcalc.engine.serving.base import BatchRequest
    from kvcalc.render.serving import engine_report

    pool = vllm.pool(dep, None)
    assert pool.max_batch(8192) == int(doc["max_concurrency"])
    assert engine_report(dep, pool.batch(BatchRequest(contexts=[8192]))).document() == doc


def test_the_library_refuses_what_the_engine_does_not_read(runner: CliRunner) -> None:
    from kvcalc.registry.gpus import parse_gpu_set
    from kvcalc.registry.load import resolve_model

    with pytest.raises(InputRefusal) as info:
        deployment_from(
            resolve_model("llama3.1-8b"), parse_gpu_set("h100"), {"prefix_shared": 1024},
            engine=engine_named("vllm"),
        )
    assert info.value.fields == ("prefix_shared",)
    refused(
        runner,
        ["batch", "llama3.1-8b", "--gpus", "h100", "--engine", "vllm", "--prefix-shared", "1k"],
        str(info.value),
    )
