"""GuideLLM's reports as serving-benchmark results (``schema.BENCH``), as GuideLLM 0.8 writes them
(report schema version 2: ``guidellm/benchmark/schemas/report.py``, ``benchmark.py``,
``metrics.py``, ``schemas/base/request_stats.py``). ``guidellm run`` writes ``benchmarks.json``
(one JSON object on one line): ``metadata`` (``version`` 2, ``guidellm_version``), ``config`` (the
scenario: ``metadata.labels`` from ``--label``, ``spec.backend``, ``spec.data``, …) and
``benchmarks``, one per strategy run (a profile of streams 1 and 4 is two). **One row per
benchmark**::

    {"metadata": {"version": 2, "guidellm_version": "0.8.1", …},
     "config": {"metadata": {"labels": {"config": "ngram-k3"}},
                "spec": {"backend": {"kind": "openai_http", "model": "tiny-llama", …}, …}},
     "benchmarks": [{"config": {"strategy": {"type_": "concurrent", "streams": 4, …}, …},
                     "start_time": 1796616826.29, "end_time": 1796616828.94, "duration": 2.65,
                     "metrics": {"request_totals": {"successful": 16, "errored": 0, "incomplete": 0, "total": 16},
                                 "output_tokens_per_second": {"successful": {"mean": 386.0, …}, …},
                                 "time_to_first_token_ms": {"successful": {"mean": 170.0, "median": 43.0,
                                                            "std_dev": 150.9, "percentiles": {"p90": …}}}, …},
                     "requests": {"successful": [{"request_latency": 0.387, "time_to_first_token_ms": 95.3,
                                                  "output_tokens": 64, "response_metrics":
                                                  {"speculative_decoding": {"acceptance_histogram": [0, 0, 0, 15],
                                                                            …}}, …}],
                                  "errored": [], "incomplete": []}}, …]}

→ ``max_concurrency`` 4, ``output_throughput`` 386.0 (GuideLLM's rate over the measured window:
successful output tokens / duration), ``mean_ttft_ms`` 170.0, ``median_ttft_ms`` 43.0, and the
``spec_decode_*`` columns pooled from the requests' vLLM metrics.

GuideLLM's names differ from vLLM's: its ``inter_token_latency_ms`` is per request ``(last token −
first token) / (output tokens − 1)``, vLLM's **TPOT** (``*_tpot_ms``; GuideLLM weights its
statistics by token, so with unequal lengths its mean weights long requests more); its
``time_per_output_token_ms`` includes the time to the first token and has no column; there is no
ITL (gaps between chunks) in its report. Statistics are GuideLLM's own (``successful`` requests):
``mean``, ``median``, ``std_dev``, percentiles p50/p90/p95/p99; ``request_latency`` (seconds) is
E2EL in ms. The load level is the strategy's: ``synchronous`` concurrency 1, ``concurrent`` its
``streams``, ``throughput`` its ``max_concurrency`` (all at once), ``constant`` / ``poisson`` /
``async`` their ``rate`` (requests/s).

Per request (``requests.successful`` and ``errored``, in the order sent): latency, TTFT, output
tokens and success, for goodput; and, where the server sent vLLM's per-request metrics (a vLLM
server started with ``--per-request-spec-decode-metrics``; GuideLLM keeps them as
``response_metrics``), one ``requests`` row each (key: the hashed ``response_id``) and, pooled, the
result's ``spec_decode_*`` columns (drafts = verify steps, as ``aiperf.spec_columns`` computes them).
GuideLLM does not scrape the server, so a speculative server without those metrics is known as
such only from its labels.

The **configuration** is the label ``config`` (``--label config=ngram-k3``), else the report's
folder name less a trailing load level or repeat (``aiperf.configuration``); the labels
``method`` and ``k`` (or ``num_speculative_tokens``) name the method and k, else a method
named as a word of the configuration and k from the per-request metrics. A result is speculative
when it has speculative data or a method; else the plain server. ``date`` is the benchmark's
``end_time`` in this machine's local time, for the capture join.

A benchmark counts whole or not at all: one without a numeric duration, request totals and
output throughput, or with values of the wrong type, is skipped and named (FILE and the
benchmark's item number); a file cut short is unreadable. ``benchmarks.yaml`` (the same report
in YAML), ``benchmarks.csv`` and ``benchmarks.html`` are recognised and not read: read
``benchmarks.json``, which ``guidellm run`` writes by default (``guidellm export benchmarks.yaml
--output kind=json`` converts a YAML report).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from specobs import schema
from specobs.errors import InputError, Notice, Skipped
from specobs.ingest.aiperf import add_histograms, configuration, dense, local_date, method_in, spec_columns
from specobs.ingest.bench_serve import count, number, text
from specobs.ingest.registry import Progress, Read, Reader
from specobs.ingest.request_rows import request_problem, vllm_request_columns
from specobs.ingest.source import Source, read_whole
from specobs.records import SourceReport

FORMAT = "guidellm"
FORMAT_FILES = "guidellm-files"
#: ``schema.BENCH.client`` of these results.
CLIENT = schema.BENCH_CLIENTS[2]
#: The report schema this reader knows (``GenerativeBenchmarkMetadata.version``).
REPORT_VERSION = 2
#: GuideLLM metric → (the latency of ``schema.BENCH_LATENCIES`` it is, milliseconds per unit).
LATENCIES = {"time_to_first_token_ms": ("ttft", 1.0), "inter_token_latency_ms": ("tpot", 1.0),
             "request_latency": ("e2el", 1000.0)}  # fmt: skip
#: ``schema.BENCH_STATISTICS`` → where GuideLLM keeps it in a distribution summary.
STATISTICS = {"mean": ("mean",), "median": ("median",), "std": ("std_dev",), "p50": ("percentiles", "p50"),
              "p90": ("percentiles", "p90"), "p95": ("percentiles", "p95"), "p99": ("percentiles", "p99")}  # fmt: skip
#: GuideLLM rate metric → ``schema.BENCH`` column (``successful.mean``: count / duration).
_RATES = {"output_tokens_per_second": "output_throughput", "requests_per_second": "request_throughput",
          "tokens_per_second": "total_token_throughput"}  # fmt: skip


def looks_like_report(head: bytes) -> bool:
    """``benchmarks.json``: an object with GuideLLM's version key and its benchmarks."""
    return head.lstrip()[:1] == b"{" and b'"guidellm_version"' in head and b'"benchmarks"' in head


def looks_like_other_file(head: bytes) -> bool:
    """The same report as YAML (``benchmarks:`` first, PyYAML sorts keys), CSV (two header rows
    of groups, ``Run Info`` first) or HTML (GuideLLM's page)."""
    start = head.lstrip()
    yaml = start.startswith(b"benchmarks:") and b"prefer_response_metrics:" in head and b"strategy:" in head
    csv = start.startswith(b"Run Info,Run Info,")
    html = start[:15].lower().startswith((b"<!doctype html", b"<html")) and b"guidellm" in head.lower()
    return yaml or csv or html


def _sniff(head: bytes) -> str | None:
    if looks_like_report(head):
        return FORMAT
    return FORMAT_FILES if looks_like_other_file(head) else None


def _at(record: Any, *keys: str) -> Any:
    for key in keys:
        record = record.get(key) if isinstance(record, dict) else None
    return record


def _statistics(metrics: Mapping[str, Any], tag: str) -> dict[str, Any] | str | None:
    """The ``successful`` distribution of one metric (None when absent), or why it cannot be read."""
    summary = metrics.get(tag)
    if summary is None:
        return None
    successful = summary.get("successful") if isinstance(summary, dict) else "no"
    if successful is None:
        return None
    if not isinstance(successful, dict):
        return f"metrics.{tag}.successful is not an object"
    return successful


def _load(strategy: Any) -> tuple[int | None, float | None] | str:
    """(max_concurrency, request_rate) of a strategy, or why not."""
    if not isinstance(strategy, dict):
        return "config.strategy is not an object"
    kind = strategy.get("type_")
    if kind == "synchronous":
        return 1, None
    if kind in ("concurrent", "throughput"):
        streams = strategy.get("streams", strategy.get("max_concurrency"))
        if streams is None and kind == "throughput":
            return None, None
        streams = count(streams)
        if streams is None or streams < 1:
            return f"config.strategy.streams of a {kind} strategy is not a positive integer"
        return streams, None
    rate = number(strategy.get("rate"))
    if rate is None or rate <= 0:
        return f"config.strategy ({kind!r}) has no positive rate"
    return None, rate


def _requests(benchmark: Mapping[str, Any]) -> list[dict[str, Any]] | str:
    """The successful and errored requests in the order sent (incomplete ones, cut off at the end
    of the window, are not counted by GuideLLM either), or why they cannot be read."""
    groups = benchmark.get("requests")
    if not isinstance(groups, dict):
        return []
    out = []
    for status in ("successful", "errored"):
        group = groups.get(status) or []
        if not isinstance(group, list) or not all(isinstance(r, dict) for r in group):
            return f"requests.{status} is not a list of objects"
        for request in group:
            out.append({**request, "_ok": status == "successful"})
    for request in out:
        start = number(request.get("request_start_time"))
        request["_start"] = start if start is not None else float("inf")
    out.sort(key=lambda r: r["_start"])
    return out


def _per_request(requests: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, str | None]:
    """The per-request lists for goodput, or (None, why) when a value has the wrong type."""
    latency, ttft, tokens, ok = [], [], [], []
    for request in requests:
        values = (number(request.get("request_latency")), number(request.get("time_to_first_token_ms")),
                  count(request.get("output_tokens")))  # fmt: skip
        if request["_ok"] and (None in values or values[0] < 0 or values[1] < 0):  # type: ignore[operator]
            return (
                None,
                "a successful request without a numeric request_latency, time_to_first_token_ms or output_tokens",
            )
        latency.append(values[0] or 0.0)
        ttft.append((values[1] or 0.0) / 1000)
        tokens.append(values[2] or 0)
        ok.append(request["_ok"])
    if not requests:
        return None, None
    lists = {"request_latency_s": latency, "request_ttft_s": ttft, "request_output_tokens": tokens, "request_ok": ok}
    return lists, None


def _spec(requests: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str | None]:
    """Each successful request's vLLM speculative metrics as ``schema.REQUESTS`` columns, or why
    one does not add up (the benchmark is then skipped whole)."""
    rows = []
    for request in requests:
        metrics = _at(request, "response_metrics", "speculative_decoding")
        if metrics is None or not request["_ok"]:
            continue
        columns = vllm_request_columns(metrics)
        if isinstance(columns, str):
            return [], columns
        histogram = dense(columns["acceptance_histogram"])
        columns["acceptance_histogram"] = histogram if histogram is not None else columns["acceptance_histogram"]
        columns["num_output_tokens"] = count(request.get("output_tokens"))
        if (why := request_problem(columns)) is not None:
            return [], f"a request's speculative_decoding metrics: {why}"
        key = text(request.get("response_id") or request.get("request_id")) or ""
        rows.append({**columns, schema.REQUEST_KEY: schema.request_key(key), "finish_reason": None})
    return rows, None


def parse(
    benchmark: Any, report: Mapping[str, Any], folder: str
) -> tuple[dict[str, Any] | None, list[dict[str, Any]], str | None]:
    """(row, request rows, None) or (None, [], why): one benchmark of a report."""
    if not isinstance(benchmark, dict):
        return None, [], "not a JSON object"
    metrics = benchmark.get("metrics")
    if not isinstance(metrics, dict):
        return None, [], "metrics is missing or not an object"
    totals = metrics.get("request_totals")
    duration = number(benchmark.get("duration"))
    if not isinstance(totals, dict) or duration is None or duration <= 0:
        return None, [], "duration or metrics.request_totals is missing or not a number"
    completed, failed, incomplete = (count(totals.get(k)) for k in ("successful", "errored", "incomplete"))
    if completed is None or failed is None:
        return None, [], "metrics.request_totals.successful or errored is not a count"
    row: dict[str, Any] = {"duration": duration, "completed": completed, "failed": failed,
                           "num_prompts": completed + failed + (incomplete or 0)}  # fmt: skip
    for tag, column in _RATES.items():
        found = _statistics(metrics, tag)
        if isinstance(found, str):
            return None, [], found
        value = None if found is None else number(found.get("mean"))
        if found is not None and found.get("mean") is not None and value is None:
            return None, [], f"metrics.{tag}.successful.mean is not a number"
        row[column] = value
    if row["output_throughput"] is None or row["output_throughput"] < 0:
        return None, [], "metrics.output_tokens_per_second.successful.mean is missing or negative"
    for tag, (latency, factor) in LATENCIES.items():
        found = _statistics(metrics, tag)
        if isinstance(found, str):
            return None, [], found
        for stat, path in STATISTICS.items():
            raw = _at(found, *path)
            if raw is None:
                continue
            if (value := number(raw)) is None or value < 0:
                return None, [], f"metrics.{tag}.successful.{'.'.join(path)} is not a non-negative number"
            row[f"{stat}_{latency}_ms"] = value * factor
    load = _load(_at(benchmark, "config", "strategy"))
    if isinstance(load, str):
        return None, [], load
    requests = _requests(benchmark)
    if isinstance(requests, str):
        return None, [], requests
    lists, why = _per_request(requests)
    if why is not None:
        return None, [], why
    row.update(lists or {})
    spec_rows, why = _spec(requests)
    if why is not None:
        return None, [], why
    labels = _at(report, "config", "metadata", "labels")
    labels = labels if isinstance(labels, dict) else {}
    backend = _at(report, "config", "spec", "backend") or {}
    model = text(backend.get("model")) if isinstance(backend, dict) else None
    name: str | None = text(labels.get("config")) or (configuration(folder) if folder else None) or model
    named_method, k = method_in(name)
    method = text(labels.get("method")) or named_method
    k_label = labels.get("k", labels.get("num_speculative_tokens"))
    ks = {r["num_spec_tokens"] for r in spec_rows if r.get("num_spec_tokens") is not None}
    k = (
        count(int(k_label))
        if isinstance(k_label, str) and k_label.isdigit()
        else (next(iter(ks)) if len(ks) == 1 else k)
    )
    if spec_rows:
        pooled = add_histograms([r["acceptance_histogram"] for r in spec_rows])
        row.update(spec_columns(pooled, sum(r["num_draft_tokens"] for r in spec_rows), k))
    if method in ("none", "plain", ""):
        method = None
    speculative = bool(spec_rows) or method is not None
    end = number(benchmark.get("end_time"))
    row.update(
        date=local_date(end) if end is not None else None, label=text(labels.get("label")), config=name,
        client=CLIENT, dataset=_dataset(report), model=model,
        backend=text(backend.get("kind")) if isinstance(backend, dict) else None, method=method,
        num_spec_tokens=k if speculative else (k or 0), speculative=speculative, max_concurrency=load[0],
        request_rate=load[1], run_number=None,
    )  # fmt: skip
    requests_rows = [{**r, "model": model, "method": method} for r in spec_rows]
    return row, requests_rows, None


def _dataset(report: Mapping[str, Any]) -> str | None:
    """The first data source: ``synthetic_text prompt_tokens=64 output_tokens=64``, or its source."""
    data = _at(report, "config", "spec", "data")
    first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else None
    if first is None:
        return text(data[0]) if isinstance(data, list) and data else None
    if first.get("source") is not None:
        return text(first["source"])
    sizes = [f"{k}={first[k]}" for k in ("prompt_tokens", "output_tokens") if count(first.get(k)) is not None]
    return text(" ".join([str(first.get("kind", "data")), *sizes]))


def read(src: Source) -> tuple[pl.DataFrame, pl.DataFrame, list[Skipped], int]:
    """Every benchmark of one report as ``schema.BENCH`` rows, the ``requests`` rows, the
    skipped benchmarks, and how many there were."""
    data, cut = read_whole(src)
    try:
        report = json.loads(data.decode("utf-8", errors="replace"))
    except ValueError as exc:
        raise InputError(src.name, f"not complete JSON ({exc}): GuideLLM's report cut short?") from None
    if not isinstance(report, dict) or not isinstance(report.get("benchmarks"), list):
        raise InputError(src.name, "a GuideLLM report without a list of benchmarks")
    version = _at(report, "metadata", "version")
    if version != REPORT_VERSION:
        raise InputError(src.name, f"GuideLLM report version {version!r}: specobs reads version 2 (GuideLLM 0.8)")
    folder = Path(src.name).parent.name if src.path is not None else ""
    skipped: list[Skipped] = [cut] if cut is not None else []
    rows, requests = [], []
    for item, benchmark in enumerate(report["benchmarks"], start=1):
        row, found, why = parse(benchmark, report, re.sub(r"\.json$", "", folder))
        if row is None:
            skipped.append(Skipped(src.name, item, why or "not a benchmark"))
            continue
        rows.append({**row, "source": src.name, "source_line": item})
        requests.extend(found)
    bench = (schema.conform(pl.DataFrame(rows, infer_schema_length=None), schema.BENCH) if rows
             else schema.empty(schema.BENCH))  # fmt: skip
    frame = (pl.DataFrame([{c: r.get(c) for c in schema.REQUESTS} for r in requests], schema=schema.REQUESTS)
             if requests else schema.empty(schema.REQUESTS))  # fmt: skip
    return bench, frame, skipped, len(report["benchmarks"])


def _read(src: Source, fmt: str, progress: Progress = None) -> Read:
    if fmt == FORMAT_FILES:  # recognised, not read: the report again (module docstring)
        return Read(SourceReport(src.name, fmt, None, 0, 0))
    bench, requests, skipped, records = read(src)
    bad = sum(not isinstance(s, Notice) for s in skipped)
    return Read(SourceReport(src.name, fmt, records, 0, bad), skipped, windows=schema.empty(schema.WINDOWS).lazy(),
                requests=requests, bench=bench)  # fmt: skip


READER = Reader((FORMAT, FORMAT_FILES), _sniff, _read, detect_order=5, list_order=10, family=FORMAT)


__all__ = ["CLIENT", "FORMAT", "LATENCIES", "REPORT_VERSION", "STATISTICS", "parse", "read"]
