"""Recommendations: the best method and k per batch-size bucket, where to switch off, and why.

For every method in the input (a method with its draft checkpoint, on one model/platform),
fit the throughput model (``model.py``) and evaluate every k from 0 to ``max_k`` at every
power-of-two batch bucket the input covers. A bucket's k is the one with the highest predicted
throughput; it is "off" (k = 0) unless it beats the plain engine by ``margin``. The overall
recommendation is the (method, k) with the best steps-weighted speedup across the buckets the
input actually ran; with the per-bucket ks it becomes a ready ``--speculative-config`` with a
``num_speculative_tokens_per_batch_size`` table (vLLM ≥ 0.32). Intervals come from a bootstrap
over cells (blocks of consecutive steps of one configuration, see ``model.cells``). Without
timing (a plain log), speedups fall back to the per-position Leviathan formula with a stated
cost ratio.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from specobs.tuning import leviathan
from specobs.tuning.model import (
    Acceptance,
    CostModel,
    cells,
    fit_acceptance,
    fit_acceptance_groups,
    fit_cost,
    predict,
)

LABELS = ("model", "method", "draft_model", "platform", "device")


@dataclass
class MethodFit:
    """A method's fitted model and the data it came from."""

    labels: dict[str, Any]
    acceptance: Acceptance
    cost: CostModel | None
    spec_steps: pl.DataFrame  # cells (``model.cells``) of its speculative steps
    base_steps: pl.DataFrame | None  # and of its baseline's k = 0 steps
    batch_counts: dict[int, int]  # steps per observed batch size
    cost_ratio: tuple[float, str] | None = None
    by_batch: dict[int, Acceptance] = field(default_factory=dict)

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


@dataclass
class Recommendation:
    """What ``specobs recommend`` returns (see ``to_dict`` for the JSON contract)."""

    recommended: dict[str, Any]
    by_batch_size: list[dict[str, Any]]
    predicted: list[dict[str, Any]]
    assumptions: list[str]
    explanations: list[str] = field(default_factory=list)
    comparison: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "recommended": self.recommended,
            "by_batch_size": self.by_batch_size,
            "predicted": self.predicted,
            "assumptions": self.assumptions,
            "explanations": self.explanations,
            "method_comparison": self.comparison,
        }


# --- fitting ------------------------------------------------------------------------------------


def fit_methods(windows: pl.LazyFrame | pl.DataFrame, *, cost_ratio: float | None = None) -> list[MethodFit]:
    """One fit per (model, method, draft model, platform, device) that drafted."""
    lazy = windows.lazy()  # lazy: the filter and the merge read only the columns they need
    if "request_id" in lazy.collect_schema().names():
        lazy = lazy.filter(pl.col("request_id").is_null())
    frame = cells(lazy, LABELS)
    base_all = frame.filter((pl.col("num_spec_tokens").fill_null(-1) == 0) & pl.col("num_timed_steps").is_not_null())
    spec_all = frame.filter(pl.col("num_spec_tokens").fill_null(1) > 0)
    fits: list[MethodFit] = []
    if spec_all.is_empty():
        return fits
    for labels, spec in spec_all.group_by(list(LABELS), maintain_order=True):
        labels = dict(zip(LABELS, labels, strict=True))
        if labels["draft_model"] == labels["method"]:  # older captures: vLLM names ngram's "model" ngram
            labels["draft_model"] = None
        acc = fit_acceptance(spec)
        if acc is None:
            continue
        base = _base_steps(base_all, labels)
        cost = fit_cost(spec, base, labels["method"]) if spec["num_timed_steps"].drop_nulls().len() else None
        counts = spec.filter(pl.col("batch_size").is_not_null()).group_by("batch_size").agg(pl.col("num_rows").sum())
        fit = MethodFit(labels, acc, cost, spec, base, dict(counts.iter_rows()), by_batch=_by_batch(spec))
        if cost is None:
            fit.cost_ratio = leviathan.cost_ratio_for(labels["method"], cost_ratio)
        fits.append(fit)
    return fits


#: Drafts a batch size needs before it gets its own acceptance profile.
MIN_DRAFTS_PER_BATCH = 200


def _by_batch(spec: pl.DataFrame) -> dict[int, Acceptance]:
    """Acceptance per batch size that has enough drafts (and only when there are several)."""
    return _by_batch_groups(spec, ()).get((), {})


def _by_batch_groups(spec: pl.DataFrame, by: Sequence[str]) -> dict[tuple, dict[int, Acceptance]]:
    """:func:`_by_batch` per value of the columns ``by``, from one grouped pass."""
    keys = [*by, "batch_size"]
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


def _base_steps(base_all: pl.DataFrame, labels: dict[str, Any]) -> pl.DataFrame | None:
    """k = 0 steps for a method's baseline: its own engine's (drafting switched off by a
    batch-size table: same process, same overheads) when there are any, else those of a plain
    engine on the same model, platform and device."""
    base = base_all
    for key in ("model", "platform", "device"):
        if labels[key] is not None and not base.is_empty():
            base = base.filter(pl.col(key) == labels[key])
    own = base.filter(pl.col("method") == labels["method"]) if labels["method"] is not None else base.clear()
    chosen = own if not own.is_empty() else base.filter(pl.col("method").is_null())
    if chosen.is_empty():
        chosen = base
    return chosen if not chosen.is_empty() else None


def buckets_for(fits: list[MethodFit]) -> list[Bucket]:
    """Power-of-two batch buckets from 1 to the largest batch observed (contiguous, as vLLM's table needs)."""
    counts: dict[int, int] = {}
    for fit in fits:
        for b, n in fit.batch_counts.items():
            counts[b] = counts.get(b, 0) + n
    largest = max(counts, default=1)
    out = []
    low = 1
    while low <= largest:
        high = low * 2 - 1
        inside = {b: n for b, n in counts.items() if low <= b <= high}
        if inside:
            values = np.repeat(np.array(list(inside.keys()), dtype=float), list(inside.values()))
            batch = float(np.median(values))
        else:
            batch = math.sqrt(low * high)
        out.append(Bucket(low, high, batch, sum(inside.values())))
        low *= 2
    return out


# --- evaluating ---------------------------------------------------------------------------------


def _speedup(fit: MethodFit, k: int, batch: float) -> tuple[float, float | None, bool]:
    """(speedup, tokens/s or None, extrapolated) at k and batch."""
    acc = fit.acceptance_for(batch)
    if fit.cost is not None:
        p = predict(acc, fit.cost, k, batch, fit.method)
        return p.speedup, p.tokens_per_second, p.extrapolated
    ratio = fit.cost_ratio[0] if fit.cost_ratio else leviathan.FALLBACK_COST_RATIO
    tokens = acc.tokens_per_request_step(k)
    scored = acc.drafts_per_request_step * acc.fill * k
    return tokens / (scored * ratio + 1), None, k > acc.measured_k


def _bootstrap(fit: MethodFit, ks: range, batches: list[float], reps: int, seed: int) -> np.ndarray | None:
    """Speedups for (k, batch) from fits on resampled cells: array [reps, len(ks), len(batches)].

    The resamples are stacked (a ``resample`` column) so that the acceptance fits of all of
    them come from one grouped pass; the cost fits run per resample.
    """
    if reps <= 0 or fit.spec_steps.height < 10:
        return None
    rng = np.random.default_rng(seed)
    n = fit.spec_steps.height
    spec_draws, base_draws = [], []
    for _ in range(reps):
        spec_draws.append(rng.integers(0, n, n))
        if fit.base_steps is not None:
            base_draws.append(rng.integers(0, fit.base_steps.height, fit.base_steps.height))
    stacked = fit.spec_steps[np.concatenate(spec_draws)].with_columns(resample=pl.Series(np.repeat(np.arange(reps), n)))
    accs = fit_acceptance_groups(stacked, ("resample",))
    by_batch = _by_batch_groups(stacked, ("resample",))
    out = []
    for r in range(reps):
        acc = accs.get((r,))
        if acc is None:
            continue
        spec = stacked.slice(r * n, n)
        base = fit.base_steps[base_draws[r]] if fit.base_steps is not None else None
        cost = fit_cost(spec, base, fit.method) if fit.cost is not None else None
        trial = MethodFit(fit.labels, acc, cost, spec, base, fit.batch_counts, fit.cost_ratio, by_batch.get((r,), {}))
        out.append([[_speedup(trial, k, b)[0] for b in batches] for k in ks])
    return np.array(out) if out else None


def recommend(
    windows: pl.LazyFrame | pl.DataFrame,
    *,
    max_k: int | None = None,
    margin: float = 0.02,
    cost_ratio: float | None = None,
    bootstrap: int = 30,
    seed: int = 0,
) -> Recommendation | None:
    """Fit, evaluate and choose (see the module docstring); None when nothing drafted."""
    fits = fit_methods(windows, cost_ratio=cost_ratio)
    if not fits:
        return None
    buckets = buckets_for(fits)
    timed = all(f.cost is not None for f in fits)
    if not timed:
        buckets = [Bucket(1, max(b.high for b in buckets), buckets[0].batch, sum(b.steps for b in buckets))]
    assumptions: list[str] = []
    predicted: list[dict[str, Any]] = []
    table: dict[tuple[int, int], dict[str, Any]] = {}  # (fit index, bucket index) → best
    overall: list[tuple[float, int, int]] = []  # (weighted speedup, fit index, k)
    total_steps = sum(b.steps for b in buckets)
    if not total_steps:  # no batch sizes observed: every bucket counts once
        for b in buckets:
            b.steps = 1
        total_steps = len(buckets)
    intervals: dict[tuple[int, int, int], list[float] | None] = {}  # (fit, k, bucket) → [low, high]
    for fi, fit in enumerate(fits):
        top = max_k if max_k is not None else min(fit.acceptance.measured_k + 2, 16)
        ks = range(0, top + 1)
        grid = {(k, bi): _speedup(fit, k, b.batch) for k in ks for bi, b in enumerate(buckets)}
        boot = _bootstrap(fit, ks, [b.batch for b in buckets], bootstrap, seed + fi)
        for (k, bi), (speed, rate, extrapolated) in grid.items():
            interval = None
            if boot is not None:
                interval = [float(v) for v in np.percentile(boot[:, k, bi], [2.5, 97.5])]
            intervals[(fi, k, bi)] = interval
            predicted.append(
                {
                    "method": fit.method,
                    "draft_model": fit.labels.get("draft_model"),
                    "num_speculative_tokens": k,
                    "batch_size": round(buckets[bi].batch, 2),
                    "batch_size_min": buckets[bi].low,
                    "batch_size_max": buckets[bi].high,
                    "tokens_per_second": rate,
                    "speedup": speed,
                    "interval": interval,
                    "extrapolated": extrapolated,
                }
            )
        for bi, bucket in enumerate(buckets):
            best_k = max(ks, key=lambda k, bi=bi: grid[(k, bi)][0])
            speed = grid[(best_k, bi)][0]
            if best_k and speed < 1 + margin:
                best_k, speed = 0, 1.0
            table[(fi, bi)] = {"k": best_k, "speedup": speed, "interval": intervals[(fi, best_k, bi)], "bucket": bucket}
        for k in ks:
            weighted = sum(grid[(k, bi)][0] * b.steps for bi, b in enumerate(buckets)) / total_steps
            overall.append((weighted, fi, k))
        assumptions.extend(_assumptions(fit))
    best_speed, best_fi, best_k = max(overall)
    off = best_k == 0 or best_speed < 1 + margin
    fit = fits[best_fi]
    per_bucket = [table[(best_fi, bi)] for bi in range(len(buckets))]
    by_batch = [
        {
            "method": fit.method,
            "batch_size_min": t["bucket"].low,
            "batch_size_max": t["bucket"].high,
            "num_speculative_tokens": t["k"],
            "predicted_speedup": t["speedup"],
            "interval": t["interval"],
            "measured_steps": t["bucket"].steps,
        }
        for t in per_bucket
    ]
    interval = None
    if not off and all(intervals[(best_fi, best_k, bi)] for bi in range(len(buckets))):
        low = sum(intervals[(best_fi, best_k, bi)][0] * b.steps for bi, b in enumerate(buckets)) / total_steps
        high = sum(intervals[(best_fi, best_k, bi)][1] * b.steps for bi, b in enumerate(buckets)) / total_steps
        interval = [low, high]
    recommended = {
        "method": None if off else fit.method,
        "draft_model": None if off else fit.labels.get("draft_model"),
        "num_speculative_tokens": 0 if off else best_k,
        "predicted_speedup": 1.0 if off else best_speed,
        "interval": None if off else interval,
        "speculative_config": None if off else _speculative_config(fit, best_k, per_bucket if timed else None),
    }
    explanations = [_explain(fit, t) for t in per_bucket]
    if off:
        explanations.insert(
            0, "No method and k beats plain decoding by the margin on this traffic: run without speculation."
        )
    comparison = _comparison(fits, buckets, table)
    return Recommendation(recommended, by_batch, predicted, sorted(set(assumptions)), explanations, comparison)


def _speculative_config(fit: MethodFit, k: int, per_bucket: list[dict] | None) -> str:
    config: dict[str, Any] = {"method": fit.method, "num_speculative_tokens": k}
    if fit.labels.get("draft_model"):
        config["model"] = fit.labels["draft_model"]
    if per_bucket and len({t["k"] for t in per_bucket}) > 1:
        top = max(t["k"] for t in per_bucket)
        config["num_speculative_tokens"] = max(k, top)
        config["num_speculative_tokens_per_batch_size"] = [
            [t["bucket"].low, t["bucket"].high, t["k"]] for t in per_bucket
        ]
    return json.dumps(config)


def _assumptions(fit: MethodFit) -> list[str]:
    name = fit.method or "unknown method"
    out = []
    if fit.cost is None:
        _, source = fit.cost_ratio or (leviathan.FALLBACK_COST_RATIO, "generic default")
        out.append(
            f"{name}: no step timing in the input, speedups use the per-position Leviathan formula with {source}"
        )
    else:
        out += [f"{name}: {note}" for note in fit.cost.notes]
    acc = fit.acceptance
    if acc.drafts_per_request_step < 0.999:
        out.append(f"{name}: {acc.drafts_per_request_step:.0%} of request-steps draft (measured), kept at every k")
    out.append(
        f"{name}: acceptance beyond k={acc.measured_k} is extrapolated with conditional rate "
        f"{acc.conditional_tail:.2f} ({acc.conditional_tail_low:.2f}–{acc.conditional_tail_high:.2f})"
    )
    return out


def _explain(fit: MethodFit, t: dict[str, Any]) -> str:
    b = t["bucket"]
    where = f"batch {b.low}" if b.low == b.high else f"batch {b.low}–{b.high}"
    name = fit.method or "speculation"
    acc = fit.acceptance_for(b.batch)
    if t["k"] == 0:
        k = acc.measured_k
        tokens = acc.tokens_per_request_step(k)
        if fit.cost is not None:
            spec = fit.cost.spec_step_seconds(k, b.batch, acc)
            plain = fit.cost.base_step_seconds(b.batch)
            return (
                f"At {where}, a {name} step with k={k} costs {spec / plain:.1f}× a plain step and yields only "
                f"{tokens:.2f} tokens: switch speculation off here."
            )
        return f"At {where}, {name} does not pay: {tokens:.2f} tokens per step do not cover the drafting cost."
    tokens = acc.tokens_per_request_step(t["k"])
    interval = t.get("interval")
    ci = f" ({interval[0]:.2f}–{interval[1]:.2f})" if interval else ""
    text = (
        f"At {where}, {name} with k={t['k']} is predicted {t['speedup']:.2f}×{ci} plain decoding: "
        f"{tokens:.2f} tokens per step"
    )
    if fit.cost is not None:
        spec = fit.cost.spec_step_seconds(t["k"], b.batch, acc)
        plain = fit.cost.base_step_seconds(b.batch)
        text += f" for a step {spec / plain:.2f}× as long as a plain one"
    if t["k"] > acc.measured_k:
        text += f" (k beyond the measured {acc.measured_k}: extrapolated)"
    return text + "."


def _comparison(fits: list[MethodFit], buckets: list[Bucket], table) -> list[dict[str, Any]]:
    """Which method wins in each bucket, when there are several."""
    if len(fits) < 2:
        return []
    out = []
    for bi, b in enumerate(buckets):
        ranked = sorted(range(len(fits)), key=lambda fi: -table[(fi, bi)]["speedup"])
        winner = fits[ranked[0]]
        out.append(
            {
                "batch_size_min": b.low,
                "batch_size_max": b.high,
                "winner": winner.method,
                "draft_model": winner.labels.get("draft_model"),
                "num_speculative_tokens": table[(ranked[0], bi)]["k"],
                "speedups": {_name(fits[fi]): table[(fi, bi)]["speedup"] for fi in ranked},
                "labels": {k: v for k, v in winner.labels.items() if k in ("platform", "device", "model")},
            }
        )
    return out


def _name(fit: MethodFit) -> str:
    draft = fit.labels.get("draft_model")
    return f"{fit.method} ({draft})" if draft else str(fit.method)


__all__ = ["Recommendation", "fit_methods", "recommend"]
