"""The verbs of the public API, one family: each takes what :func:`load` returns, a path, a list
of paths, or a polars frame of ``windows`` rows, normalised once here (:func:`ingested`).

    data = load("examples/data/vllm-cpu-sweep")
    report = analyze(data, by="method,k")
    rec = recommend(data)
    cmp = compare(load("before/"), load("after/"))   # or compare("before/", "after/")
    groups = summarize(data, by=["method"])

The CLI calls the same functions, so the API sees what the CLI sees (a comparison gets both
sides' run metadata; an input read in parts is read part by part by every verb). A bad input
or argument raises :class:`~specobs.errors.SpecobsError` (:class:`~specobs.errors.InputError`
for an input that cannot be read), never an ``AttributeError``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar, cast

import polars as pl

from specobs import dimensions, schema
from specobs.advice import recommend as recommending
from specobs.advice.compare import compare as compare_windows
from specobs.advice.load import advise
from specobs.advice.log_speedup import SERVED_LOAD, served_intervals
from specobs.advice.model import step_blocks
from specobs.advice.report_builder import ReportSums, recommendation_reads, report_from_sums, report_sums
from specobs.advice.validate import measured_throughput
from specobs.analysis import acceptance
from specobs.analysis.acceptance import CONTEXT_BUCKET, DEFAULT_BY, GROUP_KEYS, parse_by, with_context_bucket
from specobs.analysis.cost import with_draining
from specobs.analysis.runs import FILLED, with_run_dimensions
from specobs.analysis.split import split
from specobs.analysis.sums import (
    SERIES_KEYS,
    TIME_BUCKET,
    TimeGrid,
    coarser,
    drafted_values,
    label_values,
    with_time_bucket,
    within,
)
from specobs.analysis.timeseries import series_from_sums
from specobs.analysis.under_load import parse_slo, serving
from specobs.capture.config import EnvironmentVariable
from specobs.errors import Skipped, SpecobsError
from specobs.ingest import (
    FORMATS,
    PART_ROWS,
    Ingested,
    add_prometheus,
    check_format,
    counted_sources,
    first_pass,
    first_pass_slices,
    load,
)
from specobs.ingest.prometheus_api import parse_duration
from specobs.ingest.source import Source, expand_paths, open_source
from specobs.records import (
    RECOMMEND_DEFAULTS,
    Comparison,
    LoadRecommendation,
    Recommendation,
    Report,
    RunMetadata,
    Slo,
    SourceReport,
    Split,
    TunerDecision,
    TuneResult,
)
from specobs.schema import TARGET_LABELS

#: What every verb takes.
Data = Ingested | str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | pl.DataFrame | pl.LazyFrame

T = TypeVar("T")


def ingested(data: Data | Session) -> Ingested:
    """``data`` as an :class:`Ingested`: itself, a session's, the paths read, or a frame of ``windows`` rows."""
    if isinstance(data, Session):
        return data.ingested
    if isinstance(data, Ingested):
        return data
    if isinstance(data, pl.DataFrame | pl.LazyFrame):
        return Ingested(windows=data.lazy())
    if isinstance(data, str | os.PathLike) or (isinstance(data, Sequence) and not isinstance(data, bytes)):
        return load(data)
    raise SpecobsError(
        f"expected what specobs.load returns, a path, a list of paths or a polars frame; got {type(data).__name__}"
    )


def windows(data: Data | Session) -> pl.LazyFrame:
    """Every ``windows`` row of ``data``; an input read in parts is read part by part (rows are
    concatenated lazily: for large inputs prefer a verb, which reduces each part first)."""
    whole = ingested(data)
    if not whole.deferred:
        return whole.windows.lazy()
    return pl.concat([part.lazy() for part in whole.parts()], how="diagonal_relaxed")


def _slo(slo: Slo | str | None) -> Slo | None:
    return parse_slo(slo) if isinstance(slo, str) else slo


def analyze(
    data: Data | Session,
    by: str | Sequence[str] = DEFAULT_BY,
    *,
    with_recommendation: bool = True,
    timing: bool = True,
    method: str | None = None,
    check_config: bool = True,
    slo: Slo | str | None = None,
) -> Report:
    """The acceptance report of ``data`` grouped by ``by`` (a list or ``"method,k"``): summary,
    groups, timing by batch size (unless ``timing`` is False), changes over time, and a
    point-estimate recommendation (unless ``with_recommendation`` is False). ``method`` names the
    method of speculative rows that carry none (a scrape of vLLM's counters); ``slo``
    (``"tpot:50ms,ttft:1s"`` or an :class:`Slo`) the objective serving results' goodput is under."""
    return Session.of(data).report(
        by, with_recommendation=with_recommendation, timing=timing, method=method, check_config=check_config, slo=slo
    )


def recommend(
    data: Data | Session,
    *,
    max_k: int | None = None,
    margin: float = RECOMMEND_DEFAULTS.margin,
    cost_ratio: float | None = None,
    bootstrap: int = RECOMMEND_DEFAULTS.bootstrap,
    seed: int = 0,
    method: str | None = None,
    model: str | None = None,
    check_config: bool = True,
    slo: Slo | str | None = None,
) -> Recommendation | LoadRecommendation | None:
    """The best method and k per batch-size bucket, where to switch off, with intervals from
    ``bootstrap`` resamples (None when ``data`` has nothing to recommend from). The printed
    config is what ran, from ``data``'s run metadata. With serving-benchmark results, where each
    configuration should draft under load (``under_load``; goodput under ``slo``): alone, they
    give a :class:`LoadRecommendation`."""
    return Session.of(data).recommend(
        max_k=max_k, margin=margin, cost_ratio=cost_ratio, bootstrap=bootstrap, seed=seed, method=method,
        model=model, check_config=check_config, slo=slo,
    )  # fmt: skip


def compare(a: Data | Session, b: Data | Session, *, slo: Slo | str | None = None) -> Comparison:
    """Run A (before) against run B (after), each with its run metadata; serving results' goodput
    under ``slo``."""
    side_a, side_b = ingested(a), ingested(b)
    return compare_windows(
        windows(side_a), windows(side_b), side_a.metadata, side_b.metadata, side_a.bench, side_b.bench, _slo(slo)
    )


def summarize(data: Data | Session, by: str | Sequence[str] = DEFAULT_BY) -> pl.DataFrame:
    """One row per group: the acceptance summary with intervals (``analysis.acceptance.summarize``)."""
    return acceptance.summarize(windows(data), parse_by(by))


# --- sessions: inputs read once, every answer cached ----------------------------------------------


@dataclass(frozen=True)
class Inputs:
    """Where a session reads from: paths (files, folders, ``-``) and a Prometheus server's range."""

    paths: tuple[str, ...] = ()
    prometheus: str | None = None
    since: str = "6h"
    match: str = ""
    step: str | None = None
    #: Read every input as this format (``--input-format``); None: detected per file.
    fmt: str | None = None


#: One input file in a cache key: path, size and modification time (None, None when unreadable).
FileStamp = tuple[str, int | None, int | None]


def signature(inputs: Inputs) -> tuple[tuple[FileStamp, ...], str | None, str, str]:
    """A cache key of ``inputs`` that changes when any input file changes (size or modification time)."""
    files: list[FileStamp] = []
    for name, _ in expand_paths(list(inputs.paths)):
        try:
            stat = os.stat(name)
            files.append((name, stat.st_size, stat.st_mtime_ns))
        except OSError:
            files.append((name, None, None))
    return (tuple(files), inputs.prometheus, inputs.since, inputs.match)


#: A value of a filter column: ``engine`` is an integer, the others are strings.
LabelValue = str | int
#: Filterable label columns, in the order a surface shows them.
FILTER_COLUMNS = dimensions.columns(dimensions.FILTER)


@dataclass(frozen=True)
class Filters:
    """The slice a summed session answers for: allowed values per label column, and a time range."""

    values: tuple[tuple[str, tuple[LabelValue, ...]], ...] = ()  # (column, allowed values); absent = all
    time_range: tuple[float, float] | None = None  # unix seconds, on window end times (snapped: see buckets)

    def allowed(self, column: str) -> tuple[LabelValue, ...] | None:
        return dict(self.values).get(column)

    def buckets(self, grid: TimeGrid | None) -> tuple[int, int] | None:
        """The time buckets ``[start, stop)`` of the time range (its ends snap to bucket edges)."""
        if self.time_range is None or grid is None:
            return None
        return grid.snap(*self.time_range)


#: No filter: everything read.
EVERYTHING = Filters()
#: Time buckets in a series over time (:meth:`Session.over_time`): readable, not spiky.
CHART_POINTS = 120
#: Columns a recommendation cell keeps beyond the fit's own labels, so the label filters apply to it.
RECOMMENDATION_LABELS = (*TARGET_LABELS, "engine", "workload", "draining")
#: Answers a session keeps (the least recently asked go first).
CACHED_ANSWERS = 64


@dataclass
class Summed:
    """What a summed session keeps of its inputs instead of rows: their sums per time bucket and
    label set, the time grid, and the trimmed rows written to disk (for what needs rows)."""

    sums: ReportSums
    grid: TimeGrid | None
    rows: Path | None
    options: dict[str, list[LabelValue]]


class Session:
    """Inputs read once, and every answer asked of them computed once and kept.

        session = Session.open(Inputs(("examples/data/vllm-cpu-sweep",)))
        report = session.report("method,k")
        rec = session.recommend(bootstrap=0)

    Opened (:meth:`open`), the session holds what was read, rows included (an input too large to
    hold is read part by part by each verb): the command line's. Summed (:meth:`summed`), it
    holds sums per time bucket and label set instead of rows, so that every verb answers for any
    :class:`Filters` from the sums: the dashboard's. Either way the verbs are the same, and an
    answer already given (same verb, arguments and filters) is given again without computing."""

    def __init__(self, ingested: Ingested, *, failed: Sequence[str] = (), summed: Summed | None = None) -> None:
        self.ingested = ingested
        #: "input: why", one per input that could not be read (with ``keep_going``).
        self.failed = list(failed)
        self._summed = summed
        self._answers: OrderedDict[Hashable, Any] = OrderedDict()
        #: Guards ``_answers`` and ``_computing`` only, never held while an answer is computed.
        self._lock = threading.Lock()
        #: key → the lock of the one thread computing it (another asking the same waits on it).
        self._computing: dict[Hashable, threading.Lock] = {}

    # --- opening ----------------------------------------------------------------------------------

    @classmethod
    def of(cls, data: Data | Session) -> Session:
        """``data`` as a session (a session is itself)."""
        return data if isinstance(data, Session) else cls(ingested(data))

    @classmethod
    def open(
        cls,
        inputs: Inputs,
        *,
        uploads: Sequence[tuple[str, bytes]] = (),
        keep_going: bool = False,
        part_rows: int | None = None,
        progress_factory: Callable[[Source], Callable[[int], None] | None] | None = None,
        release: bool = False,
    ) -> Session:
        """Read ``inputs`` and ``uploads`` (name, content) with :func:`specobs.ingest.load` (in
        parts of ``part_rows`` rows where Parquet event files hold more) and the Prometheus
        range; with ``keep_going`` an unreadable input (or server) is listed in :attr:`failed`."""
        read = Ingested()
        if inputs.paths or uploads:
            try:
                check_format(inputs.fmt)
            except SpecobsError:
                known = ", ".join(FORMATS)
                raise SpecobsError(f"--input-format {inputs.fmt}: unknown format (choose from {known})") from None
            read = load(
                list(inputs.paths), inputs.fmt, progress_factory=progress_factory, uploads=uploads,
                keep_going=keep_going, part_rows=part_rows,
            )  # fmt: skip
        failed = [str(exc) for exc in read.failed]
        if inputs.prometheus:
            try:
                read = add_prometheus(read, inputs.prometheus, since=inputs.since, match=inputs.match, step=inputs.step)
            except SpecobsError as exc:
                if not keep_going:
                    raise
                failed.append(str(exc))
        return cls(replace(read, release=release) if release else read, failed=failed)

    @classmethod
    def summed(
        cls, inputs: Inputs, uploads: Sequence[tuple[str, bytes]] = (), part_rows: int | None = PART_ROWS
    ) -> Session:
        """Read ``inputs`` and ``uploads`` a part at a time (Parquet files larger than
        ``part_rows`` rows together are read in parts, a larger file in slices, as the report
        reads them) and keep their sums per time bucket and label set
        (:func:`specobs.advice.report_builder.report_sums`), never rows; unreadable inputs go to
        :attr:`failed`.

        Each part's trimmed rows are summed and written to a temporary folder (comparisons and
        recommendation blocks need rows), then let go."""
        opened = cls.open(inputs, uploads=uploads, keep_going=True, part_rows=part_rows, release=True)
        read = opened.ingested
        grid = TimeGrid.of(*_end_times(read))
        folder = Path(tempfile.mkdtemp(prefix="specobs-dashboard-"))
        written = [0]

        def each(frame: pl.DataFrame) -> None:
            # A tenth of the rows' size; read back by predicate (compare) or a part at a time (recommend).
            frame.write_parquet(folder / f"part-{written[0]:04d}.parquet", compression="lz4")
            written[0] += 1

        sums = report_sums(read, SERIES_KEYS, with_recommendation=False, grid=grid, each=each)
        if sums.over_time is not None:  # the end time of a series point (a window, or a report time bucket)
            sums = replace(sums, over_time=with_time_bucket(sums.over_time, grid))
        # What was read beside its rows: the rows are let go (counted first).
        beside = replace(
            read, sources=counted_sources(read), windows=schema.empty(schema.WINDOWS).lazy(), release=False
        )
        labels = [sums.cells.select(FILTER_COLUMNS), beside.requests.select(FILTER_COLUMNS)]
        options = label_values(pl.concat(labels, how="vertical_relaxed"), FILTER_COLUMNS)
        session = cls(beside, failed=opened.failed, summed=Summed(sums, grid, folder, options))
        weakref.finalize(session, shutil.rmtree, folder, True)  # the rows on disk go with the sums
        return session

    # --- what was read ---------------------------------------------------------------------------

    @property
    def sources(self) -> list[SourceReport]:
        return self.ingested.sources

    @property
    def skipped(self) -> list[Skipped]:
        return self.ingested.skipped

    @property
    def tune_runs(self) -> list[tuple[str, TuneResult]]:
        return self.ingested.tune_runs

    @property
    def decisions(self) -> list[TunerDecision]:
        return self.ingested.decisions

    @property
    def metadata(self) -> tuple[RunMetadata, ...]:
        return tuple(self.ingested.metadata)

    @property
    def bench(self) -> pl.DataFrame:
        """Serving-benchmark results (``schema.BENCH``)."""
        return self.ingested.bench

    @property
    def grid(self) -> TimeGrid | None:
        """The time buckets a summed session's time filter snaps to (None: not summed, or no times)."""
        return self._summed.grid if self._summed is not None else None

    @property
    def options(self) -> dict[str, list[LabelValue]]:
        """The values of each filter column (:data:`FILTER_COLUMNS`) a summed session holds."""
        return self._summed.options if self._summed is not None else {}

    @property
    def bounds(self) -> tuple[float, float] | None:
        """The time grid's first and last edge."""
        grid = self.grid
        return (grid.first, grid.last) if grid is not None else None

    def count_windows(self, filters: Filters = EVERYTHING) -> int:
        """How many windows were read (summed in the cells), inside ``filters``."""
        cells = self.sums(filters).cells
        return int(cells.get_column("num_windows").sum()) if cells.height else 0

    # --- the cache ---------------------------------------------------------------------------------

    def _answer(self, key: Hashable, compute: Callable[[], T]) -> T:
        """The answer of ``key``: computed the first time, then kept (:data:`CACHED_ANSWERS`).

        One computation per key at a time, and none holds up another key's: the dashboard shares
        one session across browser tabs, and one tab's recommendation must not stall another's
        filter (a thread asking for a key being computed waits for that answer instead of
        computing it twice)."""
        while True:
            with self._lock:
                if key in self._answers:
                    self._answers.move_to_end(key)
                    return cast(T, self._answers[key])
                running = self._computing.get(key)
                if running is None:
                    mine = self._computing[key] = threading.Lock()
                    mine.acquire()
                    break
            with running:  # computed by another thread: wait for it, then read its answer
                pass
        try:
            value = compute()
            with self._lock:
                self._answers[key] = value
                if len(self._answers) > CACHED_ANSWERS:
                    self._answers.popitem(last=False)
            return value
        finally:
            with self._lock:
                del self._computing[key]
            mine.release()

    def _unfiltered(self, filters: Filters | None) -> None:
        if self._summed is None and filters not in (None, EVERYTHING):
            raise SpecobsError("filters apply to a summed session (Session.summed), which keeps sums per label set")

    # --- sums ---------------------------------------------------------------------------------------

    def sums(self, filters: Filters = EVERYTHING) -> ReportSums:
        """A summed session's sums inside ``filters``: every sum filtered by label and time bucket
        (the series over time by the end time of its points: a report time bucket at the range's
        ends is in or out whole)."""
        if self._summed is None:
            raise SpecobsError("sums by filter are kept by a summed session (Session.summed)")
        summed = self._summed

        def cut() -> ReportSums:
            buckets = filters.buckets(summed.grid)
            sums = summed.sums
            if not filters.values and buckets is None:
                return sums
            return replace(
                sums,
                cells=within(sums.cells, filters.values, buckets),
                tax=within(sums.tax, filters.values, buckets),
                over_time=None if sums.over_time is None else within(sums.over_time, filters.values, buckets),
                resumes=within(sums.resumes, filters.values, buckets),
                stretches=within(sums.stretches, filters.values),
                engine_stretches=within(sums.engine_stretches, filters.values),
            )

        return self._answer(("sums", filters), cut)

    def requests(self, filters: Filters = EVERYTHING) -> pl.DataFrame:
        """Finished requests inside ``filters``: the label filters, and the time range on finish times."""
        requests = self.ingested.requests
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

    def _by_cells(self, by: Sequence[str], method: str | None, with_recommendation: bool) -> ReportSums:
        keys = acceptance.group_columns(by)
        return self._answer(
            ("by cells", tuple(keys), method, with_recommendation),
            lambda: report_sums(self.ingested, keys, with_recommendation=with_recommendation, method=method),
        )

    # --- the verbs ----------------------------------------------------------------------------------

    def report(
        self,
        by: str | Sequence[str] = DEFAULT_BY,
        *,
        filters: Filters = EVERYTHING,
        with_recommendation: bool = True,
        timing: bool = True,
        method: str | None = None,
        check_config: bool = True,
        slo: Slo | str | None = None,
    ) -> Report:
        """The report grouped by ``by`` (what :func:`analyze` says). A summed session reports
        from its sums inside ``filters`` (no recommendation in it: :meth:`recommend`'s is the
        one with intervals); an opened one sums its rows for ``by`` once (``filters``: none)."""
        self._unfiltered(filters)
        groups = tuple(parse_by(by))
        objective = _slo(slo)
        key = ("report", groups, filters, with_recommendation, timing, method, check_config, objective)

        def compute() -> Report:
            if self._summed is not None:
                return report_from_sums(
                    self.sums(filters), self.ingested, groups, timing=timing, check_config=check_config,
                    requests=self.requests(filters), slo=objective,
                )  # fmt: skip
            sums = self._by_cells(groups, method, with_recommendation)
            return report_from_sums(
                sums, self.ingested, groups, timing=timing, check_config=check_config, slo=objective
            )

        return self._answer(key, compute)

    def recommendation_blocks(self, filters: Filters = EVERYTHING) -> pl.DataFrame | None:
        """A summed session's recommendation blocks (consecutive steps of one configuration) inside
        ``filters``, a block by the time bucket of its last step; None when nothing was read.

        Made the first time they are asked for, from the rows on disk a part at a time, and
        kept: a recommendation with resampling needs blocks of steps."""
        if self._summed is None:
            raise SpecobsError("recommendation blocks by filter are kept by a summed session (Session.summed)")
        summed = self._summed

        def every() -> list[pl.DataFrame]:
            parts = sorted(summed.rows.glob("*.parquet")) if summed.rows is not None else []
            return [_recommendation_part(pl.read_parquet(part), summed.grid) for part in parts]

        def cut() -> pl.DataFrame | None:
            blocks = self._answer("recommendation blocks", every)
            if not blocks:
                return None
            return within(pl.concat(blocks, how="diagonal_relaxed"), filters.values, filters.buckets(summed.grid))

        return self._answer(("recommendation blocks", filters), cut)

    def recommend(
        self,
        *,
        filters: Filters = EVERYTHING,
        max_k: int | None = None,
        margin: float = RECOMMEND_DEFAULTS.margin,
        cost_ratio: float | None = None,
        bootstrap: int = RECOMMEND_DEFAULTS.bootstrap,
        seed: int = 0,
        method: str | None = None,
        model: str | None = None,
        check_config: bool = True,
        slo: Slo | str | None = None,
    ) -> Recommendation | LoadRecommendation | None:
        """The recommendation (what :func:`recommend` says). A summed session fits the
        recommendation blocks inside ``filters`` (the steps' recommendation alone)."""
        self._unfiltered(filters)
        objective = _slo(slo)
        key = ("recommend", filters, max_k, margin, cost_ratio, bootstrap, seed, method, model, check_config, objective)

        def summed() -> Recommendation | None:
            blocks = self.recommendation_blocks(filters)
            if blocks is None or blocks.is_empty():
                return None
            return recommending.recommend(
                blocks, max_k=max_k, margin=margin, cost_ratio=cost_ratio, bootstrap=bootstrap, seed=seed,
                method=method, model=model, metadata=self.ingested.metadata, check_config=check_config,
            )  # fmt: skip

        def opened() -> Recommendation | LoadRecommendation | None:
            whole = self.ingested
            read, by_context, captured = recommendation_reads(whole, method=method, check_config=check_config)
            rec = recommending.recommend(
                read, max_k=max_k, margin=margin, cost_ratio=cost_ratio, bootstrap=bootstrap, seed=seed,
                method=method, model=model, metadata=whole.metadata, check_config=check_config,
            )  # fmt: skip
            under_load = serving(whole.bench, captured, objective)
            advice = advise(under_load, whole.bench, whole.metadata) if under_load is not None else ()
            if rec is None:
                return LoadRecommendation(advice, objective) if advice else None
            return replace(rec, under_load=advice, by_context=by_context)

        return self._answer(key, summed if self._summed is not None else opened)

    def compare(self, dimension: str, a: object, b: object, *, filters: Filters = EVERYTHING) -> Comparison:
        """Two values of ``dimension`` (a ``--by`` name) of a summed session against each other,
        inside ``filters``: their trimmed rows, read from the copy on disk."""
        column = GROUP_KEYS[dimension]
        return self._answer(
            ("compare", dimension, a, b, filters),
            lambda: compare_windows(self._rows(filters, column, a), self._rows(filters, column, b)),
        )

    def _rows(self, filters: Filters, column: str, value: object) -> pl.LazyFrame:
        """The trimmed rows of one side of a comparison (``column`` = ``value``) inside ``filters``,
        read lazily from the copy on disk: a comparison needs rows (the spread between runs), and
        reads only the columns and row groups it needs."""
        summed = self._summed
        if summed is None:
            raise SpecobsError("a comparison by dimension is made in a summed session (Session.summed)")
        if summed.rows is None or not any(summed.rows.glob("*.parquet")):
            return schema.empty(schema.WINDOWS).lazy().with_columns(unsteady=pl.lit(None, pl.String))
        rows = pl.scan_parquet(summed.rows / "*.parquet")
        if column in FILLED:  # one value per engine: from the run metadata
            rows = with_run_dimensions(rows, self.ingested.metadata)
        elif column == CONTEXT_BUCKET:
            rows = with_context_bucket(rows)
        rows = rows.filter(pl.col(column) == value)
        buckets = filters.buckets(summed.grid)
        if summed.grid is not None and buckets is not None:
            rows = rows.with_columns(summed.grid.bucket())
        return within(rows.collect(), filters.values, buckets).drop(TIME_BUCKET, strict=False).lazy()

    def side_by_side(self, dimension: str, values: Sequence[object], *, filters: Filters = EVERYTHING) -> Split | None:
        """The engines inside ``filters`` side by side at ``values`` of an environment
        ``dimension`` (each against its own plain engine: ``analysis.split``), from the kept sums;
        None when the dimension is not one engines run on, or nothing at those values is known."""

        def compute() -> Split | None:
            sums = self.sums(filters)
            found = dimensions.by_name(dimension)
            if dimensions.ENVIRONMENT not in found.roles or found.column not in sums.cells.columns:
                return None
            cells = sums.cells.filter(pl.col(found.column).cast(pl.String).is_in([str(v) for v in values]))
            return split(cells, sums.engine_stretches, [dimension], self.ingested.metadata)

        return self._answer(("side by side", dimension, tuple(values), filters), compute)

    def compare_choices(self, names: Sequence[str], filters: Filters = EVERYTHING) -> dict[str, list]:
        """For each dimension of ``names`` (``--by`` names), its values that drafted inside
        ``filters``, when there are at least two."""
        return self._answer(
            ("choices", tuple(names), filters),
            lambda: drafted_values(self.sums(filters).cells, {name: GROUP_KEYS[name] for name in names}),
        )

    def over_time(
        self, columns: Sequence[str], *, filters: Filters = EVERYTHING, points: int = CHART_POINTS
    ) -> pl.DataFrame:
        """Acceptance length per window (or time bucket) per group of ``columns`` over time, from
        the series sums the report's change detection reads, put into at most ``points``
        buckets (``timeseries.series_from_sums``)."""

        def compute() -> pl.DataFrame:
            sums = self.sums(filters).over_time
            if sums is None or sums.is_empty():
                empty = {c: pl.String for c in columns} | {"end_ts": pl.Float64, "num_drafts": pl.Int64}
                sums = pl.DataFrame(schema={**empty, "source_line": pl.Int64, "num_accepted_tokens": pl.Int64})
            return series_from_sums(coarser(sums, points), list(columns))

        return self._answer(("over time", tuple(columns), filters, points), compute)

    def measured(self, filters: Filters = EVERYTHING) -> pl.DataFrame | None:
        """Measured decode tokens/s per method, k and batch bucket inside ``filters``
        (``advice.validate.measured_throughput`` of the recommendation cells); None without cells."""

        def compute() -> pl.DataFrame | None:
            cells = self.recommendation_blocks(filters)
            if cells is None or cells.is_empty():
                return None
            return measured_throughput(cells, by_bucket=True)

        return self._answer(("measured", filters), compute)


def _recommendation_part(frame: pl.DataFrame, grid: TimeGrid | None) -> pl.DataFrame:
    """The recommendation cells of one part's trimmed rows (blocks of consecutive steps, by the
    time bucket of their last step)."""
    steps = frame.lazy()
    if "request_id" in frame.columns:
        steps = steps.filter(pl.col("request_id").is_null())
    steps = served_intervals(steps)  # the served intervals of a log, by load (``log_speedup``)
    return with_time_bucket(step_blocks(with_draining(steps).collect(), (*RECOMMENDATION_LABELS, SERVED_LOAD)), grid)


def _end_times(read: Ingested) -> tuple[float | None, float | None]:
    """The earliest and latest window end of the input, from the windows held and a first pass
    over a column of each file read in parts."""
    lows, highs = [], []

    def span(frame: pl.LazyFrame) -> None:
        low, high = frame.select(pl.col("end_ts").min(), pl.col("end_ts").max().alias("high")).collect().row(0)
        if low is not None:
            lows.append(low)
            highs.append(high)

    span(read.windows)
    for part in read.deferred:
        if part.windows is not None:
            span(part.windows.lazy())
    for name, rows in first_pass_slices(read):
        first_pass(open_source(name), span, rows)
    return (min(lows), max(highs)) if lows else (None, None)


def sources_counted(data: Data | Session) -> list[SourceReport]:
    """The sources of ``data`` with the window counts of lazily read event files filled in."""
    return counted_sources(ingested(data))


__all__ = [
    "CHART_POINTS",
    "DEFAULT_BY",
    "EVERYTHING",
    "FILTER_COLUMNS",
    "FORMATS",
    "GROUP_KEYS",
    "PART_ROWS",
    "Data",
    "EnvironmentVariable",
    "Filters",
    "Inputs",
    "Session",
    "Source",
    "analyze",
    "compare",
    "ingested",
    "load",
    "parse_by",
    "parse_duration",
    "parse_slo",
    "recommend",
    "signature",
    "sources_counted",
    "summarize",
    "windows",
]
