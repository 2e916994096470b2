"""Run metadata as columns: what each engine ran on and with, joined to its rows or sums.

Rows carry only a few run-metadata fields as labels (``schema.METADATA_LABELS``); the rest
(device architecture, the drafter's attention backend, parallel sizes, dtypes, the schedule…)
are one value per engine, so they are joined by ``(run_id, engine)`` to whatever holds those two
columns: rows, or the cells summed from them (thousands of rows instead of millions). A label
the rows lack (a log has no attention backend on its lines) is filled from the metadata too.

Which record applies: the newest of the run and engine; a record without an engine applies to
every engine of its run that has no record of its own. A run without metadata has nulls: an
unknown value, shown as such, never a guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from specobs import dimensions, schema
from specobs.records import RunMetadata

#: Every column :func:`with_run_dimensions` fills: the row labels from the metadata, then the rest.
FILLED: dict[str, pl.DataType] = {
    **{name: schema.LABELS[name] for name in schema.METADATA_LABELS},
    **schema.RUN_DIMENSIONS,
}
_KEY = "_run_key"


def schedule_text(schedule: Sequence[Sequence[int]] | None) -> str | None:
    """A schedule as one label: ``1-8:3,9-16:1`` (``(low, high, k)`` per range); None when unknown."""
    if schedule is None:
        return None
    return ",".join(f"{low}-{high}:{k}" for low, high, k in schedule) or "none"


def _value(record: RunMetadata, column: str) -> Any:
    field = dimensions.by_name(column).field or column
    value = getattr(record, field, None)
    return schedule_text(value) if column == "schedule" else value


def run_table(metadata: Sequence[RunMetadata]) -> pl.DataFrame:
    """One row per (run_id, engine) of ``metadata`` with every :data:`FILLED` column (the newest
    record of each wins: ``metadata`` is oldest first)."""
    latest: dict[tuple[str | None, int | None], RunMetadata] = {}
    for record in metadata:
        latest[(record.run_id, record.engine)] = record
    rows = [
        {"run_id": run, "engine": engine, **{c: _value(r, c) for c in FILLED}} for (run, engine), r in latest.items()
    ]
    return pl.DataFrame(rows, schema={"run_id": pl.String(), "engine": pl.Int64(), **FILLED})


def with_run_dimensions(frame: pl.LazyFrame, metadata: Sequence[RunMetadata]) -> pl.LazyFrame:
    """``frame`` (rows or sums with ``run_id`` and ``engine``) with every :data:`FILLED` column:
    a value the frame has is kept, a missing one comes from the metadata of its run and engine.
    Rows keep their order (a stretch of steps is read in input order)."""
    names = frame.collect_schema()
    absent = [pl.lit(None, dtype).alias(c) for c, dtype in FILLED.items() if c not in names]
    frame = frame.with_columns(absent)
    table = run_table(metadata)
    wanted = [c for c in FILLED if table.get_column(c).null_count() < table.height]
    if not wanted or "run_id" not in names or "engine" not in names:
        return frame
    # Joined on text: a categorical run_id is compared as its text (the table has a few rows).
    key = pl.col("run_id").cast(pl.String)
    exact = table.filter(pl.col("engine").is_not_null()).select("run_id", "engine", *wanted)
    any_engine = table.filter(pl.col("engine").is_null()).select("run_id", *wanted)
    joined = frame.with_columns(key.alias(_KEY))
    suffix = "_meta"
    if exact.height:
        joined = joined.join(
            exact.lazy().rename({"run_id": _KEY}), on=[_KEY, "engine"], how="left", suffix=suffix,
            nulls_equal=True, maintain_order="left",
        )  # fmt: skip
        joined = _coalesced(joined, wanted, suffix, names)
    if any_engine.height:
        joined = joined.join(
            any_engine.lazy().rename({"run_id": _KEY}), on=_KEY, how="left", suffix=suffix, maintain_order="left"
        )
        joined = _coalesced(joined, wanted, suffix, names)
    return joined.drop(_KEY)


def _coalesced(frame: pl.LazyFrame, wanted: Sequence[str], suffix: str, names: Any) -> pl.LazyFrame:
    """The frame's own value where it has one, else the metadata's; categoricals stay categoricals."""
    out = []
    for column in wanted:
        own = pl.col(column)
        meta = pl.col(column + suffix)
        if names.get(column) == pl.Categorical:
            meta = meta.cast(pl.Categorical)
        elif column in names and names[column] != FILLED[column]:
            own = own.cast(FILLED[column])
        out.append(pl.coalesce(own, meta).alias(column))
    return frame.with_columns(out).drop([c + suffix for c in wanted])


__all__ = ["FILLED", "run_table", "schedule_text", "with_run_dimensions"]
