"""Where to draft under load: the measured crossover turned into vLLM's schedule by batch size,
by hand — through the capture's mean batch per level, or the concurrency as an upper bound —
with the drafter's settings from the run metadata, and the verdicts where no schedule follows."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import polars as pl
import pytest
from support.bench_files import bench_result
from support.helpers import run_cli

import specobs
from specobs.advice.load import advise
from specobs.analysis.under_load import serving
from specobs.records import LoadRecommendation, RunMetadata


def result(config: str, level: int, throughput: float, n: int, *, spec: bool, **extra) -> dict:
    """Run ``n`` of a configuration at a level (its own date and duration: not a repeat of another)."""
    named = {"method": "ngram", "k": "3"} if spec else {}
    return bench_result(config, level, throughput, spec=spec, date=f"20261203-1701{level:02d}", duration=2.0 + n,
                        mean_tpot_ms=1000 / throughput * level, **named | extra)  # fmt: skip


#: ngram over plain: 1.4× at concurrency 1, 1.2× at 2, 0.8× at 8 — it stops paying between 2 and 8.
RUNS = {1: ((100, 101), (140, 142)), 2: ((190, 192), (228, 231)), 8: ((600, 606), (480, 486))}
#: The capture's mean batch per level (the engine never fills 8 slots).
BATCH = {1: 1.0, 2: 1.8, 8: 5.0}


def write_runs(folder: Path) -> pl.DataFrame:
    folder.mkdir(parents=True, exist_ok=True)
    for level, (plain, spec) in RUNS.items():
        for n, (a, b) in enumerate(zip(plain, spec, strict=True)):
            (folder / f"plain-c{level}-r{n}.json").write_text(json.dumps(result("plain", level, a, n, spec=False)))
            (folder / f"ngram-c{level}-r{n}.json").write_text(json.dumps(result("ngram", level, b, n, spec=True)))
    return specobs.load(str(folder)).bench


def captured(bench: pl.DataFrame) -> pl.DataFrame:
    """Capture sums as ``analysis.serving.capture_sums`` gives them: 100 steps per result at the
    level's batch, the ngram engine's run ids ``ngram-rN``."""
    rows = []
    for row in bench.iter_rows(named=True):
        level = row["max_concurrency"]
        rows.append({
            "source": row["source"], "source_line": row["source_line"], "steps": 100,
            "batch": round(100 * BATCH[level]), "drafts": 80, "accepted": 120, "step_seconds": 0.5, "timed_steps": 100,
            "drafting_steps": 80, "run_ids": [f"{row['config']}-r{row['duration'] - 2:.0f}"],
        })  # fmt: skip
    return pl.DataFrame(rows)


def crossing(lo: float, hi: float, r_lo: float, r_hi: float, y_lo: float, y_hi: float) -> float:
    """Where a log–log line through (lo, r_lo), (hi, r_hi) meets ratio 1, as y (log–log too)."""
    t = math.log(r_lo) / (math.log(r_lo) - math.log(r_hi))
    return math.exp(math.log(y_lo) + t * (math.log(y_hi) - math.log(y_lo)))


def test_the_schedule_drafts_up_to_the_batch_reached_at_the_crossover(tmp_path):
    bench = write_runs(tmp_path / "in")
    ran = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 5}
    metadata = [
        RunMetadata(run_id=f"ngram-r{n}", method="ngram", num_speculative_tokens=3, speculative_config=ran,
                    max_num_seqs=16) for n in range(2)
    ]  # fmt: skip
    got = serving(bench, captured(bench))
    assert got is not None
    (advice,) = advise(got, bench, metadata)
    by_level = {r.level: r for r in got.ratios}
    r2, r8 = by_level[2.0].throughput_ratio, by_level[8.0].throughput_ratio
    assert advice.verdict == "switch_off_above"
    assert advice.stops_paying_at == pytest.approx(crossing(2, 8, r2, r8, 2, 8))
    # The point estimate's batch, on the batches' logs with the same t.
    assert advice.crossover_batch == math.floor(crossing(2, 8, r2, r8, BATCH[2], BATCH[8]))
    # It drafts only up to where the gain is still shown: where the ratio's lower bound crosses 1.
    lows = [(level, by_level[level].throughput_low) for level in (1.0, 2.0, 8.0)]
    (lo, l_lo), (hi, l_hi) = next((a, b) for a, b in itertools.pairwise(lows) if b[1] <= 1 < a[1])
    assert advice.stops_paying_low == pytest.approx(crossing(lo, hi, l_lo, l_hi, lo, hi))
    batch = math.floor(crossing(lo, hi, l_lo, l_hi, BATCH[int(lo)], BATCH[int(hi)]))
    assert advice.batch_from == "capture" and advice.draft_up_to == batch <= advice.crossover_batch
    assert advice.schedule == ((1, batch, 3), (batch + 1, 16, 0))
    config = json.loads(advice.speculative_config or "{}")
    assert config == ran | {"num_speculative_tokens_per_batch_size": [list(row) for row in advice.schedule]}
    assert advice.missing == () and advice.schedule_measured is False


def test_without_the_capture_the_concurrency_bounds_the_batch_and_settings_are_missing(tmp_path):
    bench = write_runs(tmp_path / "in")
    got = serving(bench)
    assert got is not None
    (advice,) = advise(got, bench)
    assert advice.batch_from == "concurrency" and advice.draft_up_to == math.floor(advice.stops_paying_low or 0)
    assert advice.crossover_batch == math.floor(advice.stops_paying_at or 0)
    assert advice.missing == ("prompt_lookup_min", "prompt_lookup_max")  # nothing shows what ngram ran with
    rec = specobs.recommend(str(tmp_path / "in"))
    assert isinstance(rec, LoadRecommendation) and rec.under_load == (advice,)
    done = run_cli("recommend", str(tmp_path / "in"))
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    assert "switch off above" in out and "an upper bound" in out and "incomplete: add prompt_lookup_min" in out
    assert "K=0 tax is not measured here" in out


def test_verdicts_where_no_schedule_follows(tmp_path):
    cases = {
        "speculate": {1: ((100, 101), (140, 142)), 8: ((600, 606), (700, 690))},  # pays everywhere
        "plain": {1: ((100, 101), (80, 81)), 8: ((600, 606), (500, 505))},  # never pays
        "not_shown": {1: ((100, 130), (120, 140)), 8: ((600, 700), (640, 710))},  # above, within noise
    }
    for verdict, runs in cases.items():
        folder = tmp_path / verdict
        folder.mkdir()
        for level, (plain, spec) in runs.items():
            for n, (a, b) in enumerate(zip(plain, spec, strict=True)):
                (folder / f"p{level}{n}.json").write_text(json.dumps(result("plain", level, a, n, spec=False)))
                (folder / f"s{level}{n}.json").write_text(json.dumps(result("ngram", level, b, n, spec=True)))
        bench = specobs.load(str(folder)).bench
        got = serving(bench)
        assert got is not None
        (advice,) = advise(got, bench)
        assert advice.verdict == verdict, verdict
        assert advice.schedule is None and advice.draft_up_to is None
        assert (advice.speculative_config is not None) is (verdict == "speculate")
        assert advice.losses == ((1.0, 8.0) if verdict == "plain" else ())


def test_a_server_that_did_not_draft_carries_its_measured_tax(tmp_path):
    bench = write_runs(tmp_path / "in")
    extra = []
    for n, (tp, plain) in enumerate(((570, 600), (575, 606))):  # k=0 at concurrency 8: 0.95× plain
        del plain
        extra.append(result("ngram-sched", 8, tp, n, spec=True, spec_decode_num_drafts=0))
    for n, record in enumerate(extra):
        (tmp_path / "in" / f"sched-{n}.json").write_text(json.dumps(record))
    bench = specobs.load(str(tmp_path / "in")).bench
    got = serving(bench)
    assert got is not None
    advice = {a.config: a for a in advise(got, bench)}
    (tax,) = advice["ngram"].k0_tax
    assert (tax.config, tax.level, tax.drafting_share) == ("ngram-sched", 8.0, 0.0)
    assert tax.throughput_ratio == pytest.approx(math.sqrt(570 * 575) / math.sqrt(600 * 606))
