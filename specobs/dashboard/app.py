"""The Streamlit app: pages, sidebar and caching. Layout only.

Run it with ``specobs dashboard [PATHS] [--prometheus URL]`` or, from a checkout,
``streamlit run dashboards/streamlit_app.py``. The inputs are one summed session
(:meth:`specobs.api.Session.summed`: sums per time bucket and label set, never rows), cached by
the inputs' signature in process memory (``st.cache_resource``); every page asks the session's
verbs (the command line's), which keep each answer by its arguments and filters, so changing
pages or going back to a filter already seen costs no recomputation, and a new filter costs a
filter of the sums.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import traceback
from collections.abc import Callable
from typing import Any

import polars as pl
import streamlit as st

from specobs.api import GROUP_KEYS, Filters, Inputs, Session, parse_slo
from specobs.dashboard import views
from specobs.dashboard.data import default_inputs, signature
from specobs.errors import SpecobsError
from specobs.records import RECOMMEND_DEFAULTS, FindingKind, RequestAcceptance, Slo, rounded
from specobs.render import charts, sentences, to_json
from specobs.render import tuning as render
from specobs.render.plot import tune_frame
from specobs.render.sentences import (
    TUNER_HEADERS,
    config_check_note,
    config_warning,
    headline,
    tune_headline,
    tune_notes,
    tuner_rows,
    tuner_state,
)
from specobs.render.tuning import BAND_HEADERS, band_rows, band_title

PAGES = ("Overview", "Cost", "Tuning", "Serving under load", "Compare", "Sources")
#: Grouping the Overview and Cost pages start with (``--by`` names).
DEFAULT_GROUPS = ("method", "k")
#: Groupings offered (batch buckets and hours have their own charts).
GROUP_CHOICES = tuple(k for k in GROUP_KEYS if k not in ("batch", "hour"))
SKIPPED_SHOWN = 500
log = logging.getLogger("specobs.dashboard")


@st.cache_resource(max_entries=4, show_spinner="Reading inputs…")
def _session(key: tuple, _inputs: Inputs, _uploads: tuple[tuple[str, bytes], ...]) -> Session:
    """The inputs read and summed once per signature (the session keeps every answer)."""
    return Session.summed(_inputs, _uploads)


# --- sidebar ------------------------------------------------------------------------------------


def _page() -> str:
    wanted = st.query_params.get("page", PAGES[0])
    index = PAGES.index(wanted) if wanted in PAGES else 0
    page = st.sidebar.radio("Page", PAGES, index=index, key="page")
    st.query_params["page"] = page
    return page


def _inputs() -> tuple[Inputs, tuple[tuple[str, bytes], ...]]:
    start = default_inputs()
    with st.sidebar.expander("Data", expanded=False):
        text = st.text_area(
            "Paths (one per line)",
            value="\n".join(start.paths),
            key="paths",
            help="Log files, Prometheus scrapes, event files or folders on the machine running the app.",
        )
        files = st.file_uploader(
            "Upload files",
            accept_multiple_files=True,
            key="uploads",
            help="vLLM or SGLang logs (also .gz), saved /metrics scrapes, specobs event files.",
        )
        url = st.text_input(
            "Prometheus URL", value=start.prometheus or "", key="prometheus", placeholder="http://127.0.0.1:9090"
        )
        since = st.text_input("Prometheus range", value=start.since, key="since", help="How far back: 30m, 6h, 2d.")
        match = st.text_input("Prometheus selector", value=start.match, key="match", placeholder='{model_name="..."}')
    paths = tuple(line.strip() for line in text.splitlines() if line.strip())
    uploads = tuple((f.name, f.getvalue()) for f in files or ())
    return Inputs(paths, url.strip() or None, since.strip() or "6h", match.strip()), uploads


def _filters(session: Session) -> tuple[Filters, tuple[str, ...]]:
    st.sidebar.subheader("Filters")
    values = []
    for column, options in session.options.items():
        chosen = st.sidebar.multiselect(column, options, key=f"filter_{column}", placeholder="all")
        if chosen:
            values.append((column, tuple(chosen)))
    time_range: tuple[float, float] | None = None
    grid = session.grid
    if grid is not None and grid.count > 1:
        low, high = (dt.datetime.fromtimestamp(v, dt.UTC).replace(tzinfo=None) for v in (grid.first, grid.last))
        step = dt.timedelta(seconds=grid.width)
        chosen_range = st.sidebar.slider(
            "time range (UTC)",
            min_value=low,
            max_value=high,
            value=(low, high),
            step=step,
            format="HH:mm:ss" if high - low < dt.timedelta(days=1) else "MM-DD HH:mm",
            key="time_range",
            help=f"Snaps to the edges of {grid.count} time buckets of {_duration(grid.width)}: the app keeps "
            "sums per bucket, not rows.",
        )
        if chosen_range != (low, high):
            first, last = chosen_range
            time_range = (first.replace(tzinfo=dt.UTC).timestamp(), last.replace(tzinfo=dt.UTC).timestamp())
    groups = st.sidebar.multiselect("group by", GROUP_CHOICES, default=list(DEFAULT_GROUPS), key="group_by")
    return Filters(tuple(values), time_range), tuple(groups)


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds / 60:.3g} min" if seconds >= 60 else f"{seconds:.3g} s"


# --- pages --------------------------------------------------------------------------------------


def _download(label: str, frame: pl.DataFrame, name: str) -> None:
    st.download_button(label, frame.write_csv(), file_name=name, mime="text/csv", key=f"download_{name}")


def _chart(where: Any, chart: Any, stretch: bool = True) -> None:
    """Draw with the chart's own palette and sizes (Streamlit's theme would override them)."""
    where.altair_chart(chart, width="stretch" if stretch else "content", theme=None)


def _fmt(value: Any, fmt: str) -> str:
    return "–" if value is None else fmt.format(value)


def _requests_section(r: RequestAcceptance, findings: list[sentences.Worded]) -> None:
    o = r.overall
    st.subheader("Acceptance per request")
    st.caption(
        "Each finished request's mean acceptance length (1 + accepted / verify steps, the bonus token counted), "
        "as vLLM's --per-request-spec-decode-metrics reports it."
    )
    cols = st.columns(5)
    cols[0].metric("Finished requests", f"{o.num_requests:,}", help=f"{o.num_requests_without_drafts:,} never drafted")
    cols[1].metric("Request-weighted mean", _fmt(o.request_weighted_mean_acceptance_length, "{:.2f}"))
    cols[2].metric("Token-weighted mean", _fmt(o.token_weighted_mean_acceptance_length, "{:.2f}"))
    cols[3].metric("Median request", _fmt(o.p50, "{:.2f}"))
    cols[4].metric("p10 – p90", f"{_fmt(o.p10, '{:.2f}')} – {_fmt(o.p90, '{:.2f}')}")
    if r.histogram:
        _chart(st, charts.request_histogram(views.request_histogram_frame(r)))
    for finding in findings:
        st.markdown(f"- {finding.text}")
    st.dataframe(views.requests_table(r), hide_index=True)


def overview(ctx: Context) -> None:
    report = ctx.report()
    s = report.summary
    st.header("Overview")
    if report.empty:
        st.info("No speculative decoding metrics in the selection: widen the filters or add inputs (sidebar → Data).")
        return
    interval = None
    if s.mean_acceptance_length_low is not None and s.mean_acceptance_length_high is not None:
        interval = f"95% interval {s.mean_acceptance_length_low:.2f}–{s.mean_acceptance_length_high:.2f}"
    cols = st.columns(5)
    cols[0].metric("Acceptance length", _fmt(s.mean_acceptance_length, "{:.2f}"), help=interval)
    cols[1].metric("Draft acceptance rate", _fmt(s.draft_acceptance_rate, "{:.1%}"))
    cols[2].metric("Drafts", _fmt(s.num_drafts, "{:,}"))
    cols[3].metric("Accepted tokens", _fmt(s.num_accepted_tokens, "{:,}"))
    skipped = len(ctx.session.skipped) + len(ctx.session.failed)
    cols[4].metric("Skipped input lines", f"{skipped:,}", help="Details on the Sources page.")
    for finding in sentences.report_findings(report):
        if finding.finding.kind != FindingKind.REQUESTS:  # said under the per-request distribution
            st.markdown(f"- {finding.text}")
    if report.requests is not None:
        _requests_section(report.requests, sentences.request_findings(report))
    columns = report.group_columns
    positions = views.positions_frame(report.groups or [s], columns)
    if positions.height:
        st.subheader("Acceptance by draft position")
        st.caption(
            "r_i: share of drafts whose first i tokens were all accepted. β_i = r_i / r_(i−1): "
            "the chance position i is accepted once i−1 were. Bars: 95% intervals."
        )
        left, right = st.columns(2)
        for col, (curve, _) in zip((left, right), views.CURVES, strict=True):
            _chart(col, charts.positions(positions, curve))
    series = views.over_time_frame(
        ctx.session.over_time(views.over_time_columns(columns), filters=ctx.filters), columns
    )
    if series.height:
        st.subheader("Acceptance over time")
        changes = views.changes_frame(report.changes, columns)
        _chart(st, charts.acceptance_over_time(series, changes))
        if changes.height:
            st.caption(f"{changes.height} change(s) detected (dashed lines):")
            st.dataframe(changes.select("group", "time", "kind", "before", "after", "z"), hide_index=True)
        else:
            st.caption("No change in acceptance length detected.")
    st.subheader("By group")
    table = views.groups_table(report.groups, columns)
    st.dataframe(table, hide_index=True)
    _download("Download CSV", table, "acceptance-by-group.csv")


def cost(ctx: Context) -> None:
    report = ctx.report()
    st.header("Cost")
    table = views.timing_table(report.timing, report.group_columns)
    if not table.height:
        st.info(
            "No timing in the selection. Timing comes from specobs capture (event files), V0 stage-time log "
            "lines or the specobs exporter's histograms; logs and vLLM's own counters carry none."
        )
        return
    st.caption(
        "Mean per step, by batch size (running requests). Cost ratio: draft seconds per drafted position per "
        "request over verify seconds per step, one drafter pass against one target forward (a pass drafts one "
        "position for every request). Draft share: share of step time spent drafting. Rejected-draft share: "
        "step time spent drafting tokens the target rejected."
    )
    _chart(st, charts.step_time(views.timing_parts(table)), stretch=False)
    left, middle, right = st.columns(3)
    _chart(left, charts.by_bucket(table, "cost ratio", "cost ratio (draft per position ÷ verify)"))
    _chart(middle, charts.by_bucket(table, "draft share", "draft share of step time", percent=True))
    _chart(right, charts.by_bucket(table, "rejected-draft share", "share of step time", percent=True))
    st.dataframe(table, hide_index=True)
    _download("Download CSV", table, "timing-by-batch.csv")
    if report.context is not None:  # steps that know their context: the report's table by context length
        st.subheader(sentences.split_title(report.context))
        by_context = views.split_table(report.context)
        st.dataframe(by_context, hide_index=True)
        for line in sentences.split_findings(report.context):
            st.markdown(f"- {line}")
        _download("Download CSV", by_context, "by-context.csv")


def _rows_table(headers: tuple[str, ...], rows: list[list[str]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=list(headers), orient="row")


def tune_runs(ctx: Context) -> None:
    """``specobs tune`` results among the inputs: measured points, the schedule, the verification."""

    for name, result in ctx.session.tune_runs:
        st.subheader(f"Tune run: {name}")
        st.markdown(f"**{tune_headline(result)}**")
        if result.speculative_config:
            st.code(f"--speculative-config '{result.speculative_config}'", language="bash")
        v = result.verification
        if v is not None:
            cols = st.columns(3)
            cols[0].metric("Chosen, tokens/s", f"{v.schedule_tokens_per_second:,.0f}")
            cols[1].metric(
                f"vs best static k={v.best_static_num_speculative_tokens}",
                f"{v.gain_vs_best_static:+.1%}",
                help=f"95% interval {v.gain_vs_best_static_low:+.1%} to {v.gain_vs_best_static_high:+.1%}",
            )
            cols[2].metric("vs plain decoding", f"{v.gain_vs_plain:+.1%}",
                           help=f"95% interval {v.gain_vs_plain_low:+.1%} to {v.gain_vs_plain_high:+.1%}")  # fmt: skip
        if result.measurements:
            st.markdown("Measured tokens/s against k (grey band: the plain engine; ringed: chosen)")
            _chart(st, charts.tune_measurements(tune_frame(result)), stretch=False)
        st.dataframe(_rows_table(render.TUNE_BUCKET_HEADERS, render.tune_bucket_rows(result)), hide_index=True)
        if v is not None:
            st.markdown(f"Verification: {v.workload}, {v.rounds} round(s), {v.cycles} cycle(s)")
            st.dataframe(_rows_table(render.TUNE_VERIFY_HEADERS, render.tune_verification_rows(result)),
                         hide_index=True)  # fmt: skip
        with st.expander("Every measurement"):
            st.dataframe(_rows_table(render.TUNE_MEASUREMENT_HEADERS, render.tune_measurement_rows(result)),
                         hide_index=True)  # fmt: skip
        for line in tune_notes(result):
            st.markdown(f"- {line}")


def tuner_log(ctx: Context) -> None:
    """The online tuner's decisions among the inputs (``SPECOBS_TUNE``)."""

    decisions = ctx.session.decisions
    st.subheader("Online tuner")
    for line in tuner_state(decisions):
        st.markdown(f"- {line}")
    st.dataframe(_rows_table(TUNER_HEADERS, tuner_rows(decisions, most=200)), hide_index=True)


def tuning(ctx: Context) -> None:
    st.header("Tuning")
    if ctx.session.tune_runs:
        tune_runs(ctx)
    if ctx.session.decisions:
        tuner_log(ctx)
    if ctx.session.tune_runs or ctx.session.decisions:
        st.subheader("Recommendation from the steps in the selection")
    with st.expander("Model options"):
        inputs = st.columns(4)
        max_k = inputs[0].number_input("largest k (0: measured k + 2)", 0, 16, 0, key="max_k")
        margin = inputs[1].number_input(
            "margin over plain decoding", 0.0, 1.0, RECOMMEND_DEFAULTS.margin, 0.01, key="margin"
        )
        ratio = inputs[2].number_input(
            "cost ratio, inputs without timing (0: per-method default)",
            0.0,
            2.0,
            0.0,
            0.01,
            key="cost_ratio",
            help="Draft seconds per drafted position per request over verify seconds per step: one drafter pass "
            "against one target forward, the cost ratio the Cost page measures.",
        )
        boot = inputs[3].number_input("bootstrap resamples", 0, 200, RECOMMEND_DEFAULTS.bootstrap, key="bootstrap")
    options = (int(max_k) or None, float(margin), float(ratio) or None, int(boot))
    rec = ctx.recommendation(options)
    if rec is None:
        st.info("No speculative decoding to tune in the selection (no drafts).")
        return
    r = rec.recommended
    st.subheader(headline(rec))
    cols = st.columns(3)
    cols[0].metric("Method", r.method or "off")
    cols[1].metric("Speculative tokens k", r.num_speculative_tokens)
    interval = r.interval
    cols[2].metric(
        f"Speedup ({r.basis})",
        "not measured" if r.predicted_speedup is None else f"{r.predicted_speedup:.2f}×",
        help=None if not interval else f"95% interval {interval[0]:.2f}–{interval[1]:.2f}",
    )
    if r.speculative_config:
        warning = config_warning(r)
        if warning:  # the config alone, not a flag to paste
            st.warning(warning)
            st.code(r.speculative_config, language="json")
        else:
            st.caption("Paste into `vllm serve` (copy button at the right):")
            st.code(f"--speculative-config '{r.speculative_config}'", language="bash")
        note = config_check_note(r)
        if note:
            st.caption(note)
    st.download_button(
        "Download recommendation (JSON)",
        to_json(rec),
        file_name="recommendation.json",
        mime="application/json",
        key="download_recommendation",
    )
    if rec.by_batch_size:
        st.subheader("By batch size")
        st.dataframe(views.by_batch_table(rec), hide_index=True)
    for band in rec.bands:
        st.subheader(band_title(band))
        st.dataframe(pl.DataFrame(band_rows(band), schema=[*list(BAND_HEADERS[:-1]), "note"], orient="row"))
    for line in sentences.explanations(rec):
        st.markdown(f"- {line}")
    if rec.predicted:
        predicted = views.predicted_frame(rec)
        measured = views.measured_frame(ctx.session.measured(ctx.filters), views.method_labels(rec))
        st.subheader("Predicted speedup against k")
        _chart(st, charts.tuning(predicted, measured, "speedup"), stretch=False)
        st.subheader("Throughput against k: predicted (lines) and measured (triangles)")
        _chart(st, charts.tuning(predicted, measured, "tokens_per_second"), stretch=False)
        _download("Download predictions (CSV)", predicted, "predicted.csv")
    if rec.method_comparison:
        st.subheader("Best speedup per method")
        st.dataframe(views.method_comparison_table(rec), hide_index=True)
    if sentences.assumptions(rec):
        with st.expander("Assumptions"):
            for line in sentences.assumptions(rec):
                st.markdown(f"- {line}")


def serving_page(ctx: Context) -> None:
    """``vllm bench serve`` results among the inputs: speculative against plain per load level,
    as the report computed it (``Report.serving``)."""
    st.header("Serving under load")
    if ctx.report().serving is None:
        st.info("No serving-benchmark results in the inputs (vllm bench serve result files): add them under Data.")
        return
    text = st.text_input(
        "SLO per request (goodput)",
        key="serving_slo",
        placeholder="tpot:50ms,ttft:1s",
        help="ttft, tpot, e2el; ms or s (a bare number is ms). Goodput: requests that met it per second, as "
        "vLLM counts it; TTFT and TPOT need results saved with --save-detailed.",
    )
    slo = None
    if text.strip():
        try:
            slo = parse_slo(text)
        except SpecobsError as exc:
            st.error(str(exc))
    report = ctx.report(slo)
    serving = report.serving
    assert serving is not None
    st.caption(
        "Measured by vLLM's serving benchmark from its client's timing, speculative servers against the plain "
        "server at the same load level. Whole benchmark runs: the sidebar's filters do not apply here."
    )
    st.subheader("Throughput and TPOT against load (measured)")
    st.caption(
        "Lines: the mean over runs; dots: each run; plain dashed. Dashed vertical line: where the configuration's "
        "throughput crosses plain's. TPOT: time per output token after the first (lower is faster)."
    )
    for title, frame in views.serving_chart_frames(ctx.session.bench, serving):
        st.markdown(f"**{title}**")
        _chart(st, charts.serving_load(frame), stretch=False)
    st.subheader("Speculative over plain per level (measured)")
    if serving.ratios:
        st.caption(
            "Ratios of geometric means over repeats, speculative over plain: throughput above 1 and TPOT below 1 "
            "mean speculation pays. 95% intervals from the spread of the repeats (Welch); "
            f"with one run on a side there is none ({views.NO_INTERVAL})."
        )
        ratios = views.serving_ratios_table(serving)
        st.dataframe(ratios, hide_index=True)
        _download("Download CSV", ratios, "serving-ratios.csv")
    else:
        st.info("No speculative configuration has a plain result at the same load level: no ratio.")
    if serving.crossovers:
        st.subheader("Where it stops paying")
        st.caption(
            "Where each configuration's ratio against plain crosses parity, per metric: crossed (interpolated "
            "between the levels around it), never within the levels measured, or below parity from the lowest. "
            "The 95% interval is where the ratio's bounds cross."
        )
        for c in serving.crossovers:
            st.markdown(f"- {views.crossover_text(c, views.plain_of(serving, c))}")
        st.dataframe(views.serving_crossovers_table(serving), hide_index=True)
    st.subheader("Per level (measured)")
    st.caption("Means over the runs at each level, from the benchmark's own timing and the server's counters.")
    levels = views.serving_levels_table(serving)
    st.dataframe(levels, hide_index=True)
    _download("Download CSV", levels, "serving-levels.csv")
    captured = views.serving_capture_table(serving)
    if captured.height:
        st.subheader("What the engine did during each level (captured)")
        st.caption(
            "The engine steps specobs captured inside each benchmark run's time window: mean batch size (running "
            "requests), acceptance length (tokens per draft, the bonus token counted) and mean step time."
        )
        st.dataframe(captured, hide_index=True)
    if report.load_advice:
        st.subheader("Where to draft under load")
        st.caption(
            "From each configuration's measured crossover: vLLM's schedule by batch size with k=0 above it. The "
            "schedule itself was not run unless said; its k=0 steps still pay the K=0 tax."
        )
        st.dataframe(views.load_advice_table(report.load_advice), hide_index=True)
        for advice in report.load_advice:
            st.markdown(f"- {sentences.load_advice_text(advice)}")
    with st.expander("In words, as the report says it"):
        for finding in sentences.serving_findings(report):
            st.markdown(finding.text)
    st.download_button(
        "Download serving results (JSON)",
        json.dumps(rounded(serving.to_dict()), indent=2),  # the report JSON's `serving`, every field
        file_name="serving.json",
        mime="application/json",
        key="download_serving",
    )


def compare_page(ctx: Context) -> None:
    st.header("Compare")
    choices = ctx.session.compare_choices(views.COMPARE_DIMENSIONS, ctx.filters)
    if not choices:
        st.info("Nothing to compare: the selection has one run, method, platform… Add inputs or widen the filters.")
        return
    names = list(choices)
    dimension = st.selectbox("Compare by", names, key="compare_by")
    values = choices[dimension]
    left, right = st.columns(2)
    a = left.selectbox("A (before)", values, index=0, key=f"compare_a_{dimension}")
    b = right.selectbox("B (after)", values, index=1, key=f"compare_b_{dimension}")
    if a == b:
        st.warning("Choose two different values.")
        return
    with st.spinner("Comparing (reads the steps of both sides)…"):
        result = ctx.session.compare(dimension, a, b, filters=ctx.filters)
    show = {"regression": st.error, "improvement": st.success}.get(result.kind, st.info)
    show(sentences.verdict(result))
    labels = (f"A: {a}", f"B: {b}")
    table = views.compare_table(result, labels)
    st.dataframe(table, hide_index=True)
    positions = views.compare_positions_frame(result, labels)
    if positions.height:
        _chart(st, charts.compare_positions(positions))
    both = ctx.session.side_by_side(dimension, (a, b), filters=ctx.filters)
    if both is not None:
        st.subheader(sentences.split_title(both))
        st.dataframe(views.split_table(both), hide_index=True)
        for line in sentences.split_findings(both):
            st.markdown(f"- {line}")
    st.download_button(
        "Download comparison (JSON)",
        to_json(result),
        file_name="comparison.json",
        mime="application/json",
        key="download_comparison",
    )


def sources(ctx: Context) -> None:
    st.header("Sources")
    session = ctx.session
    for message in session.failed:
        st.error(f"Could not read {message}")
    table = views.sources_table(session.sources)
    st.dataframe(table, hide_index=True)
    _download("Download CSV", table, "sources.csv")
    total = len(session.skipped)
    st.subheader(f"Skipped lines: {total:,}")
    if total:
        shown = views.skipped_table(session.skipped, SKIPPED_SHOWN)
        if total > SKIPPED_SHOWN:
            st.caption(f"The first {SKIPPED_SHOWN:,} of {total:,}; the CSV has them all.")
        st.dataframe(shown, hide_index=True)
        _download("Download CSV", views.skipped_table(session.skipped), "skipped-lines.csv")
    kept = session.count_windows(ctx.filters)
    st.caption(f"{kept:,} of {session.count_windows():,} windows pass the filters.")


class Context:
    """What a page needs: the session, the filters and the grouping chosen in the sidebar."""

    def __init__(self, session: Session, filters: Filters, groups: tuple[str, ...]) -> None:
        self.session, self.filters, self.groups = session, filters, groups

    def report(self, slo: Slo | None = None):
        """The report of the selection (serving results' goodput under ``slo``: the Serving page's)."""
        with st.spinner("Analysing…"):
            return self.session.report(self.groups, filters=self.filters, slo=slo)

    def recommendation(self, options: tuple):
        max_k, margin, cost_ratio, bootstrap = options
        with st.spinner("Fitting the throughput model…"):
            return self.session.recommend(
                filters=self.filters, max_k=max_k, margin=margin, cost_ratio=cost_ratio, bootstrap=bootstrap
            )


RENDER: dict[str, Callable[[Context], None]] = {
    "Overview": overview,
    "Cost": cost,
    "Tuning": tuning,
    "Serving under load": serving_page,
    "Compare": compare_page,
    "Sources": sources,
}


def main() -> None:
    st.set_page_config(page_title="specobs", page_icon="⏩", layout="wide")
    page = _page()
    inputs, uploads = _inputs()
    upload_key = tuple((name, hashlib.sha256(data).hexdigest()) for name, data in uploads)
    key = (signature(inputs), upload_key)
    try:
        session = _session(key, inputs, uploads)
        filters, groups = _filters(session)
        if not inputs.paths and not uploads and not inputs.prometheus:
            st.info("No inputs: give paths, upload files or a Prometheus URL in the sidebar (Data).")
        elif session.failed and page != "Sources":
            st.warning(f"{len(session.failed)} input(s) could not be read: see the Sources page.")
        RENDER[page](Context(session, filters, groups))
    except SpecobsError as exc:
        st.error(str(exc))
    except Exception as exc:  # a bug in specobs: one line on the page, the traceback in the server log
        log.error("dashboard error:\n%s", traceback.format_exc())
        st.error(f"Internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")


if __name__ == "__main__":
    main()
