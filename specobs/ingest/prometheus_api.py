"""Windows from a Prometheus server (or Thanos, Mimir: anything with the HTTP query API).

The fleet path: specobs does not collect the fleet itself; Prometheus already holds every
engine's counters. For the range ``[now − since, now]`` this asks ``/api/v1/query_range`` for
the raw spec-decode counters (vLLM's ``vllm:spec_decode_*_total``, or specobs' own
``specobs_*_total`` where vLLM's are missing) at ``step`` resolution, optionally narrowed by a
``--match`` label selector, and turns each series into windows: the difference between
consecutive samples (a counter that falls restarted, and the window is its new value). The
first sample of each series is the baseline, not a window, so totals are exactly what was
counted inside the range. specobs' timing histograms become timed windows per batch bucket.
"""

from __future__ import annotations

import itertools
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from typing import Any, TypedDict

import polars as pl

from specobs import schema
from specobs.errors import InputError

FORMAT = "prometheus-api"
VLLM = {
    "num_drafts": "vllm:spec_decode_num_drafts_total",
    "num_draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "num_accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
    "per_pos": "vllm:spec_decode_num_accepted_tokens_per_pos_total",
}
SPECOBS = {
    "num_drafts": "specobs_drafts_total",
    "num_draft_tokens": "specobs_draft_tokens_total",
    "num_accepted_tokens": "specobs_accepted_tokens_total",
    "per_pos": "specobs_accepted_tokens_per_position_total",
}
TIMINGS = {"draft_seconds": "specobs_draft_seconds", "verify_seconds": "specobs_verify_seconds",
           "step_seconds": "specobs_step_seconds"}  # fmt: skip
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """``90s``, ``30m``, ``6h``, ``2d``, ``1w`` → seconds."""
    match = _DURATION.match(text.strip())
    if not match:
        raise InputError(text, "not a duration (use e.g. 30m, 6h, 2d)")
    return float(match.group(1)) * _UNITS[match.group(2)]


class Series(TypedDict):
    """One series of a ``query_range`` result: its labels and its ``[unix_time, "value"]`` samples."""

    metric: dict[str, str]
    values: list[list[float | str]]


#: A counter window: the labels instance, job, model_name, engine, method; then its end time.
_CounterKey = tuple[str, str, str | None, str | None, str | None, float]
#: A timing window: the labels model_name, engine, method, batch_size_bucket; then its end time.
_TimingKey = tuple[str | None, str | None, str | None, str | None, float]


class PrometheusAPI:
    """A small client for ``/api/v1/query_range``."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def query_range(self, query: str, start: float, end: float, step: float) -> list[Series]:
        params = urllib.parse.urlencode({"query": query, "start": start, "end": end, "step": step})
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/query_range?{params}", timeout=self.timeout) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:200]
            raise InputError(self.url, f"Prometheus rejected the query {query!r} ({exc.code}: {detail})") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise InputError(self.url, f"cannot reach Prometheus ({getattr(exc, 'reason', exc)})") from None
        if body.get("status") != "success":
            raise InputError(self.url, f"Prometheus error: {body.get('error', body)}")
        result: list[Series] = body["data"]["result"]
        return result


def _selector(metric: str, match: str) -> str:
    inner = match.strip().removeprefix("{").removesuffix("}").strip()
    return f"{metric}{{{inner}}}" if inner else metric


def _diffs(values: list[list[float | str]]) -> list[tuple[float, float, float]]:
    """``(start, end, increase)`` between consecutive samples; a fall is a restart."""
    out = []
    points = [(float(t), float(v)) for t, v in values]
    for (t0, v0), (t1, v1) in itertools.pairwise(points):
        out.append((t0, t1, v1 - v0 if v1 >= v0 else v1))
    return out


def load(url: str, *, since: str = "6h", step: str | None = None, match: str = "") -> pl.DataFrame:
    """Windows for ``[now − since, now]`` (see the module docstring)."""
    api = PrometheusAPI(url)
    end = time.time()
    span = parse_duration(since)
    step_seconds = parse_duration(step) if step else max(15.0, span / 1000)
    start = end - span
    counters = VLLM
    probe = api.query_range(_selector(VLLM["num_drafts"], match), start, end, step_seconds)
    if not probe:
        counters = SPECOBS
    windows: dict[_CounterKey, dict[str, Any]] = defaultdict(dict)
    for column, metric in counters.items():
        results = (
            probe
            if metric == VLLM["num_drafts"]
            else api.query_range(_selector(metric, match), start, end, step_seconds)
        )
        for series in results:
            labels = series["metric"]
            key = (labels.get("instance", ""), labels.get("job", ""), labels.get("model_name"), labels.get("engine"),
                   labels.get("method"))  # fmt: skip
            for t0, t1, inc in _diffs(series["values"]):
                row = windows[(*key, t1)]
                row.update(start_ts=t0, end_ts=t1, key=key)
                if column == "per_pos":
                    row.setdefault("per_pos", {})[int(labels.get("position", 0))] = round(inc)
                else:
                    row[column] = round(inc)
    rows = []
    source = f"{url} {match}".strip()
    for (instance, job, model, engine, method, _), row in sorted(windows.items(), key=lambda kv: kv[0][-1]):
        per_pos = row.get("per_pos")
        rows.append(
            {
                "start_ts": row["start_ts"],
                "end_ts": row["end_ts"],
                "source": source,
                "source_format": FORMAT,
                "run_id": f"{job}/{instance}".strip("/") or None,
                "engine": int(engine) if engine and engine.isdigit() else None,
                "model": model,
                "method": method,
                "num_drafts": row.get("num_drafts"),
                "num_draft_tokens": row.get("num_draft_tokens"),
                "num_accepted_tokens": row.get("num_accepted_tokens"),
                "num_accepted_tokens_per_pos": [per_pos[i] for i in sorted(per_pos)] if per_pos else None,
                "num_spec_tokens": len(per_pos) if per_pos else None,
                "counters": "cumulative",
            }
        )
    rows += _timing_windows(api, match, start, end, step_seconds, source)
    frame = pl.DataFrame(rows, schema=schema.WINDOWS) if rows else schema.empty(schema.WINDOWS)
    return frame


def _timing_windows(
    api: PrometheusAPI, match: str, start: float, end: float, step: float, source: str
) -> list[dict[str, Any]]:
    """Timed windows per batch bucket from specobs' histograms (sums and counts)."""
    buckets: dict[_TimingKey, dict[str, Any]] = defaultdict(dict)
    for column, metric in TIMINGS.items():
        for part in ("sum", "count"):
            for series in api.query_range(_selector(f"{metric}_{part}", match), start, end, step):
                labels = series["metric"]
                key = (labels.get("model_name"), labels.get("engine"), labels.get("method"),
                       labels.get("batch_size_bucket"))  # fmt: skip
                for t0, t1, inc in _diffs(series["values"]):
                    row = buckets[(*key, t1)]
                    row.update(start_ts=t0, end_ts=t1)
                    row[f"{column}_{part}"] = inc
    rows = []
    for (model, engine, method, bucket, _), row in sorted(buckets.items(), key=lambda kv: kv[0][-1]):
        steps = round(row.get("step_seconds_count") or row.get("verify_seconds_count") or 0)
        if not steps:
            continue
        low = int(bucket.split("-")[0].rstrip("+")) if bucket and bucket[0].isdigit() else None
        rows.append(
            {
                "start_ts": row["start_ts"], "end_ts": row["end_ts"], "source": source, "source_format": FORMAT,
                "engine": int(engine) if engine and engine.isdigit() else None, "model": model, "method": method,
                "batch_size": low, "num_timed_steps": steps, "counters": "cumulative",
                "draft_seconds": row.get("draft_seconds_sum"), "verify_seconds": row.get("verify_seconds_sum"),
                "step_seconds": row.get("step_seconds_sum"),
            }
        )  # fmt: skip
    return rows
