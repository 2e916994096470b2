"""The dashboard's sums per time bucket and label set give the report's numbers.

The app holds :class:`specobs.advice.report_builder.ReportSums` split by the time buckets of a
:class:`specobs.analysis.sums.TimeGrid`, never rows. Every page's numbers are computed from them
by the report's own functions; here they are checked against ``specobs.advice.report_builder.analyze`` of
the rows: whole, under a label filter, and under a time range at bucket edges.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest
from support.helpers import assert_same_json
from support.paths import ROOT

from specobs.advice.compare import compare
from specobs.advice.recommend import recommend
from specobs.advice.report_builder import analyze, report_from_sums
from specobs.analysis.acceptance import DEFAULT_BY, with_group_columns
from specobs.analysis.cost import steady_state
from specobs.analysis.sums import TIME_BUCKET, TimeGrid, within
from specobs.analysis.timeseries import acceptance_over_time
from specobs.api import CHART_POINTS, Filters, Inputs, Session
from specobs.dashboard import views
from specobs.ingest import Ingested, load
from specobs.records import Report
from specobs.schema import categorical_labels

DATA = ROOT / "examples" / "data"
SWEEP = DATA / "vllm-cpu-sweep"
INPUTS = [
    SWEEP,
    DATA / "vllm-cpu-methods",
    DATA / "vllm-cpu-serve",
    DATA / "vllm-cpu-ngram-k3.log",
    DATA / "vllm-cpu-eagle-k3.metrics.txt",
    DATA / "vllm-cpu-restart",  # a restart's break (fall, draft model) from the sums
]
GROUPINGS = [("method", "k"), DEFAULT_BY, ("engine", "batch_size", "workload")]


def shown(session: Session, by, filters: Filters | None = None) -> Report:
    """The report the app shows for ``filters`` (as the summed session's ``report`` computes it)."""
    sums = session.sums(filters or Filters())
    got = session.report(by, filters=filters or Filters())
    assert got == report_from_sums(replace(sums, recommendation_blocks=None), session.ingested, by)
    return got


def reference(paths, by, keep=None, **load_args) -> Report:
    """``analyze`` of the rows trimmed whole, then kept by ``keep`` (a function of the rows)."""
    ingested = load([str(p) for p in paths], keep_going=True, **load_args)
    if keep is not None:
        rows = steady_state(categorical_labels(ingested.windows)).collect()
        ingested.windows = keep(rows).lazy()
    return analyze(ingested, by, with_recommendation=False)


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: p.name)
def test_every_number_of_the_report_comes_from_the_sums(path):
    loaded = Session.summed(Inputs((str(path),)))
    for by in GROUPINGS:
        assert shown(loaded, by).to_dict() == reference([path], by).to_dict(), by


@pytest.fixture(scope="module")
def tiled(tmp_path_factory) -> list[Path]:
    """The sweep's steps played three times over, one Parquet file per play (a synthetic input
    with many more windows than the report's 2,000 time buckets, read in parts)."""
    folder = tmp_path_factory.mktemp("tiled")
    base = pl.concat([pl.read_ndjson(f) for f in sorted(SWEEP.glob("specobs-*.jsonl"))], how="diagonal_relaxed")
    span = base["ts"].max() - base["ts"].min() + 1
    paths = []
    for play in range(3):
        path = folder / f"steps-{play}.parquet"
        base.with_columns(ts=pl.col("ts") + play * span, run_id=pl.col("run_id") + f"-{play}").write_parquet(path)
        paths.append(path)
    return paths


def test_an_input_read_in_parts_gives_the_report_of_it_read_whole(tiled):
    loaded = Session.summed(Inputs(tuple(map(str, tiled))), part_rows=10_000)
    assert loaded.sums().over_time is not None and "_bucket" in loaded.sums().over_time.columns  # bucketed in time
    for by in GROUPINGS[:2]:
        assert shown(loaded, by).to_dict() == reference(tiled, by).to_dict(), by
    assert loaded.ingested.windows.collect().is_empty()  # no rows held


def in_buckets(grid: TimeGrid, start: int, stop: int):
    def keep(rows: pl.DataFrame) -> pl.DataFrame:
        bucket = rows.with_columns(grid.bucket())[TIME_BUCKET]
        return rows.filter(bucket.is_between(start, stop - 1) | bucket.is_null())

    return keep


@pytest.mark.parametrize("which", ["sweep", "tiled"])
def test_a_time_range_on_the_sums_is_the_rows_inside_it(which, tiled):
    paths = [SWEEP] if which == "sweep" else tiled
    loaded = Session.summed(Inputs(tuple(map(str, paths))))
    grid = loaded.grid
    assert grid is not None and 100 < grid.count <= 500
    start, stop = grid.count // 5, grid.count * 3 // 5
    # A range inside buckets snaps to their nearest edges.
    filters = Filters(time_range=(grid.edge(start) + 0.3 * grid.width, grid.edge(stop) - 0.2 * grid.width))
    assert filters.buckets(grid) == (start, stop)
    by = ("method", "k")
    got = shown(loaded, by, filters)
    want = reference(paths, by, in_buckets(grid, start, stop))
    assert 0 < (got.summary.num_drafts or 0) < (shown(loaded, by).summary.num_drafts or 0)
    assert got.tax == want.tax
    got_json, want_json = got.to_dict(), want.to_dict()
    for key in ("summary", "groups", "details", "timing"):
        assert got_json[key] == want_json[key], key
    # Change points are searched on the whole input's time buckets cut to the range, where a
    # report of the rows inside it would bucket them afresh: they are not compared.


def test_a_label_filter_on_the_sums_is_the_rows_it_keeps():
    loaded = Session.summed(Inputs((str(SWEEP),)))
    filters = Filters((("method", ("ngram",)),))
    plain_or_ngram = (pl.col("method") == "ngram") | (pl.col("method").is_null() & (pl.col("num_spec_tokens") == 0))
    want = reference([SWEEP], ("method", "k"), lambda rows: rows.filter(plain_or_ngram.fill_null(False)))
    got = shown(loaded, ("method", "k"), filters)
    assert got.tax == want.tax and got.tax
    got_json, want_json = got.to_dict(), want.to_dict()
    for key in ("summary", "groups", "details", "timing"):
        assert got_json[key] == want_json[key], key


def test_the_tuning_page_recommends_as_the_report_does():
    loaded = Session.summed(Inputs((str(SWEEP),)))
    cells = loaded.recommendation_blocks(Filters())
    assert cells is not None and {"engine", "workload", TIME_BUCKET} <= set(cells.columns)
    report = analyze(load([str(SWEEP)]), ("method", "k"))
    assert report.recommendation is not None
    got = recommend(cells, bootstrap=0, metadata=loaded.metadata)
    assert got is not None and got.to_dict() == report.recommendation.to_dict()
    assert loaded.recommend(bootstrap=0) == got


def test_the_chart_over_time_is_the_report_series_bucketed_for_a_chart():
    loaded = Session.summed(Inputs((str(SWEEP),)))
    columns = ["method"]
    rows = steady_state(categorical_labels(load([str(SWEEP)]).windows))
    want = acceptance_over_time(with_group_columns(rows), columns, max_points=CHART_POINTS)
    got = views.over_time_frame(loaded.over_time(views.over_time_columns(columns)), columns)
    # The report's 2,000 time buckets put whole into the chart's 120: the same totals per group,
    # about as many points (a report bucket across a chart bucket's edge goes to one side).
    assert abs(got.height - want.height) <= want.height // 20

    def totals(frame: pl.DataFrame) -> pl.DataFrame:
        summed = frame.group_by(pl.col("method").cast(pl.String)).agg(pl.col("num_drafts", "num_accepted_tokens").sum())
        return summed.sort("method")

    assert totals(got).equals(totals(want))


def test_compare_reads_the_rows_back_from_disk():
    loaded = Session.summed(Inputs((str(SWEEP),)))
    rows = steady_state(categorical_labels(load([str(SWEEP)]).windows)).collect()
    a, b = "sweep-draft_model", "sweep-ngram"
    got = loaded.compare("run", a, b)
    side = [rows.lazy().filter(pl.col("run_id") == v) for v in (a, b)]
    assert_same_json(compare(*side).to_dict(), got.to_dict())  # floats to their last bits
    assert loaded.compare_choices(views.COMPARE_DIMENSIONS)["run"] == [a, b]


def test_sums_outside_the_selection_are_dropped_and_those_without_a_time_kept():
    frame = pl.DataFrame(
        {"method": ["a", None, "b", "a"], "num_spec_tokens": [2, 0, 2, 2], TIME_BUCKET: [0, 1, 2, None]}
    )
    assert within(frame, (("method", ("a",)),))["method"].to_list() == ["a", None, "a"]
    assert within(frame, buckets=(1, 2))[TIME_BUCKET].to_list() == [1, None]
    grid = TimeGrid.of(100.0, 200.0)
    assert grid is not None and grid.count == 500 and grid.edge(grid.count) >= 200.0
    assert pl.DataFrame({"end_ts": [100.0, 199.99, 200.0, 50.0]}).select(grid.bucket())[TIME_BUCKET].to_list() == [
        0, 499, 499, 0
    ]  # fmt: skip
    assert grid.snap(0.0, 1e9) == (0, 500)


def test_the_app_holds_no_rows():
    loaded = Session.summed(Inputs((str(SWEEP),)))
    held = [v for v in vars(loaded.ingested).values() if isinstance(v, pl.DataFrame | pl.LazyFrame)]
    assert all(frame.lazy().collect().height < 10_000 for frame in held)  # requests only
    assert isinstance(loaded.ingested, Ingested) and loaded.ingested.windows.collect().is_empty()
    assert loaded.sums().cells.height < sum(s.windows for s in loaded.sources)


def test_a_filter_keeps_the_breaks_of_what_it_keeps(tmp_path):
    """K=0 resumes are summed per run and time bucket: a method filter that drops the run drops
    its stale_after_off break, one that keeps it keeps the break the report finds."""
    from support.break_scenarios import stale_after_off

    folder = stale_after_off(tmp_path / "stale")
    loaded = Session.summed(Inputs((str(folder),)))
    want = [b.to_dict() for b in reference([folder], DEFAULT_BY).breaks]
    assert [b["kind"] for b in want] == ["stale_after_off"]
    kept = shown(loaded, DEFAULT_BY, Filters((("method", ("eagle3",)),)))
    assert [b.to_dict() for b in kept.breaks] == want
    assert shown(loaded, DEFAULT_BY, Filters((("method", ("ngram",)),))).breaks == ()
