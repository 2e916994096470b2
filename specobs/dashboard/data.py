"""What the app reads, and the slice of it that every page sees.

Inputs are paths (files or folders), uploaded files and a Prometheus server, read with the
same ingest as the command line; an input that cannot be read is listed, not fatal. Filters
are plain values, so that results can be cached by them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from specobs import schema
from specobs.analysis.cost import steady_state
from specobs.errors import Skipped, SpecobsError
from specobs.ingest import add_prometheus, counted_sources, load
from specobs.ingest.source import expand_paths
from specobs.records import RunMetadata, SourceReport, TunerDecision, TuneResult
from specobs.schema import categorical_labels

#: The bundled real recording the app opens on when given nothing (present in a checkout).
BUNDLED_SWEEP = Path(__file__).resolve().parents[2] / "examples" / "data" / "vllm-cpu-sweep"
#: How ``specobs dashboard`` hands its arguments to the Streamlit script (JSON).
ARGS_ENV = "SPECOBS_DASHBOARD_ARGS"
#: Filterable label columns, in the order the sidebar shows them.
FILTER_COLUMNS = ("model", "method", "engine", "workload", "platform")
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
    """Everything read, unfiltered."""

    windows: pl.DataFrame
    sources: list[SourceReport] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # "input: why", one per unreadable input
    options: dict[str, list[LabelValue]] = field(default_factory=dict)  # filter_options(windows), read once
    bounds: tuple[float, float] | None = None  # time_bounds(windows)
    tune_runs: list[tuple[str, TuneResult]] = field(default_factory=list)  # specobs tune results read back
    decisions: list[TunerDecision] = field(default_factory=list)  # the online tuner's log
    requests: pl.DataFrame = field(default_factory=lambda: schema.empty(schema.REQUESTS))  # finished requests
    metadata: tuple[RunMetadata, ...] = ()  # run metadata: what each engine ran with


def load_inputs(inputs: Inputs, uploads: Sequence[tuple[str, bytes]] = ()) -> Loaded:
    """Read ``inputs`` and ``uploads`` (name, content); unreadable ones go to ``failed``."""
    ingested = load(list(inputs.paths), uploads=uploads, keep_going=True)
    failed = [str(exc) for exc in ingested.failed]
    if inputs.prometheus:
        try:
            add_prometheus(ingested, inputs.prometheus, since=inputs.since, match=inputs.match)
        except SpecobsError as exc:
            failed.append(str(exc))
    # Trimmed once (steady_state is idempotent): every page's analysis takes this frame, so none
    # of them ranks the steps again (on 10M steps that is seconds per page).
    windows = steady_state(categorical_labels(ingested.windows)).collect()
    ingested.windows = windows.lazy()
    labels = pl.concat(
        [windows.select(FILTER_COLUMNS), ingested.requests.select(FILTER_COLUMNS)], how="vertical_relaxed"
    )
    return Loaded(
        windows, counted_sources(ingested), ingested.skipped, failed, filter_options(labels), time_bounds(windows),
        ingested.tune_runs, ingested.decisions, ingested.requests, tuple(ingested.metadata),
    )  # fmt: skip


@dataclass(frozen=True)
class Filters:
    """The slice every page sees: allowed values per label column, and a time range."""

    values: tuple[tuple[str, tuple[LabelValue, ...]], ...] = ()  # (column, allowed values); absent = all
    time_range: tuple[float, float] | None = None  # unix seconds, on window end times

    def allowed(self, column: str) -> tuple[LabelValue, ...] | None:
        return dict(self.values).get(column)


def filter_options(windows: pl.DataFrame) -> dict[str, list[LabelValue]]:
    """Distinct known values of each filter column (columns with none are left out)."""
    combos = windows.lazy().group_by(FILTER_COLUMNS).len().collect()  # one pass; the combinations are few
    values = {c: combos.get_column(c).drop_nulls().unique().sort().to_list() for c in FILTER_COLUMNS}
    return {c: v for c, v in values.items() if v}


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


def time_bounds(windows: pl.DataFrame) -> tuple[float, float] | None:
    """The earliest and latest window end, or None without timestamps."""
    low, high = windows.select(low=pl.col("end_ts").min(), high=pl.col("end_ts").max()).row(0)
    return (float(low), float(high)) if low is not None else None


def apply_filters(windows: pl.DataFrame, filters: Filters) -> pl.DataFrame:
    """Rows inside ``filters``. Plain-decoding rows without a method (a k = 0 baseline engine)
    are kept under a method filter: the tuning model needs them as the baseline."""
    condition = pl.lit(True)
    for column, allowed in filters.values:
        keep = pl.col(column).is_in(list(allowed))
        if column == "method":
            keep = keep | (pl.col("method").is_null() & (pl.col("num_spec_tokens") == 0))
        condition = condition & keep.fill_null(False)
    if filters.time_range is not None:
        low, high = filters.time_range
        condition = condition & pl.col("end_ts").is_between(low, high).fill_null(True)
    if not filters.values and filters.time_range is None:
        return windows
    return windows.filter(condition)
