"""Speedups measured from what servers already print: generation throughput at matched load.

A vLLM server's stats line gives, every interval, the generation throughput it measured and the
requests running at the line (a snapshot); a plain server of the same model printing the same
lines under the same load is the baseline. So at each number of running requests N that both
show, the speedup is measured, not modelled::

    speedup(bucket) = Σ_N w_N · mean_spec(N) / Σ_N w_N · mean_plain(N)

over the N of a power-of-two bucket that both engines ran (each with :data:`MIN_INTERVALS`
intervals or more), weighted by the speculative engine's intervals at N (its traffic). Its 95%
interval is the ratio's, on the log scale, from the spread of the intervals' throughputs
(``var(mean) = Σ w² var/n / (Σ w)²`` per side, Welch–Satterthwaite degrees of freedom). Intervals
whose load changed across them are left out at ingest (``vllm_log._load_changed``: idle time or
the end of a burst inside them).
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
from specobs.records import ServedSpeedup

#: Intervals each side needs at a number of running requests before that N is matched.
MIN_INTERVALS = 3
#: What identifies an engine's target: the plain engine must match on these.
TARGET = ("model", "platform", "device")


@dataclass(frozen=True)
class _Side:
    """Throughput intervals of one engine at one N: count, mean, variance, and token counts."""

    n: int
    mean: float
    variance: float
    generated: float
    accepted: float


def _by_running(blocks: pl.DataFrame) -> dict[int, _Side]:
    """Per running-request count N: the intervals' throughput statistics (from the blocks' sums)."""
    if blocks.is_empty() or "throughput_n" not in blocks.columns:
        return {}
    rows = (
        blocks.filter(pl.col("batch_size").is_not_null() & (pl.col("throughput_n") > 0))
        .group_by("batch_size")
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
    half = t95(df) * se if math.isfinite(se) else math.inf
    n_spec, n_plain = sum(spec[n].n for n in matched), sum(plain[n].n for n in matched)
    return ratio, ratio * math.exp(-half), ratio * math.exp(half), s_mean, p_mean, n_spec, n_plain


def _tokens_per_step(spec: Mapping[int, _Side], running: Iterable[int]) -> float | None:
    generated = sum(spec[n].generated for n in running if n in spec)
    accepted = sum(spec[n].accepted for n in running if n in spec)
    return tokens_per_step_from_totals(generated, accepted) if generated > accepted > 0 else None


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
    )


__all__ = ["MIN_INTERVALS", "plain_blocks", "served_speedups"]
