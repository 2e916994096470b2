"""The online tuner's decision log: JSON Lines rows marked by ``tuner_action`` (``SPECOBS_ONLINE_TUNER``).

The capture writes them to their own files beside the event files
(``specobs-<run>-tuner-p<pid>-<seq>.jsonl``). A row counts only when every field has its type
and the action is known; any other line is skipped and named (FILE:LINE). ``reason`` is a
``TunerReason`` value (with ``reason_text`` for ``other``); a log written before reasons were
typed holds free text there, read as ``other`` keeping its text:
``{"reason": "measured faster"}`` → ``reason=other, reason_text="measured faster"``.
"""

from __future__ import annotations

import math
from typing import Any

from specobs.errors import Skipped
from specobs.ingest.registry import Progress, Read, Reader
from specobs.ingest.source import Source, first_record_has, read_records
from specobs.records import TUNER_ACTIONS, SourceReport, TunerDecision, TunerReason, reason_of

FORMAT = "tuner-decisions"
KEY = "tuner_action"
_INTS = ("batch_size_min", "batch_size_max", "from_k", "to_k")
_OPTIONAL_FLOATS = ("predicted_gain", "predicted_low", "predicted_high", "measured_gain")


def looks_like_decisions(head: bytes) -> bool:
    """True when the first non-empty line is a JSON object with ``tuner_action``."""
    return first_record_has(head, KEY)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def parse(record: Any) -> tuple[TunerDecision | None, str | None]:
    """(decision, None) or (None, why)."""

    if not isinstance(record, dict):
        return None, "not a JSON object"
    action = record.get(KEY)
    if action not in TUNER_ACTIONS:
        return None, f"{KEY} is not one of {', '.join(TUNER_ACTIONS)}"
    if not _number(record.get("ts")):
        return None, "ts is not a number"
    for name in _INTS:
        value = record.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return None, f"{name} is not a non-negative integer"
    if record["batch_size_min"] > record["batch_size_max"]:
        return None, "batch_size_min is above batch_size_max"
    for name in _OPTIONAL_FLOATS:
        if record.get(name) is not None and not _number(record[name]):
            return None, f"{name} is not a number"
    if not isinstance(record.get("reason", ""), str):
        return None, "reason is not a string"
    if record.get("reason_text") is not None and not isinstance(record["reason_text"], str):
        return None, "reason_text is not a string"
    # A TunerReason value, or (a log written before reasons were typed) free text: kept as `other`.
    reason, text = reason_of(record.get("reason", ""))
    if text is not None and record.get("reason_text") is None:
        record = {**record, "reason_text": text}
    engine = record.get("engine")
    return TunerDecision(
        ts=float(record["ts"]), batch_size_min=record["batch_size_min"], batch_size_max=record["batch_size_max"],
        action=action, from_k=record["from_k"], to_k=record["to_k"],
        predicted_gain=record.get("predicted_gain"), predicted_low=record.get("predicted_low"),
        predicted_high=record.get("predicted_high"), measured_gain=record.get("measured_gain"),
        reason=reason, run_id=None if record.get("run_id") is None else str(record["run_id"]),
        engine=engine if isinstance(engine, int) and not isinstance(engine, bool) else None,
        reason_text=record.get("reason_text") if reason == TunerReason.OTHER else None,
    ), None  # fmt: skip


def read(src: Source) -> tuple[list[TunerDecision], list[Skipped], int]:
    """Every valid decision of one file, the skipped lines, and the number of lines."""
    return read_records(src, parse)


def _read_decisions(src: Source, fmt: str, progress: Progress = None) -> Read:
    found, skipped, lines = read(src)
    return Read(SourceReport(src.name, fmt, lines, 0, len(skipped)), skipped, decisions=found)


READER = Reader((FORMAT,), lambda head: FORMAT if looks_like_decisions(head) else None, _read_decisions,
                detect_order=3, list_order=5)  # fmt: skip
