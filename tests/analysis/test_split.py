"""Splits by context length and side by side by environment (``specobs.analysis.split``), on step
rows built here whose every count and second is chosen, so each expected number is worked by hand:
tokens per second = generated tokens / step seconds of the steps of a block, a speedup the ratio of
those at matched batch buckets, acceptance length 1 + accepted / drafts.
"""

from __future__ import annotations

import math

import polars as pl
import pytest

from specobs import schema
from specobs.analysis.acceptance import cells
from specobs.analysis.cost import timing_terms
from specobs.analysis.runs import with_run_dimensions
from specobs.analysis.split import BLOCK_STEPS, K0, PLAIN, matched_ratio, split, stretch_sums
from specobs.records import RunMetadata

#: Each block's seconds are scaled by one of these (the same for every k): the spread the interval sees.
SPREAD = (1.00, 1.02, 0.98)
TARGET = {"model": "m", "method": "ngram", "platform": "cpu", "device": "d"}


def steps(n: int, *, k: int, accepted: int, seconds: float, context: float | None, start: float, **labels) -> list:
    """``n`` steps of batch 4: at k > 0 each of the 4 requests drafts k tokens and ``accepted`` of
    the step's tokens are accepted (spread over the first drafts, position 0 then 1)."""
    rows = []
    for i in range(n):
        per_pos = [min(accepted, 4), max(accepted - 4, 0)][:k] if k else None
        rows.append({
            **TARGET, **labels, "run_id": labels.get("run_id", "r"), "engine": 0, "source": labels.get("run_id", "r"),
            "start_ts": start + i, "end_ts": start + i + 0.5, "batch_size": 4, "num_spec_tokens": k,
            "num_drafts": 4 if k else 0, "num_draft_tokens": 4 * k, "num_accepted_tokens": accepted if k else 0,
            "num_accepted_tokens_per_pos": per_pos, "num_drafts_per_pos": [4] * k if k else None,
            "num_generated_tokens": 4 + (accepted if k else 0), "step_seconds": seconds, "num_timed_steps": 1,
            "context_length": context,
        })  # fmt: skip
    return rows


def frame(rows: list[dict]) -> pl.DataFrame:
    return schema.conform(pl.DataFrame(rows, infer_schema_length=None), schema.WINDOWS)


def context_rows(short_k2_seconds: float = 0.012) -> pl.DataFrame:
    """One engine: 3 rounds of (short k=0, short k=2, long k=0, long k=2), 8 steps each."""
    rows, t = [], 0.0
    for factor in SPREAD:
        for context, k, accepted, seconds in (
            (40.0, 0, 0, 0.010), (40.0, 2, 2, short_k2_seconds), (700.0, 0, 0, 0.012), (700.0, 2, 6, 0.013),
        ):  # fmt: skip
            rows += steps(8, k=k, accepted=accepted, seconds=seconds * factor, context=context, start=t)
            t += 8
    return frame(rows)


def analysed(rows: pl.DataFrame, by=("context",), metadata=()):
    summed = with_run_dimensions(cells(rows, timing_terms()).lazy(), metadata).collect()
    stretches = stretch_sums(rows, by_context=by == ("context",))
    return split(summed, stretches, list(by), metadata)


def welch(ratio: float) -> tuple[float, float]:
    """The interval of a ratio of two sides of 3 blocks each, both spread by SPREAD."""
    logs = [-math.log(f) for f in SPREAD]
    mean = sum(logs) / 3
    var = sum((x - mean) ** 2 for x in logs) / 2 / 3
    se = math.sqrt(2 * var)
    df = (2 * var) ** 2 / (2 * var**2 / 2)  # Welch–Satterthwaite with equal sides: 4
    from specobs.analysis.intervals import t95

    half = t95(df) * se
    return ratio * math.exp(-half), ratio * math.exp(half)


def test_acceptance_and_speed_by_context_bucket_against_k0_in_the_same_engine():
    result = analysed(context_rows())
    assert result is not None and result.by == ("context",)
    rows = {(r.values["context_bucket"], r.k): r for r in result.rows}
    assert set(rows) == {("32-63", 0), ("32-63", 2), ("512-1023", 0), ("512-1023", 2)}
    short, long = rows[("32-63", 2)], rows[("512-1023", 2)]
    # 3 stretches × 8 steps × 4 drafts = 96 drafts; 2 and 6 accepted per step.
    assert short.summary.num_drafts == 96 and short.summary.mean_acceptance_length == pytest.approx(1 + 48 / 96)
    assert long.summary.mean_acceptance_length == pytest.approx(1 + 144 / 96)
    assert short.summary.acceptance_rate_per_position == pytest.approx((0.5, 0.0))
    assert long.summary.acceptance_rate_per_position == pytest.approx((1.0, 0.5))
    # Speed: short k=2 (4 + 2) / 0.012 = 500 tokens/s against k=0's 4 / 0.010 = 400: 1.25×;
    # long (4 + 6) / 0.013 against 4 / 0.012: 2.3077×.
    assert short.speedup == pytest.approx(1.25) and short.baseline == K0 and short.stretches == 3
    assert long.speedup == pytest.approx((10 / 0.013) / (4 / 0.012))
    assert (short.speedup_low, short.speedup_high) == pytest.approx(welch(1.25))
    assert rows[("32-63", 0)].speedup is None  # the baseline itself
    assert short.step_ms == pytest.approx(12.0 * sum(SPREAD) / 3)
    # The trend: 1.5 against 2.5 tokens per verification, every window alike: beyond noise.
    (trend,) = result.trends
    assert (trend.short_bucket, trend.long_bucket, trend.k) == ("32-63", "512-1023", 2)
    assert (trend.short_length, trend.long_length, trend.beyond_noise) == (1.5, 2.5, True)
    # Fastest k: 2 in both buckets, each beyond noise over k = 0; the best k does not move.
    assert [(b.values["context_bucket"], b.k, b.runner_up, b.clear) for b in result.best] == [
        ("32-63", 2, 0, True), ("512-1023", 2, 0, True),
    ]  # fmt: skip
    assert result.best_k_differs is False
    assert (result.steps_known, result.steps) == (96, 96)


def test_the_best_k_changes_with_context_only_beyond_noise_in_both_buckets():
    # Short k=2 steps now take 0.016 s: 6 / 0.016 = 375 tokens/s < k=0's 400, so k=0 wins there.
    result = analysed(context_rows(short_k2_seconds=0.016))
    best = {b.values["context_bucket"]: (b.k, b.ratio, b.clear) for b in result.best}
    assert best["32-63"][0] == 0 and best["32-63"][1] == pytest.approx(400 / 375) and best["32-63"][2]
    assert best["512-1023"][0] == 2
    assert result.best_k_differs is True
    # Equal speeds within noise do not make it move: 0.015 s gives 400 against 400.
    even = analysed(context_rows(short_k2_seconds=0.015))
    assert even.best_k_differs is False
    assert not next(b for b in even.best if b.values["context_bucket"] == "32-63").clear


def test_steps_without_context_are_left_out_and_counted():
    rows = context_rows()
    old = frame(steps(10, k=2, accepted=4, seconds=0.01, context=None, start=1000.0))
    result = analysed(pl.concat([rows, old]))
    assert (result.steps_known, result.steps) == (96, 106)
    assert analysed(old) is None  # nothing knows its context: no table


def test_side_by_side_each_backend_against_its_own_plain_engine_with_its_pitfalls():
    # Four engines on ROCm (gfx942): a plain and an eagle3 engine on each of two attention backends.
    # The rows carry no backend: the run metadata says it (joined per run and engine).
    rows, metadata, t = [], [], 0.0
    engines = (("attn-plain", "ROCM_ATTN", None, 0, 0.010), ("attn-eagle3", "ROCM_ATTN", "eagle3", 4, 0.020),
               ("fa-plain", "ROCM_AITER_FA", None, 0, 0.010), ("fa-eagle3", "ROCM_AITER_FA", "eagle3", 4, 0.012))  # fmt: skip
    for run, backend, method, accepted, seconds in engines:
        k = 2 if method else 0
        for factor in SPREAD:  # 3 blocks of BLOCK_STEPS steps each
            rows += steps(BLOCK_STEPS, k=k, accepted=accepted, seconds=seconds * factor, context=None, start=t,
                          run_id=run, method=method, platform="rocm")  # fmt: skip
            t += BLOCK_STEPS
        metadata.append(RunMetadata(run_id=run, engine=0, platform="rocm", device_arch="gfx942", method=method,
                                    attention_backend=backend, num_speculative_tokens=k))  # fmt: skip
    result = analysed(frame(rows), by=("attention_backend",), metadata=metadata)
    got = {(r.values["attention_backend"], r.labels["method"]): r for r in result.rows}
    # ROCM_ATTN: (4 + 4) / 0.020 = 400 against its plain 4 / 0.010 = 400: 1.00×; AITER FA: 8 / 0.012 = 666.7: 1.67×.
    slow, fast = got[("ROCM_ATTN", "eagle3")], got[("ROCM_AITER_FA", "eagle3")]
    assert slow.speedup == pytest.approx(1.0) and slow.baseline == PLAIN
    assert fast.speedup == pytest.approx((8 / 0.012) / 0.4 / 1000)
    assert (fast.speedup_low, fast.speedup_high) == pytest.approx(welch(fast.speedup))
    assert got[("ROCM_ATTN", None)].speedup is None  # a plain engine is the baseline, not measured against itself
    # The known pitfall (ROCM_ATTN with an EAGLE drafter on MI300-class devices) on its row only.
    assert slow.pitfalls == ("rocm_attn_over_aiter_fa",) and fast.pitfalls == ()
    assert result.trends == ()  # backends have no order


def test_matched_ratio_weighs_buckets_by_steps_and_needs_two_blocks_a_side_for_an_interval():
    a = {"1": [(100.0, 10), (100.0, 10)], "4-7": [(400.0, 30)]}
    b = {"1": [(150.0, 10), (150.0, 10)], "4-7": [(400.0, 30)], "8-15": [(900.0, 5)]}
    ratio, low, high = matched_ratio(b, a)
    # Only bucket 1 has two blocks a side (tested), and its spread is 0: the point alone.
    assert ratio == pytest.approx(1.5) and low is None and high is None
    untested = matched_ratio({"4-7": [(400.0, 30)]}, {"4-7": [(200.0, 30)]})
    assert untested == (pytest.approx(2.0), None, None)
    assert matched_ratio({"1": [(1.0, 1)]}, {"2-3": [(1.0, 1)]}) == (None, None, None)  # nothing matched


def test_a_plain_engine_is_the_baseline_before_the_speculative_engines_own_k0():
    # Beside the speculative engine, a plain engine at the same contexts: 4 tokens per 0.008 s = 500
    # tokens/s, faster than the speculative engine's own k = 0 (400: it still pays for its drafter).
    rows, t = [], 10_000.0
    for factor in SPREAD:
        for context in (40.0, 700.0):
            rows += steps(8, k=0, accepted=0, seconds=0.008 * factor, context=context, start=t, method=None,
                          run_id="plain")  # fmt: skip
            t += 8
    result = analysed(pl.concat([context_rows(), frame(rows)]))
    got = {(r.labels["method"], r.values["context_bucket"], r.k): r for r in result.rows}
    short = got[("ngram", "32-63", 2)]
    assert short.baseline == PLAIN and short.speedup == pytest.approx(500 / 500)  # (4 + 2) / 0.012 against 4 / 0.008
    k0 = got[("ngram", "32-63", 0)]  # the speculative engine with drafting off, against the plain one: the K=0 tax
    assert k0.baseline == PLAIN and k0.speedup == pytest.approx(400 / 500)
    assert got[(None, "32-63", 0)].speedup is None
