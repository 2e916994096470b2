"""Acceptance analytics: the one place where acceptance math lives.

Definitions (vLLM's conventions; ``D`` drafts, ``A`` accepted tokens, ``T`` draft tokens,
``a_i`` drafts whose first i+1 tokens were all accepted):

- mean acceptance length  ``L = 1 + A / D`` (counts the bonus token)
  PromQL: ``1 + rate(vllm:spec_decode_num_accepted_tokens_total[5m]) / rate(vllm:spec_decode_num_drafts_total[5m])``
- draft acceptance rate  ``A / T``
- per-position acceptance rate  ``r_i = a_i / n_i``, with ``n_i`` the drafts that reached
  position i (drafted more than i tokens). Rows that do not say (``num_drafts_per_pos`` null:
  log lines, scrapes, older captures) count every draft of a row whose k exceeds i, so a k=2
  step never dilutes position 3. vLLM's own log line and ``per_pos / num_drafts`` in PromQL
  divide by all drafts, which is right only while k is fixed and drafts are full length.
- conditional acceptance rate  ``β_i = a_i / m_i`` (``β_0 = r_0``), with ``m_i`` the drafts that
  reached position i with every earlier position accepted: the chance position i is accepted
  given that every position before it was. While drafts are cut only by k it equals
  ``r_i / r_{i-1}``; captured steps carry ``m_i`` (``num_drafts_accepted_before_pos``).
- implied iid rate ``α``: the single per-token rate for which ``Σ_{i=1..k} α^i = Σ r_i``; the
  Leviathan et al. formula assumes every ``β_i = α``.

Aggregation always sums counts and divides once (weighting by drafts); rates are never
averaged. Each quantity only uses the windows where all of its inputs are known, so a
window without per-position counts does not dilute ``r_i``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import polars as pl
from polars.lazyframe.group_by import LazyGroupBy

from specobs import buckets, dimensions
from specobs.analysis.intervals import Z95, ratio_residual, ratio_variance, wilson
from specobs.errors import SpecobsError
from specobs.formulas import (
    acceptance_length,
    acceptance_rate,
    acceptance_rate_or_none,
    per_position_rates,
    rate_or_none,
    tokens_per_draft,
    tokens_per_step,
)
from specobs.records import PositionBound, Summary, Truncation

#: Default grouping: every source, engine, model and method separately.
DEFAULT_BY = ("source", "engine", "model", "method")

#: ``--by`` names → the column (or derived column) they group on: every grouping dimension.
GROUP_KEYS = {d.name: d.column for d in dimensions.having(dimensions.GROUP)}

#: Minimum drafts reaching a position before its conditional rate is used for the diagnosis.
MIN_SUPPORT = 30
#: How far a printed mean acceptance length (2 decimals) may sit from its own counts.
PRINTED_SLACK = 0.006
#: Positions accepted in fewer than this share of drafts are called wasted.
WASTED_THRESHOLD = 0.10
#: Below this largest gap between r_i and α^(i+1), the iid formula is called a fair model.
MATERIAL_IID_GAP = 0.05


def with_group_columns(windows: pl.LazyFrame) -> pl.LazyFrame:
    """Add the derived grouping columns ``batch_bucket`` and ``hour`` (to rows, or to
    :func:`cells`, which hold the hour's number)."""
    names = windows.collect_schema().names()
    hour = pl.col(HOUR_NUMBER) if HOUR_NUMBER in names else hour_number()
    return with_context_bucket(windows).with_columns(
        batch_bucket=buckets.expr(pl.col("batch_size")),
        hour=(hour * 3600 * 1_000_000).cast(pl.Datetime("us", "UTC")).dt.strftime("%Y-%m-%d %H:00"),
    )


def with_context_bucket(windows: pl.LazyFrame) -> pl.LazyFrame:
    """``context_bucket`` from ``context_length`` (kept where cells already hold it; null where
    the rows do not know their context)."""
    names = windows.collect_schema().names()
    if CONTEXT_BUCKET in names:
        return windows
    length = pl.col("context_length") if "context_length" in names else pl.lit(None, pl.Float64)
    return windows.with_columns(buckets.context_expr(length).alias(CONTEXT_BUCKET))


def hour_number() -> pl.Expr:
    """Hours since the epoch of a window's end (what ``hour`` labels)."""
    return pl.col("end_ts") // 3600


def group_columns(by: Sequence[str]) -> list[str]:
    """Columns for ``--by`` names; raises ``ValueError`` naming an unknown one."""
    unknown = [name for name in by if name not in GROUP_KEYS]
    if unknown:
        raise ValueError(f"unknown --by {', '.join(unknown)} (choose from {', '.join(GROUP_KEYS)})")
    return [GROUP_KEYS[name] for name in by]


def parse_by(by: str | Sequence[str]) -> list[str]:
    """``--by`` names from a comma-separated string or a list, checked: at least one, each
    known, none twice (``--by ''`` is an error); a :class:`SpecobsError` names what is wrong."""
    text = by if isinstance(by, str) else ",".join(str(b) for b in by)
    groups = [b.strip() for b in text.split(",")]
    if not any(groups):
        raise SpecobsError(f"--by needs at least one of: {', '.join(GROUP_KEYS)} (default: {','.join(DEFAULT_BY)})")
    groups = [g for g in groups if g]
    try:
        group_columns(groups)
    except ValueError as exc:  # the one place that knows the --by names
        raise SpecobsError(str(exc)) from None
    twice = sorted({g for g in groups if groups.count(g) > 1})
    if twice:
        raise SpecobsError(f"--by {text}: {', '.join(twice)} named more than once")
    return groups


def _positions_guess(windows: pl.LazyFrame) -> int:
    """How many positions to sum: the largest k configured (vLLM's per-position lists have k
    entries); :func:`aggregate` checks the lists and widens when one is longer."""
    value = windows.select(pl.col("num_spec_tokens").max()).collect().item()
    return int(value or 0)


def aggregate(windows: pl.LazyFrame | pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """Summed counts per group, with the masks that keep each ratio honest.

    Returns one row per group with ``num_windows``, the counter sums, ``acc_for_length`` /
    ``drafts_for_length`` (windows where drafts and accepted are both known),
    ``acc_for_rate`` / ``tokens_for_rate``, ``pos_0..pos_{K-1}`` / ``drafts_for_pos``, the
    sums the between-window variance needs, and the drafts-free fallback from printed
    mean acceptance lengths (weighted by batch size, as SGLang prints them).

    ``windows`` may be rows or their :func:`cells`: cells are rolled up, not read again.
    """
    lazy = with_group_columns(windows.lazy())
    if is_cells(lazy):
        schema = lazy.collect_schema()
        positions = sum(1 for c in schema.names() if c.startswith("pos_"))
        names = [t.name for t in _term_list(positions)]
        rolled = [rollup_expr(name, schema[name]).alias(name) for name in names if name not in keys]
        return _known_totals(_grouped(lazy, keys).agg(rolled).collect(), keys)
    out = _aggregate(lazy, keys, _positions_guess(lazy))
    longest = int(out.select(pl.col("longest_list").max()).item() or 0)
    if longest > sum(1 for c in out.columns if c.startswith("pos_")):
        out = _aggregate(lazy, keys, longest)
    return out


#: What :func:`cells` are keyed by: every column a summary can be grouped on, as the rows hold
#: it (``batch_bucket`` and ``hour`` are derived from ``batch_size`` and :data:`HOUR_NUMBER`).
HOUR_NUMBER = "_hour"
CONTEXT_BUCKET = dimensions.by_name("context").column
CELL_KEYS = (*dimensions.columns(dimensions.CELL), HOUR_NUMBER)


def is_cells(frame: pl.LazyFrame | pl.DataFrame) -> bool:
    """True for the output of :func:`cells` (rows never have :data:`HOUR_NUMBER`)."""
    return HOUR_NUMBER in frame.lazy().collect_schema().names()


def key_hash(columns: Sequence[str | pl.Expr], seed: int = 0) -> pl.Expr:
    """One 64-bit hash of ``columns`` per row, for grouping on it instead of on the columns
    (several times faster on millions of rows). Categoricals are hashed as their codes, which
    stand for one text each within the process (7× cheaper than hashing the text on 10M rows);
    two keys sharing a hash (odds ~n²/2⁶⁴) are the caller's to detect."""
    return pl.struct([(pl.col(c) if isinstance(c, str) else c).to_physical() for c in columns]).hash(seed=seed)


def cells(
    windows: pl.LazyFrame | pl.DataFrame, extra: Sequence[Term] = (), keys: Sequence[pl.Expr] = ()
) -> pl.DataFrame:
    """The rows summed once into cells, one per value of :data:`CELL_KEYS`, holding every sum
    :func:`aggregate` needs (and the aggregations ``extra``): :func:`summarize` of the cells
    by any ``--by`` gives what it gives on the rows, from thousands of cells instead of
    millions of rows, so one pass over the rows serves every grouping.

    Every per-row quantity (a mask, a square, a per-position estimate) is computed on the rows
    and only summed here; sums of floats may differ from the rows' in the last bits. ``keys``
    split the cells further (a time bucket: ``specobs.analysis.sums``); the roll-ups ignore them.
    """
    lazy = with_context_bucket(windows.lazy()).with_columns(hour_number().alias(HOUR_NUMBER))
    names = lazy.collect_schema().names()
    lazy = lazy.with_columns([pl.lit(None, pl.String).alias(c) for c in CELL_KEYS if c not in names])

    def build(positions: int) -> pl.DataFrame:
        terms = [t for t in _term_list(positions) if t.name not in CELL_KEYS]
        return grouped_terms(lazy, [*CELL_KEYS, *keys], [*terms, *extra]).collect()

    guess = _positions_guess(lazy)
    out = build(guess)
    longest = int(out.select(pl.col("longest_list").max()).item() or 0)
    return build(longest) if longest > guess else out


def _aggregate(lazy: pl.LazyFrame, keys: Sequence[str], k: int) -> pl.DataFrame:
    terms = [t for t in _term_list(k) if t.name not in keys]  # e.g. --by k groups on num_spec_tokens
    grouping: list[str | pl.Expr] = list(keys) if keys else [pl.lit(True).alias("_all")]
    return _known_totals(grouped_terms(lazy, grouping, terms).collect(), keys)


def _grouped(lazy: pl.LazyFrame, keys: Sequence[str]) -> LazyGroupBy:
    return lazy.group_by(list(keys)) if keys else lazy.group_by(pl.lit(True).alias("_all"))


def _known_totals(out: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """Totals no row knew are null, not 0 (unknown is never 0)."""
    if not keys:
        out = out.drop("_all")
    return out.with_columns(
        [
            pl.when(pl.col(flag)).then(pl.col(col)).otherwise(None).alias(col)
            for col, flag in (
                ("num_drafts", "has_drafts"),
                ("num_draft_tokens", "has_draft_tokens"),
                ("num_accepted_tokens", "has_accepted"),
            )
        ]
    ).drop("has_drafts", "has_draft_tokens", "has_accepted")


@dataclass(frozen=True)
class Term:
    """One aggregation of rows: ``op`` (``sum``, ``any``, ``all``, ``min``, ``max``, ``count``,
    or ``len`` with no value) of a per-row ``value``, named ``name``."""

    name: str
    value: pl.Expr | None
    op: str

    def over_rows(self) -> pl.Expr:
        """The aggregation as one expression over the rows of a group."""
        return pl.len().alias(self.name) if self.value is None else getattr(self.value, self.op)().alias(self.name)

    def of_one_row(self) -> pl.Expr:
        """What :meth:`over_rows` gives for a group of one row, per row and without grouping: a
        sum of nothing is 0, ``any`` of nothing false, ``all`` of nothing true (for the 64-bit
        numbers and booleans the terms hold; a sum keeps their type)."""
        if self.value is None:
            return pl.lit(1).cast(pl.get_index_type()).alias(self.name)
        if self.op == "count":
            return self.value.is_not_null().cast(pl.get_index_type()).alias(self.name)
        empty = {"sum": 0, "any": False, "all": True}.get(self.op)
        return (self.value if empty is None else self.value.fill_null(empty)).alias(self.name)


def grouped_terms(lazy: pl.LazyFrame, keys: Sequence[str | pl.Expr], terms: Sequence[Term]) -> pl.LazyFrame:
    """``terms`` per group of ``keys``, their per-row values computed first over whole columns
    and then aggregated as plain columns: the same numbers, in 60% of the time of aggregating
    each expression per group (polars evaluates a compound expression group by group)."""

    def column(term: Term) -> str:
        return f"_term_{term.name}"

    values = [t.value.alias(column(t)) for t in terms if t.value is not None]
    aggs = [
        pl.len().alias(t.name) if t.value is None else getattr(pl.col(column(t)), t.op)().alias(t.name) for t in terms
    ]
    return lazy.with_columns(values).group_by(keys).agg(aggs)


def _term_list(k: int) -> list[Term]:
    """Every aggregation :func:`aggregate` makes of rows, over ``k`` positions (each a sum, a
    count, a min/max or an any/all of per-row values: :func:`rollup_expr` combines them)."""
    drafts, accepted, tokens = pl.col("num_drafts"), pl.col("num_accepted_tokens"), pl.col("num_draft_tokens")
    per_pos = pl.col("num_accepted_tokens_per_pos")
    length_known = drafts.is_not_null() & accepted.is_not_null() & (drafts > 0)
    rate_known = tokens.is_not_null() & accepted.is_not_null()
    pos_known = per_pos.is_not_null() & drafts.is_not_null() & (drafts > 0)
    reported_only = ~length_known & pl.col("reported_mean_acceptance_length").is_not_null()
    # A printed length (2 decimals) or rate (a percentage, 1 decimal) off its own counts by more
    # than the rounding: the counts are used, and the report says so.
    printed_length = pl.col("reported_mean_acceptance_length")
    printed_rate = pl.col("reported_draft_acceptance_rate")
    length_off = (acceptance_length(accepted, drafts) - printed_length).abs() > PRINTED_SLACK
    contradicts = (length_known & printed_length.is_not_null() & length_off) | (
        rate_known
        & (tokens > 0)
        & printed_rate.is_not_null()
        & ((acceptance_rate(accepted, tokens) - printed_rate).abs() > 0.0006)
    )
    weight = pl.col("batch_size").fill_null(1).cast(pl.Float64)

    def masked(value: pl.Expr, mask: pl.Expr) -> pl.Expr:
        return pl.when(mask).then(value)

    aggs: list[Term] = [
        Term("num_windows", None, "len"),
        Term("num_drafts", drafts, "sum"),
        Term("has_drafts", drafts.is_not_null(), "any"),
        Term("num_draft_tokens", tokens, "sum"),
        Term("has_draft_tokens", tokens.is_not_null(), "any"),
        Term("num_accepted_tokens", accepted, "sum"),
        Term("has_accepted", accepted.is_not_null(), "any"),
        Term("acc_for_length", masked(accepted, length_known), "sum"),
        Term("drafts_for_length", masked(drafts, length_known), "sum"),
        Term("windows_for_length", length_known, "sum"),
        Term("acc_sq", (masked(accepted, length_known).cast(pl.Float64) ** 2), "sum"),
        Term("drafts_sq", (masked(drafts, length_known).cast(pl.Float64) ** 2), "sum"),
        Term("acc_drafts", (masked(accepted * drafts, length_known).cast(pl.Float64)), "sum"),
        Term("acc_for_rate", masked(accepted, rate_known), "sum"),
        Term("tokens_for_rate", masked(tokens, rate_known), "sum"),
        Term("drafts_for_pos", masked(drafts, pos_known), "sum"),
        Term("reported_weighted", (masked(pl.col("reported_mean_acceptance_length") * weight, reported_only)), "sum"),
        Term("reported_weight", masked(weight, reported_only), "sum"),
        Term("windows_reported_only", reported_only, "sum"),
        Term("windows_contradicting", contradicts.fill_null(False), "sum"),
        Term("reported_rate_sum", masked(pl.col("reported_draft_acceptance_rate"), ~rate_known), "sum"),
        Term("reported_rate_count", masked(pl.col("reported_draft_acceptance_rate"), ~rate_known), "count"),
        Term("longest_list", per_pos.list.len(), "max"),
        Term("num_drafts_derived", pl.col("num_drafts_derived"), "any"),
        Term("num_spec_tokens", pl.col("num_spec_tokens"), "max"),
        Term("start_ts", pl.col("start_ts"), "min"),
        Term("end_ts", pl.col("end_ts"), "max"),
        Term("draft_seconds", pl.col("draft_seconds"), "sum"),
        Term("verify_seconds", pl.col("verify_seconds"), "sum"),
        Term("step_seconds", pl.col("step_seconds"), "sum"),
        Term("num_timed_steps", pl.col("num_timed_steps"), "sum"),
    ]
    # Drafts that could reach position i (k > i) and drafts that did (n_i); without
    # ``num_drafts_per_pos`` both are the drafts of rows whose k (or list length) exceeds i.
    # The trials of β_i (drafts that reached i with every earlier position accepted) come from
    # ``num_drafts_accepted_before_pos`` where captured, else a_{i−1} · n_i / n_{i−1} per row
    # (exact when drafts are cut only by the row's k).
    limit = pl.max_horizontal(pl.col("num_spec_tokens").fill_null(0), per_pos.list.len())
    reach = pl.col("num_drafts_per_pos")
    trials = pl.col("num_drafts_accepted_before_pos")

    def accepted_at(i: int) -> pl.Expr:
        return per_pos.list.get(i, null_on_oob=True).fill_null(0)

    def reached_at(i: int) -> pl.Expr:
        allowed = pl.when(limit > i).then(drafts).otherwise(0)
        return pl.when(reach.is_not_null()).then(reach.list.get(i, null_on_oob=True).fill_null(0)).otherwise(allowed)

    for i in range(k):
        allowed = pl.when(limit > i).then(drafts).otherwise(0)
        if i == 0:
            estimate = reached_at(0).cast(pl.Float64)
        else:
            before = reached_at(i - 1).cast(pl.Float64)
            estimate = pl.when(before > 0).then(accepted_at(i - 1) * reached_at(i) / before).otherwise(0.0)
        exact = trials.list.get(i, null_on_oob=True).fill_null(0).cast(pl.Float64)
        tried = pl.when(trials.is_not_null()).then(exact).otherwise(estimate)
        aggs += [
            Term(f"pos_{i}", masked(accepted_at(i), pos_known), "sum"),
            Term(f"reach_{i}", masked(reached_at(i), pos_known), "sum"),
            Term(f"allow_{i}", masked(allowed, pos_known), "sum"),
            Term(f"trials_{i}", masked(tried, pos_known), "sum"),
        ]
    # Interval sources (log lines, scrape pairs) cannot say which drafts reached a position:
    # when every per-position window of a group is one, :func:`interval_bias` bounds the bias.
    interval = reach.is_null() & (pl.col("counters").fill_null("") != "step")
    aggs += [
        Term("positions_from_intervals", masked(interval, pos_known), "all"),
        Term("tokens_for_pos", masked(tokens, pos_known & tokens.is_not_null()), "sum"),
    ]
    return aggs


def per_position(aggregated: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """Long frame: one row per group and position with ``r_i``, ``β_i`` and Wilson intervals.

    ``r_i = a_i / n_i`` over the drafts that reached position i (``reach_i``); ``allowed``
    counts the drafts whose k let them reach it, so ``a_i / allowed`` is the accepted share
    per draft the throughput model needs. ``β_i = a_i / m_i``, with ``m_i`` (``reached``) the
    drafts that reached position i with every earlier one accepted (see :func:`aggregate`).
    """
    positions = sorted(int(c[4:]) for c in aggregated.columns if c.startswith("pos_"))
    if not positions:
        return pl.DataFrame(schema={**{k: aggregated.schema[k] for k in keys}, "position": pl.Int64})
    base = aggregated.with_row_index("_group")
    long = pl.concat(
        [
            base.select(
                "_group",
                *keys,
                pl.lit(i, pl.Int64).alias("position"),
                pl.col(f"pos_{i}").alias("accepted"),
                pl.col(f"reach_{i}").alias("drafts"),
                pl.col(f"allow_{i}").alias("allowed"),
                pl.col(f"trials_{i}").alias("reached"),
            )
            for i in positions
        ]
    ).sort("_group", "position")
    rate_low, rate_high = wilson(pl.col("accepted"), pl.col("drafts"))
    cond_low, cond_high = wilson(pl.col("accepted"), pl.col("reached"))
    return long.with_columns(
        rate=rate_or_none(pl.col("accepted"), pl.col("drafts")),
        rate_low=rate_low,
        rate_high=rate_high,
        conditional=rate_or_none(pl.col("accepted"), pl.col("reached")),
        conditional_low=cond_low,
        conditional_high=cond_high,
    )


#: How each aggregated column combines when groups are rolled up into a total.
def rollup_expr(name: str, dtype: pl.DataType | None = None) -> pl.Expr:
    """How sums of cells (or of groups) combine into a larger one. A float sum is taken over its
    values sorted: the same cells in any order (a group-by returns them in any order) give the
    same number to the last bit, so one input always reports the same digits."""
    if name in ("num_drafts_derived", "has_drafts", "has_draft_tokens", "has_accepted"):
        return pl.col(name).any()
    if name == "positions_from_intervals":
        return pl.col(name).all()
    if name in ("num_spec_tokens", "longest_list"):
        return pl.col(name).max()
    if name == "start_ts":
        return pl.col(name).min()
    if name == "end_ts":
        return pl.col(name).max()
    if name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        # Null stays null when no group knew it (unknown is never 0).
        return pl.when(pl.col(name).is_not_null().any()).then(pl.col(name).sum())
    if dtype is not None and dtype.is_float():
        # Summed in order of value, one after another (the optimizer drops a sort before `sum`);
        # nulls first, so the last running total is the sum, and 0 where all are null as `sum` says.
        return pl.col(name).sort().cum_sum().last().fill_null(0)
    return pl.col(name).sum()


def summarize_with_total(
    windows: pl.LazyFrame | pl.DataFrame, by: Sequence[str] = DEFAULT_BY
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``(total, groups)``: the summary over everything and per group, from one pass.

    Every aggregated quantity is a sum, a min/max or an any, so the total is the roll-up
    of the groups and the input is only read once.
    """
    keys = group_columns(by)
    agg = aggregate(windows, keys)
    total = agg.select(
        [rollup_expr(c, agg.schema[c]).alias(c) for c in agg.columns if c not in keys]
        + [pl.col(k).max().alias(k) for k in keys if k == "num_spec_tokens"]
    )
    if not agg.height:
        total = total.clear()
    return _finish(total, per_position(total, []), []), _finish(agg, per_position(agg, keys), keys)


def summarize(
    windows: pl.LazyFrame | pl.DataFrame, by: Sequence[str] = DEFAULT_BY, *, columns: Sequence[str] = ()
) -> pl.DataFrame:
    """One row per group: the acceptance summary with intervals and the iid diagnosis.

    Columns: the group columns, ``num_windows``, ``num_drafts``, ``num_draft_tokens``,
    ``num_accepted_tokens``, ``mean_acceptance_length`` (+ ``_se``, ``_low``/``_high``, and
    ``mean_acceptance_length_basis``: ``counts`` or ``reported``), ``draft_acceptance_rate``,
    ``acceptance_rate_per_position`` (+ ``_low``/``_high`` lists; from the counts
    ``num_accepted_tokens_per_pos`` / ``num_drafts_per_pos``, and ``num_drafts_allowed_per_pos``),
    ``conditional_acceptance_rate_per_position`` (+ ``_low``/``_high``), ``iid_alpha``,
    ``iid_max_gap``, ``conditional_trend``, ``num_drafts_derived``, timing sums, time range.
    ``columns``: further columns to group on as they are, before ``by`` (e.g. a resample's number).
    """
    keys = [*columns, *group_columns(by)]
    agg = aggregate(windows, keys)
    positions = per_position(agg, keys)
    return _finish(agg, positions, keys)


def _finish(agg: pl.DataFrame, positions: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    n_groups = agg.height
    agg = agg.with_row_index("_group")
    if "rate" in positions.columns:
        lists = positions.group_by("_group", maintain_order=True).agg(
            acceptance_rate_per_position=pl.col("rate"),
            acceptance_rate_per_position_low=pl.col("rate_low"),
            acceptance_rate_per_position_high=pl.col("rate_high"),
            conditional_acceptance_rate_per_position=pl.col("conditional"),
            conditional_acceptance_rate_per_position_low=pl.col("conditional_low"),
            conditional_acceptance_rate_per_position_high=pl.col("conditional_high"),
            reached=pl.col("reached"),
            num_accepted_tokens_per_pos=pl.col("accepted"),
            num_drafts_per_pos=pl.col("drafts"),
            num_drafts_allowed_per_pos=pl.col("allowed"),
        )
        agg = agg.join(lists, on="_group", how="left")
        # Groups without any per-position counts get null, not a list of nulls; others keep
        # only the positions their own drafts had (a k=2 group next to a k=6 one has 2).
        no_pos = pl.col("drafts_for_pos").fill_null(0) == 0
        list_cols = [c for c in lists.columns if c != "_group"]
        agg = agg.with_columns(
            [
                pl.when(no_pos).then(None).otherwise(pl.col(c).list.head(pl.col("longest_list").fill_null(0))).alias(c)
                for c in list_cols
            ]
        )
    else:
        agg = agg.with_columns(
            [
                pl.lit(None, pl.List(pl.Float64)).alias(c)
                for c in (
                    "acceptance_rate_per_position",
                    "acceptance_rate_per_position_low",
                    "acceptance_rate_per_position_high",
                    "conditional_acceptance_rate_per_position",
                    "conditional_acceptance_rate_per_position_low",
                    "conditional_acceptance_rate_per_position_high",
                    "reached",
                )
            ]
            + [
                pl.lit(None, pl.List(pl.Int64)).alias(c)
                for c in ("num_accepted_tokens_per_pos", "num_drafts_per_pos", "num_drafts_allowed_per_pos")
            ]
        )
    # Mean acceptance length: from counts where known, else the printed value weighted by batch.
    drafts = pl.col("drafts_for_length").cast(pl.Float64)
    from_counts = acceptance_length(pl.col("acc_for_length"), drafts)
    from_reported = pl.col("reported_weighted") / pl.col("reported_weight")
    agg = agg.with_columns(
        mean_acceptance_length=pl.when(drafts > 0)
        .then(from_counts)
        .when(pl.col("reported_weight") > 0)
        .then(from_reported)
        .otherwise(None),
        mean_acceptance_length_basis=pl.when(drafts > 0)
        .then(pl.lit("counts"))
        .when(pl.col("reported_weight") > 0)
        .then(pl.lit("reported"))
        .otherwise(None),
        draft_acceptance_rate=acceptance_rate_or_none(pl.col("acc_for_rate"), pl.col("tokens_for_rate")),
    )
    rows = agg.to_dicts()
    extra = [_length_interval_and_diagnosis(row) for row in rows]
    diag = (
        pl.DataFrame(
            extra,
            schema={
                "mean_acceptance_length_se": pl.Float64,
                "mean_acceptance_length_low": pl.Float64,
                "mean_acceptance_length_high": pl.Float64,
                "iid_alpha": pl.Float64,
                "iid_max_gap": pl.Float64,
                "conditional_trend": pl.String,
            },
        )
        if n_groups
        else pl.DataFrame()
    )
    out = pl.concat([agg, diag], how="horizontal") if n_groups else agg
    return out.drop("_group").sort([sort_key(k) for k in keys], nulls_last=True) if keys else out.drop("_group")


#: Columns holding bucket labels (``2-3``, ``512-1023``): ordered by their lowest value, not as text.
BUCKET_COLUMNS = ("batch_bucket", CONTEXT_BUCKET)


def sort_key(column: str) -> pl.Expr:
    """How groups are ordered by ``column``: a bucket by its lowest value, anything else as itself."""
    if column in BUCKET_COLUMNS:
        return pl.col(column).cast(pl.String).str.extract(r"^(\d+)").cast(pl.Int64)
    return pl.col(column)


def _length_interval_and_diagnosis(row: dict) -> dict:
    """Per-group scalars that need a little Python: the length interval and the iid diagnosis."""
    rates = [r for r in (row.get("acceptance_rate_per_position") or []) if r is not None]
    length = row["mean_acceptance_length"]
    low = high = se = None
    if length is not None and row["mean_acceptance_length_basis"] == "counts":
        se = _length_standard_error(row)
        if se is not None:
            low, high = max(1.0, length - Z95 * se), length + Z95 * se
    alpha = iid_alpha(rates) if rates and any(rates) else None
    gap = None
    if alpha is not None:
        gap = max(abs(r - alpha ** (i + 1)) for i, r in enumerate(rates))
    return {
        "mean_acceptance_length_se": se,
        "mean_acceptance_length_low": low,
        "mean_acceptance_length_high": high,
        "iid_alpha": alpha,
        "iid_max_gap": gap,
        "conditional_trend": conditional_trend(row),
    }


def _length_standard_error(row: dict) -> float | None:
    """Standard error of ``1 + A/D``.

    Two estimates, the larger wins: the per-draft spread of accepted length (known exactly
    from the per-position counts, since P(accepted ≥ i+1) = a_i / D), and, with ten or more
    windows, the between-window ratio-estimator variance, which also captures drift between
    intervals.
    """
    drafts = row["drafts_for_length"]
    if not drafts:
        return None
    candidates = []
    pos_drafts = row.get("drafts_for_pos") or 0
    rates = per_position_rates(row.get("num_accepted_tokens_per_pos"), pos_drafts)
    if rates:
        mean = sum(rates)
        second = sum((2 * i + 1) * r for i, r in enumerate(rates))
        var = max(second - mean * mean, 0.0)
        candidates.append(math.sqrt(var / drafts))
    n = row["windows_for_length"]
    if n >= 10:
        ratio = row["acc_for_length"] / drafts
        resid = ratio_residual(row["acc_sq"], row["acc_drafts"], row["drafts_sq"], ratio)
        var = ratio_variance(max(resid, 0.0), n, drafts / n)
        candidates.append(math.sqrt(var))
    return max(candidates) if candidates else None


def iid_alpha(rates: Sequence[float]) -> float | None:
    """The α with ``Σ_{i=1..k} α^i = Σ r_i`` (bisection; k = len(rates))."""
    target = sum(rates)
    k = len(rates)
    if k == 0:
        return None
    if target >= k:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid**i for i in range(1, k + 1)) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def conditional_trend(row: dict) -> str | None:
    """``falling``, ``rising`` or ``flat`` conditional acceptance across positions.

    Compares the first and the last position that at least :data:`MIN_SUPPORT` drafts
    reached: ``falling`` when the last position's 95% interval lies wholly below the
    first's, ``rising`` when wholly above, ``flat`` (consistent with iid) otherwise.
    Null with fewer than two supported positions.
    """
    lows = row.get("conditional_acceptance_rate_per_position_low") or []
    highs = row.get("conditional_acceptance_rate_per_position_high") or []
    supported = supported_positions(row)
    if len(supported) < 2:
        return None
    first, last = supported[0], supported[-1]
    if highs[last] < lows[first]:
        return "falling"
    if lows[last] > highs[first]:
        return "rising"
    return "flat"


def supported_positions(row: Mapping[str, Any]) -> list[int]:
    """0-based positions that at least :data:`MIN_SUPPORT` drafts reached (all earlier accepted)."""
    lows = row.get("conditional_acceptance_rate_per_position_low") or []
    reached = row.get("reached") or []
    return [i for i, n in enumerate(reached) if n is not None and n >= MIN_SUPPORT and lows[i] is not None]


def wasted_positions(rates: Sequence[float | None], threshold: float = 0.1) -> list[int]:
    """0-based positions whose acceptance rate is below ``threshold``."""
    return [i for i, r in enumerate(rates) if r is not None and r < threshold]


def truncation(rates: Sequence[float | None]) -> list[dict]:
    """Expected tokens per verification step and share of accepted tokens kept at each k' ≤ k.

    ``tokens_per_step(k') = 1 + Σ_{i<k'} r_i``: exact when drafting stops after k' tokens,
    because a draft's acceptance of its first k' tokens does not depend on what follows.
    """
    known = [r or 0.0 for r in rates]
    total = sum(known)
    out = []
    running = 0.0
    for k, r in enumerate(known, start=1):
        running += r
        out.append(
            {
                "k": k,
                "tokens_per_step": tokens_per_step(running),
                "share_of_accepted": running / total if total else None,
            }
        )
    return out


def interval_bias(row: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """Per-position bounds for sources that divide ``a_i`` by all drafts (vLLM's log line,
    ``per_pos / num_drafts`` from Prometheus), when drafts were not all k long.

    Such a source cannot say which drafts reached position i; when draft tokens per draft
    ``T/D`` fall short of k (a batch-size schedule with smaller k, ngram's shorter matches),
    ``r_i`` is too low from position 2 on. The drafts that reached position i are at least
    ``(T − i·D) / (k − i)`` (the later positions share what the earlier ones leave), so the
    true rate lies between the printed ``a_i / D`` and ``a_i / max(a_i, (T − i·D) / (k − i))``.
    None when the group's per-position counts are not all from such sources or drafts were full.
    """
    if not row.get("positions_from_intervals"):
        return None
    drafts, tokens = row.get("drafts_for_pos") or 0, row.get("tokens_for_pos") or 0
    accepted = row.get("num_accepted_tokens_per_pos") or []
    k = len(accepted)
    if not drafts or not k or tokens >= k * drafts * 0.999:
        return None
    out = []
    for i, a in enumerate(accepted):
        a = a or 0
        least = max((tokens - i * drafts) / (k - i), float(a), 0.0) if i else float(drafts)
        out.append({"position": i + 1, "rate": a / drafts, "rate_high": min(a / least, 1.0) if least else 1.0})
    return out


def drafts_per_position(row: Mapping[str, Any], drafts: int, k: int | None) -> Sequence[int]:
    """Drafts that reached each position for one steps/windows row: ``num_drafts_per_pos``, or
    for rows without it (logs, older captures) every draft at each position below k, as
    :func:`aggregate` counts them. Nothing for rows without per-position counts, so they never
    dilute a per-position rate."""
    reached = row.get("num_drafts_per_pos")
    if reached is not None:
        return reached
    per_pos = row.get("num_accepted_tokens_per_pos")
    if per_pos is None:
        return []
    return [drafts] * max(k or 0, len(per_pos))


def accepted_length_counts(drafts: int, num_accepted_tokens_per_pos: Sequence[int], longest: int) -> list[int]:
    """Drafts by accepted length 0, 1, …, ``longest`` (the last counts ``longest`` or more).

    A draft with exactly j accepted tokens is one whose first j tokens were accepted but not
    its first j+1: ``a_{j-1} − a_j`` (with ``a_{-1}`` = all drafts).
    """
    reached = [drafts, *num_accepted_tokens_per_pos]
    counts = [0] * (longest + 1)
    for j in range(len(reached)):
        exactly = reached[j] - (reached[j + 1] if j + 1 < len(reached) else 0)
        counts[min(j, longest)] += max(exactly, 0)
    return counts


def summary_of(row: Mapping[str, Any]) -> Summary:
    """The typed :class:`Summary` of a row of :func:`summarize` (the one place that computes it)."""
    values: dict[str, Any] = {}
    for f in fields(Summary):
        if f.name in row:
            value = row[f.name]  # polars gives lists for List columns: kept as tuples (frozen)
            values[f.name] = tuple(value) if isinstance(value, list) else value
    drafts, tokens = row.get("drafts_for_pos"), row.get("tokens_for_pos")
    bounds = interval_bias(row)
    rates = row.get("acceptance_rate_per_position") or []
    return Summary(
        **values,
        draft_tokens_per_draft=tokens_per_draft(tokens, drafts) if drafts and tokens is not None else None,
        supported_positions=tuple(supported_positions(row)),
        wasted_positions=tuple(wasted_positions(rates, WASTED_THRESHOLD)),
        truncation=tuple(Truncation(**t) for t in truncation(rates)),
        position_bounds=None if bounds is None else tuple(PositionBound(**b) for b in bounds),
    )
