"""Altair charts for the app: labelled axes with units, a colour-blind-safe palette.

Each function takes a frame from :mod:`specobs.dashboard.views` and returns a chart; none
computes anything. Colours are Okabe and Ito's palette, safe for the common colour-vision
deficiencies, with the plain-decoding baseline drawn in grey.
"""

from __future__ import annotations

import altair as alt
import polars as pl

from specobs import buckets
from specobs.analysis.under_load import with_load
from specobs.records import Serving

#: Okabe & Ito (2008), "Color Universal Design": distinguishable under deuteranopia,
#: protanopia and tritanopia.
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
PARTS = {"draft": "#E69F00", "verify": "#0072B2", "other": "#BBBBBB"}
FACET_WIDTH = 200
HEIGHT = 260


def _color(field: str, title: str) -> alt.Color:
    return alt.Color(
        field,
        title=title,
        scale=alt.Scale(range=list(OKABE_ITO)),
        legend=alt.Legend(orient="bottom", columns=4, symbolLimit=0, labelLimit=200),
    )


def _shape(field: str, title: str, groups: int) -> alt.Shape | alt.ShapeValue:
    """Point shapes as a second cue once there are more groups than colours."""
    if groups <= len(OKABE_ITO):
        return alt.ShapeValue("circle")
    return alt.Shape(field, title=title, legend=alt.Legend(orient="bottom", columns=4, symbolLimit=0, labelLimit=200))


def positions(frame: pl.DataFrame, curve: str) -> alt.LayerChart:
    """One per-position curve (r_i or β_i) per group, with 95% interval bars."""
    data = frame.filter(pl.col("curve") == curve)
    base = alt.Chart(data, title=curve).encode(
        x=alt.X("position:O", title="draft position i", axis=alt.Axis(labelAngle=0)),
        color=_color("group:N", "group"),
    )
    bars = base.mark_errorbar(ticks=True).encode(
        y=alt.Y("low:Q", title="share of drafts", axis=alt.Axis(format="%"), scale=alt.Scale(domain=[0, 1])),
        y2="high:Q",
    )
    line = base.mark_line(point=alt.OverlayMarkDef(filled=True, size=50)).encode(
        y=alt.Y("rate:Q"),
        shape=_shape("group:N", "group", data.get_column("group").n_unique()),
        tooltip=[
            alt.Tooltip("group:N"),
            alt.Tooltip("position:O"),
            alt.Tooltip("rate:Q", format=".3f"),
            alt.Tooltip("low:Q", format=".3f", title="95% low"),
            alt.Tooltip("high:Q", format=".3f", title="95% high"),
        ],
    )
    return (bars + line).properties(height=HEIGHT)


def acceptance_over_time(series: pl.DataFrame, changes: pl.DataFrame) -> alt.LayerChart:
    """Acceptance length over time per group; detected changes as dashed rules."""
    line = (
        alt.Chart(series)
        .mark_line(point=series.height <= 200)
        .encode(
            x=alt.X("time:T", title="time (UTC)"),
            y=alt.Y("mean_acceptance_length:Q", title="acceptance length (tokens)", scale=alt.Scale(zero=False)),
            color=_color("group:N", "group"),
            tooltip=[
                alt.Tooltip("group:N"),
                alt.Tooltip("time:T", format="%Y-%m-%d %H:%M:%S"),
                alt.Tooltip("mean_acceptance_length:Q", format=".3f", title="acceptance length"),
                alt.Tooltip("num_drafts:Q", title="drafts"),
            ],
        )
    )
    rules = (
        alt.Chart(changes)
        .mark_rule(strokeDash=[6, 4], strokeWidth=2, color="#D55E00")
        .encode(
            x="time:T",
            tooltip=[
                alt.Tooltip("group:N"),
                alt.Tooltip("kind:N", title="change"),
                alt.Tooltip("before:Q", format=".2f"),
                alt.Tooltip("after:Q", format=".2f"),
                alt.Tooltip("z:Q", format=".1f"),
            ],
        )
    )
    return alt.LayerChart(layer=[line, rules]).properties(height=HEIGHT)  # = alt.layer(), typed


def step_time(parts: pl.DataFrame) -> alt.FacetChart:
    """Where a step's time goes, per batch bucket: draft, verify and the rest, per group."""
    order = buckets.ordered(parts.get_column("batch").to_list())
    return (
        alt.Chart(parts)
        .mark_bar()
        .encode(
            x=alt.X("batch:N", title="batch size (running requests)", sort=order, axis=alt.Axis(labelAngle=0)),
            y=alt.Y("ms:Q", title="mean time per step (ms)", stack="zero"),
            color=alt.Color(
                "part:N",
                title="part of the step",
                scale=alt.Scale(domain=list(PARTS), range=list(PARTS.values())),
                legend=alt.Legend(orient="bottom", columns=4, symbolLimit=0, labelLimit=200),
            ),
            order=alt.Order("part_order:Q"),
            tooltip=[
                alt.Tooltip("group:N"),
                alt.Tooltip("batch:N"),
                alt.Tooltip("part:N"),
                alt.Tooltip("ms:Q", format=".3f", title="ms"),
            ],
        )
        .transform_calculate(part_order="indexof(['draft', 'verify', 'other'], datum.part)")
        .properties(width=FACET_WIDTH, height=HEIGHT)
        .facet(facet=alt.Facet("group:N", title=None), columns=3)
        .resolve_axis(x="independent")
    )


def by_bucket(table: pl.DataFrame, column: str, title: str, percent: bool = False) -> alt.Chart:
    """One timing quantity (cost ratio, draft share, rejected-draft share) per batch bucket and group."""
    data = table.drop_nulls(column)
    order = buckets.ordered(data.get_column("batch").to_list())
    axis = alt.Axis(format="%") if percent else alt.Axis()
    return (
        alt.Chart(data)
        .mark_bar()
        .encode(
            x=alt.X("batch:N", title="batch size (running requests)", sort=order, axis=alt.Axis(labelAngle=0)),
            xOffset="group:N",
            y=alt.Y(f"{column}:Q", title=title, axis=axis),
            color=_color("group:N", "group"),
            tooltip=[
                alt.Tooltip("group:N"),
                alt.Tooltip("batch:N"),
                alt.Tooltip(f"{column}:Q", format=".1%" if percent else ".4f", title=title),
            ],
        )
        .properties(height=HEIGHT)
    )


def tuning(predicted: pl.DataFrame, measured: pl.DataFrame, quantity: str) -> alt.FacetChart:
    """Predicted ``speedup`` or ``tokens_per_second`` against k, one panel per batch bucket.

    Speedup panels carry the bootstrap 95% band and a rule at 1 (plain decoding); throughput
    panels overlay the measured points (triangles) where the input ran that k and bucket.
    """
    pred = predicted.with_columns(kind=pl.lit("predicted"), steps=pl.lit(None, pl.UInt32))
    columns = ["method", "k", "batch", "batch_min", "kind", "steps", "speedup", "low", "high", "tokens_per_second"]
    frames = [pred.select(columns)]
    if quantity == "tokens_per_second" and measured.height:
        meas = measured.with_columns(
            kind=pl.lit("measured"),
            speedup=pl.lit(None, pl.Float64),
            low=pl.lit(None, pl.Float64),
            high=pl.lit(None, pl.Float64),
        )
        frames.append(meas.select(columns))
    data = pl.concat(frames, how="vertical_relaxed")
    title = "decode tokens per second"
    if quantity == "speedup":
        title = "speedup over plain decoding (×; measured where measured)"
    k_axis = alt.X("k:Q", title="speculative tokens k", axis=alt.Axis(tickMinStep=1, format="d"))
    color = _color("method:N", "method")
    tooltip = [
        alt.Tooltip("method:N"),
        alt.Tooltip("batch:N", title="batch"),
        alt.Tooltip("k:Q"),
        alt.Tooltip("kind:N"),
        alt.Tooltip(f"{quantity}:Q", format=".3f", title=quantity.replace("_", " ")),
    ]
    predicted_only = alt.datum.kind == "predicted"
    line = (
        alt.Chart()
        .mark_line(point=True)
        .encode(
            x=k_axis, y=alt.Y(f"{quantity}:Q", title=title, scale=alt.Scale(zero=False)), color=color, tooltip=tooltip
        )
        .transform_filter(predicted_only)
    )
    layers: list[alt.Chart] = [line]
    if quantity == "speedup":
        band = (
            alt.Chart()
            .mark_area(opacity=0.2)
            .encode(x="k:Q", y="low:Q", y2="high:Q", color=color)
            .transform_filter(predicted_only & (alt.datum.low != None))  # noqa: E711 - a Vega expression
        )
        one = alt.Chart().mark_rule(strokeDash=[4, 4], color="#666666").encode(y=alt.datum(1))
        layers = [band, line, one]
    else:
        points = (
            alt.Chart()
            .mark_point(shape="triangle-up", size=90, filled=True)
            .encode(
                x="k:Q",
                y=f"{quantity}:Q",
                color=color,
                tooltip=[*tooltip, alt.Tooltip("steps:Q", title="steps measured")],
            )
            .transform_filter(alt.datum.kind == "measured")
        )
        layers.append(points)
    return (
        alt.layer(*layers, data=data)
        .properties(width=FACET_WIDTH, height=HEIGHT - 40)
        .facet(facet=alt.Facet("batch:N", title="batch size bucket", sort=alt.SortField("batch_min")), columns=4)
        .resolve_scale(y="independent" if quantity == "tokens_per_second" else "shared")
        .resolve_axis(x="independent", y="independent")
    )


def tune_measurements(frame: pl.DataFrame) -> alt.FacetChart:
    """A ``specobs tune`` run: measured tokens/s against k with 95% bars, one panel per batch size;
    the plain engine as a grey rule with its band, the chosen k ringed.

    ``frame`` has the columns of ``TuneResult.measurements`` plus ``chosen`` (bool).
    """
    spec = frame.filter(pl.col("engine") == "speculative").rename({"num_speculative_tokens": "k"})
    plain = frame.filter(pl.col("engine") == "plain").rename({"num_speculative_tokens": "k"})
    data = pl.concat([spec, plain], how="vertical_relaxed").with_columns(
        pl.col("low").clip(lower_bound=0.0), status=pl.when(pl.col("eliminated")).then(pl.lit("dropped by the race"))
        .otherwise(pl.lit("raced to the end")),
    )  # fmt: skip
    k_axis = alt.X("k:Q", title="k (0: drafting off)",
                   axis=alt.Axis(tickMinStep=1, format="d"))  # fmt: skip
    y = alt.Y("tokens_per_second:Q", title="generated tokens per second", scale=alt.Scale(zero=False))
    is_spec = alt.datum.engine == "speculative"
    tooltip = [
        alt.Tooltip("engine:N"),
        alt.Tooltip("k:Q"),
        alt.Tooltip("tokens_per_second:Q", format=",.1f", title="tokens/s"),
        alt.Tooltip("low:Q", format=",.1f"),
        alt.Tooltip("high:Q", format=",.1f"),
        alt.Tooltip("rounds:Q"),
        alt.Tooltip("status:N"),
    ]
    bars = alt.Chart().mark_rule(color=OKABE_ITO[0]).encode(x="k:Q", y="low:Q", y2="high:Q").transform_filter(is_spec)
    points = (
        alt.Chart()
        .mark_point(filled=True, size=60, color=OKABE_ITO[0])
        .encode(
            x=k_axis, y=y, opacity=alt.condition(alt.datum.eliminated, alt.value(0.4), alt.value(1.0)), tooltip=tooltip
        )
        .transform_filter(is_spec)
    )
    chosen = (
        alt.Chart()
        .mark_point(size=260, color=OKABE_ITO[5], strokeWidth=2)
        .encode(x="k:Q", y="tokens_per_second:Q")
        .transform_filter(is_spec & alt.datum.chosen)
    )
    plain_rule = alt.Chart().mark_rule(color="#666666", strokeDash=[4, 4]).encode(y="tokens_per_second:Q",
                                                                                  tooltip=tooltip)  # fmt: skip
    plain_band = alt.Chart().mark_rect(color="#BBBBBB", opacity=0.3).encode(y="low:Q", y2="high:Q")
    plain_only = alt.datum.engine == "plain"
    layers = [plain_band.transform_filter(plain_only), plain_rule.transform_filter(plain_only), bars, points, chosen]
    return (
        alt.layer(*layers, data=data)
        .properties(width=FACET_WIDTH, height=HEIGHT - 40)
        .facet(facet=alt.Facet("batch_size:O", title="batch size (grey: plain engine, ringed: chosen)"), columns=4)
        .resolve_scale(y="independent")
    )


def compare_positions(frame: pl.DataFrame) -> alt.LayerChart:
    """Per-position acceptance of the two compared sides, with 95% intervals."""
    base = alt.Chart(frame).encode(
        x=alt.X("position:O", title="draft position i", axis=alt.Axis(labelAngle=0)),
        xOffset="run:N",
        color=_color("run:N", "run"),
    )
    bars = base.mark_errorbar(ticks=True).encode(
        y=alt.Y(
            "low:Q",
            title="acceptance rate r_i (share of drafts)",
            axis=alt.Axis(format="%"),
            scale=alt.Scale(domain=[0, 1]),
        ),
        y2="high:Q",
    )
    points = base.mark_point(filled=True, size=70).encode(
        y="rate:Q",
        tooltip=[
            alt.Tooltip("run:N"),
            alt.Tooltip("position:O"),
            alt.Tooltip("rate:Q", format=".3f"),
            alt.Tooltip("changed:N", title="changed beyond both intervals"),
        ],
    )
    return (bars + points).properties(height=HEIGHT)


def request_histogram(frame: pl.DataFrame) -> alt.Chart:
    """Finished requests per acceptance-length bin (tokens per verify step, bonus token counted)."""
    return (
        alt.Chart(frame, title="requests by acceptance length")
        .mark_bar(color=OKABE_ITO[0])
        .encode(
            x=alt.X("low:Q", bin="binned", title="acceptance length (tokens per step)", scale=alt.Scale(zero=False)),
            x2="high:Q",
            y=alt.Y("requests:Q", title="requests"),
            tooltip=[
                alt.Tooltip("low:Q", format=".2f", title="from"),
                alt.Tooltip("high:Q", format=".2f", title="to"),
                alt.Tooltip("requests:Q"),
            ],
        )
        .properties(height=HEIGHT)
    )


def serving_load(frame: pl.DataFrame) -> alt.HConcatChart:
    """Serving-benchmark results against load: output tokens/s and mean TPOT per level, one line
    per configuration (plain dashed grey), each run a dot; a crossover as a vertical rule.

    ``frame``: rows of ``schema.BENCH`` with ``load`` and ``level`` (``analysis.under_load``), and a
    ``crossover`` column (the configuration's crossover level or null)."""
    data = frame.with_columns(
        kind=pl.when(pl.col("speculative")).then(pl.lit("speculative")).otherwise(pl.lit("plain"))
    )
    load = data["load"][0] if data.height else "concurrency"
    x = alt.X("level:Q", title="max concurrency" if load == "concurrency" else "request rate (requests/s)",
              scale=alt.Scale(type="log"))  # fmt: skip
    color = alt.Color("config:N", title="configuration", scale=alt.Scale(range=list(OKABE_ITO)))
    dash = alt.StrokeDash("kind:N", title="server", scale=alt.Scale(domain=["speculative", "plain"],
                                                                     range=[[1, 0], [4, 4]]))  # fmt: skip

    def panel(field: str, title: str) -> alt.LayerChart:
        y = alt.Y(f"mean({field}):Q", title=title, scale=alt.Scale(zero=False))
        line = alt.Chart(data).mark_line(point=False).encode(x=x, y=y, color=color, strokeDash=dash)
        dots = (
            alt.Chart(data)
            .mark_point(filled=True, size=30, opacity=0.6)
            .encode(x="level:Q", y=alt.Y(f"{field}:Q"), color=color, tooltip=["config", "level", field, "run_number"])
        )
        rules = (
            alt.Chart(data.filter(pl.col("crossover").is_not_null()).unique("config"))
            .mark_rule(strokeDash=[2, 2])
            .encode(x="crossover:Q", color=color)
        )
        return alt.LayerChart(layer=[line, dots, rules], width=2 * FACET_WIDTH, height=HEIGHT)

    return alt.hconcat(panel("output_throughput", "output tokens per second"), panel("mean_tpot_ms", "mean TPOT (ms)"))


SERVING_CHART_COLUMNS = ("model", "config", "speculative", "load", "level", "run_number",
                         "output_throughput", "mean_tpot_ms")  # fmt: skip


def serving_frames(bench: pl.DataFrame, serving: Serving) -> list[tuple[str, pl.DataFrame]]:
    """The benchmark's runs for ``charts.serving_load``, one frame per model and load kind (the
    chart has one x axis), each run with its configuration's throughput crossover level
    (``crossover``, null where it did not cross); titled by model and load."""
    crossing = pl.DataFrame(
        [
            {"model": c.model, "config": c.config, "load": c.load, "crossover": c.level}
            for c in serving.crossovers
            if c.metric == "output_throughput"
        ],
        schema={"model": pl.String, "config": pl.String, "load": pl.String, "crossover": pl.Float64},
    )
    runs = with_load(bench).select(SERVING_CHART_COLUMNS)
    runs = runs.join(crossing, on=["model", "config", "load"], how="left", nulls_equal=True)
    frames = []
    for (model, load), part in runs.partition_by("model", "load", as_dict=True, maintain_order=True).items():
        frames.append((f"{model or 'model ?'}, by {load}", part))
    return frames
