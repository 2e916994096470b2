"""Acceptance per request: the spread across requests of ``requests`` rows (docs/schema.md).

A request's acceptance length is vLLM's per-request ``mean_acceptance_length``: tokens per
verify step, counting the bonus token::

    acceptance_length = 1 + num_accepted_tokens / num_spec_steps

It is null for a request that never verified a draft (``num_spec_steps = 0``; vLLM prints
1.0 for it): such requests are counted apart (``num_requests_without_drafts``) and left out
of the distribution. Two means summarise a set of requests, and they differ on purpose:

- request-weighted: the mean of the requests' acceptance lengths — what a typical request gets;
- token-weighted: ``1 + Σ accepted / Σ spec steps`` over the requests — what the engine gets,
  the same number as the steps' mean acceptance length (PromQL
  ``1 + rate(accepted) / rate(drafts)``). Long requests weigh more in it.

Worked example: requests with (accepted, steps) = (6, 3) and (1, 1) have lengths 3.0 and 2.0;
request-weighted 2.5, token-weighted 1 + 7/4 = 2.75.

Percentiles are linear interpolations between requests (numpy's default); the histogram's
bins are :data:`BIN_WIDTH` wide from 1, the last one closed. Prompt and output lengths are
bucketed in powers of two like batch sizes (``1``, ``2-3``, ``4-7``, …).
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from specobs import buckets, formulas, schema
from specobs.records import FlaggedRequest, LengthBin, RequestAcceptance, RequestGroup

#: Width of the acceptance-length histogram's bins (tokens per step).
BIN_WIDTH = 0.25
#: The percentiles of acceptance length reported across requests.
PERCENTILES = (0.10, 0.50, 0.90, 0.99)
#: Below this gap (tokens per step) between the request- and token-weighted means, they are called close.
MATERIAL_MEAN_GAP = 0.05
#: Groupings of the per-request summary: result name → column.
GROUPINGS = {
    "by_prompt_length": "prompt_bucket",
    "by_output_length": "output_bucket",
    "by_workload": "workload",
    "by_method": "method",
}


def acceptance_length() -> pl.Expr:
    """``1 + num_accepted_tokens / num_spec_steps``; null without spec steps."""
    return formulas.acceptance_length_or_none(pl.col("num_accepted_tokens"), pl.col("num_spec_steps"))


def length_bucket(column: str) -> pl.Expr:
    """Power-of-two bucket of a token count (``1``, ``2-3``, …); null for 0 or unknown."""
    count = pl.col(column)
    return pl.when(count > 0).then(buckets.expr(count)).otherwise(None)


def per_request(requests: pl.DataFrame) -> pl.DataFrame:
    """``requests`` with ``acceptance_length``, ``prompt_bucket`` and ``output_bucket`` added."""
    return requests.with_columns(
        acceptance_length=acceptance_length(),
        prompt_bucket=length_bucket("num_prompt_tokens"),
        output_bucket=length_bucket("num_output_tokens"),
    )


def _aggregations() -> list[pl.Expr]:
    length = pl.col("acceptance_length")
    steps, accepted = pl.col("num_spec_steps"), pl.col("num_accepted_tokens")
    total_steps = steps.sum()
    return [
        pl.len().alias("num_requests"),
        (steps.fill_null(0) == 0).sum().alias("num_requests_without_drafts"),
        total_steps.alias("num_spec_steps"),
        pl.col("num_draft_tokens").sum().alias("num_draft_tokens"),
        accepted.sum().alias("num_accepted_tokens"),
        length.mean().alias("request_weighted_mean_acceptance_length"),
        formulas.acceptance_length_or_none(accepted.sum(), total_steps).alias("token_weighted_mean_acceptance_length"),
        *[length.quantile(q, "linear").alias(f"p{round(q * 100)}") for q in PERCENTILES],
        pl.col("num_prompt_tokens").mean().alias("mean_prompt_tokens"),
        pl.col("num_output_tokens").mean().alias("mean_output_tokens"),
    ]


def summarize(requests: pl.DataFrame, by: str | None = None) -> pl.DataFrame:
    """One row (or one per value of ``by``, sorted; nulls last) of request counts, totals,
    both means and the percentiles of acceptance length."""
    frame = per_request(requests) if "acceptance_length" not in requests.columns else requests
    if by is None:
        return frame.select(_aggregations())
    out = frame.group_by(by).agg(_aggregations())
    if by in ("prompt_bucket", "output_bucket"):  # numeric order of the buckets, not text order
        low = pl.col(by).str.extract(r"^(\d+)").cast(pl.Int64)
        return out.sort(low, nulls_last=True)
    return out.sort(by, nulls_last=True)


def histogram(requests: pl.DataFrame, width: float = BIN_WIDTH) -> list[dict[str, Any]]:
    """Requests per acceptance-length bin: ``[{"low": 1.0, "high": 1.25, "requests": 3}, …]``.

    Bins run from 1 to the largest length seen (every bin listed, empty ones too); a length on
    a boundary goes to the bin above it, except the largest, which closes the last bin.
    """
    frame = per_request(requests) if "acceptance_length" not in requests.columns else requests
    lengths = frame.get_column("acceptance_length").drop_nulls()
    if lengths.is_empty():
        return []
    top = float(lengths.max())  # type: ignore[arg-type]
    bins = max(math.ceil((top - 1.0) / width - 1e-9), 1)
    index = ((lengths - 1.0) / width + 1e-9).floor().cast(pl.Int64).clip(0, bins - 1)
    counts = dict(index.value_counts().iter_rows())
    return [
        {"low": 1.0 + i * width, "high": 1.0 + (i + 1) * width, "requests": int(counts.get(i, 0))} for i in range(bins)
    ]


def as_windows(requests: pl.DataFrame) -> pl.DataFrame:
    """One ``windows`` row per finished request, holding its totals: the acceptance summary of
    an input that holds finished requests alone (``reporting.analyze``).

    A request's verify steps are its drafts (``num_drafts = num_spec_steps``). Its histogram
    gives the per-position counts exactly: ``a_i = Σ_{j>i} histogram[j]`` (steps that accepted
    more than i tokens). Which drafts reached a position is known only from ``detailed``
    per-step lists (``n_i``: steps that drafted more than i tokens; the trials of ``β_i``:
    those with the first i accepted); without them it is left null, as for a log's intervals
    (every draft is taken to have reached every position up to k, and the report says when
    that biases the rates). Worked example: histogram ``[2, 1, 0, 2]`` (5 steps) gives
    ``a = [3, 2, 2]`` and 1·1 + 3·2 = 7 accepted tokens.
    """
    if requests.height == 0:
        return schema.empty(schema.WINDOWS)
    histogram = pl.col("acceptance_histogram")
    drafted, accepted = pl.col("per_step_drafted"), pl.col("per_step_accepted")
    frame = requests.with_row_index("_row").with_columns(
        _detailed=drafted.is_not_null() & accepted.is_not_null(),
        _longest=(histogram.list.len().cast(pl.Int64) - 1).clip(lower_bound=0).fill_null(0),
    )
    # Per detailed request: n_i and the trials of β_i, position by position, from its steps.
    steps = frame.filter(pl.col("_detailed")).select("_row", drafted, accepted)
    steps = steps.explode("per_step_drafted", "per_step_accepted")
    longest = [frame["_longest"].max(), steps["per_step_drafted"].max(), 1]
    width = max(int(n) for n in longest if isinstance(n, int))
    per_step = steps.group_by("_row").agg(
        *[formulas.reached(drafted, i).sum().alias(f"_n{i}") for i in range(width)],
        *[formulas.tried(drafted, accepted, i).sum().alias(f"_m{i}") for i in range(width)],
        _drafted_most=drafted.max().fill_null(0),
    )
    frame = frame.join(per_step, on="_row", how="left").sort("_row")
    positions = (
        pl.when(pl.col("_detailed"))
        .then(pl.max_horizontal("_longest", pl.col("_drafted_most").fill_null(0)))
        .otherwise(pl.col("_longest"))
    )
    tail = pl.concat_list([histogram.list.slice(i + 1).list.sum() for i in range(width)]).list.head(positions)
    reached = pl.concat_list([pl.col(f"_n{i}") for i in range(width)]).list.head(positions)
    before = pl.concat_list([pl.col(f"_m{i}") for i in range(width)]).list.head(positions)
    windows = frame.select(
        *schema.LABELS,
        end_ts="ts",
        num_spec_tokens="num_spec_tokens",
        num_drafts="num_spec_steps",
        num_draft_tokens="num_draft_tokens",
        num_accepted_tokens="num_accepted_tokens",
        num_accepted_tokens_per_pos=pl.when(positions > 0).then(tail),
        num_drafts_per_pos=pl.when(pl.col("_detailed") & (positions > 0)).then(reached),
        num_drafts_accepted_before_pos=pl.when(pl.col("_detailed") & (positions > 0)).then(before),
        counters=pl.lit("request"),
    )
    return schema.conform(windows, schema.WINDOWS)


__all__ = [
    "BIN_WIDTH",
    "GROUPINGS",
    "MATERIAL_MEAN_GAP",
    "PERCENTILES",
    "acceptance_length",
    "as_windows",
    "flagged_requests",
    "histogram",
    "per_request",
    "summarize",
]


#: Draft tokens a request needs before it is judged against its class.
FLAG_MIN_DRAFTS = 30
#: Other requests its class needs.
FLAG_MIN_CLASS = 5
#: A flagged request accepts below this share of its class's rate ...
FLAG_SHARE = 0.5
#: ... and its binomial z against the class's rate is at or below this.
FLAG_Z = -4.0
#: Flagged requests listed (the worst first); all are counted.
FLAG_LISTED = 20


def flagged_requests(frame: pl.DataFrame) -> tuple[int, list[FlaggedRequest]]:
    """Requests far below their class (workload and prompt-length bucket): a draft acceptance
    rate under :data:`FLAG_SHARE` of the class's without them, and a binomial z at or below
    :data:`FLAG_Z` (the share guards against the binomial's too-small error: drafts within a
    request are not independent). Returns how many, and the :data:`FLAG_LISTED` lowest z."""
    keys = ["workload", "prompt_bucket"]
    a, n = pl.col("num_accepted_tokens").cast(pl.Float64), pl.col("num_draft_tokens").cast(pl.Float64)
    rest_a = a.sum().over(keys) - a
    rest_n = n.sum().over(keys) - n
    rate = a / n
    others = rest_a / rest_n
    scored = (
        frame.filter(pl.col("num_draft_tokens") > 0)
        .with_columns(_others=pl.len().over(keys) - 1)
        .with_columns(rate=rate, class_rate=others, _z=(rate - others) / (others * (1 - others) / n).sqrt())
        .filter(
            (pl.col("num_draft_tokens") >= FLAG_MIN_DRAFTS)
            & (pl.col("_others") >= FLAG_MIN_CLASS)
            & (pl.col("rate") < FLAG_SHARE * pl.col("class_rate"))
            & (pl.col("_z") <= FLAG_Z)
        )
        .sort("_z")
    )
    listed = [
        FlaggedRequest(
            r.get("request_key"),
            r["workload"],
            r["prompt_bucket"],
            int(r["num_draft_tokens"]),
            float(r["rate"]),
            float(r["class_rate"]),
            float(r["_z"]),
        )
        for r in scored.head(FLAG_LISTED).iter_rows(named=True)
    ]
    return scored.height, listed


def request_acceptance(requests: pl.DataFrame) -> RequestAcceptance | None:
    """The typed :class:`RequestAcceptance` of a ``requests`` frame (None when it has no rows)."""
    if requests.height == 0:
        return None
    frame = per_request(requests)
    overall = RequestGroup.from_row(summarize(frame).row(0, named=True))
    groups = {
        name: tuple(RequestGroup.from_row(row, row[column]) for row in summarize(frame, column).iter_rows(named=True))
        for name, column in GROUPINGS.items()
    }
    count, flagged = flagged_requests(frame)
    return RequestAcceptance(
        overall=overall,
        histogram=tuple(LengthBin(**b) for b in histogram(frame)),
        **groups,
        num_flagged=count,
        flagged=tuple(flagged),
    )
