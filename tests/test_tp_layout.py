"""The tensor-parallel default every command takes, and the layout notes: tp that does not split
a model's heads, tp across nodes, KV heads replicated over more ranks than there are heads."""

from __future__ import annotations

import pytest
from report_check import run_json, usage_error
from specs import registry_deployment as dep
from specs import registry_model as load_model_spec
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine.deployment import DeploymentError, choose_tp, tp_sizes
from kvcalc.registry.gpus import parse_gpu_set

# (model, tp on 8 GPUs, why), from the heads of each model's config.json: tp must divide the
# query heads and divide or be divided by the KV heads (vLLM refuses anything else).
ON_8 = [
    ("qwen2.5-7b", 4, "28 query heads"),  # 28 = 4 x 7: 8 does not divide them, 4 does
    ("phi-4", 2, "10 KV heads"),  # 40 query, 10 KV heads: neither 8 nor 4 divides 10
    ("gemma3-1b", 4, "4 query heads"),  # 4 query heads, 1 KV head
    ("falcon-7b", 1, "71 query heads"),  # 71 is prime
]

#: Every command that takes a deployment, with the arguments that keep it cheap.
COMMANDS = {
    "batch": ["--ctx", "2k"],
    "decode": ["--ctx", "2k"],
    "sweep": ["--ctx", "2k"],
    "compare": ["--ctx", "2k", "--only", "baseline,fp8"],
    "offload": ["--ctx", "2k"],
}


@pytest.mark.parametrize(("model", "tp", "why"), ON_8)
def test_the_default_is_the_largest_tp_that_splits_the_heads(model: str, tp: int, why: str) -> None:
    d = dep(model, "8xH100")
    assert (d.tp, d.replicas, d.tp_given) == (tp, 8 // tp, False)
    assert d.tp_reason is not None and why in d.tp_reason
    assert f"tp {tp} is the largest that does" in d.tp_reason


def test_a_tp_that_fits_the_gpus_and_heads_is_every_gpu_with_nothing_to_say() -> None:
    d = dep("llama3-70b", "8xH100")
    assert (d.tp, d.replicas, d.tp_given, d.tp_reason) == (8, 1, False, None)
    assert (d.node_gpus, d.tp_nodes, d.kv_heads, d.kv_head_copies) == (8, 1, 8, 1)
    given = dep("llama3-70b", "8xH100", tp=8)
    assert given.tp_given and given == dep("llama3-70b", "8xH100", tp=8)


def test_sizes_list_every_divisor_of_the_stage_that_splits_the_heads() -> None:
    # Llama-3-70B: 64 query and 8 KV heads, so every divisor of 16 splits them.
    assert tp_sizes(load_model_spec("llama3-70b"), 16) == [16, 8, 4, 2, 1]
    assert tp_sizes(load_model_spec("qwen2.5-7b"), 8) == [4, 2, 1]
    assert tp_sizes(load_model_spec("falcon-7b"), 8) == [1]


def test_sixteen_h100s_stay_within_a_node_when_the_model_fits_there() -> None:
    d = dep("llama3-70b", "16xH100")
    assert (d.tp, d.replicas, d.tp_nodes) == (8, 2, 1)
    assert d.tp_reason == (
        "tp 16 would span 2 nodes of 8 GPUs; tp 8 is the largest within one node"
    )


def test_tp_spans_nodes_only_when_the_weights_need_it() -> None:
    # DeepSeek-R1's FP8 weights (~79 GiB per GPU at tp 8) overflow an H100's 71.26 GiB usable.
    model, gpus = load_model_spec("deepseek-r1"), parse_gpu_set("16xH100")
    d = dep("deepseek-r1", "16xH100")
    assert (d.tp, d.replicas, d.tp_nodes) == (16, 1, 2)
    assert d.tp_reason is not None and "do not fit on one node of 8 GPUs" in d.tp_reason
    # The rule with its fit test replaced: tp 8 fitting keeps the model in one node.
    assert choose_tp(model, gpus, 1, lambda c: True).tp == 8
    assert choose_tp(model, gpus, 1, lambda c: c.tp >= 16).tp == 16
    # Nothing fits: the largest size, the closest to fitting.
    assert choose_tp(model, gpus, 1, lambda c: False).tp == 16


def test_without_a_node_size_the_largest_split_of_the_set_is_taken() -> None:
    d = dep("llama3-70b", "16xL40S")  # no node_gpus for PCIe parts
    assert (d.node_gpus, d.tp_nodes, d.tp, d.tp_reason) == (None, None, 16, None)
    assert d.kv_head_copies == 2


def test_kv_heads_beyond_tp_are_counted_as_copies() -> None:
    d = dep("llama3-70b", "16xH100", tp=16)
    assert (d.kv_heads, d.kv_head_copies, d.tp_nodes, d.tp_given) == (8, 2, 2, True)
    assert dep("deepseek-v3", "8xH200", weight_dtype="fp8").kv_heads is None  # MLA: a latent


def test_an_explicit_tp_that_does_not_split_names_the_sizes_that_do() -> None:
    with pytest.raises(DeploymentError) as info:
        dep("qwen2.5-7b", "8xH100", tp=8)
    assert info.value.model_specific
    assert info.value.worded(str) == str(info.value) == (
        "tp: tensor parallel size 8 does not divide the 28 query heads; on 8 GPUs use tp 4, 2 or 1"
    )
    with pytest.raises(DeploymentError, match="on 8 GPUs per stage use tp 4, 2 or 1"):
        dep("qwen2.5-7b", "16xH100", tp=8, pp=2)


# ------------------------------------------------------------------ every command


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(("model", "tp", "why"), ON_8)
def test_every_command_serves_without_tp_and_says_the_split(
    runner: CliRunner, command: str, model: str, tp: int, why: str
) -> None:
    result = runner.invoke(app, [command, model, "--gpus", "8xH100", *COMMANDS[command]])
    assert result.exit_code == 0, result.stderr
    assert f"layout tp {tp} x {8 // tp} replicas: " in result.stdout
    assert why in result.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_refuses_a_tp_that_does_not_split(runner: CliRunner, command: str) -> None:
    args = [command, "qwen2.5-7b", "--gpus", "8xH100", "--tp", "8", *COMMANDS[command]]
    usage_error(runner.invoke(app, args), "--tp:", "28 query heads", "on 8 GPUs use tp 4, 2 or 1")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_puts_the_layout_in_its_json(runner: CliRunner, command: str) -> None:
    out = run_json(runner, command, "llama3-70b", "--gpus", "16xH100", "--tp", "16",
                   *COMMANDS[command])
    # The deployment object: at the top, per sweep series, per compared model.
    layout = out.get("series", out.get("models", [out]))[0]
    assert {k: layout[k] for k in ("tp", "replicas", "tp_given", "tp_reason")} == {
        "tp": 16, "replicas": 1, "tp_given": True, "tp_reason": None
    }
    assert (layout["tp_nodes"], layout["kv_head_copies"]) == (2, 2)
    assert layout["layout_notes"] == [
        "tp 16 spans 2 nodes of 8 GPUs: its all-reduces cross the inter-node network, slower "
        "than the NVLink 4 (18 links) within a node",
        "tp 16 over 8 KV heads: each KV head is replicated on 2 ranks, so the KV cache per GPU "
        "stops shrinking beyond tp 8",
    ]


def test_the_engines_report_the_layout_too(runner: CliRunner) -> None:
    for engine in ("vllm", "sglang"):
        args = ["batch", "qwen2.5-7b", "--gpus", "8xH100", "--engine", engine, "--ctx", "2k"]
        out = run_json(runner, *args)
        assert (out["tp"], out["replicas"], out["tp_given"]) == (4, 2, False)
        result = runner.invoke(app, args)
        assert result.exit_code == 0 and "layout tp 4 x 2 replicas: " in result.stdout


def test_sixteen_h100s_say_the_split_and_the_nodes(runner: CliRunner) -> None:
    default = runner.invoke(app, ["batch", "llama3-70b", "--gpus", "16xH100", "--ctx", "2k"])
    assert default.exit_code == 0
    assert "layout tp 8 x 2 replicas: tp 16 would span 2 nodes of 8 GPUs" in default.stdout
    assert "inter-node" not in default.stdout
    spanning = runner.invoke(
        app, ["decode", "llama3-70b", "--gpus", "16xH100", "--tp", "16", "--ctx", "2k"]
    )
    assert spanning.exit_code == 0
    assert "tp 16 spans 2 nodes of 8 GPUs" in spanning.stdout
    assert "each KV head is replicated on 2 ranks" in spanning.stdout
    # Its all-reduces are timed on the network now: the band note names the regime's points.
    assert "low-high: measured / estimated TPOT" in " ".join(spanning.stdout.split())


def test_tp_4_x_2_replicas_is_twice_one_tp_4_replica(runner: CliRunner) -> None:
    """The default on 8 GPUs against an explicit --tp 4 on the 4 GPUs of one replica."""
    ctx = ["--ctx", "8k,32k"]
    both = run_json(runner, "batch", "qwen2.5-7b", "--gpus", "8xH100", *ctx)
    one = run_json(runner, "batch", "qwen2.5-7b", "--gpus", "4xH100", "--tp", "4", *ctx)
    assert (both["tp"], both["replicas"], one["tp"], one["replicas"]) == (4, 2, 4, 1)
    for key in ("weights_bytes_per_gpu", "overhead_bytes_per_gpu", "kv_budget_bytes_per_gpu"):
        assert both[key] == one[key]
    assert both["kv_tokens_capacity"] == 2 * one["kv_tokens_capacity"]
    assert [c["max_batch"] for c in both["contexts"]] == [
        2 * c["max_batch"] for c in one["contexts"]
    ]
    assert both["max_context_at_batch_1"] == one["max_context_at_batch_1"]
