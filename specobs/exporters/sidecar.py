"""``specobs exporter``: a sidecar that follows event files or vLLM logs and serves /metrics.

Every poll (default 1 s) the follower hands over new complete lines; event-file records feed
the metrics step by step, vLLM V1 log lines become windows (counts per logging interval) and
feed the counters; Parquet parts are read once when they appear. Every ``tuning_interval``
seconds the recommendation is refitted on the most recent steps (or windows) and published as
gauges. vLLM V0 logs print running totals, which cannot be followed piecewise: they are
reported once and skipped.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from specobs import schema
from specobs.exporters.follow import Follower, _Followed
from specobs.exporters.prometheus import PrometheusMetrics
from specobs.ingest import detect, events, read_source
from specobs.ingest.source import Source

logger = logging.getLogger("specobs")
RECENT_ROWS = 20_000


class Sidecar:
    """Follows inputs and keeps a :class:`PrometheusMetrics` up to date."""

    def __init__(
        self,
        paths: list[str],
        metrics: PrometheusMetrics,
        *,
        from_end: bool = False,
        tuning_interval: float = 60.0,
    ) -> None:
        self.follower = Follower([Path(p) for p in paths], from_end=from_end)
        self.metrics = metrics
        self.tuning_interval = tuning_interval
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT_ROWS)
        self.rows_seen = 0
        self.errors = 0
        self._last_tuning = 0.0
        self._stop = threading.Event()
        self._warned: set[str] = set()

    def poll_once(self) -> int:
        """Read what is new everywhere; return the rows (steps or windows) fed to the metrics."""
        fed = 0
        for path in self.follower.new_parquet_files():
            try:
                fed += self._feed_frame(schema.conform(pl.read_parquet(path), schema.STEPS), step=True)
            except Exception as exc:
                self.errors += 1
                self._warn(str(path), f"specobs exporter: {path}: {type(exc).__name__}: {exc}")
        for state, data in self.follower.poll():
            try:
                fed += self._feed(state, data)
            except Exception as exc:  # one bad file must not stop the others
                self.errors += 1
                self._warn(str(state.path), f"specobs exporter: {state.path}: {type(exc).__name__}: {exc}")
        now = time.monotonic()
        if self.recent and now - self._last_tuning >= self.tuning_interval:
            self._last_tuning = now
            self._tune()
        return fed

    def _feed(self, state: _Followed, data: bytes) -> int:
        if state.kind is None:
            src = Source(str(state.path), None, False, len(data), head=data[:65536], data=data)
            state.kind = detect(src)
        if state.kind == events.FORMAT_JSONL:
            rows = []
            for line in data.splitlines():
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    continue
            for row in rows:
                if row.get("request_id") is None:
                    self.metrics.observe_step(row)
                    self.recent.append(row)
            self.rows_seen += len(rows)
            return len(rows)
        src = Source(str(state.path), None, False, len(data), head=data[:65536], data=data)
        windows, _, _ = read_source(src, state.kind)
        frame = windows.collect()
        if state.kind == "vllm-log" and (frame["counters"] == "cumulative").any():
            self._warn(f"v0 {state.path}", f"specobs exporter: {state.path}: V0 running totals cannot be followed")
            frame = frame.filter(pl.col("counters") != "cumulative")
        return self._feed_frame(frame, step=False)

    def _feed_frame(self, frame: pl.DataFrame, *, step: bool) -> int:
        rows = frame.to_dicts()
        for row in rows:
            if step:
                self.metrics.observe_step(row)
            else:
                self.metrics.observe_window(row)
            self.recent.append(row)
        self.rows_seen += len(rows)
        return len(rows)

    def _tune(self) -> None:
        from specobs.ingest.events import steps_to_windows
        from specobs.tuning.recommend import recommend

        try:
            frame = pl.DataFrame(list(self.recent), infer_schema_length=None)
            windows: pl.DataFrame | pl.LazyFrame
            if "end_ts" in frame.columns:
                windows = schema.conform(frame, schema.WINDOWS)
            else:
                windows = steps_to_windows(schema.conform(frame, schema.STEPS).lazy(), "exporter", "events")
            latest = {}
            for (model,), part in windows.lazy().collect().group_by(["model"]):
                rec = recommend(part, bootstrap=0)
                if rec is None:
                    continue
                running = (
                    part.filter(pl.col("num_spec_tokens") > 0)
                    .group_by("method")
                    .agg(pl.col("num_spec_tokens").max())
                    .iter_rows()
                )
                latest[str(model or "")] = (rec, dict(running))
            self.metrics.replace_recommendations(latest)  # a model no longer seen stops being published
        except Exception as exc:
            self.errors += 1
            self._warn("tuning", f"specobs exporter: tuning failed ({type(exc).__name__}: {exc})")

    def _warn(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message)

    def run(self, poll_interval: float = 1.0) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(poll_interval)

    def stop(self) -> None:
        self._stop.set()
        self.follower.close()


class SidecarHealth(Collector):
    """``specobs_exporter_rows_total`` and ``specobs_exporter_errors_total``: what the sidecar read
    and the inputs it could not, for its own /metrics."""

    def __init__(self, sidecar: Sidecar) -> None:
        self.sidecar = sidecar

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily("specobs_exporter_rows", "Rows read by the exporter.", value=self.sidecar.rows_seen)
        yield CounterMetricFamily(
            "specobs_exporter_errors", "Inputs the exporter could not read.", value=self.sidecar.errors
        )
