"""specobs event files: the ``steps`` columns as JSON Lines or Parquet.

One JSON object per line (or one Parquet row) per engine step, with the columns of
:data:`specobs.schema.STEPS`; missing columns are null. Example line::

    {"ts": 1764472397.5, "run_id": "r1", "engine": 0, "model": "m", "method": "eagle3",
     "platform": "rocm", "batch_size": 8, "num_spec_tokens": 3, "num_drafts": 8,
     "num_draft_tokens": 24, "num_accepted_tokens": 17, "num_accepted_tokens_per_pos": [7, 6, 4],
     "draft_seconds": 0.0021, "verify_seconds": 0.0135, "step_seconds": 0.0172}

``num_drafts_per_pos`` (n_i, drafts that reached each position) and
``num_drafts_accepted_before_pos`` (m_i, drafts that reached position i with every earlier
position accepted) are optional: files written before them read as null there. A JSON Lines
record whose per-position counts contradict each other is skipped whole and reported: a
position accepted more often than reached or tried (a_i > n_i, a_i > m_i), tried more often
than reached (m_i > n_i) or than the position before was accepted (m_i > a_{i-1}), reached
or tried by more drafts than the step made, m_0 other than n_0, or n or m rising with i.

Every record, JSON Lines or Parquet, is counted only when every field parses and the
invariants hold: counts, timings and context lengths are non-negative (``context_length_max``
an integer, as every count), numbers finite (Python's json reads
NaN and Infinity), ``num_accepted_tokens`` at most ``num_draft_tokens``, and
``num_accepted_tokens_per_pos`` no longer than k (``num_spec_tokens``) unless
``num_drafts_per_pos`` says drafts reached those positions. Otherwise the record is skipped
whole, as ``FILE:LINE`` (JSON Lines) or ``FILE:ROW`` (Parquet) with the reason; each reason
falls in one of :data:`REASONS` (the exporter counts skipped records by it).

Parquet is read lazily, so a report over 10M steps only touches the columns it needs.
"""

from __future__ import annotations

import io
import json
from typing import Any

import polars as pl

from specobs import schema, validity
from specobs.errors import InputError, Notice, Skipped
from specobs.ingest.registry import Progress, Read, Reader
from specobs.ingest.source import Source, read_whole
from specobs.records import SourceReport
from specobs.schema import categorical_labels

FORMAT_JSONL = "events-jsonl"
FORMAT_PARQUET = "events-parquet"
PARQUET_MAGIC = b"PAR1"
# The row-validity rules and their reasons live in specobs.validity; named here too.
INVALID_JSON, WRONG_TYPE, NEGATIVE = validity.INVALID_JSON, validity.WRONG_TYPE, validity.NEGATIVE
NON_FINITE, INCONSISTENT, REASONS = validity.NON_FINITE, validity.INCONSISTENT, validity.REASONS
MAX_CHECKED_POSITIONS = validity.MAX_CHECKED_POSITIONS
ListShape = validity.ListShape
check_record = validity.check_record
_invalid, _list_shape = validity.invalid, validity.list_shape
_INT_COLUMNS = validity.INT_COLUMNS
_FLOAT_COLUMNS = validity.FLOAT_COLUMNS
_STRING_COLUMNS = validity.STRING_COLUMNS
_LIST_COLUMNS = validity.LIST_COLUMNS


def looks_like_jsonl(head: bytes) -> bool:
    """True when the first line of ``head`` that is JSON is an object with the steps columns.

    Up to :data:`BAD_FIRST_LINES` lines that are not JSON before it are passed over: a bad first
    record (a write cut short, a rotated file beginning mid-record) is skipped by the reader, not
    a reason to reject the file. A document's opening bracket alone (pretty-printed JSON) is not
    such a line."""
    passed = 0
    for raw in head.split(b"\n"):
        line = raw.strip()
        if not line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            passed += 1
            if line in (b"{", b"[") or passed > BAD_FIRST_LINES:
                return False
            continue
        return isinstance(record, dict) and all(k in record for k in schema.EVENT_FILE_REQUIRED)
    return False


#: Lines that are not JSON an event file may begin with (bad records the reader skips).
BAD_FIRST_LINES = 2


def read_parquet(src: Source) -> pl.LazyFrame:
    """Steps from a Parquet event file, lazily, conformed to the steps schema; invalid rows
    (see :func:`read_parquet_checked`) are left out."""
    frame = _scan_parquet(src)
    return frame.filter(~_invalid(_list_shape(frame)))


#: A row's number in its file, carried by the rows of a slice (see :func:`steps_to_windows`).
FILE_ROW = "__file_row"


def read_parquet_checked(
    src: Source, reasons: list[str] | None = None, rows: tuple[int, int] | None = None
) -> tuple[pl.LazyFrame, list[Skipped]]:
    """Steps from a Parquet event file and the rows skipped as ``FILE:ROW: why``.

    A row is skipped whole when a value breaks the invariants of :func:`check_record`
    (negative counts, non-finite numbers, accepted above drafted, per-position counts that
    contradict each other or are longer than k). ``reasons``, when given, receives the reason
    (one of :data:`REASONS`) of each skipped row, in order. ``rows`` (offset, length) reads that
    slice of the file alone (the row groups it spans), its skipped rows numbered in the file.
    """
    frame = _scan_parquet(src)
    offset = 0
    if rows is not None:  # numbered as rows of the file, so that a slice's rows keep their numbers
        offset = rows[0]
        frame = frame.slice(*rows).with_row_index(FILE_ROW, offset=offset + 1)  # sliced first: read only its row groups
    try:
        frame = categorical_labels(frame).collect().lazy()
        shape = _list_shape(frame)
        bad = frame.with_row_index("__row", offset=offset + 1).filter(_invalid(shape)).collect()
    except Exception as exc:
        raise InputError(src.name, f"unreadable Parquet file ({str(exc).splitlines()[0]})") from None
    if bad.is_empty():
        return frame, []
    skipped = []
    for row in bad.iter_rows(named=True):
        number = row.pop("__row")
        row.pop(FILE_ROW, None)
        found = check_record(row) or (INCONSISTENT, f"per-position lists longer than {MAX_CHECKED_POSITIONS} positions")
        skipped.append(Skipped(src.name, number, found[1]))
        if reasons is not None:
            reasons.append(found[0])
    return frame.filter(~_invalid(shape)), skipped


#: No per-position list: the checks :func:`_invalid` makes without reading a list.
WITHOUT_LISTS: ListShape = (0, frozenset())


def scan_parquet_first_pass(src: Source, rows: tuple[int, int] | None = None) -> pl.LazyFrame:
    """The windows of a Parquet event file (or of its ``rows``: offset, length) less the rows
    that fail a check made without its per-position lists, as a lazy scan (a query reads only
    its columns), numbered as rows of the file: the rows :func:`read_parquet_checked` keeps and
    perhaps a few more, for a first pass over a file too large to hold with others. What it
    finds must be confirmed on the checked rows."""
    frame = _scan_parquet(src)
    offset, frame = (0, frame) if rows is None else (rows[0], frame.slice(*rows))
    frame = frame.with_row_index(FILE_ROW, offset=offset + 1)
    return steps_to_windows(frame.filter(~_invalid(WITHOUT_LISTS)), src.name, FORMAT_PARQUET)


def _scan_parquet(src: Source) -> pl.LazyFrame:
    try:
        if src.path is not None and not src.compressed:
            frame = pl.scan_parquet(src.path)
            names = frame.collect_schema().names()
        else:
            data, cut = read_whole(src)
            if cut is not None:  # a Parquet file is readable only whole
                raise InputError(src.name, cut.why)
            frame = pl.read_parquet(io.BytesIO(data)).lazy()
            names = frame.collect_schema().names()
    except Exception as exc:  # polars raises ComputeError, OSError... for damaged files
        raise InputError(src.name, f"unreadable Parquet file ({str(exc).splitlines()[0]})") from None
    missing = [c for c in schema.EVENT_FILE_REQUIRED if c not in names]
    if missing:
        raise InputError(src.name, f"Parquet file is not a specobs event file (missing columns: {', '.join(missing)})")
    return schema.conform(frame, schema.STEPS)


#: Why an unfinished last line is left out (a notice, not a skipped record).
WRITE_CUT = (
    "the last line ends without a newline and is not a whole record: a write cut short (the process "
    "stopped mid-write); left out"
)


def read_jsonl(src: Source) -> tuple[pl.LazyFrame, list[Skipped]]:
    """Steps from a JSON Lines event file; malformed lines are skipped and reported.

    The capture ends every write with a newline, but a process killed mid-write (SIGKILL, a
    crash) can leave part of its last line on disk: a last line without a newline that does not
    parse is that unfinished write, left out with a notice, not a bad record."""
    data, cut = read_whole(src)
    said: list[Skipped] = [cut] if cut is not None else []
    if data and not data.endswith(b"\n"):
        tail = data.rfind(b"\n") + 1
        if _record(data[tail:].strip())[1]:
            said.append(Notice(src.name, data.count(b"\n", 0, tail) + 1, WRITE_CUT))
            data = data[:tail]
    try:
        frame = pl.read_ndjson(io.BytesIO(data), schema=schema.STEPS, ignore_errors=False)
        if not frame.select(_invalid(_list_shape(frame)).any()).item():
            return frame.lazy(), said
    except Exception:
        pass  # the line-by-line path below names the bad lines
    records: list[dict[str, Any]] = []
    skipped: list[Skipped] = said
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


def _record(line: bytes) -> tuple[dict[str, Any], str | None]:
    record, _, why = parse_line(line)
    return (record, None) if record is not None else ({}, why)


def parse_line(line: bytes) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """One JSON Lines record: ``(steps row, None, None)`` or ``(None, reason, why)``.

    ``reason`` is one of :data:`REASONS`; ``why`` says it for a person.
    """
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        return None, INVALID_JSON, f"not valid JSON ({exc.msg})"
    except UnicodeDecodeError as exc:  # json.loads decodes bytes first; it has no .msg
        return None, INVALID_JSON, f"not valid UTF-8 ({exc.reason})"
    except RecursionError:
        return None, INVALID_JSON, "not valid JSON (nested too deeply)"
    if not isinstance(record, dict):
        return None, INVALID_JSON, "not a JSON object"
    out: dict[str, Any] = {}
    for name in schema.STEPS:
        value = record.get(name)
        if value is None:
            out[name] = None
        elif name in _INT_COLUMNS and not (isinstance(value, int) and not isinstance(value, bool)):
            return None, WRONG_TYPE, f"{name} is not an integer ({_short(value)})"
        elif name in _FLOAT_COLUMNS and not (isinstance(value, int | float) and not isinstance(value, bool)):
            return None, WRONG_TYPE, f"{name} is not a number ({_short(value)})"
        elif name in _STRING_COLUMNS and not isinstance(value, str):
            out[name] = str(value)
            continue
        elif name in _LIST_COLUMNS and not (
            isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        ):
            return None, WRONG_TYPE, f"{name} is not a list of integers"
        out[name] = value
    found = check_record(out)
    return (None, *found) if found else (out, None, None)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def steps_to_windows(steps: pl.LazyFrame, source: str, source_format: str) -> pl.LazyFrame:
    """Each step as a one-step window, so steps and log intervals aggregate the same way.

    Per-request rows (``request_id`` set, written with ``SPECOBS_PER_REQUEST``) break a step
    row down by request; counting them too would count every draft twice, so they are left out.
    Rows are numbered in order (``source_line``), or by their column ``FILE_ROW`` where they
    carry one (a slice of a file, numbered as rows of the file).
    """
    timed = pl.any_horizontal([pl.col(c).is_not_null() for c in schema.TIMINGS])
    if FILE_ROW in steps.collect_schema().names():
        numbered = steps.rename({FILE_ROW: "row"})
    else:
        numbered = steps.with_row_index("row", offset=1)
    if "request_id" in steps.collect_schema().names():
        numbered = numbered.filter(pl.col("request_id").is_null())
    windows = numbered.with_columns(
        start_ts=pl.col("ts") - pl.col("step_seconds"),
        end_ts=pl.col("ts"),
        # Categoricals: the same text on every row costs 4 bytes a row as a code (38 as text).
        source=pl.lit(source).cast(pl.Categorical),
        source_line=pl.col("row").cast(pl.Int64),
        source_format=pl.lit(source_format).cast(pl.Categorical),
        run_id=pl.coalesce(pl.col("run_id"), pl.lit(source)),
        num_timed_steps=pl.when(timed).then(pl.lit(1, pl.Int64)),
        num_drafts_derived=pl.lit(False),
        counters=pl.lit("step").cast(pl.Categorical),
    )
    return schema.conform(windows, schema.WINDOWS)


def read_parquet_slice(src: Source, offset: int, rows: int) -> Read:
    """The windows of rows ``offset`` to ``offset + rows`` of a Parquet event file, checked as
    :func:`read_parquet_checked` checks the whole (a part of a file too large to hold at once)."""
    steps, skipped = read_parquet_checked(src, rows=(offset, rows))
    windows = steps_to_windows(steps, src.name, FORMAT_PARQUET)
    return Read(SourceReport(src.name, FORMAT_PARQUET, None, -1, len(skipped)), skipped, windows=windows)


def _read_events(src: Source, fmt: str, progress: Progress = None) -> Read:
    steps, skipped = read_parquet_checked(src) if fmt == FORMAT_PARQUET else read_jsonl(src)
    windows = steps_to_windows(steps, src.name, fmt)
    return Read(SourceReport(src.name, fmt, None, -1, len(skipped)), skipped, windows=windows)


READERS = (
    Reader((FORMAT_PARQUET,), lambda head: FORMAT_PARQUET if head.startswith(PARQUET_MAGIC) else None, _read_events,
           detect_order=0, list_order=3, family="events", binary=True),
    Reader((FORMAT_JSONL,), lambda head: FORMAT_JSONL if looks_like_jsonl(head) else None, _read_events,
           detect_order=1, list_order=3, family="events"),
)  # fmt: skip
