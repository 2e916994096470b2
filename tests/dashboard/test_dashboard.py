"""The Streamlit app, page by page, with Streamlit's AppTest (the real script, no browser).

Every number the app shows must equal what the command line gives for the same data:
``specobs report/recommend/compare --format json`` are the references.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from support.paths import ROOT

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest
from support.helpers import report_json, run_cli

from specobs.dashboard.data import ARGS_ENV, BUNDLED_SERVING
from specobs.ingest import load

APP = str(ROOT / "dashboards" / "streamlit_app.py")
SWEEP = ROOT / "examples" / "data" / "vllm-cpu-sweep"
NGRAM = next(SWEEP.glob("specobs-sweep-ngram-*.jsonl"))
DRAFT = next(SWEEP.glob("specobs-sweep-draft_model-*.jsonl"))
PLAIN = next(SWEEP.glob("specobs-sweep-plain-*.jsonl"))


@pytest.fixture
def app(monkeypatch) -> AppTest:
    """The app as a newcomer opens it: no arguments, so the bundled sweep."""
    monkeypatch.delenv(ARGS_ENV, raising=False)
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def goto(at: AppTest, page: str) -> AppTest:
    at.radio(key="page").set_value(page).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert at.header[0].value == page
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def bullets(at: AppTest) -> list[str]:
    return [m.value[2:] for m in at.markdown if m.value.startswith("- ")]


def frame_with(at: AppTest, column: str) -> pl.DataFrame:
    """The first table on the page that has ``column``."""
    for table in at.dataframe:
        if column in table.value.columns:
            return pl.from_pandas(table.value)
    raise AssertionError(f"no table with {column!r}")


def chart_specs(at: AppTest) -> list[dict]:
    """The Vega-Lite specs of the charts on the page."""
    return [json.loads(chart.proto.spec) for chart in at.get("vega_lite_chart")]


def axis_titles(spec) -> set[str]:
    """Every axis title in a (layered, faceted) spec."""
    found = set()
    if isinstance(spec, dict):
        for key, value in spec.items():
            if key in ("x", "y") and isinstance(value, dict) and "title" in value:
                found.add(value["title"])
            found |= axis_titles(value)
    elif isinstance(spec, list):
        for item in spec:
            found |= axis_titles(item)
    return found


def recommend_json(*paths: Path) -> dict:
    result = run_cli("recommend", *map(str, paths), "--format", "json")
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout)


def test_overview_shows_the_report_numbers(app):
    # The app opens on the bundled sweep and serving results (no steps among the results).
    expected = report_json(str(SWEEP), str(BUNDLED_SERVING), "--by", "method,k")
    assert expected["summary"] == report_json(str(SWEEP), "--by", "method,k")["summary"]
    summary = expected["summary"]
    shown = metrics(app)
    assert shown["Acceptance length"] == f"{summary['mean_acceptance_length']:.2f}"
    assert shown["Draft acceptance rate"] == f"{summary['draft_acceptance_rate']:.1%}"
    assert shown["Drafts"] == f"{summary['num_drafts']:,}"
    assert shown["Accepted tokens"] == f"{summary['num_accepted_tokens']:,}"
    assert shown["Skipped input lines"] == "0"
    # The same sentences as the report, detected changes included: the sweep's planned k and
    # batch switches are configuration changes, not regressions.
    assert bullets(app) == expected["findings"]
    assert any("a configuration change, not a regression" in line for line in bullets(app))
    assert not any(c["kind"] == "regression" for c in expected["change_points"])
    groups = frame_with(app, "acceptance_length")
    by_key = {(g["method"], g["num_spec_tokens"]): g for g in expected["groups"]}
    assert groups.height == len(by_key)
    for row in groups.iter_rows(named=True):
        want = by_key[(row["method"], row["num_spec_tokens"])]
        assert row["drafts"] == want["num_drafts"]
        if want["mean_acceptance_length"] is not None:
            assert row["acceptance_length"] == pytest.approx(want["mean_acceptance_length"], abs=1e-6)
    changes = frame_with(app, "kind")
    assert changes.height == len(expected["change_points"])
    assert sorted(changes["kind"].to_list()) == sorted(c["kind"] for c in expected["change_points"])
    specs = chart_specs(app)
    assert len(specs) == 3  # r_i, β_i, acceptance over time
    assert {"draft position i", "share of drafts", "time (UTC)", "acceptance length (tokens)"} <= set().union(
        *map(axis_titles, specs)
    )


@pytest.mark.slow
def test_method_filter_changes_every_number_to_that_methods(app):
    app.multiselect(key="filter_method").set_value(["ngram"]).run()
    expected = report_json(str(NGRAM), "--by", "method,k")["summary"]
    shown = metrics(app)
    assert shown["Acceptance length"] == f"{expected['mean_acceptance_length']:.2f}"
    assert shown["Drafts"] == f"{expected['num_drafts']:,}"
    overall = report_json(str(SWEEP), "--by", "method,k")["summary"]
    assert expected["num_drafts"] < overall["num_drafts"]
    # Tuning on the filtered slice = recommend on the ngram run plus the plain baseline engine.
    goto(app, "Tuning")
    rec = recommend_json(NGRAM, PLAIN)["recommended"]
    shown = metrics(app)
    assert shown["Method"] == "ngram" == rec["method"]
    assert shown["Speculative tokens k"] == str(rec["num_speculative_tokens"])
    assert shown[f"Speedup ({rec['basis']})"] == f"{rec['predicted_speedup']:.2f}×"


def test_time_range_filter_keeps_only_windows_inside_it(app):
    """The range snaps to the nearest edges of the app's time buckets: the windows ending in the
    buckets between them are the ones counted."""
    from specobs.api import Inputs, Session

    grid = Session.summed(Inputs((str(SWEEP),))).grid
    windows = pl.concat([pl.read_ndjson(p) for p in (NGRAM, DRAFT, PLAIN)], how="diagonal_relaxed")
    slider = app.slider(key="time_range")
    low, high = slider.value
    cut = low + (high - low) / 2 + dt.timedelta(seconds=grid.width / 3)  # inside a bucket
    slider.set_value((low, cut)).run()
    start, stop = grid.snap(low.replace(tzinfo=dt.UTC).timestamp(), cut.replace(tzinfo=dt.UTC).timestamp())
    assert start == 0 and grid.edge(stop) != cut.replace(tzinfo=dt.UTC).timestamp()
    inside = windows.filter(pl.col("ts").is_between(grid.edge(start), grid.edge(stop), closed="left"))
    assert 0 < inside["num_drafts"].sum() < windows["num_drafts"].sum()
    assert metrics(app)["Drafts"] == f"{inside['num_drafts'].sum():,}"


@pytest.mark.slow
def test_cost_page_shows_timing_by_batch(app):
    goto(app, "Cost")
    expected = report_json(str(SWEEP), "--by", "method,k")["timing"]
    table = frame_with(app, "cost ratio")
    assert table.height == len(expected)
    for row, want in zip(table.iter_rows(named=True), expected, strict=True):
        assert row["batch"] == want["batch_bucket"]
        assert row["steps"] == want["timed_steps"]
        # The JSON rounds to 6 decimals: 1 µs.
        for name, key, scale in (
            ("draft ms", "mean_draft_seconds", 1000),
            ("verify ms", "mean_verify_seconds", 1000),
            ("cost ratio", "cost_ratio", 1),
            ("draft share", "draft_share", 1),
            ("rejected-draft share", "rejected_draft_share", 1),
        ):
            if want[key] is None:
                assert row[name] is None or row[name] != row[name]  # null shows as None/NaN
            else:
                assert row[name] == pytest.approx(want[key] * scale, abs=1e-6 * scale)
    # Drafting with rejections costs something somewhere; a plain engine never drafts.
    assert table.filter(pl.col("group").str.starts_with("draft_model"))["rejected-draft share"].max() > 0.05
    assert table.filter(pl.col("group").str.starts_with("plain engine"))["cost ratio"].is_null().all()
    # Leviathan's c: a draft-model pass costs a good share of a verify at every batch size, not a few percent.
    assert table.filter(pl.col("group").str.starts_with("draft_model"))["cost ratio"].min() > 0.3
    specs = chart_specs(app)
    assert len(specs) == 4
    titles = set().union(*map(axis_titles, specs))
    assert {"mean time per step (ms)", "batch size (running requests)", "share of step time",
            "cost ratio (draft per position ÷ verify)", "draft share of step time"} <= titles  # fmt: skip


@pytest.mark.slow
def test_tuning_page_equals_specobs_recommend(app):
    goto(app, "Tuning")
    expected = recommend_json(SWEEP)
    rec = expected["recommended"]
    shown = metrics(app)
    assert shown["Method"] == rec["method"]
    assert shown["Speculative tokens k"] == str(rec["num_speculative_tokens"])
    assert shown[f"Speedup ({rec['basis']})"] == f"{rec['predicted_speedup']:.2f}×"
    # The sweep carries its run metadata: the config is complete, so it is shown as the flag to paste
    # and no warning stands above it.
    assert rec["missing_fields"] == []
    assert "prompt_lookup_min" in rec["speculative_config"]
    assert app.code[0].value == f"--speculative-config '{rec['speculative_config']}'"
    assert not [w for w in app.warning if w.value.startswith("Incomplete")]
    table = frame_with(app, "predicted speedup")
    assert table["k"].to_list() == [
        "off" if b["num_speculative_tokens"] == 0 else str(b["num_speculative_tokens"])
        for b in expected["by_batch_size"]
    ]
    assert table["predicted speedup"].to_list() == pytest.approx(
        [b["predicted_speedup"] for b in expected["by_batch_size"]]
    )
    assert table["low"].to_list() == pytest.approx([b["interval"][0] for b in expected["by_batch_size"]])
    assert bullets(app)[: len(expected["explanations"])] == expected["explanations"]
    specs = chart_specs(app)
    assert len(specs) == 2
    titles = set().union(*map(axis_titles, specs))
    assert {
        "speculative tokens k",
        "speedup over plain decoding (×; measured where measured)",
        "decode tokens per second",
    } <= titles
    # Fewer bootstrap resamples: intervals change, the point estimates do not.
    app.number_input(key="bootstrap").set_value(0).run()
    assert metrics(app)[f"Speedup ({rec['basis']})"] == f"{rec['predicted_speedup']:.2f}×"
    assert frame_with(app, "predicted speedup")["low"].is_null().all()


@pytest.mark.slow
def test_compare_page_gives_the_compare_verdict(app):
    goto(app, "Compare")
    assert app.selectbox(key="compare_by").value == "run"
    a, b = app.selectbox(key="compare_a_run").value, app.selectbox(key="compare_b_run").value
    assert (a, b) == ("sweep-draft_model", "sweep-ngram")
    result = run_cli("compare", str(DRAFT), str(NGRAM), "--format", "json")
    expected = json.loads(result.stdout)
    messages = [e.value for e in app.success] + [e.value for e in app.info] + [e.value for e in app.error]
    assert expected["verdict"] in messages
    table = frame_with(app, "quantity").filter(pl.col("quantity") == "acceptance length")
    assert table[f"A: {a}"][0] == pytest.approx(expected["a"]["mean_acceptance_length"])
    assert table[f"B: {b}"][0] == pytest.approx(expected["b"]["mean_acceptance_length"])
    # Swapping the sides swaps the verdict's direction.
    app.selectbox(key="compare_a_run").set_value("sweep-ngram")
    app.selectbox(key="compare_b_run").set_value("sweep-draft_model").run()
    swapped = json.loads(run_cli("compare", str(NGRAM), str(DRAFT), "--format", "json").stdout)
    assert swapped["verdict"] in [e.value for e in app.success] + [e.value for e in app.info] + [
        e.value for e in app.error
    ]


def test_sources_page_lists_inputs(app):
    goto(app, "Sources")
    table = frame_with(app, "format")
    bundled = [*SWEEP.iterdir(), *BUNDLED_SERVING.iterdir()]
    assert sorted(Path(p).name for p in table["input"]) == sorted(p.name for p in bundled)
    assert set(table["format"]) == {"events-jsonl", "run-metadata", "vllm-bench-serve"}
    # One window per step line; the run-metadata records beside them hold none.
    assert table["windows"].sum() == sum(1 for p in SWEEP.glob("specobs-*") for _ in p.open())
    assert app.subheader[0].value == "Skipped lines: 0"


@pytest.mark.slow
def test_bad_upload_is_reported_on_sources_and_the_rest_keeps_working(app):
    before = metrics(app)["Acceptance length"]
    good_line = NGRAM.read_text().splitlines()[100]
    uploads = [
        ("garbage.bin", bytes(range(256)) * 8, "application/octet-stream"),
        ("steps.jsonl", f"{good_line}\n{{not json\n{good_line}\n".encode(), "application/json"),
    ]
    app.file_uploader(key="uploads").set_value(uploads).run()
    assert not app.exception
    assert any("see the Sources page" in w.value for w in app.warning)
    shown = metrics(app)
    assert shown["Skipped input lines"] == "2"  # the unreadable upload and the bad line
    assert shown["Acceptance length"] != "–" and before != "–"
    goto_sources = app.radio(key="page").set_value("Sources").run()
    errors = [e.value for e in goto_sources.error]
    assert errors == ["Could not read garbage.bin: binary data, not a recognised log, scrape or event file"]
    skipped = frame_with(goto_sources, "why")
    assert skipped.row(0, named=True) == {"input": "steps.jsonl", "line": 2, "why": skipped["why"][0]}
    assert skipped["why"][0].startswith("not valid JSON")
    assert goto_sources.subheader[0].value == "Skipped lines: 1"
    # Every other page still renders.
    for page in ("Overview", "Cost", "Tuning", "Compare"):
        app.radio(key="page").set_value(page).run()
        assert not app.exception and not app.error, page


def test_missing_path_is_an_error_not_a_traceback(app):
    app.text_area(key="paths").set_value("/nonexistent/vllm.log").run()
    assert not app.exception
    assert any("No speculative decoding metrics" in i.value for i in app.info)
    goto_sources = app.radio(key="page").set_value("Sources").run()
    assert [e.value for e in goto_sources.error] == ["Could not read /nonexistent/vllm.log: no such file"]


def test_dashboard_command_passes_its_inputs_to_the_app(monkeypatch, tmp_path):
    log = ROOT / "examples" / "data" / "vllm-cpu-ngram-k3.log"
    monkeypatch.setenv(ARGS_ENV, json.dumps({"paths": [str(log)]}))
    at = AppTest.from_file(APP, default_timeout=180).run()
    expected = report_json(str(log), "--by", "method,k")["summary"]
    assert metrics(at)["Acceptance length"] == f"{expected['mean_acceptance_length']:.2f}"
    # A log has no timing: the Cost page says so instead of drawing nothing.
    goto(at, "Cost")
    assert any("No timing" in i.value for i in at.info)


def test_dashboard_command_rejects_missing_paths():
    result = run_cli("dashboard", "/nonexistent/dir")
    assert result.returncode == 2
    assert result.stderr.decode().strip() == "specobs: /nonexistent/dir: no such file"


def test_filters_keep_the_plain_baseline_under_a_method_filter():
    from specobs.api import Filters, Inputs, Session

    loaded = Session.summed(Inputs((str(SWEEP),)))
    assert loaded.options["method"] == ["draft_model", "ngram"]
    cells = loaded.sums(Filters((("method", ("ngram",)),))).cells
    assert set(cells["method"].to_list()) == {"ngram", None}
    assert cells.filter(pl.col("method").is_null())["num_spec_tokens"].unique().to_list() == [0]
    windows = load([str(SWEEP)]).windows.collect()
    kept = windows.filter(pl.col("method").is_null() | (pl.col("method") == "ngram"))
    assert cells["num_windows"].sum() == kept.height
    assert loaded.sums(Filters((("engine", (1,)),))).cells.is_empty()


def test_views_keep_bucket_order_and_labels():
    from specobs.buckets import ordered as bucket_order
    from specobs.dashboard.views import PLAIN, group_label

    assert bucket_order(["16-31", "1", "4-7", None, "2-3", "1"]) == ["1", "2-3", "4-7", "16-31"]
    assert group_label({"method": None, "num_spec_tokens": 0}, ["method", "num_spec_tokens"]) == f"{PLAIN} · 0"
    assert group_label({"model": None}, ["model"]) == "all"


def test_tuning_page_shows_a_tune_run_and_the_online_tuners_log(monkeypatch, tmp_path):
    """A tune.json among the inputs: its headline, measured points, schedule and verification, as
    ``specobs tune`` printed them; a decision log: the live k per bucket and the decisions."""
    tune = ROOT / "examples" / "data" / "tune-ngram" / "tune.json"
    saved = json.loads(tune.read_text())
    decisions = tmp_path / "specobs-r-tuner-p1-0001.jsonl"
    rows = [
        {"tuner_action": "apply", "ts": 3600.0, "batch_size_min": 1, "batch_size_max": 1, "from_k": 3, "to_k": 4,
         "predicted_gain": 0.12, "predicted_low": 0.08, "predicted_high": 0.15, "measured_gain": None,
         "reason": "measured faster", "run_id": "r", "engine": 0},
        {"tuner_action": "confirm", "ts": 3700.0, "batch_size_min": 1, "batch_size_max": 1, "from_k": 4, "to_k": 4,
         "predicted_gain": None, "predicted_low": None, "predicted_high": None, "measured_gain": 0.11,
         "reason": "held", "run_id": "r", "engine": 0},
    ]  # fmt: skip
    decisions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setenv(ARGS_ENV, json.dumps({"paths": [str(tune), str(decisions), str(NGRAM), str(PLAIN)]}))
    at = AppTest.from_file(APP, default_timeout=180).run()
    goto(at, "Tuning")
    subheaders = [h.value for h in at.subheader]
    assert f"Tune run: {tune}" in subheaders and "Online tuner" in subheaders
    v = saved["verification"]
    assert metrics(at)["Chosen, tokens/s"] == f"{v['schedule_tokens_per_second']:,.0f}"
    static = f"vs best static k={v['best_static_num_speculative_tokens']}"
    assert metrics(at)[static] == f"{v['gain_vs_best_static']:+.1%}"
    schedule = frame_with(at, "basis")
    assert schedule["k"].to_list() == [str(b["num_speculative_tokens"]) for b in saved["buckets"]]
    title = "batch size (grey: plain engine, ringed: chosen)"
    tune_chart = next(s for s in chart_specs(at) if title in json.dumps(s))
    assert tune_chart["facet"]["field"] == "batch_size" and len(tune_chart["spec"]["layer"]) == 5
    state = "k=4 at batch 1 since 01:00:00 UTC: +12.0% [+8.0% to +15.0%] predicted, +11.0% measured after the switch."
    assert state in bullets(at)
    log = frame_with(at, "action")
    assert log["action"].to_list() == ["apply", "confirm"]


def test_overview_shows_the_per_request_distribution(monkeypatch, tmp_path):
    """Saved offline outputs among the inputs: the per-request means, median and histogram are the
    report's (``specobs report --format json``), request by request."""
    metrics_of = {
        "long": ([0, 0, 0, 10], 30),  # 10 steps, all accepted: 4.0
        "mid": ([2, 2, 0, 0], 12),  # 1 + 2/4 = 1.5
        "short": ([1, 0, 1, 0], 6),  # 1 + 2/2 = 2.0
        "none": ([0, 0, 0, 0], 0),  # never drafted
    }
    lines = []
    for name, (histogram, drafted) in metrics_of.items():
        steps, accepted = sum(histogram), sum(i * n for i, n in enumerate(histogram))
        spec = {"mean_acceptance_length": 1 + accepted / steps if steps else 1.0, "acceptance_histogram": histogram,
                "num_spec_steps": steps, "num_accepted_draft_tokens": accepted, "num_draft_tokens": drafted,
                "num_spec_tokens": 3}  # fmt: skip
        lines.append({"request_id": name, "num_prompt_tokens": 10 * len(name), "workload": "chat",
                      "outputs": [{"index": 0, "num_output_tokens": 4 * steps, "spec_decode_metrics": spec}]})  # fmt: skip
    outputs = tmp_path / "outputs.jsonl"
    outputs.write_text("".join(json.dumps(line) + "\n" for line in lines))
    expected = report_json(str(NGRAM), str(outputs))["requests"]["overall"]
    assert expected["request_weighted_mean_acceptance_length"] == pytest.approx((4.0 + 1.5 + 2.0) / 3)
    assert expected["token_weighted_mean_acceptance_length"] == pytest.approx(1 + 34 / 16)
    monkeypatch.setenv(ARGS_ENV, json.dumps({"paths": [str(NGRAM), str(outputs)]}))
    at = AppTest.from_file(APP, default_timeout=180).run()
    goto(at, "Overview")
    assert "Acceptance per request" in [h.value for h in at.subheader]
    shown = metrics(at)
    assert shown["Finished requests"] == "4"
    assert shown["Request-weighted mean"] == f"{expected['request_weighted_mean_acceptance_length']:.2f}"  # 2.50
    assert shown["Token-weighted mean"] == f"{expected['token_weighted_mean_acceptance_length']:.2f}"  # 3.12
    assert shown["Median request"] == "2.00"
    (chart,) = [c for c in at.get("vega_lite_chart") if "requests by acceptance length" in c.proto.spec]
    assert axis_titles(json.loads(chart.proto.spec)) == {"acceptance length (tokens per step)", "requests"}
    (dataset,) = chart.proto.datasets  # the bars' data rides beside the spec, as Arrow
    bars = pl.from_arrow(pa.ipc.open_stream(dataset.data.data).read_all())
    assert bars.height == 12 and bars["low"].to_list()[:2] == [1.0, 1.25]  # 1.0 to 4.0 in 0.25 steps
    assert bars.filter(pl.col("requests") > 0).select("low", "requests").rows() == [(1.5, 1), (2.0, 1), (3.75, 1)]
    table = frame_with(at, "request_weighted_mean_acceptance_length")
    by_prompt = table.filter(pl.col("by") == "prompt tokens")  # 30 tokens (mid); 40, 40 and 50 (long, none, short)
    assert by_prompt.select("group", "num_requests").rows() == [("16-31", 1), ("32-63", 3)]
    assert any("weighted by verify steps" in b for b in bullets(at))


def test_cost_page_shows_the_table_by_context_length_as_the_report_does(monkeypatch):
    context = ROOT / "examples" / "data" / "vllm-cpu-context"
    monkeypatch.setenv(ARGS_ENV, json.dumps({"paths": [str(context)]}))
    at = AppTest.from_file(APP, default_timeout=180).run()
    assert not at.exception, [e.value for e in at.exception]
    goto(at, "Cost")
    expected = report_json(str(context), "--by", "method,k")["context"]
    table = frame_with(at, "context")
    assert table.height == len(expected["rows"])
    for row, want in zip(table.iter_rows(named=True), expected["rows"], strict=True):
        assert row["context"] == want["context_bucket"]
        assert row["k"].rstrip(" *") == str(want["k"])
        speedup = row["speedup [95%]"]
        assert (speedup == "–") == (want["speedup"] is None)
        if want["speedup"] is not None:
            assert speedup.startswith(f"{want['speedup']:.2f}×")
    assert any(line.startswith("Acceptance rises with context") for line in bullets(at))
    assert expected["findings"] == [line for line in bullets(at) if line in expected["findings"]]
