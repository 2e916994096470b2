"""The acceptance report: ingest → analysis → one :class:`specobs.records.Report`, which every surface renders.

The JSON form (``Report.to_dict``) is a public contract: ``summary`` and each entry of
``groups`` carry exactly the keys in :data:`specobs.records.SUMMARY_KEYS` (plus, for groups,
their labels); intervals, diagnoses and plain-language findings live under ``details``,
``findings``, ``group_findings`` and ``change_points``. See docs/report.md.

Each part of the input (:meth:`specobs.ingest.Ingested.parts`: the whole input, or the parts
of a partitioned folder too large to hold at once) is reduced to :class:`ReportSums` (cells
and sums, no rows) and let go; the sums of the parts add up to the whole's, and the report
is computed from them alone, so a part at a time gives the report the whole input would.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import polars as pl

from specobs.advice.config_line import per_context_option
from specobs.advice.load import advise
from specobs.advice.recommend import recommend, recommendation_blocks, with_method
from specobs.advice.report_findings import group_findings_of, rank, report_findings
from specobs.analysis import acceptance
from specobs.analysis.breaks import across_restart, find_breaks, not_named_by, resume_sums
from specobs.analysis.cost import (
    Unsettled,
    draining_state,
    schedule_tax_from,
    schedule_tax_sums,
    steady_state,
    step_cells,
    timing_by_batch,
    unsettled_in_slices,
    unsteady_counts,
    with_draining,
)
from specobs.analysis.integrity import IntegritySums, integrity
from specobs.analysis.per_request import as_windows, request_acceptance
from specobs.analysis.runs import FILLED, with_run_dimensions
from specobs.analysis.split import CONTEXT, environment_by, split, stretch_sums
from specobs.analysis.sums import TimeGrid, with_time_bucket
from specobs.analysis.timeseries import MAX_POINTS, TimeSpan, changes_in, series_columns, series_from_sums, time_sums
from specobs.analysis.under_load import capture_sums, serving
from specobs.ingest import Ingested, counted_sources, first_pass, first_pass_slices, sliced_files
from specobs.ingest.source import open_source
from specobs.records import BatchTiming, GroupSummary, Report, Slo, Split, Summary
from specobs.schema import categorical_labels


def _labelled(windows: pl.LazyFrame, method: str | None) -> pl.LazyFrame:
    """Labels as categoricals, and ``method`` named where speculative rows carry none."""
    windows = categorical_labels(windows)
    return with_method(windows.lazy(), method) if method is not None else windows


def _grouped_rows(windows: pl.LazyFrame, columns: Sequence[str], ingested: Ingested) -> pl.LazyFrame:
    """Rows with the derived grouping columns, and the run metadata joined when ``columns`` name it."""
    grouped = acceptance.with_group_columns(windows)
    if any(c in FILLED for c in columns):
        grouped = with_run_dimensions(grouped, ingested.metadata)
    return grouped


@dataclass(frozen=True)
class ReportSums:
    """What one part of the input gives a report: every number is a sum, count, minimum or
    maximum over rows, or a cell of such (:meth:`merge` adds parts)."""

    cells: pl.DataFrame  # step_cells
    recommendation_blocks: pl.DataFrame | None  # recommendation_blocks, when tuning
    over_time: pl.DataFrame | None  # time_sums on the span of the whole input (see merge)
    span: TimeSpan  # of this part's own known windows
    few_windows: pl.DataFrame | None  # this part's known windows unbucketed, when few (see merge)
    tax: pl.DataFrame  # schedule_tax_sums
    unsteady: dict[str, int]
    integrity: IntegritySums
    resumes: pl.DataFrame  # analysis.breaks.resume_sums: acceptance around each K=0 stretch
    captured: pl.DataFrame  # analysis.serving.capture_sums: the steps during each serving result
    stretches: pl.DataFrame  # analysis.split.stretch_sums: timed steps per engine, k and context bucket
    engine_stretches: pl.DataFrame  # the same per engine and k alone (a side-by-side split)

    @classmethod
    def of(
        cls,
        windows: pl.LazyFrame,
        ingested: Ingested,
        keys: Sequence[str],
        *,
        span: TimeSpan | None = None,
        with_recommendation: bool = True,
        method: str | None = None,
        grid: TimeGrid | None = None,
    ) -> ReportSums:
        """The sums of ``windows`` (a part), bucketed in time on ``span`` (the whole input's;
        None: this part is the whole); with ``grid``, the cells and the tax sums are split by
        its time buckets too (column ``TIME_BUCKET``; the tax sums also by engine and workload, which a
        filter may name): the report's roll-ups ignore those columns."""
        windows = _labelled(windows, method)
        # Read and trimmed once: every sum below takes this frame (steady_state is idempotent);
        # left lazy, each of them would read the inputs and rank their steps again.
        frame = steady_state(windows).collect()
        columns = series_columns(keys)
        grouped = _grouped_rows(frame.lazy(), columns, ingested)
        own = TimeSpan.of(frame)
        whole = own if span is None else span
        few = None
        if span is not None and own.windows <= MAX_POINTS:
            few = time_sums(grouped, columns, own)
        by_time = [grid.bucket()] if grid is not None else []
        return cls(
            cells=with_run_dimensions(step_cells(frame, by_time).lazy(), ingested.metadata).collect(),
            recommendation_blocks=recommendation_blocks(frame) if with_recommendation else None,
            over_time=time_sums(grouped, columns, whole),
            span=own,
            few_windows=few,
            # Split by the labels a filter may name too (the tax's own keys do not have them).
            tax=schedule_tax_sums(frame, [*by_time, *(pl.col(c) for c in ("engine", "workload") if by_time)]),
            unsteady=unsteady_counts(frame),
            integrity=IntegritySums.of(frame, ingested.metadata, ingested.decisions),
            resumes=resume_sums(frame) if grid is None else with_time_bucket(resume_sums(frame), grid, "ts"),
            captured=capture_sums(frame, ingested.bench),
            stretches=stretch_sums(frame, by_context=True),
            engine_stretches=stretch_sums(frame, by_context=False),
        )

    @classmethod
    def merge(cls, parts: Sequence[ReportSums], span: TimeSpan | None = None) -> ReportSums:
        """The sums of the whole from those of its parts, in input order, bucketed in time on
        ``span`` (the first pass's: None when there is one part).

        The first pass sees rows before they are checked whole and before repeats are dropped;
        the parts' own spans say what it should have seen. When drops leave too few windows to
        bucket, every part kept its windows unbucketed and the series is built from those; when
        a row only the whole check rejects moved the span, ``over_time`` is None: the caller
        sums the time buckets once more on the right span (:func:`analyze` does)."""
        if len(parts) == 1 and span is None:
            return parts[0]
        exact = TimeSpan.merge([p.span for p in parts])
        width = exact.bucket_width(MAX_POINTS)
        over_time: pl.DataFrame | None = None
        if span is not None and width == span.bucket_width(MAX_POINTS) and (width is None or exact.first == span.first):
            over_time = pl.concat([p.over_time for p in parts if p.over_time is not None], how="diagonal_relaxed")
        elif width is None and all(p.few_windows is not None for p in parts):
            over_time = pl.concat([p.few_windows for p in parts if p.few_windows is not None], how="diagonal_relaxed")
        recommending = [p.recommendation_blocks for p in parts if p.recommendation_blocks is not None]
        unsteady: dict[str, int] = {}
        for part in parts:
            for reason, n in part.unsteady.items():
                unsteady[reason] = unsteady.get(reason, 0) + n
        return cls(
            cells=pl.concat([p.cells for p in parts], how="diagonal_relaxed"),
            recommendation_blocks=pl.concat(recommending, how="diagonal_relaxed") if recommending else None,
            over_time=over_time,
            span=exact,
            few_windows=None,
            tax=pl.concat([p.tax for p in parts], how="diagonal_relaxed"),
            unsteady=unsteady,
            integrity=IntegritySums.merge([p.integrity for p in parts]),
            resumes=pl.concat([p.resumes for p in parts], how="diagonal_relaxed"),
            captured=pl.concat([p.captured for p in parts], how="diagonal_relaxed"),
            stretches=pl.concat([p.stretches for p in parts], how="diagonal_relaxed"),
            engine_stretches=pl.concat([p.engine_stretches for p in parts], how="diagonal_relaxed"),
        )


def analyze(
    ingested: Ingested,
    by: Sequence[str] = acceptance.DEFAULT_BY,
    *,
    with_recommendation: bool = True,
    timing: bool = True,
    method: str | None = None,
    check_config: bool = True,
    slo: Slo | None = None,
) -> Report:
    """Analyse ``ingested`` into a :class:`Report` grouped by ``by`` (with a point-estimate
    recommendation unless ``with_recommendation`` is False, and timing by batch size unless ``timing`` is;
    ``method`` names the method of speculative rows that carry none). The recommendation's
    config carries what ran, from ``ingested.metadata``, and is checked against the installed
    vLLM unless ``check_config`` is False."""
    keys = acceptance.group_columns(by)
    sums = report_sums(ingested, keys, with_recommendation=with_recommendation, method=method)
    return report_from_sums(sums, ingested, by, timing=timing, check_config=check_config, slo=slo)


def report_sums(
    ingested: Ingested,
    keys: Sequence[str],
    *,
    with_recommendation: bool = True,
    method: str | None = None,
    grid: TimeGrid | None = None,
    each: Callable[[pl.DataFrame], None] | None = None,
) -> ReportSums:
    """The :class:`ReportSums` of the whole of ``ingested``, a part at a time, its series over
    time summed per ``keys`` (see :meth:`ReportSums.of` for ``grid``); ``each`` is shown every
    part's trimmed rows before they are let go (what needs rows is taken from them then)."""
    span = whole_span(ingested)
    parts = []
    for frame in trimmed_parts(ingested, method):
        if each is not None:
            each(frame)
        parts.append(
            ReportSums.of(frame.lazy(), ingested, keys, span=span, with_recommendation=with_recommendation, grid=grid)
        )
        del frame  # let this part's rows go before the next is read
    sums = ReportSums.merge(parts, span)
    if sums.over_time is None:  # the first pass's span was off: the time buckets once more, on the right one
        columns = series_columns(keys)
        again = []
        for part in ingested.parts():  # read again: nothing is recorded twice
            again.append(time_sums(_grouped_rows(_labelled(part, method), columns, ingested), columns, sums.span))
            del part
        sums = replace(sums, over_time=pl.concat(again, how="diagonal_relaxed"))
    return sums


def report_from_sums(
    sums: ReportSums,
    ingested: Ingested,
    by: Sequence[str] = acceptance.DEFAULT_BY,
    *,
    timing: bool = True,
    check_config: bool = True,
    requests: pl.DataFrame | None = None,
    slo: Slo | None = None,
) -> Report:
    """The :class:`Report` of ``sums`` (:func:`report_sums` over columns that include those of
    ``by``), with what ``ingested`` says beside its rows (sources, skipped lines, metadata...) and
    its finished ``requests`` (default: all of them); serving results' goodput under ``slo``."""
    keys = acceptance.group_columns(by)
    environment = environment_by(by)
    requests = ingested.requests if requests is None else requests
    # Summed once into cells: the acceptance summary, its groups and the timing by batch read them.
    cells = sums.cells
    overall, groups = acceptance.summarize_with_total(cells, by=by)
    summary = acceptance.summary_of(overall.row(0, named=True)) if overall.height else Summary()
    by_batch = timing_by_batch(cells, keys).to_dicts() if timing else []
    # Point estimates only: `specobs recommend` adds bootstrap intervals.
    recommendation = None
    if sums.recommendation_blocks is not None and summary.num_drafts:
        recommendation = recommend(
            sums.recommendation_blocks, bootstrap=0, metadata=ingested.metadata, check_config=check_config
        )
    breaks = find_breaks(cells, ingested.metadata, sums.resumes)
    changes = (
        changes_in(series_from_sums(sums.over_time, series_columns(keys)), keys) if sums.over_time is not None else []
    )
    under_load = serving(ingested.bench, sums.captured, slo)
    from_requests = not summary.num_windows and requests.height > 0
    if from_requests:  # finished requests alone: their own counts are the acceptance (one window each)
        overall, groups = acceptance.summarize_with_total(as_windows(requests), by=by)
        summary = acceptance.summary_of(overall.row(0, named=True))
    report = Report(
        by=tuple(by),
        group_columns=tuple(keys),
        summary=summary,
        groups=tuple(
            GroupSummary({c: row.get(c) for c in keys}, acceptance.summary_of(row))
            for row in groups.iter_rows(named=True)
        ),
        sources=tuple(counted_sources(ingested)),
        skipped=tuple(ingested.skipped),
        changes=tuple(c for c in changes if not across_restart(c, breaks)),
        timing=tuple(BatchTiming.from_row(row, [c for c in keys if c != "batch_bucket"]) for row in by_batch),
        recommendation=recommendation,
        tax=tuple(schedule_tax_from(sums.tax)),
        unsteady=sums.unsteady,
        notices=tuple(ingested.notices),
        tuner_decisions=tuple(ingested.decisions),
        requests=request_acceptance(requests),
        metadata=tuple(ingested.metadata),
        integrity=tuple(not_named_by(integrity(sums.integrity, ingested.metadata, ingested.decisions), breaks)),
        breaks=tuple(breaks),
        serving=under_load,
        load_advice=advise(under_load, ingested.bench, ingested.metadata) if under_load is not None else (),
        summary_from_requests=from_requests,
        context=_with_option(split(cells, sums.stretches, [CONTEXT], ingested.metadata), check_config),
        side_by_side=split(cells, sums.engine_stretches, environment, ingested.metadata) if environment else None,
        unrecorded=tuple(
            name
            for name, column in zip(by, keys, strict=True)
            if groups.height and column in groups.columns and groups.get_column(column).null_count() == groups.height
        ),
    )
    return with_findings(report)


def with_findings(report: Report) -> Report:
    """``report`` carrying its findings, computed once here (``advice.report_findings``), each group's
    own and the few its summary shows (``rank``): every surface reads the same lists."""
    findings = report_findings(report)
    return replace(
        report, findings=findings, group_findings=group_findings_of(report), key_findings=tuple(rank(findings))
    )


def _with_option(analysis: Split | None, check_config: bool) -> Split | None:
    """The analysis with the vLLM option that would apply a per-context k, where the installed
    vLLM declares one (none up to 0.33: then no config is printed for it)."""
    if analysis is None or not check_config:
        return analysis
    return replace(analysis, vllm_option=per_context_option())


def recommendation_input(ingested: Ingested, *, method: str | None = None) -> pl.LazyFrame | pl.DataFrame:
    """What ``recommend`` reads of ``ingested``: its windows, or for an input read in parts,
    the recommendation cells of each part in turn (the same fits: cells never cross a source)."""
    if not ingested.deferred:
        return ingested.windows
    cells = [recommendation_blocks(frame) for frame in trimmed_parts(ingested, method)]
    return pl.concat(cells, how="diagonal_relaxed")


def recommendation_reads(
    ingested: Ingested, *, method: str | None = None, check_config: bool = True
) -> tuple[pl.LazyFrame | pl.DataFrame, Split | None, pl.DataFrame]:
    """Everything ``recommend`` reads of ``ingested``, in one pass over its parts: the
    recommendation's input (:func:`recommendation_input`), the best k by context length (the
    split ``recommend`` adds beside its batch-size table; None when no step knows its context)
    and the captured steps of each serving result (``capture_sums``)."""
    blocks, cells, stretches, captured = [], [], [], []
    for frame in trimmed_parts(ingested, method):
        blocks.append(recommendation_blocks(frame))
        captured.append(capture_sums(frame, ingested.bench))
        known = frame.filter(pl.col("context_length").is_not_null())
        if known.height:
            cells.append(with_run_dimensions(step_cells(known).lazy(), ingested.metadata).collect())
            stretches.append(stretch_sums(known, by_context=True))
        del frame, known  # let this part's rows go before the next is read
    read = pl.concat(blocks, how="diagonal_relaxed") if blocks else ingested.windows
    by_context = None
    if cells:
        found = split(pl.concat(cells, how="diagonal_relaxed"), pl.concat(stretches, how="diagonal_relaxed"),
                      [CONTEXT], ingested.metadata)  # fmt: skip
        by_context = _with_option(found, check_config)
    return read, by_context, pl.concat(captured, how="diagonal_relaxed")


def trimmed_parts(ingested: Ingested, method: str | None = None) -> Iterator[pl.DataFrame]:
    """Each part's rows (:meth:`Ingested.parts`) labelled, trimmed (``steady_state``) and marked
    ``draining`` as the whole input would be: a file read in slices is judged whole first, and
    each engine's batch is carried from one part to the next. Each is let go before the next."""
    known = judged_whole(ingested, method)
    state = None  # where each engine's batch stood at the end of the part before
    for part in ingested.parts():
        frame = with_draining(steady_state(_labelled(part, method), known), state, keep_state=True).collect()
        del part
        state = draining_state(frame, state)
        yield frame.drop("_high")


def judged_whole(ingested: Ingested, method: str | None = None) -> Unsettled | None:
    """The unsettled steps of each file read in slices, judged over the whole file in a first
    pass over its keys and times, a slice at a time (a configuration's median and an engine's
    first steps span slices); None when no file is read in slices. A file this pass finds damaged
    is unreadable as a whole (``Ingested.unreadable_file``), as reading it whole would find it."""
    found = Unsettled()
    read = {s.name for s in ingested.sources}
    labelled = functools.partial(_labelled, method=method)
    pieces = first_pass_slices(ingested)
    for name in sliced_files(ingested):
        if name not in read:  # found damaged already
            continue
        src = open_source(name)
        slices = [first_pass(src, labelled, rows) for file, rows in pieces if file == name]
        try:
            found = found.merged(unsettled_in_slices(slices, name))
        except Exception as exc:  # polars raises ComputeError, OSError... for a damaged page
            ingested.unreadable_file(name, f"unreadable Parquet file ({str(exc).splitlines()[0]})")
    return found if found.lines else None


def whole_span(ingested: Ingested) -> TimeSpan | None:
    """The time span of the known windows of an input read in parts, from a first pass over a
    few columns of each deferred file (:func:`specobs.ingest.first_pass`: its rows are not yet
    checked whole, nor its repeats dropped); None when the input is read whole."""
    if not ingested.deferred:
        return None

    spans = [TimeSpan.of(part.windows) for part in ingested.deferred if part.windows is not None]
    spans += [first_pass(open_source(name), TimeSpan.of, rows) for name, rows in first_pass_slices(ingested)]
    return TimeSpan.merge(spans)


__all__ = [
    "ReportSums",
    "analyze",
    "recommendation_input",
    "recommendation_reads",
    "report_from_sums",
    "report_sums",
    "trimmed_parts",
]
