"""Edges that must not lie: each input that used to give an absurd answer with exit 0, or a
traceback-free exit 3, gets one line on stderr and exit 2, or a stated warning and an answer."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from report_check import refused
from specs import BUNDLED_REGISTRY
from typer.testing import CliRunner

from kvcalc.cli.app import app

LONG = "9" * 5000  # past the 4,300 digits Python's int() converts


# ---------------------------------------------------------------- deployment edges


@pytest.mark.parametrize("command", ["batch", "decode"])
@pytest.mark.parametrize("prefix", ["8192", "100000"])
def test_a_prefix_as_long_as_the_context_is_refused(
    runner: CliRunner, command: str, prefix: str
) -> None:
    # A prefix of the whole context left each sequence nothing: a batch of 10^12.
    refused(
        runner,
        [command, "llama3-8b", "--gpus", "1xH100", "--ctx", "8k", "--prefix-shared", prefix],
        "--prefix-shared: ",
    )


def test_a_prefix_longer_than_one_of_the_contexts_is_refused(runner: CliRunner) -> None:
    line = refused(
        runner,
        ["batch", "llama3-8b", "-g", "1xH100", "--ctx", "4k,32k", "--prefix-shared", "4096"],
        "4,096-token context",
    )
    assert "shorter than every context" in line


def test_a_prefix_shorter_than_the_context_is_shared(runner: CliRunner) -> None:
    args = ["batch", "llama3-8b", "-g", "1xH100", "--ctx", "8k", "-f", "json"]
    alone = json.loads(runner.invoke(app, args).stdout)["contexts"][0]["max_batch"]
    shared = runner.invoke(app, [*args, "--prefix-shared", "8176"])
    assert shared.exit_code == 0, shared.stderr
    assert alone < json.loads(shared.stdout)["contexts"][0]["max_batch"] < 10**6


@pytest.mark.parametrize("command", ["batch", "decode"])
def test_a_kv_budget_above_the_gpu_memory_is_refused(runner: CliRunner, command: str) -> None:
    line = refused(
        runner,
        [command, "llama3-8b", "--gpus", "1xH100", "--kv-memory", "1000GB"],
        "--kv-memory: 1,000,000,000,000 B is more than the 85,020,639,232 B",
    )
    assert "one GPU" in line


def test_a_kv_budget_fits_up_to_the_byte_the_weights_and_overhead_leave(
    runner: CliRunner,
) -> None:
    # A KV budget of the whole H100 beside 16 GB of weights used to give 75 sequences, exit 0.
    args = ["batch", "llama3-8b", "--gpus", "1xH100", "--ctx", "8k", "--format", "json"]
    plain = json.loads(runner.invoke(app, args).stdout)
    rest = plain["weights_bytes_per_gpu"] + plain["overhead_bytes_per_gpu"]
    room = 85_020_639_232 - rest
    at_room = runner.invoke(app, [*args, "--kv-memory", f"{room}B"])
    assert at_room.exit_code == 0, at_room.stderr
    assert json.loads(at_room.stdout)["contexts"][0]["max_batch"] > 0
    whole_gpu = (85_020_639_232, f"short by {rest / 2**30:.2f} GiB")
    for kv, short in ((room + 1, "short by 1 B"), whole_gpu):
        over = runner.invoke(app, [*args, "--kv-memory", f"{kv}B"])
        assert over.exit_code == 1, over.stderr
        out = json.loads(over.stdout)
        assert (out["fits"], out["contexts"][0]["max_batch"]) == (False, 0)
        assert out["reason"].endswith(f"exceed its 79.18 GiB: {short}")


def test_weights_beyond_the_usable_memory_say_by_how_much(runner: CliRunner) -> None:
    args = ["batch", "llama3-8b", "-g", "h100", "--weights", "200GB", "-c", "8k", "-f", "json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.stderr
    out = json.loads(result.stdout)
    short = 200 * 10**9 + out["overhead_bytes_per_gpu"] - out["usable_bytes_per_gpu"]
    assert out["reason"].endswith(f"usable per GPU: short by {short / 2**30:.2f} GiB")


@pytest.mark.parametrize("engine", ["simple", "vllm"])
def test_weights_and_a_kv_budget_beyond_the_gpu_fail_a_check(
    tmp_path: Path, engine: str
) -> None:
    # 141 GB of weights and 80 GB of KV on one H100 reported 29 sequences and passed.
    spec = tmp_path / "capacity.yaml"
    spec.write_text(
        "deployments:\n  - {name: d, model: llama3.1-70b, gpus: 1xH100, ctx: 8k, "
        f"engine: {engine}, kv_memory: 80GB, require: {{min_batch: 16}}}}\n"
    )
    result = CliRunner().invoke(app, ["check", str(spec), "--format", "json"])
    assert result.exit_code == 1, result.stderr
    assert "short by 128.97 GiB" in result.stdout


@pytest.mark.parametrize("command", ["batch", "decode", "sweep"])
def test_more_gpu_memory_than_the_accelerator_has_is_refused(
    runner: CliRunner, command: str
) -> None:
    refused(
        runner,
        [command, "llama3.1-8b", "--gpus", "h100", "--gpu-memory", "1TB", "--ctx", "8k"],
        "--gpu-memory: 1,000,000,000,000 B is more than the 85,520,809,984 B (79.65 GiB) one "
        "NVIDIA H100 SXM5 80GB has",
    )


@pytest.mark.parametrize("mbu", ["1e-320", "0.001", "0", "-0.5", "1.5"])
def test_an_mbu_outside_its_range_is_refused(runner: CliRunner, mbu: str) -> None:
    # 1e-320 is a positive float: every time came out infinite.
    refused(runner, ["decode", "llama3-8b", "--gpus", "1xH100", "--mbu", mbu], "--mbu: ")


def test_the_smallest_mbu_gives_finite_times(runner: CliRunner) -> None:
    result = runner.invoke(
        app, ["decode", "llama3-8b", "-g", "1xH100", "--mbu", "0.01", "-f", "json"]
    )
    assert result.exit_code == 0, result.stderr
    assert "Infinity" not in result.stdout and "null" not in result.stdout.split('"contexts"')[1]


# ---------------------------------------------------------------- contexts beyond the maximum


def test_a_context_beyond_the_maximum_warns_and_says_so_in_json(runner: CliRunner) -> None:
    result = runner.invoke(app, ["size", "llama3-8b", "--ctx", "8k,1m", "-f", "json"])
    assert result.exit_code == 0
    warning = (
        "llama3-8b: context 1,048,576 is beyond its maximum context of 8,192 tokens; "
        "sized as asked, but the model was not trained that long"
    )
    assert result.stderr == f"warning: {warning}\n"
    payload = json.loads(result.stdout)
    assert payload["warnings"] == [warning]
    assert [c["context_tokens"] for c in payload["contexts"]] == [8192, 1 << 20]


def test_contexts_within_the_maximum_have_no_warnings_key(runner: CliRunner) -> None:
    result = runner.invoke(app, ["size", "llama3-8b", "--ctx", "8k", "-f", "json"])
    assert result.stderr == ""
    assert "warnings" not in json.loads(result.stdout)


@pytest.mark.parametrize(
    "args",
    [
        ["batch", "llama3-8b", "-g", "1xH100", "--ctx", "32k"],
        ["batch", "llama3-8b", "-g", "1xH100", "--engine", "vllm", "--max-model-len", "32k"],
        # SGLang admits no request past its context length (llama3-8b's 8k by default).
        [
            "batch", "llama3-8b", "-g", "1xH100", "--engine", "sglang", "--ctx", "32k",
            "--context-length", "64k",
        ],
        ["decode", "llama3-8b", "-g", "1xH100", "--ctx", "32k"],
    ],
)
@pytest.mark.parametrize("fmt", ["json", "yaml", "table"])
def test_every_command_warns_the_same_way(runner: CliRunner, args: list[str], fmt: str) -> None:
    import yaml

    result = runner.invoke(app, [*args, "-f", fmt])
    assert result.exit_code == 0, result.stderr
    assert "warning: llama3-8b: context 32,768 is beyond" in result.stderr
    if fmt != "table":
        document = json.loads(result.stdout) if fmt == "json" else yaml.safe_load(result.stdout)
        assert document["warnings"][0].startswith("llama3-8b: context 32,768 is beyond")


def test_the_whole_registry_warns_in_one_line(runner: CliRunner) -> None:
    result = runner.invoke(app, ["batch", "-g", "8xH100", "--ctx", "32k", "-f", "json"])
    assert result.exit_code == 0
    [line] = result.stderr.splitlines()
    document = json.loads(result.stdout)
    assert document["warnings"] == [line.removeprefix("warning: ")]
    # The line counts the rows; each row says which of its contexts its model was not
    # trained for, against the model's own maximum.
    marked = [m for m in document["models"] if any(c["beyond_max_context"] for c in m["contexts"])]
    assert line.startswith(f"warning: {len(marked)} rows at contexts beyond the model's maximum")
    assert len(line) < 160
    rows = {m["model"]: m for m in document["models"]}
    assert rows["llama3-8b"]["contexts"][0]["beyond_max_context"] is True
    assert rows["llama3.1-8b"]["contexts"][0]["beyond_max_context"] is False


def test_the_whole_registry_table_marks_the_cells_beyond_the_model(runner: CliRunner) -> None:
    result = runner.invoke(app, ["batch", "-g", "8xH100", "--ctx", "8k,32k", "-f", "markdown"])
    assert result.exit_code == 0
    cells = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[4:6]]
        for line in result.stdout.splitlines()
        if line.startswith("| ")
    }
    assert not cells["llama3-8b"][0].endswith("*") and cells["llama3-8b"][1].endswith("*")
    assert not any(c.endswith("*") for c in cells["llama3.1-8b"])


# ---------------------------------------------------------------- names and numbers


def test_an_empty_kv_dtype_is_refused(runner: CliRunner) -> None:
    # Refused as every blank value is (tests/test_cli_options.py), not as an unknown dtype.
    refused(runner, ["size", "llama3-8b", "--kv-dtype", ""], "--kv-dtype: no value")
    refused(
        runner, ["batch", "llama3-8b", "-g", "1xH100", "--kv-dtype", ""], "--kv-dtype: no value"
    )
    refused(
        runner,
        ["batch", "llama3-8b", "-g", "1xH100", "--weight-dtype", ""],
        "--weight-dtype: no value",
    )


@pytest.mark.parametrize(
    "args",
    [
        ["size", "a" * 251],
        ["size", "A" * 300 + "/x"],
        ["batch", "llama3-8b", "--gpus", "b" * 251],
        ["batch", "llama3-8b", "--gpus", "8x" + "b" * 251],
        ["gpus", "c" * 400],
    ],
)
def test_a_name_too_long_for_a_file_is_an_unknown_name(
    runner: CliRunner, args: list[str]
) -> None:
    line = refused(runner, args, "unknown ")
    assert len(line) < 300


def test_a_config_path_too_long_for_the_system_is_one_line(runner: CliRunner) -> None:
    refused(runner, ["size", "d" * 300 + ".json"], "cannot read")


@pytest.mark.parametrize(
    "args",
    [
        ["size", "llama3-8b", "--ctx", LONG],
        ["size", "llama3-8b", "--batch", LONG],
        ["size", "llama3-8b", "--kv-heads", LONG],
        ["batch", "llama3-8b", "-g", "1xH100", "--kv-memory", f"{LONG}GB"],
        ["batch", "llama3-8b", "-g", "1xH100", "--gpu-memory", f"1.{LONG}GB"],
        ["batch", "llama3-8b", "-g", "1xH100", "--gpu-util", LONG],
        ["batch", "llama3-8b", "-g", "1xH100", "--prefix-shared", LONG],
        ["batch", "llama3-8b", "-g", f"{LONG}xH100"],
        ["batch", "llama3-8b", "-g", "1xH100", "--engine", "sglang", "--sglang-version",
         f"0.5.{LONG}"],
        ["batch", "llama3-8b", "-g", "1xH100", "--engine", "sglang", "--free-before-load", LONG],
        ["decode", "llama3-8b", "-g", "1xH100", "--mbu", LONG],
    ],
)
def test_numbers_of_thousands_of_digits_are_refused(runner: CliRunner, args: list[str]) -> None:
    line = refused(runner, args, "")
    assert len(line) < 400  # the value is named, not echoed whole


@pytest.mark.parametrize("value", ["inf", "nan", "-inf", "1e400"])
@pytest.mark.parametrize("option", ["--gpu-util", "--reserve"])
def test_non_finite_fractions_are_refused(runner: CliRunner, option: str, value: str) -> None:
    refused(runner, ["batch", "llama3-8b", "-g", "1xH100", option, value], option)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["size", "llama3-8b", "--ctx", "１２８"], "ASCII digits"),
        (["size", "llama3-8b", "--batch", "８"], "ASCII digits"),
        (["size", "llama3-8b", "--layers", "٣"], "ASCII digits"),  # Arabic-Indic three
        (["batch", "llama3-8b", "--gpus", "８xH100"], "ASCII digits"),
        (["batch", "llama3-8b", "--gpus", "1xH100", "--tp", "１"], "ASCII digits"),
        (["batch", "llama3-8b", "--gpus", "1xH100", "--kv-memory", "５GB"], "ASCII digits"),
        (["batch", "llama3-8b", "--gpus", "1xH100", "--gpu-util", "０.５"], "ASCII digits"),
    ],
)
def test_one_digit_rule_for_every_number(runner: CliRunner, args: list[str], needle: str) -> None:
    # --ctx read full-width digits while --gpus refused them: now both refuse.
    refused(runner, args, needle)


# ---------------------------------------------------------------- files


def write_config(tmp_path: Path, config: object) -> Path:
    path = tmp_path / "m" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config) if not isinstance(config, str) else config)
    return path


def test_a_config_with_no_shape_field_is_refused(runner: CliRunner, tmp_path: Path) -> None:
    # It was sized as a default 32-layer Llama.
    path = write_config(tmp_path, {"model_type": "llama"})
    refused(
        runner,
        ["size", str(path), "--ctx", "8k"],
        "hidden_size, num_hidden_layers, num_attention_heads: missing",
    )


def test_a_rule_of_the_whole_config_reads_without_pydantic_s_words(
    runner: CliRunner, tmp_path: Path
) -> None:
    # It read "config.json: (top level): Value error, mixers.full: 32 query heads ...".
    path = write_config(tmp_path, {
        "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 7, "intermediate_size": 14336,
        "vocab_size": 128256, "max_position_embeddings": 8192,
    })
    line = refused(runner, ["size", str(path)],
                   f"{path}: mixers.full: 32 query heads are not divisible by 7 kv_heads")
    assert "Value error" not in line and "(top level)" not in line


@pytest.mark.parametrize(
    "text",
    [
        '{"model_type": "llama", "num_hidden_layers": ' + LONG + "}",
        '{"model_type": "llama", "hidden_size": 1e999}',
    ],
)
def test_numbers_in_a_config_follow_the_rule(
    runner: CliRunner, tmp_path: Path, text: str
) -> None:
    refused(runner, ["size", str(write_config(tmp_path, text)), "--ctx", "8k"], "invalid JSON")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_a_non_finite_constant_in_a_field_the_sizing_reads_is_refused(
    runner: CliRunner, tmp_path: Path, constant: str
) -> None:
    text = '{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": ' + constant + "}"
    refused(
        runner,
        ["size", str(write_config(tmp_path, text)), "--ctx", "8k"],
        f"hidden_size: must be a finite number, got {constant}",
    )


def test_a_config_context_beyond_the_limit_is_refused(runner: CliRunner, tmp_path: Path) -> None:
    # Without --ctx, `size` sizes the model's maximum: 10^20 tokens went through.
    config = {"model_type": "llama", "num_hidden_layers": 2, "max_position_embeddings": 10**20}
    refused(
        runner,
        ["size", str(write_config(tmp_path, config))],
        "max_position_embeddings: must be at most 1,073,741,824 tokens",
    )


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_a_device_is_not_a_config(runner: CliRunner, device: str) -> None:
    if not os.path.exists(device):
        pytest.skip(f"no {device}")
    refused(runner, ["size", device, "--ctx", "8k"], "not a regular file (a device)")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_behind_a_symlink_is_refused_at_once(runner: CliRunner, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").symlink_to(fifo)
    refused(runner, ["size", str(folder), "--ctx", "8k"], "not a regular file (a FIFO)")
    refused(runner, ["size", str(folder / "config.json")], "not a regular file (a FIFO)")


def registry_copy(tmp_path: Path) -> Path:
    root = tmp_path / "registry"
    shutil.copytree(BUNDLED_REGISTRY, root)
    return root


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_in_the_registry_is_refused(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = registry_copy(tmp_path)
    path = root / "models" / "llama3-8b.yaml"
    path.unlink()
    os.mkfifo(path)
    monkeypatch.setenv("KVCALC_REGISTRY", str(root))
    monkeypatch.setenv("KVCALC_NO_CACHE", "1")
    refused(runner, ["size", "llama3-8b", "--ctx", "8k"], "not a regular file (a FIFO)")


@pytest.mark.parametrize("what", ["models", "gpus"])
def test_check_of_an_empty_registry_fails(runner: CliRunner, tmp_path: Path, what: str) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "gpus").mkdir()
    refused(runner, [what, "--check", "--registry", str(tmp_path)], "no registry files")


# ---------------------------------------------------------------- registry files


def edited(root: Path, name: str, old: str, new: str) -> None:
    path = root / name
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize(
    ("name", "old", "new", "needle"),
    [
        ("models/llama3-8b.yaml", "num_layers: 32", "num_layers: 100001", "num_layers"),
        ("models/llama3-8b.yaml", "num_layers: 32", f"num_layers: {LONG}", "characters"),
        ("models/llama3-8b.yaml", "max_context: 8192", "max_context: 1073741825", "max_context"),
        ("models/llama3-8b.yaml", "total: 8.0e9", "total: .nan", "params.total"),
        ("models/llama3-8b.yaml", "total: 8.0e9", "total: .inf", "params.total"),
        ("models/llama3-8b.yaml", "num_layers: 32", "num_layers: 32\n  num_layers: 16", "twice"),
        ("gpus/h100-sxm.yaml", "bandwidth_tbps: 3.35", "bandwidth_tbps: .inf", "bandwidth"),
        ("gpus/h100-sxm.yaml", "bandwidth_tbps: 3.35", "bandwidth_tbps: -3.35", "bandwidth"),
        ("gpus/h100-sxm.yaml", "bf16: 989", "bf16: .nan", "dense_tflops.bf16"),
    ],
)
def test_the_registry_schema_bounds_every_number(
    runner: CliRunner, tmp_path: Path, name: str, old: str, new: str, needle: str
) -> None:
    root = registry_copy(tmp_path)
    edited(root, name, old, new)
    what = name.split("/")[0]
    result = runner.invoke(app, [what, "--check", "--registry", str(root)])
    assert result.exit_code == 2, result.stdout
    assert needle in result.stderr
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------- where the output goes


def test_a_full_disk_is_one_line_and_exit_2(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvcalc.render import formats

    def full(report: object, fmt: str) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(formats, "emit", full)
    refused(runner, ["size", "llama3-8b"], "cannot write the output: No space left on device")


def test_a_closed_pipe_exits_quietly(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvcalc.render import formats

    def closed(report: object, fmt: str) -> int:
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    monkeypatch.setattr(formats, "emit", closed)
    result = runner.invoke(app, ["size", "llama3-8b"])
    assert (result.exit_code, result.stderr) == (0, "")


def kvcalc_process() -> list[str]:
    return [sys.executable, "-m", "kvcalc"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_writing_to_a_full_device_exits_2_in_one_line() -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [*kvcalc_process(), "models"], stdout=full, stderr=subprocess.PIPE, text=True
        )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "Error: cannot write the output: No space left on device; free space or write elsewhere"
    ]


def test_a_pipe_closed_mid_write_keeps_the_verdict(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Llama-3.1-70B's 141 GB of weights on one H100: exit 1 whether or not anyone reads it.
    from kvcalc.render import formats

    def closed(report: object, fmt: str) -> int:
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    monkeypatch.setattr(formats, "emit", closed)
    result = runner.invoke(app, ["batch", "llama3.1-70b", "-g", "h100"])
    assert (result.exit_code, result.stderr) == (1, "")


def run_into_closed_pipe(args: list[str]) -> tuple[int, bytes]:
    """Run kvcalc with stdout a pipe whose reader has gone before anything is written."""
    process = subprocess.Popen(
        [*kvcalc_process(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    err = process.stderr.read()
    process.stderr.close()
    return process.wait(timeout=60), err


def test_a_real_closed_pipe_keeps_the_exit_code_of_a_failed_check_and_a_bad_spec(
    tmp_path: Path,
) -> None:
    # `kvcalc check spec.yaml -f junit | true` exited 0 for all three, as did batch.
    assert run_into_closed_pipe(["batch", "llama3.1-70b", "-g", "h100"]) == (1, b"")
    fails = Path(__file__).parent.parent / "examples" / "capacity-fails.yaml"
    assert run_into_closed_pipe(["check", str(fails), "-f", "junit"]) == (1, b"")
    bad = tmp_path / "bad.yaml"
    bad.write_text("deployments:\n  - name: x\n    model: llama3.1-8b\n    no_such_key: 1\n")
    code, err = run_into_closed_pipe(["check", str(bad), "-f", "junit"])
    assert code == 2
    assert b"no_such_key" in err


def test_closed_or_read_only_stdout_is_one_line_and_exit_2() -> None:
    # Closed (`>&-`) was an internal error, exit 3; read-only (`1</dev/null`) a traceback.
    closed = subprocess.run(
        [*kvcalc_process(), "size", "llama3-8b"],
        stderr=subprocess.PIPE,
        preexec_fn=lambda: os.close(1),
        text=True,
    )
    assert (closed.returncode, closed.stderr) == (
        2,
        "Error: standard output is closed; give kvcalc a file or a pipe to write to\n",
    )
    with open(os.devnull) as read_only:
        done = subprocess.run(
            [*kvcalc_process(), "size", "llama3-8b"],
            stdout=read_only,
            stderr=subprocess.PIPE,
            text=True,
        )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "Error: cannot write the output: Bad file descriptor; "
        "open standard output for writing (a file or a pipe)"
    ]


@pytest.mark.parametrize("args", [["models"], ["--help"], ["batch", "-g", "8xH100"]])
def test_a_real_closed_pipe_exits_0_without_a_word(args: list[str]) -> None:
    process = subprocess.Popen(
        [*kvcalc_process(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    err = process.stderr.read()
    process.stderr.close()
    assert (process.wait(timeout=60), err) == (0, b"")
