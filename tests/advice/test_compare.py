"""``specobs compare``: verdicts that do not cry wolf.

Null pairs (two samples of one generative process) must be called a change at most 5% of
the time, near an acceptance length of 1 too; a configuration change is named first and is
never a regression on acceptance alone; with timing, throughput at matched batch sizes decides.
"""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
from support.helpers import run_cli
from support.paths import ROOT

from specobs import schema
from specobs.advice.compare import Z95, compare, compare_throughput
from specobs.analysis.intervals import t95 as t_quantile_975
from specobs.ingest import load
from specobs.render.sentences import verdict

DATA = ROOT / "examples" / "data"
SWEEP = DATA / "vllm-cpu-sweep"
PAIRS = 400
#: A 5% false-positive rate, plus two binomial standard errors of its estimate over PAIRS.
ALLOWED = 0.05 + 2 * math.sqrt(0.05 * 0.95 / PAIRS)
NO_POSITIONS = pl.lit(None, pl.List(pl.Int64)).alias("num_accepted_tokens_per_pos")


def accepted_lengths(rng: np.random.Generator, shape: tuple[int, ...], beta: float, k: int) -> np.ndarray:
    """Accepted tokens per draft: position i accepted with probability beta given all before it."""
    passed = rng.random((*shape, k)) < beta
    return np.where(passed.all(-1), k, np.argmin(passed, -1))


def log_windows(rng: np.random.Generator, windows: int, drafts: int, beta: float, k: int = 3) -> pl.DataFrame:
    """Interval windows (as a log or a scrape gives them) with per-position counts, no timing."""
    lengths = accepted_lengths(rng, (windows, drafts), beta, k)
    rows = [
        {
            "start_ts": 1.7e9 + 10.0 * j,
            "end_ts": 1.7e9 + 10.0 * (j + 1),
            "source": "s",
            "source_line": j + 1,
            "engine": 0,
            "model": "m",
            "method": "eagle3",
            "counters": "interval",
            "batch_size": 4,
            "num_spec_tokens": k,
            "num_drafts": drafts,
            "num_draft_tokens": drafts * k,
            "num_accepted_tokens": int(lengths[j].sum()),
            "num_accepted_tokens_per_pos": [int((lengths[j] > i).sum()) for i in range(k)],
        }
        for j in range(windows)
    ]
    return schema.conform(pl.DataFrame(rows), schema.WINDOWS)


def timed_steps(
    rng: np.random.Generator, *, rounds: int = 3, steps: int = 30, batches: tuple[int, ...] = (1, 4, 16),
    beta: float = 0.6, k: int = 3, slower: float = 1.0, round_noise: float = 0.1, method: str = "eagle3",
) -> pl.DataFrame:  # fmt: skip
    """Captured steps: rounds of one run per batch size, each run ±``round_noise`` in speed
    (the round-to-round noise measured inside one engine), each step ±5%, a pause between rounds."""
    parts, ts = [], 1.7e9
    for _ in range(rounds):
        for batch in batches:
            lengths = accepted_lengths(rng, (steps, batch), beta, k)
            effect = rng.lognormal(0.0, round_noise) * slower
            seconds = (0.01 + 0.0005 * batch * (1 + k)) * effect * rng.lognormal(0.0, 0.05, steps)
            ends = ts + np.cumsum(seconds)
            parts.append(
                pl.DataFrame(
                    {
                        "start_ts": ends - seconds,
                        "end_ts": ends,
                        "batch_size": batch,
                        "num_drafts": batch,
                        "num_accepted_tokens": lengths.sum(1),
                        "num_accepted_tokens_per_pos": np.stack([(lengths > i).sum(1) for i in range(k)], 1).tolist(),
                        "num_generated_tokens": batch + lengths.sum(1),
                        "step_seconds": seconds,
                    }
                )
            )
            ts = float(ends[-1]) + 0.2
        ts += 2.0
    frame = pl.concat(parts).with_columns(
        source=pl.lit("s"), source_line=pl.int_range(1, pl.len() + 1), engine=pl.lit(0), model=pl.lit("m"),
        method=pl.lit(method), counters=pl.lit("step"), num_spec_tokens=pl.lit(k),
        num_draft_tokens=pl.col("batch_size") * k, num_scheduled_tokens=pl.col("batch_size") * (1 + k),
        num_timed_steps=pl.lit(1),
    )  # fmt: skip
    return schema.conform(frame, schema.WINDOWS)


def null_pair(rng: np.random.Generator, scenario: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Two samples of one process at acceptance length ≈ 1.02–1.05."""
    beta = rng.uniform(0.02, 0.05)
    if scenario == 0:  # per-position counts known: the per-draft spread is exact
        windows, drafts = int(rng.integers(3, 16)), int(rng.integers(5, 60))
        return log_windows(rng, windows, drafts, beta), log_windows(rng, windows, drafts, beta)
    if scenario == 1:  # none (a source without them): only the between-window error, from ten windows on
        windows, drafts = int(rng.integers(10, 31)), int(rng.integers(5, 30))
        return tuple(log_windows(rng, windows, drafts, beta).with_columns(NO_POSITIONS) for _ in range(2))
    # A long baseline against a short run after the change: the short side's interval is clipped at 1.
    return log_windows(rng, 20, 500, beta), log_windows(rng, int(rng.integers(3, 6)), int(rng.integers(10, 40)), beta)


@pytest.mark.slow
def test_null_pairs_near_one_are_called_a_change_at_most_five_percent_of_the_time():
    rng = np.random.default_rng(20261201)
    called, clipped, called_before = 0, 0, 0
    for i in range(PAIRS):
        result = compare(*null_pair(rng, i % 3))
        assert result.kind in ("unchanged", "regression", "improvement")
        called += result.kind != "unchanged"
        sides = (result.a, result.b)
        assert result.acceptance.standard_error >= math.hypot(*(s.mean_acceptance_length_se for s in sides))
        # What the standard error read back off the clipped intervals would have said.
        clipped += sum(s.mean_acceptance_length_low == 1.0 for s in sides)
        read_back = math.hypot(
            *((s.mean_acceptance_length_high - s.mean_acceptance_length_low) / (2 * Z95) for s in sides)
        )
        called_before += abs(result.acceptance.difference) > Z95 * read_back
    assert clipped >= PAIRS / 4  # of the 2 × PAIRS sides: the regime the bug lived in
    assert called / PAIRS <= ALLOWED, f"false-positive rate {called / PAIRS:.3f}"
    assert called_before / PAIRS > ALLOWED  # the test would have caught the old verdicts


def test_a_real_acceptance_drop_near_one_is_detected():
    rng = np.random.default_rng(7)
    result = compare(log_windows(rng, 20, 200, 0.08), log_windows(rng, 20, 200, 0.03))
    assert result.kind == "regression"
    assert verdict(result).startswith("acceptance length fell")
    assert result.acceptance.z < -Z95 and result.configuration.changed is False
    rose = compare(log_windows(rng, 20, 200, 0.03), log_windows(rng, 20, 200, 0.08))
    assert rose.kind == "improvement"


@pytest.mark.slow
def test_null_pairs_with_timing_keep_the_throughput_false_positive_rate():
    rng = np.random.default_rng(11)
    pairs = 150
    called = 0
    for _ in range(pairs):
        throughput = compare_throughput(timed_steps(rng), timed_steps(rng))  # what decides the kind
        assert throughput is not None and throughput.direction is not None
        called += throughput.direction != "unchanged"
    assert called / pairs <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / pairs)


def test_throughput_decides_and_acceptance_explains():
    rng = np.random.default_rng(3)
    a, slow = timed_steps(rng), timed_steps(rng, slower=1.4)
    result = compare(a, slow)
    tp = result.throughput
    assert result.kind == "regression" and tp.direction == "fell" and tp.high < 1
    assert verdict(result).startswith("Throughput fell")
    assert "Acceptance length" in verdict(result) and "steps took" in verdict(result)
    assert {b.batch_bucket for b in tp.buckets} == {"1", "4-7", "16-31"}
    assert all(b.tested and b.runs_a == b.runs_b == 3 for b in tp.buckets)
    # Steps-weighted geometric mean of the per-bucket ratios.
    weights = [b.steps_a + b.steps_b for b in tp.buckets]
    logs = [math.log(b.ratio) for b in tp.buckets]
    assert tp.ratio == pytest.approx(math.exp(np.average(logs, weights=weights)))
    # Higher acceptance does not make an improvement when tokens/s fell.
    better_but_slower = compare(a, timed_steps(rng, beta=0.7, slower=1.6))
    assert better_but_slower.acceptance.direction == "rose"
    assert better_but_slower.kind == "regression"
    # A single run per bucket has no spread to test against: acceptance decides, throughput is named.
    one = compare(timed_steps(rng, rounds=1), timed_steps(rng, rounds=1, slower=1.4))
    assert one.throughput.direction is None and one.kind == "unchanged"
    assert "one run per side" in verdict(one)


def test_per_bucket_throughput_is_the_reports():
    rng = np.random.default_rng(5)
    a, b = timed_steps(rng), timed_steps(rng)
    from specobs.advice.report_builder import analyze
    from specobs.ingest import Ingested

    expected = [
        (t.batch_bucket, t.generated_tokens_per_second)
        for t in analyze(Ingested(a.lazy()), with_recommendation=False).timing
    ]
    got = [(x.batch_bucket, x.tokens_per_second_a) for x in compare(a, b).throughput.buckets]
    # The same sums, added in the order polars' threads met them: equal to the last few bits.
    assert len(got) == 3 and [g[0] for g in got] == [e[0] for e in expected]
    assert [g[1] for g in got] == pytest.approx([e[1] for e in expected], rel=1e-12)


def test_configuration_change_is_named_first_and_is_not_a_regression():
    a = load([str(DATA / "vllm-cpu-ngram-k3.log")]).windows
    b = load([str(DATA / "vllm-cpu-draft-k3.log")]).windows
    result = compare(a, b)
    assert verdict(result).startswith("A and B differ in configuration: method ngram → draft_model.")
    assert result.kind == "configuration_changed"
    assert result.acceptance.direction == "fell"  # acceptance did fall: but across methods
    assert result.throughput is None  # vLLM's log line carries no step timing
    assert result.configuration.to_dict()["differences"] == [{"field": "method", "a": ["ngram"], "b": ["draft_model"]}]


def test_sweep_k3_against_k6_is_a_configuration_change_decided_by_throughput():
    windows = load([str(SWEEP)]).windows.collect().filter(pl.col("method") == "ngram")
    k3, k6 = (windows.filter(pl.col("num_spec_tokens") == k) for k in (3, 6))
    result = compare(k3, k6)
    assert verdict(result).startswith("A and B differ in configuration: k 3 → 6.")
    assert result.acceptance.direction == "rose"  # more tokens per step ...
    tp = result.throughput
    assert tp.ratio < 1  # ... but fewer tokens per second
    assert result.kind != "improvement"
    assert result.kind == ("regression" if tp.direction == "fell" else "configuration_changed")
    assert all(b.tested for b in tp.buckets)


def test_schedule_difference_is_a_configuration_change():
    rng = np.random.default_rng(1)
    small = timed_steps(rng, batches=(1,), k=2)
    large = timed_steps(rng, batches=(16,), k=4)
    a = pl.concat([small, large.with_columns(pl.col("start_ts", "end_ts") + 100)])
    b_small = timed_steps(rng, batches=(1,), k=4)
    b_large = timed_steps(rng, batches=(16,), k=2)
    b = pl.concat([b_small, b_large.with_columns(pl.col("start_ts", "end_ts") + 100)])
    result = compare(a, b)
    fields = [d.field for d in result.configuration.differences]
    assert fields == ["schedule"]
    assert verdict(result).startswith("A and B differ in configuration: schedule 1: 2, 16-31: 4 → 1: 4, 16-31: 2.")


@pytest.mark.slow
def test_cli_json_contract_and_exit_codes(tmp_path):
    rng = np.random.default_rng(2)
    for name, frame in (("a", timed_steps(rng)), ("b", timed_steps(rng, slower=1.4))):
        (tmp_path / name).mkdir()
        steps = schema.conform(frame.with_columns(ts=pl.col("end_ts")), schema.STEPS)  # as a capture writes them
        steps.write_parquet(tmp_path / name / "steps.parquet")
    result = run_cli("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--format", "json")
    assert result.returncode == 3, result.stderr.decode()
    data = json.loads(result.stdout)
    assert {"verdict", "kind", "a", "b", "positions", "timing"} <= set(data)  # the existing contract
    assert {"configuration", "throughput", "acceptance"} <= set(data)
    assert {"mean_acceptance_length", "mean_acceptance_length_low", "mean_acceptance_length_high",
            "draft_acceptance_rate", "num_drafts", "num_accepted_tokens"} <= set(data["a"])  # fmt: skip
    assert data["kind"] == "regression" and data["throughput"]["direction"] == "fell"
    assert set(data["configuration"]) == {"a", "b", "differences", "environment", "changed"}
    # A configuration change without timing: compared, exit 0.
    logs = run_cli("compare", str(DATA / "vllm-cpu-ngram-k3.log"), str(DATA / "vllm-cpu-draft-k3.log"))
    assert logs.returncode == 0, logs.stderr.decode()
    out = logs.stdout.decode()
    assert out.startswith("A and B differ in configuration") and "method *" in out
    assert "Exit status" in run_cli("compare", "--help").stdout.decode()


def test_t_quantiles():
    exact = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 10: 2.2281, 30: 2.0423}
    for df, value in exact.items():
        assert t_quantile_975(df) == pytest.approx(value, abs=2e-3)
    assert t_quantile_975(4.9) == t_quantile_975(4)  # rounded down: never narrower than it should be
    assert t_quantile_975(math.inf) == pytest.approx(Z95)
