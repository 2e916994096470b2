"""The Serving under load page, with Streamlit's AppTest on the bundled real ``vllm bench serve``
results (examples/data/vllm-cpu-bench: plain and ngram k=3 at concurrency 1, 4 and 8, two runs
each, with the in-engine capture of the same servers).

The page shows ``Report.serving`` as ``specobs report --format json`` gives it; the throughput
ratios are also worked out here from the result files with plain ``json`` (geometric means over
the repeats, ngram over plain per concurrency).
"""

from __future__ import annotations

import json
import statistics

import polars as pl
import pytest
from support.bench_files import expected_rows
from support.helpers import report_json
from support.paths import ROOT

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from specobs.dashboard import views
from specobs.dashboard.data import ARGS_ENV
from specobs.records import Crossover, LoadRatio, Serving

APP = str(ROOT / "dashboards" / "streamlit_app.py")
BENCH = ROOT / "examples" / "data" / "vllm-cpu-bench"
PAGE = "Serving under load"


def open_page(monkeypatch, *paths: str) -> AppTest:
    monkeypatch.setenv(ARGS_ENV, json.dumps({"paths": list(paths)}))
    at = AppTest.from_file(APP, default_timeout=180).run()
    at.radio(key="page").set_value(PAGE).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert at.header[0].value == PAGE
    return at


def table_with(at: AppTest, column: str) -> pl.DataFrame:
    for table in at.dataframe:
        if column in table.value.columns:
            return pl.from_pandas(table.value)
    raise AssertionError(f"no table with {column!r}")


def by_hand_throughput_ratios() -> dict[int, float]:
    """Per concurrency: the geometric mean of ngram's output tokens/s over the repeats, over plain's."""
    rows = expected_rows(BENCH)
    ratios = {}
    for level in sorted({r["max_concurrency"] for r in rows}):
        means = {
            config: statistics.geometric_mean(
                r["output_throughput"] for r in rows if r["config"] == config and r["max_concurrency"] == level
            )
            for config in ("ngram", "plain")
        }
        ratios[level] = means["ngram"] / means["plain"]
    return ratios


@pytest.fixture(scope="module")
def report() -> dict:
    return report_json(str(BENCH))


@pytest.fixture(scope="module")
def serving(report) -> dict:
    return report["serving"]


@pytest.mark.slow
def test_page_shows_the_reports_ratios_crossover_capture_and_chart(monkeypatch, report, serving):
    at = open_page(monkeypatch, str(BENCH))
    ratios = table_with(at, "throughput ratio")
    by_hand = by_hand_throughput_ratios()
    assert ratios["level"].to_list() == [1.0, 4.0, 8.0] == [float(level) for level in by_hand]
    assert ratios["configuration"].to_list() == ["ngram"] * 3 and ratios["plain"].to_list() == ["plain"] * 3
    assert ratios["throughput ratio"].to_list() == pytest.approx(list(by_hand.values()), rel=1e-9)
    # The report's own numbers (its JSON rounds to 6 decimals), intervals worded from them.
    expected = serving["ratios"]
    assert ratios["throughput ratio"].to_list() == pytest.approx([r["throughput_ratio"] for r in expected], abs=1e-6)
    assert ratios["TPOT ratio"].to_list() == pytest.approx([r["tpot_ratio"] for r in expected], abs=1e-6)
    assert ratios["throughput ratio 95% interval"].to_list() == [
        f"{r['throughput_low']:.2f}–{r['throughput_high']:.2f}" for r in expected
    ]
    assert ratios["TPOT ratio 95% interval"].to_list() == [
        f"{r['tpot_low']:.2f}–{r['tpot_high']:.2f}" for r in expected
    ]
    assert ratios["runs"].to_list() == ratios["plain runs"].to_list() == [2, 2, 2]

    # Every crossover the report has, of every metric, with the metric named; throughput's in words.
    crossovers = table_with(at, "how")
    assert crossovers.select("metric", "how").rows() == [(c["metric"], c["how"]) for c in serving["crossovers"]]
    (throughput,) = [c for c in serving["crossovers"] if c["metric"] == "output_throughput"]
    assert throughput["how"] == "below" and throughput["repeated"]
    bullets = [m.value[2:] for m in at.markdown if m.value.startswith("- ")]
    assert (
        "ngram against plain (target), output throughput: below parity from the lowest level measured "
        "(concurrency 1) through concurrency 8; 95% interval at or below concurrency 1 to beyond concurrency 8."
    ) in bullets
    # One bullet per crossover, then one per configuration: where to draft (the report's load_advice).
    advice = report["load_advice"]
    assert len(bullets) == len(serving["crossovers"]) + len(advice) and [a["verdict"] for a in advice] == ["plain"]
    assert bullets[-1].startswith("ngram (ngram k=3) did not pay in throughput at any level measured")
    assert table_with(at, "verdict")["verdict"].to_list() == ["plain"]

    # What the capture saw during each level, as the report has it.
    captured = table_with(at, "captured steps")
    levels = serving["levels"]
    assert captured["configuration"].to_list() == [lv["config"] for lv in levels]
    assert captured["captured steps"].to_list() == [lv["captured_steps"] for lv in levels]
    assert captured["batch size"].to_list() == pytest.approx([lv["captured_batch_size"] for lv in levels], abs=1e-6)
    assert captured["step ms"].to_list() == pytest.approx([lv["captured_step_ms"] for lv in levels], abs=1e-6)
    measured = table_with(at, "output tokens/s")
    assert measured["output tokens/s"].to_list() == pytest.approx([lv["output_throughput"] for lv in levels], abs=1e-6)

    # Labelled as measured; one chart of throughput and TPOT against concurrency.
    subheaders = [h.value for h in at.subheader]
    assert "Throughput and TPOT against load (measured)" in subheaders
    assert "Speculative over plain per level (measured)" in subheaders
    (chart,) = at.get("vega_lite_chart")
    spec = chart.proto.spec
    for title in ("output tokens per second", "mean TPOT (ms)", "max concurrency"):
        assert title in spec


def test_page_says_so_in_one_line_without_serving_results(monkeypatch):
    sweep = ROOT / "examples" / "data" / "vllm-cpu-sweep"
    at = open_page(monkeypatch, str(sweep))
    assert [i.value for i in at.info] == [
        "No serving-benchmark results in the inputs (vllm bench serve result files): add them under Data."
    ]
    assert not at.dataframe and not at.get("vega_lite_chart") and not at.main.subheader


def ratio(level: float, *, low: float | None, high: float | None) -> LoadRatio:
    return LoadRatio(model="m", config="eagle", plain_config="plain", load="concurrency", level=level, runs=1,
                     plain_runs=1, throughput_ratio=1.2, throughput_low=low, throughput_high=high,
                     tpot_ratio=None, tpot_low=None, tpot_high=None)  # fmt: skip


def crossover(**changes) -> Crossover:
    values = dict(model="m", config="eagle", load="concurrency", metric="output_throughput", level=6.0, how="crossed",
                  low=4.0, high=None, lowest_level=1.0, highest_level=8.0, repeated=True)  # fmt: skip
    return Crossover(**{**values, **changes})


def test_ratio_without_interval_says_one_run():
    serving = Serving(levels=(), ratios=(ratio(1.0, low=None, high=None), ratio(2.0, low=1.1, high=1.3)), crossovers=())
    table = views.serving_ratios_table(serving)
    assert table["throughput ratio 95% interval"].to_list() == ["one run: no interval", "1.10–1.30"]
    assert table["TPOT ratio 95% interval"].to_list() == [None, None]  # no ratio: nothing to bound


def test_crossover_words_name_the_metric_how_and_interval():
    assert views.crossover_text(crossover(), "plain") == (
        "eagle against plain (m), output throughput: crossed parity with plain near concurrency 6; "
        "95% interval concurrency 4 to beyond concurrency 8."
    )
    assert views.crossover_text(crossover(how="never", level=None, low=None, repeated=False)) == (
        "eagle against the plain server (m), output throughput: never crossed parity within the levels measured "
        "(concurrency 1 to concurrency 8); one run: no interval."
    )
    # A metric the page has no name for is shown by its field name.
    assert views.crossover_text(crossover(metric="p99_itl_ms", how="unknown", model=None)) == (
        "eagle against the plain server, p99_itl_ms: unknown — no level has both a speculative and a plain result."
    )


@pytest.mark.slow
def test_an_slo_typed_on_the_page_gives_the_reports_goodput(monkeypatch):
    at = open_page(monkeypatch, str(BENCH))
    at.text_input(key="serving_slo").set_value("e2el:450ms").run()
    assert not at.exception and not at.error
    expected = report_json(str(BENCH), "--slo", "e2el:450ms")["serving"]["levels"]
    levels = table_with(at, "goodput req/s (SLO)")
    assert levels["goodput req/s (SLO)"].to_list() == pytest.approx([lv["goodput"] for lv in expected], abs=1e-6)
    assert all(g > 0 for g in levels["goodput req/s (SLO)"].to_list())
    at.text_input(key="serving_slo").set_value("tpot:fast").run()
    assert [e.value for e in at.error] == ["--slo: 'tpot:fast' is not MEASURE:VALUE (e.g. tpot:50ms,ttft:1s)"]
