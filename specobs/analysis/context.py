"""Acceptance, cost and the best k by context length.

Acceptance moves with context (a drafter that copies finds more to copy in a long context; a
model's own drafts drift as the context grows), so a k that pays at 100 tokens may not at 8,000.
Each step row knows the mean context of its requests (``context_length``); its bucket
(``context_bucket``: ``512-1023``…) is a cell key, so acceptance per bucket comes from the
report's cells. Speed needs more than sums: steps within one engine vary far less than between
engines, and far more than an interval over single steps would admit, so it is measured per
*stretch* — consecutive timed steps of one engine at one k in one bucket — and a speedup is a
ratio of geometric means over stretches with Welch's 95% interval (``intervals.geometric_ratio``),
against the same engine at k = 0 where it ran (else a plain engine of the same target).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from specobs import buckets
from specobs.analysis.acceptance import CONTEXT_BUCKET, summarize, summary_of, with_context_bucket
from specobs.analysis.intervals import geometric_ratio
from specobs.records import ContextAnalysis, ContextBest, ContextRow, ContextTrend
from specobs.schema import TARGET_LABELS

#: Least drafts a bucket needs before its acceptance enters a trend.
MIN_DRAFTS = 30
#: Least timed steps a stretch needs before its speed counts (shorter ones are a bucket edge crossed).
MIN_STRETCH_STEPS = 4
#: What a stretch is kept per: the target, the engine, k and the context bucket.
STRETCH_KEYS = (*TARGET_LABELS, "run_id", "engine", "num_spec_tokens", CONTEXT_BUCKET)
K0 = "k=0"
PLAIN = "plain engine"


def stretch_sums(windows: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """Timed steps with a context, summed per stretch of consecutive steps (by end time) of one
    engine at one k in one context bucket: ``steps``, ``generated`` tokens, ``seconds`` of step time."""
    lazy = with_context_bucket(windows.lazy())
    names = lazy.collect_schema().names()
    if "step_seconds" not in names or "num_generated_tokens" not in names:
        return pl.DataFrame()
    timed = lazy.filter(
        pl.col(CONTEXT_BUCKET).is_not_null()
        & (pl.col("step_seconds") > 0)
        & pl.col("num_generated_tokens").is_not_null()
        & pl.col("num_spec_tokens").is_not_null()
    )
    order = [c for c in ("source", "run_id", "engine", "end_ts") if c in names]
    run = pl.struct([pl.col(c).cast(pl.String) for c in ("source", "run_id", "engine") if c in names])
    key = pl.struct(run, pl.col("num_spec_tokens"), pl.col(CONTEXT_BUCKET))
    stretch = (key != key.shift(1)).fill_null(True).cum_sum().alias("_stretch")
    return (
        timed.sort(order)
        .with_columns(stretch)
        .group_by([*STRETCH_KEYS, "_stretch"])
        .agg(
            steps=pl.len(),
            generated=pl.col("num_generated_tokens").sum(),
            seconds=pl.col("step_seconds").sum(),
        )
        .drop("_stretch")
        .collect()
    )


def _geomean(values: Sequence[float]) -> float | None:
    logs = [math.log(v) for v in values if v > 0]
    return math.exp(math.fsum(logs) / len(logs)) if logs else None


def _ms(total: Any, steps: Any) -> float | None:
    return 1000.0 * total / steps if total is not None and steps else None


def context_analysis(cells: pl.DataFrame, stretches: pl.DataFrame | None = None) -> ContextAnalysis | None:
    """Per target, k and context bucket: acceptance (from the report's ``cells``), draft, verify
    and step time, and measured speed from ``stretches`` (:func:`stretch_sums`); the acceptance
    trend from short to long contexts, and the best k per bucket. None when no row knows its context."""
    if CONTEXT_BUCKET not in cells.columns:
        return None
    known = cells.filter(pl.col(CONTEXT_BUCKET).is_not_null())
    if known.is_empty():
        return None
    steps = int(cells.get_column("num_windows").sum() or 0)
    with_context = int(known.get_column("num_windows").sum() or 0)
    by = [*TARGET_LABELS, "k", "context"]
    groups = summarize(known, by)
    keys = [*TARGET_LABELS, "num_spec_tokens", CONTEXT_BUCKET]
    sums = ("draft_total", "draft_steps", "verify_total", "verify_steps", "step_total", "step_steps")
    timing = known.group_by(keys).agg([pl.col(c).sum() for c in sums if c in known.columns])
    times = {tuple(r[k] for k in keys): r for r in timing.iter_rows(named=True)}
    rates = _rates(stretches)

    rows = []
    for row in groups.iter_rows(named=True):
        labels = {c: row[c] for c in TARGET_LABELS}
        k, bucket = row["num_spec_tokens"], row[CONTEXT_BUCKET]
        t = times.get(tuple(row[c] for c in keys), {})
        own = rates.get((_target(labels), k, bucket), [])
        base, basis = _baseline(rates, labels, bucket)
        speedup = low = high = None
        if own and base and (k or basis == PLAIN):
            speedup, low, high = geometric_ratio(own, base)
        rows.append(
            ContextRow(
                labels, k, bucket, summary_of(row),
                draft_ms=_ms(t.get("draft_total"), t.get("draft_steps")),
                verify_ms=_ms(t.get("verify_total"), t.get("verify_steps")),
                step_ms=_ms(t.get("step_total"), t.get("step_steps")),
                tokens_per_second=_geomean(own), stretches=len(own),
                speedup=speedup, speedup_low=low, speedup_high=high, baseline=basis if speedup is not None else None,
            )
        )  # fmt: skip
    rows.sort(key=lambda r: (_order(r.labels), buckets.low_of_label(r.context_bucket), r.k or 0))
    drafted = {(_target(r.labels), r.k, r.context_bucket) for r in rows if r.k and r.summary.num_drafts}
    best = _best({key: v for key, v in rates.items() if key[1] == 0 or key in drafted})
    return ContextAnalysis(
        tuple(rows),
        trends=tuple(_trends(rows)),
        best=tuple(best),
        best_k_differs=_differs(best, rates),
        steps_with_context=with_context,
        steps=steps,
    )


Target = tuple[Any, ...]


def _target(labels: Mapping[str, Any]) -> Target:
    return tuple(None if labels.get(c) is None else str(labels[c]) for c in TARGET_LABELS)


def _order(labels: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple("" if labels.get(c) is None else str(labels[c]) for c in TARGET_LABELS)


def _rates(stretches: pl.DataFrame | None) -> dict[tuple[Target, int | None, str], list[float]]:
    """Tokens per second of step time of each long-enough stretch, per (target, k, bucket)."""
    out: dict[tuple[Target, int | None, str], list[float]] = defaultdict(list)
    if stretches is None or stretches.is_empty():
        return out
    kept = stretches.filter((pl.col("steps") >= MIN_STRETCH_STEPS) & (pl.col("seconds") > 0))
    for row in kept.iter_rows(named=True):
        target = _target(row)
        out[(target, row["num_spec_tokens"], str(row[CONTEXT_BUCKET]))].append(row["generated"] / row["seconds"])
    return out


def _baseline(
    rates: Mapping[tuple[Target, int | None, str], list[float]], labels: Mapping[str, Any], bucket: str
) -> tuple[list[float], str | None]:
    """The same engine's k = 0 stretches in ``bucket``, else a plain engine's of the same model,
    platform and device."""
    target = _target(labels)
    own = rates.get((target, 0, bucket))
    if own and labels.get("method") is not None:
        return own, K0
    plain = tuple(None if c in ("method", "draft_model") else v for c, v in zip(TARGET_LABELS, target, strict=True))
    found = rates.get((plain, 0, bucket))
    return (found, PLAIN) if found else ([], None)


def _trends(rows: Sequence[ContextRow]) -> list[ContextTrend]:
    """Per target and k > 0: acceptance at the shortest against the longest supported bucket."""
    grouped: dict[tuple[Target, int | None], list[ContextRow]] = defaultdict(list)
    for row in rows:
        s = row.summary
        if row.k and (s.num_drafts or 0) >= MIN_DRAFTS and s.mean_acceptance_length is not None:
            grouped[(_target(row.labels), row.k)].append(row)
    out = []
    for (_, k), found in grouped.items():
        if len(found) < 2:
            continue
        short, long = found[0], found[-1]  # rows are in increasing context
        a, b = short.summary, long.summary
        apart = (
            a.mean_acceptance_length_high is not None
            and b.mean_acceptance_length_low is not None
            and a.mean_acceptance_length_low is not None
            and b.mean_acceptance_length_high is not None
            and (a.mean_acceptance_length_high < b.mean_acceptance_length_low
                 or b.mean_acceptance_length_high < a.mean_acceptance_length_low)
        )  # fmt: skip
        out.append(
            ContextTrend(
                dict(short.labels), k, short.context_bucket, long.context_bucket,
                a.mean_acceptance_length or 0.0, (a.mean_acceptance_length_low, a.mean_acceptance_length_high),
                b.mean_acceptance_length or 0.0, (b.mean_acceptance_length_low, b.mean_acceptance_length_high),
                a.draft_acceptance_rate, b.draft_acceptance_rate, bool(apart),
            )
        )  # fmt: skip
    return out


def _best(rates: Mapping[tuple[Target, int | None, str], list[float]]) -> list[ContextBest]:
    """Per speculative target and bucket with two or more k measured (k = 0 among them; a k > 0
    only where it drafted: a bucket of prefills alone says nothing of k): the fastest."""
    by_bucket: dict[tuple[Target, str], dict[int | None, list[float]]] = defaultdict(dict)
    for (target, k, bucket), values in rates.items():
        if target[TARGET_LABELS.index("method")] is not None:
            by_bucket[(target, bucket)][k] = values
    out = []
    for (target, bucket), per_k in sorted(by_bucket.items(), key=lambda kv: (kv[0][0], buckets.low_of_label(kv[0][1]))):
        if len(per_k) < 2:
            continue
        ranked = sorted(per_k, key=lambda k: _geomean(per_k[k]) or 0.0, reverse=True)
        first, second = ranked[0], ranked[1]
        ratio, low, high = geometric_ratio(per_k[first], per_k[second])
        labels = dict(zip(TARGET_LABELS, target, strict=True))
        out.append(ContextBest(labels, bucket, first, second, ratio, low, high, low is not None and low > 1))
    return out


def _differs(best: Sequence[ContextBest], rates: Mapping[tuple[Target, int | None, str], list[float]]) -> bool:
    """Two buckets of one target whose best k differ, each beating the other's k beyond noise."""
    for a in best:
        for b in best:
            if _target(a.labels) != _target(b.labels) or a.context_bucket == b.context_bucket or a.k == b.k:
                continue
            target = _target(a.labels)
            in_a = geometric_ratio(
                rates[(target, a.k, a.context_bucket)],
                rates.get((target, b.k, a.context_bucket), []),
            )
            in_b = geometric_ratio(
                rates[(target, b.k, b.context_bucket)],
                rates.get((target, a.k, b.context_bucket), []),
            )
            if (in_a[1] or 0) > 1 and (in_b[1] or 0) > 1:
                return True
    return False


__all__ = ["MIN_DRAFTS", "MIN_STRETCH_STEPS", "context_analysis", "stretch_sums"]
