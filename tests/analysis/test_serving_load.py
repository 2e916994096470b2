"""Speculation under load beyond throughput: goodput under an SLO (vLLM's rule, recomputed here by
hand from the per-request lists), the TPOT crossover, latency percentile ratios, and the K=0 tax
where a speculative server did not draft."""

from __future__ import annotations

import math

import pytest
from support.bench_files import bench_result, write_json
from support.helpers import run_cli

import specobs
from specobs.analysis.under_load import parse_slo, serving
from specobs.errors import SpecobsError
from specobs.records import Slo
from specobs.render.sentences import report_findings


def result(config: str, level: int, throughput: float, *, spec: bool, **extra) -> dict:
    return bench_result(config, level, throughput, spec=spec, **extra)


def vllm_good(ttfts, latencies, output_lens, errors, slo_ms: dict[str, float]) -> int:
    """vLLM 0.32's ``calculate_metrics`` goodput count, written out again: successful requests
    only; TPOT = (latency − ttft) / (output − 1), 0 for one token; good when every bound holds."""
    good = 0
    for ttft, latency, n, error in zip(ttfts, latencies, output_lens, errors, strict=True):
        if error:
            continue
        tpot = (latency - ttft) / (n - 1) if n > 1 else 0.0
        measured = {"ttft": ttft, "tpot": tpot, "e2el": latency}
        good += all(measured[k] <= v / 1000 for k, v in slo_ms.items())
    return good


# Four requests a run: (ttft s, latency s, output tokens, error).
PLAIN = [(0.05, 0.50, 51, ""), (0.30, 0.90, 51, ""), (0.05, 0.40, 1, ""), (0.10, 1.60, 51, "")]
SPEC = [(0.04, 0.30, 51, ""), (0.05, 0.52, 51, ""), (0.02, 0.20, 51, "boom"), (0.08, 0.45, 51, "")]


def detailed(requests) -> dict:
    ttfts, latencies, lens, errors = (list(x) for x in zip(*requests, strict=True))
    return {"ttfts": ttfts, "latencies": latencies, "output_lens": lens, "errors": errors}


def test_goodput_under_an_slo_is_vllms_count_per_second(tmp_path):
    slo_ms = {"tpot": 10.0, "ttft": 200.0}
    for n, scale in enumerate((1.0, 1.1)):
        plain = [(t * scale, lat * scale, k, e) for t, lat, k, e in PLAIN]
        spec = [(t * scale, lat * scale, k, e) for t, lat, k, e in SPEC]
        run = {"date": f"20261203-17010{n}"}  # two runs (the same date and numbers would be one result read twice)
        write_json(tmp_path / f"plain-r{n}.json", result("plain", 4, 100.0, spec=False, **run, **detailed(plain)))
        write_json(
            tmp_path / f"ngram-r{n}.json", result("ngram", 4, 120.0, spec=True, failed=1, **run, **detailed(spec))
        )
    report = specobs.analyze(specobs.load(str(tmp_path)), slo="tpot:10ms,ttft:0.2s")
    got = report.serving
    assert got is not None and got.slo == Slo(ttft_s=0.2, tpot_s=0.01)
    levels = {lv.config: lv for lv in got.levels}
    expected = {}
    for config, requests in (("plain", PLAIN), ("ngram", SPEC)):
        goods = [
            vllm_good(*zip(*[(t * s, lat * s, k, e) for t, lat, k, e in requests], strict=True), slo_ms)
            for s in (1.0, 1.1)
        ]
        expected[config] = goods
        assert levels[config].goodput == pytest.approx(sum(g / 2.0 for g in goods) / 2)
        assert levels[config].slo_attained == pytest.approx(sum(goods) / 8)
    # By hand: plain meets both bounds with requests 1 and 3 (one token: TPOT 0) in each run; ngram
    # with 1, 2 and 4 (3 failed) at scale 1, and at 1.1 request 2's TPOT is 11.1 ms, so 1 and 4.
    assert expected == {"plain": [2, 2], "ngram": [3, 2]}
    (ratio,) = got.ratios
    by_hand = math.sqrt((3 / 2) * (2 / 2)) / math.sqrt((2 / 2) * (2 / 2))
    assert ratio.goodput_ratio == pytest.approx(by_hand)
    assert ratio.goodput_low is not None and ratio.goodput_low < by_hand < ratio.goodput_high
    text = " ".join(f.text for f in report_findings(report) if f.kind == "serving")
    assert "Under the SLO (ttft ≤ 200 ms, tpot ≤ 10 ms)" in text and "plain: concurrency 4 1.00/s (50%)" in text


def test_an_slo_without_the_data_it_needs_says_so(tmp_path):
    # Without --save-detailed a result keeps only its latencies: E2EL can be judged, TTFT cannot.
    for config, spec in (("plain", False), ("ngram", True)):
        write_json(tmp_path / f"{config}.json", result(config, 1, 100.0, spec=spec, latencies=[0.2, 0.3, 0.5, 0.9]))
    ingested = specobs.load(str(tmp_path))
    e2el = serving(ingested.bench, slo=parse_slo("e2el:400"))
    assert e2el is not None and [lv.goodput for lv in e2el.levels] == [1.0, 1.0]  # 2 of 4 within 400 ms, in 2 s
    report = specobs.analyze(ingested, slo="ttft:1s")
    assert report.serving is not None and all(lv.goodput is None for lv in report.serving.levels)
    text = " ".join(f.text for f in report_findings(report) if f.kind == "serving")
    assert "could not be computed" in text and "--save-detailed" in text
    # A failed request without the errors list: which ones failed is unknown, so no goodput.
    write_json(tmp_path / "plain.json", result("plain", 1, 100.0, spec=False, failed=1, latencies=[0.2, 0.3, 0.5, 0.0]))
    again = serving(specobs.load(str(tmp_path)).bench, slo=parse_slo("e2el:400"))
    assert again is not None and {lv.config: lv.goodput for lv in again.levels} == {"ngram": 1.0, "plain": None}


def test_the_tpot_crossover_is_where_its_ratio_rises_through_one(tmp_path):
    # Speculation halves TPOT at concurrency 1, is 0.8× at 2 and 1.25× at 8: it stops paying in
    # TPOT between 2 and 8, on log(level) and log(ratio); one run a side, so no interval.
    tpots = {1: (10.0, 5.0), 2: (10.0, 8.0), 8: (10.0, 12.5)}
    for level, (plain, spec) in tpots.items():
        write_json(tmp_path / f"plain-c{level}.json", result("plain", level, 100.0, spec=False, mean_tpot_ms=plain))
        write_json(tmp_path / f"ngram-c{level}.json", result("ngram", level, 150.0, spec=True, mean_tpot_ms=spec))
    got = serving(specobs.load(str(tmp_path)).bench)
    assert got is not None
    tpot = next(c for c in got.crossovers if c.metric == "mean_tpot_ms")
    t = math.log(1 / 0.8) / (math.log(1 / 0.8) - math.log(1 / 1.25))
    assert tpot.how == "crossed" and tpot.level == pytest.approx(math.exp(math.log(2) + t * math.log(4)))
    assert tpot.repeated is False and tpot.low is None and tpot.high is None
    throughput = next(c for c in got.crossovers if c.metric == "output_throughput")
    assert throughput.how == "never"  # 1.5× at every level


def test_latency_percentiles_are_ratios_of_geometric_means(tmp_path):
    p99 = {"plain": (40.0, 44.0), "ngram": (30.0, 35.0)}
    for config, values in p99.items():
        for n, value in enumerate(values):
            extra = {"p99_tpot_ms": value, "median_itl_ms": 5.0 + n}
            write_json(tmp_path / f"{config}-r{n}.json", result(config, 4, 100.0, spec=config == "ngram", **extra))
    got = serving(specobs.load(str(tmp_path)).bench)
    assert got is not None
    measures = {m.measure: m for m in got.ratios[0].latency}
    assert set(measures) == {"p99_tpot_ms", "median_itl_ms"}  # only what both sides report
    assert measures["p99_tpot_ms"].ratio == pytest.approx(math.sqrt(30 * 35) / math.sqrt(40 * 44))
    assert measures["median_itl_ms"].ratio == pytest.approx(1.0)


def test_a_level_without_drafts_is_the_k0_tax(tmp_path):
    # A schedule with k=0 from batch 3: at concurrency 8 the server counted no drafts, and is
    # slower than plain beyond noise there.
    runs = {1: ((100, 102), (140, 138), 100), 8: ((400, 404), (360, 362), 0)}
    for level, (plain, spec, drafts) in runs.items():
        for n, (a, b) in enumerate(zip(plain, spec, strict=True)):
            write_json(tmp_path / f"plain-c{level}-r{n}.json", result("plain", level, a, spec=False))
            write_json(tmp_path / f"sched-c{level}-r{n}.json",
                  result("sched", level, b, spec=True, spec_decode_num_drafts=drafts))  # fmt: skip
    report = specobs.analyze(specobs.load(str(tmp_path)))
    assert report.serving is not None
    shares = {r.level: r.drafting_share for r in report.serving.ratios}
    assert shares == {1.0: None, 8.0: 0.0}  # no capture: only "none at all" is known, from the counters
    text = " ".join(f.text for f in report_findings(report) if f.kind == "serving")
    assert "the K=0 tax" in text and "concurrency 8 (drafting in 0% of steps)" in text
    assert "a tax beyond noise at concurrency 8" in text
    assert "stops paying near concurrency" in text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("tpot:50ms,ttft:1s", Slo(ttft_s=1.0, tpot_s=0.05)),
        ("TPOT=50", Slo(tpot_s=0.05)),
        ("e2el:2.5s", Slo(e2el_s=2.5)),
    ],
)
def test_slo_text(text, expected):
    assert parse_slo(text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [("", "no bound"), ("tpot", "is not MEASURE:VALUE"), ("itl:5", "unknown measure 'itl'"), ("tpot:0", "positive"),
     ("tpot:5,tpot:6", "given twice"), ("ttft:1h", "is not MEASURE:VALUE")],
)  # fmt: skip
def test_bad_slo_text_is_refused(text, why):
    with pytest.raises(SpecobsError, match=why):
        parse_slo(text)


def test_bad_slo_on_the_command_line_is_one_line(tmp_path):
    path = write_json(tmp_path / "r.json", result("plain", 1, 100.0, spec=False))
    done = run_cli("report", str(path), "--slo", "tpot:fast")
    err = done.stderr.decode()
    assert done.returncode == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "--slo: 'tpot:fast' is not MEASURE:VALUE" in err


@pytest.mark.parametrize(
    ("lists", "why"),
    [({"latencies": [0.1, -1.0]}, "latencies is not a list of non-negative numbers"),
     ({"ttfts": "fast"}, "ttfts is not a list"),
     ({"latencies": [0.1, 0.2], "ttfts": [0.01]}, "differ in length"),
     ({"latencies": [0.1], "errors": [3]}, "errors is not a list of texts")],
)  # fmt: skip
def test_bad_per_request_lists_skip_the_whole_result(tmp_path, lists, why):
    write_json(tmp_path / "bad.json", result("ngram", 1, 100.0, spec=True, **lists))
    write_json(tmp_path / "good.json", result("plain", 1, 100.0, spec=False, latencies=[0.1, 0.2]))
    ingested = specobs.load(str(tmp_path))
    assert ingested.bench["config"].to_list() == ["plain"]
    (skipped,) = ingested.skipped
    assert skipped.source.endswith("bad.json") and skipped.line == 1 and why in skipped.why


def test_compare_under_an_slo_gives_goodput_b_over_a(tmp_path):
    for side, scale in (("a", 1.0), ("b", 0.5)):  # B's requests take half as long: more meet the SLO
        for n in range(2):
            requests = [(t * scale * (1 + n / 10), lat * scale * (1 + n / 10), k, e) for t, lat, k, e in PLAIN]
            run = result("ngram", 4, 100.0, spec=True, date=f"20261203-17010{n}", **detailed(requests))
            write_json(tmp_path / side / f"ngram-r{n}.json", run)
    cmp = specobs.compare(str(tmp_path / "a"), str(tmp_path / "b"), slo="e2el:600ms")
    (ratio,) = cmp.serving
    # E2EL ≤ 600 ms: A meets it with 2 requests in each run (0.50, 0.40; then 0.55, 0.44), B with 3 in each.
    assert ratio.goodput_ratio == pytest.approx(1.5) and ratio.goodput_low == pytest.approx(1.5)


def test_the_report_tables_show_each_level_as_the_ratios_say(tmp_path):
    runs = {1: ((100, 102), (140, 138)), 8: ((400, 404), (360, 362))}
    for level, (plain, spec) in runs.items():
        for n, (a, b) in enumerate(zip(plain, spec, strict=True)):
            write_json(
                tmp_path / f"plain-c{level}-r{n}.json", result("plain", level, a, spec=False, date=f"2026120{n}-1")
            )
            write_json(
                tmp_path / f"ngram-c{level}-r{n}.json", result("ngram", level, b, spec=True, date=f"2026120{n}-1")
            )
    done = run_cli("report", str(tmp_path), "--format", "markdown")
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    report = specobs.analyze(specobs.load(str(tmp_path)))
    assert report.serving is not None
    for r in report.serving.ratios:
        row = (
            f"| ngram | plain | concurrency {r.level:.0f} | 2·2 | {r.throughput_ratio:.2f}× "
            f"[{r.throughput_low:.2f}–{r.throughput_high:.2f}] |"
        )
        assert row in out, row
    (advice,) = report.load_advice
    assert advice.verdict == "switch_off_above"
    assert f"| ngram | – | switch off above | {advice.stops_paying_at:.3g} [" in out  # no k in these results
