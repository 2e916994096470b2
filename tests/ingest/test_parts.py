"""A report read in parts is the report of the whole.

Parquet event files holding more rows together than ``part_rows`` are read a part at a time
(``ingest.load(..., part_rows=N)``, ``Ingested.parts``), each part reduced to sums
(``reporting.ReportSums``) and let go. These tests cut the bundled sweep capture (real vLLM
steps of three engines) into Parquet parts and compare the report read in parts with the
report read whole, field by field: with a log read whole between the parts, windows that one
part repeats from another, a bad row, and few enough windows that the time buckets go away
once the repeats are dropped.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from support.helpers import assert_same_json
from support.paths import ROOT

from specobs.advice.recommend import recommend
from specobs.advice.report_builder import ReportSums, analyze, recommendation_input, whole_span
from specobs.analysis import acceptance
from specobs.analysis.timeseries import MAX_POINTS
from specobs.errors import InputError
from specobs.ingest import events, load, read_source
from specobs.ingest.source import open_source

DATA = ROOT / "examples" / "data"


def sweep_steps() -> pl.DataFrame:
    """The bundled sweep capture's step rows (three engines: plain, ngram, draft model), in time order."""
    frames = [
        events.read_jsonl(open_source(str(p)))[0].collect() for p in sorted((DATA / "vllm-cpu-sweep").glob("specobs-*"))
    ]
    return pl.concat(frames).sort("ts")


def reports(paths: list[str], part_rows: int) -> tuple[dict, dict, Any]:
    whole = analyze(load(paths)).to_dict()
    ingested = load(paths, part_rows=part_rows)
    return whole, analyze(ingested).to_dict(), ingested


def test_parts_with_a_log_between_repeats_and_a_bad_row_give_the_whole_report(tmp_path: Path) -> None:
    steps = sweep_steps()
    n = steps.height
    cuts = [0, n // 4, n // 2, 3 * n // 4, n]
    folder = tmp_path / "fleet"
    folder.mkdir()
    for i, (lo, hi) in enumerate(itertools.pairwise(cuts)):
        part = steps.slice(lo, hi - lo)
        if i == 1:  # a bad row in the middle of a part: skipped whole, its neighbours kept
            bad = part.slice(10, 1).with_columns(num_drafts=pl.lit(-3, pl.Int64))
            part = pl.concat([part.slice(0, 10), bad, part.slice(10)])
        part.write_parquet(folder / f"part-{i}.parquet")
    # Another copy of rows of parts 0 and 2 (an overlapping re-export): counted once.
    pl.concat([steps.slice(0, 300), steps.slice(cuts[2], 200)]).write_parquet(folder / "part-9-copy.parquet")
    log = str(DATA / "vllm-cpu-draft-k3.log")
    paths = [str(folder / "part-0.parquet"), log, str(folder)]
    whole, parts, ingested = reports(paths, part_rows=n // 3)

    assert len(ingested.deferred) >= 4  # files, the log read whole, more files: several parts
    assert [p.windows is not None for p in ingested.deferred][:2] == [False, True]
    assert_same_json(whole, parts)
    assert_same_json(parts, analyze(ingested).to_dict())  # read again: nothing counted twice
    # What the parts had to get right, checked against the rows themselves:
    copy = next(s for s in parts["sources"] if s["source"].endswith("part-9-copy.parquet"))
    assert copy["windows"] == 0
    assert sum(s["windows"] for s in parts["sources"] if s["source"].endswith(".parquet")) == n
    (skipped,) = parts["skipped_lines"]["examples"]
    assert skipped["source"].endswith("part-1.parquet") and skipped["line"] == 11
    repeated = [x for x in parts["notices"] if x["source"].endswith("part-9-copy.parquet")]
    said = [(x["why"].split(" record")[0], x["why"].split("repeat ")[1].split(" from")[0]) for x in repeated]
    assert said == [("300", str(folder / "part-0.parquet")), ("200", str(folder / "part-2.parquet"))]


def test_parts_without_time_buckets_once_repeats_are_dropped(tmp_path: Path) -> None:
    """Before the repeats go the windows are more than the series' points, after they are not:
    the whole input's series is its windows unbucketed, and so is the parts'."""
    steps = sweep_steps().filter(pl.col("num_drafts") > 0)
    kept = steps.slice(0, MAX_POINTS - 100)
    half = kept.height // 2
    kept.slice(0, half + 600).write_parquet(tmp_path / "a.parquet")
    kept.slice(half - 600).write_parquet(tmp_path / "b.parquet")  # 1,200 windows in both
    whole, parts, ingested = reports([str(tmp_path)], part_rows=half)
    assert len(ingested.deferred) == 4  # each file larger than a part: in two slices
    assert_same_json(whole, parts)
    assert sum(s["windows"] for s in parts["sources"]) == kept.height


def test_recommend_with_intervals_reads_the_parts_cells_as_the_whole_input(tmp_path: Path) -> None:
    """The bootstrap draws cells: the parts' cells, in order, are the whole's, so the intervals agree."""
    steps = sweep_steps()
    for i, part in enumerate(steps.partition_by("run_id", maintain_order=True)):
        for j in range(2):  # each engine's capture in two files
            half = part.height // 2
            part.slice(j * half, half if j == 0 else None).write_parquet(tmp_path / f"engine-{i}-{j}.parquet")
    paths = [str(tmp_path)]
    whole = recommend(load(paths).windows, bootstrap=30).to_dict()
    ingested = load(paths, part_rows=steps.height // 3)  # no file larger than a part: none in slices
    assert len(ingested.deferred) >= 3
    parts = recommend(recommendation_input(ingested), bootstrap=30).to_dict()
    assert_same_json(whole, parts)
    drawn = [p["interval"] for p in whole["predicted"] if p["interval"][0] < p["interval"][1]]
    assert len(drawn) > 10  # the intervals were drawn, not points


def test_windows_added_after_loading_in_parts_are_a_part_of_their_own(tmp_path: Path) -> None:
    """A Prometheus range is added after the files are read (``add_prometheus``): in parts too."""
    steps = sweep_steps()
    half = steps.height // 2
    steps.slice(0, half).write_parquet(tmp_path / "a.parquet")
    steps.slice(half).write_parquet(tmp_path / "b.parquet")
    log = open_source(str(DATA / "vllm-cpu-ngram-k3.log"))
    read = read_source(log)
    frame, report, skipped = read.windows, read.report, read.skipped
    assert frame is not None
    whole, parts = load([str(tmp_path)]), load([str(tmp_path)], part_rows=half)
    alone = analyze(load([str(tmp_path)])).to_dict()["summary"]["num_drafts"]
    for ingested in (whole, parts):
        ingested.add(frame, report, skipped)
    a, b = analyze(whole).to_dict(), analyze(parts).to_dict()
    assert_same_json(a, b)
    assert b["summary"]["num_drafts"] == alone + frame.select(pl.col("num_drafts").sum()).collect().item()


def test_a_bad_row_only_the_whole_check_finds_moves_no_time_bucket(tmp_path: Path) -> None:
    """The first pass checks rows without their per-position lists; a row whose lists contradict
    each other, an hour before everything else, widens its span. The parts' own spans say so,
    and the time buckets are summed once more on the span of the rows counted."""
    steps = sweep_steps()
    drafting = steps.filter((pl.col("num_drafts") > 0) & (pl.col("num_accepted_tokens_per_pos").list.len() >= 2))
    known = steps.filter((pl.col("num_drafts") > 0) & pl.col("num_accepted_tokens").is_not_null())
    known_first = known["ts"].min()  # the first window the series counts
    row = drafting.slice(0, 1)
    rising = [0, 1]  # a later position accepted more often than the first
    bad = row.with_columns(
        ts=pl.lit(known_first - 3600.0),
        num_accepted_tokens_per_pos=pl.Series([rising], dtype=steps.schema["num_accepted_tokens_per_pos"]),
        num_accepted_tokens=pl.lit(sum(rising), dtype=pl.Int64),
        num_draft_tokens=pl.lit(max(sum(rising), row["num_draft_tokens"].item()), dtype=pl.Int64),
    )
    half = steps.height // 2
    pl.concat([steps.slice(0, half), bad]).write_parquet(tmp_path / "a.parquet")
    steps.slice(half).write_parquet(tmp_path / "b.parquet")
    paths = [str(tmp_path)]
    ingested = load(paths, part_rows=half)
    keys = acceptance.group_columns(acceptance.DEFAULT_BY)
    first = whole_span(ingested)
    assert first is not None and first.first == known_first - 3600.0  # the first pass saw it
    parts = [ReportSums.of(part, ingested, keys, span=first) for part in ingested.parts()]
    merged = ReportSums.merge(parts, first)
    assert merged.span.first == known_first and merged.over_time is None  # ... and the parts did not
    whole, in_parts, ingested = reports(paths, part_rows=half)
    assert in_parts["skipped_lines"]["total"] == 1
    assert_same_json(whole, in_parts)


def _damaged(path: Path, like: Path) -> None:
    """``like`` with bytes of its ``model`` column overwritten: its footer and numeric columns
    read (the first pass passes), the whole read fails."""
    path.write_bytes(like.read_bytes())
    _damaged_row_group(path, "model", 0)


def test_a_file_damaged_past_what_the_first_pass_reads(tmp_path: Path) -> None:
    """Met in a folder it is skipped, named, as reading the input whole skips it; named on
    the command line it stops the report with one error naming it."""
    steps = sweep_steps()
    half = steps.height // 2
    folder = tmp_path / "fleet"
    folder.mkdir()
    steps.slice(0, half).write_parquet(folder / "a.parquet")
    steps.slice(half).write_parquet(folder / "b.parquet")
    _damaged(folder / "c.parquet", folder / "a.parquet")
    whole, parts, ingested = reports([str(folder)], part_rows=half)
    assert len(ingested.deferred) == 3
    assert_same_json(whole, parts)
    assert [s["source"] for s in parts["sources"]] == [str(folder / "a.parquet"), str(folder / "b.parquet")]
    (skipped,) = parts["skipped_lines"]["examples"]
    assert skipped["source"] == str(folder / "c.parquet") and "unreadable Parquet file" in skipped["why"]

    named = [str(folder / "a.parquet"), str(folder / "c.parquet")]
    with pytest.raises(InputError, match=r"c\.parquet: unreadable Parquet file"):
        analyze(load(named, part_rows=half))
    listed = load(named, part_rows=half, keep_going=True)
    report = analyze(listed)
    assert [f.source for f in listed.failed] == [str(folder / "c.parquet")]
    assert report.summary.num_drafts == steps.slice(0, half)["num_drafts"].sum()


def test_one_file_larger_than_a_part_is_read_in_slices_and_gives_the_whole_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One Parquet file of the three engines' steps, interleaved in time, larger than a part:
    read in slices, each trimmed as the whole file is (an engine's first steps and a
    configuration's median span slices: judged first over the whole file, a slice at a time) and
    with each engine's batch carried from slice to slice (a step drains below the batch its
    stretch reached in the slice before). Slow steps are added mid-file so that outliers are
    found across slices; a bad row is skipped and named by its row in the file."""
    import specobs.ingest as ingest

    steps = sweep_steps()
    slow = (pl.int_range(pl.len()) % 997 == 500) & pl.col("step_seconds").is_not_null()
    steps = steps.with_columns(step_seconds=pl.when(slow).then(pl.col("step_seconds") * 20).otherwise("step_seconds"))
    bad_at = steps.height // 2
    bad = steps.slice(bad_at, 1).with_columns(num_drafts=pl.lit(-3, pl.Int64))
    steps = pl.concat([steps.slice(0, bad_at), bad, steps.slice(bad_at)])
    path = tmp_path / "engines.parquet"
    steps.write_parquet(path, row_group_size=500)
    monkeypatch.setattr(ingest, "FIRST_PASS_ROWS", 800)

    whole, parts, ingested = reports([str(path)], part_rows=steps.height // 4)

    assert len(ingested.deferred) == 5 and all(p.files[0].sliced for p in ingested.deferred)
    assert_same_json(whole, parts)
    assert analyze(ingested).unsteady.get("outlier", 0) >= 5  # the slow steps were judged, across slices
    assert parts["sources"][0]["windows"] == steps.height - 1
    (skipped,) = parts["skipped_lines"]["examples"]
    assert skipped["line"] == bad_at + 1
    # The point-estimate recommendation reads draining steps: the same as the whole file's.
    whole_rec = recommend(load([str(path)]).windows, bootstrap=0).to_dict()
    assert_same_json(whole_rec, recommend(recommendation_input(ingested), bootstrap=0).to_dict())


def _damaged_row_group(path: Path, column: str, row_group: int) -> None:
    """Bytes of ``column`` overwritten in one row group of ``path``."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata
    paths = [meta.schema.column(i).path.split(".")[0] for i in range(meta.num_columns)]  # a list's leaf too
    chunk = meta.row_group(row_group).column(paths.index(column))
    with path.open("r+b") as f:
        f.seek((chunk.dictionary_page_offset or chunk.data_page_offset) + 20)
        f.write(b"\xff" * 64)


def test_a_later_slice_that_cannot_be_read_skips_its_rows_and_keeps_the_slices_before(tmp_path: Path) -> None:
    """Damage no first pass reads (the per-position lists) in the last row group of a file read
    in slices: met in a folder, that slice's rows are skipped and named, the readable slices
    counted; named on the command line, the report stops with one error naming the file."""
    steps = sweep_steps()
    folder = tmp_path / "fleet"
    folder.mkdir()
    path = folder / "engines.parquet"
    steps.write_parquet(path, row_group_size=1_000)
    _damaged_row_group(path, "num_accepted_tokens_per_pos", steps.height // 1_000)
    part_rows = steps.height // 3 + 1
    ingested = load([str(folder)], part_rows=part_rows)
    report = analyze(ingested)
    slices = [p.files[0] for p in ingested.deferred]
    assert len(slices) == 3 and all(s.sliced for s in slices)
    last = slices[-1]
    (skipped,) = report.skipped
    assert (skipped.source, skipped.line) == (str(path), last.offset + 1)
    assert f"rows {last.offset + 1}–{steps.height}" in skipped.why and "unreadable Parquet file" in skipped.why
    read = steps.slice(0, last.offset)
    assert report.summary.num_drafts == read.get_column("num_drafts").sum()
    (source,) = report.sources
    assert (source.windows, source.skipped) == (last.offset, last.rows)

    with pytest.raises(InputError, match=r"engines\.parquet: unreadable Parquet file"):
        analyze(load([str(path)], part_rows=part_rows))


def test_a_file_in_slices_its_first_pass_finds_damaged_is_unreadable_whole(tmp_path: Path) -> None:
    """Damage the pass that judges steady state reads (a label) in a later row group: the file is
    unreadable as a whole, as reading it whole finds it, before any of its rows is counted."""
    steps = sweep_steps()
    folder = tmp_path / "fleet"
    folder.mkdir()
    steps.slice(0, 500).write_parquet(folder / "a.parquet")
    path = folder / "engines.parquet"
    steps.write_parquet(path, row_group_size=1_000)
    _damaged_row_group(path, "model", steps.height // 1_000)
    whole, parts, ingested = reports([str(folder)], part_rows=steps.height // 3 + 1)
    assert any(p.files and p.files[0].sliced for p in ingested.deferred)
    assert_same_json(whole, parts)
    assert [s["source"] for s in parts["sources"]] == [str(folder / "a.parquet")]
    (skipped,) = parts["skipped_lines"]["examples"]
    assert skipped["source"] == str(path) and "unreadable Parquet file" in skipped["why"]
    assert_same_json(parts, analyze(ingested).to_dict())  # read again: skipped once
