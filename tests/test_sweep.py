"""`kvcalc sweep`: log-spaced ranges, points equal to `batch` and `decode` at the same context,
one series per model and GPU set, the terminal chart, --plot and every bad input."""

from __future__ import annotations

import json
import math
import re
import shlex
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
from kvcalc.render.chart import (
    HEIGHT,
    MARKERS,
    Chart,
    chart_lines,
    linear_ticks,
    log_ticks,
    tick_label,
)

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
    steps = decode["contexts"]
    for point, fit, step in zip(series["points"], batch["contexts"], steps, strict=True):
        kv = LLAMA3_70B_BYTES_PER_TOKEN * point["context_tokens"]
        assert point["kv_bytes_per_sequence"] == kv
        assert point["max_batch"] == fit["max_batch"]
        assert point["batch"] == step["batch"]
        assert point["tpot_seconds"] == step["tpot_seconds"]
        assert point["tokens_per_second"] == step["tokens_per_second"]
        assert point["roofline_tpot_seconds"] == step["roofline_tpot_seconds"]
        assert point["roofline_tokens_per_second"] == step["roofline_tokens_per_second"]
    # Seed 004: 162 sequences of 8K fit in 8 x 54.5 GB at 320 KiB per token.
    assert series["points"][0]["max_batch"] == 162


def test_one_series_per_model_and_gpu_set_in_order(runner: CliRunner) -> None:
    out = run_json(
        runner, "sweep", "llama3.1-8b", "llama3-70b", "--gpus", "8xH100", "--gpus", "4xH100",
        "--ctx", "8k..32k:2",
    )
    assert [(s["model"], s["gpus"]["id"][:2]) for s in out["series"]] == [
        ("llama3.1-8b", "8x"),
        ("llama3.1-8b", "4x"),
        ("llama3-70b", "8x"),
        ("llama3-70b", "4x"),
    ]
    assert out["context_tokens_list"] == [8192, 32768]
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
    assert points[2]["roofline_tpot_seconds"] is None
    decode = run_json(runner, "decode", "llama3-70b", *SEED, "--ctx", "128k", "--batch", "8")
    assert points[1]["tpot_seconds"] == decode["contexts"][0]["tpot_seconds"]


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
    for title in ("KV per sequence (GiB)", "max batch (sequences)", "roofline TPOT (ms)"):
        assert f"\n{title} against context (tokens)" in result.stdout
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
        "roofline TPOT (ms)": [
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
    # The pip of the Python running kvcalc, and the plot extra's own requirement: `pip install
    # 'kvcalc[plot]'` cannot work where kvcalc is not on PyPI.
    assert result.stderr == (
        "Error: --plot: needs matplotlib, an optional extra; install it with "
        f"{shlex.quote(sys.executable)} -m pip install 'matplotlib>=3.7'\n"
    )
    assert not target.exists()


def test_the_plot_install_hint_installs_the_plot_extras_requirement() -> None:
    from importlib.metadata import requires

    from kvcalc.render.plot import INSTALL_HINT

    python, *pip = shlex.split(INSTALL_HINT)
    assert Path(python) == Path(sys.executable) and pip[:3] == ["-m", "pip", "install"]
    # The installed metadata of kvcalc (pyproject.toml's plot extra), parsed independently.
    plot = re.compile(r"extra\s*==\s*[\"']plot[\"']")
    extra = [r.split(";")[0].strip() for r in requires("kvcalc") or [] if plot.search(r)]
    assert pip[3:] == extra == ["matplotlib>=3.7"]


def test_an_unwritable_plot_is_one_line(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kvcalc.render.plot

    # Root may write anywhere: the permission check is exercised by denying it.
    monkeypatch.setattr(kvcalc.render.plot.os, "access", lambda path, mode: False)
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


@pytest.mark.plot
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


@pytest.mark.plot
def test_the_same_sweep_writes_the_same_svg(runner: CliRunner, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    files = [tmp_path / "a.svg", tmp_path / "b.svg"]
    for target in files:
        args = ["sweep", "llama3.1-8b", "--gpus", "h100", "--ctx", "8k..64k", "--plot", str(target)]
        assert runner.invoke(app, args).exit_code == 0
    assert files[0].read_bytes() == files[1].read_bytes()


@pytest.mark.plot
def test_plot_legends_sit_beside_the_lines_and_crosses_mark_what_does_not_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("matplotlib")
    from report_check import invoke_report

    from kvcalc.render.plot import plot_figure

    # Llama-3-70B on 4x H100 does not fit 512k and 1m (see the terminal chart's test).
    args = ["sweep", "llama3-70b", "llama3.1-8b", "--gpus", "8xH100", "--gpus", "4xH100"]
    _, report = invoke_report(monkeypatch, [*args, "--ctx", "4k..1m"])
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    figure = plot_figure(report.charts, "t")
    canvas = FigureCanvasAgg(figure)
    canvas.draw()  # lays the figure out, legends included
    renderer = canvas.get_renderer()
    for ax, chart in zip(figure.axes, report.charts, strict=True):
        legend = ax.get_legend()
        # Beside the panel, clear of every line: its box starts right of the plotting area.
        assert legend.get_window_extent(renderer).x0 > ax.get_window_extent(renderer).x1
        assert [t.get_text() for t in legend.get_texts()] == [
            chart.legend(name) for name, _ in chart.series
        ]
        crosses = {
            tuple(line.get_xdata()) for line in ax.get_lines() if line.get_marker() == "x"
        }
        assert crosses == ({(524288, 1048576)} if chart.title != "KV per sequence (GiB)" else set())
    assert figure.axes[-1].get_xlabel() == "context (tokens)"
    assert figure.axes[-1].get_ylabel() == "roofline TPOT (ms)"


@pytest.mark.plot
def test_a_batch_sweep_plot_states_its_context(runner: CliRunner, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    target = tmp_path / "batch.svg"
    args = ["sweep", "llama3-70b", *SEED, "--ctx", "128k", "--batch", "1..16", "--plot"]
    assert runner.invoke(app, [*args, str(target)]).exit_code == 0
    svg = target.read_text()
    # SVG text is drawn as paths, each under a comment with the text.
    for text in ("batch (sequences), context 131,072 tokens", "roofline TPOT (ms)",
                 "roofline tokens/s (one replica)", "does not fit at batch 16"):
        assert text in svg


@pytest.mark.plot
def test_plot_is_never_imported_without_plot(runner: CliRunner) -> None:
    import subprocess

    # Only where matplotlib is installed can its import be seen (or not).
    pytest.importorskip("matplotlib")
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


def test_the_chart_marks_every_point_and_labels_round_values() -> None:
    lines = chart_lines(chart(series=1), 80)
    grid = "\n".join(lines[1:11])
    assert grid.count(MARKERS[0]) == 9
    assert lines[0] == "TPOT (ms) against context (tokens), log scales"
    # 1 to 256 on a log axis of 10 rows (lines 10 to 1): the powers of ten, on the rows nearest
    # to them: 10 at 9 x log 10 / log 256 = 3.7 rows up, 100 at 7.5.
    assert y_axis_labels(lines) == {10: "1", 6: "10", 3: "100"}
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


def y_axis_labels(lines: list[str]) -> dict[int, str]:
    """Line index (1: the top row) -> the y label drawn on it."""
    return {i: line.split("┤")[0].strip() for i, line in enumerate(lines) if "┤" in line}


@pytest.mark.parametrize(
    ("low", "high", "log", "labels"),
    [
        # The README's sweep (llama3-70b on 8x H100, 8k..128k): KV 2.5 to 40 GiB, max batch 162
        # to 10, TPOT 21.17 to 21.37 ms; labels were once 2.5/10/40, 162/40.25/10, 21.37/21.27.
        (2.5, 40.0, True, ["3", "10", "30"]),
        (10.0, 162.0, True, ["10", "30", "100"]),
        (21.17, 21.37, False, ["21.20", "21.25", "21.30", "21.35"]),
        (0.5, 320.0, True, ["1", "10", "100"]),
        (1.0, 1046.0, True, ["1", "10", "100", "1,000"]),
        (3.1, 31.0, True, ["5", "10", "20"]),
        (11.38, 21.52, False, ["12.5", "15.0", "17.5", "20.0"]),
        (0.001, 0.0042, False, ["0.001", "0.002", "0.003", "0.004"]),
        (12345.0, 98765.0, False, ["20,000", "40,000", "60,000", "80,000"]),
        (1.0, 1e8, True, ["1", "10,000", "100,000,000"]),
    ],
)
def test_y_ticks_are_round_values_inside_the_range(
    low: float, high: float, log: bool, labels: list[str]
) -> None:
    ticks = log_ticks(low, high) if log else linear_ticks(low, high)
    assert [text for _, text in ticks] == labels
    for value, text in ticks:
        assert low <= value <= high
        assert float(text.replace(",", "")) == pytest.approx(value, rel=1e-12)


@given(
    st.floats(1e-4, 1e7).flatmap(
        lambda low: st.tuples(st.just(low), st.floats(low * 1.001, low * 1e4))
    )
)
def test_linear_ticks_are_two_to_four_even_steps_of_1_2_25_or_5(
    bounds: tuple[float, float],
) -> None:
    low, high = bounds
    ticks = linear_ticks(low, high)
    assert 2 <= len(ticks) <= 4
    values = [float(text.replace(",", "")) for _, text in ticks]
    assert all(low * (1 - 1e-9) <= v <= high * (1 + 1e-9) for v in values)
    step = values[1] - values[0]
    gaps = [b - a for a, b in zip(values, values[1:], strict=False)]
    assert gaps == pytest.approx([step] * len(gaps), rel=1e-6)
    mantissa = step / 10 ** math.floor(math.log10(step) + 1e-9)
    assert any(mantissa == pytest.approx(m, rel=1e-6) for m in (1, 2, 2.5, 5))
    assert all(v / step == pytest.approx(round(v / step), abs=1e-6) for v in values)


@given(
    st.floats(1e-4, 1e7).flatmap(
        lambda low: st.tuples(st.just(low), st.floats(low * 10, low * 1e9))
    )
)
def test_log_ticks_are_one_two_three_or_five_times_a_power_of_ten(
    bounds: tuple[float, float],
) -> None:
    low, high = bounds
    ticks = log_ticks(low, high)
    assert 2 <= len(ticks) <= 4
    for value, text in ticks:
        assert low * (1 - 1e-9) <= value <= high * (1 + 1e-9)
        mantissa = float(text.replace(",", "")) / 10 ** math.floor(math.log10(value) + 1e-9)
        assert any(mantissa == pytest.approx(m, rel=1e-9) for m in (1, 2, 3, 5))


def test_each_y_label_sits_on_the_row_nearest_its_value() -> None:
    # KV per sequence of the README's sweep: 2.5 GiB at 8k doubling to 40 GiB at 128k.
    kv = Chart("KV (GiB)", "context (tokens)", [("m", [(8192 << i, 2.5 * 2**i) for i in range(5)])])
    labels = y_axis_labels(chart_lines(kv, 80))
    assert sorted(labels.values(), key=float) == ["3", "10", "30"]
    for line, text in labels.items():
        row = HEIGHT - line  # line 1 is the top row, HEIGHT - 1
        exact = (HEIGHT - 1) * math.log(float(text) / 2.5) / math.log(16)
        assert abs(row - exact) <= 0.5


def test_a_legend_says_where_its_series_does_not_fit() -> None:
    points = [(4096 << i, 10.0 - i) for i in range(3)]
    contexts = [4096 << i for i in range(6)]
    unfit = {"above": contexts[3:], "one": [contexts[5]], "nowhere": contexts, "gaps": [8192]}
    series = [
        ("above", points),
        ("one", [(x, 1.0) for x in contexts[:5]]),
        ("nowhere", []),
        ("gaps", [(x, 1.0) for x in contexts if x != 8192]),
        ("fits", points),
    ]
    chart = Chart("max batch (sequences)", "context (tokens)", series, unfit=unfit)
    assert [chart.legend(name) for name, _ in series] == [
        "above: does not fit at 32k and above",
        "one: does not fit at 128k",
        "nowhere: does not fit at any context",
        "gaps: does not fit at 8k",
        "fits",
    ]
    lines = chart_lines(chart, 120)
    assert lines[-5:] == [
        "  * above: does not fit at 32k and above",
        "  o one: does not fit at 128k",
        "  + nowhere: does not fit at any context",
        "  x gaps: does not fit at 8k",
        "  # fits",
    ]
    # The x axis spans the whole sweep, where nothing fits included.
    assert lines[12].split() == ["4k", "8k", "16k", "32k", "64k", "128k"]
    batches = Chart("TPOT (ms)", "batch (sequences)", [("b", [(1, 5.0), (2, 6.0)])], False,
                    unfit={"b": [4, 8, 16, 32, 64]})
    assert batches.legend("b") == "b: does not fit at batch 4 and above"
    many = Chart("x", "y", [("m", [(1, 1.0), (7, 1.0)])], False, unfit={"m": [2, 3, 4, 5, 6]})
    assert many.legend("m") == "m: does not fit at batch 2, 3, 4, 5 and 1 more"


def test_sweep_charts_mark_the_contexts_where_a_line_does_not_fit(runner: CliRunner) -> None:
    # Llama-3-70B on 4x H100: 4 x (72 GB - 35 GB of weights) of cache holds 256k tokens
    # (80 GiB) but not 512k (160 GiB): max batch and TPOT stop at 256k and say so.
    args = ["sweep", "llama3-70b", "--gpus", "4xH100", "--ctx", "64k..1m"]
    out = run_json(runner, *args)
    assert [p["fits"] for p in out["series"][0]["points"]] == [True, True, True, False, False]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    legend = "  * llama3-70b on 4x NVIDIA H100 SXM5 80GB"
    charts = result.stdout.split(" against context (tokens)")[1:]
    assert [c.count(f"{legend}: does not fit at 512k and above") for c in charts] == [0, 1, 1]
    assert charts[0].count(f"{legend}\n") == 1  # the KV of a sequence is the model's


def test_a_series_that_fits_nowhere_says_so_in_its_legend(runner: CliRunner) -> None:
    # Llama-3-70B's 140 GB of weights do not fit one 80 GB H100.
    args = ["sweep", "llama3-70b", "llama3.1-8b", "--gpus", "h100", "--ctx", "4k..8k"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    nowhere = "  * llama3-70b on 1x NVIDIA H100 SXM5 80GB: does not fit at any context"
    assert result.stdout.count(nowhere) == 2  # max batch and TPOT
    assert "  o llama3.1-8b on 1x NVIDIA H100 SXM5 80GB\n" in result.stdout


def test_a_batch_sweep_names_its_context_and_one_batch_its_tpot(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    from report_check import invoke_report

    result, report = invoke_report(
        monkeypatch, ["sweep", "llama3-70b", *SEED, "--ctx", "128k", "--batch", "1..16"]
    )
    assert result.exit_code == 0, result.stderr
    assert [(c.title, c.x_label) for c in report.charts] == [
        ("roofline TPOT (ms)", "batch (sequences), context 131,072 tokens"),
        ("roofline tokens/s (one replica)", "batch (sequences), context 131,072 tokens"),
    ]
    # 10 sequences of 128k fit (seed 004): 16 is not timed.
    assert report.charts[0].legend(report.charts[0].series[0][0]).endswith(
        ": does not fit at batch 16"
    )
    result, report = invoke_report(
        monkeypatch, ["sweep", "llama3-70b", *SEED, "--ctx", "8k..32k", "--batch", "8"]
    )
    assert [c.title for c in report.charts][2] == "roofline TPOT (ms), batch 8"
    assert {c.x_label for c in report.charts} == {"context (tokens)"}
