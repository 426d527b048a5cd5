"""`kvcalc plan`: the answer agrees with `batch` and `decode`, is minimal (one GPU fewer of the
same kind fails), ranks by count then watts or price, searches the whole registry fast, and
refuses bad input in one line with exit code 2."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from report_check import refused, run_json
from specs import registry_model
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine.plan import PlanRequest, plan, pool_rule, splits
from kvcalc.engine.serving import engine_named
from kvcalc.registry.gpus import find_accelerator, gpu_paths

REQUEST = ("llama3-70b", "--users", "100", "--ctx", "16k", "--max-tpot", "50ms", "--max-ttft",
           "2s", "--max-gpus", "16")
KEYS = {"gpus", "tp", "pp", "replicas", "weight_dtype", "kv_dtype", "max_batch",
        "tpot_seconds", "roofline_tpot_seconds", "ttft_seconds", "roofline_ttft_seconds"}


def layout_options(layout: dict[str, Any]) -> list[str]:
    return ["--gpus", layout["gpus"]["id"], "--tp", str(layout["tp"]), "--pp", str(layout["pp"]),
            "--weight-dtype", layout["weight_dtype"], "--kv-dtype",
            layout["kv_dtype"], "--ctx", "16k"]


def plan_layouts(runner: CliRunner, *args: str) -> list[dict[str, Any]]:
    """The layouts of ``kvcalc plan ARGS --format json``, best first."""
    layouts: list[dict[str, Any]] = run_json(runner, "plan", *args)["layouts"]
    return layouts


def test_json_is_a_list_of_layouts_best_first(runner: CliRunner) -> None:
    out = run_json(runner, "plan", *REQUEST)
    assert (out["model"], out["context_tokens"], out["users"]) == ("llama3-70b", 16384, 100)
    layouts = out["layouts"]
    assert isinstance(layouts, list) and 1 <= len(layouts) <= 5
    for layout in layouts:
        assert set(layout) >= KEYS
        gpus = layout["gpus"]
        assert gpus["id"] == f"{gpus['count']}x{gpus['accelerator'].upper()}"
        assert gpus["label"].startswith(f"{gpus['count']}x ")
        assert layout["gpus"]["count"] == layout["tp"] * layout["pp"] * layout["replicas"]
        assert layout["max_batch"] >= 100
        assert layout["tpot_seconds"] <= 0.05 and layout["ttft_seconds"] <= 2
    order = [(x["gpus"]["count"], x["watts"]) for x in layouts]
    assert order == sorted(order)


@pytest.mark.parametrize("engine", ["simple", "vllm"])
def test_the_chosen_layout_meets_the_targets_in_batch_and_decode(
    runner: CliRunner, engine: str
) -> None:
    best = plan_layouts(runner, *REQUEST, "--engine", engine)[0]
    options = [*layout_options(best), "--engine", engine]
    fit = run_json(runner, "batch", "llama3-70b", *options)
    held = fit["contexts"][0]["max_batch"] if engine == "simple" else None
    if held is not None:
        assert held == best["max_batch"] >= 100
    per_replica = -(-100 // best["replicas"])
    assert best["batch_per_replica"] == per_replica
    step = run_json(runner, "decode", "llama3-70b", *options)["contexts"][0]
    assert step["batch"] * best["replicas"] >= 100  # the engine's own batch holds the users
    timed = run_json(runner, "decode", "llama3-70b", *options, "--batch", str(per_replica))
    step = timed["contexts"][0]
    assert step["tpot_seconds"] == best["tpot_seconds"] <= 0.05
    assert step["ttft_seconds"] == best["ttft_seconds"] <= 2


#: The tensor-parallel layout keys of every command's deployment object (README: Tensor-parallel
#: layout), written out here so that a key renamed in kvcalc/render/layout.py fails.
LAYOUT_KEYS = {"replicas", "tp_given", "tp_reason", "tp_nodes", "kv_head_copies", "layout_notes"}


def test_each_answer_carries_the_layout_keys_batch_gives_the_same_split(
    runner: CliRunner,
) -> None:
    layouts = plan_layouts(runner, *REQUEST, "--gpus", "H100,H200,MI300X,B200")
    assert {x["replicas"] > 1 for x in layouts} == {True, False}  # both kinds of answer
    for layout in layouts:
        fit = run_json(runner, "batch", "llama3-70b", *layout_options(layout))
        assert LAYOUT_KEYS <= set(layout) and LAYOUT_KEYS <= set(fit)
        for key in ("replicas", "tp_nodes", "kv_head_copies"):
            assert layout[key] == fit[key], key
        # batch was given the split; plan chose it, and says why when it is not every GPU.
        assert fit["tp_given"] is True and fit["tp_reason"] is None
        assert layout["tp_given"] is False
        assert (layout["tp_reason"] is None) == (layout["replicas"] == 1)
        split = " x ".join(
            [f"tp {layout['tp']}", *([f"pp {layout['pp']}"] if layout["pp"] > 1 else []),
             f"{layout['replicas']} replicas"]
        )
        chosen = [f"layout {split}: {layout['tp_reason']}"] if layout["tp_reason"] else []
        assert layout["layout_notes"] == [*chosen, *fit["layout_notes"]]


def test_a_group_across_nodes_is_noted_in_text_json_and_csv(runner: CliRunner) -> None:
    import csv
    import io

    # At the roofline (all-reduces untimed): the realistic estimate times cross-node
    # all-reduces on the network, where a 16-way group no longer meets a tight target.
    args = ["plan", "llama3-70b", "--users", "1", "--max-tpot", "3ms", "--gpus", "h100",
            "--max-gpus", "16", "--roofline"]
    best = run_json(runner, *args)["layouts"][0]
    # 16 GPUs of an 8-GPU node, 8 KV heads: two nodes, each head on two ranks.
    assert (best["gpus"]["id"], best["tp"], best["replicas"]) == ("16xH100-SXM", 16, 1)
    assert (best["tp_nodes"], best["kv_head_copies"], best["tp_reason"]) == (2, 2, None)
    same = run_json(runner, "decode", "llama3-70b", "--gpus", "16xh100", "--tp", "16")
    assert len(best["layout_notes"]) == 2 and best["layout_notes"] == same["layout_notes"]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.stderr
    text = " ".join(result.stdout.split())
    for note in best["layout_notes"]:
        assert f"16xH100-SXM: {note}" in text
    assert same["link"] == "network" and same["nodes"] == 2
    table = runner.invoke(app, [*args, "--format", "csv"])
    row = next(csv.DictReader(io.StringIO(table.stdout)))
    assert LAYOUT_KEYS <= set(row) and row["tp_given"] == "false" and row["tp_nodes"] == "2"
    assert row["layout_notes"].split(";") == best["layout_notes"]


def test_a_plain_answer_prints_no_layout_note(runner: CliRunner) -> None:
    args = ["plan", "llama3-70b", "--users", "10", "--gpus", "h200"]
    best = run_json(runner, *args)["layouts"][0]
    assert best["replicas"] == 1 and best["tp_nodes"] == 1 and best["layout_notes"] == []
    text = runner.invoke(app, args, env={"COLUMNS": "200"}).stdout
    assert f"{best['gpus']['id']}:" not in text


def test_one_gpu_fewer_of_the_same_kind_does_not_meet_the_targets(runner: CliRunner) -> None:
    for best in plan_layouts(runner, *REQUEST):
        fewer = best["gpus"]["count"] - 1
        args = ["plan", "llama3-70b", "--users", "100", "--ctx", "16k", "--max-tpot", "50ms",
                "--max-ttft", "2s", "--gpus", best["gpus"]["accelerator"], "--weight-dtype",
                best["weight_dtype"], "--kv-dtype", best["kv_dtype"]]
        if fewer == 0:
            continue
        result = runner.invoke(app, [*args, "--max-gpus", str(fewer)])
        assert result.exit_code == 2, result.stdout
        assert result.stderr.startswith("Error: no layout of up to")
        again = run_json(runner, *args, "--max-gpus", str(best["gpus"]["count"]))["layouts"]
        assert again[0]["gpus"]["count"] == best["gpus"]["count"]


def test_roofline_holds_the_targets_to_decode_s_bound(runner: CliRunner) -> None:
    args = ("llama3-70b", "--users", "100", "--ctx", "16k", "--max-tpot", "20ms")
    bound = plan_layouts(runner, *args, "--roofline")
    realistic = plan_layouts(runner, *args, "--max-gpus", "16")
    assert bound[0]["gpus"]["count"] <= realistic[0]["gpus"]["count"]
    best = bound[0]
    options = layout_options(best)
    step = run_json(runner, "decode", "llama3-70b", *options, "--batch",
                    str(best["batch_per_replica"]))["contexts"][0]
    assert step["roofline_tpot_seconds"] == best["roofline_tpot_seconds"] <= 0.02
    # The realistic estimate beside it, as decode estimates it (over the target: held to the bound).
    assert step["tpot_seconds"] == best["tpot_seconds"] > best["roofline_tpot_seconds"]
    assert best["latency"] == "roofline"


def test_price_is_the_tie_break_when_given(runner: CliRunner) -> None:
    args = ("qwen3-30b-a3b", "--users", "8", "--gpus", "h100,h200,mi300x")
    cheap_amd = plan_layouts(runner, *args, "--price", "h100=2.5,h200=3.1,mi300x=1")
    assert [x["gpus"]["accelerator"] for x in cheap_amd] == ["mi300x", "h100-sxm", "h200"]
    assert cheap_amd[0]["price_per_hour"] == 1.0
    cheap_h200 = plan_layouts(runner, *args, "--price", "h100=2.5,h200=0.5,mi300x=3")
    assert [x["gpus"]["accelerator"] for x in cheap_h200] == ["h200", "h100-sxm", "mi300x"]
    # Without prices: fewest watts (H100 and H200 700 W, MI300X 750 W), then TPOT.
    by_watts = plan_layouts(runner, *args)
    assert [x["watts"] for x in by_watts] == [700, 700, 750]
    assert by_watts[0]["tpot_seconds"] <= by_watts[1]["tpot_seconds"]


def test_every_dtype_pair_is_searched(runner: CliRunner) -> None:
    layouts = plan_layouts(runner, "llama3-70b", "--users", "10", "--gpus", "h100",
                       "--weight-dtype", "bf16,fp8", "--kv-dtype", "bf16,fp8", "--top", "10")
    pairs = {(x["weight_dtype"], x["kv_dtype"]) for x in layouts}
    assert pairs == {("bf16", "bf16"), ("bf16", "fp8"), ("fp8+bf16", "bf16"), ("fp8+bf16", "fp8")}
    counts = {(x["weight_dtype"], x["kv_dtype"]): x["gpus"]["count"] for x in layouts}
    assert counts[("fp8+bf16", "fp8")] < counts[("bf16", "bf16")]


def test_splits_cover_every_factorisation() -> None:
    assert sorted(splits(4, 80)) == sorted(
        [(4, 1, 1), (2, 2, 1), (1, 4, 1), (2, 1, 2), (1, 2, 2), (1, 1, 4)]
    )
    assert all(pp <= 2 for _, pp, _ in splits(8, 2))


def test_the_whole_registry_is_searched_in_under_a_second() -> None:
    accelerators = [find_accelerator(path.stem) for path in gpu_paths()]
    request = PlanRequest(
        model=registry_model("llama3-70b"), users=100, context_tokens=16384,
        accelerators=accelerators, max_gpus=16, max_tpot_seconds=0.05, max_ttft_seconds=2.0,
    )
    plan(request, pool_rule(engine_named("simple")))  # warm the caches
    # The best of three runs: the machine is shared, and a slow run says nothing of the code.
    seconds = []
    for _ in range(3):
        start = time.perf_counter()
        result = plan(request, pool_rule(engine_named("simple")))
        seconds.append(time.perf_counter() - start)
    assert len(result.layouts) > 10
    assert min(seconds) < 1.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--users", "100", "--max-tpot", "1ms"], "closest: "),
        (["--users", "100", "--ctx", "16k", "--max-tpot", "5ms"], "at TPOT"),
        (["--users", "100000", "--ctx", "128k"], "caches of 131,072 tokens"),
        (["--users", "100", "--gpus", "H100,foo"], "unknown gpu 'foo'"),
        (["--users", "100", "--gpus", "H100,,H200"], "--gpus: 'H100,,H200' has an empty item"),
        (["--users", "100", "--gpus", "h100,h100-sxm"], "already listed"),
        (["--users", "100", "--max-gpus", "0"], "--max-gpus: 0 is not between 1 and 64"),
        (["--users", "100", "--max-gpus", "65"], "--max-gpus"),
        (["--users", "0"], "--users: 0"),
        (["--users", "100", "--kv-dtype", "fp8,fp9"], "--kv-dtype: unknown dtype 'fp9'"),
        (["--users", "100", "--kv-dtype", "fp8,fp8"], "twice"),
        (["--users", "100", "--weight-dtype", "bf16,"], "--weight-dtype"),
        (["--users", "100", "--weight-dtype", "fp8,fp8+bf16"], "the same weights twice"),
        (["--users", "100", "--weight-dtype", "fp8+fp16"], "print as (fp8+bf16, fp8-block+bf16"),
        (["--users", "100", "--max-tpot", "50"], "--max-tpot: invalid time '50'"),
        (["--users", "100", "--max-ttft", "soon"], "--max-ttft"),
        (["--users", "100", "--ctx", "8k,16k"], "--ctx: plan serves one context"),
        (["--users", "100", "--engine", "sglang"], "--engine"),
        (["--users", "100", "--price", "h100"], "--price: 'h100' is not GPU=PRICE"),
        (["--users", "100", "--price", "h100=free"], "is not a number"),
        (["--users", "100", "--price", "h100=-1"], "positive"),
        (["--users", "100", "--gpus", "h100,h200", "--price", "h100=2"], "no price for h200"),
        (["--users", "100", "--gpus", "h100", "--price", "h100=2,h200=3"], "not in --gpus"),
        (["--users", "100", "--roofline", "--mfu", "0.5"], "--mfu"),
        (["--users", "100", "--mfu", "2"], "--mfu"),
        (["--users", "100", "--top", "0"], "--top"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    runner: CliRunner, args: list[str], message: str
) -> None:
    refused(runner, ["plan", "llama3-70b", *args], message)


def test_gpus_without_a_link_speed_are_not_timed_together(runner: CliRunner) -> None:
    args = ["plan", "llama3-70b", "--users", "2", "--gpus", "apple-m4-max", "--max-gpus", "4"]
    refused(runner, args, "no link speed for apple-m4-max")


def test_a_model_too_large_for_any_set_names_the_weights(runner: CliRunner) -> None:
    args = ["plan", "llama3.1-405b", "--users", "1", "--gpus", "rtx-4090"]
    refused(runner, args, "no GPU set holds the weights")


@settings(max_examples=25, deadline=None)
@given(
    model=st.sampled_from(
        ["llama3-8b", "llama3-70b", "qwen3-30b-a3b", "gemma3-27b", "mixtral-8x7b"]
    ),
    gpu=st.sampled_from(["h100-sxm", "mi300x", "a100-sxm-80gb", "l40s"]),
    users=st.integers(1, 300),
    context=st.sampled_from([1024, 8192, 32768]),
    tpot_ms=st.sampled_from([None, 15, 30, 60, 120]),
)
def test_the_answer_is_minimal_and_meets_its_targets(
    model: str, gpu: str, users: int, context: int, tpot_ms: int | None
) -> None:
    request = PlanRequest(
        model=registry_model(model), users=users, context_tokens=context,
        accelerators=[find_accelerator(gpu)], max_gpus=8,
        max_tpot_seconds=None if tpot_ms is None else tpot_ms / 1000,
    )
    result = plan(request, pool_rule(engine_named("simple")))
    event("answered" if result.layouts else "no layout")
    if not result.layouts:
        return
    best = result.layouts[0]
    assert best.max_batch >= users
    assert tpot_ms is None or (best.tpot_seconds or 0) <= tpot_ms / 1000
    if best.count > 1:
        fewer = replace(request, max_gpus=best.count - 1)
        assert not plan(fewer, pool_rule(engine_named("simple"))).layouts


# ---------------------------------------------------------------- weight dtypes as printed


def test_every_weight_dtype_plan_prints_gives_the_same_weights() -> None:
    """What plan can print for a model's weights (as released, or at each --weight-dtype name)
    is read back by --weight-dtype (deployment(), which batch and decode call) to the same
    formats and the same bytes, for every registry model."""
    from kvcalc.engine.deployment import deployment
    from kvcalc.engine.quant import WEIGHT_FORMAT_NAMES
    from kvcalc.engine.weight_names import weight_dtype_name
    from kvcalc.engine.weights import weight_bytes
    from kvcalc.registry.gpus import parse_gpu_set
    from kvcalc.registry.load import all_model_specs

    gpus = parse_gpu_set("h100")
    printed = set()
    for model in all_model_specs():
        for asked in (None, *WEIGHT_FORMAT_NAMES):
            planned = deployment(model, gpus, weight_dtype=asked).weights
            name = weight_dtype_name(model, planned)
            printed.add(name)
            again = deployment(model, gpus, weight_dtype=name).weights
            assert again == planned, (model.id, asked, name)
            assert weight_bytes(model, again) == weight_bytes(model, planned)
    # The joined names of the issue are among them, so the check is not vacuous.
    assert {"fp8+bf16", "bf16+mxfp4", "fp8-block+bf16", "bf16+int4-g32"} <= printed


@pytest.mark.parametrize(
    ("model", "dtypes", "expected"),
    [
        ("gpt-oss-20b", ["--weight-dtype", "fp8,mxfp4,bf16"], {"fp8+bf16", "bf16+mxfp4", "bf16"}),
        # As released: int4 routed experts only, which no single --weight-dtype name gives.
        ("kimi-k2-thinking", [], {"bf16+int4-g32"}),
    ],
)
def test_a_plan_row_runs_in_batch_and_decode_as_written(
    runner: CliRunner, model: str, dtypes: list[str], expected: set[str]
) -> None:
    layouts = plan_layouts(runner, model, "--users", "1", "--gpus", "h200", "--max-gpus",
                       "8", *dtypes, "--top", "3")
    rows = {row["weight_dtype"]: row for row in layouts}
    assert set(rows) == expected
    for name, row in rows.items():
        options = ["--gpus", row["gpus"]["id"], "--tp", str(row["tp"]), "--pp", str(row["pp"]),
                   "--ctx", "8k"]
        fit = run_json(runner, "batch", model, *options, "--weight-dtype", name)
        assert fit["weight_dtype"] == name
        assert fit["contexts"][0]["max_batch"] == row["max_batch"]
        step = run_json(runner, "decode", model, *options, "--weight-dtype", name, "--batch",
                        str(row["batch_per_replica"]))["contexts"][0]
        assert step["tpot_seconds"] == row["tpot_seconds"]


def test_max_num_seqs_caps_each_vllm_replica_as_batch_does(runner: CliRunner) -> None:
    # vLLM's scheduler runs at most --max-num-seqs requests per replica: 20 users at a cap of 4
    # need five replicas, however many the pool would hold; batch says the same per replica.
    args = ("llama3-8b", "--users", "20", "--ctx", "8k", "--engine", "vllm", "--gpus", "h100")
    (capped,) = plan_layouts(runner, *args, "--max-num-seqs", "4", "--top", "1")
    assert capped["replicas"] >= 5 and capped["batch_per_replica"] <= 4
    assert capped["engine_inputs"]["max_num_seqs"] == 4
    one = run_json(runner, "batch", "llama3-8b", "--gpus", "h100", "--engine", "vllm",
                   "--max-model-len", "8k", "--max-num-seqs", "4")
    assert one["contexts"][0]["max_batch_per_replica"] == 4
    assert capped["max_batch"] == 4 * capped["replicas"]
    (free,) = plan_layouts(runner, *args, "--top", "1")
    assert free["replicas"] == 1 and free["engine_inputs"]["max_num_seqs"] == 1024


def test_max_num_seqs_is_refused_beside_another_engine(runner: CliRunner) -> None:
    refused(runner, ["plan", "llama3-8b", "--users", "4", "--max-num-seqs", "8"],
            "--max-num-seqs", "--engine vllm")
