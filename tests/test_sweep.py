"""`kvcalc sweep`: log-spaced ranges, points equal to `batch` and `decode` at the same context,
one series per model and GPU set, the terminal chart, --plot and every bad input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from report_check import SEED, run_json
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine.units import (
    MAX_CONTEXT_TOKENS,
    MAX_SWEEP_POINTS,
    UnitError,
    parse_count,
    parse_range,
)
from kvcalc.render.chart import MARKERS, Chart, chart_lines, tick_label

#: Llama-3-70B: 80 layers x 8 KV heads x 128 x (K + V) x 2 bytes of bf16 per token.
LLAMA3_70B_BYTES_PER_TOKEN = 80 * 8 * 128 * 2 * 2


# ------------------------------------------------------------------------------ ranges


def test_a_range_is_both_ends_and_the_powers_of_two_between() -> None:
    assert parse_range("4k..1m") == [4096 << i for i in range(9)]
    assert parse_range("3000..20000") == [3000, 4096, 8192, 16384, 20000]
    assert parse_range("1..256", parse_count) == [1, 2, 4, 8, 16, 32, 64, 128, 256]


def test_n_points_are_log_spaced_whole_numbers() -> None:
    # 4k x 4^i: the ratio 256 over 4 steps is exactly 4 per step.
    assert parse_range("4k..1m:5") == [4096, 16384, 65536, 262144, 1048576]
    # 1000 x 10^(i/2): 3,162.3 rounds down, 31,622.8 up.
    assert parse_range("1000..100000:5") == [1000, 3162, 10000, 31623, 100000]


@given(
    st.integers(1, MAX_CONTEXT_TOKENS - 1).flatmap(
        lambda a: st.tuples(st.just(a), st.integers(a + 1, MAX_CONTEXT_TOKENS))
    )
)
def test_powers_range_rises_through_powers_of_two(bounds: tuple[int, int]) -> None:
    start, end = bounds
    points = parse_range(f"{start}..{end}")
    assert points[0] == start and points[-1] == end
    assert all(a < b for a, b in zip(points, points[1:], strict=False))
    assert all(p & (p - 1) == 0 for p in points[1:-1])
    # No power of two strictly inside the range is skipped.
    assert len(points) - 2 == sum(1 for k in range(31) if start < 1 << k < end)


@given(st.integers(1, 1 << 20), st.integers(2, MAX_SWEEP_POINTS))
def test_n_points_keep_their_count_or_are_refused(start: int, count: int) -> None:
    end = start * 1000
    try:
        points = parse_range(f"{start}..{end}:{count}")
    except UnitError as exc:
        assert "repeat a whole number" in str(exc)
        return
    assert len(points) == count
    assert points[0] == start and points[-1] == end
    assert points == sorted(set(points))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("1m..4k", "START must be below END, e.g. 4k..1m"),
        ("4k..", "give both ends as START..END"),
        ("..4k", "give both ends as START..END"),
        ("4k..4k", "both ends are 4,096"),
        ("4k..1m:1", "from 2 to 64"),
        ("4k..1m:65", "from 2 to 64"),
        ("4k..1m:x", "from 2 to 64"),
        ("1..10:10", "repeat a whole number"),
        ("4q..1m", "invalid context '4q'"),
        ("4k..2048m", "above the limit"),
        ("４k..1m", "use ASCII digits"),
        ("1..1m:٣", "use ASCII digits"),
    ],
)
def test_bad_ranges_name_the_problem(text: str, problem: str) -> None:
    with pytest.raises(UnitError, match=problem.replace(".", r"\.")):
        parse_range(text)


def test_a_long_range_is_cut_in_its_error_line() -> None:
    with pytest.raises(UnitError) as error:
        parse_range("1" * 50 + ".." + "2" * 50)
    assert "111..." in str(error.value) and "2222" not in str(error.value)


def test_counts_are_whole_and_positive() -> None:
    assert parse_count(" 64 ") == 64
    for bad in ("0", "-1", "1.5", "8k", "", "٣", "9" * 100):
        with pytest.raises(UnitError):
            parse_count(bad)


# ------------------------------------------------------------------------------ the command


def test_points_equal_batch_and_decode_at_the_same_context(runner: CliRunner) -> None:
    out = run_json(runner, "sweep", "llama3-70b", *SEED, "--ctx", "8k..32k")
    (series,) = out["series"]
    assert (series["model"], series["tp"], series["pp"], series["replicas"]) == (
        "llama3-70b",
        8,
        1,
        1,
    )
    assert [p["context_tokens"] for p in series["points"]] == [8192, 16384, 32768]
    batch = run_json(runner, "batch", "llama3-70b", *SEED, "--ctx", "8k,16k,32k")
    decode = run_json(runner, "decode", "llama3-70b", *SEED, "--ctx", "8k,16k,32k")
    for point, fit, step in zip(series["points"], batch["contexts"], decode["steps"], strict=True):
        kv = LLAMA3_70B_BYTES_PER_TOKEN * point["context_tokens"]
        assert point["kv_bytes_per_sequence"] == kv
        assert point["max_batch"] == fit["max_batch"]
        assert point["batch"] == step["batch"]
        assert point["tpot_seconds"] == step["tpot_seconds"]
        assert point["tokens_per_second"] == step["tokens_per_second"]
    # Seed 004: 162 sequences of 8K fit in 8 x 54.5 GB at 320 KiB per token.
    assert series["points"][0]["max_batch"] == 162


def test_one_series_per_model_and_gpu_set_in_order(runner: CliRunner) -> None:
    out = run_json(
        runner, "sweep", "llama3.1-8b", "llama3-70b", "--gpus", "8xH100", "--gpus", "4xH100",
        "--ctx", "8k..32k:2",
    )
    assert [(s["model"], s["gpus"][:2]) for s in out["series"]] == [
        ("llama3.1-8b", "8x"),
        ("llama3.1-8b", "4x"),
        ("llama3-70b", "8x"),
        ("llama3-70b", "4x"),
    ]
    assert out["contexts"] == [8192, 32768]
    # The KV of a sequence is the model's, whatever GPUs hold it.
    kv = [[p["kv_bytes_per_sequence"] for p in s["points"]] for s in out["series"]]
    assert kv[0] == kv[1] and kv[2] == kv[3]
    assert kv[2] == [LLAMA3_70B_BYTES_PER_TOKEN * 8192, LLAMA3_70B_BYTES_PER_TOKEN * 32768]


def test_a_batch_sweep_times_only_batches_that_fit(runner: CliRunner) -> None:
    out = run_json(runner, "sweep", "llama3-70b", *SEED, "--ctx", "128k", "--batch", "4..16")
    assert out["x"] == "batch"
    points = out["series"][0]["points"]
    assert [p["batch"] for p in points] == [4, 8, 16]
    # 10 sequences of 128k fit (seed 004): 16 is reported, not timed.
    assert [p["max_batch"] for p in points] == [10, 10, 10]
    assert [p["fits"] for p in points] == [True, True, False]
    assert points[2]["tpot_seconds"] is None and points[2]["tokens_per_second"] is None
    decode = run_json(runner, "decode", "llama3-70b", *SEED, "--ctx", "128k", "--batch", "8")
    assert points[1]["tpot_seconds"] == decode["steps"][0]["tpot_seconds"]


def test_a_series_that_fits_nowhere_exits_1_and_says_why(runner: CliRunner) -> None:
    result = runner.invoke(
        app, ["sweep", "llama3-70b", "llama3.1-8b", "--gpus", "h100", "--ctx", "8k..16k"]
    )
    assert result.exit_code == 1
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("does not fit: ")]
    assert line.startswith("does not fit: llama3-70b on 1x NVIDIA H100 SXM5 80GB: weights ")
    assert "Llama-3.1-8B (llama3.1-8b)" in result.stdout  # the other series is still shown


def test_contexts_beyond_a_models_maximum_warn_once_per_model(runner: CliRunner) -> None:
    args = ["sweep", "llama3-70b", "llama3.1-8b", "--gpus", "8xH100", "--gpus", "4xH100"]
    result = runner.invoke(app, [*args, "--ctx", "8k..16k", "-f", "json"])
    assert result.exit_code == 0, result.stderr
    # Llama-3-70B was trained to 8,192 tokens, Llama-3.1-8B to 131,072.
    warning = (
        "llama3-70b: context 16,384 is beyond its maximum context of 8,192 tokens; "
        "sized as asked, but the model was not trained that long"
    )
    assert result.stderr == f"warning: {warning}\n"
    assert json.loads(result.stdout)["warnings"] == [warning]


def test_the_table_format_draws_one_chart_per_quantity(runner: CliRunner) -> None:
    result = runner.invoke(
        app, ["sweep", "llama3-70b", "llama3.1-8b", "--gpus", "8xH100", "--ctx", "4k..1m"]
    )
    assert result.exit_code == 0, result.stderr
    for title in ("KV per sequence (GiB)", "max batch (sequences)", "TPOT (ms)"):
        assert f"{title} against context (tokens)" in result.stdout
    assert result.stdout.count("  * llama3-70b on 8x NVIDIA H100 SXM5 80GB") == 3
    assert result.stdout.count("  o llama3.1-8b on 8x NVIDIA H100 SXM5 80GB") == 3
    for fmt in ("json", "yaml", "csv", "markdown"):
        other = runner.invoke(
            app, ["sweep", "llama3-70b", "--gpus", "8xH100", "--ctx", "4k..1m", "-f", fmt]
        )
        assert "against context" not in other.stdout


def test_contexts_and_batches_chart_a_line_per_batch_only_where_the_batch_matters(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    from report_check import invoke_report

    args = ["sweep", "llama3-70b", *SEED, "--ctx", "8k..32k", "--batch", "8,32"]
    result, report = invoke_report(monkeypatch, args)
    assert result.exit_code == 0, result.stderr
    legends = {c.title: [name for name, _ in c.series] for c in report.charts}
    assert legends == {
        "KV per sequence (GiB)": ["llama3-70b on 8x NVIDIA H100 SXM5 80GB"],
        "max batch (sequences)": ["llama3-70b on 8x NVIDIA H100 SXM5 80GB"],
        "TPOT (ms)": [
            "llama3-70b on 8x NVIDIA H100 SXM5 80GB, batch 8",
            "llama3-70b on 8x NVIDIA H100 SXM5 80GB, batch 32",
        ],
    }
    kv = dict(report.charts[0].series)["llama3-70b on 8x NVIDIA H100 SXM5 80GB"]
    assert kv == [(8192, 2.5), (16384, 5.0), (32768, 10.0)]  # 320 KiB per token
    # 40 sequences of 32k fit (seed 004): batch 32 is timed at every context.
    tpot = dict(report.charts[2].series)
    assert [x for x, _ in tpot["llama3-70b on 8x NVIDIA H100 SXM5 80GB, batch 32"]] == [
        8192, 16384, 32768
    ]


def test_one_point_has_no_chart(runner: CliRunner) -> None:
    result = runner.invoke(app, ["sweep", "llama3-70b", *SEED, "--ctx", "8k"])
    assert result.exit_code == 0
    assert "against" not in result.stdout


BAD_INPUT = [
    (["--ctx", "1m..4k"], "--ctx: invalid range '1m..4k': START must be below END"),
    (["--ctx", "4k.."], "--ctx: invalid range '4k..': give both ends"),
    (["--ctx", "4k..1m:1000"], "--ctx: invalid range '4k..1m:1000': the number of points"),
    (["--ctx", ","], "--ctx: give a range such as 4k..1m"),
    (["--ctx", "8k,8k"], "--ctx: 8192 is given twice"),
    (["--batch", "0..8"], "--batch: invalid count '0'"),
    (["--batch", "1..2000000"], "--batch: invalid batch '2000000': above the limit"),
    (["--mbu", "0"], "--mbu: 0 is not a fraction in [0.01, 1]"),
    (["--gpus", "8xH100"], "--gpus: 8xH100 is given twice"),
    (["--plot", "sweep.pdf"], "--plot: 'sweep.pdf' is not a .png or .svg file name"),
    (["--plot", "/no/such/folder/s.png"], "--plot: cannot write /no/such/folder/s.png: the folder"),
    (["--ctx", "8k", "--plot", "s.png"], "--plot: one point has nothing to draw"),
    (["--engine", "vllm"], "No such option: --engine"),
]


@pytest.mark.parametrize(("args", "message"), BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_is_one_line_and_exit_2(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["sweep", "llama3-70b", "--gpus", "8xH100", *args])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: {message}")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_weights_of_one_model_are_refused_for_several(runner: CliRunner) -> None:
    result = runner.invoke(
        app, ["sweep", "llama3-70b", "llama3.1-8b", "--gpus", "8xH100", "--weights", "140GB"]
    )
    assert result.exit_code == 2
    assert result.stderr == "Error: --weights: it is one model's weights; sweep one MODEL with it\n"


# ------------------------------------------------------------------------------ --plot


def test_a_missing_plot_extra_is_one_line(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises
    target = tmp_path / "s.png"
    result = runner.invoke(app, ["sweep", "llama3-70b", *SEED, "--plot", str(target)])
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: --plot: needs matplotlib, an optional extra; install it with "
        "pip install 'kvcalc[plot]'\n"
    )
    assert not target.exists()


def test_an_unwritable_plot_is_one_line(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kvcalc.cli.sweep

    # Root may write anywhere: the permission check is exercised by denying it.
    monkeypatch.setattr(kvcalc.cli.sweep.os, "access", lambda path, mode: False)
    result = runner.invoke(app, ["sweep", "llama3-70b", *SEED, "--plot", str(tmp_path / "s.svg")])
    assert result.exit_code == 2
    assert result.stderr == f"Error: --plot: cannot write {tmp_path / 's.svg'}: permission denied\n"


def test_a_plot_path_under_a_file_or_at_a_folder_is_refused(
    runner: CliRunner, tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("")
    (tmp_path / "dir.png").mkdir()
    cases = [(tmp_path / "file" / "s.png", "the folder"), (tmp_path / "dir.png", "is a folder")]
    for target, why in cases:
        result = runner.invoke(app, ["sweep", "llama3-70b", *SEED, "--plot", str(target)])
        assert result.exit_code == 2
        assert why in result.stderr and result.stderr.count("\n") == 1


def test_a_failed_write_is_one_line(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kvcalc.render.plot

    def disk_full(*args: object) -> None:
        raise OSError(28, "No space left on device")

    # Runs with or without the extra: the write itself is what fails here.
    monkeypatch.setattr(kvcalc.render.plot, "matplotlib_available", lambda: True)
    monkeypatch.setattr(kvcalc.render.plot, "write_plot", disk_full)
    target = tmp_path / "s.png"
    result = runner.invoke(app, ["sweep", "llama3-70b", *SEED, "--plot", str(target)])
    assert result.exit_code == 2
    assert result.stderr == f"Error: --plot: cannot write {target}: No space left on device\n"


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_plot_writes_the_file_with_labelled_axes(
    runner: CliRunner, tmp_path: Path, suffix: str
) -> None:
    pytest.importorskip("matplotlib")
    target = tmp_path / f"sweep{suffix}"
    args = ["sweep", "llama3-70b", "llama3.1-8b", *SEED[:2], "--gpus", "4xH100"]
    result = runner.invoke(app, [*args, "--ctx", "4k..1m", "--plot", str(target), "-f", "json"])
    assert result.exit_code == 0, result.stderr
    json.loads(result.stdout)  # the report is printed as usual
    data = target.read_bytes()
    if suffix == ".png":
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
    else:
        svg = data.decode()
        assert "<svg" in svg
        # Labels are text in an SVG: the axes with their units and one legend entry per line.
        for label in ("context (tokens)", "KV per sequence (GiB)", "max batch (sequences)",
                      "TPOT (ms)", "llama3-70b on 4x NVIDIA H100 SXM5 80GB",
                      "llama3.1-8b on 8x NVIDIA H100 SXM5 80GB"):
            assert label in svg


def test_the_same_sweep_writes_the_same_svg(runner: CliRunner, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    files = [tmp_path / "a.svg", tmp_path / "b.svg"]
    for target in files:
        args = ["sweep", "llama3.1-8b", "--gpus", "h100", "--ctx", "8k..64k", "--plot", str(target)]
        assert runner.invoke(app, args).exit_code == 0
    assert files[0].read_bytes() == files[1].read_bytes()


def test_plot_is_never_imported_without_plot(runner: CliRunner) -> None:
    import subprocess

    code = (
        "import sys; from kvcalc.cli import main; sys.argv = ['kvcalc', 'sweep', 'llama3-70b', "
        "'--gpus', '8xH100', '--ctx', '4k..1m']\n"
        "try: main()\nexcept SystemExit: pass\n"
        "assert 'matplotlib' not in sys.modules, 'matplotlib imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# ------------------------------------------------------------------------------ the chart


def chart(series: int = 2, points: int = 9) -> Chart:
    return Chart(
        "TPOT (ms)",
        "context (tokens)",
        [
            (f"model-{s}", [(4096 << i, (s + 1) * 2.0**i) for i in range(points)])
            for s in range(series)
        ],
    )


@pytest.mark.parametrize("width", [20, 40, 80, 120, 200])
def test_the_chart_fits_the_width(width: int) -> None:
    lines = chart_lines(chart(series=3), width)
    assert max(map(len, lines)) <= width
    assert lines[-3:] == ["  * model-0", "  o model-1", "  + model-2"]


def test_the_chart_marks_every_point_and_labels_both_ends() -> None:
    lines = chart_lines(chart(series=1), 80)
    grid = "\n".join(lines[1:11])
    assert grid.count(MARKERS[0]) == 9
    assert lines[0] == "TPOT (ms) against context (tokens), log scales"
    assert lines[1].lstrip().startswith("256 ┤") and lines[10].lstrip().startswith("1 ┤")
    ticks = lines[12].split()
    assert ticks[0] == "4k" and ticks[-1] == "1m"
    # On log-log axes a doubling per point is a straight line: one marker per row pair.
    rows = [next(i for i, c in enumerate(line) if c == "*") for line in lines[1:11] if "*" in line]
    assert rows == sorted(rows, reverse=True)


def test_a_log_y_axis_only_for_a_tenfold_span() -> None:
    assert chart().log_y
    flat = Chart("TPOT (ms)", "context (tokens)", [("m", [(1, 20.0), (2, 21.0), (4, 0.0)])])
    assert not flat.log_y
    assert flat.drawn() == [("m", [(1, 20.0), (2, 21.0), (4, 0.0)])]
    wide = Chart("x", "y", [("m", [(1, 1.0), (2, 100.0), (4, 0.0)])])
    assert wide.drawn() == [("m", [(1, 1.0), (2, 100.0)])]  # no zero on a log axis


def test_batch_ticks_are_whole_counts() -> None:
    batches = Chart("TPOT (ms)", "batch (sequences)", [("m", [(1, 5.0), (1024, 9.0)])], False)
    assert chart_lines(batches, 80)[12].split() == ["1", "1,024"]
    assert chart_lines(chart(points=2), 80)[12].split() == ["4k", "8k"]


def test_tick_labels_write_contexts_as_people_do() -> None:
    assert [tick_label(x) for x in (1, 1000, 4096, 3 << 10, 1 << 20, 1536 << 10)] == [
        "1", "1,000", "4k", "3k", "1m", "1536k"
    ]


def test_a_flat_line_has_one_label_on_its_row() -> None:
    flat = Chart("max batch (sequences)", "context (tokens)", [("m", [(8192, 0.0), (32768, 0.0)])])
    lines = chart_lines(flat, 80)
    labelled = [line for line in lines[1:11] if "┤" in line]
    assert len(labelled) == 1
    assert labelled[0].startswith("0 ┤*") and labelled[0].endswith("*")


def test_a_quantity_no_point_has_draws_no_chart(runner: CliRunner) -> None:
    # Llama-3-70B's weights do not fit one H100: no TPOT anywhere, so no TPOT chart.
    result = runner.invoke(app, ["sweep", "llama3-70b", "--gpus", "h100", "--ctx", "4k..8k"])
    assert result.exit_code == 1
    assert "max batch (sequences) against context" in result.stdout
    assert "TPOT (ms) against" not in result.stdout
