"""Sinks for captured rows: event files (JSON Lines, Parquet) and memory (tests).

Event files hold ``steps`` rows (see ``docs/schema.md``); ``specobs report DIR`` reads them.
Side rows go to their own JSON Lines files beside them: the online tuner's decisions
(``-tuner-``), run metadata (``-meta-``) and finished requests (``-requests-``, ``requests`` rows).

- :class:`JsonlSink` appends each flush with one ``os.write`` of whole lines to a file opened
  with ``O_APPEND``: a SIGKILL loses at most the rows not yet flushed (≤ 1 s) and never leaves
  a half-written record. Files rotate by size and age.
- :class:`ParquetSink` buffers rows and writes a Parquet part every ``part_seconds`` (and at
  exit) to a temporary name, then renames it into place: a part either exists whole or not
  at all; a SIGKILL loses at most the rows since the last part.

One file set per process: names carry the run id and the pid.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specobs import schema

STEP_COLUMNS = tuple(schema.STEPS)
#: The key that marks a row of the online tuner's decision log (written to its own files).
DECISION_KEY = "tuner_action"
#: Rows that are not steps, by the key that marks them, and the tag of the files they go to:
#: ``specobs-<run>-<tag>-p<pid>-<seq>.jsonl`` beside the event files.
SIDE_FILES = {DECISION_KEY: "tuner", schema.METADATA_KEY: "meta", schema.REQUEST_KEY: "requests"}
#: Side rows written with exactly these columns (the others as written).
SIDE_COLUMNS = {schema.REQUEST_KEY: tuple(schema.REQUESTS)}


def _clean(row: dict[str, Any], columns: Sequence[str] = STEP_COLUMNS) -> dict[str, Any]:
    return {name: row.get(name) for name in columns}


def side_kind(row: dict[str, Any]) -> str | None:
    """The marker key of a row that is not a steps row (a decision, run metadata, a finished
    request), or None."""
    for key in SIDE_FILES:
        if key in row:
            return key
    return None


def is_step(row: dict[str, Any]) -> bool:
    """A row of the engine's steps: not a per-request share of a step, not a side record.
    Exporters count these only."""
    return row.get("request_id") is None and side_kind(row) is None


def split_side_rows(rows: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """(steps rows, side rows by marker key): side rows never go into the steps files."""
    side: dict[str, list[dict[str, Any]]] = {}
    steps: list[dict[str, Any]] = []
    for row in rows:
        kind = side_kind(row)
        if kind is None:
            steps.append(row)
        else:
            side.setdefault(kind, []).append(row)
    return steps, side


class _SideFiles:
    """The side rows' JSON Lines files of one sink, opened on their first row."""

    def __init__(self, folder: str | os.PathLike, run_id: str) -> None:
        self.folder, self.run_id = folder, run_id
        self.sinks: dict[str, JsonlSink] = {}

    def write(self, side: dict[str, list[dict[str, Any]]]) -> None:
        for key, records in side.items():
            if key not in self.sinks:
                self.sinks[key] = side_sink(self.folder, self.run_id, key)
            self.sinks[key].write(records)

    def close(self) -> None:
        for sink in self.sinks.values():
            sink.close()


class MemorySink:
    """Keeps rows in a list (tests, notebooks)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.decisions: list[dict[str, Any]] = []
        self.metadata: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.closed = False

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        steps, side = split_side_rows(rows)
        self.rows.extend(_clean(r) for r in steps)
        self.decisions.extend(side.get(DECISION_KEY, []))
        self.metadata.extend(side.get(schema.METADATA_KEY, []))
        self.requests.extend(_clean(r, SIDE_COLUMNS[schema.REQUEST_KEY]) for r in side.get(schema.REQUEST_KEY, []))

    def close(self) -> None:
        self.closed = True


class _FileSet:
    """Numbered files ``specobs-<run>-p<pid>-<seq>.<ext>`` in one folder."""

    def __init__(self, folder: str | os.PathLike, run_id: str, extension: str) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.stem = f"specobs-{_safe(run_id)}-p{os.getpid()}"
        self.extension = extension
        self.seq = 0

    def next_path(self) -> Path:
        self.seq += 1
        return self.folder / f"{self.stem}-{self.seq:04d}.{self.extension}"


def _safe(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)[:80] or "run"


class JsonlSink:
    """JSON Lines event files, crash-safe, rotated by size and age."""

    def __init__(
        self,
        folder: str | os.PathLike,
        run_id: str,
        *,
        rotate_bytes: int = 64 * 1024 * 1024,
        rotate_seconds: float = 3600.0,
    ) -> None:
        self.files = _FileSet(folder, run_id, "jsonl")
        self._side = _SideFiles(folder, run_id)  # decisions, metadata and requests, in their own files
        self._steps_only = True
        self._columns: Sequence[str] | None = STEP_COLUMNS  # None: side rows as written
        self.rotate_bytes = rotate_bytes
        self.rotate_seconds = rotate_seconds
        self._fd: int | None = None
        self._size = 0
        self._opened = 0.0
        self.paths: list[Path] = []

    def _open(self) -> int:
        path = self.files.next_path()
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = 0
        self._opened = time.monotonic()
        self.paths.append(path)
        return self._fd

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        rows, side = split_side_rows(rows) if self._steps_only else (list(rows), {})
        self._side.write(side)
        if not rows:
            return
        columns = self._columns
        data = "".join(
            json.dumps(_clean(r, columns) if columns is not None else r, separators=(",", ":")) + "\n" for r in rows
        ).encode()
        expired = time.monotonic() - self._opened > self.rotate_seconds
        if self._fd is None or self._size + len(data) > self.rotate_bytes or expired:
            self._close_file()  # this file set only: the side files rotate on their own
            self._open()
        assert self._fd is not None
        view = memoryview(data)
        while view:  # a regular file takes the whole buffer in one write; loop just in case
            written = os.write(self._fd, view)
            view = view[written:]
        self._size += len(data)

    def _close_file(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        self._close_file()
        self._side.close()


def side_sink(folder: str | os.PathLike, run_id: str, key: str = DECISION_KEY) -> JsonlSink:
    """JSON Lines files ``specobs-<run>-<tag>-p<pid>-<seq>.jsonl`` for side rows, as written
    (``tuner`` for decisions, ``meta`` for run metadata, ``requests`` for finished requests)."""
    sink = JsonlSink(folder, f"{run_id}-{SIDE_FILES[key]}")
    sink._steps_only = False
    sink._columns = SIDE_COLUMNS.get(key)
    return sink


class ParquetSink:
    """Parquet event files: one part per ``part_seconds``, each appearing by atomic rename."""

    def __init__(
        self,
        folder: str | os.PathLike,
        run_id: str,
        *,
        part_seconds: float = 60.0,
        part_rows: int = 100_000,
    ) -> None:
        self.files = _FileSet(folder, run_id, "parquet")
        self._side = _SideFiles(folder, run_id)
        self.part_seconds = part_seconds
        self.part_rows = part_rows
        self._rows: list[dict[str, Any]] = []
        self._started = time.monotonic()
        self.paths: list[Path] = []

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        steps, side = split_side_rows(rows)
        self._side.write(side)
        self._rows.extend(_clean(r) for r in steps)
        if len(self._rows) >= self.part_rows or time.monotonic() - self._started >= self.part_seconds:
            self._write_part()

    def _write_part(self) -> None:
        self._started = time.monotonic()
        if not self._rows:
            return
        import polars as pl

        frame = pl.DataFrame(self._rows, schema=schema.STEPS)
        path = self.files.next_path()
        tmp = path.with_name(f".{path.name}.tmp")
        frame.write_parquet(tmp)
        os.replace(tmp, path)  # the part appears whole or not at all
        self.paths.append(path)
        self._rows = []

    def close(self) -> None:
        self._write_part()
        self._side.close()
