"""Speculation under load, from serving-benchmark results (``schema.BENCH``): each speculative
configuration against the plain server at the same load level, and where it stops paying.

A *load level* is a ``max_concurrency`` (or, without one, a ``request_rate``). Per
configuration and level, the repeats' output throughputs and mean TPOTs are compared with the
plain server's at that level as ratios of geometric means, ``B/A`` (speculative over plain:
throughput above 1 pays, TPOT below 1 pays), with a 95% interval from the spread of the
repeats on a log scale (Welch's t); with one run on a side there is no interval, and the
result says so.

The **crossover** is where the throughput ratio falls through 1, interpolated between the two
levels around it on log(level) and log(ratio); its interval is where the ratio's 95% bounds
cross 1 (the lower bound crosses first), open at an end where a bound does not cross within
the levels measured.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import polars as pl

from specobs.analysis.intervals import geometric_ratio
from specobs.records import Crossover, LoadRatio, Serving, ServingLevel


def with_load(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with its load kind and level: concurrency where set, else the request rate."""
    return frame.with_columns(
        load=pl.when(pl.col("max_concurrency").is_not_null()).then(pl.lit("concurrency")).otherwise(pl.lit("rate")),
        level=pl.coalesce(pl.col("max_concurrency").cast(pl.Float64), pl.col("request_rate")),
    ).filter(pl.col("level").is_not_null())


#: Seconds added on each side of a result's time window: vLLM writes its end to the second.
SPAN_SLACK = 1.0
_RESULT = ["source", "source_line"]
_CAPTURED = {"steps": pl.Int64, "batch": pl.Int64, "drafts": pl.Int64, "accepted": pl.Int64,
             "step_seconds": pl.Float64, "timed_steps": pl.Int64}  # fmt: skip


def spans(bench: pl.DataFrame) -> pl.DataFrame:
    """Each result's time window, ``[end − duration, end]`` widened by :data:`SPAN_SLACK`, its end
    read from vLLM's ``date`` (``YYYYMMDD-HHMMSS``) in this machine's local time zone (vLLM
    writes the benchmark machine's local time: run specobs with the same ``TZ``)."""
    end = (
        pl.col("date").str.strptime(pl.Datetime("us"), "%Y%m%d-%H%M%S", strict=False)
        .dt.replace_time_zone(_local_zone()).dt.epoch("us") / 1e6
    )  # fmt: skip
    return bench.select(
        *_RESULT, "speculative", start=end - pl.col("duration") - SPAN_SLACK, end=end + SPAN_SLACK
    ).filter(pl.col("start").is_not_null())


def _local_zone() -> str:
    import datetime as dt

    zone = dt.datetime.now().astimezone().tzinfo
    name = getattr(zone, "key", None)
    if name:
        return str(name)
    offset = dt.datetime.now().astimezone().utcoffset() or dt.timedelta()
    hours = int(offset.total_seconds() // 3600)
    return "UTC" if hours == 0 else f"Etc/GMT{-hours:+d}"


def capture_sums(windows: pl.LazyFrame | pl.DataFrame, bench: pl.DataFrame) -> pl.DataFrame:
    """The captured engine steps inside each result's time window (:func:`spans`), summed per
    result: steps, batch sizes, drafts, accepted tokens, step seconds. A speculative result
    takes the steps of a speculative engine (a method named), a plain one those of a plain
    engine. Sums of the parts of an input add up (one server runs at a time in a sweep)."""
    if not bench.height:
        return pl.DataFrame(schema={"source": pl.String, "source_line": pl.Int64, **_CAPTURED})
    steps = (
        windows.lazy()
        .filter(pl.col("counters").eq_missing("step"))
        .select(
            "end_ts",
            "batch_size",
            "num_drafts",
            "num_accepted_tokens",
            "step_seconds",
            pl.col("method").is_not_null().alias("speculative_engine"),
        )
    )
    joined = steps.join_where(
        spans(bench).lazy(),
        pl.col("end_ts") >= pl.col("start"),
        pl.col("end_ts") <= pl.col("end"),
    ).filter(pl.col("speculative_engine") == pl.col("speculative"))
    return (
        joined.group_by(_RESULT)
        .agg(
            steps=pl.len().cast(pl.Int64),
            batch=pl.col("batch_size").sum(),
            drafts=pl.col("num_drafts").sum(),
            accepted=pl.col("num_accepted_tokens").sum(),
            step_seconds=pl.col("step_seconds").sum(),
            timed_steps=pl.col("step_seconds").is_not_null().sum().cast(pl.Int64),
        )
        .collect()
    )


def levels(bench: pl.DataFrame, captured: pl.DataFrame | None = None) -> list[ServingLevel]:
    """Per model, configuration and load level: runs and the mean of each measure, and what the
    in-engine capture recorded during those runs (:func:`capture_sums`)."""
    frame = with_load(bench)
    if captured is not None and captured.height:
        summed = captured.group_by(_RESULT).agg(pl.col(c).sum() for c in _CAPTURED)
        frame = frame.join(summed, on=_RESULT, how="left", nulls_equal=True)
    else:
        frame = frame.with_columns(pl.lit(None, dtype).alias(c) for c, dtype in _CAPTURED.items())
    grouped = (
        frame.group_by("model", "config", "speculative", "load", "level", maintain_order=True)
        .agg(
            runs=pl.len(),
            output_throughput=pl.col("output_throughput").mean(),
            mean_tpot_ms=pl.col("mean_tpot_ms").mean(),
            p99_tpot_ms=pl.col("p99_tpot_ms").mean(),
            mean_ttft_ms=pl.col("mean_ttft_ms").mean(),
            acceptance_length=pl.col("spec_decode_acceptance_length").mean(),
            captured_steps=pl.col("steps").sum(),
            _batch=pl.col("batch").sum(),
            _drafts=pl.col("drafts").sum(),
            _accepted=pl.col("accepted").sum(),
            _seconds=pl.col("step_seconds").sum(),
            _timed=pl.col("timed_steps").sum(),
        )
        .with_columns(
            captured_batch_size=pl.when(pl.col("captured_steps") > 0).then(pl.col("_batch") / pl.col("captured_steps")),
            captured_acceptance_length=pl.when(pl.col("_drafts") > 0).then(1 + pl.col("_accepted") / pl.col("_drafts")),
            captured_step_ms=pl.when(pl.col("_timed") > 0).then(1000 * pl.col("_seconds") / pl.col("_timed")),
        )
        .drop("_batch", "_drafts", "_accepted", "_seconds", "_timed")
        .sort("model", "config", "load", "level", nulls_last=True)
    )
    return [ServingLevel(**row) for row in grouped.iter_rows(named=True)]


def _crossing(points: Sequence[tuple[float, float | None]]) -> tuple[float | None, str]:
    """Where a ratio curve (level, ratio) first falls through 1: (level, how): ``crossed``,
    ``never`` (above 1 at every level), ``below`` (at or under 1 from the lowest), ``unknown``."""
    known = [(x, r) for x, r in points if r is not None and r > 0]
    if not known:
        return None, "unknown"
    if known[0][1] <= 1:
        return None, "below"
    for (x1, r1), (x2, r2) in itertools.pairwise(known):
        if r2 <= 1:
            y1, y2 = math.log(r1), math.log(r2)
            t = y1 / (y1 - y2) if y1 != y2 else 0.0
            return math.exp(math.log(x1) + t * (math.log(x2) - math.log(x1))), "crossed"
    return None, "never"


def serving(bench: pl.DataFrame, captured: pl.DataFrame | None = None) -> Serving | None:
    """Every speculative configuration against the plain server of its model at each level both
    ran, and the throughput crossover; with ``captured`` (:func:`capture_sums`), what the
    engines did during each level. None without results."""
    if not bench.height:
        return None
    frame = with_load(bench)
    ratios: list[LoadRatio] = []
    crossovers: list[Crossover] = []
    for (model, load), part in frame.partition_by("model", "load", as_dict=True, maintain_order=True).items():
        plain = part.filter(~pl.col("speculative"))
        plain_configs = plain["config"].unique(maintain_order=True).to_list()
        for config in part.filter(pl.col("speculative"))["config"].unique(maintain_order=True).to_list():
            spec = part.filter(pl.col("config") == config)
            points = []
            bounds_low, bounds_high = [], []
            for level in sorted(set(spec["level"].to_list()) & set(plain["level"].to_list())):
                a, b = plain.filter(pl.col("level") == level), spec.filter(pl.col("level") == level)
                tp = geometric_ratio(b["output_throughput"].to_list(), a["output_throughput"].to_list())
                tpot = geometric_ratio(
                    b["mean_tpot_ms"].drop_nulls().to_list(), a["mean_tpot_ms"].drop_nulls().to_list()
                )
                plain_config = plain_configs[0] if len(plain_configs) == 1 else None
                ratios.append(LoadRatio(model, config, plain_config, load, level, b.height, a.height, *tp, *tpot))
                points.append((level, tp[0]))
                bounds_low.append((level, tp[1]))
                bounds_high.append((level, tp[2]))
            if not points:
                continue
            at, how = _crossing(points)
            low, _ = _crossing(bounds_low)
            high, _high_how = _crossing(bounds_high)
            measured = [x for x, _ in points]
            crossovers.append(Crossover(model, config, load, "output_throughput", at, how, low, high,
                                        min(measured), max(measured),
                                        repeated=all(r is not None for _, r in bounds_low)))  # fmt: skip
    return Serving(tuple(levels(bench, captured)), tuple(ratios), tuple(crossovers))


def serving_changes(a: pl.DataFrame, b: pl.DataFrame) -> tuple[LoadRatio, ...]:
    """B over A for every model, configuration and load level both ran (``specobs compare`` of
    two sets of serving results: ``plain_config`` holds A's configuration, the same name)."""
    fa, fb = with_load(a), with_load(b)
    keys = ["model", "config", "load", "level"]
    both = fa.select(keys).unique().join(fb.select(keys).unique(), on=keys, how="inner", nulls_equal=True)
    out = []
    for model, config, load, level in both.sort(keys, nulls_last=True).iter_rows():
        here = (
            pl.col("model").eq_missing(model) & pl.col("config").eq_missing(config)
            & (pl.col("load") == load) & (pl.col("level") == level)
        )  # fmt: skip
        sa, sb = fa.filter(here), fb.filter(here)
        tp = geometric_ratio(sb["output_throughput"].to_list(), sa["output_throughput"].to_list())
        tpot = geometric_ratio(sb["mean_tpot_ms"].drop_nulls().to_list(), sa["mean_tpot_ms"].drop_nulls().to_list())
        out.append(LoadRatio(model, config, config, load, level, sb.height, sa.height, *tp, *tpot))
    return tuple(out)


def direction(ratios: tuple[LoadRatio, ...]) -> str | None:
    """``fell`` when some level's throughput ratio is below 1 beyond noise and none above,
    ``rose`` the other way, ``mixed`` both, ``unchanged`` neither; None without an interval."""
    tested = [r for r in ratios if r.throughput_low is not None and r.throughput_high is not None]
    if not tested:
        return None
    fell = any(r.throughput_high is not None and r.throughput_high < 1 for r in tested)
    rose = any(r.throughput_low is not None and r.throughput_low > 1 for r in tested)
    return "mixed" if fell and rose else "fell" if fell else "rose" if rose else "unchanged"


__all__ = ["capture_sums", "direction", "levels", "serving", "serving_changes", "spans", "with_load"]
