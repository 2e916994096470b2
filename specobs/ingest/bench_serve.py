"""Result files of vLLM's serving benchmark: ``vllm bench serve --save-result`` (one JSON object,
or one per line with ``--append-result``) and ``vllm bench sweep serve``, as vLLM 0.32 writes them
(``vllm/benchmarks/serve.py``, ``vllm/benchmarks/sweep/serve.py``). A sweep's experiment folder
holds one folder per combination, ``SERVE--<serve name>-BENCH--<bench name>`` (either part left
out when its parameters are empty; a name is ``_benchmark_name`` or the ``key=value`` pairs joined
by ``-``), with ``run=N.json`` per repeat (the result plus ``run_number`` and the combination's
parameters), ``summary.json`` (the list of the same records: read with its run files, each result
counts once) and, with ``--warmup-num-prompts``, ``warmup.json`` (``run_number`` -1: not a
measurement, left out with a notice); ``summary.csv`` beside them repeats every run (recognised,
not read). With ``--continue-on-error`` a failed run leaves ``run=N.failure.json`` (a failed server
``SERVE-<name>-failure.json``) instead: named as a skipped record with vLLM's error. Example::

    {"date": "20261203-170102", "backend": "vllm", "label": "ngram-k3", "model_id": "tiny-llama",
     "num_prompts": 32, "config": "ngram-k3", "request_rate": "inf", "burstiness": 1.0,
     "max_concurrency": 4, "duration": 5.1, "completed": 32, "failed": 0,
     "output_throughput": 402.3, "mean_tpot_ms": 8.9, "p99_tpot_ms": 12.0, …,
     "spec_decode_acceptance_length": 2.41, "spec_decode_acceptance_rate": 47.0, …}

One row per result (``schema.BENCH``). A record counts whole or not at all: one whose
throughput, duration or counts are missing or not numbers is skipped and named (FILE:LINE, or
FILE and the item of a summary list). The configuration is ``config`` from ``--metadata``, else
a sweep's server combination, else the label; a speculative method or k comes from metadata
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
from specobs.errors import InputError, Notice, Skipped
from specobs.ingest.registry import Progress, Read, Reader
from specobs.ingest.source import Source, read_whole
from specobs.records import SourceReport

FORMAT = "vllm-bench-serve"
#: ``schema.BENCH.client`` of these results.
CLIENT = schema.BENCH_CLIENTS[0]
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


#: A sweep's ``summary.csv`` (pandas' table of every run of the experiment): recognised, so that
#: a sweep folder reads without a file "not recognised", and not read: its runs are the
#: ``run=N.json`` files beside it, whose values it repeats (lists and dicts as Python text).
FORMAT_CSV = "vllm-bench-sweep-csv"
SWEEP_CSV = "a sweep's table of its runs: read from the run=N.json files of its SERVE-/BENCH- folders instead"


#: A sweep's record of a run or server that failed (``--continue-on-error``): ``run=N.failure.json``
#: or ``SERVE-<name>-failure.json`` with ``error_type``, ``error`` and the overrides. No result:
#: named as a skipped record, with vLLM's error.
FORMAT_FAILURE = "vllm-bench-sweep-failure"


def looks_like_sweep_failure(head: bytes) -> bool:
    """A JSON object with the sweep's failure keys."""
    return head.lstrip()[:1] == b"{" and b'"error_type"' in head and b'"serve_overrides"' in head


def _failure(src: Source) -> Skipped:
    """The skipped record a failure file stands for (its text cut to :data:`MAX_CHARS`)."""
    data, _ = read_whole(src)
    try:
        record = json.loads(data.decode("utf-8", errors="replace"))
    except ValueError:
        raise InputError(src.name, "a sweep's failure record, not complete JSON") from None
    if not isinstance(record, dict):
        raise InputError(src.name, "a sweep's failure record, not a JSON object")
    run = record.get("run_number")
    what = "server" if run is None else "warm-up run" if _warmup(record) else f"run {run}"
    error = text(f"{record.get('error_type', '?')}: {record.get('error', '')}")
    return Skipped(src.name, None, f"a sweep's failed {what}, no result: {error}")


#: What ``specobs sweep`` writes beside its results: ``sweep.json`` (the plan, the order the servers
#: ran in, their timings), ``prompts.sharegpt.json`` (the prompts it sent) and each server's
#: benchmark-client log (``$ vllm bench serve …`` lines). Recognised, so that a sweep's folder
#: reads without files "not recognised", and not read: what they measured is in the result files.
FORMAT_SWEEP_FILES = "specobs-sweep-files"
SWEEP_FILES = "specobs sweep's plan, prompts or benchmark-client log: its measurements are the result files"


def looks_like_sweep_files(head: bytes) -> bool:
    """``sweep.json`` (an object opening with its ``plan``), a ShareGPT prompt list, or a
    benchmark-client log (a ``$ vllm bench serve`` line among its first)."""
    start = head.lstrip()
    plan = start[:1] == b"{" and start[1:].lstrip().startswith(b'"plan"') and b'"configurations"' in head
    prompts = start[:1] == b"[" and b'"conversations"' in head and b'"from"' in head
    return plan or prompts or start.startswith(b"$ vllm bench serve ") or b"\n$ vllm bench serve " in head[:4096]


def looks_like_sweep_csv(head: bytes) -> bool:
    """A CSV header with a result's keys and the sweep's ``run_number``."""
    header = head.split(b"\n", 1)[0].rstrip(b"\r")
    return {b"num_prompts", b"output_throughput", b"run_number"} <= set(header.split(b","))


def number(value: Any) -> float | None:
    """A finite number (not a bool), else None (every serving-result reader's check)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def count(value: Any) -> int | None:
    """A non-negative integer (a whole float counts), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and value >= 0 else None


def text(value: Any) -> str | None:
    """A scalar as text (cut to :data:`MAX_CHARS`); None for nothing, lists and objects."""
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
    """The server combination a sweep file belongs to, from its folder's name: vLLM joins
    ``("SERVE-", name, "BENCH-", name)`` with ``-``, so ``SERVE--plain-BENCH--max_concurrency=4``
    is server ``plain`` (``SERVE-plain-BENCH-c4`` is read the same way)."""
    folder = source.replace("\\", "/").rsplit("/", 2)
    parent = folder[-2] if len(folder) >= 2 else ""
    if not parent.startswith("SERVE-"):
        return None
    name = parent.removeprefix("SERVE-").removeprefix("-")
    return name.split("-BENCH-", 1)[0] or None


def _configuration(record: dict[str, Any], source: str) -> str | None:
    """``config`` from --metadata, else the sweep's server combination, else the label, else
    the speculative settings, else the model. A sweep's combination comes before the label: a
    ``--label`` in the sweep's bench command is the same for every server, and would make them one."""
    if text(record.get("config")):
        return text(record.get("config"))
    if (server := sweep_server(source)) is not None:
        return text(server)
    if text(record.get("label")):
        return text(record.get("label"))
    settings = _speculative_config(record)
    if settings.get("method"):
        return text(f"{settings['method']} k={settings.get('num_speculative_tokens', '?')}")
    return text(record.get("model_id"))


def parse(record: Any, source: str = "") -> tuple[dict[str, Any] | None, str | None]:
    """(row, None) or (None, why): one result as a ``schema.BENCH`` row."""
    if not isinstance(record, dict):
        return None, "not a JSON object"
    for key in _REQUIRED:
        if number(record.get(key)) is None:
            return None, f"{key} is missing or not a number"
    row: dict[str, Any] = {}
    for key in _NUMBERS:
        if key in record and record[key] is not None:
            if (value := number(record[key])) is None:
                return None, f"{key} is not a number"
            row[key] = value
    for key in _COUNTS:
        if key in record and record[key] is not None:
            if (value := count(record[key])) is None:
                return None, f"{key} is not a non-negative integer"
            row[key] = value
    if row["duration"] <= 0 or row["output_throughput"] < 0:
        return None, "duration is not positive or output_throughput is negative"
    concurrency = record.get("max_concurrency")
    if concurrency is not None and (count(concurrency) is None or concurrency < 1):
        return None, "max_concurrency is not a positive integer"
    rate = record.get("request_rate")
    if rate == "inf" or rate is None:
        row["request_rate"] = None
    elif (value := number(rate)) is None or value <= 0:
        return None, "request_rate is neither a positive number nor inf"
    else:
        row["request_rate"] = value
    for name in schema.BENCH_LATENCIES:
        for stat in schema.BENCH_STATISTICS:
            key = f"{stat}_{name}_ms"
            if key in record and record[key] is not None:
                if (value := number(record[key])) is None or value < 0:
                    return None, f"{key} is not a non-negative number"
                row[key] = value
    spec = {k: record[k] for k in record if k.startswith("spec_decode_")}
    if spec:
        length, rate_pct = (
            number(spec.get("spec_decode_acceptance_length")),
            number(spec.get("spec_decode_acceptance_rate")),
        )
        counts = [
            count(spec.get(k))
            for k in ("spec_decode_num_drafts", "spec_decode_draft_tokens", "spec_decode_accepted_tokens")
        ]
        per_position = spec.get("spec_decode_per_position_acceptance_rates") or []
        if length is None or rate_pct is None or None in counts or not isinstance(per_position, list):
            return None, "the spec_decode section is incomplete or not numbers"
        if any(number(v) is None for v in per_position):
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
    method = text(record.get("method") or settings.get("method"))
    k = record.get("k", record.get("num_speculative_tokens", settings.get("num_speculative_tokens")))
    if isinstance(k, str) and k.isdigit():
        k = int(k)
    if method in ("none", "plain", ""):
        method = None
    row.update(
        date=text(record.get("date")), label=text(record.get("label")), config=_configuration(record, source),
        client=CLIENT, dataset=text(record.get("dataset_name") or record.get("dataset")),
        model=text(record.get("model_id")), backend=text(record.get("backend") or record.get("endpoint_type")),
        method=method, num_spec_tokens=count(k), speculative=bool(spec) or method is not None,
        max_concurrency=concurrency, run_number=count(record.get("run_number")),
    )  # fmt: skip
    if not row["speculative"] and row["num_spec_tokens"] is None:
        row["num_spec_tokens"] = 0
    return row, None


#: Per-request lists of a result: (key in the file, column, element check).
_REQUEST_LISTS = (
    ("latencies", "request_latency_s", number),
    ("ttfts", "request_ttft_s", number),
    ("output_lens", "request_output_tokens", count),
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
            ", errors" if "request_ok" in out else ""
        ) + ") differ in length"
    return out, None


def _records(data: bytes, name: str) -> list[tuple[int | None, Any]]:
    """(line or item, record) of one file: a JSON value (an object, or a sweep's list), else
    JSON Lines (``--append-result``). A file that is neither is unreadable."""
    content = data.decode("utf-8", errors="replace")
    try:
        whole = json.loads(content)
    except json.JSONDecodeError as exc:
        out: list[tuple[int | None, Any]] = []
        for at, line in enumerate(content.split("\n"), start=1):
            if line.strip():
                try:
                    out.append((at, json.loads(line)))
                except ValueError:
                    out.append((at, _BROKEN))
        # JSON Lines only when some line is a whole object: a pretty-printed result cut short
        # (a sweep's ``run=N.json``, written with indent) is one broken file, not 80 broken lines.
        if len(out) < 2 or not any(isinstance(record, dict) for _, record in out):
            raise InputError(name, f"not complete JSON (line {exc.lineno}: {exc.msg}): a result cut short?") from None
        return out
    if isinstance(whole, list):
        return [(item, record) for item, record in enumerate(whole, start=1)]
    return [(1, whole)]


_BROKEN = object()


def _warmup(record: Any) -> bool:
    """A sweep's warm-up run (``--warmup-num-prompts``): ``run_number`` -1, which vLLM leaves out
    of its summary."""
    run = record.get("run_number") if isinstance(record, dict) else None
    return isinstance(run, int) and not isinstance(run, bool) and run < 0


#: Why a warm-up result is not counted (a notice, not a skipped record).
WARMUP = "a sweep's warm-up run (run_number -1), not a measurement: left out"


def read(src: Source) -> tuple[list[dict[str, Any]], list[Skipped], int]:
    """Every valid result of one file, the skipped records (warm-ups as notices), and how many
    records there were."""
    data, cut = read_whole(src)
    skipped: list[Skipped] = [cut] if cut is not None else []
    rows = []
    records = _records(data, src.name)
    for where, record in records:
        if _warmup(record):
            skipped.append(Notice(src.name, where, WARMUP))
            continue
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


#: What makes two rows the same result read twice: every value of the result (its file and
#: place in it left out: a sweep's ``summary.json`` repeats its ``run=N.json`` files).
_REPEAT_KEY = tuple(
    c for c, dtype in schema.BENCH.items() if c not in ("source", "source_line") and not isinstance(dtype, pl.List)
)


def drop_repeated_results(bench: pl.DataFrame) -> tuple[pl.DataFrame, list[Notice]]:
    """``bench`` with each result counted once, and a notice per file whose results were read
    elsewhere too. A sweep's ``summary.json`` holds the records of its ``run=N.json`` files:
    read together (a sweep folder), the run files' rows are kept and the summary's dropped; a
    summary read alone counts whole."""
    if bench.height < 2:
        return bench, []
    indexed = bench.with_row_index("_order").with_columns(
        _summary=pl.col("source").str.replace_all("\\", "/", literal=True).str.ends_with("/summary.json")
        | (pl.col("source") == "summary.json")
    )
    first = indexed.sort("_summary", "_order").with_columns(_first=pl.struct(_REPEAT_KEY).is_first_distinct())
    repeated = first.filter(~pl.col("_first"))
    if not repeated.height:
        return bench, []
    notices = [
        Notice(source, None, f"{n} result(s) also read from another file (a sweep's run=N.json): counted once")
        for source, n in repeated.group_by("source", maintain_order=True).len().iter_rows()
    ]
    kept = first.filter(pl.col("_first")).sort("_order").drop("_order", "_summary", "_first")
    return kept, notices


def _read_bench(src: Source, fmt: str, progress: Progress = None) -> Read:
    if fmt == FORMAT_CSV:
        return Read(SourceReport(src.name, FORMAT_CSV, None, 0, 0), [Notice(src.name, None, SWEEP_CSV)])
    if fmt == FORMAT_SWEEP_FILES:
        return Read(SourceReport(src.name, FORMAT_SWEEP_FILES, None, 0, 0), [Notice(src.name, None, SWEEP_FILES)])
    if fmt == FORMAT_FAILURE:
        return Read(SourceReport(src.name, FORMAT_FAILURE, 1, 0, 1), [_failure(src)])
    rows, skipped, records = read(src)
    bad = sum(not isinstance(s, Notice) for s in skipped)
    return Read(SourceReport(src.name, FORMAT, records, 0, bad), skipped, bench=frame(rows))


def _sniff(head: bytes) -> str | None:
    if looks_like_bench_result(head):
        return FORMAT
    if looks_like_sweep_failure(head):
        return FORMAT_FAILURE
    if looks_like_sweep_files(head):
        return FORMAT_SWEEP_FILES
    return FORMAT_CSV if looks_like_sweep_csv(head) else None


READER = Reader(
    (FORMAT, FORMAT_CSV, FORMAT_FAILURE, FORMAT_SWEEP_FILES),
    _sniff,
    _read_bench,
    detect_order=5,
    list_order=8,
    family=FORMAT,
)
