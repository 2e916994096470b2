"""Frames for the app's charts and tables, reshaped from the package's results.

Each function takes the typed results (``specobs.records``: a report, a recommendation, a
comparison) that analysis and tuning computed and returns a polars frame in the long shape a chart
wants (one row per mark), with units in the column names where they are not plain counts.
Reshaping only: no estimate is computed here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from specobs import buckets, dimensions
from specobs.records import (
    BatchTiming,
    Comparison,
    Crossover,
    GroupSummary,
    LoadAdvice,
    Recommendation,
    RequestAcceptance,
    RequestGroup,
    Serving,
    Split,
    Summary,
)
from specobs.render import charts, sentences

#: The two per-position curves: (name shown, the ``PositionRate`` attribute prefix).
CURVES = (
    ("acceptance rate r_i", "rate"),
    ("conditional acceptance β_i", "conditional"),
)
#: Shown for rows without a method: a plain-decoding engine (k = 0).
PLAIN = "plain engine"
#: Group dimensions that :func:`compare_choices` offers, by ``--by`` name.
#: (In the vocabulary's order, the input file last: runs and configurations are what one compares first.)
COMPARE_DIMENSIONS = tuple(
    sorted((d.name for d in dimensions.having(dimensions.COMPARE)), key=lambda name: name == "source")
)


def group_label(row: Mapping[str, Any], columns: Sequence[str]) -> str:
    """``ngram · 4`` for a row grouped by method and k; ``all`` without groups; a row without
    a method is the plain engine."""
    parts = [PLAIN if c == "method" and row.get(c) is None else row.get(c) for c in columns]
    return " · ".join(str(p) for p in parts if p is not None) or "all"


def _time(column: str) -> pl.Expr:
    return (pl.col(column) * 1_000_000).cast(pl.Int64).cast(pl.Datetime("us", "UTC"))


def _groups(groups: Sequence[GroupSummary | Summary]) -> list[tuple[Mapping[str, Any], Summary]]:
    return [(g.labels, g.summary) if isinstance(g, GroupSummary) else ({}, g) for g in groups]


def positions_frame(groups: Sequence[GroupSummary | Summary], columns: Sequence[str]) -> pl.DataFrame:
    """One row per group, curve and position (1-based): ``rate`` with its 95% ``low``/``high``."""
    records = []
    for labels, summary in _groups(groups):
        if not summary.num_drafts:
            continue
        group = group_label(labels, columns)
        for curve, attr in CURVES:
            for p in summary.positions:
                value = getattr(p, attr)
                if value is None:
                    continue
                low, high = getattr(p, f"{attr}_low"), getattr(p, f"{attr}_high")
                records.append(
                    {"group": group, "curve": curve, "position": p.position, "rate": value, "low": low, "high": high}
                )
    schema = {
        "group": pl.String,
        "curve": pl.String,
        "position": pl.Int64,
        "rate": pl.Float64,
        "low": pl.Float64,
        "high": pl.Float64,
    }
    return pl.DataFrame(records, schema=schema)


def groups_table(groups: Sequence[GroupSummary], columns: Sequence[str]) -> pl.DataFrame:
    """The per-group summary as a flat table (lists joined), for display and CSV download."""
    records = []
    for labels, s in _groups(groups):
        record = {c: labels.get(c) for c in columns}
        record.update(
            drafts=s.num_drafts,
            draft_tokens=s.num_draft_tokens,
            accepted_tokens=s.num_accepted_tokens,
            acceptance_length=s.mean_acceptance_length,
            acceptance_length_low=s.mean_acceptance_length_low,
            acceptance_length_high=s.mean_acceptance_length_high,
            draft_acceptance_rate=s.draft_acceptance_rate,
            acceptance_rate_per_position=_joined(s.acceptance_rate_per_position),
            conditional_acceptance_rate_per_position=_joined(s.conditional_acceptance_rate_per_position),
            conditional_trend=s.conditional_trend,
        )
        records.append(record)
    return pl.DataFrame(records, infer_schema_length=None)


def _joined(values: Sequence[float | None] | None) -> str | None:
    if values is None:
        return None
    return " ".join("–" if v is None else f"{v:.3f}" for v in values)


#: Not series of their own over time: k and batch size change from step to step in one engine.
NOT_OVER_TIME = ("num_spec_tokens", "batch_bucket", "batch_size", "hour")


def over_time_columns(columns: Sequence[str]) -> list[str]:
    """The group columns a series over time is drawn per: ``columns`` except k and batch size,
    which a dynamic-k engine changes from step to step (their series would be fragments of one
    timeline)."""
    return [c for c in columns if c not in NOT_OVER_TIME]


def over_time_frame(series: pl.DataFrame, columns: Sequence[str]) -> pl.DataFrame:
    """The session's series over time (``Session.over_time`` of :func:`over_time_columns`) with
    a ``group`` label and a ``time`` column."""
    columns = over_time_columns(columns)
    labels = (
        [group_label(r, columns) for r in series.select(columns).to_dicts()] if columns else ["all"] * series.height
    )
    return series.with_columns(group=pl.Series(labels, dtype=pl.String), time=_time("end_ts"))


def changes_frame(changes: Sequence[Any], columns: Sequence[str]) -> pl.DataFrame:
    """Detected changes (``specobs.analysis.timeseries.Change``) with a ``time`` column."""
    records = [
        {
            "group": group_label(c.labels, columns),
            "ts": c.change.ts,
            "kind": c.kind,
            "before": c.change.before,
            "after": c.change.after,
            "z": c.change.z,
        }
        for c in changes
    ]
    schema = {
        "group": pl.String,
        "ts": pl.Float64,
        "kind": pl.String,
        "before": pl.Float64,
        "after": pl.Float64,
        "z": pl.Float64,
    }
    return pl.DataFrame(records, schema=schema).with_columns(time=_time("ts"))


TIMING_TABLE = {
    "timed_steps": "steps",
    "mean_draft_seconds": "draft ms",
    "mean_verify_seconds": "verify ms",
    "mean_other_seconds": "other ms",
    "mean_step_seconds": "step ms",
    "draft_share": "draft share",
    "cost_ratio": "cost ratio",
    "rejected_draft_share": "rejected-draft share",
    "generated_tokens_per_second": "tokens/s",
}
_MS = ("mean_draft_seconds", "mean_verify_seconds", "mean_other_seconds", "mean_step_seconds")


def timing_table(timing: Sequence[BatchTiming], columns: Sequence[str]) -> pl.DataFrame:
    """The report's timing by batch bucket (``Report.timing``) with readable headers, times in ms."""
    records = []
    for t in timing:
        record: dict[str, Any] = {"group": group_label(t.labels, columns), "batch": t.batch_bucket}
        for key, name in TIMING_TABLE.items():
            value = getattr(t, key)
            record[name] = value * 1000 if key in _MS and value is not None else value
        records.append(record)
    schema = {
        "group": pl.String,
        "batch": pl.String,
        "steps": pl.Int64,
        **{name: pl.Float64 for key, name in TIMING_TABLE.items() if key != "timed_steps"},
    }
    return pl.DataFrame(records, schema=schema)


def timing_parts(table: pl.DataFrame) -> pl.DataFrame:
    """Long form of :func:`timing_table` for stacked bars: group, batch, part, ms."""
    parts = {"draft ms": "draft", "verify ms": "verify", "other ms": "other"}
    return (
        table.unpivot(index=["group", "batch"], on=list(parts), variable_name="part", value_name="ms")
        .with_columns(pl.col("part").replace_strict(parts))
        .drop_nulls("ms")
    )


def _method_label(method: str | None, draft_model: str | None = None) -> str:
    return dimensions.method_label(method, draft_model, PLAIN)


def predicted_frame(rec: Recommendation) -> pl.DataFrame:
    """``rec.predicted`` with a method label, a batch bucket label and interval bounds; the
    speedup is the recommendation's estimate (measured where measured), as its interval is."""
    records = []
    for p in rec.predicted:
        low, high = p.interval or (None, None)
        records.append(
            {
                "method": _method_label(p.method, p.draft_model),
                "k": p.num_speculative_tokens,
                "batch": buckets.label(p.batch_size_min, p.batch_size_max),
                "batch_min": p.batch_size_min,
                "batch_size": p.batch_size,
                "speedup": p.estimate,
                "low": low,
                "high": high,
                "tokens_per_second": p.tokens_per_second,
                "extrapolated": p.extrapolated,
            }
        )
    schema = {
        "method": pl.String,
        "k": pl.Int64,
        "batch": pl.String,
        "batch_min": pl.Int64,
        "batch_size": pl.Float64,
        "speedup": pl.Float64,
        "low": pl.Float64,
        "high": pl.Float64,
        "tokens_per_second": pl.Float64,
        "extrapolated": pl.Boolean,
    }
    return pl.DataFrame(records, schema=schema)


def method_labels(rec: Recommendation) -> dict[str | None, str]:
    """Method → the label :func:`predicted_frame` gives it (with its draft model)."""
    return {p.method: _method_label(p.method, p.draft_model) for p in rec.predicted}


def measured_frame(measured: pl.DataFrame | None, labels: dict[str | None, str]) -> pl.DataFrame:
    """Measured decode tokens/s per method, k and batch bucket (``Session.measured``), labelled
    as in ``labels`` (:func:`method_labels`); the plain engine's points are repeated under each
    method, as every method's k = 0."""
    if measured is None:
        schema = {"method": pl.String, "k": pl.Int64, "batch": pl.String, "batch_min": pl.Int64}
        return pl.DataFrame(schema={**schema, "tokens_per_second": pl.Float64, "steps": pl.Int64})
    measured = measured.rename(
        {"batch_bucket": "batch", "measured": "tokens_per_second", "batch_size_min": "batch_min"}
    ).with_columns(pl.col("method").cast(pl.String))  # relabelled below: text, not a category
    plain = measured.filter(pl.col("method").is_null())
    spec = measured.filter(pl.col("method").is_not_null())
    frames = [spec.with_columns(method=pl.col("method").replace(labels))]
    frames += [plain.with_columns(method=pl.lit(label)) for label in sorted(set(labels.values()))]
    return pl.concat(frames).select("method", "k", "batch", "batch_min", "tokens_per_second", "steps")


def by_batch_table(rec: Recommendation) -> pl.DataFrame:
    """The recommended k per batch bucket, 0 shown as off."""
    return pl.DataFrame(
        [
            {
                "method": row.method,
                "batch": buckets.label(row.batch_size_min, row.batch_size_max),
                "k": "off" if row.num_speculative_tokens == 0 else str(row.num_speculative_tokens),
                "predicted speedup": row.predicted_speedup,
                "low": (row.interval or (None, None))[0],
                "high": (row.interval or (None, None))[1],
                "basis": row.basis,
                "traffic steps": row.measured_steps,
            }
            for row in rec.by_batch_size
        ],
        schema={
            "method": pl.String,
            "batch": pl.String,
            "k": pl.String,
            "predicted speedup": pl.Float64,
            "low": pl.Float64,
            "high": pl.Float64,
            "basis": pl.String,
            "traffic steps": pl.Int64,
        },
    )


def method_comparison_table(rec: Recommendation) -> pl.DataFrame:
    """Best predicted speedup per method and batch bucket, and the winner."""
    records = []
    for row in rec.method_comparison:
        record: dict[str, Any] = {"batch": buckets.label(row.batch_size_min, row.batch_size_max)}
        record.update({f"{m} speedup": v for m, v in row.speedups.items()})
        record["winner"] = row.winner
        records.append(record)
    return pl.DataFrame(records, infer_schema_length=None)


def split_table(split: Split) -> pl.DataFrame:
    """A split (by context, or side by side) as the report's table: one text column per header."""
    headers = sentences.split_headers(split)
    rows = sentences.split_rows(split)
    records = [dict(zip(headers, row, strict=True)) for row in rows]
    return pl.DataFrame(records, schema=dict.fromkeys(headers, pl.String))


def compare_positions_frame(cmp: Comparison, names: tuple[str, str]) -> pl.DataFrame:
    """Per-position rates of both sides with intervals, for one chart."""
    records = []
    for p in cmp.positions:
        sides = ((p.a, p.a_interval), (p.b, p.b_interval))
        for (rate, interval), name in zip(sides, names, strict=True):
            if rate is None:
                continue
            low, high = interval or (None, None)
            records.append(
                {"run": name, "position": p.position, "rate": rate, "low": low, "high": high, "changed": p.changed}
            )
    schema = {
        "run": pl.String,
        "position": pl.Int64,
        "rate": pl.Float64,
        "low": pl.Float64,
        "high": pl.Float64,
        "changed": pl.Boolean,
    }
    return pl.DataFrame(records, schema=schema)


def compare_table(cmp: Comparison, names: tuple[str, str]) -> pl.DataFrame:
    """The headline numbers of both sides, one row per quantity."""
    a, b = cmp.a, cmp.b
    rows: list[tuple[str, Any, Any]] = [
        ("acceptance length", a.mean_acceptance_length, b.mean_acceptance_length),
        ("acceptance length, 95% low", a.mean_acceptance_length_low, b.mean_acceptance_length_low),
        ("acceptance length, 95% high", a.mean_acceptance_length_high, b.mean_acceptance_length_high),
        ("draft acceptance rate", a.draft_acceptance_rate, b.draft_acceptance_rate),
        ("drafts", a.num_drafts, b.num_drafts),
    ]
    for label, key, scale in (
        ("draft ms per step", "mean_draft_seconds", 1000),
        ("verify ms per step", "mean_verify_seconds", 1000),
        ("step ms", "mean_step_seconds", 1000),
        ("tokens/s of step time", "generated_tokens_per_second", 1),
    ):
        va, vb = (getattr(t, key) if t is not None else None for t in (cmp.timing_a, cmp.timing_b))
        if va is not None or vb is not None:
            rows.append((label, None if va is None else va * scale, None if vb is None else vb * scale))
    return pl.DataFrame(
        {
            "quantity": [r[0] for r in rows],
            names[0]: [_float(r[1]) for r in rows],
            names[1]: [_float(r[2]) for r in rows],
        },
        schema={"quantity": pl.String, names[0]: pl.Float64, names[1]: pl.Float64},
    )


def request_histogram_frame(r: RequestAcceptance) -> pl.DataFrame:
    """One row per acceptance-length bin: ``low``, ``high`` (tokens per step), ``requests``."""
    return pl.DataFrame(
        [b.to_dict() for b in r.histogram], schema={"low": pl.Float64, "high": pl.Float64, "requests": pl.Int64}
    )


#: The per-request groupings as the requests table names them.
REQUEST_GROUPINGS = (
    ("by_prompt_length", "prompt tokens"),
    ("by_output_length", "output tokens"),
    ("by_workload", "workload"),
    ("by_method", "method"),
)


def requests_table(r: RequestAcceptance) -> pl.DataFrame:
    """The overall row, then every group of a grouping with more than one value."""

    def row(by: str, g: RequestGroup) -> dict[str, Any]:
        values = g.to_dict()
        values.pop("label")
        return {"by": by, "group": g.label if by != "all" else None, **values}

    rows = [row("all", r.overall)]
    for name, by in REQUEST_GROUPINGS:
        groups: tuple[RequestGroup, ...] = getattr(r, name)
        if len(groups) > 1:
            rows += [row(by, g) for g in groups]
    return pl.DataFrame(rows)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def sources_table(sources: Sequence[Any]) -> pl.DataFrame:
    """What was read: one row per input (``specobs.ingest.SourceReport``)."""
    return pl.DataFrame(
        [
            {"input": s.name, "format": s.format, "lines": s.lines, "windows": s.windows, "skipped lines": s.skipped}
            for s in sources
        ],
        schema={
            "input": pl.String,
            "format": pl.String,
            "lines": pl.Int64,
            "windows": pl.Int64,
            "skipped lines": pl.Int64,
        },
    )


def skipped_table(skipped: Sequence[Any], limit: int | None = None) -> pl.DataFrame:
    """Skipped lines (``specobs.errors.Skipped``): input, line, why."""
    rows = skipped if limit is None else skipped[:limit]
    return pl.DataFrame(
        [{"input": s.source, "line": s.line, "why": s.why} for s in rows],
        schema={"input": pl.String, "line": pl.Int64, "why": pl.String},
    )


# --- serving under load (``Report.serving``) -----------------------------------------------------

#: A serving table's columns: (record field, header, type). Chosen, not every field of the record,
#: so that a field added to the record later changes no table (the JSON download carries them all).
ServingColumns = tuple[tuple[str, str, pl.DataType], ...]
SERVING_LABELS: ServingColumns = (
    ("model", "model", pl.String()),
    ("config", "configuration", pl.String()),
    ("load", "load", pl.String()),
    ("level", "level", pl.Float64()),
)
#: What the benchmark measured per configuration and level (means over runs).
SERVING_LEVEL_COLUMNS: ServingColumns = (
    *SERVING_LABELS,
    ("runs", "runs", pl.Int64()),
    ("output_throughput", "output tokens/s", pl.Float64()),
    ("mean_tpot_ms", "mean TPOT ms", pl.Float64()),
    ("p99_tpot_ms", "p99 TPOT ms", pl.Float64()),
    ("mean_ttft_ms", "mean TTFT ms", pl.Float64()),
    ("acceptance_length", "acceptance length (server's counters)", pl.Float64()),
    ("goodput", "goodput req/s (SLO)", pl.Float64()),
    ("slo_attained", "share meeting the SLO", pl.Float64()),
)
#: What the in-engine capture recorded during each level's runs.
SERVING_CAPTURE_COLUMNS: ServingColumns = (
    *SERVING_LABELS,
    ("captured_steps", "captured steps", pl.Int64()),
    ("captured_batch_size", "batch size", pl.Float64()),
    ("captured_acceptance_length", "acceptance length", pl.Float64()),
    ("captured_step_ms", "step ms", pl.Float64()),
    ("captured_drafting_share", "share of steps drafting", pl.Float64()),
    ("captured_draft_ms", "draft ms", pl.Float64()),
    ("captured_verify_ms", "verify ms", pl.Float64()),
)
#: Speculative over plain per level; each ratio is followed by its interval (see :func:`serving_ratios_table`).
SERVING_RATIO_COLUMNS: ServingColumns = (
    *SERVING_LABELS,
    ("plain_config", "plain", pl.String()),
    ("runs", "runs", pl.Int64()),
    ("plain_runs", "plain runs", pl.Int64()),
    ("throughput_ratio", "throughput ratio", pl.Float64()),
    ("tpot_ratio", "TPOT ratio", pl.Float64()),
    ("goodput_ratio", "goodput ratio (SLO)", pl.Float64()),
    ("drafting_share", "share of steps drafting", pl.Float64()),
)
#: The interval of each ratio column: (ratio field, low field, high field).
SERVING_INTERVALS = (
    ("throughput_ratio", "throughput_low", "throughput_high"),
    ("tpot_ratio", "tpot_low", "tpot_high"),
    ("goodput_ratio", "goodput_low", "goodput_high"),
)
#: Where to draft under load (``Report.load_advice``).
LOAD_ADVICE_COLUMNS: ServingColumns = (
    ("model", "model", pl.String()),
    ("config", "configuration", pl.String()),
    ("num_speculative_tokens", "k", pl.Int64()),
    ("metric", "metric", pl.String()),
    ("verdict", "verdict", pl.String()),
    ("stops_paying_at", "stops paying near", pl.Float64()),
    ("draft_up_to", "draft up to batch", pl.Int64()),
    ("crossover_batch", "crossover batch", pl.Int64()),
    ("crossover_batch_high", "crossover batch 95% high", pl.Int64()),
    ("batch_from", "batch from", pl.String()),
    ("speculative_config", "--speculative-config", pl.String()),
)
SERVING_CROSSOVER_COLUMNS: ServingColumns = (
    ("model", "model", pl.String()),
    ("config", "configuration", pl.String()),
    ("load", "load", pl.String()),
    ("metric", "metric", pl.String()),
    ("how", "how", pl.String()),
    ("level", "crossover", pl.Float64()),
    ("low", "95% low", pl.Float64()),
    ("high", "95% high", pl.Float64()),
    ("lowest_level", "lowest level", pl.Float64()),
    ("highest_level", "highest level", pl.Float64()),
    ("repeated", "repeats at every level", pl.Boolean()),
)
#: Metrics named as people say them; a metric not listed is shown by its field name.
SERVING_METRICS = {"output_throughput": "output throughput", "mean_tpot_ms": "mean TPOT", "goodput": "goodput"}
#: Said where a ratio has no interval (one run on a side).
NO_INTERVAL = "one run: no interval"


def _serving_table(items: Sequence[Any], columns: ServingColumns) -> pl.DataFrame:
    return pl.DataFrame(
        [{header: getattr(item, name) for name, header, _ in columns} for item in items],
        schema={header: dtype for _, header, dtype in columns},
    )


def load_label(load: str, level: float | None) -> str:
    """``concurrency 4`` or ``2.5 requests/s``; ``?`` for no level."""
    if level is None:
        return "?"
    value = f"{level:.0f}" if level == round(level) else f"{level:.1f}"
    return f"concurrency {value}" if load == "concurrency" else f"{value} requests/s"


def interval_text(low: float | None, high: float | None) -> str:
    """A ratio's 95% interval as text, or :data:`NO_INTERVAL` where there is none."""
    return NO_INTERVAL if low is None or high is None else f"{low:.2f}–{high:.2f}"


def load_advice_table(advice: Sequence[LoadAdvice]) -> pl.DataFrame:
    """One row per configuration: where it should draft (:data:`LOAD_ADVICE_COLUMNS`)."""
    return _serving_table(advice, LOAD_ADVICE_COLUMNS)


def serving_levels_table(serving: Serving) -> pl.DataFrame:
    """What the benchmark measured per configuration and level (:data:`SERVING_LEVEL_COLUMNS`)."""
    return _serving_table(serving.levels, SERVING_LEVEL_COLUMNS)


def serving_capture_table(serving: Serving) -> pl.DataFrame:
    """What the capture recorded during each level's runs; no rows without a capture."""
    return _serving_table([lv for lv in serving.levels if lv.captured_steps], SERVING_CAPTURE_COLUMNS)


def serving_ratios_table(serving: Serving) -> pl.DataFrame:
    """Speculative over plain per level: each ratio of :data:`SERVING_RATIO_COLUMNS` and, after
    it, its 95% interval as text (:data:`NO_INTERVAL` with one run on a side)."""
    table = _serving_table(serving.ratios, SERVING_RATIO_COLUMNS)
    headers = {name: header for name, header, _ in SERVING_RATIO_COLUMNS}
    for ratio, low, high in SERVING_INTERVALS:
        texts = [None if getattr(r, ratio) is None else interval_text(getattr(r, low), getattr(r, high))
                 for r in serving.ratios]  # fmt: skip
        name = f"{headers[ratio]} 95% interval"
        table = table.insert_column(table.columns.index(headers[ratio]) + 1, pl.Series(name, texts, pl.String))
    return table


def serving_crossovers_table(serving: Serving) -> pl.DataFrame:
    """Every crossover, of every metric, with the metric named (:data:`SERVING_CROSSOVER_COLUMNS`)."""
    return _serving_table(serving.crossovers, SERVING_CROSSOVER_COLUMNS)


def crossover_text(c: Crossover, plain: str | None = None) -> str:
    """One crossover in words: the configuration, the metric, how its ratio against plain
    crosses parity, and the 95% interval (open ends said as the report says them)."""
    lowest, highest = load_label(c.load, c.lowest_level), load_label(c.load, c.highest_level)
    metric = SERVING_METRICS.get(c.metric, c.metric)
    who = f"{c.config} against {plain or 'the plain server'}" + (f" ({c.model})" if c.model else "")
    if c.how == "crossed":
        how = f"crossed parity with plain near {load_label(c.load, c.level)}"
    elif c.how == "never":
        how = f"never crossed parity within the levels measured ({lowest} to {highest})"
    elif c.how == "below":
        how = f"below parity from the lowest level measured ({lowest}) through {highest}"
    else:
        return f"{who}, {metric}: unknown — no level has both a speculative and a plain result."
    if not c.repeated:
        interval = NO_INTERVAL
    else:
        low = load_label(c.load, c.low) if c.low is not None else f"at or below {lowest}"
        high = load_label(c.load, c.high) if c.high is not None else f"beyond {highest}"
        interval = f"95% interval {low} to {high}"
    return f"{who}, {metric}: {how}; {interval}."


def plain_of(serving: Serving, c: Crossover) -> str | None:
    """The plain configuration a crossover's configuration was measured against."""
    for r in serving.ratios:
        if (r.model, r.config, r.load) == (c.model, c.config, c.load):
            return r.plain_config
    return None


#: The benchmark's columns the load chart draws (``charts.serving_load``).
#: The serving chart's frames (one place: the report's PNG draws the same).
serving_chart_frames = charts.serving_frames
