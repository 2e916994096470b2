"""The bundled sweep made by ``specobs sweep`` itself (examples/data/vllm-cpu-serve-sweep; no vLLM needed).

``specobs report`` on it runs, and what it says is what its files say, computed here by hand with
plain json: the throughput ratio of each configuration (ngram k=3, and the same with a schedule
that stops drafting at 3 or more requests in a step) against plain per concurrency, and where
it crosses 1. The folder is what the sweep wrote: the servers interleaved, every result labelled,
the schedule drafting only at low concurrency, no machine path, under 3 MB.
"""

from __future__ import annotations

import gzip
import json

import pytest
from support.bench_files import expected_rows
from support.helpers import report_json, run_cli
from support.paths import DATA, ROOT
from support.sweep_files import crossing_by_hand, pooled_acceptance, ratios_by_hand, rows_at

BUNDLE = DATA / "vllm-cpu-serve-sweep"
CONFIGS = ("ngram", "ngram-schedule")
LEVELS = (1, 2, 4, 8)


@pytest.fixture(scope="module")
def doc():
    import os

    before = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"  # vLLM dates a result in the recording machine's local time: UTC there
    try:
        return report_json(str(BUNDLE / "results"), str(BUNDLE / "capture"))
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before


def test_the_ratios_are_the_files_geometric_means(doc):
    by_hand = ratios_by_hand(BUNDLE)
    got = {(r["config"], int(r["level"])): r for r in doc["serving"]["ratios"]}
    assert set(got) == set(by_hand) == {(c, level) for c in CONFIGS for level in LEVELS}
    for key, ratio in by_hand.items():
        assert got[key]["throughput_ratio"] == pytest.approx(ratio, rel=1e-5), key
        assert got[key]["runs"] == got[key]["plain_runs"] == 2
    # measured: ngram 1.13, 1.02, 1.11, 1.59 and the schedule 1.34, 1.38, 1.05, 1.42 at 1, 2, 4, 8
    assert by_hand[("ngram", 8)] == pytest.approx(1.5949, abs=1e-4)
    assert by_hand[("ngram-schedule", 2)] == pytest.approx(1.3843, abs=1e-4)


def test_the_crossover_is_where_the_files_cross_one(doc):
    by_hand = ratios_by_hand(BUNDLE)
    crossovers = {c["config"]: c for c in doc["serving"]["crossovers"] if c["metric"] == "output_throughput"}
    assert set(crossovers) == set(CONFIGS)
    for config in CONFIGS:
        how, around = crossing_by_hand([(level, by_hand[(config, level)]) for level in LEVELS])
        assert crossovers[config]["how"] == how == "never"  # above plain at every level measured
        assert around is None and crossovers[config]["level"] is None


def test_the_capture_agrees_with_the_benchmark_where_k_is_fixed(doc):
    rows = expected_rows(BUNDLE)
    levels = {(lv["config"], int(lv["level"])): lv for lv in doc["serving"]["levels"]}
    for level in LEVELS:
        counted = pooled_acceptance(rows_at(rows, "ngram", level))
        assert levels[("ngram", level)]["captured_acceptance_length"] == pytest.approx(counted, abs=0.1)
        assert levels[("plain", level)]["captured_batch_size"] <= level


def test_the_schedule_drafts_only_at_low_concurrency():
    rows = expected_rows(BUNDLE)

    def drafts(config: str, level: int) -> int:
        return sum((r["spec_decode"] or {"num_drafts": 0})["num_drafts"] for r in rows_at(rows, config, level))

    for level in (1, 2):  # batches of 1–2: the schedule's k=3, the same drafts as plain ngram
        assert drafts("ngram-schedule", level) == drafts("ngram", level) > 0
    for level in (4, 8):  # k=0 from 3 requests in a step on: drafts only while the batch drains
        assert drafts("ngram-schedule", level) < drafts("ngram", level) / 4


def test_the_folder_is_what_the_sweep_wrote():
    sweep = json.loads((BUNDLE / "sweep.json").read_text())
    assert sweep["order"] == [[1, "plain"], [1, "ngram"], [1, "ngram-schedule"],
                              [2, "ngram-schedule"], [2, "ngram"], [2, "plain"]]  # fmt: skip
    assert sweep["plan"]["levels"] == list(LEVELS) and sweep["plan"]["repeats"] == 2
    rows = expected_rows(BUNDLE)
    assert len(rows) == 3 * len(LEVELS) * 2
    for r in rows:
        assert r["completed"] == r["num_prompts"] == 32 and r["label"] == r["config"]
        assert r["k"] == (0 if r["config"] == "plain" else 3)
    total = sum(p.stat().st_size for p in BUNDLE.rglob("*") if p.is_file())
    assert total < 3 * 1024 * 1024
    for path in [*(BUNDLE / "logs").glob("*.gz"), *(BUNDLE / "capture").glob("*.gz")]:
        text = gzip.decompress(path.read_bytes()).decode(errors="replace")
        assert str(ROOT) not in text and "/tmp/tmp" not in text and "/root/" not in text, path.name
    for path in (BUNDLE / "sweep.json", BUNDLE / "report.md"):
        assert "/tmp/" not in path.read_text() and str(ROOT) not in path.read_text()


def test_report_on_the_whole_folder_runs():
    done = run_cli("report", str(BUNDLE), "--brief")
    assert done.returncode == 0, done.stderr.decode()
    assert "ngram-schedule" in done.stdout.decode()


def test_the_k0_tier_is_the_k0_tax_and_counted_by_hand(doc):
    """At concurrency 4 and 8 the schedule's k=0 tier leaves under 10% of steps drafting: the report
    names those levels as the K=0 tax, with the shares counted here from the event files."""
    import calendar
    import time

    import polars as pl

    import specobs

    steps = specobs.load(str(BUNDLE / "capture")).windows.filter(pl.col("counters") == "step").collect()
    shares = {}
    for level in LEVELS:
        inside = []
        for name in sorted((BUNDLE / "results").glob(f"ngram-schedule-c{level}-r*.json")):
            raw = json.loads(name.read_text())
            end = calendar.timegm(time.strptime(raw["date"], "%Y%m%d-%H%M%S"))  # the date is UTC
            window = pl.col("end_ts").is_between(end - raw["duration"] - 1, end + 1)
            inside.append(steps.filter(window & pl.col("method").is_not_null()))
        both = pl.concat(inside)
        shares[level] = (both["num_drafts"] > 0).sum() / both.height
    ratios = {int(r["level"]): r for r in doc["serving"]["ratios"] if r["config"] == "ngram-schedule"}
    for level in LEVELS:
        assert ratios[level]["drafting_share"] == pytest.approx(shares[level], abs=1e-6)
    assert shares[1] > 0.2 and shares[2] > 0.2 and shares[4] < 0.1 and shares[8] < 0.1
    text = " ".join(doc["findings"])
    assert "concurrency 4 (drafting in 4% of steps)" in text and "concurrency 8 (drafting in 8% of steps)" in text
    (advice,) = [a for a in doc["load_advice"] if a["config"] == "ngram"]
    assert [(t["config"], t["level"]) for t in advice["k0_tax"]] == [("ngram-schedule", 4.0), ("ngram-schedule", 8.0)]


def test_the_sweeps_own_files_are_recognised_and_not_read(tmp_path):
    import specobs
    from specobs.loops.sweep import write_sharegpt

    ingested = specobs.load(str(BUNDLE))
    formats = {s.name.rsplit("/", 1)[-1]: s.format for s in ingested.sources}
    assert formats["sweep.json"] == "specobs-sweep-files"
    assert formats["ngram-r1.bench.log.gz"] == "specobs-sweep-files"
    # Only the recording's own Markdown report is not an input; every result is read once.
    assert [s.source.rsplit("/", 1)[-1] for s in ingested.skipped] == ["report.md"]
    assert ingested.bench.height == len(list((BUNDLE / "results").glob("*.json"))) == 24
    prompts = write_sharegpt(("a prompt", "another"), tmp_path / "prompts.sharegpt.json")
    (source,) = specobs.load(str(prompts)).sources
    assert source.format == "specobs-sweep-files"
