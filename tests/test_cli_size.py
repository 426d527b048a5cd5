"""`kvcalc size` through typer's CliRunner: output, JSON keys, and every error path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_check import usage_error
from typer.testing import CliRunner

from kvcalc.cli.app import app


def run(runner: CliRunner, *args: str):
    return runner.invoke(app, list(args))


def size_json(runner: CliRunner, *args: str) -> dict:
    """The JSON of one context, flattened: the top-level keys with its context's keys."""
    result = run(runner, "size", *args, "--format", "json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    (context,) = out.pop("contexts")
    return {**out, **context}


def test_table_shows_exact_bytes_and_both_units(runner: CliRunner) -> None:
    result = run(runner, "size", "llama3-70b", "--ctx", "128k")
    assert result.exit_code == 0
    assert "131,072 tokens" in result.stdout
    assert "per token:    327,680 B (320.00 KiB)" in result.stdout
    assert "42,949,672,960 B = 40.00 GiB (42.95 GB)" in result.stdout


def test_json_keys_and_values(runner: CliRunner) -> None:
    out = size_json(runner, "llama3-70b", "--ctx", "8k", "--batch", "3")
    assert out["model"] == "llama3-70b"
    assert out["context_tokens"] == 8192
    assert out["batch"] == 3
    assert out["kv_dtype"] == "bf16"
    assert out["kv_bytes_per_token"] == 327_680
    assert out["kv_bytes_per_sequence"] == int(2.5 * 2**30)
    assert out["kv_bytes_total"] == 3 * int(2.5 * 2**30) == 8_053_063_680
    assert out["groups"] == [
        {
            "kind": "full",
            "detail": "8 kv x 128",
            "layers": 80,
            "kv_bytes_per_token": 327_680,
            "tokens_held": 8192,
            "state_bytes": 0,
            "kv_bytes_per_sequence": int(2.5 * 2**30),
        }
    ]


@pytest.mark.parametrize(
    ("args", "per_token", "per_sequence"),
    [
        (["--kv-heads", "64"], int(2.5 * 2**20), 320 * 2**30),
        (["--kv-heads", "1"], 40 * 1024, 5 * 2**30),
        (["--kv-dtype", "fp8"], 163_840, 20 * 2**30),
        (["--layers", "40"], 163_840, 20 * 2**30),
        (["--head-dim", "64"], 163_840, 20 * 2**30),
    ],
)
def test_what_if_overrides(
    runner: CliRunner, args: list[str], per_token: int, per_sequence: int
) -> None:
    out = size_json(runner, "llama3-70b", "--ctx", "128k", *args)
    assert out["kv_bytes_per_token"] == per_token
    assert out["kv_bytes_per_sequence"] == per_sequence


def test_seed_000_262_gb_at_100k_as_mha(runner: CliRunner) -> None:
    out = size_json(runner, "llama3-70b", "--kv-heads", "64", "--ctx", "100000")
    assert out["kv_bytes_per_sequence"] == 262_144_000_000


@pytest.mark.parametrize(
    ("text", "tokens"), [("8192", 8192), ("8k", 8192), ("128K", 131_072), ("1m", 1_048_576)]
)
def test_context_forms_echo_exact_tokens(runner: CliRunner, text: str, tokens: int) -> None:
    assert size_json(runner, "llama3-70b", "--ctx", text)["context_tokens"] == tokens


@pytest.mark.parametrize(
    "args",
    [
        ["size", "llama3-8b", "--ctx", "4,096"],
        ["size", "llama3-8b", "--ctx", "32,768"],
        ["size", "llama3-8b", "--ctx", "1,048,576"],
        ["batch", "llama3-8b", "-g", "h100", "--ctx", "131,072"],
        ["decode", "llama3-8b", "-g", "h100", "--ctx", "8,192"],
        ["plan", "llama3-8b", "--users", "8", "-g", "h100", "--ctx", "8,192"],
        ["offload", "llama3-8b", "-g", "h100", "--ctx", "32,768"],
        ["compare", "llama3-8b", "--ctx", "8,192"],
        ["sweep", "llama3-8b", "-g", "h100", "--ctx", "8,192"],
        ["batch", "llama3-8b", "-g", "h100", "--engine", "vllm", "--max-model-len", "8,192"],
        ["batch", "llama3-8b", "-g", "h100", "--engine", "sglang", "--context-length", "8,192"],
    ],
)
def test_a_context_with_thousands_separators_is_refused(
    runner: CliRunner, args: list[str]
) -> None:
    # kvcalc prints 32,768: typed back, `--ctx 32,768` sized the contexts 32 and 768 tokens.
    text = args[-1]
    usage_error(run(runner, *args), f"{args[-2]}: {text!r} reads as {text.replace(',', '')} "
                "with thousands separators")


def test_a_list_of_short_contexts_is_still_a_list(runner: CliRunner) -> None:
    # The way to write the list 512 and 768: a space after the comma.
    result = run(runner, "size", "llama3-8b", "--ctx", "512, 768", "--format", "json")
    assert result.exit_code == 0, result.stderr
    contexts = json.loads(result.stdout)["contexts"]
    assert [c["context_tokens"] for c in contexts] == [512, 768]


@pytest.mark.parametrize("ctx", ["8k", "8k,128k", "8k,32k,128k"])
def test_one_json_shape_whatever_the_number_of_contexts(runner: CliRunner, ctx: str) -> None:
    result = run(runner, "size", "llama3.1-70b", "--ctx", ctx, "--format", "json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert list(out) == [
        "schema_version",
        "model",
        "model_name",
        "kv_dtype",
        "kv_bits_per_value",
        "batch",
        "kv_bytes_per_token",
        "eviction",
        "contexts",
    ]
    assert out["eviction"] == {
        "policy": "none", "lossy": False, "consequence": None, "parameters": {}
    }
    assert out["kv_bytes_per_token"] == 327_680
    contexts = out["contexts"]
    assert len(contexts) == len(ctx.split(","))
    for context in contexts:
        assert list(context) == ["context_tokens", "tokens_held", "kv_bytes_per_sequence",
                                 "kv_bytes_total", "groups"]
        assert context["tokens_held"] == context["context_tokens"]
        assert context["kv_bytes_per_sequence"] == 327_680 * context["context_tokens"]


def test_names_resolve_case_insensitively_and_by_hf_repo(runner: CliRunner) -> None:
    for name in ("LLAMA3-70B", "meta-llama/Meta-Llama-3-70B"):
        assert size_json(runner, name, "--ctx", "8k")["model"] == "llama3-70b"


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["llama3-7b"], ["unknown model 'llama3-7b'", "did you mean", "llama3-70b"]),
        (["llama3-70b", "--ctx", "abc"], ["--ctx", "'abc'", "8k"]),
        (["llama3-70b", "--ctx", "-5"], ["--ctx", "'-5'"]),
        (["llama3-70b", "--ctx", "0"], ["--ctx", "at least 1 token"]),
        (["llama3-70b", "--ctx", "1e30"], ["--ctx", "'1e30'"]),
        (["llama3-70b", "--ctx", "99999999999"], ["--ctx", "above the limit"]),
        (["llama3-70b", "--ctx", ","], ["--ctx"]),
        (["llama3-70b", "--batch", "0"], ["--batch"]),
        (["llama3-70b", "--batch", "-3"], ["--batch"]),
        (["llama3-70b", "--batch", "10000000"], ["--batch"]),
        (["llama3-70b", "--kv-dtype", "fp9"], ["--kv-dtype", "fp9", "fp8"]),
        (["llama3-70b", "--kv-heads", "0"], ["--kv-heads"]),
        (["llama3-70b", "--layers", "abc"], ["--layers"]),
        (["llama3-70b", "--format", "xml"], ["--format"]),
        (["llama3-70b", "--nope"], ["--nope"]),
        (["missing/config.json"], ["config.json", "not found"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    runner: CliRunner, args: list[str], needles: list[str]
) -> None:
    usage_error(run(runner, "size", *args), *needles)


# ------------------------------------------------------------------ hostile registry files

GOOD = (Path(__file__).parent.parent / "model_configs" / "models" / "llama3-70b.yaml").read_text()


def bad_registry(tmp_path: Path, text: str) -> Path:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "llama3-70b.yaml").write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        (GOOD.replace("  num_layers: 80\n", ""), ["architecture.num_layers", "missing"]),
        (GOOD.replace("hidden_size: 8192", "hidden_size: 8192\n  colour: red"),
         ["architecture.colour", "unknown key"]),
        (GOOD.replace("num_layers: 80", "num_layers: eighty"), ["architecture.num_layers"]),
        (GOOD.replace("num_layers: 80", "num_layers: -80"), ["architecture.num_layers"]),
        (GOOD.replace("kv_heads: 8", "kv_heads: 7"), ["not divisible"]),
        (GOOD.replace("id: llama3-70b", "id: llama3-70b\nid: [oops"), ["invalid YAML"]),
        ("!!python/object/apply:os.system ['echo pwned']\n", ["invalid YAML"]),
        ("- just\n- a list\n", ["expected a mapping"]),
        ("a: &a [1, 2]\nb: [*a, *a]\n", ["aliases are not allowed"]),
        ("", ["expected a mapping"]),
    ],
)
def test_hostile_or_malformed_registry_file(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str,
    needles: list[str],
) -> None:
    monkeypatch.setenv("KVCALC_REGISTRY", str(bad_registry(tmp_path, text)))
    result = run(runner, "size", "llama3-70b", "--ctx", "8k")
    usage_error(result, "llama3-70b.yaml", *needles)


def test_no_colour_when_not_a_terminal(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR")
    result = run(runner, "size", "llama3-70b", "--ctx", "8k")
    assert "\x1b[" not in result.stdout
