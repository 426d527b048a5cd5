"""Fuzzing the command line: whatever the argv, kvcalc answers (0), says it does not fit (1) or
refuses in one line (2); it never shows a traceback or exits 3, and `--format json` always
prints valid JSON when it answers.

Thousands of examples when CI is set (``CI=true``), a few hundred otherwise so that the local
suite stays fast. A failure prints the argv to replay with ``kvcalc ...``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kvcalc.cli.app import app

EXAMPLES = 3000 if os.environ.get("CI") else 300

MODELS = [
    "llama3-70b", "llama3-8b", "deepseek-v3", "jamba-v0.1", "gemma3-27b", "gpt-oss-120b",
    "llama4-scout", "minimax-m1", "qwen3-next-80b-a3b", "mistral-7b-v0.1", "llama3.1-405b",
    "meta-llama/Meta-Llama-3-70B", "LLAMA3-70B", "llama3", "model_configs", "README.md",
    "x.json", "/dev/null", "",
    "Qwen/Qwen2.5-7B-Instruct", "org/m@main", "org/bad--id", "org/m@../x",
    "tests/fixtures/hf/qwen3-8b",
]
GPU_SETS = [
    "8xH100", "1xh100", "h200", "4xMI300X", "2 x a100-80gb", "8xb200", "2xl4", "0xH100", "x",
    "8x", "H100x8", "h100:8", "8 * h100", "mi300x4", "h100:0", "4090x2", "h100:x",
]
CONTEXTS = ["1", "512", "4096", "8k", "32k", "128k", "1m", "8k,32k,128k", "1024m", "0", ","]
FRACTIONS = ["0.9", "0.5", "1", "0.01", "0", "1.5", "1e-320", "inf", "nan", "-0.1"]
SIZES = ["80GB", "5GiB", "512MiB", "0GB", "1000GB", "1e3GB", "80", "0.5TB"]
COUNTS = ["1", "2", "4", "8", "16", "64", "0", "-1", "3"]
DTYPES = ["fp8", "bf16", "fp16", "fp32", "int8", "int4", "int2", "mxfp4", "fp4", ""]
#: The KV format and --as options every sizing command takes.
FORMAT_OPTIONS = {
    "--kv-dtype": [*DTYPES, "nvfp4", "kivi2", "kivi4", "fp8_per_token_head"],
    "--kv-group": ["32", "128", "1", "0"], "--kv-scale-dtype": ["fp16", "fp32", "e8m0", "x"],
    "--kv-quant": ["kivi", "gptq"], "--kv-bits": ["2", "4", "3"],
    "--kv-residual": ["128", "0", "64", "1k", "2m"],
    "--as": ["mha", "mqa", "gqa:8", "gqa:7", "gqa:0", "mla:512+64", "mla:512", "mla:x", ""],
}
#: The eviction options of `size`, `batch` and `decode`: token counts in every form.
EVICTION_OPTIONS = {
    "--window": ["4096", "4k", "0", "1m", "x"], "--sinks": ["4", "0", "1k"],
    "--recent": ["1k", "0"], "--h2o-budget": ["2k", "0"], "--snapkv-budget": ["1k", "64k"],
    "--observation-window": ["32", "0"], "--prompt": ["32k"], "--gen": ["1k"],
    "--keep-ratio": FRACTIONS,
}
#: Each command's options, with values that are valid somewhere or sit on an edge.
SIZE_OPTIONS = {
    **FORMAT_OPTIONS, **EVICTION_OPTIONS, "--format": ["JSON", "Markdown", "jsonl"],
    "--ctx": CONTEXTS, "--batch": COUNTS, "--kv-heads": COUNTS,
    "--head-dim": ["64", "128", "0"], "--layers": COUNTS,
}
DEPLOY_OPTIONS = {
    **FORMAT_OPTIONS,
    "--tp": COUNTS, "--pp": COUNTS, "--gpu-util": FRACTIONS, "--reserve": FRACTIONS,
    "--overhead": SIZES, "--gpu-memory": SIZES, "--weights": SIZES, "--kv-memory": SIZES,
    "--weight-dtype": DTYPES, "--block-size": ["16", "32", "1", "0", "1k", "128k"],
    "--prefix-shared": ["0", "1024", "8192", "100000", "8k", "2m"],
    "--max-num-batched-tokens": ["8192", "2048", "0", "8k", "32m"],
}
BATCH_OPTIONS = {
    **DEPLOY_OPTIONS, **EVICTION_OPTIONS, "--ctx": CONTEXTS,
    "--engine": ["simple", "vllm", "sglang", "trtllm", "VLLM", "SGLang"],
    "--max-model-len": CONTEXTS, "--sglang-version": ["0.5.6", "0.4.0", "0.5.10", "v0.5.9"],
    "--mem-fraction-static": FRACTIONS, "--page-size": ["1", "16", "64", "1k"],
    "--context-length": CONTEXTS, "--chunked-prefill-size": ["8192", "0", "8k"],
    "--cuda-graph-max-bs": ["160", "0"], "--max-total-tokens": ["100000", "0", "1m"],
    "--free-before-load": ["78.43", "10GB", "0"], "--free-after-load": ["63.41", "1"],
    "--swa-full-tokens-ratio": FRACTIONS,
}
DECODE_OPTIONS = {
    **DEPLOY_OPTIONS, **EVICTION_OPTIONS, "--ctx": CONTEXTS, "--batch": COUNTS, "--mbu": FRACTIONS,
}
RANGES = ["4k..1m", "1..1024m", "4k..1m:5", "1m..4k", "4k..", "..", "4k..4k", "1..10:10",
          "4k..1m:65", "4k..1m:0", "8k..32k,64k"]
SWEEP_OPTIONS = {
    **DEPLOY_OPTIONS, "--ctx": CONTEXTS + RANGES, "--batch": [*COUNTS, "1..256", "1..1000000:3",
    "256..1", "8,64", "1..", "1..2000000"], "--mbu": FRACTIONS,
    # Never a writable file: the fuzz must not leave plots behind.
    "--plot": ["/nonexistent/s.png", "s.pdf", "/dev/null", "", "/", "/proc/s.svg"],
}
#: Spec files for `check`: the examples (one passes, one fails), YAML that is no spec, and
#: what is no file.
ROOT = Path(__file__).resolve().parent.parent
SPECS = [
    str(ROOT / "examples" / name)
    for name in ("capacity.yaml", "capacity-fails.yaml", "github-workflow.yml")
] + [str(ROOT / "model_configs" / "models" / "llama3-8b.yaml"), "README.md", "/dev/null", "."]
CHECK_OPTIONS = {"--format": ["junit", "github", "csv", "markdown", "JUnit"]}
IMPORT_OPTIONS = {
    "--name": ["imported", "Bad_Name", "", "qwen2.5-7b"],
    "--hf-repo": ["org/m", "a--b/c", "org/m@main", ""],
}
LIST_OPTIONS = {"--registry": ["model_configs", "/nonexistent", "/dev/zero", "."]}
TIMES = ["50ms", "2s", "0.5s", "800us", "0ms", "50", "1e3ms", "9" * 400 + "ms"]
PLAN_GPUS = ["h100", "H100,H200", "mi300x,b200", "apple-m4-max,h100", "foo", "h100,,h200", ","]
PLAN_OPTIONS = {
    "--users": [*COUNTS, "100", "100000"], "--ctx": CONTEXTS, "--max-tpot": TIMES,
    "--max-ttft": TIMES, "--gpus": PLAN_GPUS, "--max-gpus": COUNTS,
    "--weight-dtype": [*DTYPES, "bf16,fp8", "fp8,fp8"], "--kv-dtype": [*DTYPES, "bf16,fp8"],
    "--engine": ["simple", "vllm", "sglang", "VLLM"], "--mfu": FRACTIONS, "--top": COUNTS,
    "--price": ["h100=2.5", "h100=2.5,h200=3", "h100=x", "=1", "h100=1e400", "h100"],
}
COMMANDS = {
    "size": SIZE_OPTIONS, "models": LIST_OPTIONS, "gpus": LIST_OPTIONS,
    "batch": BATCH_OPTIONS, "decode": DECODE_OPTIONS, "sweep": SWEEP_OPTIONS,
    "plan": PLAN_OPTIONS, "import-hf": IMPORT_OPTIONS, "check": CHECK_OPTIONS,
}
#: Any option with any value, except --plot, which would write arbitrary text as a file name.
ALL_OPTIONS = sorted(
    ({o for options in COMMANDS.values() for o in options} | {"--format"}) - {"--plot"}
)
FLAGS = ["--check", "--help", "--version", "--kv-zero-point"]
#: Values from nowhere: the edges that used to lie or crash, and arbitrary text.
EDGE_VALUES = ["８", "１２８", "٣", "9" * 5000, "9" * 70, "a" * 300, "", " ", "-", "--", "1e400"]
# argv cannot hold NUL characters (the OS passes C strings); anything else can reach kvcalc.
TEXT = st.text(st.characters(blacklist_characters="\x00"), max_size=12)
CHAOS = st.one_of(
    st.sampled_from(EDGE_VALUES), TEXT, st.integers(-(10**6), 10**13).map(str),
    st.floats().map(repr),
)


@st.composite
def argvs(draw: st.DrawFn) -> list[str]:
    """Mostly plausible command lines (each command's own options, values near valid ones),
    with arbitrary options and values mixed in."""
    command = draw(st.sampled_from(sorted(COMMANDS)))
    options = COMMANDS[command]
    argv = [command]
    if command == "check":
        argv.append(draw(st.one_of(st.sampled_from(SPECS), TEXT)))
        if draw(st.booleans()):
            argv.append("--roofline")
    elif command not in ("models", "gpus") and draw(st.integers(0, 9)) > 0:
        argv.append(draw(st.one_of(st.sampled_from(MODELS), TEXT)))
    if command == "gpus" and draw(st.booleans()):
        argv.append(draw(st.sampled_from(["h100", "mi300x", "nope", "8xH100"])))
    if command in ("batch", "decode", "sweep") and draw(st.integers(0, 9)) > 0:
        argv += ["--gpus", draw(st.one_of(st.sampled_from(GPU_SETS), TEXT))]
    if command == "sweep" and draw(st.integers(0, 3)) == 0:  # several models and GPU sets
        argv += [draw(st.sampled_from(MODELS)), "--gpus", draw(st.sampled_from(GPU_SETS))]
    if command == "plan" and draw(st.integers(0, 9)) > 0:
        # Mostly a few GPUs: a whole-registry search per example would slow the suite down.
        argv += ["--users", draw(st.sampled_from(PLAN_OPTIONS["--users"]))]
        argv += ["--gpus", draw(st.one_of(st.sampled_from(PLAN_GPUS), TEXT))]
    most = 1 if command in ("models", "gpus") else 3
    for option in draw(st.lists(st.sampled_from(sorted(options)), unique=True, max_size=most)):
        argv += [option, draw(st.sampled_from(options[option]))]
    if draw(st.integers(0, 3)) == 0:
        argv += [draw(st.sampled_from(ALL_OPTIONS)), draw(CHAOS)]
    if draw(st.integers(0, 9)) == 0:
        argv.append(draw(st.sampled_from(FLAGS)))
    if draw(st.booleans()):
        argv += ["--format", "json"]
    return argv


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(argv=argvs())
@example(argv=["sweep", "-h", "llama3-70b", "--format", "json"])  # help, no JSON to parse
# A name no file can have (a lone surrogate, outside the shell's surrogateescape range): each
# file argument and option refuses it in one line (typer's Path type once raised on it).
@example(argv=["check", "\udd00"])
@example(argv=["calibrate", "\udd00"])
@example(argv=["models", "--registry", "\udd00"])
@example(argv=["batch", "llama3-8b", "--gpus", "h100", "--calibration", "\udd00"])
def test_any_argv_answers_refuses_in_one_line_or_does_not_fit(argv: list[str]) -> None:
    result = CliRunner().invoke(app, argv)
    where = f"kvcalc {' '.join(repr(a) if ' ' in a or not a else a for a in argv)}"
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        where,
        repr(result.exception),
    )
    assert result.exit_code in (0, 1, 2), (where, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr, where
    if result.exit_code == 2 and argv[0] == "check":  # one line per problem of the spec
        assert all(line.startswith("Error: ") for line in result.stderr.splitlines()), where
    elif result.exit_code == 2:
        assert len(result.stderr.splitlines()) <= 1, (where, result.stderr)
    event(f"exit {result.exit_code}")
    # -h is --help too (an argument drawn as text can spell it).
    asks_json = argv[-2:] == ["--format", "json"] and not {"--help", "-h", "--version"} & set(argv)
    if asks_json and result.exit_code in (0, 1):
        json.loads(result.stdout)
