"""Windows from a Prometheus server (or Thanos, Mimir: anything with the HTTP query API).

The fleet path: specobs does not collect the fleet itself; Prometheus already holds every
engine's counters. For the range ``[now − since, now]`` this asks ``/api/v1/query_range`` for
the raw spec-decode counters (vLLM's ``vllm:spec_decode_*_total``, or specobs' own
``specobs_*_total`` where vLLM's are missing) at ``step`` resolution, optionally narrowed by a
``--match`` label selector, and turns each series into windows: the difference between
consecutive samples (a counter that falls, or whose ``_created`` time changes, restarted,
and the window is its new value). specobs' timing histograms become timed windows per batch
bucket.

The first sample of a series: specobs' exporter and vLLM's client publish ``*_created``
series (the Unix time each counter was created). A counter created inside the range counts
from zero, so its first sample is a window from its creation. Otherwise (no ``_created``
series, or created before the range) the first sample is the baseline, not a window, and
:func:`read` returns a notice per counter saying so and how much may be missed: at most the
first samples' values.
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
from collections.abc import Callable
from typing import Any, TypedDict

import polars as pl

from specobs import schema
from specobs.errors import InputError, Notice, Skipped
from specobs.ingest import specobs_metrics
from specobs.vllm import metric_series as vllm_metrics

FORMAT = "prometheus-api"
#: vLLM's counters (:data:`specobs.vllm.metric_series.SPEC_DECODE`).
VLLM = vllm_metrics.SPEC_DECODE
#: specobs' own counters, where vLLM's are missing: windows column → sample name (from the family
#: table, :mod:`specobs.ingest.specobs_metrics`, that the exporters publish).
SPECOBS = {
    "num_drafts": specobs_metrics.DRAFTS.total,
    "num_draft_tokens": specobs_metrics.DRAFT_TOKENS.total,
    "num_accepted_tokens": specobs_metrics.ACCEPTED_TOKENS.total,
    "per_pos": specobs_metrics.ACCEPTED_PER_POSITION.total,
}
#: specobs' timing summaries: windows column → family name (``_sum`` and ``_count`` are read).
TIMINGS = {
    "draft_seconds": specobs_metrics.DRAFT_SECONDS.name,
    "verify_seconds": specobs_metrics.VERIFY_SECONDS.name,
    "step_seconds": specobs_metrics.STEP_SECONDS.name,
}
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


#: Labels of a series without its name: how a counter finds its ``_created`` series.
_SeriesKey = tuple[tuple[str, str], ...]


def _series_key(labels: dict[str, str]) -> _SeriesKey:
    return tuple(sorted((k, v) for k, v in labels.items() if k not in ("__name__", "le")))


def created_metric(metric: str) -> str:
    """``x_total`` → ``x_created`` (``x_sum``, ``x_count`` of a histogram → ``x_created``)."""
    for suffix in ("_total", "_sum", "_count"):
        if metric.endswith(suffix):
            return metric.removesuffix(suffix) + "_created"
    return metric + "_created"


def _created(
    api: PrometheusAPI, metric: str, match: str, start: float, end: float, step: float
) -> dict[_SeriesKey, dict[float, float]]:
    """Each series' ``_created`` samples (time → creation time), by its labels."""
    out: dict[_SeriesKey, dict[float, float]] = {}
    for series in api.query_range(_selector(created_metric(metric), match), start, end, step):
        out[_series_key(series["metric"])] = {float(t): float(v) for t, v in series["values"]}
    return out


class _Baselines:
    """Series whose first sample was taken as the baseline, per metric (for the notices)."""

    def __init__(self) -> None:
        self.by_metric: dict[str, list[tuple[float, bool]]] = defaultdict(list)

    def add(self, metric: str, value: float, has_created: bool) -> None:
        self.by_metric[metric].append((value, has_created))

    def notices(self, source: str) -> list[Skipped]:
        out: list[Skipped] = []
        for metric, baselines in self.by_metric.items():
            missed = sum(v for v, _ in baselines)
            if not missed:
                continue  # a baseline of zero misses nothing
            without = sum(1 for _, has in baselines if not has)
            why = (
                "no _created series"
                if without == len(baselines)
                else "created before the range"
                if not without
                else f"{without} without a _created series, the others created before the range"
            )
            out.append(
                Notice(
                    source,
                    None,
                    f"{metric}: the first sample in the range of {len(baselines)} series ({why}) taken as the "
                    f"baseline; up to {missed:,.0f} counted before it is not in the report",
                )
            )
        return out


def _diffs(
    values: list[list[float | str]],
    created: dict[float, float] | None = None,
    start: float | None = None,
    baseline: Callable[[float], None] | None = None,
) -> list[tuple[float, float, float]]:
    """``(start, end, increase)`` between consecutive samples; a fall, or a new ``_created``
    time, is a restart. With ``created`` (the series' ``_created`` samples) a counter created
    at or after ``start`` counts from zero: its first sample is a window from its creation.
    Otherwise ``baseline`` is called with the first sample's value."""
    out: list[tuple[float, float, float]] = []
    points = [(float(t), float(v)) for t, v in values]
    if not points:
        return out
    created = created or {}
    first_created = created.get(points[0][0], next(iter(created.values()), None))
    if first_created is not None and start is not None and first_created >= start:
        out.append((min(first_created, points[0][0]), points[0][0], points[0][1]))
    elif baseline is not None:
        baseline(points[0][1])
    for (t0, v0), (t1, v1) in itertools.pairwise(points):
        c0, c1 = created.get(t0), created.get(t1)
        recreated = c0 is not None and c1 is not None and c1 > c0
        out.append((t0, t1, v1 - v0 if v1 >= v0 and not recreated else v1))
    return out


def read(
    url: str,
    *,
    since: str = "6h",
    step: str | None = None,
    match: str = "",
    now: float | None = None,
    created: bool = True,
) -> tuple[pl.DataFrame, list[Skipped]]:
    """Windows for ``[now − since, now]`` and the notices of the baselines assumed (see the module
    docstring); ``created=False`` ignores the ``_created`` series (every first sample is a baseline)."""
    api = PrometheusAPI(url)
    end = time.time() if now is None else now
    span = parse_duration(since)
    step_seconds = parse_duration(step) if step else max(15.0, span / 1000)
    start = end - span
    counters = VLLM
    probe = api.query_range(_selector(VLLM["num_drafts"], match), start, end, step_seconds)
    if not probe:
        counters = SPECOBS
    windows: dict[_CounterKey, dict[str, Any]] = defaultdict(dict)
    baselines = _Baselines()
    for column, metric in counters.items():
        results = (
            probe
            if metric == VLLM["num_drafts"]
            else api.query_range(_selector(metric, match), start, end, step_seconds)
        )
        born = _created(api, metric, match, start, end, step_seconds) if results and created else {}
        for series in results:
            labels = series["metric"]
            key = (labels.get("instance", ""), labels.get("job", ""), labels.get("model_name"), labels.get("engine"),
                   labels.get("method"))  # fmt: skip
            own = born.get(_series_key(labels))
            note = _baseline_recorder(baselines, metric, own is not None)
            for t0, t1, inc in _diffs(series["values"], own, start, note):
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
    rows += _timing_windows(api, match, start, end, step_seconds, source, created=created)
    frame = pl.DataFrame(rows, schema=schema.WINDOWS) if rows else schema.empty(schema.WINDOWS)
    return frame, baselines.notices(source)


def _baseline_recorder(baselines: _Baselines, metric: str, has_created: bool) -> Callable[[float], None]:
    return lambda value: baselines.add(metric, value, has_created)


def _timing_windows(
    api: PrometheusAPI, match: str, start: float, end: float, step: float, source: str, *, created: bool = True
) -> list[dict[str, Any]]:
    """Timed windows per batch bucket from specobs' histograms (sums and counts)."""
    buckets: dict[_TimingKey, dict[str, Any]] = defaultdict(dict)
    for column, metric in TIMINGS.items():
        for part in ("sum", "count"):
            results = api.query_range(_selector(f"{metric}_{part}", match), start, end, step)
            born = _created(api, metric, match, start, end, step) if results and created else {}
            for series in results:
                labels = series["metric"]
                key = (labels.get("model_name"), labels.get("engine"), labels.get("method"),
                       labels.get("batch_size_bucket"))  # fmt: skip
                for t0, t1, inc in _diffs(series["values"], born.get(_series_key(labels)), start):
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
