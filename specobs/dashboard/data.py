"""What the app reads, and the slice of it that every page sees.

Inputs are paths (files or folders), uploaded files and a Prometheus server, read with the
same ingest as the command line; an input that cannot be read is listed, not fatal. What is
kept of them is sums (``specobs.advice.report_builder.ReportSums`` split by the time buckets of
``specobs.analysis.sums.TimeGrid``), never rows: a filter is a filter of the sums, and the time
range snaps to bucket edges. Filters are plain values, so that results can be cached by them.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl

from specobs import dimensions, schema
from specobs.advice.model import cells as model_cells
from specobs.advice.report_builder import ReportSums, report_sums
from specobs.analysis.acceptance import CONTEXT_BUCKET, with_context_bucket
from specobs.analysis.cost import with_draining
from specobs.analysis.runs import FILLED, with_run_dimensions
from specobs.analysis.split import split
from specobs.analysis.sums import SERIES_KEYS, TIME_BUCKET, TimeGrid, label_values, with_time_bucket, within
from specobs.errors import Skipped, SpecobsError
from specobs.ingest import PART_ROWS, Ingested, add_prometheus, counted_sources, first_pass, load
from specobs.ingest.source import expand_paths, open_source
from specobs.records import RunMetadata, SourceReport, Split, TunerDecision, TuneResult
from specobs.schema import TARGET_LABELS as recommend_labels

#: The bundled real recording the app opens on when given nothing (present in a checkout).
BUNDLED_SWEEP = Path(__file__).resolve().parents[2] / "examples" / "data" / "vllm-cpu-sweep"
#: How ``specobs dashboard`` hands its arguments to the Streamlit script (JSON).
ARGS_ENV = "SPECOBS_DASHBOARD_ARGS"
#: Filterable label columns, in the order the sidebar shows them.
FILTER_COLUMNS = dimensions.columns(dimensions.FILTER)
#: A value of a filter column: ``engine`` is an integer, the others are strings.
LabelValue = str | int


@dataclass(frozen=True)
class Inputs:
    """Where to read from."""

    paths: tuple[str, ...] = ()
    prometheus: str | None = None
    since: str = "6h"
    match: str = ""


def default_inputs() -> Inputs:
    """The inputs ``specobs dashboard`` was started with, else the bundled sweep."""
    raw = os.environ.get(ARGS_ENV)
    if raw:
        args = json.loads(raw)
        return Inputs(
            tuple(args.get("paths") or ()),
            args.get("prometheus") or None,
            args.get("since", "6h"),
            args.get("match", ""),
        )
    return Inputs(paths=(str(BUNDLED_SWEEP),) if BUNDLED_SWEEP.is_dir() else ())


#: One input file in a cache key: path, size and modification time (None, None when unreadable).
FileStamp = tuple[str, int | None, int | None]


def signature(inputs: Inputs) -> tuple[tuple[FileStamp, ...], str | None, str, str]:
    """A cache key that changes when any input file changes (size or modification time)."""
    files: list[FileStamp] = []
    for name, _ in expand_paths(list(inputs.paths)):
        try:
            stat = os.stat(name)
            files.append((name, stat.st_size, stat.st_mtime_ns))
        except OSError:
            files.append((name, None, None))
    return (tuple(files), inputs.prometheus, inputs.since, inputs.match)


@dataclass
class Loaded:
    """Everything read, unfiltered, as sums: no rows are held (see :func:`load_inputs`)."""

    sums: ReportSums  # cells and tax sums per time bucket, series per SERIES_KEYS, recommendation cells
    ingested: Ingested  # what the inputs say beside their rows (sources, notices, metadata...); rows dropped
    grid: TimeGrid | None = None  # the time buckets of the time filter
    rows: Path | None = None  # the trimmed rows written to disk, for what needs rows (Compare)
    sources: list[SourceReport] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # "input: why", one per unreadable input
    options: dict[str, list[LabelValue]] = field(default_factory=dict)  # values of each filter column
    bounds: tuple[float, float] | None = None  # the time grid's first and last edge
    tune_runs: list[tuple[str, TuneResult]] = field(default_factory=list)  # specobs tune results read back
    decisions: list[TunerDecision] = field(default_factory=list)  # the online tuner's log
    requests: pl.DataFrame = field(default_factory=lambda: schema.empty(schema.REQUESTS))  # finished requests
    metadata: tuple[RunMetadata, ...] = ()  # run metadata: what each engine ran with
    recommending: list[pl.DataFrame] | None = None  # recommendation cells per part, once asked for
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def windows(self) -> int:
        """How many windows were read (summed in the cells)."""
        return int(self.sums.cells.get_column("num_windows").sum()) if self.sums.cells.height else 0


#: Columns a recommendation cell keeps beyond the fit's own labels, so the label filters apply to it.
RECOMMENDATION_LABELS = (*recommend_labels, "engine", "workload", "draining")


def _recommendation_part(frame: pl.DataFrame, grid: TimeGrid | None) -> pl.DataFrame:
    """The recommendation cells of one part's trimmed rows (blocks of consecutive steps, by the
    time bucket of their last step)."""
    steps = frame.lazy()
    if "request_id" in frame.columns:
        steps = steps.filter(pl.col("request_id").is_null())
    return with_time_bucket(model_cells(with_draining(steps).collect(), RECOMMENDATION_LABELS), grid)


def load_inputs(inputs: Inputs, uploads: Sequence[tuple[str, bytes]] = (), part_rows: int | None = PART_ROWS) -> Loaded:
    """Read ``inputs`` and ``uploads`` (name, content) a part at a time (Parquet files larger than
    ``part_rows`` rows together are read in parts; one file is read whole, as the report reads it)
    and keep their sums per time bucket and label set (:func:`specobs.advice.report_builder.report_sums`);
    unreadable inputs go to ``failed``.

    Each part's trimmed rows are summed, written to a temporary folder for the Compare page (it
    needs rows) and made into recommendation cells, then let go: the app holds sums, never rows."""
    parquet = sum(1 for name, _ in expand_paths(list(inputs.paths)) if name.endswith(".parquet"))
    ingested = load(list(inputs.paths), uploads=uploads, keep_going=True, part_rows=part_rows if parquet > 1 else None)
    failed = [str(exc) for exc in ingested.failed]
    if inputs.prometheus:
        try:
            add_prometheus(ingested, inputs.prometheus, since=inputs.since, match=inputs.match)
        except SpecobsError as exc:
            failed.append(str(exc))
    grid = TimeGrid.of(*end_times(ingested))
    folder = Path(tempfile.mkdtemp(prefix="specobs-dashboard-"))
    written = [0]

    def each(frame: pl.DataFrame) -> None:
        if not ingested.deferred:  # read whole: its rows go now, counted first
            ingested.sources = counted_sources(ingested)
            ingested.windows = schema.empty(schema.WINDOWS).lazy()
        # A tenth of the rows' size; read back by predicate (Compare) or a part at a time (Tuning).
        frame.write_parquet(folder / f"part-{written[0]:04d}.parquet", compression="lz4")
        written[0] += 1

    sums = report_sums(ingested, SERIES_KEYS, with_recommendation=False, grid=grid, each=each)
    over_time = sums.over_time
    if over_time is not None:  # the end time of a series point (a window, or a report time bucket)
        over_time = with_time_bucket(over_time, grid)
    sums = replace(sums, over_time=over_time)
    ingested.sources = counted_sources(ingested)  # counted before the rows go
    ingested.windows = schema.empty(schema.WINDOWS).lazy()  # read: rows are not kept
    labels = [sums.cells.select(FILTER_COLUMNS), ingested.requests.select(FILTER_COLUMNS)]
    options = label_values(pl.concat(labels, how="vertical_relaxed"), FILTER_COLUMNS)
    bounds = (grid.first, grid.last) if grid is not None else None
    loaded = Loaded(
        sums, ingested, grid, folder, ingested.sources, ingested.skipped, failed, options, bounds,
        ingested.tune_runs, ingested.decisions, ingested.requests, tuple(ingested.metadata),
    )  # fmt: skip
    weakref.finalize(loaded, shutil.rmtree, folder, True)  # the rows on disk go with the sums
    return loaded


def end_times(ingested: Ingested) -> tuple[float | None, float | None]:
    """The earliest and latest window end of the input, from the windows held and a first pass
    over a column of each file read in parts."""
    lows, highs = [], []

    def span(frame: pl.LazyFrame) -> None:
        low, high = frame.select(pl.col("end_ts").min(), pl.col("end_ts").max().alias("high")).collect().row(0)
        if low is not None:
            lows.append(low)
            highs.append(high)

    span(ingested.windows)
    for part in ingested.deferred:
        if part.windows is not None:
            span(part.windows.lazy())
        for name, _ in part.files:
            first_pass(open_source(name), span)
    return (min(lows), max(highs)) if lows else (None, None)


@dataclass(frozen=True)
class Filters:
    """The slice every page sees: allowed values per label column, and a time range."""

    values: tuple[tuple[str, tuple[LabelValue, ...]], ...] = ()  # (column, allowed values); absent = all
    time_range: tuple[float, float] | None = None  # unix seconds, on window end times (snapped: see buckets)

    def allowed(self, column: str) -> tuple[LabelValue, ...] | None:
        return dict(self.values).get(column)

    def buckets(self, grid: TimeGrid | None) -> tuple[int, int] | None:
        """The time buckets ``[start, stop)`` of the time range (its ends snap to bucket edges)."""
        if self.time_range is None or grid is None:
            return None
        return grid.snap(*self.time_range)


def selected(loaded: Loaded, filters: Filters) -> ReportSums:
    """The sums inside ``filters``: every sum of the loaded input filtered by label and time bucket
    (the series over time by the end time of its points: a report time bucket at the range's ends
    is in or out whole)."""
    buckets = filters.buckets(loaded.grid)
    sums = loaded.sums
    if not filters.values and buckets is None:
        return sums

    def cut(frame: pl.DataFrame | None) -> pl.DataFrame | None:
        return None if frame is None else within(frame, filters.values, buckets)

    return replace(
        sums,
        cells=within(sums.cells, filters.values, buckets),
        tax=within(sums.tax, filters.values, buckets),
        over_time=cut(sums.over_time),
        resumes=within(sums.resumes, filters.values, buckets),
        stretches=within(sums.stretches, filters.values),
        engine_stretches=within(sums.engine_stretches, filters.values),
    )


def recommendation_cells(loaded: Loaded, filters: Filters) -> pl.DataFrame | None:
    """The recommendation cells (blocks of consecutive steps) inside ``filters``, a cell by the
    time bucket of its last step; None when nothing was read.

    Made the first time they are asked for, from the rows on disk a part at a time (the Tuning
    page's first visit), and kept: a recommendation with resampling needs blocks of steps."""
    with loaded.lock:
        if loaded.recommending is None:
            parts = sorted(loaded.rows.glob("*.parquet")) if loaded.rows is not None else []
            loaded.recommending = [_recommendation_part(pl.read_parquet(part), loaded.grid) for part in parts]
    cells = loaded.recommending
    if not cells:
        return None
    return within(pl.concat(cells, how="diagonal_relaxed"), filters.values, filters.buckets(loaded.grid))


def apply_request_filters(requests: pl.DataFrame, filters: Filters) -> pl.DataFrame:
    """Finished requests inside ``filters``: the label filters, and the time range on finish times."""
    if not filters.values and filters.time_range is None:
        return requests
    condition = pl.lit(True)
    for column, allowed in filters.values:
        if column in requests.columns:
            condition = condition & pl.col(column).is_in(list(allowed)).fill_null(False)
    if filters.time_range is not None:
        low, high = filters.time_range
        condition = condition & pl.col("ts").is_between(low, high).fill_null(True)
    return requests.filter(condition)


def side_by_side(loaded: Loaded, sums: ReportSums, dimension: str, values: Sequence[object]) -> Split | None:
    """The selection's engines side by side at ``values`` of an environment ``dimension`` (each
    against its own plain engine: ``analysis.split``), from the kept sums; None when the
    dimension is not one engines run on, or nothing at those values is known."""
    found = dimensions.by_name(dimension)
    if dimensions.ENVIRONMENT not in found.roles or found.column not in sums.cells.columns:
        return None
    cells = sums.cells.filter(pl.col(found.column).cast(pl.String).is_in([str(v) for v in values]))
    return split(cells, sums.engine_stretches, [dimension], loaded.metadata)


def compare_rows(loaded: Loaded, filters: Filters, column: str, value: object) -> pl.LazyFrame:
    """The trimmed rows of one side of a comparison (``column`` = ``value``) inside ``filters``,
    read lazily from the copy on disk (:func:`load_inputs`): a comparison needs rows (the spread
    between runs), and reads only the columns and row groups it needs."""
    if loaded.rows is None or not any(loaded.rows.glob("*.parquet")):
        return schema.empty(schema.WINDOWS).lazy().with_columns(unsteady=pl.lit(None, pl.String))
    rows = pl.scan_parquet(loaded.rows / "*.parquet")
    if column in FILLED:  # one value per engine: from the run metadata
        rows = with_run_dimensions(rows, loaded.metadata)
    elif column == CONTEXT_BUCKET:
        rows = with_context_bucket(rows)
    rows = rows.filter(pl.col(column) == value)
    buckets = filters.buckets(loaded.grid)
    if loaded.grid is not None and buckets is not None:
        rows = rows.with_columns(loaded.grid.bucket())
    return within(rows.collect(), filters.values, buckets).drop(TIME_BUCKET, strict=False).lazy()
