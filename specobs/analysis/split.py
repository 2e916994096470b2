"""Acceptance, cost and the best k split by a dimension: by context length, or side by side by
what the engines ran on (platform, attention backend, vLLM release, graph mode…).

Acceptance moves with context (a drafter that copies finds more to copy in a long context; a
model's own drafts drift as the context grows), and with the backend and release (users report a
first position collapsing on one ROCm backend, speculative TPOT halving on another). Acceptance per
value comes from the report's cells (``context_bucket`` is a cell key; run-metadata dimensions are
joined to the cells by run and engine). Speed needs more than sums: steps within one engine vary
far less than between engines, and far more than an interval over single steps would admit, so it
is measured per *stretch* — consecutive timed steps of one engine at one k (and, by context, in one
bucket, one batch bucket), in blocks of at most 64 steps — and a speedup is a ratio of geometric
means over blocks at matched batch buckets with Welch's 95% interval (:func:`matched_ratio`),
against a plain engine of the same model, platform and device at these values where one ran, else
the same engine at k = 0 there (which still pays for its drafter): each side against its
own plain engine.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from specobs import buckets, dimensions
from specobs.analysis.acceptance import CONTEXT_BUCKET, summarize, summary_of, with_context_bucket
from specobs.analysis.intervals import sample_variance, t95, welch_df
from specobs.analysis.pitfalls import matching
from specobs.analysis.runs import FILLED, with_run_dimensions
from specobs.records import ContextTrend, RunMetadata, Split, SplitBest, SplitRow
from specobs.schema import TARGET_LABELS

#: Least drafts a bucket needs before its acceptance enters a trend.
MIN_DRAFTS = 30
#: Least timed steps a stretch needs before its speed counts (shorter ones are a bucket edge crossed).
MIN_STRETCH_STEPS = 4
#: Longest stretch: a longer one is cut into blocks of this many steps (batch means: one engine that
#: ran at one k throughout gives several observations, each long enough for its steps' correlation).
BLOCK_STEPS = 64
#: What every stretch is kept per: the target, the engine and k (and by context, the bucket).
STRETCH_KEYS = (*TARGET_LABELS, "run_id", "engine", "num_spec_tokens")
K0 = "k=0"
PLAIN = "plain engine"
CONTEXT = "context"


def stretch_sums(windows: pl.LazyFrame | pl.DataFrame, *, by_context: bool) -> pl.DataFrame:
    """Timed steps summed per stretch of consecutive steps, in input order (a capture writes its
    steps in order, one engine per file), of one engine at one k (``by_context``: in one context
    bucket, steps without a context left out) and one batch bucket, cut into blocks of at most
    :data:`BLOCK_STEPS`: ``steps``, ``generated`` tokens, ``seconds``."""
    lazy = with_context_bucket(windows.lazy())
    names = lazy.collect_schema().names()
    if "step_seconds" not in names or "num_generated_tokens" not in names:
        return pl.DataFrame()
    known = pl.col("num_generated_tokens").is_not_null() & pl.col("num_spec_tokens").is_not_null()
    timed = lazy.filter((pl.col("step_seconds") > 0) & known)
    timed = timed.with_columns(buckets.expr(pl.col("batch_size")).alias("batch_bucket"))
    keys = [*STRETCH_KEYS, "batch_bucket", *([CONTEXT_BUCKET] if by_context else [])]
    if by_context:
        timed = timed.filter(pl.col(CONTEXT_BUCKET).is_not_null())
    run = [pl.col(c).cast(pl.String) for c in ("source", "run_id", "engine") if c in names]
    key = pl.struct([*run, *(pl.col(c) for c in keys[len(TARGET_LABELS) + 2 :])])
    stretch = (key != key.shift(1)).fill_null(True).cum_sum().alias("_stretch")
    block = (pl.int_range(pl.len()).over("_stretch") // BLOCK_STEPS).alias("_block")
    return (
        timed.with_columns(stretch)
        .with_columns(block)
        .group_by([*keys, "_stretch", "_block"])
        .agg(steps=pl.len(), generated=pl.col("num_generated_tokens").sum(), seconds=pl.col("step_seconds").sum())
        .drop("_stretch", "_block")
        .collect()
    )


Key = tuple[Any, ...]


def split(
    cells: pl.DataFrame,
    stretches: pl.DataFrame | None,
    by: Sequence[str],
    metadata: Sequence[RunMetadata] = (),
) -> Split | None:
    """Per target, k and value of the dimensions ``by`` (``["context"]``, environment dimensions
    such as ``["platform", "attention_backend"]``, or none: per target and k): acceptance from ``cells`` (the
    report's, with run metadata joined), draft, verify and step time, measured speed from
    ``stretches`` (:func:`stretch_sums`; by context: ``by_context=True``), each row's known
    pitfalls; for context the acceptance trend; and the best k per value. None when no row
    knows a value of ``by``."""
    columns = [dimensions.by_name(n).column for n in by]
    if any(c not in cells.columns for c in columns):
        return None
    known = cells.filter(pl.all_horizontal(pl.col(c).is_not_null() for c in columns)) if columns else cells
    if known.is_empty():
        return None
    steps = int(cells.get_column("num_windows").sum() or 0)
    keys = list(dict.fromkeys([*TARGET_LABELS, "num_spec_tokens", *columns]))
    groups = summarize(known, list(dict.fromkeys([*TARGET_LABELS, "k", *by])))
    sums = ("draft_total", "draft_steps", "verify_total", "verify_steps", "step_total", "step_steps")
    timing = known.group_by(keys).agg(
        *[pl.col(c).sum() for c in sums if c in known.columns],
        engines=pl.struct(pl.col("run_id").cast(pl.String), "engine").unique(),
    )
    times = {_key(r, keys): r for r in timing.iter_rows(named=True)}
    rates = _rates(stretches, columns, metadata)
    records = {(m.run_id, m.engine): m for m in metadata}

    rows = []
    for row in groups.iter_rows(named=True):
        labels = {c: row[c] for c in TARGET_LABELS}
        values = {c: row[c] for c in columns}
        k = row["num_spec_tokens"]
        t = times.get(_key(row, keys), {})
        own = rates.get((_target(labels), k, _values(values)), {})
        base, basis = _baseline(rates, labels, values)
        speedup = low = high = None
        if own and base and labels.get("method") is not None and (k or basis == PLAIN):
            speedup, low, high = matched_ratio(own, base)
        summary = summary_of(row)
        met = {
            p.id
            for engine in t.get("engines") or ()
            if (m := records.get((engine["run_id"], engine["engine"]))) is not None
            for p in matching(m, summary.draft_acceptance_rate)
        }
        rows.append(
            SplitRow(
                labels, values, k, summary,
                draft_ms=_ms(t.get("draft_total"), t.get("draft_steps")),
                verify_ms=_ms(t.get("verify_total"), t.get("verify_steps")),
                step_ms=_ms(t.get("step_total"), t.get("step_steps")),
                tokens_per_second=_speed(own), stretches=_blocks(own),
                speedup=speedup, speedup_low=low, speedup_high=high, baseline=basis if speedup is not None else None,
                pitfalls=tuple(sorted(met)),
            )
        )  # fmt: skip
    rows.sort(key=lambda r: (_order(r.labels), _value_order(r.values), r.k or 0))
    drafted = {(_target(r.labels), r.k, _values(r.values)) for r in rows if r.k and r.summary.num_drafts}
    best = _best({key: v for key, v in rates.items() if key[1] == 0 or key in drafted}, columns)
    return Split(
        tuple(by),
        tuple(rows),
        trends=tuple(_trends(rows)) if columns == [CONTEXT_BUCKET] else (),
        best=tuple(best),
        best_k_differs=_differs(best, rates),
        steps_known=int(known.get_column("num_windows").sum() or 0),
        steps=steps,
    )


def _key(row: Mapping[str, Any], keys: Sequence[str]) -> Key:
    return tuple(None if row.get(c) is None else str(row[c]) for c in keys)


def _target(labels: Mapping[str, Any]) -> Key:
    return _key(labels, TARGET_LABELS)


def _values(values: Mapping[str, Any]) -> Key:
    return tuple(None if v is None else str(v) for v in values.values())


def _order(labels: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple("" if labels.get(c) is None else str(labels[c]) for c in TARGET_LABELS)


def _value_order(values: Mapping[str, Any]) -> tuple[Any, ...]:
    """Context buckets by their lowest length; anything else as text."""
    return tuple((buckets.low_of_label(str(v)), "") if c == CONTEXT_BUCKET else (0, str(v)) for c, v in values.items())


def _geomean(values: Sequence[float]) -> float | None:
    logs = [math.log(v) for v in values if v > 0]
    return math.exp(math.fsum(logs) / len(logs)) if logs else None


def _ms(total: Any, steps: Any) -> float | None:
    return 1000.0 * total / steps if total is not None and steps else None


#: Per (target, k, values): per batch bucket, each block's (tokens per second, steps).
Rates = dict[tuple[Key, int | None, Key], dict[str | None, list[tuple[float, int]]]]


def _rates(stretches: pl.DataFrame | None, columns: Sequence[str], metadata: Sequence[RunMetadata]) -> Rates:
    """Tokens per second of step time of each long-enough block, per (target, k, values) and batch bucket."""
    out: Rates = defaultdict(lambda: defaultdict(list))
    if stretches is None or stretches.is_empty():
        return out
    kept = stretches.filter((pl.col("steps") >= MIN_STRETCH_STEPS) & (pl.col("seconds") > 0))
    if any(c in FILLED for c in columns):
        kept = with_run_dimensions(kept.lazy(), metadata).collect()
    if any(c not in kept.columns for c in columns):
        return out
    for row in kept.iter_rows(named=True):
        values = tuple(None if row[c] is None else str(row[c]) for c in columns)
        if None not in values:
            rate = (row["generated"] / row["seconds"], row["steps"])
            out[(_target(row), row["num_spec_tokens"], values)][row["batch_bucket"]].append(rate)
    return out


def _speed(per_bucket: Mapping[str | None, list[tuple[float, int]]]) -> float | None:
    """Tokens per second over every block (geometric mean)."""
    return _geomean([rate for blocks in per_bucket.values() for rate, _ in blocks])


def _blocks(per_bucket: Mapping[str | None, list[tuple[float, int]]]) -> int:
    return sum(len(blocks) for blocks in per_bucket.values())


def matched_ratio(
    b: Mapping[str | None, list[tuple[float, int]]], a: Mapping[str | None, list[tuple[float, int]]]
) -> tuple[float | None, float | None, float | None]:
    """B/A tokens per second at matched batch buckets: per bucket the ratio of geometric means over
    blocks, combined weighted by steps (as ``specobs compare`` does), with Welch's 95% interval
    over the buckets with two or more blocks on both sides (none: the point estimate alone)."""
    parts = []
    for bucket in a.keys() & b.keys():
        lb = [math.log(r) for r, _ in b[bucket] if r > 0]
        la = [math.log(r) for r, _ in a[bucket] if r > 0]
        if not lb or not la:
            continue
        steps = sum(n for _, n in b[bucket]) + sum(n for _, n in a[bucket])
        mb, ma = math.fsum(lb) / len(lb), math.fsum(la) / len(la)
        vb = sample_variance(lb, mb) / len(lb) if len(lb) > 1 else None
        va = sample_variance(la, ma) / len(la) if len(la) > 1 else None
        parts.append((mb - ma, steps, vb, va, len(lb), len(la)))
    if not parts:
        return None, None, None
    tested = [p for p in parts if p[2] is not None and p[3] is not None]
    use = tested or parts
    total = sum(p[1] for p in use)
    log_ratio = math.fsum(p[0] * p[1] / total for p in use)
    if not tested:
        return math.exp(log_ratio), None, None
    variance = math.fsum((p[1] / total) ** 2 * (p[2] + p[3]) for p in tested)  # type: ignore[operator]
    if variance <= 0:
        return math.exp(log_ratio), None, None
    df = welch_df(
        part
        for p in tested
        for part in (((p[1] / total) ** 2 * p[2], p[4] - 1), ((p[1] / total) ** 2 * p[3], p[5] - 1))  # type: ignore[operator]
    )
    half = t95(df) * math.sqrt(variance)
    return math.exp(log_ratio), math.exp(log_ratio - half), math.exp(log_ratio + half)


def _baseline(
    rates: Rates, labels: Mapping[str, Any], values: Mapping[str, Any]
) -> tuple[Mapping[str | None, list[tuple[float, int]]], str | None]:
    """A plain engine's blocks of the same model, platform and device at ``values``, else the
    same target's k = 0 blocks there. The plain engine first: a speculative engine with drafting
    off still pays for its drafter (the K=0 tax: a draft model's engine took 11 ms a step at k = 0
    against a plain engine's 6 in the bundled sweep), so against it speculation looks better than
    it is; k = 0 is what a single engine can give (its context buckets), and is labelled so."""
    target, at = _target(labels), _values(values)
    plain = tuple(None if c in ("method", "draft_model") else v for c, v in zip(TARGET_LABELS, target, strict=True))
    found = rates.get((plain, 0, at))
    if found:
        return found, PLAIN
    own = rates.get((target, 0, at))
    if own and labels.get("method") is not None:
        return own, K0
    return {}, None


def _trends(rows: Sequence[SplitRow]) -> list[ContextTrend]:
    """Per target and k > 0: acceptance at the shortest against the longest supported context bucket."""
    grouped: dict[tuple[Key, int | None], list[SplitRow]] = defaultdict(list)
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
        bounds = (a.mean_acceptance_length_low, a.mean_acceptance_length_high,
                  b.mean_acceptance_length_low, b.mean_acceptance_length_high)  # fmt: skip
        apart = None not in bounds and (bounds[1] < bounds[2] or bounds[3] < bounds[0])  # type: ignore[operator]
        out.append(
            ContextTrend(
                dict(short.labels), k, short.values[CONTEXT_BUCKET], long.values[CONTEXT_BUCKET],
                a.mean_acceptance_length or 0.0, (bounds[0], bounds[1]),
                b.mean_acceptance_length or 0.0, (bounds[2], bounds[3]),
                a.draft_acceptance_rate, b.draft_acceptance_rate, bool(apart),
            )
        )  # fmt: skip
    return out


def _best(rates: Rates, columns: Sequence[str]) -> list[SplitBest]:
    """Per speculative target and value with two or more k measured (k = 0 among them; a k > 0
    only where it drafted: a bucket of prefills alone says nothing of k): the fastest."""
    by_value: dict[tuple[Key, Key], dict[int | None, Mapping[str | None, list[tuple[float, int]]]]] = defaultdict(dict)
    for (target, k, values), found in rates.items():
        if target[TARGET_LABELS.index("method")] is not None:
            by_value[(target, values)][k] = found
    out = []
    for (target, values), per_k in by_value.items():
        if len(per_k) < 2:
            continue
        # Ranked by speed at matched batch buckets against one reference (k = 0 where it ran).
        reference = per_k[0] if 0 in per_k else max(per_k.values(), key=_blocks)
        ranked = sorted(per_k, key=lambda k: matched_ratio(per_k[k], reference)[0] or 0.0, reverse=True)
        first, second = ranked[0], ranked[1]
        ratio, low, high = matched_ratio(per_k[first], per_k[second])
        labels = dict(zip(TARGET_LABELS, target, strict=True))
        named = dict(zip(columns, values, strict=True))
        out.append(SplitBest(labels, named, first, second, ratio, low, high, low is not None and low > 1))
    out.sort(key=lambda b: (_order(b.labels), _value_order(b.values)))
    return out


def _differs(best: Sequence[SplitBest], rates: Rates) -> bool:
    """Two values of one target whose best k differ, each beating the other's k beyond noise."""
    for a in best:
        for b in best:
            if _target(a.labels) != _target(b.labels) or a.values == b.values or a.k == b.k:
                continue
            target, at_a, at_b = _target(a.labels), _values(a.values), _values(b.values)
            in_a = matched_ratio(rates[(target, a.k, at_a)], rates.get((target, b.k, at_a), {}))
            in_b = matched_ratio(rates[(target, b.k, at_b)], rates.get((target, a.k, at_b), {}))
            if (in_a[1] or 0) > 1 and (in_b[1] or 0) > 1:
                return True
    return False


def environment_by(by: Sequence[str]) -> list[str]:
    """The environment dimensions among ``by`` (what a side-by-side table is split by)."""
    return [n for n in by if dimensions.ENVIRONMENT in dimensions.by_name(n).roles]


__all__ = ["CONTEXT", "MIN_DRAFTS", "MIN_STRETCH_STEPS", "environment_by", "matched_ratio", "split", "stretch_sums"]
