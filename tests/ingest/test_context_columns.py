"""The context-length columns of event files (``context_length``, ``context_length_max``):
validated like every count (non-negative, finite, the longest an integer), a bad value skips
its record whole and is counted, and files written before the columns read them as null."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from specobs import schema
from specobs.ingest import events, load
from specobs.ingest.source import open_source


def _row(i: int, **over) -> dict:
    row = {
        "ts": 1764472000.0 + i, "run_id": "r", "model": "m", "method": "ngram", "engine": 0, "batch_size": 4,
        "num_spec_tokens": 3, "num_drafts": 4, "num_draft_tokens": 12, "num_accepted_tokens": 6,
        "num_accepted_tokens_per_pos": [3, 2, 1], "step_seconds": 0.012,
        "context_length": 100.5 + i, "context_length_max": 120 + i,
    }  # fmt: skip
    row.update(over)
    return row


def _jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


#: A bad context value, the reason it is skipped for and what the reason says.
BAD = {
    "negative mean": ('"context_length": -3.5', events.NEGATIVE, "context_length is negative (-3.5)"),
    "negative longest": ('"context_length_max": -7', events.NEGATIVE, "context_length_max is negative (-7)"),
    "NaN mean": ('"context_length": NaN', events.NON_FINITE, "context_length is not a finite number"),
    "infinite mean": ('"context_length": Infinity', events.NON_FINITE, "context_length is not a finite number"),
    "fractional longest": ('"context_length_max": 512.5', events.WRONG_TYPE, "context_length_max is not an integer"),
    "longest as text": ('"context_length_max": "512"', events.WRONG_TYPE, "context_length_max is not an integer"),
    "mean as text": ('"context_length": "long"', events.WRONG_TYPE, "context_length is not a number"),
}


def _bad_line(i: int, case: str) -> str:
    value = BAD[case][0]
    name = value.split(":")[0]
    row = _row(i)
    line = json.dumps(row)
    good = f"{name}: {json.dumps(row[name.strip(chr(34))])}"
    assert good in line
    return line.replace(good, value)


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_context_value_skips_its_record_and_keeps_the_good_ones_around_it(tmp_path, case):
    path = _jsonl(tmp_path / "specobs-r-p1-0001.jsonl", [json.dumps(_row(0)), _bad_line(1, case), json.dumps(_row(2))])
    frame, skipped = events.read_jsonl(open_source(str(path)))
    kept = frame.collect()
    assert kept["context_length"].to_list() == [100.5, 102.5]
    assert kept["context_length_max"].to_list() == [120, 122]
    assert [s.line for s in skipped] == [2] and BAD[case][2] in skipped[0].why, skipped
    record, reason, why = events.parse_line(_bad_line(1, case).encode())
    assert record is None and reason == BAD[case][1] and BAD[case][2] in (why or "")
    # Through load (what the report reads): the bad record is counted, the good ones kept.
    result = load([str(path)])
    assert [s.line for s in result.skipped] == [2] and result.sources[0].skipped == 1
    windows = result.windows.collect()
    assert windows["context_length"].to_list() == [100.5, 102.5] and windows["num_drafts"].sum() == 8


def test_parquet_rows_with_bad_context_values_are_skipped_with_their_row_numbers(tmp_path):
    rows = [_row(0), _row(1, context_length=-1.0), _row(2), _row(3, context_length=float("inf"))]
    rows += [_row(4, context_length_max=-2), _row(5)]
    path = tmp_path / "e.parquet"
    schema.conform(pl.DataFrame(rows, infer_schema_length=None), schema.STEPS).write_parquet(path)
    src = open_source(str(path))
    reasons: list[str] = []
    frame, skipped = events.read_parquet_checked(src, reasons)
    kept = frame.collect()
    assert kept["context_length_max"].to_list() == [120, 122, 125]
    assert [s.line for s in skipped] == [2, 4, 5]
    assert reasons == [events.NEGATIVE, events.NON_FINITE, events.NEGATIVE]
    assert "context_length is negative (-1.0)" in skipped[0].why
    assert "context_length is not a finite number" in skipped[1].why
    assert "context_length_max is negative (-2)" in skipped[2].why
    assert events.read_parquet(src).collect().height == 3  # the unchecked reader leaves them out too


def test_zero_is_a_valid_context_and_stays_zero(tmp_path):
    path = _jsonl(tmp_path / "e.jsonl", [json.dumps(_row(0, context_length=0.0, context_length_max=0))])
    frame, skipped = events.read_jsonl(open_source(str(path)))
    assert skipped == [] and frame.collect().select("context_length", "context_length_max").row(0) == (0.0, 0)


def _old(i: int) -> dict:
    row = _row(i)
    del row["context_length"], row["context_length_max"]
    return row


@pytest.mark.parametrize("with_bad_line", [False, True])
def test_an_event_file_written_before_the_columns_reads_them_as_null_never_zero(tmp_path, with_bad_line):
    # A bad record elsewhere sends the reader down its line-by-line path: null there too.
    lines = [json.dumps(_old(0)), json.dumps(_old(1))] + (["{not json"] if with_bad_line else [])
    path = _jsonl(tmp_path / "specobs-r-p1-0001.jsonl", lines)
    frame, skipped = events.read_jsonl(open_source(str(path)))
    steps = frame.collect()
    assert len(skipped) == int(with_bad_line)
    assert steps.height == 2 and steps["context_length"].null_count() == 2
    assert steps["context_length_max"].null_count() == 2
    assert steps.schema["context_length"] == pl.Float64 and steps.schema["context_length_max"] == pl.Int64
    windows = load([str(path)]).windows.collect()
    assert windows["context_length"].to_list() == [None, None]
    assert windows["context_length_max"].to_list() == [None, None]


def test_a_parquet_file_written_before_the_columns_reads_them_as_null(tmp_path):
    path = tmp_path / "old.parquet"
    old = {n: t for n, t in schema.STEPS.items() if n not in schema.CONTEXT}
    pl.DataFrame([_old(0), _old(1)], schema=old).write_parquet(path)
    frame, skipped = events.read_parquet_checked(open_source(str(path)))
    steps = frame.collect()
    assert skipped == [] and steps.height == 2
    assert steps["context_length"].to_list() == [None, None]
    assert steps["context_length_max"].to_list() == [None, None]
    assert load([str(path)]).windows.collect()["context_length_max"].null_count() == 2
