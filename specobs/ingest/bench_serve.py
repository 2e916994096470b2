"""Result files of vLLM's serving benchmark: ``vllm bench serve --save-result`` (one JSON object,
or one per line with ``--append-result``) and ``vllm bench sweep serve`` (``run=N.json`` per
repeat, ``summary.json`` a list of them), as vLLM 0.32 writes them
(``vllm/benchmarks/serve.py``, ``vllm/benchmarks/sweep/serve.py``). Example::

    {"date": "20261203-170102", "backend": "vllm", "label": "ngram-k3", "model_id": "tiny-llama",
     "num_prompts": 32, "config": "ngram-k3", "request_rate": "inf", "burstiness": 1.0,
     "max_concurrency": 4, "duration": 5.1, "completed": 32, "failed": 0,
     "output_throughput": 402.3, "mean_tpot_ms": 8.9, "p99_tpot_ms": 12.0, …,
     "spec_decode_acceptance_length": 2.41, "spec_decode_acceptance_rate": 47.0, …}

One row per result (``schema.BENCH``). A record counts whole or not at all: one whose
throughput, duration or counts are missing or not numbers is skipped and named (FILE:LINE, or
FILE and the item of a summary list). The configuration is ``config`` from ``--metadata``, else
the label, else a sweep's server parameters; a speculative method or k comes from metadata
(``method``, ``k`` / ``num_speculative_tokens``) or a sweep's ``speculative_config``. A result
with a ``spec_decode`` section is speculative; one without it and without a method named is a
plain server (vLLM writes the section whenever the server exports speculative counters).
"""

from __future__ import annotations

import json
import math
from typing import Any

import polars as pl

from specobs import schema
from specobs.errors import InputError, Skipped
from specobs.ingest.registry import Progress, Read, Reader
from specobs.ingest.source import Source, read_whole
from specobs.records import SourceReport

FORMAT = "vllm-bench-serve"
#: Keys every result has early in the file (the sniff reads the first bytes): the count of
#: prompts, and one of the setup or traffic keys beside it.
_MARK = b'"num_prompts"'
_BESIDE = (b'"endpoint_type"', b'"burstiness"', b'"output_throughput"')
#: Keys a result must carry, with numbers, to count.
_REQUIRED = ("duration", "completed", "output_throughput")
#: Longest label or configuration name kept.
MAX_CHARS = 200
_NUMBERS = ("duration", "request_throughput", "output_throughput", "total_token_throughput", "burstiness")
_COUNTS = ("num_prompts", "completed", "failed")


def looks_like_bench_result(head: bytes) -> bool:
    """JSON (an object, or a list of them) with a serving result's early keys."""
    start = head.lstrip()[:1]
    return start in (b"{", b"[") and _MARK in head and any(mark in head for mark in _BESIDE)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _count(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and value >= 0 else None


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, dict | list):
        return None
    return str(value)[:MAX_CHARS]


def _speculative_config(record: dict[str, Any]) -> dict[str, Any]:
    """A sweep's ``speculative_config`` server parameter (a dict, or its JSON text)."""
    value = record.get("speculative_config", record.get("speculative-config"))
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def sweep_server(source: str) -> str | None:
    """The server combination a sweep file belongs to: ``SERVE-<name>`` in its folder's name
    (``vllm bench sweep serve`` writes ``SERVE-<name>-BENCH-<name>/run=N.json``)."""
    folder = source.replace("\\", "/").rsplit("/", 2)
    parent = folder[-2] if len(folder) >= 2 else ""
    if not parent.startswith("SERVE-"):
        return None
    return parent.removeprefix("SERVE-").split("-BENCH-", 1)[0] or None


def _configuration(record: dict[str, Any], source: str) -> str | None:
    """``config`` from --metadata, else the label, else the sweep's server combination, else
    the speculative settings, else the model."""
    for key in ("config", "label"):
        if _text(record.get(key)):
            return _text(record.get(key))
    if (server := sweep_server(source)) is not None:
        return _text(server)
    settings = _speculative_config(record)
    if settings.get("method"):
        return _text(f"{settings['method']} k={settings.get('num_speculative_tokens', '?')}")
    return _text(record.get("model_id"))


def parse(record: Any, source: str = "") -> tuple[dict[str, Any] | None, str | None]:
    """(row, None) or (None, why): one result as a ``schema.BENCH`` row."""
    if not isinstance(record, dict):
        return None, "not a JSON object"
    for key in _REQUIRED:
        if _number(record.get(key)) is None:
            return None, f"{key} is missing or not a number"
    row: dict[str, Any] = {}
    for key in _NUMBERS:
        if key in record and record[key] is not None:
            if (value := _number(record[key])) is None:
                return None, f"{key} is not a number"
            row[key] = value
    for key in _COUNTS:
        if key in record and record[key] is not None:
            if (value := _count(record[key])) is None:
                return None, f"{key} is not a non-negative integer"
            row[key] = value
    if row["duration"] <= 0 or row["output_throughput"] < 0:
        return None, "duration is not positive or output_throughput is negative"
    concurrency = record.get("max_concurrency")
    if concurrency is not None and (_count(concurrency) is None or concurrency < 1):
        return None, "max_concurrency is not a positive integer"
    rate = record.get("request_rate")
    if rate == "inf" or rate is None:
        row["request_rate"] = None
    elif (value := _number(rate)) is None or value <= 0:
        return None, "request_rate is neither a positive number nor inf"
    else:
        row["request_rate"] = value
    for name in schema.BENCH_LATENCIES:
        for stat in schema.BENCH_STATISTICS:
            key = f"{stat}_{name}_ms"
            if key in record and record[key] is not None:
                if (value := _number(record[key])) is None or value < 0:
                    return None, f"{key} is not a non-negative number"
                row[key] = value
    spec = {k: record[k] for k in record if k.startswith("spec_decode_")}
    if spec:
        length, rate_pct = (
            _number(spec.get("spec_decode_acceptance_length")),
            _number(spec.get("spec_decode_acceptance_rate")),
        )
        counts = [
            _count(spec.get(k))
            for k in ("spec_decode_num_drafts", "spec_decode_draft_tokens", "spec_decode_accepted_tokens")
        ]
        per_position = spec.get("spec_decode_per_position_acceptance_rates") or []
        if length is None or rate_pct is None or None in counts or not isinstance(per_position, list):
            return None, "the spec_decode section is incomplete or not numbers"
        if any(_number(v) is None for v in per_position):
            return None, "spec_decode_per_position_acceptance_rates is not a list of numbers"
        row.update(spec_decode_acceptance_length=length, spec_decode_acceptance_rate=rate_pct / 100,
                   spec_decode_num_drafts=counts[0], spec_decode_draft_tokens=counts[1],
                   spec_decode_accepted_tokens=counts[2],
                   spec_decode_per_position=[float(v) for v in per_position])  # fmt: skip
    requests, why = _requests(record)
    if requests is None:
        return None, why
    row.update(requests)
    settings = _speculative_config(record)
    method = _text(record.get("method") or settings.get("method"))
    k = record.get("k", record.get("num_speculative_tokens", settings.get("num_speculative_tokens")))
    if isinstance(k, str) and k.isdigit():
        k = int(k)
    if method in ("none", "plain", ""):
        method = None
    row.update(
        date=_text(record.get("date")), label=_text(record.get("label")), config=_configuration(record, source),
        model=_text(record.get("model_id")), backend=_text(record.get("backend") or record.get("endpoint_type")),
        method=method, num_spec_tokens=_count(k), speculative=bool(spec) or method is not None,
        max_concurrency=concurrency, run_number=_count(record.get("run_number")),
    )  # fmt: skip
    if not row["speculative"] and row["num_spec_tokens"] is None:
        row["num_spec_tokens"] = 0
    return row, None


#: Per-request lists of a result: (key in the file, column, element check).
_REQUEST_LISTS = (
    ("latencies", "request_latency_s", _number),
    ("ttfts", "request_ttft_s", _number),
    ("output_lens", "request_output_tokens", _count),
)


def _requests(record: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The per-request lists of a result (empty when it has none), or (None, why) when one is
    not a list of non-negative numbers or their lengths differ: counted whole or not at all."""
    out: dict[str, Any] = {}
    for key, column, check in _REQUEST_LISTS:
        values = record.get(key)
        if values is None:
            continue
        if not isinstance(values, list):
            return None, f"{key} is not a list"
        checked = [check(v) for v in values]
        if any(v is None or v < 0 for v in checked):
            return None, f"{key} is not a list of non-negative numbers"
        out[column] = checked
    errors = record.get("errors")
    if errors is not None:
        if not isinstance(errors, list) or any(e is not None and not isinstance(e, str) for e in errors):
            return None, "errors is not a list of texts"
        out["request_ok"] = [not e for e in errors]
    if len({len(v) for v in out.values()}) > 1:
        return None, "the per-request lists (" + ", ".join(k for k, c, _ in _REQUEST_LISTS if c in out) + (
            ", errors" if "request_ok" in out else "") + ") differ in length"
    return out, None


def _records(data: bytes, name: str) -> list[tuple[int | None, Any]]:
    """(line or item, record) of one file: a JSON value (an object, or a sweep's list), else
    JSON Lines (``--append-result``). A file that is neither is unreadable."""
    text = data.decode("utf-8", errors="replace")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError as exc:
        lines = [(n, line) for n, line in enumerate(text.split("\n"), start=1) if line.strip()]
        if len(lines) < 2:
            raise InputError(name, f"not complete JSON (line {exc.lineno}: {exc.msg}): a result cut short?") from None
        out: list[tuple[int | None, Any]] = []
        for number, line in lines:
            try:
                out.append((number, json.loads(line)))
            except ValueError:
                out.append((number, _BROKEN))
        return out
    if isinstance(whole, list):
        return [(item, record) for item, record in enumerate(whole, start=1)]
    return [(1, whole)]


_BROKEN = object()


def read(src: Source) -> tuple[list[dict[str, Any]], list[Skipped], int]:
    """Every valid result of one file, the skipped records, and how many records there were."""
    data, cut = read_whole(src)
    skipped: list[Skipped] = [cut] if cut is not None else []
    rows = []
    records = _records(data, src.name)
    for where, record in records:
        row, why = (None, "not valid JSON") if record is _BROKEN else parse(record, src.name)
        if row is None:
            skipped.append(Skipped(src.name, where, why or "not a result"))
            continue
        rows.append({**row, "source": src.name, "source_line": where})
    return rows, skipped, len(records)


def frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Rows as a ``schema.BENCH`` frame."""
    if not rows:
        return schema.empty(schema.BENCH)
    return schema.conform(pl.DataFrame(rows, infer_schema_length=None), schema.BENCH)


def _read_bench(src: Source, fmt: str, progress: Progress = None) -> Read:
    rows, skipped, records = read(src)
    return Read(SourceReport(src.name, FORMAT, records, 0, len(skipped)), skipped, bench=frame(rows))


READER = Reader((FORMAT,), lambda head: FORMAT if looks_like_bench_result(head) else None, _read_bench,
                detect_order=5, list_order=8)  # fmt: skip
