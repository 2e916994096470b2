"""Where step time goes: draft, verify and whole-step time per group and batch-size bucket.

Inputs are windows whose timing columns are sums over ``num_timed_steps`` steps (capture
rows are one step each; V0 stage-time lines are one step each). Means are sums over sums:
a bucket with many steps weighs more, as it should. Steps that are not steady state (warm-up,
outliers: :func:`steady_state`) are left out of every timing here and of the cost fits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import polars as pl

from specobs.analysis.acceptance import (
    Term,
    cells,
    grouped_terms,
    is_cells,
    key_hash,
    rollup_expr,
    with_group_columns,
)

# The cost formulas' home is specobs.formulas; named here too (the exporters' mapping imports them from here).
from specobs.formulas import acceptance_rate
from specobs.formulas import cost_ratio as cost_ratio
from specobs.formulas import draft_positions as draft_positions
from specobs.formulas import draft_share as draft_share
from specobs.records import ScheduleTax


def is_decode() -> pl.Expr:
    """Steps with no prompt tokens: scheduled tokens = one per request plus the drafts (a step
    that did not say how many tokens it scheduled counts as decode)."""
    expected = pl.col("batch_size") + pl.col("num_draft_tokens").fill_null(0)
    return pl.col("num_scheduled_tokens").is_null() | (pl.col("num_scheduled_tokens") <= expected)


_ENGINE = ["source", "_engine"]
#: Where each engine's batch stood at the end of a part (:func:`draining_state`).
_STATE = {"_last_batch": pl.Int64, "_stretch_max": pl.Int64}


def with_draining(
    windows: pl.LazyFrame | pl.DataFrame, before: pl.DataFrame | None = None, *, keep_state: bool = False
) -> pl.LazyFrame:
    """Add ``draining``: a decode step taken while a batch drains, below the batch size it had
    since requests last joined (a prompt step, or a batch that grew, starts a new stretch).

    A closed-loop benchmark reaches its in-between batch sizes only this way (16 requests finish
    one by one: 15, 14, … 1), and the last steps of long requests accept differently from the
    whole; a batch size seen only while draining measures those ends, not a load of that size.
    One engine's steps in their order (``source``, ``engine``); false for rows that are not steps.
    ``before`` is where each engine stood at the end of the part before (:func:`draining_state`),
    so that parts of one file give the whole file's answer (``keep_state`` keeps the column
    :func:`draining_state` reads). A frame with ``draining`` is returned as it is.
    """
    lazy = windows.lazy()
    if "draining" in lazy.collect_schema().names():
        return lazy
    batch = pl.col("batch_size")
    previous = batch.shift(1).over(_ENGINE)
    lazy = lazy.with_columns(_engine=pl.col("engine").fill_null(-1))
    carried = before is not None and before.height > 0
    if carried and before is not None:  # looked up by one number per engine (a join keeping order costs more)
        state = before.with_columns(_key=_engine_key(pl.col("source").cast(pl.Categorical)))
        keys = state.get_column("_key")
        lazy = lazy.with_columns(_key=_engine_key(pl.col("source").cast(pl.Categorical))).with_columns(
            pl.col("_key").replace_strict(keys, state.get_column(c), default=None, return_dtype=pl.Int64).alias(c)
            for c in _STATE
        )
        first = pl.int_range(pl.len()).over(_ENGINE) == 0
        previous = pl.when(first).then(pl.col("_last_batch")).otherwise(previous)
    joined = ~is_decode() | (batch > previous).fill_null(True)
    lazy = lazy.with_columns(_stretch=joined.fill_null(True).cast(pl.Int64).cum_sum().over(_ENGINE))
    high = batch.cum_max().over([*_ENGINE, "_stretch"])
    if carried:  # the stretch the part began in began before it
        high = pl.max_horizontal(high, pl.when(pl.col("_stretch") == 0).then(pl.col("_stretch_max")))
    return lazy.with_columns(
        draining=((pl.col("counters") == "step") & is_decode() & (batch < high)).fill_null(False),
        _high=high,
    ).drop("_engine", "_stretch", "_key", "_last_batch", "_stretch_max", *([] if keep_state else ["_high"]),
           strict=False)  # fmt: skip


def _engine_key(source: pl.Expr) -> pl.Expr:
    """One number per engine of a source: its source's code and its engine (``_engine``)."""
    return (source.to_physical().cast(pl.Int64) * (1 << 32)) + pl.col("_engine").cast(pl.Int64) % (1 << 32)


def draining_state(frame: pl.DataFrame, before: pl.DataFrame | None = None) -> pl.DataFrame:
    """Where each engine stood at the end of ``frame`` (:func:`with_draining`'s output, which
    keeps ``_high`` for this): its last batch size and the largest since requests last joined;
    engines ``frame`` does not hold keep ``before``'s."""
    state = (
        frame.select(pl.col("source").cast(pl.String), _engine=pl.col("engine").fill_null(-1), _last_batch="batch_size",
                     _stretch_max="_high")
        .group_by(_ENGINE, maintain_order=True)
        .last()
        .cast(_STATE)  # type: ignore[arg-type]
    )  # fmt: skip
    if before is None or before.is_empty():
        return state
    return pl.concat([before.join(state, on=_ENGINE, how="anti"), state])


def decode_sums(frame: pl.LazyFrame | pl.DataFrame, keys: Sequence[str | pl.Expr]) -> pl.LazyFrame:
    """Per ``keys``: generated tokens (``num_generated_tokens``), step seconds (``step_seconds``)
    and steps (``steps``) of timed decode steps with a batch size — the one place decode
    throughput (generated / step seconds) is summed, for rows, windows and tuning cells alike."""
    lazy = frame.lazy()
    # Tuning cells carry ``decode`` from their rows (their draft tokens are sums over rows).
    decode = pl.col("decode") if "decode" in lazy.collect_schema().names() else is_decode()
    timed = pl.col("step_seconds").is_not_null() & pl.col("batch_size").is_not_null()
    timed = timed & pl.col("num_generated_tokens").is_not_null() & decode
    return (
        lazy.filter(timed)
        .group_by(*keys)
        .agg(
            pl.col("num_generated_tokens").sum(),
            pl.col("step_seconds").sum(),
            steps=pl.coalesce("num_timed_steps", pl.lit(1, pl.Int64)).sum(),
        )
    )


def timing_terms() -> list[Term]:
    """The sums :func:`timing_by_batch` divides, over the timed rows (``num_timed_steps`` > 0)
    only: summed per group of rows, or per cell and then over cells (:func:`step_cells`)."""
    timed = pl.col("num_timed_steps").fill_null(0) > 0

    def of_timed(value: pl.Expr) -> pl.Expr:
        return pl.when(timed).then(value)

    steps = pl.col("num_timed_steps")
    both = pl.col("num_generated_tokens").is_not_null() & pl.col("step_seconds").is_not_null()
    drafted = pl.col("draft_seconds").is_not_null()
    batch = pl.col("batch_size")
    positions = pl.when(batch >= 1).then(draft_positions(pl.col("num_draft_tokens").cast(pl.Float64), batch))
    return [
        Term("timed_rows", timed, "sum"),
        Term("timed_steps", of_timed(steps), "sum"),
        Term("batch_min", of_timed(pl.col("batch_size")), "min"),
        Term("draft_steps", of_timed(pl.when(drafted).then(steps)), "sum"),
        Term("draft_total", of_timed(pl.col("draft_seconds")), "sum"),
        Term("verify_steps", of_timed(pl.when(pl.col("verify_seconds").is_not_null()).then(steps)), "sum"),
        Term("verify_total", of_timed(pl.col("verify_seconds")), "sum"),
        Term("step_steps", of_timed(pl.when(pl.col("step_seconds").is_not_null()).then(steps)), "sum"),
        Term("step_total", of_timed(pl.col("step_seconds")), "sum"),
        Term("generated", of_timed(pl.when(both).then(pl.col("num_generated_tokens"))), "sum"),
        Term("generated_time", of_timed(pl.when(both).then(pl.col("step_seconds"))), "sum"),
        # Draft tokens and acceptance only where the draft time is known, so the ratios match.
        Term("timed_draft_tokens", of_timed(pl.when(drafted).then(pl.col("num_draft_tokens"))), "sum"),
        # The cost ratio's positions, over the same rows as draft_total (those with a batch size).
        Term("timed_draft_positions", of_timed(pl.when(drafted).then(positions)), "sum"),
        Term("timed_accepted", of_timed(pl.when(drafted).then(pl.col("num_accepted_tokens"))), "sum"),
    ]


_TIMING_SUMS = [t.name for t in timing_terms()]


def step_cells(windows: pl.LazyFrame | pl.DataFrame, keys: Sequence[pl.Expr] = ()) -> pl.DataFrame:
    """Steady-state rows (:func:`steady_state`) summed once into acceptance cells
    (:func:`specobs.analysis.acceptance.cells`, split further by ``keys``) that also hold the
    timing sums: the acceptance summary by any grouping and :func:`timing_by_batch` both read
    them instead of the rows."""
    return cells(steady_state(windows), timing_terms(), keys)


def timing_by_batch(windows: pl.LazyFrame | pl.DataFrame, keys: Sequence[str] = ()) -> pl.DataFrame:
    """Per group and batch bucket: timed steps, mean draft/verify/step/other seconds, draft share of
    step time, cost ratio, rejected-draft share, and generated tokens per second of step time
    (null where not measured).

    ``cost_ratio`` is :func:`specobs.formulas.cost_ratio`: draft seconds per drafted position per request (draft
    tokens ÷ batch size, summed) over verify seconds per step, over the timed steps (the same
    definition as the exporter's ``specobs_cost_ratio`` gauge and the recording rule);
    ``draft_share`` is :func:`specobs.formulas.draft_share` (the exporter's ``specobs_draft_share``).
    ``rejected_draft_share`` is the share of step time spent drafting tokens the target then
    rejected: draft time × (1 − accepted / drafted tokens) over step time, i.e. draft time is
    attributed to tokens evenly — exact for autoregressive drafters, an upper bound for
    parallel ones whose later positions cost nothing extra.
    """
    keys = [k for k in keys if k != "batch_bucket"]
    if is_cells(windows):
        lazy = with_group_columns(windows.lazy())
        schema = lazy.collect_schema()
        sums = [pl.col(n).min() if n == "batch_min" else rollup_expr(n, schema[n]) for n in _TIMING_SUMS]
        grouped = lazy.group_by([*keys, "batch_bucket"]).agg(sums)
    else:
        grouped = grouped_terms(with_group_columns(steady_state(windows)), [*keys, "batch_bucket"], timing_terms())
    out = (
        grouped.filter(pl.col("timed_rows") > 0)
        .with_columns(
            mean_draft_seconds=pl.when(pl.col("draft_steps") > 0).then(pl.col("draft_total") / pl.col("draft_steps")),
            mean_verify_seconds=pl.when(pl.col("verify_steps") > 0).then(
                pl.col("verify_total") / pl.col("verify_steps")
            ),
            mean_step_seconds=pl.when(pl.col("step_steps") > 0).then(pl.col("step_total") / pl.col("step_steps")),
            generated_tokens_per_second=pl.when(pl.col("generated_time") > 0).then(
                pl.col("generated") / pl.col("generated_time")
            ),
        )
        .with_columns(
            # What is neither drafting nor verifying: scheduling, sampling, bookkeeping.
            mean_other_seconds=(
                pl.col("mean_step_seconds") - pl.col("mean_draft_seconds").fill_null(0) - pl.col("mean_verify_seconds")
            ).clip(lower_bound=0),
            draft_share=pl.when(pl.col("step_total") > 0).then(
                pl.when(pl.col("draft_steps") > 0)
                .then(draft_share(*map(pl.col, ("draft_total", "draft_steps", "step_total", "step_steps"))))
                .otherwise(0.0)
            ),
            cost_ratio=pl.when((pl.col("timed_draft_positions") > 0) & (pl.col("verify_total") > 0)).then(
                cost_ratio(*map(pl.col, ("draft_total", "timed_draft_positions", "verify_total", "verify_steps")))
            ),
            rejected_draft_share=pl.when((pl.col("timed_draft_tokens") > 0) & (pl.col("step_total") > 0)).then(
                pl.col("draft_total")
                * (1 - acceptance_rate(pl.col("timed_accepted"), pl.col("timed_draft_tokens")))
                / pl.col("step_total")
            ),
        )
        .sort([*keys, "batch_min"], nulls_last=True)
        .select(
            *keys,
            "batch_bucket",
            "timed_steps",
            "mean_draft_seconds",
            "mean_verify_seconds",
            "mean_step_seconds",
            "mean_other_seconds",
            "draft_share",
            "cost_ratio",
            "rejected_draft_share",
            "generated_tokens_per_second",
        )
        .collect()
    )
    return out


#: A step this many times slower than the median of its configuration is not steady state.
OUTLIER_FACTOR = 4.0
#: For a configuration with too few steps to judge, a step this many times slower per token
#: scheduled than the median of its engine's steps at the same k (decode and prompt steps apart).
COARSE_OUTLIER_FACTOR = 10.0
#: Such a step among an engine's first this many steps is warm-up (compilation, graph capture,
#: first allocations); later ones are outliers (a pause, another process).
WARMUP_STEPS = 100
#: Fewest timed steps a group needs before its median is used to judge its steps.
MIN_STEPS_TO_JUDGE = 5


@dataclass(frozen=True)
class Unsettled:
    """The unsettled steps of whole sources (see :func:`steady_state`), by line: found once over a
    file read in slices (:func:`unsettled_in_slices`), so that each slice is trimmed as the whole
    file would be (a configuration's median and an engine's first steps span slices)."""

    #: source → (lines of warm-up steps, lines of outliers), for every source judged whole.
    lines: dict[str, tuple[pl.Series, pl.Series]] = field(default_factory=dict)

    def merged(self, other: Unsettled) -> Unsettled:
        return Unsettled({**self.lines, **other.lines})


def steady_state(windows: pl.LazyFrame | pl.DataFrame, known: Unsettled | None = None) -> pl.LazyFrame:
    """Step rows with the timing of unsettled steps removed (set to null; counts kept).

    A step is left out of timing and cost fits when it took more than :data:`OUTLIER_FACTOR` ×
    the median step time of its configuration (labels, k, batch size, tokens scheduled), or,
    where that configuration has fewer than :data:`MIN_STEPS_TO_JUDGE` steps (a prompt of one
    length, seen once), more than :data:`COARSE_OUTLIER_FACTOR` × the median time per scheduled
    token of the engine's steps at the same k, decode and prompt steps apart, and more than
    :data:`OUTLIER_FACTOR` × their median step time (a compilation in the first prompt step
    takes seconds for a few dozen tokens; a lone small-batch step is cheap per step). Column ``unsteady`` says why:
    ``warm-up`` among an engine's first :data:`WARMUP_STEPS` steps, else ``outlier``; null for
    kept steps and for rows that are not single steps.

    The steps are judged on a narrow frame of their keys and times (:func:`_unsettled_rows`),
    never with windows over every column of every row; the rows then only look up whether
    their number was found unsettled.

    Idempotent: a frame that already has ``unsteady`` is returned as it is, so one trimmed frame
    can be handed to every consumer (``reporting.analyze`` does) without trimming it again.
    The sources ``known`` names were judged whole beforehand (a slice of a file): their steps
    are looked up by line.
    """
    if "unsteady" in windows.lazy().collect_schema().names():
        return windows.lazy()
    # Read once: judging the steps and trimming them both read the rows (a scan read twice
    # decodes every string column twice).
    lazy = (windows.collect() if isinstance(windows, pl.LazyFrame) else windows).lazy()
    judged = known.lines if known is not None else {}
    warm_up, outliers = _unsettled_rows(lazy, skip=tuple(judged))
    row = pl.col("_row")
    unsteady: pl.Expr = (
        pl.when(row.is_in(warm_up.implode()))
        .then(pl.lit("warm-up"))
        .when(row.is_in(outliers.implode()))
        .then(pl.lit("outlier"))
    )
    present = set(lazy.select(pl.col("source").unique()).collect().to_series().cast(pl.String)) if judged else set()
    marked = False
    for source, (warm_lines, outlier_lines) in judged.items():
        if source not in present or (warm_lines.is_empty() and outlier_lines.is_empty()):
            continue
        marked = True
        line, here = pl.col("source_line"), pl.col("source").cast(pl.String) == source
        unsteady = (
            pl.when(here & line.is_in(warm_lines.implode()))
            .then(pl.lit("warm-up"))
            .when(here & line.is_in(outlier_lines.implode()))
            .then(pl.lit("outlier"))
            .otherwise(unsteady)
        )
    if warm_up.is_empty() and outliers.is_empty() and not marked:
        return lazy.with_columns(unsteady=pl.lit(None, pl.String))
    timing = ("draft_seconds", "verify_seconds", "step_seconds", "num_timed_steps")
    return (
        lazy.with_row_index("_row")
        .with_columns(unsteady=unsteady)
        .with_columns([pl.when(pl.col("unsteady").is_null()).then(pl.col(c)).alias(c) for c in timing])
        .drop("_row")
    )


def _timed_steps(lazy: pl.LazyFrame, skip: Sequence[str] = (), row: pl.Expr | None = None) -> pl.LazyFrame:
    """The keys and times of the timed steps :func:`steady_state` judges: ``_row`` (the row
    number, or ``row``), ``_engine``, ``_coarse`` and ``_config`` (hashes), ``start_ts``,
    ``step_seconds``, ``_per_token``; the steps of the sources ``skip`` names are left out.

    Configurations are keyed by one 64-bit hash each (of the label strings once, then of the
    numbers): grouping on the columns themselves costs several times more on millions of
    steps. Two configurations sharing a hash (odds ~n²/2⁶⁴) would be judged against one median.
    """
    labels = key_hash(["source", "run_id", "model", "method", "draft_model", "platform", "device"])
    engine = key_hash(["source", "run_id", "engine"])
    coarse = key_hash(["_labels", "engine", "num_spec_tokens", is_decode()])
    config = key_hash(["_labels", "engine", "num_spec_tokens", "batch_size", "num_scheduled_tokens"])
    step = pl.col("step_seconds")
    per_token = step / pl.col("num_scheduled_tokens").clip(lower_bound=1).fill_null(1)
    numbered = lazy.with_row_index("_row") if row is None else lazy.with_columns(_row=row)
    return (
        numbered.filter(
            (pl.col("counters") == "step")
            & step.is_not_null()
            & (~pl.col("source").cast(pl.String).is_in(list(skip)) if skip else pl.lit(True))
        )
        .with_columns(_labels=labels)
        .select(
            "_row", "start_ts", "step_seconds", _engine=engine, _coarse=coarse, _config=config, _per_token=per_token
        )
    )


def _medians(steps: pl.LazyFrame) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """Steps, median and largest times per configuration and per coarse configuration."""
    step, per_token = pl.col("step_seconds"), pl.col("_per_token")
    fine = steps.group_by("_config").agg(_fine_steps=pl.len(), _fine_median=step.median(), _fine_max=step.max())
    coarse = steps.group_by("_coarse").agg(
        _coarse_steps=pl.len(), _coarse_median=step.median(), _coarse_median_per_token=per_token.median(),
        _coarse_max=step.max(), _coarse_max_per_token=per_token.max(),
    )  # fmt: skip
    return fine, coarse


def _fine_slow(step: pl.Expr) -> pl.Expr:
    """A step time ``step`` too slow for its configuration (``_medians``' fine columns)."""
    return (pl.col("_fine_steps") >= MIN_STEPS_TO_JUDGE) & (step > OUTLIER_FACTOR * pl.col("_fine_median"))


def _coarse_slow(step: pl.Expr, per_token: pl.Expr) -> pl.Expr:
    """A step too slow for its coarse configuration (``_medians``' coarse columns): per token
    alone would call a lone step at a small batch slow (its fixed cost is shared by few
    tokens), so it must also be slow in absolute terms against the same steps."""
    judged = pl.col("_coarse_steps") >= MIN_STEPS_TO_JUDGE
    slow_per_token = per_token > COARSE_OUTLIER_FACTOR * pl.col("_coarse_median_per_token")
    return judged & slow_per_token & (step > OUTLIER_FACTOR * pl.col("_coarse_median"))


def _slow(steps: pl.LazyFrame, fine: pl.LazyFrame, coarse: pl.LazyFrame) -> pl.LazyFrame:
    """``_row`` and ``_engine`` of the steps slower than their configuration's median allows."""
    step = pl.col("step_seconds")
    judged = pl.col("_fine_steps") >= MIN_STEPS_TO_JUDGE
    slow = pl.when(judged).then(_fine_slow(step)).otherwise(_coarse_slow(step, pl.col("_per_token")))
    return (
        steps.join(fine, on="_config", how="left")
        .join(coarse, on="_coarse", how="left")
        .filter(slow)
        .select("_row", "_engine")
    )


def _first_steps(steps: pl.LazyFrame) -> pl.LazyFrame:
    """Each engine's first :data:`WARMUP_STEPS` steps by start time (ties in row order, as an
    ordinal rank breaks them; a step without a start time is never among them): ``_engine``,
    ``_row``, ``start_ts``."""
    first = pl.col("_row", "start_ts").bottom_k_by(["start_ts", "_row"], WARMUP_STEPS)
    return steps.filter(pl.col("start_ts").is_not_null()).group_by("_engine").agg(first).explode("_row", "start_ts")


def _warm_up_split(unsettled: pl.DataFrame, first: pl.Series) -> tuple[pl.Series, pl.Series]:
    rows = unsettled.get_column("_row")
    return rows.filter(rows.is_in(first.implode())), rows.filter(~rows.is_in(first.implode()))


def _unsettled_rows(lazy: pl.LazyFrame, skip: Sequence[str] = ()) -> tuple[pl.Series, pl.Series]:
    """Row numbers of the unsettled steps (see :func:`steady_state`): warm-up, then outliers
    (the steps of the sources ``skip`` names are not judged).

    Steps and medians per configuration and per coarse configuration come from one grouped
    pass over the timed steps' keys and times; only the engines with an unsettled step are then
    ranked, and only their first :data:`WARMUP_STEPS` steps are kept.
    """
    steps = _timed_steps(lazy, skip)
    unsettled = _slow(steps, *_medians(steps)).collect()
    if unsettled.is_empty():
        return pl.Series("_row", [], pl.UInt32), unsettled["_row"]
    engines = steps.filter(pl.col("_engine").is_in(unsettled["_engine"].implode()))
    return _warm_up_split(unsettled, _first_steps(engines).collect().get_column("_row"))


def unsettled_in_slices(slices: Sequence[pl.LazyFrame], source: str) -> Unsettled:
    """The unsettled steps of ``source`` read as ``slices`` (lazy scans of consecutive rows,
    each numbered by ``source_line``), judged as :func:`steady_state` judges the whole: a first
    pass gathers each step's keys and time (32 bytes a step) for the medians, a second finds the
    slow steps and each engine's first steps, one slice at a time."""
    line = pl.col("source_line")
    times = [
        _timed_steps(part, row=line).select("_config", "_coarse", "step_seconds", "_per_token").collect()
        for part in slices
    ]
    whole = pl.concat(times).lazy()
    del times
    fine, coarse = (m.collect() for m in _medians(whole))
    none = pl.Series("_row", [], pl.Int64)
    del whole
    # When even the slowest step of each configuration is not slow (the common case), no step
    # is: no second pass (a coarse configuration's slowest step and time per token stand for
    # the steps of its configurations too few to judge).
    fine_slow = _fine_slow(pl.col("_fine_max")).any()
    coarse_slow = _coarse_slow(pl.col("_coarse_max"), pl.col("_coarse_max_per_token")).any()
    if not fine.select(fine_slow).item() and not coarse.select(coarse_slow).item():
        return Unsettled({source: (none, none)})
    slow, firsts = [], []
    for part in slices:
        steps = _timed_steps(part, row=line)
        found, first = pl.collect_all([_slow(steps, fine.lazy(), coarse.lazy()), _first_steps(steps)])
        slow.append(found)
        firsts.append(first)
    unsettled = pl.concat(slow)
    earliest = _first_steps(pl.concat(firsts).lazy()).collect().get_column("_row")
    warm_up, outliers = _warm_up_split(unsettled, earliest)
    return Unsettled({source: (warm_up.cast(pl.Int64), outliers.cast(pl.Int64))})


def unsteady_counts(windows: pl.LazyFrame | pl.DataFrame) -> dict[str, int]:
    """How many steps :func:`steady_state` leaves out, by reason (``warm-up``, ``outlier``)."""
    counts = steady_state(windows).group_by("unsteady").len().drop_nulls("unsteady").collect()
    return {row["unsteady"]: int(row["len"]) for row in counts.iter_rows(named=True)}


def schedule_tax(windows: pl.LazyFrame | pl.DataFrame) -> list[ScheduleTax]:
    """What k = 0 steps of a speculative engine cost beyond a plain engine's steps.

    A batch-size schedule with k = 0 ranges ("off") still runs the drafter's bookkeeping (and
    model drafters their forward passes); a plain engine (no speculative config) does not.
    Per model, platform, device and method: decode steps at the batch sizes both engines ran,
    steady state only (:func:`steady_state`), compared as mean step seconds weighted by the
    speculative engine's steps per batch size. ``tax_seconds`` is the extra time per step,
    ``tax_share`` the extra over the plain step.
    """
    return schedule_tax_from(schedule_tax_sums(windows))


_TAX_KEYS = ["model", "platform", "device"]


def schedule_tax_sums(windows: pl.LazyFrame | pl.DataFrame, by: Sequence[pl.Expr] = ()) -> pl.DataFrame:
    """The decode sums :func:`schedule_tax_from` compares: k = 0 steady-state steps per model,
    platform, device, method and batch size, and ``by`` (a time bucket; summed away by
    :func:`schedule_tax_from`): sums, so those of several parts concatenate."""
    keys: list[str | pl.Expr] = [*_TAX_KEYS, "method", "batch_size", *by]
    return decode_sums(steady_state(windows).filter(pl.col("num_spec_tokens") == 0), keys).collect()


def schedule_tax_from(sums: pl.DataFrame) -> list[ScheduleTax]:
    """:func:`schedule_tax` from :func:`schedule_tax_sums` (of one input, or of its parts concatenated)."""
    keys = _TAX_KEYS
    k0 = sums.group_by([*keys, "method", "batch_size"], maintain_order=True).agg(
        pl.col("num_generated_tokens").sum(), seconds=pl.col("step_seconds").sum(), steps=pl.col("steps").sum()
    )
    plain = k0.filter(pl.col("method").is_null()).select(*keys, "batch_size", plain=pl.col("seconds") / pl.col("steps"))
    off = k0.filter(pl.col("method").is_not_null())
    if plain.is_empty() or off.is_empty():
        return []
    joined = off.join(plain, on=[*keys, "batch_size"], how="inner", nulls_equal=True)
    rows = (
        joined.group_by(*keys, "method")
        .agg(
            steps=pl.col("steps").sum(),
            off_seconds=pl.col("seconds").sum() / pl.col("steps").sum(),
            plain_seconds=(pl.col("plain") * pl.col("steps")).sum() / pl.col("steps").sum(),
            batch_sizes=pl.col("batch_size").sort(),
        )
        .with_columns(
            tax_seconds=pl.col("off_seconds") - pl.col("plain_seconds"),
            tax_share=pl.col("off_seconds") / pl.col("plain_seconds") - 1,
        )
        .sort("method")
    )

    return [ScheduleTax(**{**row, "batch_sizes": tuple(row["batch_sizes"])}) for row in rows.iter_rows(named=True)]
