"""How `kvcalc check` reads a spec file: no value, YAML 1.1's booleans, octal and hex, token
counts as `--ctx` reads them, hostile nesting refused from the parser's first events, and every
problem of a spec reported in one run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner, Result

from kvcalc.cli.app import app
from kvcalc.engine.units import parse_context
from kvcalc.registry.check_spec import MAX_DEPTH, MAX_NODES, SpecError, load_spec
from kvcalc.registry.load import MAX_FILE_BYTES

#: A deployment whose requirement is cheap to measure; ``{extra}`` adds keys to it.
BASE = """\
deployments:
  - name: a
    model: llama3.1-8b
    gpus: h100
    ctx: 8k
{extra}    require: {require}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "capacity.yaml"
    path.write_text(text)
    return path


def check(runner: CliRunner, path: Path, *args: str) -> Result:
    return runner.invoke(app, ["check", str(path), *args])


def refused(runner: CliRunner, path: Path) -> list[str]:
    """The problem lines of a spec refused with exit 2, without their ``Error: `` prefix."""
    result = check(runner, path)
    assert result.exit_code == 2, result.stdout
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert all(line.startswith("Error: ") for line in lines)
    return [line.removeprefix("Error: ") for line in lines]


# ------------------------------------------------------------------ no value


@pytest.mark.parametrize(
    ("extra", "require", "line", "field"),
    [
        ("", "{min_batch: , max_kv_fraction: 1}", 6, "deployments[0].require.min_batch"),
        ("", '{min_batch: "", max_kv_fraction: 1}', 6, "deployments[0].require.min_batch"),
        ("", "{min_batch: ~, max_kv_fraction: 1}", 6, "deployments[0].require.min_batch"),
        ("", "{min_batch: null, max_kv_fraction: 1}", 6, "deployments[0].require.min_batch"),
        ("", "{min_batch: 1, max_tpot_ms: '  '}", 6, "deployments[0].require.max_tpot_ms"),
        ("    tp:\n", "{min_batch: 1}", 6, "deployments[0].tp"),
        ("    kv_memory: ''\n", "{min_batch: 1}", 6, "deployments[0].kv_memory"),
        ("    engine:\n", "{min_batch: 1}", 6, "deployments[0].engine"),
        ("", "", 6, "deployments[0].require"),
    ],
)
def test_a_field_with_no_value_is_refused(
    runner: CliRunner, tmp_path: Path, extra: str, require: str, line: int, field: str
) -> None:
    path = write(tmp_path, BASE.format(extra=extra, require=require))
    (problem,) = refused(runner, path)
    assert problem.startswith(f"{path}:{line}: {field}: no value")


def test_an_environment_substitution_that_came_out_empty_is_refused(
    runner: CliRunner, tmp_path: Path
) -> None:
    # What `envsubst` makes of `min_batch: ${MIN_BATCH}` and `"${MIN_BATCH}"` when it is unset.
    path = write(tmp_path, BASE.format(extra="", require='\n      min_batch:\n'
                                       '      max_tpot_ms: ""\n      max_kv_fraction: 1'))
    assert refused(runner, path) == [
        f"{path}:7: deployments[0].require.min_batch: no value; give one or remove the key",
        f"{path}:8: deployments[0].require.max_tpot_ms: no value; give one or remove the key",
    ]


@pytest.mark.parametrize(
    ("text", "line", "field"),
    [
        ("defaults:\ndeployments:\n  - {model: m, gpus: h100, require: {min_context: 8k}}\n",
         1, "defaults"),
        ("deployments:\n", 1, "deployments"),
        ("deployments:\n  -\n", 2, "deployments[0]"),
    ],
)
def test_a_section_with_no_value_is_refused(
    runner: CliRunner, tmp_path: Path, text: str, line: int, field: str
) -> None:
    path = write(tmp_path, text)
    (problem,) = refused(runner, path)
    assert problem.startswith(f"{path}:{line}: {field}: no value")


# ------------------------------------------------------------------ YAML 1.1's readings


@pytest.mark.parametrize(
    ("requirement", "value", "reason"),
    [
        ("max_kv_fraction", "on", "boolean"),
        ("min_tokens_per_second", "yes", "boolean"),
        ("max_tpot_ms", "true", "boolean"),
        ("max_ttft_ms", "off", "boolean"),
        ("min_batch", "010", "leading zero"),
        ("min_batch", "0x20", "hexadecimal"),
        ("min_batch", "0o17", "hexadecimal, octal and binary"),
        ("min_batch", "0b101", "hexadecimal, octal and binary"),
        ("min_batch", "1_000", "is not a whole number"),
        ("min_batch", "1:30", "is not a whole number"),
        ("max_tpot_ms", "1:30.5", "is not a number"),
        ("max_kv_fraction", "09.5", "leading zero"),
        ("min_context", "010k", "leading zero"),
        ("min_context", "0x2000", "hexadecimal"),
        ("min_context", "yes", "boolean"),
    ],
)
def test_yaml_1_1_booleans_octal_and_hex_are_not_requirements(
    runner: CliRunner, tmp_path: Path, requirement: str, value: str, reason: str
) -> None:
    # YAML 1.1 (PyYAML) reads these as true, 1, 8, 32, 15, 5, 1000, 90: a gate that checks
    # something nobody wrote.
    require = f"{{{requirement}: {value}}}"
    path = write(tmp_path, BASE.format(extra="", require=require))
    (problem,) = refused(runner, path)
    assert problem.startswith(f"{path}:6: deployments[0].require.{requirement}: '{value}'")
    assert reason in problem


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("tp", "true", "boolean"),
        ("tp", "010", "leading zero"),
        ("pp", "0x1", "hexadecimal"),
        ("ctx", "on", "boolean"),
        ("ctx", "0x2000", "hexadecimal"),
        ("block_size", "020", "leading zero"),
        ("reserve", "no", "boolean"),
        ("mfu", "yes", "boolean"),
        ("kv_zero_point", "yes", "give true or false"),
        ("kv_zero_point", "1", "give true or false"),
    ],
)
def test_numeric_keys_refuse_them_too(
    runner: CliRunner, tmp_path: Path, key: str, value: str, reason: str
) -> None:
    spec = f"deployments:\n  - {{model: llama3.1-8b, gpus: h100, {key}: {value},\n" \
        "     require: {min_context: 8k}}\n"
    path = write(tmp_path, spec)
    problems = refused(runner, path)
    assert problems[0].startswith(f"{path}:2: deployments[0].{key}: '{value}'")
    assert reason in problems[0]


def test_numbers_read_as_written(tmp_path: Path) -> None:
    spec = """\
deployments:
  - model: llama3.1-8b
    gpus: h100
    ctx: 8k
    kv_zero_point: false
    reserve: "0.1"
    require: {min_batch: 0032, max_tpot_ms: 1e2, max_kv_fraction: 1, min_tokens_per_second: .5}
"""
    with pytest.raises(SpecError):  # 0032: a leading zero, even with more zeros
        _problems(load_spec(write(tmp_path, spec)))
    spec = spec.replace("0032", "32")
    (deployment,) = _loaded(load_spec(write(tmp_path, spec)))
    assert deployment.requirements == {
        "min_batch": 32, "max_tpot_ms": 100.0, "min_tokens_per_second": 0.5, "max_kv_fraction": 1
    }
    assert deployment.values["reserve"] == 0.1 and deployment.values["kv_zero_point"] is False


def test_text_keys_keep_their_text(runner: CliRunner, tmp_path: Path) -> None:
    # YAML 1.1 reads `name: no` as false and `name: 007` as 7: a name is the text written.
    spec = """\
deployments:
  - {name: no, model: llama3.1-8b, gpus: h100, require: {min_context: 8k}}
  - {name: 007, model: llama3.1-8b, gpus: h100, require: {min_context: 8k}}
  - {name: 1.50, model: llama3.1-8b, gpus: h100, require: {min_context: 8k}}
"""
    result = check(runner, write(tmp_path, spec), "-f", "json")
    assert result.exit_code == 0, result.stderr
    deployments = json.loads(result.stdout)["deployments"]
    assert [d["deployment"] for d in deployments] == ["no", "007", "1.50"]


# ------------------------------------------------------------------ token counts

#: Every spec key that counts tokens, each of which reads `8192`, `8k`, `128k`, `1m` as --ctx does.
TOKEN_KEYS = (
    "ctx", "context_length", "prompt", "gen", "block_size", "prefix_shared",
    "max_num_batched_tokens", "page_size", "chunked_prefill_size", "max_total_tokens",
    "window", "sinks", "recent", "h2o_budget", "snapkv_budget", "observation_window",
    "kv_residual",
)


@pytest.mark.parametrize("form", ["8192", "8k", "8K", "128k", "1m", "2"])
def test_token_keys_take_the_forms_of_ctx(tmp_path: Path, form: str) -> None:
    keys = ", ".join(f"{key}: {form}" for key in TOKEN_KEYS)
    spec = f"deployments:\n  - {{model: m, gpus: h100, {keys},\n" \
        f"     require: {{min_context: {form}}}}}\n"
    (deployment,) = _loaded(load_spec(write(tmp_path, spec)))
    tokens = parse_context(form)  # the command line's reading of --ctx
    assert {k: deployment.values[k] for k in TOKEN_KEYS} == dict.fromkeys(TOKEN_KEYS, tokens)
    assert deployment.requirements == {"min_context": tokens}


@pytest.mark.parametrize("value", ["8x", "1.5k", "k", "-8k", "8 k k"])
def test_a_token_count_must_be_one(runner: CliRunner, tmp_path: Path, value: str) -> None:
    spec = f"deployments:\n  - {{model: llama3.1-8b, gpus: h100, ctx: 8k, window: {value},\n" \
        "     require: {min_batch: 1}}\n"
    path = write(tmp_path, spec)
    (problem,) = refused(runner, path)
    assert problem.startswith(f"{path}:2: deployments[0].window: ")


def test_token_forms_build_the_same_deployment(runner: CliRunner, tmp_path: Path) -> None:
    spec = """\
deployments:
  - {{name: p, model: llama3.1-8b, gpus: h100, ctx: {ctx}, prefix_shared: {prefix},
     max_num_batched_tokens: {batched}, require: {{min_batch: 1, max_kv_fraction: 1}}}}
  - {{name: s, model: llama3.1-8b, gpus: h100, ctx: {ctx}, sinks: 4, recent: {recent},
     require: {{min_batch: 1}}}}
  - {{name: g, model: llama3.1-8b, gpus: h100, engine: sglang, ctx: {ctx}, page_size: 16,
     chunked_prefill_size: {batched}, require: {{min_batch: 1}}}}
"""
    short = {"ctx": "32k", "prefix": "1k", "batched": "4k", "recent": "1k"}
    plain = {"ctx": "32768", "prefix": "1024", "batched": "4096", "recent": "1024"}
    outs = []
    for values in (short, plain):
        result = check(runner, write(tmp_path, spec.format(**values)), "-f", "json")
        assert result.exit_code == 0, result.stderr
        outs.append(json.loads(result.stdout)["deployments"])
    assert outs[0] == outs[1]
    # And as the command line sizes it with the same options.
    batch = runner.invoke(app, ["batch", "llama3.1-8b", "--gpus", "h100", "--ctx", "32768",
                                "--prefix-shared", "1024", "--max-num-batched-tokens", "4096",
                                "--format", "json"])
    expected = json.loads(batch.stdout)["contexts"][0]["max_batch"]
    assert outs[0][0]["requirements"][0]["measured"] == expected


# ------------------------------------------------------------------ hostile nesting and width


@pytest.fixture(params=["libyaml", "python"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test that takes it runs with PyYAML on libyaml (when built with it) and in pure
    Python, the two parsers a user's PyYAML may have."""
    if request.param == "libyaml" and not yaml.__with_libyaml__:
        pytest.skip("PyYAML is built without libyaml")
    if request.param == "python":
        monkeypatch.setattr(yaml, "__with_libyaml__", False)
    return str(request.param)


def counting_events(monkeypatch: pytest.MonkeyPatch) -> list[list[object]]:
    """The events each parse of the spec reads (libyaml's parse, then PyYAML's when libyaml
    finds the document invalid), and a composer that fails the test if it runs."""
    reads: list[list[object]] = []
    parse = yaml.parse

    def counted(*args: object, **kwargs: object) -> object:
        reads.append([])
        for event in parse(*args, **kwargs):  # type: ignore[arg-type]
            reads[-1].append(event)
            yield event

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the document was composed")

    monkeypatch.setattr(yaml, "parse", counted)
    monkeypatch.setattr(yaml.SafeLoader, "get_single_node", never)
    monkeypatch.setattr(yaml.CSafeLoader, "get_single_node", never, raising=False)
    return reads


def test_a_hostile_1_mib_spec_is_refused_from_the_first_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parser: str
) -> None:
    # The composer (and PyYAML's scanner) take time growing with the square of the depth: a
    # spec of `[` at the 1 MiB limit would take about 15 minutes. It is refused from the
    # parser's events, having read no more of them than the depth limit, and never composed.
    depth = (MAX_FILE_BYTES - 16) // 2
    path = write(tmp_path, "deployments: " + "[" * depth + "]" * depth + "\n")
    assert path.stat().st_size <= MAX_FILE_BYTES
    reads = counting_events(monkeypatch)
    with pytest.raises(SpecError) as refusal:
        load_spec(path)
    (problem,) = refusal.value.problems
    assert problem == f"{path}:1: invalid YAML: nested deeper than {MAX_DEPTH} levels; " \
        "a spec needs a handful"
    # Stream, document, the mapping and the depth's lists, in each parse.
    assert reads and all(len(read) <= MAX_DEPTH + 4 for read in reads)


_M = MAX_FILE_BYTES - 64  # room for the lines around a shape

#: Wide documents at the 1 MiB limit, each holding far more nodes than MAX_NODES: PyYAML in
#: pure Python took about 13 s to refuse each, composing it whole before reading a value.
WIDE_SPECS = {
    "flow list": "deployments: [" + "1," * (_M // 2) + "1]\n",
    "empty flow lists": "deployments: [" + "[]," * (_M // 3) + "[]]\n",
    "wide mapping": "".join(f"k{i:06}: 1\n" for i in range(_M // 11)),
    "many deployments": "deployments:\n"
    + "- {model: llama3.1-8b, gpus: h100, require: {min_batch: 1}}\n" * (_M // 60),
    "anchors and aliases": "deployments:\n- &a x\n" + "- *a\n" * (_M // 5),
}


@pytest.mark.parametrize("shape", WIDE_SPECS)
def test_a_wide_1_mib_spec_is_refused_from_its_first_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parser: str, shape: str
) -> None:
    import time

    from kvcalc.registry import check_spec

    path = write(tmp_path, WIDE_SPECS[shape])
    assert MAX_FILE_BYTES - 1024 < path.stat().st_size <= MAX_FILE_BYTES
    # Pure Python reads the 20,000 nodes in about 300 ms: a lower limit keeps the test cheap and
    # shows the same bound.
    limit = MAX_NODES if parser == "libyaml" else 2_000
    monkeypatch.setattr(check_spec, "MAX_NODES", limit)
    reads = counting_events(monkeypatch)
    start = time.perf_counter()
    with pytest.raises(SpecError) as refusal:
        load_spec(path)
    took = time.perf_counter() - start
    problems = refusal.value.problems
    if shape == "anchors and aliases":  # an alias a line: refused line by line, up to 100
        assert len(problems) == 101 and "stopped after 100 problems" in problems[-1]
    else:
        (problem,) = problems
        assert re.fullmatch(
            rf"{re.escape(str(path))}:\d+: the spec holds more than {limit:,} keys and values; "
            "a deployment needs a few dozen: split the spec into several files", problem
        )
    # A node is one event, or two with its end: the read is bounded whatever the file holds.
    (read,) = reads
    assert len(read) <= 2 * limit + 4
    if parser == "libyaml":
        assert took < 1  # about 30 ms (pure Python: about 300 ms)


def test_a_long_scalar_is_read_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parser: str
) -> None:
    # A 1 MiB value is a handful of events; no value of it reaches the registry's lookups.
    import time

    path = write(tmp_path, f"deployments:\n  - name: '{'x' * _M}'\n    model: [a]\n")
    start = time.perf_counter()
    with pytest.raises(SpecError) as refusal:
        _problems(load_spec(path))
    assert [p.split(": ", 1)[0] for p in refusal.value.problems] == [f"{path}:3"]
    if parser == "libyaml":
        assert time.perf_counter() - start < 1  # about 10 ms (pure Python: about 300 ms)


@pytest.mark.parametrize(("extra", "refused_"), [(0, False), (1, True)])
def test_the_node_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parser: str, extra: int, refused_: bool
) -> None:
    from kvcalc.registry import check_spec

    monkeypatch.setattr(check_spec, "MAX_NODES", 40)  # the rule, at a size cheap to compose
    # The mapping, its key and the list are three nodes: 37 items make 40.
    items = 40 - 3 + extra
    path = write(tmp_path, "deployments: [" + ", ".join(["1"] * items) + "]\n")
    with pytest.raises(SpecError) as refusal:
        _problems(load_spec(path))
    assert ("more than 40 keys and values" in str(refusal.value)) is refused_


def test_a_500_deployment_spec_is_read(tmp_path: Path) -> None:
    # A dozen keys and four requirements each: 35 nodes a deployment, 17,503 in all.
    entry = """\
  - name: chat-{i}
    model: llama3.1-8b
    gpus: 8xH100
    engine: vllm
    tp: 2
    pp: 1
    ctx: 32k
    kv_dtype: fp8
    weight_dtype: bf16
    gpu_util: 0.9
    block_size: 16
    mfu: 0.5
    require: {{min_batch: 8, max_tpot_ms: 40, max_ttft_ms: 2000, max_kv_fraction: 0.9}}
"""
    text = "deployments:\n" + "".join(entry.format(i=i) for i in range(500))
    nodes = sum(
        isinstance(e, yaml.NodeEvent)  # scalars, aliases and the starts of collections
        for e in yaml.parse(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    )
    assert nodes == 17_503 < MAX_NODES
    deployments = _loaded(load_spec(write(tmp_path, text)))
    assert [d.name for d in deployments] == [f"chat-{i}" for i in range(500)]
    assert deployments[499].line_of("require.max_ttft_ms") == 1 + 499 * 13 + 13


def test_both_parsers_read_a_spec_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # libyaml words errors its own way and refuses an escaped lone surrogate PyYAML reads: such
    # a document is read again in pure Python, so the answer does not depend on the install.
    if not yaml.__with_libyaml__:
        pytest.skip("PyYAML is built without libyaml")
    specs = [
        "deployments:\n  - model: [unclosed\n",
        "a: 1\n---\nb: 2\n",
        "deployments:\n  - name: \"\\ud800\"\n    model: x\n    gpus: h100\n"
        "    require: {min_batch: 1}\n",
        "deployments: " + "[" * 2000 + "]" * 2000 + "\n",  # libyaml stops at 1,000 levels
        "deployments:\n  - model: llama3.1-8b\n    gpus: h100\n    tp:\n"
        "    require: {min_batch: on}\n",
        "deployments:\n\t- model: x\n",
    ]

    def read(text: str) -> object:
        try:
            spec = load_spec(write(tmp_path, text))
        except SpecError as exc:
            return exc.problems
        return spec.problems, [(d.values, d.lines, d.name) for d in spec.deployments]

    on_libyaml = [read(text) for text in specs]
    monkeypatch.setattr(yaml, "__with_libyaml__", False)
    assert [read(text) for text in specs] == on_libyaml
    assert on_libyaml[2] == ((), [({"model": "x", "gpus": "h100"}, {"name": 2, "model": 3,
                                   "gpus": 4, "require.min_batch": 5}, "\ud800")])


@pytest.mark.parametrize(
    ("nested", "refused_"),
    [(MAX_DEPTH - 1, False), (MAX_DEPTH, True)],
)
def test_the_depth_limit(tmp_path: Path, nested: int, refused_: bool, parser: str) -> None:
    # The top mapping is one level: `deployments:` with `nested` lists holds nested + 1.
    path = write(tmp_path, "deployments: " + "[" * nested + "]" * nested + "\n")
    with pytest.raises(SpecError) as refusal:
        _problems(load_spec(path))
    assert ("nested deeper" in str(refusal.value)) is refused_


def test_deep_block_nesting_is_refused_too(tmp_path: Path) -> None:
    path = write(tmp_path, "deployments:\n" + "- " * 100_000 + "x\n")
    with pytest.raises(SpecError, match="nested deeper than"):
        load_spec(path)


def test_an_alias_bomb_is_refused_on_every_line_before_it_expands(tmp_path: Path) -> None:
    path = write(tmp_path, "a: &a [x, x, x]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n")
    with pytest.raises(SpecError) as refusal:
        load_spec(path)
    assert refusal.value.problems == [
        f"{path}:{n}: YAML anchors and aliases are not allowed" for n in (1, 2, 3)
    ]


def test_a_line_of_anchors_after_another_stops_at_the_problem_limit(tmp_path: Path) -> None:
    path = write(tmp_path, "deployments:\n" + "".join(f"- &a{i} x\n" for i in range(5_000)))
    with pytest.raises(SpecError) as refusal:
        load_spec(path)
    assert refusal.value.problems == [
        *(f"{path}:{n}: YAML anchors and aliases are not allowed" for n in range(2, 102)),
        f"{path}:102: stopped after 100 problems; fix them and check again for the problems "
        "from here on",
    ]


# ------------------------------------------------------------------ every problem in one run


def test_every_problem_of_a_spec_in_one_run(runner: CliRunner, tmp_path: Path) -> None:
    spec = """\
deployments:
  - name: empty
    model: llama3.1-8b
    gpus: h100
    ctx: 8k
    require: {min_batch: , max_tpot_ms: on}
  - name: octal
    model: llama3.1-8b
    gpus: h100
    tp: 010
    tpp: 2
    require: {min_context: 8k}
  - name: unbuilt
    model: nosuch-model
    gpus: h100
    require: {min_context: 8k}
  - name: ranges
    model: llama3.1-8b
    gpus: h100
    tp: 5000
    pp: 5000
    mfu: 0.5
    require: {min_context: 8k}
  - name: nogpus
    model: llama3.1-8b
    require: {min_context: 8k}
"""
    path = write(tmp_path, spec)
    problems = refused(runner, path)
    where = [re.match(rf"{re.escape(str(path))}:(\d+): (\S+)", p) for p in problems]
    assert [(int(m.group(1)), m.group(2)) for m in where if m] == [
        (6, "deployments[0].require.min_batch:"),
        (6, "deployments[0].require.max_tpot_ms:"),
        (10, "deployments[1].tp:"),
        (11, "deployments[1].tpp:"),
        (14, "deployments[2]"),
        (20, "deployments[3]"),
        (21, "deployments[3]"),
        (22, "deployments[3]"),
        (24, "deployments[4]:"),
    ]
    assert "unknown model" in problems[4]
    assert "tp: 5000 is out of range" in problems[5] and "pp: 5000" in problems[6]
    assert "mfu:" in problems[7] and "gpus: missing" in problems[8]
    # The CI formats annotate each of them on its line.
    github = check(runner, path, "-f", "github").stdout.splitlines()
    assert [int(re.findall(r",line=(\d+),", a)[0]) for a in github] == [
        6, 6, 10, 11, 14, 20, 21, 22, 24
    ]


def test_every_problem_of_a_deployment_in_one_run(runner: CliRunner, tmp_path: Path) -> None:
    # Each part of a deployment is checked on its own; a check that needs another part (tp
    # against the heads needs the model) is made when that part is known.
    spec = """\
deployments:
  - name: all-wrong
    model: nosuch-model
    gpus: 8xnosuch-gpu
    engine: sglang
    gpu_util: 0.8
    tp: 5000
    kv_memory: 20
    window: 4k
    require: {min_batch: 8}
  - name: no-gpu
    model: llama3.1-8b
    gpus: 8xnosuch-gpu
    tp: 3
    weight_dtype: fp7
    kv_dtype: fp9
    ctx: 8k
    require: {min_batch: 8}
  - name: known
    model: llama3.1-8b
    gpus: 6xH100
    tp: 3
    overhead: lots
    ctx: 8k
    require: {min_batch: 8}
"""
    path = write(tmp_path, spec)
    problems = refused(runner, path)
    where = rf"{re.escape(str(path))}:(\d+): deployments\[(\d)\] \([^)]*\)"
    found = [re.match(rf"{where}: (\w+): (.*)", p) for p in problems]
    assert all(found), problems
    assert [(int(m[1]), int(m[2]), m[3]) for m in found if m] == [
        (3, 0, "model"),
        (4, 0, "gpus"),
        (6, 0, "gpu_util"),  # SGLang sizes its pool its own way
        (7, 0, "tp"),  # out of range: not checked against anything else
        (8, 0, "kv_memory"),
        (9, 0, "window"),  # SGLang does not evict
        (10, 0, "ctx"),  # min_batch is measured at a context
        (13, 1, "gpus"),
        (14, 1, "tp"),  # against the model's heads, without the GPUs
        (15, 1, "weight_dtype"),
        (16, 1, "kv_dtype"),
        (22, 2, "tp"),  # with the GPUs: the sizes that split the heads on them
        (23, 2, "overhead"),
    ]
    messages = [m[4] for m in found if m]
    assert "unknown model 'nosuch-model'" in messages[0]
    assert "unknown gpu 'nosuch-gpu'" in messages[1] and "unknown gpu" in messages[7]
    assert "out of range" in messages[3] and "invalid size '20'" in messages[4]
    assert "does not evict" in messages[5]
    assert messages[8] == "tensor parallel size 3 does not divide the 8 KV heads"
    assert "unknown dtype 'fp7'" in messages[9] and "unknown dtype 'fp9'" in messages[10]
    assert messages[11] == "tensor parallel size 3 does not divide the 8 KV heads; on 6 GPUs " \
        "use tp 2 or 1"
    # As `batch` words it.
    batch = runner.invoke(app, ["batch", "llama3.1-8b", "--gpus", "6xH100", "--tp", "3"])
    assert batch.exit_code == 2
    assert batch.stderr.strip() == f"Error: --tp: {messages[11]}"


def test_a_deployment_sound_in_each_part_is_built(runner: CliRunner, tmp_path: Path) -> None:
    # The rules between the parts are the factory's, checked once every part is sound: tp 3 on
    # 8 GPUs is refused for the GPUs first, as `batch --tp 3` refuses it.
    path = write(tmp_path, BASE.replace("gpus: h100", "gpus: 8xH100").format(
        extra="    tp: 3\n", require="{min_batch: 1}"))
    (problem,) = refused(runner, path)
    assert problem.startswith(f"{path}:6: deployments[0] (a): tp and pp: 8 GPUs cannot be split")


def test_a_spec_of_made_up_names_stops_at_the_problem_limit(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each unknown name costs the registry's fuzzy search milliseconds: 1,500 deployments of
    # made-up names (under the node limit) took 7 s to refuse. The first 100 problems are
    # reported, and no name after them is looked up.
    from kvcalc import capacity_check as check_module
    from kvcalc.registry.check_spec import MAX_PROBLEMS

    lookups: list[str] = []
    load_model = check_module.load_model

    def counted(name: str, *args: object) -> object:
        lookups.append(name)
        return load_model(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(check_module, "load_model", counted)
    count = 300  # 1,500 of them took 7 s
    path = write(tmp_path, "deployments:\n" + "".join(
        f"  - {{model: made-up-{i}, gpus: 8xmade-up-{i}, ctx: 8k, require: {{min_batch: 1}}}}\n"
        for i in range(count)
    ))
    problems = refused(runner, path)
    assert len(problems) == MAX_PROBLEMS + 1 == 101
    # Two a deployment, in the order of their lines: model and gpus of deployments 0 to 49.
    assert [p.split(": ")[0] for p in problems[:-1]] == [
        f"{path}:{2 + i // 2}" for i in range(MAX_PROBLEMS)
    ]
    assert all(("model: unknown model" if i % 2 == 0 else "gpus: unknown gpu") in p
               for i, p in enumerate(problems[:-1]))
    assert problems[-1] == f"{path}:52: stopped after 100 problems; fix them and check again " \
        "for the problems from here on"
    assert lookups == [f"made-up-{i}" for i in range(MAX_PROBLEMS // 2)]


@pytest.mark.parametrize(("count", "stopped"), [(2, False), (3, True)])
def test_the_problem_limit(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int, stopped: bool
) -> None:
    from kvcalc.registry import check_spec

    monkeypatch.setattr(check_spec, "MAX_PROBLEMS", 4)  # the rule, at a size cheap to reach
    path = write(tmp_path, "deployments:\n" + "".join(
        f"  - {{model: made-up-{i}, gpus: 8xmade-up-{i}, ctx: 8k, require: {{min_batch: 1}}}}\n"
        for i in range(count)
    ))
    problems = refused(runner, path)
    assert len(problems) == 4 + stopped
    assert ("stopped after 4 problems" in problems[-1]) is stopped


def _loaded(spec: object) -> list:
    """The deployments of a spec that has no problem."""
    from kvcalc.registry.check_spec import Spec

    assert isinstance(spec, Spec)
    assert spec.problems == ()
    return list(spec.deployments)


def _problems(spec: object) -> None:
    """Raise the spec's problems, as `kvcalc check` reports them."""
    from kvcalc.registry.check_spec import Spec

    assert isinstance(spec, Spec)
    if spec.problems:
        raise SpecError([text for _, text in spec.problems])


def test_many_problems_are_worded_in_linear_time() -> None:
    # A 1 MiB spec can hold hundreds of thousands of bad values; matching each error against
    # every value already refused would take minutes.
    import time

    from kvcalc.registry.check_spec import _Locator, validation_problems

    count = 20_000
    errors = [
        {"loc": ("deployments", i), "type": "model_type", "msg": "not a mapping", "input": "x"}
        for i in range(count)
    ]
    refused = {("deployments", i, "tp") for i in range(count)} | {("deployments", 7)}
    where = _Locator("s.yaml", {("deployments", i): i + 2 for i in range(count)})
    start = time.perf_counter()
    problems = validation_problems(errors, where, refused)
    assert time.perf_counter() - start < 2  # about 50 ms; the quadratic scan took minutes
    assert len(problems) == count - 1  # the refused item's own error is not repeated
    assert problems[0] == (2, "s.yaml:2: deployments[0]: not a mapping (got 'x')")
