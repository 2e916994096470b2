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
the levels measured. The same is done for mean TPOT (speculation stops paying where its TPOT
ratio rises through 1) and, under an SLO, for goodput.

**Goodput** under an SLO (``--slo tpot:50ms,ttft:1s``) is vLLM's: requests that succeeded and met
every bound, per second of the run, from the per-request lists a result keeps (``latencies``
always; ``ttfts``, ``output_lens`` and ``errors`` with ``--save-detailed``). TPOT per request is
``(latency − ttft) / (output tokens − 1)``, 0 for one token, as vLLM computes it.

Where the speculative server drafted (almost) nothing during a level — a schedule's k=0 tier,
or no draft found — its ratios measure what a speculative server costs when it does not
speculate: the K=0 tax under load (``LoadRatio.drafting_share``).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import polars as pl

from specobs import schema
from specobs.analysis.intervals import geometric_ratio
from specobs.errors import SpecobsError
from specobs.formulas import acceptance_length_or_none, per_position_rates
from specobs.records import Crossover, LoadRatio, MeasureRatio, Serving, ServingLevel, Slo, SyntheticPrompts

#: The measures an SLO may bound (vLLM's ``--goodput`` keys).
SLO_MEASURES = ("ttft", "tpot", "e2el")
_UNITS = {"ms": 1e-3, "s": 1.0, "": 1e-3}  # a bare number is milliseconds, as in vLLM's --goodput
#: Latency measures compared per level, when both sides report them (lower is better).
LATENCY_STATISTICS = ("median", "p90", "p99")
#: vLLM's benchmark datasets whose prompts are synthetic token ids, not text (``random``,
#: ``random-mm``, ``random-rerank``: random ids; ``prefix_repetition``: random ids behind a shared
#: prefix; ``burstgpt``: consecutive ids at the trace's lengths; ``timed_trace``: random ids).
SYNTHETIC_TOKEN_DATASETS = ("random", "random-mm", "random-rerank", "prefix_repetition", "burstgpt", "timed_trace")
#: Metrics a crossover is found for, and whether higher is better.
CROSSOVER_METRICS = {"output_throughput": True, "mean_tpot_ms": False, "goodput": True}
#: Below this share of steps drafting, a level counts as not speculating (the K=0 tax): a k=0
#: tier still drafts while the batch ramps up and drains (8% of steps at concurrency 8 on the
#: bundled sweep).
NOT_DRAFTING = 0.10


def parse_slo(text: str) -> Slo:
    """``tpot:50ms,ttft:1s`` → :class:`Slo` (units ``ms`` or ``s``; a bare number is ms)."""
    bounds: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = re.fullmatch(r"(\w+)\s*[:=]\s*([0-9]*\.?[0-9]+(?:e[+-]?\d+)?)\s*(ms|s)?", part, re.IGNORECASE)
        if match is None:
            raise SpecobsError(f"--slo: {part!r} is not MEASURE:VALUE (e.g. tpot:50ms,ttft:1s)")
        name, value, unit = match.group(1).lower(), float(match.group(2)), (match.group(3) or "").lower()
        if name not in SLO_MEASURES:
            raise SpecobsError(f"--slo: unknown measure {name!r} (one of {', '.join(SLO_MEASURES)})")
        if name in bounds:
            raise SpecobsError(f"--slo: {name} given twice")
        if not math.isfinite(value) or value <= 0:
            raise SpecobsError(f"--slo: {name} must be a positive time")
        bounds[name] = value * _UNITS[unit]
    if not bounds:
        raise SpecobsError("--slo: no bound given (e.g. tpot:50ms,ttft:1s)")
    return Slo(ttft_s=bounds.get("ttft"), tpot_s=bounds.get("tpot"), e2el_s=bounds.get("e2el"))


def _good(row: dict[str, Any], slo: Slo) -> tuple[int, int] | None:
    """(good requests, requests) of one result under ``slo``, as vLLM counts them; None when
    the result lacks the per-request data the SLO needs."""
    latency, ttft, tokens = row["request_latency_s"], row["request_ttft_s"], row["request_output_tokens"]
    ok = row["request_ok"]
    if latency is None or (ok is None and row["failed"]):
        return None  # which requests failed is unknown
    if (slo.ttft_s is not None or slo.tpot_s is not None) and ttft is None:
        return None
    if slo.tpot_s is not None and tokens is None:
        return None
    good = 0
    for i, e2el in enumerate(latency):
        if ok is not None and not ok[i]:
            continue
        if slo.e2el_s is not None and e2el > slo.e2el_s:
            continue
        if slo.ttft_s is not None and ttft[i] > slo.ttft_s:
            continue
        if slo.tpot_s is not None:
            tpot = (e2el - ttft[i]) / (tokens[i] - 1) if tokens[i] > 1 else 0.0
            if tpot > slo.tpot_s:
                continue
        good += 1
    return good, len(latency)


def with_goodput(bench: pl.DataFrame, slo: Slo | None) -> pl.DataFrame:
    """``bench`` with ``goodput`` (good requests per second) and ``good`` / ``sent`` request
    counts per result under ``slo``; null without an SLO or the data it needs."""
    counts = [
        _good(row, slo) if slo is not None else None
        for row in bench.select("request_latency_s", "request_ttft_s", "request_output_tokens", "request_ok",
                                "failed").iter_rows(named=True)
    ]  # fmt: skip
    return bench.with_columns(
        pl.Series("good", [c[0] if c else None for c in counts], dtype=pl.Int64),
        pl.Series("sent", [c[1] if c else None for c in counts], dtype=pl.Int64),
    ).with_columns(goodput=pl.col("good") / pl.col("duration"))


def with_load(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with its load kind and level: concurrency where set, else the request rate.

    Results of several benchmark clients (``client``) are not repeats of one another (each sends
    its own prompts and measures in its own way): where the input mixes clients, each
    configuration is named with its client (``ngram · aiperf``), and :func:`serving` pairs a
    configuration only with the plain server its own client measured."""
    out = frame.with_columns(
        load=pl.when(pl.col("max_concurrency").is_not_null()).then(pl.lit("concurrency")).otherwise(pl.lit("rate")),
        level=pl.coalesce(pl.col("max_concurrency").cast(pl.Float64), pl.col("request_rate")),
    ).filter(pl.col("level").is_not_null())
    if "client" in out.columns and out["client"].n_unique() > 1:
        out = out.with_columns(
            config=pl.format("{} · {}", pl.col("config").fill_null("?"), pl.col("client").fill_null("?"))
        )
    return out


#: Seconds added on each side of a result's time window: vLLM writes its end to the second.
SPAN_SLACK = 1.0
_RESULT = ["source", "source_line"]
#: What a level is: one model's configuration at one load level.
_LEVEL = ["model", "config", "speculative", "load", "level"]
_CAPTURED = {"steps": pl.Int64, "batch": pl.Int64, "drafts": pl.Int64, "accepted": pl.Int64,
             "step_seconds": pl.Float64, "timed_steps": pl.Int64, "drafting_steps": pl.Int64,
             "draft_seconds": pl.Float64, "verify_seconds": pl.Float64, "split_steps": pl.Int64}  # fmt: skip
#: Per position, the accepted tokens summed (a list: position 1 first).
_PER_POSITION = "accepted_per_pos"
#: The columns of :func:`capture_sums` (one row per result).
CAPTURE_SUMS: dict[str, pl.DataType] = {
    "source": pl.String(), "source_line": pl.Int64(), **{c: t() for c, t in _CAPTURED.items()},
    "run_ids": pl.List(pl.String()), _PER_POSITION: pl.List(pl.Int64()),
}  # fmt: skip


def position_sums(frame: pl.LazyFrame | pl.DataFrame, keys: Sequence[str], column: str) -> pl.LazyFrame:
    """``column`` (a list per row, position 1 first) summed position by position per ``keys``:
    rows drafting fewer positions add to the first ones only."""
    return (
        frame.lazy()
        .select(*keys, column)
        .with_columns(_pos=pl.int_ranges(pl.col(column).list.len()))
        .explode(column, "_pos")
        .drop_nulls("_pos")
        .group_by(*keys, "_pos")
        .agg(pl.col(column).sum())
        .group_by(*keys)
        .agg(pl.col(column).sort_by("_pos"))
    )


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
        return schema.empty(CAPTURE_SUMS)
    steps = (
        windows.lazy()
        .filter(pl.col("counters").eq_missing("step"))
        .select(
            "end_ts",
            "batch_size",
            "num_drafts",
            "num_accepted_tokens",
            "step_seconds",
            "draft_seconds",
            "verify_seconds",
            "run_id",
            pl.col("num_accepted_tokens_per_pos").alias(_PER_POSITION),
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
            drafting_steps=(pl.col("num_drafts") > 0).sum().cast(pl.Int64),
            draft_seconds=pl.col("draft_seconds").filter(_split).sum(),
            verify_seconds=pl.col("verify_seconds").filter(_split).sum(),
            split_steps=_split.sum().cast(pl.Int64),
            run_ids=pl.col("run_id").drop_nulls().unique().sort(),
        )
        .join(position_sums(joined, _RESULT, _PER_POSITION), on=_RESULT, how="left", nulls_equal=True)
        .collect()
    )


#: A step whose draft and verify seconds are both known.
_split = pl.col("draft_seconds").is_not_null() & pl.col("verify_seconds").is_not_null()


def levels(bench: pl.DataFrame, captured: pl.DataFrame | None = None, slo: Slo | None = None) -> list[ServingLevel]:
    """Per model, configuration and load level: runs and the mean of each measure, goodput under
    ``slo``, and what the in-engine capture recorded during those runs (:func:`capture_sums`)."""
    frame = with_goodput(with_load(bench), slo)
    if captured is not None and captured.height:
        captured = schema.conform(captured, CAPTURE_SUMS)
        summed = captured.group_by(_RESULT).agg(
            *(pl.col(c).sum() for c in _CAPTURED),
            pl.col("run_ids").list.explode(keep_nulls=False, empty_as_null=False).unique().sort(),
        )
        frame = frame.join(summed, on=_RESULT, how="left", nulls_equal=True)
        level_positions = position_sums(frame.join(captured.select(*_RESULT, _PER_POSITION), on=_RESULT,
                                                   nulls_equal=True), _LEVEL, _PER_POSITION).collect()  # fmt: skip
    else:
        frame = frame.with_columns(
            *(pl.lit(None, dtype).alias(c) for c, dtype in _CAPTURED.items()),
            pl.lit(None, pl.List(pl.String)).alias("run_ids"),
        )
        level_positions = pl.DataFrame(schema={**dict.fromkeys(_LEVEL, pl.Null), _PER_POSITION: pl.List(pl.Int64)})
    grouped = (
        frame.group_by(*_LEVEL, maintain_order=True)
        .agg(
            runs=pl.len(),
            output_throughput=pl.col("output_throughput").mean(),
            mean_tpot_ms=pl.col("mean_tpot_ms").mean(),
            p99_tpot_ms=pl.col("p99_tpot_ms").mean(),
            mean_ttft_ms=pl.col("mean_ttft_ms").mean(),
            acceptance_length=pl.col("spec_decode_acceptance_length").mean(),
            spec_decode_num_drafts=pl.col("spec_decode_num_drafts")
            .sum()
            .filter(pl.col("spec_decode_num_drafts").is_not_null().any()),
            captured_steps=pl.col("steps").sum(),
            clients=pl.col("client").drop_nulls().unique().sort(),
            run_ids=pl.col("run_ids").list.explode(keep_nulls=False, empty_as_null=False).drop_nulls().unique().sort(),
            goodput=pl.col("goodput").mean().filter(pl.col("goodput").is_not_null().all()),
            _good=pl.col("good").sum(),
            _sent=pl.col("sent").sum(),
            _batch=pl.col("batch").sum(),
            _drafts=pl.col("drafts").sum(),
            _accepted=pl.col("accepted").sum(),
            _seconds=pl.col("step_seconds").sum(),
            _timed=pl.col("timed_steps").sum(),
            _drafting=pl.col("drafting_steps").sum(),
            _draft_s=pl.col("draft_seconds").sum(),
            _verify_s=pl.col("verify_seconds").sum(),
            _split=pl.col("split_steps").sum(),
        )
        .join(level_positions.cast({c: frame.schema[c] for c in _LEVEL}), on=_LEVEL, how="left", nulls_equal=True)
        .with_columns(
            pl.col("spec_decode_num_drafts").list.first(),
            pl.col("goodput").list.first(),
            captured_batch_size=pl.when(pl.col("captured_steps") > 0).then(pl.col("_batch") / pl.col("captured_steps")),
            captured_acceptance_length=acceptance_length_or_none(pl.col("_accepted"), pl.col("_drafts")),
            captured_step_ms=pl.when(pl.col("_timed") > 0).then(1000 * pl.col("_seconds") / pl.col("_timed")),
            captured_drafting_share=pl.when(pl.col("captured_steps") > 0).then(
                pl.col("_drafting") / pl.col("captured_steps")
            ),
            captured_per_position=per_position_rates(pl.col(_PER_POSITION), pl.col("_drafts")),
            captured_draft_ms=pl.when(pl.col("_split") > 0).then(1000 * pl.col("_draft_s") / pl.col("_split")),
            captured_verify_ms=pl.when(pl.col("_split") > 0).then(1000 * pl.col("_verify_s") / pl.col("_split")),
            slo_attained=pl.when(pl.col("goodput").list.first().is_not_null() & (pl.col("_sent") > 0)).then(
                pl.col("_good") / pl.col("_sent")
            ),
        )
        .drop(
            "_good",
            "_sent",
            "_batch",
            "_drafts",
            "_accepted",
            "_seconds",
            "_timed",
            "_drafting",
            "_draft_s",
            "_verify_s",
            "_split",
            _PER_POSITION,
        )
        .sort("model", "config", "load", "level", nulls_last=True)
    )
    return [
        ServingLevel(**{**row, "run_ids": tuple(row["run_ids"] or ()), "clients": tuple(row["clients"] or ()),
                        "captured_per_position": tuple(row["captured_per_position"] or ()) or None})
        for row in grouped.iter_rows(named=True)
    ]  # fmt: skip


def _crossing(points: Sequence[tuple[float, float | None]]) -> tuple[float | None, str]:
    """Where a ratio curve (level, ratio; above 1 pays) first falls through 1: (level, how):
    ``crossed``, ``never`` (above 1 at every level), ``below`` (at or under 1 from the lowest),
    ``unknown``."""
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


def _inverse(value: float | None) -> float | None:
    return 1 / value if value else None


def crossover(
    key: tuple[str | None, str | None, str], metric: str, points: Iterable[tuple[float, tuple[float | None, ...]]]
) -> Crossover | None:
    """The :class:`Crossover` of one configuration in ``metric`` from (level, (ratio, low,
    high)) points; a lower-is-better metric is turned round first (1/ratio, bounds swapped)."""
    higher = CROSSOVER_METRICS[metric]
    turned = [(x, (r, lo, hi) if higher else (_inverse(r), _inverse(hi), _inverse(lo))) for x, (r, lo, hi) in points]
    turned = [(x, t) for x, t in turned if t[0] is not None]
    if not turned:
        return None
    at, how = _crossing([(x, t[0]) for x, t in turned])
    low, _ = _crossing([(x, t[1]) for x, t in turned])
    high, _ = _crossing([(x, t[2]) for x, t in turned])
    measured = [x for x, _ in turned]
    return Crossover(*key, metric, at, how, low, high, min(measured), max(measured),
                     repeated=all(t[1] is not None for _, t in turned))  # fmt: skip


def _latency_ratios(b: pl.DataFrame, a: pl.DataFrame) -> tuple[MeasureRatio, ...]:
    """Median and percentile latency ratios both sides report."""
    out = []
    for name in schema.BENCH_LATENCIES:
        for stat in LATENCY_STATISTICS:
            column = f"{stat}_{name}_ms"
            vb, va = b[column].drop_nulls().to_list(), a[column].drop_nulls().to_list()
            if vb and va:
                out.append(MeasureRatio(column, *geometric_ratio(vb, va)))
    return tuple(out)


def _goodput_ratio(b: pl.DataFrame, a: pl.DataFrame) -> tuple[float | None, float | None, float | None]:
    """Goodput B/A when every run of both sides has a positive goodput (a zero has no log)."""
    vb, va = b["goodput"].to_list(), a["goodput"].to_list()
    if not vb or not va or any(v is None or v <= 0 for v in (*vb, *va)):
        return None, None, None
    return geometric_ratio(vb, va)


def load_ratio(
    key: tuple[str | None, str | None, str | None, str, float], b: pl.DataFrame, a: pl.DataFrame
) -> LoadRatio:
    """B over A at one level (``key``: model, configuration, A's configuration, load, level) from
    their results (with :func:`with_goodput`'s columns): throughput, mean TPOT, latency
    percentiles and goodput as ratios of geometric means with Welch intervals over repeats."""
    tp = geometric_ratio(b["output_throughput"].to_list(), a["output_throughput"].to_list())
    tpot = geometric_ratio(b["mean_tpot_ms"].drop_nulls().to_list(), a["mean_tpot_ms"].drop_nulls().to_list())
    good = _goodput_ratio(b, a)
    return LoadRatio(*key, b.height, a.height, *tp, *tpot, latency=_latency_ratios(b, a),
                     goodput_ratio=good[0], goodput_low=good[1], goodput_high=good[2])  # fmt: skip


def serving(bench: pl.DataFrame, captured: pl.DataFrame | None = None, slo: Slo | None = None) -> Serving | None:
    """Every speculative configuration against the plain server of its model at each level both
    ran, and where it stops paying in throughput, TPOT and (under ``slo``) goodput; with
    ``captured`` (:func:`capture_sums`), what the engines did during each level. None without
    results."""
    if not bench.height:
        return None
    frame = with_goodput(with_load(bench), slo)
    found = levels(bench, captured, slo)
    drafting = {(lv.model, lv.config, lv.load, lv.level): _drafting_share(lv) for lv in found}
    by_level = {(lv.model, lv.config, lv.load, lv.level): lv for lv in found}
    ratios: list[LoadRatio] = []
    crossovers: list[Crossover] = []
    by_client = frame.partition_by("model", "client", "load", as_dict=True, maintain_order=True)
    for (model, _client, load), part in by_client.items():
        plain = part.filter(~pl.col("speculative"))
        plain_configs = plain["config"].unique(maintain_order=True).to_list()
        plain_config = plain_configs[0] if len(plain_configs) == 1 else None
        for config in part.filter(pl.col("speculative"))["config"].unique(maintain_order=True).to_list():
            spec = part.filter(pl.col("config") == config)
            points: dict[str, list[tuple[float, tuple[float | None, ...]]]] = {m: [] for m in CROSSOVER_METRICS}
            for level in sorted(set(spec["level"].to_list()) & set(plain["level"].to_list())):
                a, b = plain.filter(pl.col("level") == level), spec.filter(pl.col("level") == level)
                ratio = load_ratio((model, config, plain_config, load, level), b, a)
                mine = by_level.get((model, config, load, level))
                base = by_level.get((model, plain_config, load, level))
                ratios.append(replace(
                    ratio, drafting_share=drafting.get((model, config, load, level)),
                    step_time_ratio=_step_time_ratio(mine, base),
                    acceptance_length=mine.captured_acceptance_length if mine is not None else None,
                ))  # fmt: skip
                tp = (ratio.throughput_ratio, ratio.throughput_low, ratio.throughput_high)
                tpot = (ratio.tpot_ratio, ratio.tpot_low, ratio.tpot_high)
                good = (ratio.goodput_ratio, ratio.goodput_low, ratio.goodput_high)
                for metric, value in (("output_throughput", tp), ("mean_tpot_ms", tpot), ("goodput", good)):
                    points[metric].append((level, value))
            for metric, curve in points.items():
                if (found_crossover := crossover((model, config, load), metric, curve)) is not None:
                    crossovers.append(found_crossover)
    return Serving(tuple(found), tuple(ratios), tuple(crossovers), slo, synthetic_prompts(bench))


def synthetic_prompts(bench: pl.DataFrame) -> tuple[SyntheticPrompts, ...]:
    """The results whose dataset is synthetic tokens (:data:`SYNTHETIC_TOKEN_DATASETS`), per
    dataset and client, with the configurations measured on them."""
    if "dataset" not in bench.columns:
        return ()
    synthetic = bench.filter(pl.col("dataset").str.to_lowercase().is_in(SYNTHETIC_TOKEN_DATASETS))
    if not synthetic.height:
        return ()
    grouped = synthetic.group_by("dataset", "client", maintain_order=True).agg(
        pl.col("config").unique(maintain_order=True), pl.len()
    )
    return tuple(
        SyntheticPrompts(dataset, client, tuple(configs), n) for dataset, client, configs, n in grouped.iter_rows()
    )


def _step_time_ratio(spec: ServingLevel | None, plain: ServingLevel | None) -> float | None:
    """The speculative engine's captured mean step time over the plain engine's."""
    if spec is None or plain is None or not spec.captured_step_ms or not plain.captured_step_ms:
        return None
    return spec.captured_step_ms / plain.captured_step_ms


#: A move of at least this share across the levels is a trend the finding names.
MATERIAL_TREND = 0.05


def _drafting_share(level: ServingLevel) -> float | None:
    """The share of a level's captured steps that drafted; 0 when the benchmark's own counters
    saw no draft; None when neither says."""
    if level.captured_drafting_share is not None:
        return level.captured_drafting_share
    return 0.0 if level.spec_decode_num_drafts == 0 else None


def serving_changes(a: pl.DataFrame, b: pl.DataFrame, slo: Slo | None = None) -> tuple[LoadRatio, ...]:
    """B over A for every model, configuration and load level both ran (``specobs compare`` of
    two sets of serving results: ``plain_config`` holds A's configuration, the same name)."""
    fa, fb = with_goodput(with_load(a), slo), with_goodput(with_load(b), slo)
    keys = ["model", "config", "load", "level"]
    both = fa.select(keys).unique().join(fb.select(keys).unique(), on=keys, how="inner", nulls_equal=True)
    out = []
    for model, config, load, level in both.sort(keys, nulls_last=True).iter_rows():
        here = (
            pl.col("model").eq_missing(model) & pl.col("config").eq_missing(config)
            & (pl.col("load") == load) & (pl.col("level") == level)
        )  # fmt: skip
        out.append(load_ratio((model, config, config, load, level), fb.filter(here), fa.filter(here)))
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


__all__ = [
    "CAPTURE_SUMS",
    "MATERIAL_TREND",
    "capture_sums",
    "crossover",
    "direction",
    "levels",
    "load_ratio",
    "parse_slo",
    "serving",
    "serving_changes",
    "spans",
    "with_goodput",
    "with_load",
]
