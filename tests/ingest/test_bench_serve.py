"""vLLM serving-benchmark results (`vllm bench serve`, `vllm bench sweep serve`): read as vLLM 0.32
writes them, bad records named and skipped whole, and speculation against plain under load
computed as by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from support.bench_files import bench_result, expected_rows, write_json
from support.helpers import run_cli
from support.paths import DATA

import specobs
from specobs.analysis.intervals import geometric_ratio, t95
from specobs.analysis.under_load import serving
from specobs.ingest import Ingested
from specobs.render.sentences import report_findings


def result(label: str, concurrency: int, throughput: float, tpot: float, *, spec: bool, **extra) -> dict:
    """A result as ``vllm/benchmarks/serve.py`` (0.32) saves it (setup, metadata, traffic, metrics)."""
    traffic = {
        "num_prompts": 16, "duration": 4.0, "completed": 16, "total_input_tokens": 1024, "total_output_tokens": 1024,
        "request_throughput": 4.0, "total_token_throughput": 2 * throughput, "max_output_tokens_per_s": 1.2 * throughput,
        "max_concurrent_requests": concurrency, "rtfx": 0.0,
        "mean_ttft_ms": 30.0, "median_ttft_ms": 29.0, "std_ttft_ms": 3.0, "p99_ttft_ms": 41.0,
        "mean_tpot_ms": tpot, "median_tpot_ms": tpot, "std_tpot_ms": 1.0, "p99_tpot_ms": 1.5 * tpot,
        "mean_itl_ms": tpot, "median_itl_ms": tpot, "std_itl_ms": 1.0, "p99_itl_ms": 2 * tpot,
        "mean_e2el_ms": 600.0, "median_e2el_ms": 590.0, "std_e2el_ms": 50.0, "p99_e2el_ms": 700.0,
    }  # fmt: skip
    return bench_result(label, concurrency, throughput, spec=spec, **traffic | extra)


def test_a_result_file_is_one_row_with_its_values(tmp_path):
    record = result("ngram-k3", 4, 200.8, 9.0, spec=True)
    ingested = specobs.load(str(write_json(tmp_path / "r.json", record)))
    (row,) = ingested.bench.to_dicts()
    assert ingested.sources[0].format == "vllm-bench-serve"
    assert (row["config"], row["model"], row["max_concurrency"], row["request_rate"]) == (
        "ngram-k3",
        "tiny-llama",
        4,
        None,
    )
    assert (row["output_throughput"], row["p99_tpot_ms"], row["completed"]) == (200.8, 13.5, 16)
    assert row["speculative"] is True and row["spec_decode_acceptance_rate"] == pytest.approx(0.47)
    assert row["spec_decode_per_position"] == [0.6, 0.47, 0.34] and row["p90_tpot_ms"] is None
    plain = specobs.load(str(write_json(tmp_path / "p.json", result("plain", 4, 160.0, 9.0, spec=False)))).bench
    assert plain["speculative"].to_list() == [False] and plain["num_spec_tokens"].to_list() == [0]


def test_appended_results_keep_the_good_records_and_name_the_bad(tmp_path):
    good = result("ngram-k3", 1, 90.0, 11.0, spec=True)
    lines = [json.dumps(good), json.dumps(good | {"output_throughput": "fast"}), "{not json",
             json.dumps(good | {"max_concurrency": 0}), json.dumps(good | {"max_concurrency": 8})]  # fmt: skip
    path = tmp_path / "appended.json"
    path.write_text("\n".join(lines) + "\n")
    ingested = specobs.load(str(path))
    assert ingested.bench["max_concurrency"].to_list() == [1, 8]
    assert [(s.line, s.why) for s in ingested.skipped] == [
        (2, "output_throughput is missing or not a number"),
        (3, "not valid JSON"),
        (4, "max_concurrency is not a positive integer"),
    ]
    assert ingested.sources[0].skipped == 3


def test_a_sweep_folder_names_each_server_combination(tmp_path):
    runs = []
    for name, spec, base in (("plain", False, 100.0), ("ngram", True, 130.0)):
        folder = tmp_path / f"SERVE-{name}-BENCH-c4"
        for n in range(2):
            run = result("", 4, base + n, 10.0, spec=spec, run_number=n) | {"label": None, "config": None}
            write_json(folder / f"run={n}.json", run)
            runs.append(run)
    bench = specobs.load(str(tmp_path)).bench.sort("config", "run_number")
    assert bench.select("config", "run_number", "speculative").rows() == [
        ("ngram", 0, True), ("ngram", 1, True), ("plain", 0, False), ("plain", 1, False)]  # fmt: skip
    summary = specobs.load(str(write_json(tmp_path / "SERVE-plain-BENCH-c4" / "summary.json", runs[:2]))).bench
    assert summary["source_line"].to_list() == [1, 2] and summary["config"].unique().to_list() == ["plain"]


def test_a_result_cut_short_is_one_line_error_without_traceback(tmp_path):
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(result("x", 1, 1.0, 1.0, spec=False))[:200])
    done = run_cli("report", str(path))
    err = done.stderr.decode()
    assert done.returncode == 2 and "Traceback" not in err
    assert f"{path}: not complete JSON" in err and len(err.strip().splitlines()) == 1


def test_ratios_and_the_crossover_are_computed_as_by_hand(tmp_path):
    # plain and ngram at concurrency 1, 4, 8, two repeats each: ngram pays at 1 and 4, not at 8.
    levels = {1: ((100, 104), (130, 136)), 4: ((300, 306), (330, 320)), 8: ((500, 490), (420, 430))}
    for c, (plain, spec) in levels.items():
        for n, (tp_a, tp_b) in enumerate(zip(plain, spec, strict=True)):
            write_json(tmp_path / f"plain-c{c}-r{n}.json", result("plain", c, tp_a, 10.0 + n, spec=False))
            write_json(tmp_path / f"ngram-c{c}-r{n}.json", result("ngram", c, tp_b, 8.0 + n, spec=True))
    report = specobs.analyze(specobs.load(str(tmp_path)))
    got = report.serving
    assert got is not None
    by_level = {r.level: r for r in got.ratios}

    def welch(b, a):
        lb, la = [math.log(x) for x in b], [math.log(x) for x in a]
        mb, ma = sum(lb) / 2, sum(la) / 2
        vb, va = sum((x - mb) ** 2 for x in lb), sum((x - ma) ** 2 for x in la)  # n − 1 = 1
        se = math.sqrt(vb / 2 + va / 2)
        df = (vb / 2 + va / 2) ** 2 / ((vb / 2) ** 2 + (va / 2) ** 2)
        return math.exp(mb - ma), math.exp(mb - ma - t95(df) * se), math.exp(mb - ma + t95(df) * se)

    for c, (plain, spec) in levels.items():
        r = by_level[float(c)]
        assert (r.throughput_ratio, r.throughput_low, r.throughput_high) == pytest.approx(welch(spec, plain))
        assert r.tpot_ratio == pytest.approx(math.sqrt(8 * 9) / math.sqrt(10 * 11))
        assert (r.runs, r.plain_runs) == (2, 2)
    cross = next(c for c in got.crossovers if c.metric == "output_throughput")
    # Between 4 and 8, on log(level) and log(ratio).
    r4, r8 = by_level[4.0].throughput_ratio, by_level[8.0].throughput_ratio
    t = math.log(r4) / (math.log(r4) - math.log(r8))
    assert cross.how == "crossed" and cross.level == pytest.approx(math.exp(math.log(4) + t * math.log(2)))
    assert cross.low is None or cross.low <= cross.level
    assert cross.high is None or cross.high >= cross.level
    text = " ".join(f.text for f in report_findings(report) if f.kind == "serving")
    assert "stops paying near concurrency" in text and "ngram against plain" in text


def test_one_run_a_side_has_no_interval_and_says_so():
    value, low, high = geometric_ratio([130.0], [100.0])
    assert value == pytest.approx(1.3) and low is None and high is None
    assert serving(Ingested().bench) is None


def test_the_serving_plot_is_a_png(tmp_path):
    for c, tp in ((1, 120.0), (4, 90.0)):
        write_json(tmp_path / "in" / f"plain-c{c}.json", result("plain", c, 100.0, 10.0, spec=False))
        write_json(tmp_path / "in" / f"ngram-c{c}.json", result("ngram", c, tp, 9.0, spec=True))
    png = tmp_path / "serving.png"
    done = run_cli("report", str(tmp_path / "in"), "--serving-plot", str(png), "--brief")
    assert done.returncode == 0, done.stderr.decode()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"wrote {png}" in done.stderr.decode()
    assert "stops paying near concurrency" in done.stdout.decode()


# --- the bundled real results (examples/data/vllm-cpu-bench: vLLM 0.32's own files) ----------------

BENCH = DATA / "vllm-cpu-bench"


def test_the_bundled_results_read_as_the_files_say():
    expected = {row["file"]: row for row in expected_rows(BENCH)}
    bench = specobs.load(str(BENCH / "results")).bench
    assert bench.height == len(expected) == 12
    for row in bench.iter_rows(named=True):
        want = expected[Path(row["source"]).name]
        assert (row["config"], row["max_concurrency"], row["completed"]) == (
            want["config"], want["max_concurrency"], want["completed"])  # fmt: skip
        for key in ("output_throughput", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_ttft_ms"):
            assert row[key] == want[key], key
        spec = want["spec_decode"]
        assert row["speculative"] is (spec is not None)
        if spec is not None:
            assert row["num_spec_tokens"] == want["k"] == 3
            assert row["spec_decode_acceptance_rate"] == pytest.approx(spec["acceptance_rate"] / 100)
            assert row["spec_decode_per_position"] == spec["per_position_acceptance_rates"]


def test_the_bundled_ratios_are_the_files_geometric_means():
    rows = expected_rows(BENCH)
    got = serving(specobs.load(str(BENCH / "results")).bench)
    assert got is not None and len(got.ratios) == 3
    for r in got.ratios:
        level = int(r.level)
        spec = [x["output_throughput"] for x in rows if x["config"] == "ngram" and x["max_concurrency"] == level]
        plain = [x["output_throughput"] for x in rows if x["config"] == "plain" and x["max_concurrency"] == level]
        by_hand = math.exp(sum(map(math.log, spec)) / len(spec) - sum(map(math.log, plain)) / len(plain))
        assert r.throughput_ratio == pytest.approx(by_hand, rel=1e-12)
        assert r.throughput_low is not None and r.throughput_low < r.throughput_ratio < r.throughput_high
    # ngram is below plain at every level here (0.83–0.93×), beyond noise at none: never "pays".
    cross = next(c for c in got.crossovers if c.metric == "output_throughput")
    assert cross.how == "below" and cross.level is None and (cross.lowest_level, cross.highest_level) == (1.0, 8.0)


def test_compare_of_two_sets_of_serving_results_is_decided_by_their_repeats(tmp_path):
    for side, scale in (("a", 1.0), ("b", 0.8)):  # B: 20% less throughput at every level, two repeats
        for c in (1, 4):
            for n, jitter in enumerate((1.0, 1.01)):
                write_json(tmp_path / side / f"ngram-c{c}-r{n}.json",
                      result("ngram", c, 100.0 * c * scale * jitter, 10.0 / scale, spec=True))  # fmt: skip
    done = run_cli("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--format", "json")
    assert done.returncode == 3, done.stderr.decode()  # a regression: scripts gate on it
    doc = json.loads(done.stdout)
    assert doc["kind"] == "regression" and len(doc["serving"]) == 2
    for r in doc["serving"]:
        assert r["throughput_ratio"] == pytest.approx(0.8, rel=1e-6) and r["throughput_high"] < 1
        assert r["tpot_ratio"] == pytest.approx(1.25, rel=1e-6)
    assert "throughput fell beyond noise: a regression" in doc["verdict"]


def test_the_capture_during_each_level_is_the_steps_inside_its_runs(monkeypatch):
    """Each result's window is [end − duration, end] ± 1 s, its end vLLM's ``date`` in local time
    (the bundled runs were recorded in UTC); the steps inside, of an engine of the result's kind,
    summed per level — computed here by hand from the event files."""
    import time

    import polars as pl

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        ingested = specobs.load(str(BENCH))
        got = {(lv.config, lv.level): lv for lv in specobs.analyze(ingested).serving.levels}
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    steps = ingested.windows.filter(pl.col("counters") == "step").collect()
    for config, level in (("ngram", 4), ("plain", 8)):
        rows = [r for r in expected_rows(BENCH) if (r["config"], r["max_concurrency"]) == (config, level)]
        inside = []
        for r in rows:
            raw = json.loads((BENCH / "results" / r["file"]).read_text())
            end = time.mktime(time.strptime(raw["date"], "%Y%m%d-%H%M%S")) - time.timezone
            speculative = pl.col("method").is_not_null() if config == "ngram" else pl.col("method").is_null()
            inside.append(steps.filter(pl.col("end_ts").is_between(end - raw["duration"] - 1, end + 1) & speculative))
        both = pl.concat(inside)
        lv = got[(config, float(level))]
        assert lv.captured_steps == both.height > 100
        assert lv.captured_batch_size == pytest.approx(both["batch_size"].mean())
        assert lv.captured_step_ms == pytest.approx(1000 * both["step_seconds"].mean())
        if config == "ngram":
            accepted, drafts = both["num_accepted_tokens"].sum(), both["num_drafts"].sum()
            assert lv.captured_acceptance_length == pytest.approx(1 + accepted / drafts)
            # Per position: the share of the drafts whose token there was accepted, summed by hand.
            per_pos = [0, 0, 0]
            for row in both["num_accepted_tokens_per_pos"].to_list():
                for i, value in enumerate(row or []):
                    per_pos[i] += value
            assert lv.captured_per_position == pytest.approx([x / drafts for x in per_pos])
            assert 1 + sum(lv.captured_per_position) == pytest.approx(lv.captured_acceptance_length)
            # The same drafts as the benchmark's own counters saw, within the capture's wider window
            # (warm-up requests and the 1 s slack): per position within 0.05 of spec_decode's.
            spec = [r["spec_decode"]["per_position_acceptance_rates"] for r in rows]
            assert lv.captured_per_position == pytest.approx(
                [sum(p) / len(p) for p in zip(*spec, strict=True)], abs=0.05
            )
        else:
            assert lv.captured_per_position is None


def test_the_finding_says_why_from_the_captured_step_times():
    report = specobs.analyze(specobs.load(str(BENCH)))
    assert report.serving is not None
    levels = {(lv.config, lv.level): lv for lv in report.serving.levels}
    for r in report.serving.ratios:
        spec, plain = levels[("ngram", r.level)], levels[("plain", r.level)]
        assert r.step_time_ratio == pytest.approx(spec.captured_step_ms / plain.captured_step_ms)
        assert r.acceptance_length == spec.captured_acceptance_length
    text = " ".join(f.text for f in report_findings(report) if f.kind == "serving")
    steps = [r.step_time_ratio for r in report.serving.ratios]
    assert steps == sorted(steps) and steps[-1] > 1.05 * steps[0]  # 1.30×, 1.38×, 1.65× on these runs
    assert "(its relative cost grew with load)" in text and "tokens per draft held" in text
