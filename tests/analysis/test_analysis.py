"""Acceptance analytics on windows whose right answers are known by construction."""

from __future__ import annotations

import itertools
import random

import polars as pl
import pytest
from support.paths import ROOT

from specobs import schema
from specobs.analysis import acceptance
from specobs.analysis.intervals import wilson
from specobs.analysis.timeseries import acceptance_over_time, change_points

SWEEP = ROOT / "examples" / "data" / "vllm-cpu-sweep"


def windows(rows: list[dict]) -> pl.DataFrame:
    base = {"source": "s", "engine": 0, "model": "m", "method": "eagle3", "counters": "interval"}
    return schema.conform(pl.DataFrame([{**base, **r} for r in rows]), schema.WINDOWS)


def draws(n: int, betas: list[float], seed: int = 0) -> list[int]:
    """Accepted length of n drafts whose position i is accepted with probability betas[i] given i-1 was."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        length = 0
        for beta in betas:
            if rng.random() >= beta:
                break
            length += 1
        out.append(length)
    return out


def window_from(lengths: list[int], k: int, **extra) -> dict:
    return {
        "num_drafts": len(lengths),
        "num_draft_tokens": len(lengths) * k,
        "num_accepted_tokens": sum(lengths),
        "num_accepted_tokens_per_pos": [sum(1 for x in lengths if x > i) for i in range(k)],
        **extra,
    }


def test_wilson_matches_reference_values():
    frame = pl.DataFrame({"x": [8, 0, 10], "n": [10, 10, 10]})
    low, high = wilson(pl.col("x"), pl.col("n"))
    out = frame.select(low=low, high=high)
    # Reference: Wilson 95% interval for 8/10 is [0.4902, 0.9433]; 0/10 -> [0, 0.2775].
    assert out["low"][0] == pytest.approx(0.4902, abs=1e-4) and out["high"][0] == pytest.approx(0.9433, abs=1e-4)
    assert out["low"][1] == 0.0 and out["high"][1] == pytest.approx(0.2775, abs=1e-4)
    assert out["high"][2] == pytest.approx(1.0)


def test_summary_by_hand():
    w = windows(
        [
            {
                "num_drafts": 10,
                "num_draft_tokens": 30,
                "num_accepted_tokens": 18,
                "num_accepted_tokens_per_pos": [8, 6, 4],
            },
            {
                "num_drafts": 30,
                "num_draft_tokens": 90,
                "num_accepted_tokens": 42,
                "num_accepted_tokens_per_pos": [20, 14, 8],
            },
        ]
    )
    row = acceptance.summarize(w).row(0, named=True)
    assert row["num_drafts"] == 40 and row["num_accepted_tokens"] == 60 and row["num_draft_tokens"] == 120
    assert row["mean_acceptance_length"] == pytest.approx(1 + 60 / 40)
    assert row["draft_acceptance_rate"] == pytest.approx(60 / 120)
    assert row["acceptance_rate_per_position"] == pytest.approx([28 / 40, 20 / 40, 12 / 40])
    assert row["conditional_acceptance_rate_per_position"] == pytest.approx([28 / 40, 20 / 28, 12 / 20])
    assert row["acceptance_rate_per_position_low"][0] < 0.7 < row["acceptance_rate_per_position_high"][0]
    low, high = row["mean_acceptance_length_low"], row["mean_acceptance_length_high"]
    assert low < 2.5 < high
    # Per-draft spread: E[L] = 1.5, E[L^2] = 1*0.7 + 3*0.5 + 5*0.3 = 3.7 -> var 1.45, se = sqrt(1.45/40).
    assert (high - low) / 2 == pytest.approx(1.959964 * (1.45 / 40) ** 0.5, rel=1e-6)


def test_rates_average_by_drafts_never_by_window():
    w = windows(
        [
            {
                "num_drafts": 1,
                "num_draft_tokens": 3,
                "num_accepted_tokens": 3,
                "num_accepted_tokens_per_pos": [1, 1, 1],
            },
            {
                "num_drafts": 99,
                "num_draft_tokens": 297,
                "num_accepted_tokens": 0,
                "num_accepted_tokens_per_pos": [0, 0, 0],
            },
        ]
    )
    row = acceptance.summarize(w).row(0, named=True)
    assert row["mean_acceptance_length"] == pytest.approx(1.03)  # not the mean of 4.0 and 1.0
    assert row["acceptance_rate_per_position"][0] == pytest.approx(0.01)


def test_unknown_counts_do_not_dilute_known_ones():
    w = windows(
        [
            {
                "num_drafts": 10,
                "num_draft_tokens": 30,
                "num_accepted_tokens": 15,
                "num_accepted_tokens_per_pos": [7, 5, 3],
            },
            # An older log line: accepted and drafted known, drafts and per-position unknown.
            {"num_drafts": None, "num_draft_tokens": 100, "num_accepted_tokens": 90},
        ]
    )
    row = acceptance.summarize(w).row(0, named=True)
    assert row["mean_acceptance_length"] == pytest.approx(1 + 15 / 10)
    assert row["acceptance_rate_per_position"] == pytest.approx([0.7, 0.5, 0.3])
    assert row["draft_acceptance_rate"] == pytest.approx(105 / 130)
    assert row["num_drafts"] == 10


def test_unknown_is_null_not_zero():
    w = windows([{"num_draft_tokens": 66, "num_accepted_tokens": 66}])
    row = acceptance.summarize(w).row(0, named=True)
    assert row["num_drafts"] is None and row["mean_acceptance_length"] is None
    assert row["acceptance_rate_per_position"] is None and row["draft_acceptance_rate"] == 1.0


def test_iid_alpha_and_flat_trend_on_iid_data():
    k = 4
    lengths = draws(20000, [0.8] * k, seed=1)
    row = acceptance.summarize(windows([window_from(lengths, k)])).row(0, named=True)
    assert row["iid_alpha"] == pytest.approx(0.8, abs=0.01)
    assert row["iid_max_gap"] < 0.02
    assert row["conditional_trend"] == "flat"


@pytest.mark.parametrize(("betas", "trend"), [([0.9, 0.8, 0.6, 0.4], "falling"), ([0.5, 0.7, 0.85, 0.95], "rising")])
def test_non_iid_trend_is_diagnosed(betas, trend):
    lengths = draws(5000, betas, seed=2)
    row = acceptance.summarize(windows([window_from(lengths, 4)])).row(0, named=True)
    assert row["conditional_trend"] == trend
    assert row["conditional_acceptance_rate_per_position"] == pytest.approx(betas, abs=0.05)
    # On non-iid data the iid curve misses at least one position clearly.
    assert row["iid_max_gap"] > 0.05


def test_iid_alpha_paper_value():
    # Leviathan et al.: alpha = 0.8, gamma = 5 -> expected tokens (1 - a^6)/(1 - a) = 3.69.
    rates = [0.8 ** (i + 1) for i in range(5)]
    assert acceptance.iid_alpha(rates) == pytest.approx(0.8, abs=1e-9)
    assert acceptance.truncation(rates)[-1]["tokens_per_step"] == pytest.approx(3.69, abs=0.005)


def test_truncation_and_wasted_positions():
    rates = [0.6, 0.385, 0.215, 0.108, 0.062, 0.0, 0.0]
    assert acceptance.wasted_positions(rates, 0.1) == [4, 5, 6]
    cut = acceptance.truncation(rates)[3]
    assert cut["k"] == 4
    assert cut["tokens_per_step"] == pytest.approx(1 + 0.6 + 0.385 + 0.215 + 0.108)
    assert cut["share_of_accepted"] == pytest.approx(1.308 / 1.37)


def test_group_by_batch_bucket_and_method():
    rows = [window_from([1, 2, 3], 3, batch_size=b, method=m) for b, m in [(1, "a"), (3, "a"), (2, "a"), (9, "b")]]
    out = acceptance.summarize(windows(rows), by=["method", "batch"])
    assert out.select("method", "batch_bucket", "num_windows").rows() == [
        ("a", "1", 1),
        ("a", "2-3", 2),
        ("b", "8-15", 1),
    ]


def test_change_point_finds_a_regression_and_not_noise():
    rng = random.Random(3)
    rows = []
    for i in range(120):
        beta = 0.8 if i < 70 else 0.65
        lengths = draws(200, [beta] * 3, seed=rng.randrange(10**9))
        rows.append(window_from(lengths, 3, end_ts=1000.0 + 10 * i))
    series = acceptance_over_time(windows(rows))
    found = change_points(series)
    assert len(found) == 1
    assert found[0].kind == "regression" and abs(found[0].index - 70) <= 2
    stationary = acceptance_over_time(windows(rows[:70]))
    assert change_points(stationary) == []


def test_change_point_is_the_split_of_largest_z_by_hand():
    """The first split found is the one with the largest |z| of the two sides' ratio
    estimates, each side's variance s²·n_side / (Σd_side)² with s² = Σ(a − r_side·d)² over both
    sides / (n − 2) (pooled), computed split by split; the chosen split's z is then divided by
    √((1 + ρ)/(1 − ρ)), ρ the lag-1 autocorrelation of those residuals (0 when negative)."""
    rng = random.Random(11)
    rows = []
    for i in range(90):
        beta = 0.75 if i < 40 else 0.6
        lengths = draws(int(rng.uniform(80, 300)), [beta] * 3, seed=rng.randrange(10**9))
        rows.append(window_from(lengths, 3, end_ts=1000.0 + 10 * i))
    series = acceptance_over_time(windows(rows))
    a, d = series["num_accepted_tokens"].to_list(), series["num_drafts"].to_list()
    n = len(a)

    def residuals(t: int) -> list[float]:
        out = []
        for lo, hi in ((0, t), (t, n)):
            r = sum(a[lo:hi]) / sum(d[lo:hi])
            out += [a[i] - r * d[i] for i in range(lo, hi)]
        return out

    def z(t: int) -> float:
        s2 = sum(e * e for e in residuals(t)) / (n - 2)
        before, after = 1 + sum(a[:t]) / sum(d[:t]), 1 + sum(a[t:]) / sum(d[t:])
        var = s2 * t / sum(d[:t]) ** 2 + s2 * (n - t) / sum(d[t:]) ** 2
        return (after - before) / var**0.5

    best = max(range(5, n - 4), key=lambda t: abs(z(t)))
    e = residuals(best)
    rho = sum(x * y for x, y in itertools.pairwise(e)) / (sum(x * x for x in e[:-1]) * sum(y * y for y in e[1:])) ** 0.5
    rho = min(max(rho, 0.0), 0.9)
    first = change_points(series)[0]
    assert (first.index, first.kind) == (best, "regression")
    assert first.z == pytest.approx(z(best) / ((1 + rho) / (1 - rho)) ** 0.5, rel=1e-9)
    assert first.before == pytest.approx(1 + sum(a[:best]) / sum(d[:best]), rel=1e-12)


def test_total_is_the_roll_up_of_groups_and_lists_longer_than_k_widen():
    rows = [
        window_from([1, 2, 3, 0], 3, method="a", num_spec_tokens=3),
        window_from([4, 4, 1], 5, method="b", num_spec_tokens=2),  # a list longer than the k it claims
        {"num_draft_tokens": 10, "num_accepted_tokens": 4, "method": "c"},
    ]
    w = windows(rows)
    total, groups = acceptance.summarize_with_total(w, by=["method"])
    direct = acceptance.summarize(w, by=()).row(0, named=True)
    row = total.row(0, named=True)
    for key in (
        "num_drafts",
        "num_draft_tokens",
        "num_accepted_tokens",
        "mean_acceptance_length",
        "draft_acceptance_rate",
        "acceptance_rate_per_position",
        "conditional_acceptance_rate_per_position",
        "mean_acceptance_length_low",
        "num_windows",
    ):
        assert row[key] == pytest.approx(direct[key]), key
    assert len(row["acceptance_rate_per_position"]) == 5
    assert groups["method"].to_list() == ["a", "b", "c"]
    assert groups.filter(pl.col("method") == "c")["num_drafts"].to_list() == [None]


def test_timing_by_batch_means_are_sums_over_steps():
    from specobs.analysis.cost import timing_by_batch

    rows = [
        {"batch_size": 1, "num_timed_steps": 1, "draft_seconds": 0.002, "verify_seconds": 0.010,
         "step_seconds": 0.014, "num_generated_tokens": 3, "num_drafts": 1, "num_draft_tokens": 4,
         "num_accepted_tokens": 2},
        {"batch_size": 1, "num_timed_steps": 1, "draft_seconds": 0.004, "verify_seconds": 0.012,
         "step_seconds": 0.018, "num_generated_tokens": 2, "num_drafts": 1, "num_draft_tokens": 4,
         "num_accepted_tokens": 1},
        {"batch_size": 8, "num_timed_steps": 1, "draft_seconds": None, "verify_seconds": 0.030,
         "step_seconds": 0.032, "num_generated_tokens": 8, "num_drafts": 0},
        {"batch_size": 8, "num_drafts": 8},  # an untimed window is left out
        # Batch 4: k = 3 and k = 2 drafting steps, and a prompt step whose drafter pass verifies nothing yet.
        {"batch_size": 4, "num_timed_steps": 1, "draft_seconds": 0.006, "verify_seconds": 0.020,
         "step_seconds": 0.028, "num_generated_tokens": 8, "num_drafts": 4, "num_draft_tokens": 12,
         "num_accepted_tokens": 4},
        {"batch_size": 4, "num_timed_steps": 1, "draft_seconds": 0.010, "verify_seconds": 0.016,
         "step_seconds": 0.030, "num_generated_tokens": 6, "num_drafts": 4, "num_draft_tokens": 8,
         "num_accepted_tokens": 2},
        {"batch_size": 4, "num_timed_steps": 1, "draft_seconds": 0.005, "verify_seconds": 0.030,
         "step_seconds": 0.037, "num_generated_tokens": 4, "num_drafts": 0, "num_draft_tokens": 0,
         "num_accepted_tokens": 0},
    ]  # fmt: skip
    out = timing_by_batch(windows(rows), keys=["method"]).to_dicts()
    assert [(r["batch_bucket"], r["timed_steps"]) for r in out] == [("1", 2), ("4-7", 3), ("8-15", 1)]
    batch4 = out.pop(1)
    # 3 + 2 positions per request (12 and 8 tokens over 4 requests) cost 0.021 s of drafting,
    # against 0.066 s over 3 verifies: c ≈ 0.19 (per drafted token it would read 0.048).
    assert batch4["cost_ratio"] == pytest.approx((0.021 / 5) / (0.066 / 3))
    assert batch4["draft_share"] == pytest.approx((0.021 / 3) / (0.095 / 3))
    assert out[0]["mean_draft_seconds"] == pytest.approx(0.003)
    assert out[0]["mean_verify_seconds"] == pytest.approx(0.011)
    assert out[0]["mean_step_seconds"] == pytest.approx(0.016)
    assert out[0]["draft_share"] == pytest.approx(0.003 / 0.016)
    assert out[0]["mean_other_seconds"] == pytest.approx(0.016 - 0.003 - 0.011)
    assert out[0]["generated_tokens_per_second"] == pytest.approx(5 / 0.032)
    assert out[1]["mean_draft_seconds"] is None and out[1]["draft_share"] == 0.0
    # 0.006 s drafting 8 positions (batch 1: a token is a position) against 0.011 s per verify;
    # 5 of 8 drafted tokens rejected.
    assert out[0]["cost_ratio"] == pytest.approx((0.006 / 8) / 0.011)
    assert out[0]["rejected_draft_share"] == pytest.approx(0.006 * (5 / 8) / 0.032)
    assert out[1]["cost_ratio"] is None and out[1]["rejected_draft_share"] is None


def test_cost_ratio_of_the_sweep_draft_model_is_one_pass_against_one_verify():
    """By hand from the step rows: the draft model at batch 1, k = 3 drafts 3 positions in ~8.7 ms
    against ~6.5 ms per verify, c ≈ 0.45, while drafting takes about half of every step."""
    import json

    from specobs import load
    from specobs.analysis.cost import timing_by_batch

    path = SWEEP / "specobs-sweep-draft_model-p29645-0001.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    steps = [r for r in rows if r.get("batch_size") == 1 and r.get("num_spec_tokens") == 3 and "draft_seconds" in r]
    draft = sum(r["draft_seconds"] for r in steps)
    positions = sum(r["num_draft_tokens"] / r["batch_size"] for r in steps)
    verify = sum(r["verify_seconds"] for r in steps)
    by_hand = (draft / positions) / (verify / len(steps))
    assert len(steps) == 163 and by_hand == pytest.approx(0.45, abs=0.01)
    selected = (pl.col("method") == "draft_model") & (pl.col("batch_size") == 1) & (pl.col("num_spec_tokens") == 3)
    (row,) = timing_by_batch(load([str(SWEEP)]).windows.filter(selected)).to_dicts()
    assert row["timed_steps"] == len(steps)  # no step of these left out as unsteady
    assert row["cost_ratio"] == pytest.approx(by_hand)
    assert row["draft_share"] == pytest.approx(draft / sum(r["step_seconds"] for r in steps))
    assert 0.5 < row["draft_share"] < 0.6


def test_per_request_rows_are_not_counted_as_steps(tmp_path):
    import json

    from support.helpers import report_json

    steps = [
        {"ts": 1.0 + i, "num_drafts": 2, "num_draft_tokens": 6, "num_accepted_tokens": 3,
         "num_accepted_tokens_per_pos": [2, 1, 0], "num_spec_tokens": 3, "batch_size": 2}
        for i in range(5)
    ]  # fmt: skip
    per_request = [
        {"ts": 1.0 + i, "request_id": f"r{j}", "num_drafts": 1, "num_draft_tokens": 3, "num_accepted_tokens": 2 - j,
         "num_accepted_tokens_per_pos": [1, 1 - j, 0], "num_spec_tokens": 3, "batch_size": 2}
        for i in range(5)
        for j in range(2)
    ]  # fmt: skip
    path = tmp_path / "specobs-run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in steps + per_request))
    summary = report_json(str(path))["summary"]
    assert summary["num_drafts"] == 10 and summary["num_accepted_tokens"] == 15
    assert summary["acceptance_rate_per_position"] == [1.0, 0.5, 0.0]
