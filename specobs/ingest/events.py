"""specobs event files: the ``steps`` columns as JSON Lines or Parquet.

One JSON object per line (or one Parquet row) per engine step, with the columns of
:data:`specobs.schema.STEPS`; missing columns are null. Example line::

    {"ts": 1764472397.5, "run_id": "r1", "engine": 0, "model": "m", "method": "eagle3",
     "platform": "rocm", "batch_size": 8, "num_spec_tokens": 3, "num_drafts": 8,
     "num_draft_tokens": 24, "num_accepted_tokens": 17, "num_accepted_tokens_per_pos": [7, 6, 4],
     "draft_seconds": 0.0021, "verify_seconds": 0.0135, "step_seconds": 0.0172}

``num_drafts_per_pos`` (drafts that reached each position) is optional: files written before
it existed read as null there. A JSON Lines record whose per-position counts contradict each
other (a position accepted more often than reached, reached by more drafts than the step
made, or reached more often than the position before it) is skipped whole and reported.

Parquet is read lazily, so a report over 10M steps only touches the columns it needs.
"""

from __future__ import annotations

import io
import json

import polars as pl

from specobs import schema
from specobs.errors import InputError, Skipped
from specobs.ingest.source import Source

FORMAT_JSONL = "events-jsonl"
FORMAT_PARQUET = "events-parquet"
PARQUET_MAGIC = b"PAR1"
#: Longest per-position lists the vectorised consistency check covers (k is far below this).
MAX_CHECKED_POSITIONS = 32

_INT_COLUMNS = {n for n, t in schema.STEPS.items() if t == pl.Int64()}
_FLOAT_COLUMNS = {n for n, t in schema.STEPS.items() if t == pl.Float64()}
_STRING_COLUMNS = {n for n, t in schema.STEPS.items() if t == pl.String()}
_LIST_COLUMNS = ("num_accepted_tokens_per_pos", "num_drafts_per_pos")


def looks_like_jsonl(head: bytes) -> bool:
    """True when the first non-empty line is a JSON object with the steps columns."""
    for raw in head.split(b"\n"):
        line = raw.strip()
        if not line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            return False
        return isinstance(record, dict) and all(k in record for k in schema.EVENT_FILE_REQUIRED)
    return False


def read_parquet(src: Source) -> pl.LazyFrame:
    """Steps from a Parquet event file, lazily, conformed to the steps schema."""
    try:
        if src.path is not None and not src.compressed:
            frame = pl.scan_parquet(src.path)
            names = frame.collect_schema().names()
        else:
            with src.open() as stream:
                frame = pl.read_parquet(io.BytesIO(stream.read())).lazy()
            names = frame.collect_schema().names()
    except Exception as exc:  # polars raises ComputeError, OSError... for damaged files
        raise InputError(src.name, f"unreadable Parquet file ({str(exc).splitlines()[0]})") from None
    missing = [c for c in schema.EVENT_FILE_REQUIRED if c not in names]
    if missing:
        raise InputError(src.name, f"Parquet file is not a specobs event file (missing columns: {', '.join(missing)})")
    return schema.conform(frame, schema.STEPS)


def read_jsonl(src: Source) -> tuple[pl.LazyFrame, list[Skipped]]:
    """Steps from a JSON Lines event file; malformed lines are skipped and reported."""
    with src.open() as stream:
        data = stream.read()
    try:
        frame = pl.read_ndjson(io.BytesIO(data), schema=schema.STEPS, ignore_errors=False)
        if not frame.select(_contradictory().any()).item():
            return frame.lazy(), []
    except Exception:
        pass  # the line-by-line path below names the bad lines
    records: list[dict] = []
    skipped: list[Skipped] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        line = raw.strip()
        if not line:
            continue
        record, why = _record(line)
        if why:
            skipped.append(Skipped(src.name, number, why))
        else:
            records.append(record)
    frame = pl.DataFrame(records, schema=schema.STEPS) if records else schema.empty(schema.STEPS)
    return frame.lazy(), skipped


def _record(line: bytes) -> tuple[dict, str | None]:
    try:
        record = json.loads(line)
    except ValueError as exc:
        return {}, f"not valid JSON ({exc.msg})"
    if not isinstance(record, dict):
        return {}, "not a JSON object"
    out = {}
    for name in schema.STEPS:
        value = record.get(name)
        if value is None:
            out[name] = None
        elif name in _INT_COLUMNS and not (isinstance(value, int) and not isinstance(value, bool)):
            return {}, f"{name} is not an integer ({value!r})"
        elif name in _FLOAT_COLUMNS and not (isinstance(value, int | float) and not isinstance(value, bool)):
            return {}, f"{name} is not a number ({value!r})"
        elif name in _STRING_COLUMNS and not isinstance(value, str):
            out[name] = str(value)
            continue
        elif name in _LIST_COLUMNS and not (
            isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
        ):
            return {}, f"{name} is not a list of non-negative integers"
        out[name] = value
    why = _per_position_contradiction(out)
    return ({}, why) if why else (out, None)


def _per_position_contradiction(record: dict) -> str | None:
    """Why the per-position counts of one record cannot be true, or None."""
    reached = record.get("num_drafts_per_pos")
    if reached is None:
        return None
    for i in range(1, len(reached)):
        if reached[i] > reached[i - 1]:
            return f"num_drafts_per_pos rises at position {i} ({reached[i - 1]} then {reached[i]})"
    drafts = record.get("num_drafts")
    if drafts is not None and reached and reached[0] > drafts:
        return f"num_drafts_per_pos[0] ({reached[0]}) exceeds num_drafts ({drafts})"
    for i, accepted in enumerate(record.get("num_accepted_tokens_per_pos") or []):
        n = reached[i] if i < len(reached) else 0
        if accepted > n:
            return f"num_accepted_tokens_per_pos[{i}] ({accepted}) exceeds num_drafts_per_pos[{i}] ({n})"
    return None


def _contradictory() -> pl.Expr:
    """Rows the checks of :func:`_record` would reject, as one vectorised expression.

    Positions are compared up to ``MAX_CHECKED_POSITIONS``; a file with longer lists takes the
    line-by-line path.
    """
    reached, accepted = pl.col("num_drafts_per_pos"), pl.col("num_accepted_tokens_per_pos")
    bad = (reached.list.min() < 0) | (accepted.list.min() < 0)
    longest = pl.max_horizontal(reached.list.len(), accepted.list.len().fill_null(0))
    bad = bad | (reached.is_not_null() & (longest > MAX_CHECKED_POSITIONS))
    bad = bad | (reached.list.first() > pl.col("num_drafts"))
    for i in range(MAX_CHECKED_POSITIONS):
        n = reached.list.get(i, null_on_oob=True)
        if i:
            bad = bad | (n > reached.list.get(i - 1, null_on_oob=True))
        bad = bad | (reached.is_not_null() & (accepted.list.get(i, null_on_oob=True) > n.fill_null(0)))
    return bad.fill_null(False)


def steps_to_windows(steps: pl.LazyFrame, source: str, source_format: str) -> pl.LazyFrame:
    """Each step as a one-step window, so steps and log intervals aggregate the same way.

    Per-request rows (``request_id`` set, written with ``SPECOBS_PER_REQUEST``) break a step
    row down by request; counting them too would count every draft twice, so they are left out.
    """
    timed = pl.any_horizontal([pl.col(c).is_not_null() for c in schema.TIMINGS])
    numbered = steps.with_row_index("row", offset=1)
    if "request_id" in steps.collect_schema().names():
        numbered = numbered.filter(pl.col("request_id").is_null())
    windows = numbered.with_columns(
        start_ts=pl.col("ts") - pl.col("step_seconds"),
        end_ts=pl.col("ts"),
        source=pl.lit(source),
        source_line=pl.col("row").cast(pl.Int64),
        source_format=pl.lit(source_format),
        run_id=pl.coalesce(pl.col("run_id"), pl.lit(source)),
        num_timed_steps=pl.when(timed).then(pl.lit(1, pl.Int64)),
        num_drafts_derived=pl.lit(False),
        counters=pl.lit("step"),
    )
    return schema.conform(windows, schema.WINDOWS)
