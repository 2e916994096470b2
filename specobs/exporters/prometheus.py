"""specobs metrics for Prometheus, on a ``prometheus_client`` registry (pass a fresh one in tests).

Names and labels are a contract (docs/exporters.md, rules in exporters/prometheus/):

- counters ``specobs_steps_total``, ``specobs_drafts_total``, ``specobs_draft_tokens_total``,
  ``specobs_accepted_tokens_total``, ``specobs_accepted_tokens_per_position_total{position}``,
  ``specobs_drafts_per_position_total{position}`` (drafts that reached the position: the
  denominator of the per-position rate), ``specobs_generated_tokens_total``;
- histograms ``specobs_draft_seconds``, ``specobs_verify_seconds``, ``specobs_step_seconds``
  (with ``batch_size_bucket``) and ``specobs_accepted_tokens_per_draft``;
- gauges ``specobs_predicted_speedup`` (of the configuration that runs now),
  ``specobs_recommended_num_speculative_tokens``,
  ``specobs_cost_ratio``, ``specobs_speculative_config_info``;
- ``specobs_dropped_events_total``, ``specobs_hook_errors_total`` (read from the recorder at scrape).

Labels are ``model_name``, ``engine``, ``method`` (+ ``position``, ``batch_size_bucket``): all
bounded. Never request ids or prompt text.

The accepted-tokens-per-draft histogram is rebuilt from per-position counts — a draft with
exactly j accepted tokens is one that reached position j but not j+1 — and kept by a snapshot
collector, because observing it draft by draft would cost a call per draft.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

LABELS = ("model_name", "engine", "method")
TIME_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
MAX_POSITIONS = 16


def batch_size_bucket(batch: int | None) -> str:
    """``1``, ``2-3``, ``4-7`` … ``64-127``, ``128+`` (the same power-of-two buckets as reports)."""
    if not batch or batch < 1:
        return "unknown"
    if batch >= 128:
        return "128+"
    low = 1 << (int(batch).bit_length() - 1)
    return "1" if low == 1 else f"{low}-{low * 2 - 1}"


def drafts_per_position(row: dict[str, Any], drafts: int, k: int | None) -> Sequence[int]:
    """Drafts that reached each position: ``num_drafts_per_pos``, or for rows without it (logs,
    older captures) every draft at each position below k, as the analysis counts them. Nothing
    for rows without per-position counts, so they never dilute a per-position rate."""
    reached = row.get("num_drafts_per_pos")
    if reached is not None:
        return reached
    per_pos = row.get("num_accepted_tokens_per_pos")
    if per_pos is None:
        return []
    return [drafts] * max(k or 0, len(per_pos))


class _AcceptedPerDraft(Collector):
    """Histogram of accepted tokens per draft, from per-position counts (snapshot collector)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, ...], list[int]] = defaultdict(lambda: [0] * (MAX_POSITIONS + 2))
        self._sums: dict[tuple[str, ...], int] = defaultdict(int)

    def add(self, labels: tuple[str, ...], drafts: int, per_pos: Sequence[int]) -> None:
        reached = [drafts, *per_pos]
        with self._lock:
            counts = self._counts[labels]
            for j in range(len(reached)):
                exactly = reached[j] - (reached[j + 1] if j + 1 < len(reached) else 0)
                counts[min(j, MAX_POSITIONS + 1)] += max(exactly, 0)
            self._sums[labels] += sum(per_pos)

    def collect(self) -> Iterable[HistogramMetricFamily]:
        family = HistogramMetricFamily(
            "specobs_accepted_tokens_per_draft",
            "Accepted draft tokens per draft (bonus token not counted).",
            labels=LABELS,
        )
        with self._lock:
            for labels, counts in self._counts.items():
                cumulative, buckets = 0, []
                for j in range(MAX_POSITIONS + 1):
                    cumulative += counts[j]
                    buckets.append((str(j), cumulative))
                buckets.append(("+Inf", cumulative + counts[MAX_POSITIONS + 1]))
                family.add_metric(list(labels), buckets, self._sums[labels])
        yield family


class _Health(Collector):
    """``specobs_dropped_events_total`` and ``specobs_hook_errors_total``, read at scrape time."""

    def __init__(self, counters: Callable[[], dict[str, int]]) -> None:
        self._counters = counters

    def collect(self) -> Iterable[CounterMetricFamily]:
        values = self._counters() or {}
        yield CounterMetricFamily(
            "specobs_dropped_events", "Rows specobs dropped instead of blocking the engine.",
            value=values.get("dropped_events", 0),
        )  # fmt: skip
        yield CounterMetricFamily(
            "specobs_hook_errors", "Failures inside specobs hooks (counted, never raised into vLLM).",
            value=values.get("hook_errors", 0),
        )  # fmt: skip


class PrometheusMetrics:
    """The specobs instruments on one registry; ``observe_step`` feeds them from a steps row."""

    _counter_cls = Counter
    _histogram_cls = Histogram
    _gauge_cls = Gauge

    def __init__(
        self, registry: CollectorRegistry | None = None, health: Callable[[], dict[str, int]] | None = None
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry

        def counter(name: str, doc: str, labels: Sequence[str] = LABELS) -> Counter:
            return self._counter_cls(name, doc, list(labels), registry=r)

        def histogram(name: str, doc: str) -> Histogram:
            return self._histogram_cls(name, doc, [*LABELS, "batch_size_bucket"], buckets=TIME_BUCKETS, registry=r)

        self.steps = counter("specobs_steps", "Engine steps observed.")
        self.drafts = counter("specobs_drafts", "Drafts verified.")
        self.draft_tokens = counter("specobs_draft_tokens", "Draft tokens proposed and verified.")
        self.accepted = counter("specobs_accepted_tokens", "Draft tokens accepted.")
        self.accepted_per_position = counter(
            "specobs_accepted_tokens_per_position", "Drafts whose first position+1 tokens were accepted.",
            [*LABELS, "position"],
        )  # fmt: skip
        self.drafts_per_position = counter(
            "specobs_drafts_per_position", "Drafts that reached the position (drafted more than position tokens).",
            [*LABELS, "position"],
        )  # fmt: skip
        self.generated = counter("specobs_generated_tokens", "Tokens generated.")
        self.draft_seconds = histogram("specobs_draft_seconds", "Time in the proposer per step.")
        self.verify_seconds = histogram("specobs_verify_seconds", "Target forward and rejection sampling per step.")
        self.step_seconds = histogram("specobs_step_seconds", "Whole engine step.")
        self.predicted_speedup = self._gauge_cls(
            "specobs_predicted_speedup", "Predicted speedup over plain decoding of the k that runs now.",
            ["model_name", "method"], registry=r,
        )  # fmt: skip
        self.recommended_k = self._gauge_cls(
            "specobs_recommended_num_speculative_tokens", "Recommended k per batch-size bucket (0 = off).",
            ["model_name", "method", "batch_size_bucket"], registry=r,
        )  # fmt: skip
        self.cost_ratio = self._gauge_cls(
            "specobs_cost_ratio", "Mean draft seconds per drafted token over mean verify seconds per step.",
            list(LABELS), registry=r,
        )  # fmt: skip
        self.config_info = self._gauge_cls(
            "specobs_speculative_config_info", "1 while a speculative engine is observed.",
            [*LABELS, "num_speculative_tokens"], registry=r,
        )  # fmt: skip
        self.accepted_per_draft = _AcceptedPerDraft()
        r.register(self.accepted_per_draft)
        if health is not None:
            r.register(_Health(health))
        self._timing: dict[tuple[str, ...], list[float]] = defaultdict(lambda: [0.0, 0, 0.0, 0])
        self._children: dict[tuple, Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, cached: the lookup costs more than the increment."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    @staticmethod
    def labels_of(row: dict[str, Any]) -> tuple[str, str, str]:
        engine = row.get("engine")
        return (str(row.get("model") or ""), "" if engine is None else str(engine), str(row.get("method") or "none"))

    def observe_step(self, row: dict[str, Any]) -> None:
        """One steps row (a capture row or an event-file record)."""
        self.observe_window(row, steps=1)

    def observe_window(self, row: dict[str, Any], steps: int | None = None) -> None:
        """A window of counts (a log interval) or a single step; timings only when timed."""
        labels = self.labels_of(row)
        k = row.get("num_spec_tokens")
        if k:
            self._child(self.config_info, *labels, str(k)).set(1)
        timed = row.get("num_timed_steps") if steps is None else steps
        if timed:
            self._child(self.steps, *labels).inc(timed)
        drafts = row.get("num_drafts") or 0
        if drafts:
            self._child(self.drafts, *labels).inc(drafts)
            per_pos = row.get("num_accepted_tokens_per_pos") or []
            reached = drafts_per_position(row, drafts, k)
            for position in range(min(max(len(per_pos), len(reached)), MAX_POSITIONS)):
                accepted = per_pos[position] if position < len(per_pos) else 0
                n = reached[position] if position < len(reached) else 0
                # A reached position gets its accepted series too, at 0 if need be: a rate of 0
                # must be a sample (it raises SpecDecodeWastedPositions), not a missing series.
                if accepted or n:
                    self._child(self.accepted_per_position, *labels, str(position)).inc(accepted)
                if n:
                    self._child(self.drafts_per_position, *labels, str(position)).inc(n)
            if per_pos:
                self.accepted_per_draft.add(labels, drafts, per_pos)
        for counter, key in ((self.draft_tokens, "num_draft_tokens"), (self.accepted, "num_accepted_tokens"),
                             (self.generated, "num_generated_tokens")):  # fmt: skip
            value = row.get(key)
            if value:
                self._child(counter, *labels).inc(value)
        if timed == 1:  # a single step: its timings are one observation each
            bucket = batch_size_bucket(row.get("batch_size"))
            for histogram, key in ((self.draft_seconds, "draft_seconds"), (self.verify_seconds, "verify_seconds"),
                                   (self.step_seconds, "step_seconds")):  # fmt: skip
                value = row.get(key)
                if value is not None:
                    self._child(histogram, *labels, bucket).observe(value)
            self._update_cost_ratio(labels, row)

    def _update_cost_ratio(self, labels: tuple[str, ...], row: dict[str, Any]) -> None:
        draft, tokens, verify = row.get("draft_seconds"), row.get("num_draft_tokens"), row.get("verify_seconds")
        if draft is None or not tokens or verify is None:
            return
        t = self._timing[labels]
        t[0] += draft
        t[1] += tokens
        t[2] += verify
        t[3] += 1
        if t[1] and t[2]:
            self._child(self.cost_ratio, *labels).set((t[0] / t[1]) / (t[2] / t[3]))

    def set_recommendation(self, recommendation: Any, model: str | None, running: dict[str, int]) -> None:
        """Gauges from a ``specobs.tuning.recommend.Recommendation``.

        ``specobs_predicted_speedup`` is the speedup of what runs now (each method at the k it runs
        with, ``running``: method → k; measured where the input measured it, else the model's, as
        the recommendation uses them), averaged over the batch buckets seen; below 1
        it says speculation, as configured, costs throughput. ``specobs_recommended_num_speculative_tokens``
        is the recommended k per bucket (0 = off).
        """
        for method, k in running.items():
            rows = [p for p in recommendation.predicted if p["method"] == method and p["num_speculative_tokens"] == k]
            if rows:
                speedup = sum(p.get("estimate", p["speedup"]) for p in rows) / len(rows)
                self.predicted_speedup.labels(model or "", method).set(speedup)
        for row in recommendation.by_batch_size:
            bucket = batch_size_bucket(row["batch_size_min"])
            self.recommended_k.labels(model or "", row.get("method") or "none", bucket).set(
                row["num_speculative_tokens"]
            )


class PrometheusSink:
    """Recorder sink: every captured step updates the metrics."""

    def __init__(self, metrics: PrometheusMetrics) -> None:
        self.metrics = metrics

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        for row in rows:
            if row.get("request_id") is None:  # per-request rows would count steps twice
                self.metrics.observe_step(row)

    def close(self) -> None:
        pass


def serve(metrics: PrometheusMetrics, address: str = "127.0.0.1:9464"):
    """Expose ``metrics`` over HTTP (``/metrics``) on ``address`` (host:port; 127.0.0.1 by default)."""
    from prometheus_client import start_http_server

    host, _, port = address.rpartition(":")
    return start_http_server(int(port), addr=host or "127.0.0.1", registry=metrics.registry)
