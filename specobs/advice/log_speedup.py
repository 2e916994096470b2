"""Speedups measured from what servers already print: generation throughput at matched load.

A vLLM server's stats line gives, every interval, the tokens it generated per second of wall
time (prompt processing, idle moments and request turnover inside the interval included) and
the requests running at the line (a snapshot); a plain server of the same model printing the
same lines under the same load is the baseline. So at each load N that both show, the speedup
is measured, not modelled::

    speedup(bucket) = Σ_N w_N · mean_spec(N) / Σ_N w_N · mean_plain(N)

over the N of a power-of-two bucket that both engines ran (each with :data:`MIN_INTERVALS`
intervals or more), weighted by the speculative engine's intervals at N (its traffic). Its 95%
interval is the ratio's, on the log scale, from the spread of the intervals' throughputs
(``var(mean) = Σ w² var/n / (Σ w)²`` per side, Welch–Satterthwaite degrees of freedom), widened
by how far such a figure has been from what clients measured (:data:`SERVED_SYSTEMATIC`, added
in quadrature on the log scale): the spread alone left the clients' figure outside 3 of 18 real
levels.

Which intervals, and at what N (:func:`served_intervals`): every interval inside a busy stretch,
at the mean of the running counts at its two ends (rounded half up). Not the snapshot at its
end alone: at one client, an interval whose end caught the gap between two requests reads
"Running: 0", and leaving those out keeps the intervals with the least idle time in them — on
recordings where the gaps were a third of the time, the plain server read 322 tokens/s where
its clients measured 217, and every speedup against it came out low. The first and last
interval of a stretch (the one that began idle, the one that ended idle) are left out: part of
their time lay outside the load. So the figure is served throughput (:data:`Measures.SERVED`),
what clients see while the load holds, not decode steps alone.

Separate server processes differ by more than this spread can show (on shared machines, 20–40%):
the assumptions say so.

Tokens per request-step are measured too (generated over generated less accepted tokens), so the
step-time ratio a bucket implies is ``tokens per step / speedup``: the explanation's factors
multiply to the measured number.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from specobs.analysis.intervals import t95, variance_from_sums, welch_df
from specobs.formulas import tokens_per_step_from_totals
from specobs.records.recommendation import NotMeasured, ServedSpeedup, Target
from specobs.records.result import Measures, Unmeasured

#: Intervals each side needs at a number of running requests before that N is matched.
MIN_INTERVALS = 3
#: What identifies an engine's target: the plain engine must match on these.
TARGET = ("model", "platform", "device")
#: How far a served speedup read from logs has been from the clients' own, as a share: the
#: largest error over the 18 real levels of ``benchmarks/bench_log_speedup.py`` (2026-12-07:
#: the bundled ``vllm-cpu-serve`` pairs and the held-out real-text ``vllm-cpu-serve-text``
#: recording; -8.0% at worst, the log low where longer prompts made prefill a larger share).
#: Part of every served interval; re-measure it when the estimator changes.
SERVED_SYSTEMATIC = 0.08

#: The column of the load a served interval ran at (:func:`served_intervals`); null for the rest.
SERVED_LOAD = "served_load"
#: Rows whose counters cover an interval of wall time (a log's stats interval, a scrape pair).
_INTERVAL_COUNTERS = ("interval", "cumulative")
#: Two rows are consecutive when the second ends less than this many of the source's usual
#: interval lengths after the first (an idle interval between them prints no row: two lengths).
_JOINED = 1.75


def served_intervals(windows: pl.LazyFrame) -> pl.LazyFrame:
    """``windows`` with :data:`SERVED_LOAD` and, for the intervals it is set on, their served
    throughput in ``generation_tokens_per_second`` (generated tokens over the interval's wall
    time, as the server printed it); null elsewhere. Steps pass through.

    An interval is served when it lies inside a busy stretch: the rows before and after it end
    one usual interval length away (the median length of the source's intervals whose rate the
    reader kept; an idle interval prints no row, so a longer step is idle time). Its load is the
    mean of the running requests at its two ends, rounded half up and at least 1 (it generated):
    ``Running: 1`` then ``Running: 0`` is one request with a turnover gap, load 1; ``8`` then ``7``
    is load 8. Where the reader dropped the printed rate (the load changed across the interval,
    or began at 0), it is generated tokens over the interval's seconds: its own start where that
    agrees with the previous row's end within a second (a speculative line's exact interval),
    else the time since the previous row (vLLM's logger spans the intervals it did not print in).
    """
    names = windows.collect_schema().names()
    needed = ("start_ts", "end_ts", "counters", "num_generated_tokens", "batch_size", "source")
    if not all(c in names for c in needed) or "generation_tokens_per_second" not in names:
        return windows.with_columns(pl.lit(None, pl.Int64).alias(SERVED_LOAD))
    engine = pl.col("engine").fill_null(-1) if "engine" in names else pl.lit(-1)
    busy = (
        pl.col("counters").is_in(_INTERVAL_COUNTERS)
        & pl.col("num_generated_tokens").is_not_null()
        & pl.col("end_ts").is_not_null()
        & ((pl.col("num_generated_tokens") > 0) | (pl.col("batch_size").fill_null(0) > 0))
    )
    by = ["_source", "_engine"]
    own = pl.col("end_ts") - pl.col("start_ts")
    since = pl.col("end_ts") - pl.col("end_ts").shift(1).over(by)
    until = pl.col("end_ts").shift(-1).over(by) - pl.col("end_ts")
    usual = own.filter(pl.col("generation_tokens_per_second").is_not_null() & (own > 0)).median().over(by)
    seconds = pl.when((own - since).abs() < 1).then(own).otherwise(since)
    load = ((pl.col("batch_size").fill_null(0).shift(1).over(by) + pl.col("batch_size").fill_null(0)) / 2 + 0.5).floor()
    indexed = windows.with_row_index("_served_row")
    rows = (
        indexed.filter(busy)
        .select(
            "_served_row",
            "start_ts",
            "end_ts",
            "num_generated_tokens",
            "batch_size",
            "generation_tokens_per_second",
            _source=pl.col("source").fill_null(""),
            _engine=engine,
        )
        .sort([*by, "end_ts"])
        .select(
            "_served_row",
            _joined=(since < _JOINED * usual).fill_null(False) & (until < _JOINED * usual).fill_null(False),
            _load=load.cast(pl.Int64).clip(lower_bound=1),
            _rate=pl.coalesce(
                "generation_tokens_per_second", pl.when(seconds > 0).then(pl.col("num_generated_tokens") / seconds)
            ),
        )
        .filter("_joined")
        .drop("_joined")
    )
    served = pl.col("_load").is_not_null() & pl.col("_rate").is_not_null()
    return (
        indexed.join(rows, on="_served_row", how="left")
        .sort("_served_row")
        .with_columns(
            pl.when(served).then(pl.col("_load")).alias(SERVED_LOAD),
            pl.when(served)
            .then(pl.col("_rate"))
            .otherwise(pl.lit(None, pl.Float64))
            .alias("generation_tokens_per_second"),
        )
        .drop("_served_row", "_load", "_rate")
    )


@dataclass(frozen=True)
class _Side:
    """Throughput intervals of one engine at one N: count, mean, variance, and token counts."""

    n: int
    mean: float
    variance: float
    generated: float
    accepted: float


def _by_running(blocks: pl.DataFrame) -> dict[int, _Side]:
    """Per load N (:data:`SERVED_LOAD`): the served intervals' throughput statistics (from the
    blocks' sums)."""
    if blocks.is_empty() or "throughput_n" not in blocks.columns or SERVED_LOAD not in blocks.columns:
        return {}
    rows = (
        blocks.filter(pl.col(SERVED_LOAD).is_not_null() & (pl.col("throughput_n") > 0))
        .group_by(SERVED_LOAD)
        .agg(
            pl.col("throughput_n").sum().alias("n"),
            pl.col("throughput_sum").sum().alias("s"),
            pl.col("throughput_sumsq").sum().alias("ss"),
            pl.col("num_generated_tokens").sum().alias("generated"),
            pl.col("num_accepted_tokens").fill_null(0).sum().alias("accepted"),
        )
    )
    out = {}
    for batch, n, s, ss, generated, accepted in rows.iter_rows():
        variance = variance_from_sums(n, s, ss) if n > 1 else math.inf
        out[int(batch)] = _Side(int(n), s / n, variance, float(generated or 0), float(accepted or 0))
    return out


def _ratio(spec: Mapping[int, _Side], plain: Mapping[int, _Side], running: Iterable[int]) -> tuple[float, ...] | None:
    """(speedup, low, high, spec tokens/s, plain tokens/s, spec intervals, plain intervals) over
    the matched ``running``, or None when none matched."""
    matched = [n for n in running if n in spec and n in plain]
    if not matched:
        return None
    weights = {n: float(spec[n].n) for n in matched}
    total = sum(weights.values())

    def side(sides: Mapping[int, _Side]) -> tuple[float, float, float]:
        mean = sum(weights[n] * sides[n].mean for n in matched) / total
        variance = sum(weights[n] ** 2 * sides[n].variance / sides[n].n for n in matched) / total**2
        df = sum(sides[n].n - 1 for n in matched)
        return mean, variance, max(df, 1)

    s_mean, s_var, s_df = side(spec)
    p_mean, p_var, p_df = side(plain)
    if s_mean <= 0 or p_mean <= 0:
        return None
    a, b = s_var / s_mean**2, p_var / p_mean**2
    se = math.sqrt(a + b)
    df = welch_df([(a, s_df), (b, p_df)])
    ratio = s_mean / p_mean
    half = math.hypot(t95(df) * se, math.log1p(SERVED_SYSTEMATIC)) if math.isfinite(se) else math.inf
    n_spec, n_plain = sum(spec[n].n for n in matched), sum(plain[n].n for n in matched)
    return ratio, ratio * math.exp(-half), ratio * math.exp(half), s_mean, p_mean, n_spec, n_plain


def _tokens_per_step(spec: Mapping[int, _Side], running: Iterable[int]) -> float | None:
    generated = sum(spec[n].generated for n in running if n in spec)
    accepted = sum(spec[n].accepted for n in running if n in spec)
    return tokens_per_step_from_totals(generated, accepted) if generated > accepted > 0 else None


def why_not_measured(
    spec: pl.DataFrame, blocks: pl.DataFrame, target: Mapping[str, Any], *, method: str | None,
    draft_model: str | None,
) -> NotMeasured:  # fmt: skip
    """Why an untimed method (its blocks ``spec``) has no served speedup against a plain engine
    among ``blocks``: no plain engine; plain engines of other targets only; no throughput on one
    side; or too few steady intervals at a load both show (with the counts)."""
    plain_all = blocks.filter(pl.col("method").is_null() & (pl.col("num_spec_tokens").fill_null(-1) == 0))
    if plain_all.is_empty():
        return NotMeasured(method, draft_model, Unmeasured.NO_PLAIN)
    same = plain_all
    for key in TARGET:
        if target.get(key) is not None:
            same = same.filter(pl.col(key) == target[key])
    if same.is_empty():
        others = (
            plain_all.group_by(list(TARGET), maintain_order=True)
            .agg(pl.col("num_rows").sum())
            .sort(list(TARGET), nulls_last=True)
        )
        targets = tuple(Target(m, p, d, int(n)) for m, p, d, n in others.iter_rows())
        return NotMeasured(method, draft_model, Unmeasured.PLAIN_OTHER_TARGET, plain_targets=targets)
    mine, plain = _by_running(spec), _by_running(plain_blocks(blocks, target))
    shown = tuple(sorted(mine)), tuple(sorted(plain))
    if not mine or not plain:
        return NotMeasured(
            method, draft_model, Unmeasured.NO_TIMING, running_shown=shown[0], plain_running_shown=shown[1]
        )
    shared = set(mine) & set(plain)
    closest = max(shared, key=lambda n: (min(mine[n].n, plain[n].n), n), default=None)
    return NotMeasured(
        method,
        draft_model,
        Unmeasured.FEW_INTERVALS,
        running=closest,
        intervals=mine[closest].n if closest is not None else 0,
        plain_intervals=plain[closest].n if closest is not None else 0,
        needed=MIN_INTERVALS,
        running_shown=shown[0],
        plain_running_shown=shown[1],
    )


def plain_blocks(blocks: pl.DataFrame, target: Mapping[str, Any]) -> pl.DataFrame:
    """The plain engine's served intervals (no speculative config) on ``target``'s model, platform
    and device."""
    if "throughput_n" not in blocks.columns:
        return blocks.clear()
    frame = blocks.filter(pl.col("method").is_null() & (pl.col("num_spec_tokens").fill_null(-1) == 0))
    frame = frame.filter(pl.col("throughput_n") > 0)
    for key in TARGET:
        if target.get(key) is not None:
            frame = frame.filter(pl.col(key) == target[key])
    return frame


def served_speedups(
    spec: pl.DataFrame,
    plain: pl.DataFrame,
    *,
    method: str | None,
    draft_model: str | None,
    buckets: Iterable[tuple[int, int]],
) -> tuple[ServedSpeedup, ...]:
    """One :class:`ServedSpeedup` per bucket (``(low, high)``) where both engines ran, then the
    overall one (every matched N: ``batch_size_min``/``max`` span them), per k the input ran."""
    out: list[ServedSpeedup] = []
    plain_sides = _by_running(plain)
    if not plain_sides:
        return ()
    for (k,), blocks in spec.filter(pl.col("num_spec_tokens") > 0).group_by(["num_spec_tokens"], maintain_order=True):
        sides = _by_running(blocks)
        matched_all: list[int] = []
        for low, high in buckets:
            running = sorted(n for n in sides if low <= n <= high and sides[n].n >= MIN_INTERVALS)
            running = [n for n in running if n in plain_sides and plain_sides[n].n >= MIN_INTERVALS]
            got = _ratio(sides, plain_sides, running)
            if got is None:
                continue
            matched_all += running
            out.append(_served(method, draft_model, int(k), low, high, running, got, _tokens_per_step(sides, running)))
        if matched_all:
            got = _ratio(sides, plain_sides, matched_all)
            if got is not None:
                low, high = min(matched_all), max(matched_all)
                tokens = _tokens_per_step(sides, matched_all)
                out.append(_served(method, draft_model, int(k), low, high, matched_all, got, tokens, overall=True))
    return tuple(out)


def _served(
    method: str | None, draft_model: str | None, k: int, low: int, high: int, running: list[int],
    got: tuple[float, ...], tokens: float | None, *, overall: bool = False,
) -> ServedSpeedup:  # fmt: skip
    ratio, lo, hi, spec_rate, plain_rate, n_spec, n_plain = got
    return ServedSpeedup(
        method=method,
        draft_model=draft_model,
        num_speculative_tokens=k,
        batch_size_min=low,
        batch_size_max=high,
        running=tuple(running),
        overall=overall,
        speedup=ratio,
        interval=(lo, hi),
        tokens_per_second=spec_rate,
        plain_tokens_per_second=plain_rate,
        intervals=int(n_spec),
        plain_intervals=int(n_plain),
        tokens_per_step=tokens,
        measures=Measures.SERVED,
    )


__all__ = [
    "MIN_INTERVALS",
    "SERVED_LOAD",
    "SERVED_SYSTEMATIC",
    "plain_blocks",
    "served_intervals",
    "served_speedups",
    "why_not_measured",
]
