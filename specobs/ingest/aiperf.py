"""NVIDIA AIPerf's results as serving-benchmark results (``schema.BENCH``), as AIPerf 0.13 writes
them (``aiperf/exporters/metrics_json_exporter.py``, ``post_processors/record_export_jsonl_writer.py``,
``config/artifacts.py``). One ``aiperf profile`` run writes an artifact folder:

- ``profile_export_aiperf.json`` (``<prefix>.json`` with ``--profile-export-prefix``): the run's
  aggregates, one ``{"unit", "avg", "p50", "p90", "p95", "p99", "std", …}`` object per metric, the
  configuration (``input_config``), ``start_time`` / ``end_time`` and, when vLLM sent per-request
  speculative-decoding metrics, ``pooled_spec_decode_acceptance_histogram`` (accepted drafts j →
  verify steps). **One row** per file::

      {"schema_version": "1.4", "aiperf_version": "0.13.0",
       "output_token_throughput": {"unit": "tokens/sec", "avg": 317.9},
       "time_to_first_token": {"unit": "ms", "avg": 187.1, "p50": 106.7, "p90": 466.2, …},
       "benchmark_duration": {"unit": "sec", "avg": 3.21}, "request_count": {"avg": 16.0},
       "input_config": {"models": {"items": [{"name": "tiny-llama"}]},
                        "phases": [{"kind": "profiling", "concurrency": 4, …}], …},
       "total_draft_tokens": {"avg": 451.0},
       "pooled_spec_decode_acceptance_histogram": {"0": 34, "1": 19, "2": 27, "3": 73}, …}

  → ``output_throughput`` 317.9, ``mean_ttft_ms`` 187.1, ``median_ttft_ms`` 106.7,
  ``max_concurrency`` 4, ``spec_decode_num_drafts`` 153 (the histogram's sum),
  ``spec_decode_accepted_tokens`` 0·34 + 1·19 + 2·27 + 3·73 = 292, acceptance length
  1 + 292/153 = 2.91, per position (steps accepting more than i) / steps = 119/153, 100/153, 73/153.

  AIPerf's names differ from vLLM's: its ``inter_token_latency`` is per request
  ``(latency − TTFT) / (output tokens − 1)``, vLLM's **TPOT** (``*_tpot_ms``); its
  ``inter_chunk_latency`` (gaps between streamed chunks, all requests pooled) is vLLM's **ITL**
  (``*_itl_ms``); ``request_latency`` is E2EL. Percentiles p50/p90/p95/p99 as AIPerf computed them.
- ``profile_export.jsonl`` (``<prefix>.jsonl``): one record per request (``metadata``, ``metrics``
  as ``{"value", "unit"}``, ``spec_decode_acceptance`` — AIPerf's ``SpecDecodeAcceptanceRecord``,
  its histogram sparse — and ``error``). Read beside the aggregate file for the per-request
  lists of goodput (latency, TTFT, output tokens, success; profiling phase only, in the order
  sent), and on its own as ``requests`` rows (one per request with a spec-decode record; the
  request key hashes ``x_request_id``). Warm-up records are left out with a notice.
- ``server_metrics_export.json``: AIPerf's scrapes of the server's ``/metrics`` over the profiling
  phase; read beside the aggregate file when it has no per-request speculative data: vLLM's
  ``vllm:spec_decode_*`` counters there (``stats.total``, summed over engines) give the
  ``spec_decode_*`` columns as ``vllm bench serve`` computes them, and mark the server speculative.
- Everything else AIPerf writes (``profile_export_aiperf.csv``, the copies under ``phases/<phase>/``,
  ``phase_manifest.json``, ``inputs.json``, ``server_metrics_export.csv``, ``.aiperf_results_ready.json``,
  ``profile_export_console.txt``, ``logs/aiperf.log``) is recognised and not read (silently: a
  folder of AIPerf runs reads without a line per file).

The **configuration** (``config``) is the artifact folder's name (the folder ``--output-artifact-dir``
names) less a trailing load level or repeat (``-c4``, ``-concurrency4``, ``-rate2.5``, ``-r2``),
so ``ngram-k3-c4/`` and ``ngram-k3-c1-r2/`` are configuration ``ngram-k3``: AIPerf has no place for
user metadata, so give plain and speculative servers folders of different names. A speculative
method named in it as a word (``ngram``, ``eagle3``, … of ``schema.KNOWN_METHODS``) is the method;
k is vLLM's ``num_spec_tokens`` from the per-request records, else the number of per-position
counters, else a word ``k<N>`` of the name. A result is speculative when it holds speculative
data (records, histogram or counters) or names a method; else it is the plain server. The load
level is the profiling phase's ``concurrency`` (``max_concurrency``) or ``request_rate``; ``date`` is
``end_time`` (the benchmark machine's local time, as vLLM writes its own) for the capture join.

A result counts whole or not at all: one whose throughput, duration or request count is missing
or not a number, or whose metric objects have the wrong types, is skipped and named (FILE); a
record of the per-request file that is not JSON or has the wrong types is skipped and named
(FILE:LINE).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl

from specobs import schema
from specobs.errors import InputError, Notice, Skipped, SpecobsError
from specobs.formulas import acceptance_length_or_none, acceptance_rate_or_none
from specobs.ingest.bench_serve import MAX_CHARS, count, number, text
from specobs.ingest.registry import Progress, Read, Reader
from specobs.ingest.request_rows import request_problem
from specobs.ingest.source import Source, open_source, read_whole
from specobs.records import SourceReport

FORMAT = "aiperf"
FORMAT_RECORDS = "aiperf-records"
FORMAT_FILES = "aiperf-files"
#: ``schema.BENCH.client`` of these results.
CLIENT = schema.BENCH_CLIENTS[1]

#: AIPerf metric → the latency of ``schema.BENCH_LATENCIES`` it is (see the module docstring).
LATENCIES = {"time_to_first_token": "ttft", "inter_token_latency": "tpot", "inter_chunk_latency": "itl",
             "request_latency": "e2el"}  # fmt: skip
#: ``schema.BENCH_STATISTICS`` → AIPerf's key of the same statistic.
STATISTICS = {"mean": "avg", "median": "p50", "std": "std", "p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99"}
#: Milliseconds per unit of a time metric.
_MS = {"ms": 1.0, "s": 1000.0, "sec": 1000.0, "us": 1e-3, "ns": 1e-6}
#: AIPerf metric → ``schema.BENCH`` column, per-run values (``avg``).
_TOTALS = {"output_token_throughput": "output_throughput", "request_throughput": "request_throughput",
           "total_token_throughput": "total_token_throughput"}  # fmt: skip


# --- recognising AIPerf's files --------------------------------------------------------------------


def looks_like_results(head: bytes) -> bool:
    """AIPerf's aggregate JSON: its version keys and a run metric, without the server metrics' keys."""
    return (
        head.lstrip()[:1] == b"{" and b'"aiperf_version"' in head and b'"metrics_phase"' not in head
        and any(k in head for k in (b'"request_throughput"', b'"benchmark_duration"', b'"request_count"'))
    )  # fmt: skip


def looks_like_records(head: bytes) -> bool:
    """AIPerf's per-request JSON Lines: the first line an object opening with its ``metadata``."""
    first = head.lstrip().split(b"\n", 1)[0]
    return re.match(rb'\{\s*"metadata"\s*:\s*\{\s*"session_num"', first) is not None and b'"metrics"' in first


_OTHER_MARKS = (
    b"# AIPerf Server Metrics Export",  # server_metrics_export.csv
    b"NVIDIA AIPerf |",  # profile_export_console.txt
)


def looks_like_other_file(head: bytes) -> bool:
    """The rest of an artifact folder (see the module docstring), each by its own first bytes."""
    start = head.lstrip()
    if any(start.startswith(mark) for mark in _OTHER_MARKS) or (b"NVIDIA AIPerf |" in head[:2048]):
        return True
    if start.startswith(b"Metric,avg,min,max"):  # profile_export_aiperf.csv
        return True
    if re.match(rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ - aiperf\.", start):  # logs/aiperf.log
        return True
    if start[:1] != b"{":
        return False
    server = b'"aiperf_version"' in head and b'"metrics_phase"' in head
    phase_server = b'"endpoint_summaries"' in head and b'"benchmark_id"' in head
    manifest = b'"phases"' in head and b'"phase_kind"' in head and b'"metrics_json"' in head
    inputs = re.match(rb'\{\s*"data"\s*:\s*\[\s*\{\s*"session_id"', start) is not None and b'"payloads"' in head
    ready = re.match(rb'\{\s*"ready"\s*:', start) is not None and b'"was_cancelled"' in head  # the ready flag
    return server or phase_server or manifest or inputs or ready


def _sniff(head: bytes) -> str | None:
    if looks_like_results(head):
        return FORMAT
    if looks_like_records(head):
        return FORMAT_RECORDS
    return FORMAT_FILES if looks_like_other_file(head) else None


# --- values ----------------------------------------------------------------------------------------


_LEVEL_SUFFIX = re.compile(r"[-_.](?:c|concurrency|conc|rate|qps|rps|r|run|repeat|trial)\d+(?:\.\d+)?$", re.I)


def configuration(name: str) -> str:
    """A folder name less its trailing load levels and repeats: ``ngram-k3-c4-r2`` → ``ngram-k3``,
    ``tiny-llama-openai-completions-concurrency4`` → ``tiny-llama-openai-completions``."""
    while (stripped := _LEVEL_SUFFIX.sub("", name)) != name and stripped:
        name = stripped
    return name[:MAX_CHARS]


def method_in(name: str | None) -> tuple[str | None, int | None]:
    """(method, k) named as words of a configuration name: ``ngram-k3`` → (``ngram``, 3)."""
    words = re.split(r"[-_\s,/]+", (name or "").lower())
    method = next((w for w in words if w in schema.KNOWN_METHODS), None)
    k = next((int(w[1:]) for w in words if re.fullmatch(r"k\d{1,3}", w)), None)
    return method, k


def spec_columns(histogram: Sequence[int], draft_tokens: int | None, k: int | None) -> dict[str, Any]:
    """The ``spec_decode_*`` columns of pooled per-request records: ``histogram[j]`` verify steps
    accepted exactly j drafts. Drafts are the steps (vLLM counts one draft per request per step),
    accepted tokens ``Σ j·h[j]``, per position i ``Σ_{j>i} h[j] / steps`` (vLLM's accepted-at-i
    over drafts), k positions (the histogram's length − 1 when k is not known)."""
    steps = sum(histogram)
    accepted = sum(j * n for j, n in enumerate(histogram))
    positions = k if k is not None else max(len(histogram) - 1, 0)
    per_position = [sum(histogram[i + 1 :]) / steps for i in range(positions)] if steps else []
    return {
        "spec_decode_num_drafts": steps, "spec_decode_draft_tokens": draft_tokens,
        "spec_decode_accepted_tokens": accepted,
        "spec_decode_acceptance_length": acceptance_length_or_none(accepted, steps),
        "spec_decode_acceptance_rate": acceptance_rate_or_none(accepted, draft_tokens),
        "spec_decode_per_position": per_position,
    }  # fmt: skip


def dense(histogram: Any) -> list[int] | None:
    """A histogram as a dense list: AIPerf's sparse ``{"j": steps}`` or vLLM's list; None when
    it is neither (keys not small non-negative integers, counts not non-negative integers)."""
    if isinstance(histogram, list):
        values = [count(v) for v in histogram]
        return None if any(v is None for v in values) else [int(v) for v in values if v is not None]
    if not isinstance(histogram, dict):
        return None
    pairs: dict[int, int] = {}
    for key, value in histogram.items():
        n = count(value)
        if not (isinstance(key, str) and key.isdigit() and int(key) <= 64) or n is None:
            return None
        pairs[int(key)] = n
    return [pairs.get(j, 0) for j in range(max(pairs, default=-1) + 1)]


def add_histograms(histograms: Sequence[Sequence[int]]) -> list[int]:
    """Element-wise sum of histograms of different lengths."""
    out = [0] * max((len(h) for h in histograms), default=0)
    for histogram in histograms:
        for j, n in enumerate(histogram):
            out[j] += n
    return out


def local_date(unix_seconds: float) -> str:
    """A time as vLLM's ``date`` (``YYYYMMDD-HHMMSS``) in this machine's local time zone, which
    ``analysis.under_load.spans`` reads back in the same zone."""
    return datetime.fromtimestamp(unix_seconds).strftime("%Y%m%d-%H%M%S")


# --- the aggregate file ----------------------------------------------------------------------------


def _metric(record: Mapping[str, Any], tag: str) -> dict[str, Any] | str | None:
    """AIPerf's object of one metric (None when absent), or why it cannot be read."""
    value = record.get(tag)
    if value is None:
        return None
    if not isinstance(value, dict):
        return f"{tag} is not an object"
    return value


def _latencies(record: Mapping[str, Any]) -> dict[str, float] | str:
    """The ``{stat}_{latency}_ms`` columns of AIPerf's latency metrics, or why not."""
    out: dict[str, float] = {}
    for tag, name in LATENCIES.items():
        found = _metric(record, tag)
        if isinstance(found, str):
            return found
        if found is None:
            continue
        factor = _MS.get(str(found.get("unit", "ms")).lower())
        if factor is None:
            return f"{tag} has unit {found.get('unit')!r}, not a time"
        for stat, key in STATISTICS.items():
            if found.get(key) is None:
                continue
            if (value := number(found[key])) is None or value < 0:
                return f"{tag}.{key} is not a non-negative number"
            out[f"{stat}_{name}_ms"] = value * factor
    return out


def _avg(record: Mapping[str, Any], tag: str) -> float | str | None:
    found = _metric(record, tag)
    if found is None or isinstance(found, str):
        return found
    if found.get("avg") is None:
        return None
    value = number(found["avg"])
    return f"{tag}.avg is not a number" if value is None else value


def _profiling_phase(config: Mapping[str, Any]) -> dict[str, Any]:
    """The (first) profiling phase of ``input_config.phases``."""
    phases = config.get("phases")
    if not isinstance(phases, list):
        return {}
    found = [p for p in phases if isinstance(p, dict) and p.get("kind", p.get("name")) == "profiling"]
    return found[0] if found else {}


def _dataset(record: Mapping[str, Any], config: Mapping[str, Any]) -> str | None:
    """A public dataset's name, else the first dataset's type, corpus and lengths (``synthetic
    isl=64 osl=64``; AIPerf's default corpus is Shakespeare's sonnets, text). Prompts drawn from
    its ``random`` corpus are token ids drawn uniformly, vLLM's random dataset's strategy: named
    ``random``, as vLLM names it, so the report warns about them."""
    metadata = record.get("metadata")
    public = metadata.get("dataset") if isinstance(metadata, dict) else None
    if isinstance(public, dict) and text(public.get("name")):
        return text(public["name"])
    datasets = config.get("datasets")
    first = datasets[0] if isinstance(datasets, list) and datasets and isinstance(datasets[0], dict) else {}
    kind = text(first.get("public_dataset") or first.get("type") or first.get("name"))
    prompts: dict[str, Any] = first["prompts"] if isinstance(first.get("prompts"), dict) else {}
    corpus = text(prompts.get("corpus"))
    if corpus is not None and corpus.lower() == "random":
        return "random"
    if corpus is not None:
        kind = f"{kind} corpus={corpus}" if kind else None
    sizes = [f"{k}={number(v.get('mean')):g}" for k, v in prompts.items()
             if isinstance(v, dict) and number(v.get("mean")) is not None]  # fmt: skip
    return text(" ".join([kind, *sizes])) if kind else None


def parse(record: Any, folder: str) -> tuple[dict[str, Any] | None, str | None]:
    """(row, None) or (None, why): one aggregate file as a ``schema.BENCH`` row (without the
    per-request lists and the server's counters, which live in files beside it)."""
    if not isinstance(record, dict):
        return None, "not a JSON object"
    row: dict[str, Any] = {}
    for tag, column in _TOTALS.items():
        value = _avg(record, tag)
        if isinstance(value, str):
            return None, value
        row[column] = value
    duration, completed, failed = (_avg(record, t) for t in ("benchmark_duration", "request_count",
                                                              "error_request_count"))  # fmt: skip
    for value in (duration, completed, failed):
        if isinstance(value, str):
            return None, value
    if row["output_throughput"] is None or duration is None or completed is None:
        return None, "output_token_throughput, benchmark_duration or request_count is missing (no request succeeded?)"
    assert not isinstance(duration, str) and not isinstance(completed, str) and not isinstance(failed, str)
    if duration <= 0 or row["output_throughput"] < 0 or count(completed) is None:
        return None, "benchmark_duration is not positive, or a count is negative"
    row.update(duration=duration, completed=count(completed), failed=count(failed or 0))
    row["num_prompts"] = row["completed"] + (row["failed"] or 0)
    latencies = _latencies(record)
    if isinstance(latencies, str):
        return None, latencies
    row.update(latencies)
    config: dict[str, Any] = record["input_config"] if isinstance(record.get("input_config"), dict) else {}
    phase = _profiling_phase(config)
    concurrency, rate = phase.get("concurrency"), phase.get("request_rate", phase.get("rate"))
    if concurrency is not None and (count(concurrency) is None or concurrency < 1):
        return None, "the profiling phase's concurrency is not a positive integer"
    if rate is not None and ((value := number(rate)) is None or value <= 0):
        return None, "the profiling phase's request_rate is not a positive number"
    models = config.get("models", {}).get("items") if isinstance(config.get("models"), dict) else None
    model = text(models[0].get("name")) if isinstance(models, list) and models and isinstance(models[0], dict) else None
    endpoint: dict[str, Any] = config["endpoint"] if isinstance(config.get("endpoint"), dict) else {}
    end = record.get("end_time")
    try:
        date = datetime.fromisoformat(end).strftime("%Y%m%d-%H%M%S") if isinstance(end, str) else None
    except ValueError:
        return None, "end_time is not an ISO time"
    run_info: dict[str, Any] = record["run_info"] if isinstance(record.get("run_info"), dict) else {}
    name = configuration(folder) if folder else model
    method, k = method_in(name)
    histogram = record.get("pooled_spec_decode_acceptance_histogram")
    if histogram is not None:
        pooled = dense(histogram)
        if pooled is None:
            return None, "pooled_spec_decode_acceptance_histogram is not a map of counts"
        drafted = _avg(record, "total_draft_tokens")
        if isinstance(drafted, str) or (drafted is not None and count(drafted) is None):
            return None, "total_draft_tokens is not a count"
        row.update(spec_columns(pooled, count(drafted) if drafted is not None else None, None))
    row.update(
        date=date, label=None, config=name, client=CLIENT, dataset=_dataset(record, config), model=model,
        backend=text(endpoint.get("type")), method=method, num_spec_tokens=k, speculative=None,
        max_concurrency=count(concurrency), request_rate=number(rate), run_number=count(run_info.get("trial")),
    )  # fmt: skip
    return row, None


# --- the per-request file --------------------------------------------------------------------------


def _value(metrics: Mapping[str, Any], tag: str) -> Any:
    entry = metrics.get(tag)
    return entry.get("value") if isinstance(entry, dict) else None


def _request(record: Any) -> dict[str, Any] | str:
    """One per-request record: its phase, start, latency and TTFT (s), output tokens, success,
    id and spec-decode columns (vLLM's names), or why it cannot be read."""
    if not isinstance(record, dict):
        return "not a JSON object"
    metadata, metrics = record.get("metadata"), record.get("metrics")
    if not isinstance(metadata, dict) or not isinstance(metrics, dict):
        return "metadata or metrics is not an object"
    out: dict[str, Any] = {"phase": text(metadata.get("benchmark_phase") or metadata.get("phase_kind")),
                           "start": count(metadata.get("request_start_ns")), "ok": record.get("error") is None,
                           "id": text(metadata.get("x_request_id"))}  # fmt: skip
    for tag, column, factor in (("request_latency", "latency", 1e-3), ("time_to_first_token", "ttft", 1e-3)):
        raw = _value(metrics, tag)
        value = number(raw)
        if (raw is not None and value is None) or (value is not None and value < 0):
            return f"metrics.{tag} is not a non-negative number"
        out[column] = None if value is None else value * factor
    tokens = _value(metrics, "output_sequence_length")
    if tokens is not None and count(tokens) is None:
        return "metrics.output_sequence_length is not a count"
    out["tokens"] = count(tokens)
    spec = record.get("spec_decode_acceptance")
    if spec is not None:
        if not isinstance(spec, dict):
            return "spec_decode_acceptance is not an object"
        histogram = dense(spec.get("acceptance_histogram"))
        if histogram is None:
            return "spec_decode_acceptance.acceptance_histogram is not a map of counts"
        k = spec.get("num_spec_tokens")
        if isinstance(k, int) and not isinstance(k, bool) and len(histogram) < k + 1:
            histogram += [0] * (k + 1 - len(histogram))
        out["spec"] = {
            "num_spec_tokens": k, "num_spec_steps": spec.get("num_spec_steps"),
            "num_draft_tokens": spec.get("num_draft_tokens"),
            "num_accepted_tokens": spec.get("num_accepted_draft_tokens"), "acceptance_histogram": histogram,
            "per_step_drafted": spec.get("per_step_drafted"), "per_step_accepted": spec.get("per_step_accepted"),
            "mean_acceptance_length": spec.get("mean_acceptance_length"),
            "num_output_tokens": spec.get("completion_tokens"),
        }  # fmt: skip
    return out


def read_requests(data: bytes, name: str) -> tuple[list[dict[str, Any]], list[Skipped], int]:
    """The profiling-phase requests of a per-request file in the order sent, the records skipped
    (and a notice for the warm-up ones), and the number of lines."""
    requests: list[tuple[int, dict[str, Any]]] = []
    skipped: list[Skipped] = []
    warmup = 0
    lines = data.decode("utf-8", errors="replace").split("\n")
    for number_, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            skipped.append(Skipped(name, number_, "not valid JSON"))
            continue
        found = _request(record)
        if isinstance(found, str):
            skipped.append(Skipped(name, number_, found))
            continue
        if found["phase"] not in (None, "profiling"):
            warmup += 1
            continue
        if found.get("spec") is not None and (why := request_problem(found["spec"])) is not None:
            skipped.append(Skipped(name, number_, f"spec_decode_acceptance: {why}"))
            continue
        requests.append((number_, found))
    if warmup:
        skipped.append(Notice(name, None, f"{warmup} warm-up record(s) (benchmark_phase not profiling): left out"))
    requests.sort(key=lambda item: (item[1]["start"] is None, item[1]["start"] or 0, item[0]))
    total = sum(1 for line in lines if line.strip())
    return [r for _, r in requests], skipped, total


def request_lists(requests: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The per-request columns of ``schema.BENCH`` (failed requests: 0 s, 0 tokens, not ok, as
    vLLM's client keeps them), or None when a successful request lacks a value."""
    latency, ttft, tokens, ok = [], [], [], []
    for request in requests:
        if request["ok"] and (request["latency"] is None or request["ttft"] is None or request["tokens"] is None):
            return None
        latency.append(request["latency"] or 0.0)
        ttft.append(request["ttft"] or 0.0)
        tokens.append(request["tokens"] or 0)
        ok.append(bool(request["ok"]))
    return {"request_latency_s": latency, "request_ttft_s": ttft, "request_output_tokens": tokens, "request_ok": ok}


def request_rows(requests: Sequence[Mapping[str, Any]], model: str | None, method: str | None) -> pl.DataFrame:
    """``schema.REQUESTS`` rows of the requests that carry vLLM's speculative metrics."""
    rows = [
        {"model": model, "method": method, schema.REQUEST_KEY: schema.request_key(r["id"]),
         "finish_reason": None if r["ok"] else "error", "num_output_tokens": r["tokens"],
         **{c: v for c, v in r["spec"].items() if c in schema.REQUESTS and v is not None}}
        for r in requests if r.get("spec") is not None and r.get("id") is not None
    ]  # fmt: skip
    return pl.DataFrame(rows, schema=schema.REQUESTS) if rows else schema.empty(schema.REQUESTS)


# --- the server's counters -------------------------------------------------------------------------


def server_counters(record: Any) -> dict[str, Any] | None:
    """``spec_decode_*`` columns from vLLM's counters in ``server_metrics_export.json`` (totals
    over the profiling phase, summed over engines), or None when the server has none."""
    metrics = record.get("metrics") if isinstance(record, dict) else None
    if not isinstance(metrics, dict) or "vllm:spec_decode_num_drafts" not in metrics:
        return None

    def totals(name: str) -> dict[str | None, float]:
        out: dict[str | None, float] = {}
        family = metrics.get(name)
        series = family.get("series") if isinstance(family, dict) else None
        for one in series if isinstance(series, list) else []:
            stats = one.get("stats") if isinstance(one, dict) else None
            labels: dict[str, Any] = (
                one["labels"] if isinstance(one, dict) and isinstance(one.get("labels"), dict) else {}
            )
            value = number(stats.get("total")) if isinstance(stats, dict) else None
            if value is None:
                raise SpecobsError(f"{name}: a series without a numeric stats.total")
            out[labels.get("position")] = out.get(labels.get("position"), 0.0) + value
        return out

    drafts = sum(totals("vllm:spec_decode_num_drafts").values())
    drafted = sum(totals("vllm:spec_decode_num_draft_tokens").values())
    accepted = sum(totals("vllm:spec_decode_num_accepted_tokens").values())
    per_pos = totals("vllm:spec_decode_num_accepted_tokens_per_pos")
    positions = sorted((int(p), v) for p, v in per_pos.items() if p is not None and str(p).isdigit())
    return {
        "spec_decode_num_drafts": int(drafts), "spec_decode_draft_tokens": int(drafted),
        "spec_decode_accepted_tokens": int(accepted),
        "spec_decode_acceptance_length": acceptance_length_or_none(accepted, drafts),
        "spec_decode_acceptance_rate": acceptance_rate_or_none(accepted, drafted),
        "spec_decode_per_position": [v / drafts for _, v in positions] if drafts else [],
    }  # fmt: skip


# --- reading ---------------------------------------------------------------------------------------


def _sibling(path: Path, names: Sequence[str]) -> Source | None:
    for name in names:
        for candidate in (path.parent / name, path.parent / f"{name}.gz"):
            if candidate.is_file():
                try:
                    return open_source(str(candidate))
                except InputError:
                    return None
    return None


def _artifact_folder(path: Path) -> str:
    """The artifact folder's name (``phases/<phase>/`` files belong to the folder above)."""
    return path.parent.name


def _records_name(path: Path) -> str:
    stem = path.name.removesuffix(".gz").removesuffix(".json")
    return "profile_export.jsonl" if stem == "profile_export_aiperf" else f"{stem}.jsonl"


def _server_name(path: Path) -> str:
    stem = path.name.removesuffix(".gz").removesuffix(".json")
    return "server_metrics_export.json" if stem == "profile_export_aiperf" else f"{stem}_server_metrics.json"


def _phase_copy(name: str) -> bool:
    parts = Path(name).parts
    return len(parts) >= 3 and parts[-3] == "phases"


def read_result(src: Source) -> tuple[pl.DataFrame, pl.DataFrame | None, list[Skipped]]:
    """One aggregate file, completed from the per-request and server-metrics files beside it:
    its ``schema.BENCH`` row (none when it cannot count), and the notices."""
    data, cut = read_whole(src)
    skipped: list[Skipped] = [cut] if cut is not None else []
    try:
        record = json.loads(data.decode("utf-8", errors="replace"))
    except ValueError as exc:
        raise InputError(src.name, f"not complete JSON ({exc}): AIPerf's results cut short?") from None
    path = Path(src.name)
    row, why = parse(record, _artifact_folder(path) if src.path is not None else "")
    if row is None:
        return schema.empty(schema.BENCH), None, [*skipped, Skipped(src.name, None, why or "not a result")]
    requests: list[dict[str, Any]] = []
    if src.path is not None and (records := _sibling(path, [_records_name(path)])) is not None:
        requests, _, _ = read_requests(read_whole(records)[0], records.name)
        lists = request_lists(requests)
        if lists is None:
            skipped.append(Notice(src.name, None, "per-request records without latency or TTFT: no goodput"))
        else:
            row.update(lists)
        ks = {r["spec"]["num_spec_tokens"] for r in requests if r.get("spec") is not None}
        k = next(iter(ks)) if len(ks) == 1 else None
        if k is not None:
            row["num_spec_tokens"] = k
            if row.get("spec_decode_num_drafts") is not None:
                pooled = add_histograms([r["spec"]["acceptance_histogram"] for r in requests if r.get("spec")])
                row.update(spec_columns(pooled, row["spec_decode_draft_tokens"], k))
    if row.get("spec_decode_num_drafts") is None and src.path is not None:
        server = _sibling(path, [_server_name(path)])
        if server is not None:
            try:
                counters = server_counters(json.loads(read_whole(server)[0].decode("utf-8", errors="replace")))
            except (ValueError, SpecobsError) as exc:
                skipped.append(Notice(server.name, None, f"the server's counters are not readable ({exc})"))
                counters = None
            if counters is not None:
                row.update(counters)
                if row["num_spec_tokens"] is None and counters["spec_decode_per_position"]:
                    row["num_spec_tokens"] = len(counters["spec_decode_per_position"])
    speculative = row.get("spec_decode_num_drafts") is not None or row["method"] is not None
    row["speculative"] = speculative
    if not speculative and row["num_spec_tokens"] is None:
        row["num_spec_tokens"] = 0
    bench = schema.conform(pl.DataFrame([{**row, "source": src.name, "source_line": None}],
                                        infer_schema_length=None), schema.BENCH)  # fmt: skip
    return bench, None, skipped


def _read(src: Source, fmt: str, progress: Progress = None) -> Read:
    if fmt == FORMAT_FILES or _phase_copy(src.name):  # recognised, not read (the module docstring says why)
        return Read(SourceReport(src.name, fmt, None, 0, 0))
    if fmt == FORMAT_RECORDS:
        data, cut = read_whole(src)
        requests, skipped, lines = read_requests(data, src.name)
        folder = configuration(_artifact_folder(Path(src.name))) if src.path is not None else None
        method, _ = method_in(folder)
        frame = request_rows(requests, None, method)
        skipped = ([cut] if cut is not None else []) + skipped
        bad = sum(not isinstance(s, Notice) for s in skipped)
        return Read(SourceReport(src.name, fmt, lines, 0, bad), skipped,
                    windows=schema.empty(schema.WINDOWS).lazy(), requests=frame)  # fmt: skip
    bench, _, skipped = read_result(src)
    bad = sum(not isinstance(s, Notice) for s in skipped)
    return Read(SourceReport(src.name, fmt, 1, 0, bad), skipped, bench=bench)


READER = Reader((FORMAT, FORMAT_RECORDS, FORMAT_FILES), _sniff, _read, detect_order=5, list_order=9, family=FORMAT)


__all__ = [
    "CLIENT", "FORMAT", "LATENCIES", "STATISTICS", "add_histograms", "configuration", "dense", "local_date",
    "method_in", "parse", "read_requests", "request_lists", "server_counters", "spec_columns",
]  # fmt: skip
