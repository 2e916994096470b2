"""Sinks for captured rows: event files (JSON Lines, Parquet) and memory (tests).

Event files hold ``steps`` rows (see ``docs/schema.md``); ``specobs report DIR`` reads them.
Rows of the online tuner's decision log and finished-request rows (``requests``) go to their own
JSON Lines files beside them: ``specobs-<run>-tuner-p<pid>-<n>.jsonl`` and
``specobs-<run>-requests-p<pid>-<n>.jsonl``.

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
#: The key that marks a finished-request row (``requests`` columns; written to its own files).
REQUEST_KEY = schema.REQUEST_KEY
REQUEST_COLUMNS = tuple(schema.REQUESTS)


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    return {name: row.get(name) for name in STEP_COLUMNS}


def split_decisions(rows: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(step rows, decision rows): decisions never go into the steps files."""
    if not any(DECISION_KEY in r for r in rows):
        return list(rows), []
    return [r for r in rows if DECISION_KEY not in r], [r for r in rows if DECISION_KEY in r]


def split_requests(rows: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(other rows, finished-request rows): request rows never go into the steps files."""
    if not any(REQUEST_KEY in r for r in rows):
        return list(rows), []
    return [r for r in rows if REQUEST_KEY not in r], [
        {name: r.get(name) for name in REQUEST_COLUMNS} for r in rows if REQUEST_KEY in r
    ]


class MemorySink:
    """Keeps rows in a list (tests, notebooks)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.decisions: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.closed = False

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        rows, requests = split_requests(rows)
        self.requests.extend(requests)
        steps, decisions = split_decisions(rows)
        self.rows.extend(_clean(r) for r in steps)
        self.decisions.extend(decisions)

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
        self._folder, self._run_id = folder, run_id
        self._decisions: JsonlSink | None = None  # the tuner's decision log, in its own files
        self._requests: JsonlSink | None = None  # finished-request rows, in their own files
        self._steps_only = True
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
        if self._steps_only:
            rows, requests = split_requests(rows)
            if requests:
                if self._requests is None:
                    self._requests = request_sink(self._folder, self._run_id)
                self._requests.write(requests)
        rows, decisions = split_decisions(rows) if self._steps_only else (list(rows), [])
        if decisions:
            if self._decisions is None:
                self._decisions = decision_sink(self._folder, self._run_id)
            self._decisions.write(decisions)
        if not rows:
            return
        clean = _clean if self._steps_only else dict
        data = "".join(json.dumps(clean(r), separators=(",", ":")) + "\n" for r in rows).encode()
        expired = time.monotonic() - self._opened > self.rotate_seconds
        if self._fd is None or self._size + len(data) > self.rotate_bytes or expired:
            self._close_file()  # this file set only: the decision and request files rotate on their own
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
        if self._decisions is not None:
            self._decisions.close()
        if self._requests is not None:
            self._requests.close()


def request_sink(folder: str | os.PathLike, run_id: str) -> JsonlSink:
    """JSON Lines files ``specobs-<run>-requests-p<pid>-<seq>.jsonl`` for finished-request rows."""
    sink = JsonlSink(folder, f"{run_id}-requests")
    sink._steps_only = False
    return sink


def decision_sink(folder: str | os.PathLike, run_id: str) -> JsonlSink:
    """JSON Lines files ``specobs-<run>-tuner-p<pid>-<seq>.jsonl`` for decision rows, as written."""
    sink = JsonlSink(folder, f"{run_id}-tuner")
    sink._steps_only = False
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
        self._decisions = decision_sink(folder, run_id)
        self._requests = request_sink(folder, run_id)
        self.part_seconds = part_seconds
        self.part_rows = part_rows
        self._rows: list[dict[str, Any]] = []
        self._started = time.monotonic()
        self.paths: list[Path] = []

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        rows, requests = split_requests(rows)
        if requests:
            self._requests.write(requests)
        steps, decisions = split_decisions(rows)
        if decisions:
            self._decisions.write(decisions)
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
        self._decisions.close()
        self._requests.close()
