"""Run metadata files: one JSON record per engine, marked by ``specobs_metadata``.

The capture writes them beside the event files (``specobs-<run>-meta-p<pid>-<seq>.jsonl``).
A record counts only when every field it has carries its type; a line that does not is
skipped and named (FILE:LINE), and so is a record of an unknown format version. Example::

    {"specobs_metadata": 1, "run_id": "r", "engine": 0, "platform": "rocm", "device_arch": "gfx942",
     "attention_backend": "ROCM_AITER_FA", "graph_mode": "full_and_piecewise", "schedule": [[1, 8, 3]]}
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

from specobs.errors import Skipped
from specobs.ingest.registry import Progress, Read, Reader
from specobs.ingest.source import Source, first_record_has, read_records
from specobs.records import RunMetadata, SourceReport
from specobs.schema import METADATA_KEY, METADATA_VERSION

FORMAT = "run-metadata"
_INTS = ("engine", "pid", "num_speculative_tokens", "max_num_seqs", "tensor_parallel_size", "pipeline_parallel_size",
         "data_parallel_size")  # fmt: skip
#: Longest string kept in a field (a label, never a payload).
MAX_CHARS = 256


def looks_like_metadata(head: bytes) -> bool:
    """True when the first non-empty line is a JSON object with ``specobs_metadata``."""
    return first_record_has(head, METADATA_KEY)


def parse(record: Any, source: str | None = None) -> tuple[RunMetadata | None, str | None]:
    """(metadata, None) or (None, why)."""

    if not isinstance(record, dict):
        return None, "not a JSON object"
    if record.get(METADATA_KEY) != METADATA_VERSION:
        return None, f"{METADATA_KEY} is not {METADATA_VERSION} (an unknown metadata format)"
    values: dict[str, Any] = {}
    for f in fields(RunMetadata):
        if f.name == "source" or f.name not in record or record[f.name] is None:
            continue
        value = record[f.name]
        if f.name == "ts":
            if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
                return None, "ts is not a number"
            value = float(value)
        elif f.name in _INTS:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                return None, f"{f.name} is not a non-negative integer"
        elif f.name in ("schedule", "schedule_configured"):
            ok = isinstance(value, list) and all(
                isinstance(r, list) and len(r) == 3 and all(isinstance(x, int) and not isinstance(x, bool) for x in r)
                for r in value
            )
            if not ok:
                return None, f"{f.name} is not a list of [low, high, k] integers"
            value = tuple(tuple(r) for r in value)
        elif f.name == "speculative_config":
            value = settings(value)
            if value is None:
                return None, "speculative_config is not an object of settings (numbers, strings, lists)"
        elif f.name == "missing_hooks":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                return None, "missing_hooks is not a list of strings"
            value = tuple(v[:MAX_CHARS] for v in value[:32])
        elif f.name == "environment":
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                return None, "environment is not an object of strings"
            value = {str(k)[:MAX_CHARS]: v[:MAX_CHARS] for k, v in sorted(value.items())}
        elif not isinstance(value, str):
            return None, f"{f.name} is not a string"
        else:
            value = value[:MAX_CHARS]
        values[f.name] = value
    return RunMetadata(**values, source=source), None


_BAD = object()


def settings(value: Any) -> dict[str, Any] | None:
    """A speculative config's settings as plain JSON (strings cut to :data:`MAX_CHARS`), or None
    when ``value`` is not an object of numbers, strings and small lists."""
    plain = _plain(value) if isinstance(value, dict) else _BAD
    return plain if isinstance(plain, dict) else None


def _plain(value: Any, depth: int = 0) -> Any:
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _BAD
    if isinstance(value, str):
        return value[:MAX_CHARS]
    if depth >= 3:
        return _BAD
    if isinstance(value, list | tuple):  # a tuple: a Python literal of a log line
        items = [_plain(v, depth + 1) for v in value]
        return _BAD if any(v is _BAD for v in items) else items
    if isinstance(value, dict):
        pairs = {str(k)[:MAX_CHARS]: _plain(v, depth + 1) for k, v in value.items()}
        return _BAD if any(v is _BAD for v in pairs.values()) else pairs
    return _BAD


def read(src: Source) -> tuple[list[RunMetadata], list[Skipped], int]:
    """Every valid record of one file, the skipped lines, and the number of lines."""
    return read_records(src, lambda record: parse(record, src.name))


def _read_metadata(src: Source, fmt: str, progress: Progress = None) -> Read:
    records, skipped, lines = read(src)
    return Read(SourceReport(src.name, fmt, lines, 0, len(skipped)), skipped, metadata=records)


READER = Reader((FORMAT,), lambda head: FORMAT if looks_like_metadata(head) else None, _read_metadata,
                detect_order=4, list_order=6)  # fmt: skip
