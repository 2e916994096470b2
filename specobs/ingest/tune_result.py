"""``specobs tune``'s own result file (``tune.json``), read back for the dashboard and reports."""

from __future__ import annotations

import json

from specobs.errors import InputError
from specobs.ingest.registry import Progress, Read, Reader
from specobs.ingest.source import Source, read_whole
from specobs.records import SourceReport, TuneResult

FORMAT = "specobs-tune"


def looks_like_tune_result(head: bytes) -> bool:
    """A JSON object whose first keys are a tune result's (``tune.json`` is indented JSON)."""
    return head.lstrip().startswith(b"{") and b'"measurements"' in head and b'"verification"' in head


def read(src: Source) -> TuneResult:
    """The whole file as one :class:`TuneResult`; :class:`InputError` when it is not one."""

    data, cut = read_whole(src)
    if cut is not None:
        raise InputError(src.name, "a truncated specobs tune result")
    try:
        return TuneResult.from_dict(json.loads(data))
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(src.name, f"not a complete specobs tune result ({type(exc).__name__}: {exc})") from None


def _read_tune(src: Source, fmt: str, progress: Progress = None) -> Read:
    return Read(SourceReport(src.name, FORMAT, None, 0, 0), tune_runs=[read(src)])


READER = Reader((FORMAT,), lambda head: FORMAT if looks_like_tune_result(head) else None, _read_tune,
                detect_order=5, list_order=7)  # fmt: skip
