"""Sums per time bucket and label set: what a surface that must not hold rows keeps instead.

A report's numbers are sums divided once (``acceptance.cells``, ``cost.step_cells``,
``timeseries.time_sums``, ``cost.schedule_tax_sums``). Splitting those sums further by a time
bucket of a fixed :class:`TimeGrid` keeps every number computable for any label filter and any
range of whole buckets: filter the sums (:func:`within`), then compute as the report does. A time
range therefore snaps to bucket edges (:meth:`TimeGrid.snap`); at the edges the numbers equal
those of the rows filtered by end time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from specobs import dimensions
from specobs.analysis.timeseries import TimeSpan

#: The column every bucketed sum carries: its time bucket's number on the grid (null: no end time).
TIME_BUCKET = "_time_bucket"
#: Most buckets a grid has: the time filter's resolution (a slider of ≤ 500 steps).
MAX_BUCKETS = 500
#: Label columns a series over time is kept per, so that any grouping and filter can be served
#: from it (``timeseries.series_from_sums`` sums away the ones a report does not group by).
SERIES_KEYS = (*dimensions.columns(dimensions.CELL), "batch_bucket")


@dataclass(frozen=True)
class TimeGrid:
    """Equal time buckets over a span of window end times: bucket i holds the windows ending in
    ``[first + i·width, first + (i+1)·width)``, the last bucket also its end."""

    first: float
    width: float
    count: int

    @classmethod
    def of(cls, low: float | None, high: float | None, max_buckets: int = MAX_BUCKETS) -> TimeGrid | None:
        """The grid of at most ``max_buckets`` buckets over ``low``–``high``, each a whole number
        of milliseconds wide (edges a slider can hit exactly); None without a span."""
        if low is None or high is None:
            return None
        span = max(high - low, 0.0)
        width = max(math.ceil(span / max_buckets * 1000) / 1000, 0.001)
        return cls(float(low), width, max(1, min(max_buckets, math.floor(span / width) + 1)))

    @property
    def last(self) -> float:
        return self.first + self.count * self.width

    def bucket(self, column: str = "end_ts") -> pl.Expr:
        """The bucket of each row's ``column`` (clipped to the grid: the span's end is in the last)."""
        index = ((pl.col(column) - self.first) / self.width).floor().cast(pl.Int64)
        return index.clip(0, self.count - 1).alias(TIME_BUCKET)

    def edge(self, index: int) -> float:
        """The start time of bucket ``index`` (``count``: the grid's end)."""
        return self.first + index * self.width

    def snap(self, low: float, high: float) -> tuple[int, int]:
        """The buckets ``[start, stop)`` a time range keeps: its ends moved to the nearest edges."""
        start = min(max(round((low - self.first) / self.width), 0), self.count)
        stop = min(max(round((high - self.first) / self.width), start), self.count)
        return start, stop


def within(
    frame: pl.DataFrame,
    values: Sequence[tuple[str, Sequence[object]]] = (),
    buckets: tuple[int, int] | None = None,
) -> pl.DataFrame:
    """The sums of ``frame`` inside a selection: label ``values`` (column → allowed values) and
    the time ``buckets`` ``[start, stop)`` (sums without an end time are kept, as rows without
    one are). A plain-decoding row without a method stays under a method filter: it is the
    baseline every method is measured against."""
    if not values and buckets is None:
        return frame
    condition = pl.lit(True)
    for column, allowed in values:
        if column not in frame.columns:
            continue
        keep = pl.col(column).is_in(list(allowed))
        if column == "method":  # sums without k (the schedule tax's) are all k = 0 steps
            plain = pl.col("num_spec_tokens") == 0 if "num_spec_tokens" in frame.columns else pl.lit(True)
            keep = keep | (pl.col("method").is_null() & plain)
        condition = condition & keep.fill_null(False)
    if buckets is not None and TIME_BUCKET in frame.columns:
        start, stop = buckets
        condition = condition & pl.col(TIME_BUCKET).is_between(start, stop - 1).fill_null(True)
    return frame.filter(condition)


def with_time_bucket(frame: pl.DataFrame, grid: TimeGrid | None, column: str = "end_ts") -> pl.DataFrame:
    """``frame`` (already summed: a series, recommendation cells) with the bucket of ``column``."""
    if grid is None:
        return frame.with_columns(pl.lit(None, pl.Int64).alias(TIME_BUCKET))
    return frame.with_columns(grid.bucket(column))


def coarser(series: pl.DataFrame, max_points: int) -> pl.DataFrame:
    """Series sums (``timeseries.time_sums``: windows, or report time buckets) put into at most
    ``max_points`` equal buckets over their span, by each point's end time, for
    ``timeseries.series_from_sums`` to add up: a chart's fewer, wider points. On unbucketed
    windows this is the bucketing ``acceptance_over_time`` gives the rows themselves."""
    span = series.select(n=pl.len(), lo=pl.col("end_ts").min(), hi=pl.col("end_ts").max()).row(0)
    width = TimeSpan(*span).bucket_width(max_points)
    series = series.drop("_bucket", strict=False)
    if width is None:
        return series
    return series.with_columns(_bucket=(pl.col("end_ts") - span[1]) // width)


def label_values(cells: pl.DataFrame, columns: Sequence[str]) -> dict[str, list]:
    """Distinct known values of each of ``columns`` in ``cells`` (columns with none left out)."""
    out = {}
    for column in columns:
        if column in cells.columns:
            values = cells.get_column(column).drop_nulls().unique().sort().to_list()
            if values:
                out[column] = values
    return out


def drafted_values(cells: pl.DataFrame, dimensions: Mapping[str, str]) -> dict[str, list]:
    """For each ``--by`` name in ``dimensions`` (name → column), its values in cells that
    drafted, when there are at least two: what a comparison can set side by side."""
    drafted = cells.filter(pl.col("num_drafts").fill_null(0) > 0)
    out = {}
    for name, column in dimensions.items():
        if column not in drafted.columns:
            continue
        values = drafted.get_column(column).drop_nulls().unique().sort().to_list()
        if len(values) >= 2:
            out[name] = values
    return out


__all__ = [
    "MAX_BUCKETS",
    "SERIES_KEYS",
    "TIME_BUCKET",
    "TimeGrid",
    "coarser",
    "drafted_values",
    "label_values",
    "with_time_bucket",
    "within",
]  # fmt: skip
