"""Event-file validation: a record is counted only when every field parses and the invariants hold."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from support.paths import ROOT

from specobs import schema
from specobs.ingest import events
from specobs.ingest.source import open_source


def _row(**over):
    row = {
        "ts": 1.0, "model": "m", "method": "ngram", "engine": 0, "batch_size": 4, "num_spec_tokens": 3,
        "num_drafts": 4, "num_draft_tokens": 12, "num_accepted_tokens": 6,
        "num_accepted_tokens_per_pos": [3, 2, 1], "draft_seconds": 0.001, "verify_seconds": 0.01,
        "step_seconds": 0.012,
    }  # fmt: skip
    row.update(over)
    return row


BAD = [
    (_row(batch_size=-3), "batch_size is negative"),
    (_row(num_drafts=-1), "num_drafts is negative"),
    (_row(num_accepted_tokens=13), "num_accepted_tokens (13) exceeds num_draft_tokens (12)"),
    (_row(num_accepted_tokens_per_pos=[3, 2, 1, 1]), "more than k (3)"),
    (_row(num_accepted_tokens_per_pos=[3, -2, 1]), "num_accepted_tokens_per_pos[1] is negative"),
    (_row(step_seconds=-0.5), "step_seconds is negative"),
    (_row(num_accepted_tokens_per_pos=[2, 3, 1]), "num_accepted_tokens_per_pos rises at position 1 (2 then 3)"),
    (_row(num_accepted_tokens_per_pos=[5, 1, 0]), "num_accepted_tokens_per_pos[0] (5) exceeds num_drafts (4)"),
]


def _write_jsonl(path: Path, rows, raw_lines=()) -> Path:
    lines = [json.dumps(r) for r in rows] + list(raw_lines)
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(("bad", "why"), BAD)
def test_jsonl_invalid_record_is_skipped_with_line(tmp_path, bad, why):
    path = _write_jsonl(tmp_path / "e.jsonl", [_row(), bad, _row()])
    frame, skipped = events.read_jsonl(open_source(str(path)))
    assert frame.collect().height == 2
    assert len(skipped) == 1 and skipped[0].line == 2 and why in skipped[0].why, skipped
    assert str(skipped[0]).startswith(f"{path}:2: ")


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_jsonl_non_finite_numbers_are_skipped(tmp_path, token):
    good = json.dumps(_row())
    bad = good.replace('"step_seconds": 0.012', f'"step_seconds": {token}')
    assert bad != good
    path = tmp_path / "e.jsonl"
    path.write_text(f"{good}\n{bad}\n{good}\n")
    frame, skipped = events.read_jsonl(open_source(str(path)))
    assert frame.collect().height == 2
    assert [s.line for s in skipped] == [2] and "step_seconds is not a finite number" in skipped[0].why


def test_jsonl_reasons_are_a_fixed_set():
    cases = {
        b"{not json": events.INVALID_JSON,
        b"[1, 2]": events.INVALID_JSON,
        json.dumps(_row(num_drafts="4")).encode(): events.WRONG_TYPE,
        json.dumps(_row(batch_size=-1)).encode(): events.NEGATIVE,
        json.dumps(_row(ts=float("nan"))).encode(): events.NON_FINITE,
        json.dumps(_row(num_accepted_tokens=99)).encode(): events.INCONSISTENT,
    }
    for line, reason in cases.items():
        record, got, why = events.parse_line(line)
        assert record is None and got == reason and why, line
    record, reason, why = events.parse_line(json.dumps(_row()).encode())
    assert record is not None and reason is None and why is None


def test_parquet_rows_are_validated_with_row_numbers(tmp_path):
    rows = [_row(), _row(batch_size=-3), _row(), _row(num_accepted_tokens=50), _row(draft_seconds=float("inf"))]
    rows += [_row(num_accepted_tokens_per_pos=[1, 2, 0])]
    path = tmp_path / "e.parquet"
    schema.conform(pl.DataFrame(rows, infer_schema_length=None), schema.STEPS).write_parquet(path)
    src = open_source(str(path))
    frame, skipped = events.read_parquet_checked(src)
    assert frame.collect().height == 2
    assert [s.line for s in skipped] == [2, 4, 5, 6]
    assert "rises at position 1" in skipped[3].why
    assert "batch_size is negative" in skipped[0].why and str(skipped[0]).startswith(f"{path}:2: ")
    assert "exceeds num_draft_tokens" in skipped[1].why
    assert "draft_seconds is not a finite number" in skipped[2].why
    # the plain reader (used by report) leaves them out too: no ZeroDivisionError downstream
    assert events.read_parquet(src).collect().height == 2


def test_negative_batch_size_in_parquet_does_not_reach_analysis(tmp_path):
    from specobs.advice.report_builder import analyze
    from specobs.ingest import load

    path = tmp_path / "e.parquet"
    rows = [_row(ts=float(i), batch_size=-3 if i == 5 else 4) for i in range(20)]
    schema.conform(pl.DataFrame(rows, infer_schema_length=None), schema.STEPS).write_parquet(path)
    report = analyze(load([str(path)]))
    assert report.summary.num_drafts == 19 * 4


def test_the_report_names_a_bad_parquet_row(tmp_path):
    import json as _json

    import polars as _pl
    from support.helpers import report_json

    from specobs import schema

    sweep = ROOT / "examples" / "data" / "vllm-cpu-sweep"
    source = next(sweep.glob("specobs-*ngram*.jsonl"))
    rows = [_json.loads(line) for line in source.read_text().splitlines()[:50]]
    good_drafts = sum(r.get("num_drafts") or 0 for i, r in enumerate(rows) if i != 3 and r.get("request_id") is None)
    rows[3]["batch_size"] = -4
    path = tmp_path / "steps.parquet"
    _pl.DataFrame(rows, schema=schema.STEPS, strict=False).write_parquet(path)
    data = report_json(str(path))
    assert data["skipped_lines"]["examples"] == [{"source": str(path), "line": 4, "why": "batch_size is negative (-4)"}]
    assert data["sources"][0]["skipped"] == 1
    assert data["summary"]["num_drafts"] == good_drafts


def test_an_unfinished_last_line_is_a_notice_and_a_bad_line_before_it_is_still_skipped(tmp_path):
    """A process killed mid-write leaves part of its last line: left out with a notice, not
    counted as a bad record; a bad line elsewhere is still skipped and named."""
    from specobs.ingest import load
    from specobs.ingest.events import WRITE_CUT

    def good(ts: float) -> str:
        return f'{{"ts":{ts},"run_id":"r","num_drafts":2,"num_draft_tokens":6,"num_accepted_tokens":3}}'

    path = tmp_path / "specobs-r-p1-0001.jsonl"
    path.write_text(good(1) + "\n" + '{"ts": "x"' + "\n" + good(2) + "\n" + good(3)[:40])  # no newline at the end
    result = load([str(path)])
    assert result.windows.collect()["num_drafts"].sum() == 4  # the two whole records
    assert [(s.line, s.why) for s in result.skipped] == [(2, "not valid JSON (Expecting ',' delimiter)")]
    assert [(n.line, n.why) for n in result.notices] == [(4, WRITE_CUT)]
    # A whole last record without its newline is a record, not a cut.
    path.write_text(good(1) + "\n" + good(2))
    result = load([str(path)])
    assert result.windows.collect().height == 2 and result.notices == [] and result.skipped == []


@pytest.mark.parametrize(
    "first", ['{"ts": 1.0, "model": "m", "num_dra', '_tokens": 6, "step_seconds": 0.012}', "not json at all"]
)
def test_an_event_file_beginning_with_a_bad_record_is_read_and_the_line_skipped(tmp_path, first):
    """A write cut short, or a rotated file beginning mid-record: the first line is not JSON. The
    file is still an event file (detected from the next lines); the line is skipped, named."""
    from specobs.ingest import load

    path = _write_jsonl(tmp_path / "events.jsonl.2", [_row(ts=1.0), _row(ts=2.0)])
    path.write_text(first + "\n" + path.read_text())
    read = load([str(path)])
    assert read.windows.collect().height == 2
    assert [(s.source, s.line) for s in read.skipped] == [(str(path), 1)]


def test_pretty_printed_json_is_not_taken_for_an_event_file() -> None:
    head = ('{\n  "rows": [\n' + json.dumps(_row()) + "\n  ]\n}\n").encode()
    assert not events.looks_like_jsonl(head)
    assert not events.looks_like_jsonl(b"garbage\nmore garbage\nstill\n" + json.dumps(_row()).encode())
