"""Recommendations: the best method and k per batch-size bucket, where to switch off, and why.

For every method in the input (a method with its draft checkpoint, on one model/platform),
fit the throughput model (``model.py``) and evaluate every k from 0 to ``max_k`` at every
power-of-two batch bucket the input covers. A bucket's k is the one with the highest predicted
throughput; it is "off" (k = 0) unless it beats the plain engine by ``margin``. The overall
recommendation is the (method, k) with the best steps-weighted speedup across the buckets the
input actually ran; with the per-bucket ks it becomes a ready ``--speculative-config`` with a
``num_speculative_tokens_per_batch_size`` table (vLLM ≥ 0.32). Intervals come from a bootstrap
over blocks (consecutive steps of one configuration, ``model.step_blocks``). Without
timing (a plain log), speedups fall back to the per-position Leviathan formula with a stated
cost ratio.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl

from specobs import buckets
from specobs.advice import config_line as speculative
from specobs.advice.band import speedup_band
from specobs.advice.log_speedup import SERVED_LOAD, plain_blocks, served_intervals, served_speedups, why_not_measured
from specobs.advice.model import (
    Acceptance,
    CostModel,
    fit_acceptance,
    fit_acceptance_groups,
    fit_cost,
    predict,
    predict_off,
    step_blocks,
)
from specobs.analysis.cost import decode_sums, steady_state, with_draining
from specobs.dimensions import method_label
from specobs.errors import SpecobsError
from specobs.records import (
    MEASURED_BASES,
    RECOMMEND_DEFAULTS,
    Baseline,
    Basis,
    BucketBasis,
    BucketChoice,
    Measures,
    MethodFacts,
    MethodWin,
    NotMeasured,
    Prediction,
    Recommendation,
    Recommended,
    RunMetadata,
    ServedSpeedup,
    SpeedupBand,
    Target,
    Unmeasured,
)
from specobs.schema import TARGET_LABELS, categorical_labels
from specobs.vllm.spec_config import MODEL_FREE


@dataclass
class MethodFit:
    """A method's fitted model and the data it came from."""

    labels: dict[str, Any]
    acceptance: Acceptance
    cost: CostModel | None
    spec_steps: pl.DataFrame  # blocks (``model.step_blocks``) of its speculative steps
    base_steps: pl.DataFrame | None  # and of a plain engine's steps (no speculative config)
    batch_counts: dict[int, int]  # steps per observed batch size
    cost_ratio: float | None = None  # the user's drafter cost per drafted position (--cost-ratio)
    by_batch: dict[int, Acceptance] = field(default_factory=dict)
    off_steps: pl.DataFrame | None = None  # its own engine's k = 0 steps (drafting off by schedule)
    steady_counts: dict[int, int] = field(default_factory=dict)  # of them, steps not taken while draining

    @property
    def method(self) -> str | None:
        return self.labels.get("method")

    def acceptance_for(self, batch: float) -> Acceptance:
        """Acceptance measured at this batch size (traffic often differs with load), else at the
        nearest measured one within a factor of two, else over all steps."""
        if not self.by_batch:
            return self.acceptance
        nearest = min(self.by_batch, key=lambda b: abs(math.log(b / batch)))
        return self.by_batch[nearest] if 0.5 <= nearest / batch <= 2 else self.acceptance


@dataclass
class Bucket:
    low: int
    high: int
    batch: float  # where the model is evaluated: the median observed batch size, or the bucket's centre
    steps: int


# --- fitting ------------------------------------------------------------------------------------


def fit_methods(
    windows: pl.LazyFrame | pl.DataFrame, *, cost_ratio: float | None = None, method: str | None = None
) -> list[MethodFit]:
    """One fit per (model, method, draft model, platform, device) that drafted.

    ``method`` names the method of speculative rows that carry none (a scrape of vLLM's
    counters has no method label). Warm-up and outlier steps keep their counts but lose their
    timing (``analysis.cost.steady_state``), so the cost fits are trimmed means.
    """
    frame = recommendation_blocks(windows, method=method)
    k0 = frame.filter((pl.col("num_spec_tokens").fill_null(-1) == 0) & pl.col("num_timed_steps").is_not_null())
    plain_all = k0.filter(pl.col("method").is_null())
    off_all = k0.filter(pl.col("method").is_not_null())
    spec_all = frame.filter(pl.col("num_spec_tokens").fill_null(1) > 0)
    fits: list[MethodFit] = []
    if spec_all.is_empty():
        return fits
    for key, spec in spec_all.group_by(list(TARGET_LABELS), maintain_order=True):
        labels: dict[str, Any] = dict(zip(TARGET_LABELS, key, strict=True))
        if labels["method"] in MODEL_FREE:  # vLLM names a model-free drafter's "model" after it (ngram)
            labels["draft_model"] = None
        acc = fit_acceptance(spec)
        if acc is None:
            continue
        plain = _same_platform(plain_all, labels)
        off = _same_platform(off_all, labels, ("method",)) if labels["method"] is not None else None
        timed = spec["num_timed_steps"].drop_nulls().len()
        cost = fit_cost(spec, plain, labels["method"], off) if timed else None
        known = spec.filter(pl.col("batch_size").is_not_null())
        batches = dict(known.group_by("batch_size").agg(pl.col("num_rows").sum()).iter_rows())
        if "draining" in known.columns:
            known = known.filter(~pl.col("draining").fill_null(False))
        steady = dict(known.group_by("batch_size").agg(pl.col("num_rows").sum()).iter_rows())
        fits.append(MethodFit(labels, acc, cost, spec, plain, batches, cost_ratio, _by_batch(spec), off, steady))
    return fits


def recommendation_blocks(windows: pl.LazyFrame | pl.DataFrame, *, method: str | None = None) -> pl.DataFrame:
    """The steady-state step rows of ``windows`` merged into the blocks every fit reads
    (``model.step_blocks`` over :data:`TARGET_LABELS`; blocks are returned as they are). Blocks of the parts
    of an input, concatenated in order, are the whole's: blocks never cross a source."""
    if "num_rows" in windows.lazy().collect_schema().names():
        return windows if isinstance(windows, pl.DataFrame) else windows.collect()
    lazy = categorical_labels(windows)  # lazy: the filter and the merge read only the columns they need
    if "request_id" in lazy.collect_schema().names():
        lazy = lazy.filter(pl.col("request_id").is_null())
    if method is not None:
        lazy = with_method(lazy, method)
    # Served intervals are judged before the trim (they need their neighbours), and kept apart
    # in the blocks by their load (``log_speedup.served_intervals``).
    lazy = served_intervals(lazy)
    # Trimmed once and held: the merge into blocks reads it several times.
    return step_blocks(with_draining(steady_state(lazy)).collect(), (*TARGET_LABELS, "draining", SERVED_LOAD))


def with_method(windows: pl.LazyFrame, method: str) -> pl.LazyFrame:
    """Name the method of rows that drafted (or were configured to) but carry no method label."""
    drafted = (pl.col("num_spec_tokens").fill_null(0) > 0) | (pl.col("num_drafts").fill_null(0) > 0)
    return windows.with_columns(
        method=pl.when(pl.col("method").is_null() & drafted).then(pl.lit(method)).otherwise(pl.col("method"))
    )


#: Drafts a batch size needs before it gets its own acceptance profile.
MIN_DRAFTS_PER_BATCH = 200


def _by_batch(spec: pl.DataFrame) -> dict[int, Acceptance]:
    """Acceptance per batch size that has enough drafts (and only when there are several); steps
    taken while a batch drained do not count (they measure request ends, not that load)."""
    return _by_batch_groups(spec, ()).get((), {})


def _by_batch_groups(spec: pl.DataFrame, by: Sequence[str]) -> dict[tuple, dict[int, Acceptance]]:
    """:func:`_by_batch` per value of the columns ``by``, from one grouped pass."""
    keys = [*by, "batch_size"]
    if "draining" in spec.columns:
        spec = spec.filter(~pl.col("draining").fill_null(False))
    enough = (
        spec.filter(pl.col("batch_size").is_not_null() & pl.col("num_drafts").is_not_null())
        .group_by(keys)
        .agg(pl.col("num_drafts").sum())
        .filter(pl.col("num_drafts") >= MIN_DRAFTS_PER_BATCH)
        .select(keys)
    )
    several = enough.filter(pl.len().over(list(by)) >= 2) if by else enough.filter(pl.len() >= 2)
    out: dict[tuple, dict[int, Acceptance]] = {}
    for key, acc in fit_acceptance_groups(spec.join(several, on=keys, how="semi"), keys).items():
        out.setdefault(key[:-1], {})[int(key[-1])] = acc
    return out


def _same_platform(frame: pl.DataFrame, labels: dict[str, Any], also: Sequence[str] = ()) -> pl.DataFrame | None:
    """Rows of ``frame`` on the same model, platform and device as ``labels`` (and ``also``)."""
    for key in ("model", "platform", "device", *also):
        if labels[key] is not None and not frame.is_empty():
            frame = frame.filter(pl.col(key) == labels[key])
    return frame if not frame.is_empty() else None


def buckets_for(fits: list[MethodFit]) -> list[Bucket]:
    """Power-of-two batch buckets from 1 to the largest batch observed (contiguous, as vLLM's
    table needs), weighted by every step there. Each is evaluated at the median batch size of
    its steps not taken while draining (a load of that size; draining steps only pass through),
    else at its geometric centre."""
    counts: dict[int, int] = {}
    steady: dict[int, int] = {}
    for fit in fits:
        for b, n in fit.batch_counts.items():
            counts[b] = counts.get(b, 0) + n
        for b, n in (fit.steady_counts or fit.batch_counts).items():
            steady[b] = steady.get(b, 0) + n
    largest = max(counts, default=1)
    out = []
    for low, high in buckets.spans(largest, capped=False):
        inside = {b: n for b, n in steady.items() if low <= b <= high and n}
        if inside:
            values = np.repeat(np.array(list(inside.keys()), dtype=float), list(inside.values()))
            batch = float(np.median(values))
        else:
            batch = math.sqrt(low * high)
        out.append(Bucket(low, high, batch, sum(n for b, n in counts.items() if low <= b <= high)))
    return out


# --- evaluating ---------------------------------------------------------------------------------


def _speedup(fit: MethodFit, k: int, batch: float) -> tuple[float, float | None, bool]:
    """(speedup, tokens/s, extrapolated) at k and batch by the cost model; k = 0 is plain decoding."""
    assert fit.cost is not None  # untimed fits get bands, never a point (``recommend``)
    p = predict(fit.acceptance_for(batch), fit.cost, k, batch, fit.method)
    return p.speedup, p.tokens_per_second, p.extrapolated


def _off_speedup(fit: MethodFit, batch: float) -> float:
    """The speculative engine at k = 0 (a schedule's "off" range) against plain decoding: the
    dynamic-schedule tax."""
    assert fit.cost is not None
    return predict_off(fit.cost, batch).speedup


#: Timed decode steps a configuration needs in a bucket before its measured speedup is used.
MIN_MEASURED_STEPS = 20


#: Share of a configuration's measured steps in a bucket taken while batches drained above which
#: its measurement there does not decide (the model does, and the basis says so).
DRAIN_ONLY = 0.9


def _decode_sums(frame: pl.DataFrame | None) -> dict[tuple[int, int], tuple[float, float, int, int]]:
    """(k, batch size) → (generated tokens, step seconds, steps, of them draining) over timed
    decode blocks."""
    if frame is None:
        return {}
    draining = "draining" in frame.columns
    keys = ["num_spec_tokens", "batch_size", *(["draining"] if draining else [])]
    out: dict[tuple[int, int], tuple[float, float, int, int]] = {}
    for row in decode_sums(frame, keys).collect().iter_rows(named=True):
        key = (int(row["num_spec_tokens"] or 0), int(row["batch_size"]))
        generated, seconds, steps, drained = out.get(key, (0.0, 0.0, 0, 0))
        out[key] = (
            generated + float(row["num_generated_tokens"]),
            seconds + float(row["step_seconds"]),
            steps + int(row["steps"]),
            drained + (int(row["steps"]) if draining and row["draining"] else 0),
        )
    return out


def _measured(fit: MethodFit, ks: range, buckets: list[Bucket]) -> tuple[np.ndarray, ...]:
    """Measured speedups [k, bucket] and of the k = 0 steps per bucket (NaN where a configuration
    has fewer than :data:`MIN_MEASURED_STEPS` timed decode steps in the bucket), and for each the
    share of its steps whose plain-decoding time had to come from the model.

    Generated tokens over step seconds of the configuration's steps, against plain decoding
    at the same batch sizes: the plain engine's measured step time where it ran that batch
    size, else the fitted plain step time.
    """
    grid = np.full((len(ks), len(buckets)), np.nan)
    off = np.full(len(buckets), np.nan)
    grid_modelled, off_modelled = np.zeros_like(grid), np.zeros_like(off)
    tokens = np.full_like(grid, np.nan)  # generated tokens per request-step, as measured
    cost = fit.cost
    if cost is None:
        return grid, off, grid_modelled, off_modelled, tokens, np.zeros(grid.shape, dtype=bool)
    plain: dict[int, float] = {}
    for (_, b), (_, seconds, steps, _) in _decode_sums(fit.base_steps).items():
        if steps >= MIN_MEASURED_STEPS:
            plain[b] = seconds / steps
    drained = np.zeros(grid.shape, dtype=bool)
    spec, own_off = _decode_sums(fit.spec_steps), _decode_sums(fit.off_steps)

    def speedup(
        sums: dict[tuple[int, int], tuple[float, float, int, int]], k: int, bucket: Bucket
    ) -> tuple[float, float, float, bool]:
        inside = [(b, v) for (kk, b), v in sums.items() if kk == k and bucket.low <= b <= bucket.high]
        steps = sum(v[2] for _, v in inside)
        if steps < MIN_MEASURED_STEPS:
            return np.nan, 0.0, np.nan, False
        draining = sum(v[3] for _, v in inside) >= DRAIN_ONLY * steps
        generated, seconds = sum(v[0] for _, v in inside), sum(v[1] for _, v in inside)
        plain_seconds = sum(v[2] * plain.get(b, cost.base_step_seconds(b)) for b, v in inside)
        request_steps = sum(v[2] * b for b, v in inside)  # = the plain tokens of as many steps
        modelled = sum(v[2] for b, v in inside if b not in plain) / steps
        ok = seconds and request_steps
        # speedup = tokens per request-step / (step seconds / plain step seconds), exactly.
        value = (generated / seconds) / (request_steps / plain_seconds) if ok else np.nan
        return value, modelled, generated / request_steps if ok else np.nan, draining

    for bi, bucket in enumerate(buckets):
        for k in ks:
            if k:
                grid[k, bi], grid_modelled[k, bi], tokens[k, bi], drained[k, bi] = speedup(spec, k, bucket)
        off[bi], off_modelled[bi], _, _ = speedup(own_off, 0, bucket)
    grid[0, :] = 1.0
    return grid, off, grid_modelled, off_modelled, tokens, drained


def _evaluate(fit: MethodFit, ks: range, buckets: list[Bucket]) -> tuple[np.ndarray, np.ndarray]:
    """Speedups [k, bucket] (k = 0: plain decoding) and of the k = 0 steps per bucket: measured
    where the configuration was measured in the bucket; elsewhere the model, anchored to the
    nearest measured k of the same bucket (scaled by measured / predicted there), so that an
    unmeasured k is compared with measured ones on the same footing."""
    model = np.array([[_speedup(fit, k, b.batch)[0] for b in buckets] for k in ks])
    model_off = np.array([_off_speedup(fit, b.batch) for b in buckets])
    measured, measured_off, _, _, _, drained = _measured(fit, ks, buckets)
    grid = model.copy()
    for bi in range(len(buckets)):
        known = [k for k in ks if k and not np.isnan(measured[k, bi]) and not drained[k, bi]]
        for k in ks:
            if not k:
                continue
            if k in known:
                grid[k, bi] = measured[k, bi]
            elif known:
                nearest = _nearest(known, k)
                grid[k, bi] = model[k, bi] * measured[nearest, bi] / model[nearest, bi]
    return grid, np.where(np.isnan(measured_off), model_off, measured_off)


def _nearest(known: Sequence[int], k: int) -> int:
    """The k of ``known`` closest to ``k``, the larger one on a tie."""
    return min(known, key=lambda m: (abs(m - k), -m))


def _bootstrap(
    fit: MethodFit, ks: range, buckets: list[Bucket], reps: int, seed: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`_evaluate` on fits to resampled blocks: arrays [reps, k, bucket] and [reps, bucket].

    The resamples are stacked (a ``resample`` column) so that the acceptance fits of all of
    them come from one grouped pass; the cost fits run per resample.
    """
    if reps <= 0 or fit.spec_steps.height < 10:
        return None
    rng = np.random.default_rng(seed)
    n = fit.spec_steps.height

    def draw(frame: pl.DataFrame | None) -> list[np.ndarray] | None:
        return None if frame is None else [rng.integers(0, frame.height, frame.height) for _ in range(reps)]

    spec_draws = [rng.integers(0, n, n) for _ in range(reps)]
    base_draws, off_draws = draw(fit.base_steps), draw(fit.off_steps)
    stacked = fit.spec_steps[np.concatenate(spec_draws)].with_columns(resample=pl.Series(np.repeat(np.arange(reps), n)))
    accs = fit_acceptance_groups(stacked, ("resample",))
    by_batch = _by_batch_groups(stacked, ("resample",))
    grids, offs = [], []
    for r in range(reps):
        acc = accs.get((r,))
        if acc is None:
            continue
        spec = stacked.slice(r * n, n)
        base = fit.base_steps[base_draws[r]] if fit.base_steps is not None and base_draws is not None else None
        off = fit.off_steps[off_draws[r]] if fit.off_steps is not None and off_draws is not None else None
        cost = fit_cost(spec, base, fit.method, off) if fit.cost is not None else None
        trial = MethodFit(
            fit.labels,
            acc,
            cost,
            spec,
            base,
            fit.batch_counts,
            fit.cost_ratio,
            by_batch.get((r,), {}) if fit.by_batch else {},
            off,
            fit.steady_counts,
        )
        grid, off_speed = _evaluate(trial, ks, buckets)
        grids.append(grid)
        offs.append(off_speed)
    return (np.array(grids), np.array(offs)) if grids else None


@dataclass
class _Candidate:
    """One configuration that could be recommended: a method with one k, or with a schedule."""

    fit: int  # index into the fits (no speculative config at all is no candidate: ``_choose`` gives None)
    ks: list[int]  # k per bucket (0: drafting off in that range)
    speedups: list[float]  # per bucket
    speedup: float  # traffic-weighted over the buckets
    intervals: list[list[float] | None]
    interval: list[float] | None
    bases: list[BucketBasis]  # per bucket
    beyond: bool = False  # uses a k above the largest measured one (extrapolated acceptance)
    best: list[tuple[int, float]] = field(default_factory=list)  # per bucket: the best k ≥ 1, its speedup

    @property
    def is_schedule(self) -> bool:
        return len(set(self.ks)) > 1


def _basis(measured: tuple[np.ndarray, ...], k: int, bi: int) -> BucketBasis:
    """What k (0: the k = 0 steps) in bucket ``bi`` rests on: measured, measured with the plain
    engine modelled (it did not run most of those batch sizes), or the model."""
    value, modelled = (measured[0][k, bi], measured[2][k, bi]) if k else (measured[1][bi], measured[3][bi])
    if np.isnan(value):
        return BucketBasis.MODEL
    if k and measured[5][k, bi]:
        return BucketBasis.DRAINED
    return BucketBasis.PLAIN_MODELLED if modelled >= 0.5 else BucketBasis.MEASURED


def _weighted(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    return (values * weights).sum(axis=-1) / weights.sum()


def _candidates(
    fi: int, ks: range, grid: np.ndarray, off: np.ndarray, measured: tuple[np.ndarray, ...],
    boot: tuple[np.ndarray, np.ndarray] | None, weights: np.ndarray, margin: float, measured_k: int,
) -> list[_Candidate]:  # fmt: skip
    """Every static k of a fit, and its per-bucket schedules (within the measured k, and over
    every k): in each bucket the best k, or off where off — which costs the k = 0 tax, never
    taken as better than plain decoding — beats it by the margin. A schedule that is off
    everywhere is not a candidate: "no speculative config" is, and pays no tax."""
    out: list[_Candidate] = []
    off = np.minimum(off, 1.0)  # a k=0 step does more than a plain one: faster is process noise
    buckets = range(grid.shape[1])

    def best_ks(limit: int) -> list[int]:
        allowed = range(1, min(limit, len(ks) - 1) + 1)
        return [_best_k(allowed, grid[:, bi]) for bi in buckets]

    top = best_ks(len(ks) - 1)
    best = [(k, float(grid[k, bi])) for bi, k in enumerate(top)]
    options = [[k] * grid.shape[1] for k in range(1, len(ks))]
    for limit in (measured_k, len(ks) - 1):
        if limit < 1:
            continue
        pick = zip(buckets, best_ks(limit), strict=True)
        choice = [k if grid[k, bi] >= off[bi] * (1 + margin) else 0 for bi, k in pick]
        if any(choice) and choice not in options:
            options.append(choice)
    for per_bucket in options:
        speeds = np.array([grid[k, bi] if k else off[bi] for bi, k in enumerate(per_bucket)])
        intervals: list[list[float] | None] = [None] * len(per_bucket)
        interval = None
        if boot is not None:
            bgrid, boff = boot
            boff = np.minimum(boff, 1.0)
            draws = np.stack([bgrid[:, k, bi] if k else boff[:, bi] for bi, k in enumerate(per_bucket)], axis=1)
            intervals = [[float(v) for v in np.percentile(draws[:, bi], [2.5, 97.5])] for bi in range(draws.shape[1])]
            interval = [float(v) for v in np.percentile(_weighted(draws, weights), [2.5, 97.5])]
        bases = [_basis(measured, k, bi) for bi, k in enumerate(per_bucket)]
        speedup = float(_weighted(speeds, weights))
        beyond = max(per_bucket) > measured_k
        out.append(_Candidate(fi, per_bucket, speeds.tolist(), speedup, intervals, interval, bases, beyond, best))
    return out


def _best_k(allowed: range, speedups: np.ndarray) -> int:
    """The k of ``allowed`` with the highest speedup (``speedups`` by k), the smallest on a tie."""
    return max(allowed, key=lambda k: speedups[k])


@dataclass
class _Evaluation:
    """One fit evaluated at every k in every bucket: the grid, what was measured, the bootstrap."""

    fit: MethodFit
    ks: range
    grid: np.ndarray  # estimate [k, bucket]
    off: np.ndarray  # estimate of its k = 0 steps [bucket]
    measured: tuple[np.ndarray, ...]  # see _measured
    boot: tuple[np.ndarray, np.ndarray] | None
    candidates: list[_Candidate]


def traffic_buckets(fits: list[MethodFit]) -> list[Bucket]:
    """The buckets a recommendation is made for (of timed fits: the others get bands), each
    weighted by the traffic steps it saw; without batch sizes every bucket counts once."""
    buckets = buckets_for(fits)
    if not sum(b.steps for b in buckets):
        for b in buckets:
            b.steps = 1
    return buckets


def evaluate(
    fit: MethodFit, index: int, buckets: list[Bucket], *, max_k: int | None, margin: float, bootstrap: int, seed: int
) -> _Evaluation:
    """Step 1: a fit's speedup at every k and bucket (measured where measured), its bootstrap and
    its candidates (every static k and its schedules)."""
    top = max_k if max_k is not None else min(fit.acceptance.measured_k + 2, 16)
    ks = range(0, top + 1)
    grid, off = _evaluate(fit, ks, buckets)
    measured = _measured(fit, ks, buckets)
    boot = _bootstrap(fit, ks, buckets, bootstrap, seed + index)
    if boot is not None:
        boot = _with_model_error(boot, _model_errors(fit, ks, buckets, measured), seed + index)
    weights = np.array([b.steps for b in buckets], dtype=float)
    measured_k = fit.acceptance.measured_k
    mine = _candidates(index, ks, grid, off, measured, boot, weights, margin, measured_k) if top >= 1 else []
    return _Evaluation(fit, ks, grid, off, measured, boot, mine)


#: Relative error of a plain step time estimated without a plain engine (from the k = 0 steps
#: less their drafting, or from verification at one token per request). Measured on the bundled
#: recordings by leaving their plain engine out: the estimated speedups ran 18% low to 50% high.
BASELINE_ERROR = 0.5
#: The model's relative error where the input cannot tell it (fewer than three measured points).
UNKNOWN_MODEL_ERROR = 0.25
#: The least model error assumed however well it fits (the fit's own points flatter it).
MIN_MODEL_ERROR = 0.05


def _model_errors(fit: MethodFit, ks: range, buckets: list[Bucket], measured: tuple[np.ndarray, ...]) -> np.ndarray:
    """The log-scale standard deviation of each estimate's model part, [k, bucket] (k = 0: the
    schedule's k = 0 steps), so that an interval of a modelled number holds the model's error
    and not only sampling: 0 where measured against a measured plain engine; the plain step
    model's leave-one-out error × the share of plain decoding it supplied; the cost model's own
    error against what was measured (its root-mean-square log ratio over the measured blocks)
    where the estimate is the model's; :data:`BASELINE_ERROR` everywhere without a plain engine."""
    assert fit.cost is not None
    value, off_value, plain_share, off_plain_share, _, drained = measured
    model = np.array([[_speedup(fit, k, b.batch)[0] for b in buckets] for k in ks])
    usable = ~np.isnan(value) & ~drained & (plain_share < 0.5)
    usable[0, :] = False
    ratios = np.log(value[usable] / model[usable]) if usable.any() else np.array([])
    model_error = max(float(np.exp(np.sqrt(np.mean(ratios**2))) - 1), MIN_MODEL_ERROR) if ratios.size >= 3 else (
        UNKNOWN_MODEL_ERROR
    )  # fmt: skip
    plain_error = _plain_model_error(fit)
    baseline = 0.0 if fit.cost.baseline == Baseline.PLAIN else BASELINE_ERROR
    sigma = np.zeros_like(value)
    for k in ks:
        for bi in range(len(buckets)):
            v, share = (value[k, bi], plain_share[k, bi]) if k else (off_value[bi], off_plain_share[bi])
            parts = [np.log1p(baseline)]
            if np.isnan(v) or (k and drained[k, bi]):
                parts += [np.log1p(model_error), np.log1p(plain_error)]
            else:
                parts.append(np.log1p(share * plain_error))
            sigma[k, bi] = float(np.sqrt(sum(p * p for p in parts))) / 1.959963984540054
    sigma[0, :] = [sigma[0, bi] if not np.isnan(off_value[bi]) else 0.0 for bi in range(len(buckets))]
    return sigma


def _plain_model_error(fit: MethodFit) -> float:
    """Leave-one-out relative error of the plain step time at the plain engine's interior
    measured batch sizes (each predicted from the others); :data:`UNKNOWN_MODEL_ERROR` with
    fewer than three."""
    sums = _decode_sums(fit.base_steps)
    points = sorted((b, v[1] / v[2], v[2]) for (_, b), v in sums.items() if v[2] >= MIN_MEASURED_STEPS)
    if len(points) < 3:
        return UNKNOWN_MODEL_ERROR if fit.cost is not None and fit.cost.baseline == Baseline.PLAIN else 0.0
    errors = []
    for i in range(1, len(points) - 1):
        rest = [p for j, p in enumerate(points) if j != i]
        x, y, w = (np.array([p[n] for p in rest], dtype=float) for n in range(3))
        line = np.polyfit(x, y, 1, w=np.sqrt(w))
        errors.append(abs(float(np.polyval(line, points[i][0])) / points[i][1] - 1))
    return max(max(errors), MIN_MODEL_ERROR)


def _with_model_error(
    boot: tuple[np.ndarray, np.ndarray], sigma: np.ndarray, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap draws × exp(z · σ): one standard normal z per draw, shared by every k and bucket
    (a model's error is systematic: it moves them together), so each interval and the
    traffic-weighted one hold the model's uncertainty besides the sampling."""
    grids, offs = boot
    z = np.asarray(np.random.default_rng(seed + 7919).standard_normal(grids.shape[0]))
    off_sigma = np.asarray(sigma)[0, :]
    return grids * np.exp(z[:, None, None] * sigma[None, :, :]), offs * np.exp(z[:, None] * off_sigma[None, :])


def _predictions(ev: _Evaluation, buckets: list[Bucket]) -> list[Prediction]:
    """Every k in every bucket of one fit: the model, the measurement, the estimate used."""
    out = []
    fit, measured = ev.fit, ev.measured[0]
    for k in ev.ks:
        for bi, b in enumerate(buckets):
            model_speedup, rate, extrapolated = _speedup(fit, k, b.batch)
            interval = None
            if ev.boot is not None:
                low, high = np.percentile(ev.boot[0][:, k, bi], [2.5, 97.5])
                interval = (float(low), float(high))
            out.append(
                Prediction(
                    method=fit.method,
                    draft_model=fit.labels.get("draft_model"),
                    num_speculative_tokens=k,
                    batch_size=round(b.batch, 2),
                    batch_size_min=b.low,
                    batch_size_max=b.high,
                    tokens_per_second=rate,
                    speedup=model_speedup,
                    measured_speedup=None if np.isnan(measured[k, bi]) or not k else float(measured[k, bi]),
                    estimate=float(ev.grid[k, bi]),
                    basis=_basis(ev.measured, k, bi) if k else BucketBasis.PLAIN_DECODING,
                    interval=interval,
                    extrapolated=extrapolated,
                    steps=b.steps,
                )
            )
    return out


#: A modelled bucket's speedup is said to be anchored (the model alone at this k, scaled to agree
#: with the k measured in the bucket) when the scaling moved it by more than this (relative).
ANCHOR_SAID = 0.005
#: A method's share of request-steps that draft below which not every request-step is taken to
#: draft (its assumptions say the measured share).
ALL_DRAFT = 0.999


def anchored(basis: BucketBasis, speedup: float, model_speedup: float | None) -> bool:
    """The modelled ``speedup`` differs from the model alone (``model_speedup``) by more than
    :data:`ANCHOR_SAID`: it was scaled to agree with a measured k."""
    if basis != BucketBasis.MODEL or not model_speedup:
        return False
    return abs(speedup / model_speedup - 1) > ANCHOR_SAID


def within_noise(interval: Sequence[float] | None) -> bool:
    """A speedup's 95% interval reaches parity (1×): a gain not shown beyond noise."""
    return interval is not None and len(interval) > 0 and interval[0] <= 1.0


def _choice(
    ev: _Evaluation, bi: int, b: Bucket, k: int, speedup: float, interval: list[float] | None, basis: BucketBasis, *,
    method: str | None, best: tuple[int, float] | None, in_schedule: bool,
) -> BucketChoice:  # fmt: skip
    """A bucket's k with the numbers its explanation quotes: for "off", the best k ≥ 1 it was
    judged by. Where that k was measured in the bucket, its factors are the measured ones
    (tokens per request-step, and the step-time ratio they and the measured speedup imply), so
    that they multiply to the printed number; elsewhere the model's."""
    fit = ev.fit
    acc = fit.acceptance_for(b.batch)
    reference_speedup: float | None
    if k:
        reference_k, reference_speedup = k, speedup
    else:
        reference_k = best[0] if best else max(min(acc.measured_k, 16), 1)
        reference_speedup = best[1] if best else (_speedup(fit, reference_k, b.batch)[0] if fit.cost else None)
    reference_basis = _basis(ev.measured, reference_k, bi) if reference_k < len(ev.ks) else BucketBasis.MODEL
    tokens: float | None = acc.tokens_per_request_step(reference_k)
    step_ratio = off_ratio = None
    if fit.cost is not None:
        plain = fit.cost.base_step_seconds(b.batch)
        step_ratio = fit.cost.spec_step_seconds(reference_k, b.batch, acc) / plain
        off_ratio = fit.cost.off_step_seconds(b.batch) / plain
    measured_tokens = ev.measured[4][reference_k, bi] if reference_k < len(ev.ks) else np.nan
    if reference_basis in MEASURED_BASES and reference_speedup and not np.isnan(measured_tokens):
        tokens, step_ratio = float(measured_tokens), float(measured_tokens) / reference_speedup
    model_speedup = _speedup(fit, k, b.batch)[0] if k and fit.cost is not None else None
    return BucketChoice(
        method=method,
        batch_size_min=b.low,
        batch_size_max=b.high,
        num_speculative_tokens=k,
        predicted_speedup=speedup,
        interval=(interval[0], interval[1]) if interval else None,
        basis=basis,
        measured_steps=b.steps,
        reference_k=reference_k,
        reference_speedup=reference_speedup,
        reference_method=fit.method,
        reference_basis=BucketBasis.MEASURED if reference_basis in MEASURED_BASES else BucketBasis.MODEL,
        tokens_per_step=tokens,
        step_ratio=step_ratio,
        off_ratio=off_ratio,
        off_measured=fit.cost is not None and fit.cost.off is not None,
        in_schedule=in_schedule,
        measured_k=acc.measured_k,
        model_speedup=model_speedup,
        anchored=anchored(basis, speedup, model_speedup),
    )


def _facts(fit: MethodFit) -> MethodFacts:
    acc = fit.acceptance
    return MethodFacts(
        method=fit.method,
        timed=fit.cost is not None,
        cost_ratio=None if fit.cost is not None else fit.cost_ratio,
        cost_ratio_source=None,
        model_notes=tuple(fit.cost.notes) if fit.cost is not None else (),
        plain_measured=fit.cost is not None and fit.cost.baseline == Baseline.PLAIN,
        drafts_per_request_step=acc.drafts_per_request_step,
        drafts_per_request_step_by_k=tuple(acc.drafts_per_request_step_by_k),
        measured_k=acc.measured_k,
        conditional_tail=acc.conditional_tail,
        conditional_tail_low=acc.conditional_tail_low,
        conditional_tail_high=acc.conditional_tail_high,
        partial_drafting=acc.drafts_per_request_step < ALL_DRAFT,
    )


def recommend(
    windows: pl.LazyFrame | pl.DataFrame,
    *,
    max_k: int | None = None,
    margin: float = RECOMMEND_DEFAULTS.margin,
    cost_ratio: float | None = None,
    bootstrap: int = RECOMMEND_DEFAULTS.bootstrap,
    seed: int = 0,
    method: str | None = None,
    model: str | None = None,
    metadata: Sequence[RunMetadata] = (),
    check_config: bool = True,
) -> Recommendation | None:
    """Fit, evaluate and choose (see the module docstring); None when nothing drafted.

    The candidates are: no speculative config at all (1×), every method at every static k,
    and every method with a per-bucket schedule; each is scored by its own traffic-weighted
    predicted speedup, and the headline is the best one that beats plain decoding by
    ``margin`` (a schedule only when it beats that method's best static k by the margin too).

    Candidates compete only on one target (model, platform, device): the one named by
    ``model``, else the one with the most speculative traffic; the others are listed in
    ``other_targets``. :class:`SpecobsError` when ``model`` is not in the input.

    The ``--speculative-config`` carries what the chosen method's engines ran with, from the
    input's run ``metadata`` (``Ingested.metadata``), and is checked against the installed vLLM
    unless ``check_config`` is False (:mod:`specobs.advice.config_line`).
    """
    frame = recommendation_blocks(windows, method=method)
    fits = fit_methods(frame, cost_ratio=cost_ratio)
    if not fits:
        return None
    fits, target, others = _one_target(fits, model)
    timed = [f for f in fits if f.cost is not None]
    untimed = [f for f in fits if f.cost is None]
    bands = tuple(
        speculative.complete_band(_band(f, max_k), target, metadata, check_config=check_config) for f in untimed
    )
    served = _served(frame, untimed)
    unmeasured = _why_not_measured(frame, untimed, served)
    if not timed:
        facts = tuple(_facts(f) for f in fits)
        if served:
            found = _from_served(untimed, served, margin)
            found = replace(
                found, methods=facts, target=target, other_targets=others, bands=bands, served=served,
                not_measured=unmeasured,
            )  # fmt: skip
            return speculative.complete(found, metadata, check_config=check_config)
        return Recommendation(
            recommended=_not_measured(fits),
            by_batch_size=(),
            predicted=(),
            methods=facts,
            target=target,
            other_targets=others,
            bands=bands,
            not_measured=unmeasured,
        )
    buckets = traffic_buckets(timed)
    evaluations = [
        evaluate(fit, fi, buckets, max_k=max_k, margin=margin, bootstrap=bootstrap, seed=seed)
        for fi, fit in enumerate(timed)
    ]
    chosen = _choose([c for ev in evaluations for c in ev.candidates], margin)
    result = _result(evaluations, buckets, chosen)
    untimed_facts = tuple(_facts(f) for f in fits if f.cost is None)
    result = replace(
        result,
        target=target,
        other_targets=others,
        bands=bands,
        served=served,
        not_measured=unmeasured,
        methods=result.methods + untimed_facts,
    )
    return speculative.complete(result, metadata, check_config=check_config)


def _served(frame: pl.DataFrame, fits: list[MethodFit]) -> tuple[ServedSpeedup, ...]:
    """Each untimed fit's servers against a plain server of its target, where both printed
    their throughput (``served``)."""
    if not fits:
        return ()
    buckets = [(b.low, b.high) for b in buckets_for(fits)]
    out: list[ServedSpeedup] = []
    for fit in fits:
        plain = plain_blocks(frame, fit.labels)
        draft = fit.labels.get("draft_model")
        out += served_speedups(fit.spec_steps, plain, method=fit.method, draft_model=draft, buckets=buckets)
    return tuple(out)


def _why_not_measured(
    frame: pl.DataFrame, fits: list[MethodFit], served: tuple[ServedSpeedup, ...]
) -> tuple[NotMeasured, ...]:
    """For each untimed fit without a served speedup, what the input lacks to measure it."""
    measured = {(s.method, s.draft_model) for s in served}
    out = []
    for fit in fits:
        draft = fit.labels.get("draft_model")
        if (fit.method, draft) in measured:
            continue
        steps = fit.spec_steps.filter(pl.col("num_timed_steps").is_not_null())
        timed = int(steps.filter(pl.col("step_seconds").is_not_null())["num_timed_steps"].sum())
        if timed:  # timed whole: the verify time is what is missing, not timing
            verified = int(steps.filter(pl.col("verify_seconds").is_not_null())["num_timed_steps"].sum())
            reason = NotMeasured(fit.method, draft, Unmeasured.NO_VERIFY_TIMING, timed_steps=timed,
                                 verify_timed_steps=verified)  # fmt: skip
            out.append(reason)
            continue
        out.append(why_not_measured(fit.spec_steps, frame, fit.labels, method=fit.method, draft_model=draft))
    return tuple(out)


def _from_served(fits: list[MethodFit], served: tuple[ServedSpeedup, ...], margin: float) -> Recommendation:
    """The recommendation when only serving throughput was measured: the configuration that ran
    fastest against plain (as it ran: its k, no schedule), or none when none beat plain by
    ``margin``; each bucket as measured."""
    best = max((s for s in served if s.overall), key=lambda s: s.speedup)
    fit = next(f for f in fits if f.method == best.method and f.labels.get("draft_model") == best.draft_model)
    k = best.num_speculative_tokens if best.speedup >= 1 + margin else 0
    same = (best.method, best.draft_model, best.num_speculative_tokens)
    rows = [s for s in served if not s.overall and (s.method, s.draft_model, s.num_speculative_tokens) == same]
    speculative = k > 0
    recommended = Recommended(
        method=fit.method if speculative else None,
        draft_model=fit.labels.get("draft_model") if speculative else None,
        num_speculative_tokens=k,
        schedule=None,
        predicted_speedup=best.speedup if speculative else 1.0,
        interval=best.interval if speculative else None,
        speculative_config=_speculative_config(fit, k, None) if speculative else None,
        baseline=Baseline.PLAIN,
        basis=Basis.MEASURED,
        within_noise=speculative and within_noise(best.interval),
        measures=Measures.SERVED,
    )
    return Recommendation(
        recommended=recommended, by_batch_size=tuple(_served_choice(s, k) for s in rows), predicted=()
    )


def _served_choice(s: ServedSpeedup, k: int) -> BucketChoice:
    """A bucket of a served measurement as a :class:`BucketChoice` whose factors (tokens per
    request-step, and the step-time ratio they imply) multiply to the measured speedup."""
    tokens = s.tokens_per_step
    return BucketChoice(
        method=s.method if k else None,
        batch_size_min=s.batch_size_min,
        batch_size_max=s.batch_size_max,
        num_speculative_tokens=k,
        predicted_speedup=s.speedup if k else 1.0,
        interval=s.interval if k else None,
        basis=BucketBasis.MEASURED if k else BucketBasis.PLAIN_DECODING,
        measured_steps=s.intervals,
        reference_k=s.num_speculative_tokens,
        reference_method=s.method,
        reference_speedup=s.speedup,
        reference_basis=BucketBasis.MEASURED,
        tokens_per_step=tokens,
        step_ratio=tokens / s.speedup if tokens else None,
        measured_k=s.num_speculative_tokens,
    )


def _band(fit: MethodFit, max_k: int | None) -> SpeedupBand:
    top = max_k if max_k is not None else min(fit.acceptance.measured_k + 2, 16)
    ran = fit.spec_steps["num_spec_tokens"].max()
    return speedup_band(
        fit.acceptance,
        method=fit.method,
        draft_model=fit.labels.get("draft_model"),
        ks=range(0, top + 1),
        ran_k=int(ran) if isinstance(ran, int) else None,
        cost_ratio=fit.cost_ratio,
    )


def _not_measured(fits: list[MethodFit]) -> Recommended:
    """No recommendation: nothing was measured (why: ``Recommendation.not_measured``; what can
    be said instead: ``bands``)."""
    return Recommended(None, None, 0, None, None, None, None, Baseline.NONE, basis=Basis.NOT_MEASURED)


def _target_of(fit: MethodFit) -> tuple[str | None, str | None, str | None]:
    return fit.labels.get("model"), fit.labels.get("platform"), fit.labels.get("device")


def _one_target(fits: list[MethodFit], model: str | None) -> tuple[list[MethodFit], Target, tuple[Target, ...]]:
    """The fits of one target (``model``'s, else the busiest), that target, and the others."""
    groups: dict[tuple[str | None, str | None, str | None], list[MethodFit]] = {}
    for fit in fits:
        groups.setdefault(_target_of(fit), []).append(fit)
    targets = [Target(*key, steps=sum(sum(f.batch_counts.values()) for f in group)) for key, group in groups.items()]
    targets.sort(key=lambda t: (-t.steps, str(t.model), str(t.platform), str(t.device)))
    wanted = [t for t in targets if model is None or t.model == model]
    if not wanted:
        names = ", ".join(sorted({str(t.model) for t in targets}))
        raise SpecobsError(f"no speculative engine of model {model!r} in the input (models: {names})")
    chosen = wanted[0]
    return groups[(chosen.model, chosen.platform, chosen.device)], chosen, tuple(t for t in targets if t != chosen)


def _result(evaluations: list[_Evaluation], buckets: list[Bucket], chosen: _Candidate | None) -> Recommendation:
    """Step 3: the chosen candidate (or none) as a :class:`Recommendation`."""
    fits = [ev.fit for ev in evaluations]
    best = {fi: ev.candidates[0].best for fi, ev in enumerate(evaluations) if ev.candidates}
    if chosen is None:  # off overall: each bucket explained by the best method's best k there
        fi = max(best, key=lambda i: max(v for _, v in best[i]), default=0)
        choices = [
            _choice(
                evaluations[fi],
                bi,
                b,
                0,
                1.0,
                None,
                BucketBasis.PLAIN_DECODING,
                method=None,
                best=top,
                in_schedule=False,
            )
            for bi, (b, top) in enumerate(zip(buckets, best.get(fi, [None] * len(buckets)), strict=True))
        ]
        judged = [c for ev in evaluations for c in ev.candidates]
        best_tried = max(judged, key=lambda c: c.speedup, default=None)
        basis = _overall_basis(best_tried.bases, fits) if best_tried else Basis.MODELLED
        recommended = Recommended(
            None, None, 0, None, 1.0, None, None, _baseline(fits), basis=basis, measures=Measures.DECODE
        )
    else:
        fit = fits[chosen.fit]
        choices = [
            _choice(evaluations[chosen.fit], bi, b, k, v, iv, basis, method=fit.method, best=top, in_schedule=True)
            for bi, (b, k, v, iv, basis, top) in enumerate(
                zip(buckets, chosen.ks, chosen.speedups, chosen.intervals, chosen.bases, chosen.best, strict=True)
            )
        ]
        per_bucket = merged_schedule((b.low, b.high, k) for b, k in zip(buckets, chosen.ks, strict=True))
        schedule = per_bucket if chosen.is_schedule else None
        k = max(chosen.ks)
        recommended = Recommended(
            method=fit.method,
            draft_model=fit.labels.get("draft_model"),
            num_speculative_tokens=k,
            schedule=schedule,
            predicted_speedup=chosen.speedup,
            interval=(chosen.interval[0], chosen.interval[1]) if chosen.interval else None,
            speculative_config=_speculative_config(fit, k, schedule),
            baseline=_baseline([fit]),
            basis=_overall_basis(chosen.bases, [fit]),
            within_noise=within_noise(chosen.interval),
            measures=Measures.DECODE,
        )
    return Recommendation(
        recommended=recommended,
        by_batch_size=tuple(choices),
        predicted=tuple(p for ev in evaluations for p in _predictions(ev, buckets)),
        method_comparison=tuple(_comparison(fits, buckets, best)),
        methods=tuple(_facts(f) for f in fits),
        unknown_method=chosen is not None and recommended.method is None,
    )


def merged_schedule(rows: Iterable[tuple[int, int, int]]) -> tuple[tuple[int, int, int], ...]:
    """``(low, high, k)`` ranges with equal neighbours merged: ``[[1,1,5],[2,3,5],[4,7,3]]`` →
    ``[[1,3,5],[4,7,3]]`` (the same table for vLLM, said once)."""
    out: list[tuple[int, int, int]] = []
    for low, high, k in rows:
        if out and out[-1][2] == k and out[-1][1] + 1 == low:
            out[-1] = (out[-1][0], high, k)
        else:
            out.append((low, high, k))
    return tuple(out)


def _overall_basis(bases: Sequence[BucketBasis], fits: Sequence[MethodFit]) -> Basis:
    """ "measured" when every bucket was measured against a measured plain engine, else "modelled"."""
    plain = all(f.cost is not None and f.cost.baseline == Baseline.PLAIN for f in fits)
    return Basis.MEASURED if plain and all(b == BucketBasis.MEASURED for b in bases) else Basis.MODELLED


def _choose(candidates: list[_Candidate], margin: float) -> _Candidate | None:
    """Step 2: the best candidate beating plain decoding by ``margin``. A schedule must also beat
    its method's best static k by the margin, and a candidate that needs a k above the measured
    ones (extrapolated acceptance) must beat the best within the measured range by the margin:
    a simpler, measured config wins a tie."""

    def best_of(pool: list[_Candidate]) -> _Candidate | None:
        static = [c for c in pool if not c.is_schedule]
        best = max(static, key=lambda c: c.speedup, default=None)
        for c in pool:
            if not c.is_schedule:
                continue
            own = max((s.speedup for s in static if s.fit == c.fit), default=1.0)
            if c.speedup >= own * (1 + margin) and (best is None or c.speedup > best.speedup):
                best = c
        return best

    best = best_of([c for c in candidates if not c.beyond])
    further = best_of(candidates)
    if further is not None and (best is None or further.speedup >= best.speedup * (1 + margin)):
        best = further
    if best is None or best.speedup < 1 + margin:
        return None
    return best


def _baseline(fits: list[MethodFit]) -> Baseline:
    """What the speedups are against: a measured plain engine, or an estimate (and which)."""
    kinds = {f.cost.baseline if f.cost is not None else Baseline.NONE for f in fits}
    if kinds == {Baseline.PLAIN}:
        return Baseline.PLAIN
    return next(k for k in sorted(kinds) if k != Baseline.PLAIN)


def _speculative_config(fit: MethodFit, k: int, schedule: Sequence[Sequence[int]] | None) -> str | None:
    """The config from the fit's labels alone (``recommend`` completes it from the run metadata)."""
    if fit.method is None:
        return None  # never a config with "method": null
    return speculative.config_for(fit.method, fit.labels.get("draft_model"), k, schedule).text


def _comparison(
    fits: list[MethodFit], buckets: list[Bucket], best: dict[int, list[tuple[int, float]]]
) -> list[MethodWin]:
    """Which method wins in each bucket (each at its best k there), when there are several."""
    if len(best) < 2:
        return []
    out = []
    for bi, b in enumerate(buckets):
        ranked = sorted(best, key=lambda fi: -best[fi][bi][1])
        winner = fits[ranked[0]]
        out.append(
            MethodWin(
                batch_size_min=b.low,
                batch_size_max=b.high,
                winner=winner.method,
                draft_model=winner.labels.get("draft_model"),
                num_speculative_tokens=best[ranked[0]][bi][0],
                speedups={_name(fits[fi]): best[fi][bi][1] for fi in ranked},
                labels={k: v for k, v in winner.labels.items() if k in ("platform", "device", "model")},
            )
        )
    return out


def _name(fit: MethodFit) -> str:
    return method_label(fit.method, fit.labels.get("draft_model"))


def traffic_speedup(rec: Recommendation, method: str | None, k: int) -> float | None:
    """The traffic-weighted (steps in each bucket) speedup of ``method`` at a static ``k``, from the
    estimates the recommendation compares; None when it was not evaluated."""
    rows = [p for p in rec.predicted if p.method == method and p.num_speculative_tokens == k]
    weight = sum(p.steps for p in rows)
    if not rows:
        return None
    if not weight:
        return sum(p.estimate for p in rows) / len(rows)
    return sum(p.estimate * p.steps for p in rows) / weight


__all__ = [
    "Recommendation",
    "evaluate",
    "fit_methods",
    "recommend",
    "recommendation_blocks",
    "traffic_buckets",
    "traffic_speedup",
    "with_method",
]
