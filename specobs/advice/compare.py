"""Compare two runs: configuration, throughput and acceptance, with a verdict.

The verdict answers "is B worse than A?" in this order, so a difference is never called a
regression for the wrong reason:

1. **Configuration.** Method, draft model, k (``num_spec_tokens``) and schedule (the k used per
   batch bucket) of each side. When they differ the verdict says so first, and a change in
   acceptance alone is then a difference between configurations (kind
   ``configuration_changed``), never a regression: a larger k lowers per-position acceptance
   by design, and ngram and a draft model accept differently.
2. **Throughput**, when both sides carry step timing and generated tokens: generated tokens per
   second of step time (steady-state steps, :func:`specobs.analysis.cost.steady_state`) per
   batch bucket both sides ran (:func:`specobs.analysis.cost.timing_by_batch`), B/A per
   bucket, combined as a geometric mean weighted by the bucket's steps on both sides. The 95%
   interval comes from the spread between *runs*: stretches of consecutive timed rows at one
   batch bucket and k, cut at pauses over :data:`GAP_SECONDS` and every
   :data:`BLOCK_SECONDS`. Each bucket's tokens/s is a ratio estimator over its runs; the log
   ratios' variances add, and the interval uses Student's t with Welch–Satterthwaite degrees
   of freedom (three rounds per side give wide intervals, as they should). Steps within a run
   are not independent (one generate call, one batch), so they are not the unit. A bucket
   needs two runs on each side to be tested. When throughput is tested, it decides the kind:
   a regression only when the interval lies wholly below 1.
3. **Acceptance length**, the explanation (or, without timing and with the same
   configuration, the verdict): a two-sample z test on the standard errors ``summarize``
   reports (``mean_acceptance_length_se``), never read back off the 95% intervals (clipped at
   1, so near L = 1 an error read off them is too small), and no smaller than the pooled
   error of both sides together.

Noise between engine processes (20–40% on a shared machine) is not in the throughput
interval unless each side spans several processes: the runs of one side share its engine.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from specobs.analysis.acceptance import summarize, summary_of, with_group_columns
from specobs.analysis.breaks import causes
from specobs.analysis.cost import steady_state, step_cells, timing_by_batch
from specobs.analysis.intervals import Z95, ratio_variance, satterthwaite, t95, welch_term
from specobs.analysis.split import split, stretch_sums
from specobs.analysis.under_load import direction, serving_changes
from specobs.records import (
    ENVIRONMENT_FIELDS,
    AcceptanceTest,
    BucketThroughput,
    Comparison,
    Configuration,
    ConfigurationComparison,
    Difference,
    PositionChange,
    RunMetadata,
    SideTiming,
    Slo,
    Split,
    Summary,
    Throughput,
    ThroughputBasis,
    ThroughputInterval,
)
from specobs.schema import ENVIRONMENT_LABELS

#: A pause longer than this between consecutive timed rows of one side starts a new run.
GAP_SECONDS = 1.0
#: Runs longer than this are cut into blocks of this length (steady serving at one batch size).
BLOCK_SECONDS = 10.0


# --- configuration --------------------------------------------------------------------------------


#: Labels that describe what a run ran on: read off the rows when no run metadata says more.
#: How an environment variable's value reads when one side's engines did not set it.
UNSET = "unset"


def configuration(windows: pl.LazyFrame | pl.DataFrame, metadata: Sequence[RunMetadata] = ()) -> Configuration:
    """Methods, draft models and ks a run used (sorted, nulls left out), its schedule (the ks per
    batch bucket, in bucket order), and its environment (:func:`environment`)."""
    lazy = with_group_columns(windows.lazy())
    rows = (
        lazy.group_by("batch_bucket")
        .agg(
            low=pl.col("batch_size").min(),
            method=pl.col("method").drop_nulls().unique(),
            draft_model=pl.col("draft_model").drop_nulls().unique(),
            k=pl.col("num_spec_tokens").drop_nulls().unique(),
            **{name: pl.col(name).drop_nulls().unique() for name in ENVIRONMENT_LABELS},
        )
        .sort("low", nulls_last=True)
        .collect()
    )

    def union(column: str) -> tuple:
        return tuple(sorted({v for values in rows[column].to_list() for v in values}))

    schedule = {
        r["batch_bucket"]: tuple(sorted(r["k"])) for r in rows.iter_rows(named=True) if r["batch_bucket"] and r["k"]
    }
    labels = {name: union(name) for name in ENVIRONMENT_LABELS}
    return Configuration(
        union("method"), union("draft_model"), union("k"), schedule, environment(metadata, labels), len(metadata)
    )


def environment(
    metadata: Sequence[RunMetadata], labels: Mapping[str, tuple[str, ...]] | None = None
) -> dict[str, tuple[str, ...]]:
    """The values of each run-metadata field over a run's engines, in :data:`ENVIRONMENT_FIELDS`
    order, then each recorded environment variable by name (``unset`` on engines without it).
    Fields no engine recorded are read off the row labels (``labels``), else left out."""
    out: dict[str, tuple[str, ...]] = {}
    for name in ENVIRONMENT_FIELDS:
        if name == "environment":
            continue
        values = {str(v) for m in metadata if (v := getattr(m, name)) is not None}
        if not values and labels and labels.get(name):
            values = {str(v) for v in labels[name]}
        if values:
            out[name] = tuple(sorted(values))
    variables = sorted({var for m in metadata for var in m.environment})
    for var in variables:
        out[var] = tuple(sorted({m.environment.get(var, UNSET) for m in metadata}))
    return out


def environment_differences(a: Configuration, b: Configuration) -> tuple[Difference, ...]:
    """Run-metadata fields known on both sides whose values differ. An environment variable that
    one side set and the other did not differs too (the unset side ran vLLM's default); an
    engine without metadata says nothing about its variables."""
    out = []
    for name in dict.fromkeys([*a.environment, *b.environment]):
        va, vb = a.environment.get(name), b.environment.get(name)
        is_variable = name not in ENVIRONMENT_FIELDS
        if is_variable:
            va = va or ((UNSET,) if a.engines_with_metadata else None)
            vb = vb or ((UNSET,) if b.engines_with_metadata else None)
        if va and vb and va != vb:
            out.append(Difference(name, va, vb))
    return tuple(out)


def configuration_differences(a: Configuration, b: Configuration) -> tuple[Difference, ...]:
    """Fields in which A and B are known to differ. A value unknown on one side is no difference
    (vLLM's counters carry no method label; a plain engine has none either).

    The schedule counts when both sides used the same ks but not at the same batch buckets
    (a batch-size → k table changed); when the ks differ, that is named instead.
    """
    out = []
    for name in ("method", "draft_model", "num_spec_tokens"):
        va, vb = getattr(a, name), getattr(b, name)
        if va and vb and va != vb:
            out.append(Difference(name, va, vb))
    shared = [bucket for bucket in a.schedule if bucket in b.schedule]
    if a.num_spec_tokens == b.num_spec_tokens and any(a.schedule[x] != b.schedule[x] for x in shared):
        out.append(Difference("schedule", a.schedule, b.schedule))
    return tuple(out)


# --- throughput -----------------------------------------------------------------------------------


def _run_spread(steady: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """Per batch bucket: runs, and the variance of Σ generated / Σ step seconds between runs.

    The rows are the ones ``timing_by_batch`` turns into ``generated_tokens_per_second``; the
    variance is the ratio estimator's, Σ (g_u − T·s_u)² / (n (n − 1) s̄²) over runs u.
    """
    both = pl.col("num_generated_tokens").is_not_null() & pl.col("step_seconds").is_not_null()
    rows = (
        with_group_columns(steady.lazy())
        .filter((pl.col("num_timed_steps").fill_null(0) > 0) & both)
        # Runs are per source; a hash of it sorts and partitions several times faster than the
        # string (two sources sharing a hash, odds ~n²/2⁶⁴, would only pool their spread).
        .select(
            pl.col("source").hash().alias("source"),
            "start_ts",
            "end_ts",
            "source_line",
            "batch_bucket",
            "num_spec_tokens",
            "num_generated_tokens",
            "step_seconds",
        )
        .sort("source", "end_ts", "source_line", nulls_last=True)
    )
    # Sorted by source: the row before in the same source is the row before, unless the source
    # changed there (cheaper than shifting within each source). A source's first row starts a
    # run, so one running count numbers the runs of every source apart.
    same_source = pl.col("source") == pl.col("source").shift(1)

    def previous(name: str) -> pl.Expr:
        return pl.when(same_source).then(pl.col(name).shift(1))

    gap = pl.coalesce("start_ts", "end_ts") - previous("end_ts")
    new_run = (
        ~same_source.fill_null(False)
        | pl.col("batch_bucket").ne_missing(previous("batch_bucket"))
        | pl.col("num_spec_tokens").ne_missing(previous("num_spec_tokens"))
        | (gap.fill_null(0) > GAP_SECONDS)
    )
    runs = rows.with_columns(run=new_run.cast(pl.Int64).cum_sum())
    block = ((pl.col("end_ts") - pl.col("end_ts").min().over("run")) // BLOCK_SECONDS).cast(pl.Int64)
    units = (
        runs.with_columns(block=block)
        .group_by("source", "run", "block", "batch_bucket")
        .agg(g=pl.col("num_generated_tokens").sum().cast(pl.Float64), s=pl.col("step_seconds").sum())
    )
    ratio = pl.col("g").sum() / pl.col("s").sum()
    n = pl.len().cast(pl.Float64)
    mean_s = pl.col("s").sum() / n
    variance = ratio_variance(((pl.col("g") - ratio * pl.col("s")) ** 2).sum(), n, mean_s)
    return units.group_by("batch_bucket").agg(runs=pl.len(), variance=pl.when(n >= 2).then(variance)).collect()


def _timed(windows: pl.LazyFrame | pl.DataFrame) -> bool:
    """Whether any row carries step timing (log lines of vLLM V1 do not: skip the timing passes)."""
    return bool(windows.lazy().select((pl.col("num_timed_steps").fill_null(0) > 0).any()).collect().item())


@dataclass(frozen=True)
class _Side:
    """One side of a comparison, read once and kept small: its steady-state rows are summed into
    cells (``analysis.cost.step_cells``, for acceptance and timing), its configuration and its
    per-bucket throughput are read off them, and the rows are let go before the other side is
    read (both sides' rows at once would hold most of the input twice)."""

    cells: pl.DataFrame
    configuration: Configuration
    throughput: pl.DataFrame | None  # per batch bucket (:func:`_side_throughput`); None: no timed rows
    own: Split | None  # each target and k against the side's own plain engine (``analysis.split``)

    @classmethod
    def of(cls, windows: pl.LazyFrame | pl.DataFrame, metadata: Sequence[RunMetadata] = ()) -> _Side:
        steady = steady_state(windows).collect()
        cells = step_cells(steady)
        timed = _timed(cells)
        throughput = _side_throughput(steady, cells) if timed else None
        own = split(cells, stretch_sums(steady, by_context=False), (), metadata) if timed else None
        return cls(cells, configuration(steady, metadata), throughput, own)


def _side_throughput(steady: pl.DataFrame, cells: pl.DataFrame) -> pl.DataFrame:
    """Per batch bucket: steps, tokens/s, mean step seconds (``timing_by_batch``) and the run spread."""
    timed = timing_by_batch(cells, []).filter(pl.col("generated_tokens_per_second").is_not_null())
    if timed.is_empty():
        return timed
    spread = _run_spread(steady)
    return timed.select("batch_bucket", "timed_steps", "generated_tokens_per_second", "mean_step_seconds").join(
        spread, on="batch_bucket", how="left", nulls_equal=True, maintain_order="left"
    )


def compare_throughput(a: pl.LazyFrame | pl.DataFrame, b: pl.LazyFrame | pl.DataFrame) -> Throughput | None:
    """B/A generated tokens per second at matched batch buckets, with a 95% interval.

    None when a side has no timed rows. ``ratio``/``low``/``high`` are over the buckets with two
    or more runs on both sides (``tested``; the point estimate uses every matched bucket when
    none is); ``direction`` is ``fell``, ``rose``, ``unchanged`` (the interval holds 1) or null
    (nothing tested).
    """
    return _throughput(_Side.of(a), _Side.of(b))


def _throughput(a: _Side, b: _Side) -> Throughput | None:
    ta, tb = a.throughput, b.throughput
    if ta is None or tb is None or ta.is_empty() or tb.is_empty():
        return None
    tps_a, tps_b = pl.col("generated_tokens_per_second"), pl.col("generated_tokens_per_second_b")
    buckets = (
        ta.join(tb, on="batch_bucket", how="inner", nulls_equal=True, suffix="_b", maintain_order="left")
        .filter((tps_a > 0) & (tps_b > 0))
        .select(
            "batch_bucket",
            steps_a=pl.col("timed_steps"),
            steps_b=pl.col("timed_steps_b"),
            runs_a=pl.col("runs"),
            runs_b=pl.col("runs_b"),
            tokens_per_second_a=tps_a,
            tokens_per_second_b=tps_b,
            ratio=tps_b / tps_a,
            step_seconds_ratio=pl.col("mean_step_seconds_b") / pl.col("mean_step_seconds"),
            tested=(pl.col("runs") >= 2)
            & (pl.col("runs_b") >= 2)
            & (pl.col("variance").fill_null(0) > 0)
            & (pl.col("variance_b").fill_null(0) > 0),
            # Variances of log tokens/s (delta method).
            _var_a=pl.col("variance") / tps_a**2,
            _var_b=pl.col("variance_b") / tps_b**2,
        )
    )
    only_a = ta.join(tb, on="batch_bucket", how="anti", nulls_equal=True)["batch_bucket"].to_list()
    only_b = tb.join(ta, on="batch_bucket", how="anti", nulls_equal=True)["batch_bucket"].to_list()
    basis = ThroughputBasis.DECODE_PER_BUCKET
    interval = ThroughputInterval.WELCH_BETWEEN_RUNS
    per_bucket = tuple(BucketThroughput(**row) for row in buckets.drop("_var_a", "_var_b").iter_rows(named=True))
    tested = buckets.filter(pl.col("tested"))
    use = tested if tested.height else buckets
    if use.is_empty():
        return Throughput(
            basis=basis,
            interval=interval,
            ratio=None,
            low=None,
            high=None,
            degrees_of_freedom=None,
            step_seconds_ratio=None,
            direction=None,
            buckets=per_bucket,
            buckets_only_in_a=tuple(only_a),
            buckets_only_in_b=tuple(only_b),
        )
    w = (pl.col("steps_a") + pl.col("steps_b")) / (pl.col("steps_a") + pl.col("steps_b")).sum()
    combined = use.select(
        log_ratio=(w * pl.col("ratio").log()).sum(),
        step_seconds_ratio=(w * pl.col("step_seconds_ratio").log()).sum().exp(),
        variance=(w**2 * (pl.col("_var_a") + pl.col("_var_b"))).sum(),
        welch=(
            w**4
            * (welch_term(pl.col("_var_a"), pl.col("runs_a") - 1) + welch_term(pl.col("_var_b"), pl.col("runs_b") - 1))
        ).sum(),
    ).row(0, named=True)
    low = high = df = direction = None
    if tested.height and combined["variance"] > 0:
        df = satterthwaite(combined["variance"], combined["welch"])
        half = t95(df) * math.sqrt(combined["variance"])
        low, high = math.exp(combined["log_ratio"] - half), math.exp(combined["log_ratio"] + half)
        direction = "fell" if high < 1 else "rose" if low > 1 else "unchanged"
    return Throughput(
        basis=basis,
        interval=interval,
        ratio=math.exp(combined["log_ratio"]),
        low=low,
        high=high,
        degrees_of_freedom=df,
        step_seconds_ratio=combined["step_seconds_ratio"],
        direction=direction,
        buckets=per_bucket,
        buckets_only_in_a=tuple(only_a),
        buckets_only_in_b=tuple(only_b),
    )


# --- acceptance -----------------------------------------------------------------------------------


def compare_acceptance(
    a: pl.LazyFrame | pl.DataFrame, b: pl.LazyFrame | pl.DataFrame
) -> tuple[Summary, Summary, AcceptanceTest]:
    """``(summary A, summary B, test)``: both summaries and the z test of B − A on the length.

    The standard errors are the ones ``summarize`` reports (never read back off the intervals,
    which are clipped at 1). The difference's error is the larger of √(se_A² + se_B²) and the
    pooled one, se_AB·√(D_AB·(1/D_A + 1/D_B)) from the summary of both sides together: the
    spread if nothing changed, which a side with a handful of accepted tokens underestimates
    on its own. Tested only when both lengths come from counts; ``direction``: ``fell``,
    ``rose``, ``unchanged`` (|z| ≤ 1.96) or null.
    """
    ra = summary_of(summarize(a, by=()).row(0, named=True))
    rb = summary_of(summarize(b, by=()).row(0, named=True))
    la, lb = ra.mean_acceptance_length, rb.mean_acceptance_length
    sa, sb = ra.mean_acceptance_length_se, rb.mean_acceptance_length_se
    if la is None or lb is None:
        return ra, rb, AcceptanceTest()
    counted = ra.mean_acceptance_length_basis == rb.mean_acceptance_length_basis == "counts"
    if not counted or sa is None or sb is None:
        return ra, rb, AcceptanceTest(difference=lb - la)
    se = math.hypot(sa, sb)
    pooled = summary_of(summarize(pl.concat([a.lazy(), b.lazy()], how="diagonal_relaxed"), by=()).row(0, named=True))
    da, db, dab = ra.drafts_for_length, rb.drafts_for_length, pooled.drafts_for_length
    if pooled.mean_acceptance_length_se is not None and da and db and dab:
        se = max(se, pooled.mean_acceptance_length_se * math.sqrt(dab * (1 / da + 1 / db)))
    # 0 only when every draft on both sides accepted the same number of tokens.
    z = (lb - la) / se if se > 0 else (0.0 if lb == la else math.copysign(math.inf, lb - la))
    direction = "unchanged" if abs(z) <= Z95 else "fell" if z < 0 else "rose"
    return ra, rb, AcceptanceTest(difference=lb - la, standard_error=se, z=z, direction=direction)


def _positions(ra: Summary, rb: Summary) -> tuple[PositionChange, ...]:
    pa, pb = ra.positions, rb.positions

    def side(positions: tuple, i: int) -> tuple[float | None, tuple[float, float] | None]:
        if i >= len(positions):
            return None, None
        p = positions[i]
        known = p.rate_low is not None and p.rate_high is not None
        return p.rate, (p.rate_low, p.rate_high) if known else None

    return tuple(PositionChange(i + 1, *side(pa, i), *side(pb, i)) for i in range(max(len(pa), len(pb))))


def _overall_timing(windows: pl.LazyFrame | pl.DataFrame) -> SideTiming | None:
    """Steps-weighted means over every batch bucket (all timed steps: what the report shows)."""
    if not _timed(windows):
        return None
    timed = timing_by_batch(windows, [])
    if timed.is_empty():
        return None
    steps = timed["timed_steps"]

    def mean(col: str) -> float | None:
        values = timed[col]
        mask = values.is_not_null()
        if not mask.any():
            return None
        weighted = float((values.filter(mask) * steps.filter(mask)).sum())
        return weighted / float(steps.filter(mask).sum())

    return SideTiming(
        mean("mean_draft_seconds"), mean("mean_verify_seconds"), mean("mean_step_seconds"),
        mean("generated_tokens_per_second"),
    )  # fmt: skip


# --- verdict --------------------------------------------------------------------------------------


def kind_of(
    differences: tuple[Difference, ...], tp: Throughput | None, ra: Summary, rb: Summary, test: AcceptanceTest
) -> str:
    """regression, improvement, unchanged, configuration_changed or unknown: throughput decides
    when it moved beyond noise; across a configuration change nothing else makes a regression
    or an improvement (``render.sentences.verdict`` words it)."""
    if tp is not None and tp.direction is not None:
        moved = {"fell": "regression", "rose": "improvement"}.get(tp.direction)
        return moved or ("configuration_changed" if differences else "unchanged")
    if ra.mean_acceptance_length is None or rb.mean_acceptance_length is None:
        return "unknown"
    if differences:
        return "configuration_changed"
    if test.direction is None:
        return "unknown"
    return {"fell": "regression", "rose": "improvement", "unchanged": "unchanged"}[test.direction]


def compare(
    a: pl.LazyFrame | pl.DataFrame,
    b: pl.LazyFrame | pl.DataFrame,
    metadata_a: Sequence[RunMetadata] = (),
    metadata_b: Sequence[RunMetadata] = (),
    bench_a: pl.DataFrame | None = None,
    bench_b: pl.DataFrame | None = None,
    slo: Slo | None = None,
) -> Comparison:
    """Run A (before) against run B (after), with each side's run metadata and serving-benchmark
    results when there are some (goodput under ``slo``). Without steps on both sides, the
    serving results decide."""
    # Each side read once (:class:`_Side`): acceptance and timing from its cells.
    sa, sb = _Side.of(a, metadata_a), _Side.of(b, metadata_b)
    ra, rb, test = compare_acceptance(sa.cells, sb.cells)
    ca, cb = sa.configuration, sb.configuration
    differences = configuration_differences(ca, cb)
    setup = environment_differences(ca, cb)
    tp = _throughput(sa, sb)
    served = serving_changes(bench_a, bench_b, slo) if bench_a is not None and bench_b is not None else ()
    kind = kind_of(differences + setup, tp, ra, rb, test)
    if kind == "unknown" and served:
        moved = direction(served)
        kind = {"fell": "regression", "rose": "improvement", "unchanged": "unchanged"}.get(moved or "", "unknown")
    return Comparison(
        kind=kind,
        a=ra,
        b=rb,
        positions=_positions(ra, rb),
        timing_a=_overall_timing(sa.cells),
        timing_b=_overall_timing(sb.cells),
        configuration=ConfigurationComparison(ca, cb, differences, setup),
        throughput=tp,
        acceptance=test,
        causes=causes(metadata_a[0], metadata_b[0], rb.draft_acceptance_rate) if metadata_a and metadata_b else (),
        serving=served,
        own_a=sa.own,
        own_b=sb.own,
    )


__all__ = ["Comparison", "compare", "compare_acceptance", "compare_throughput", "configuration"]
