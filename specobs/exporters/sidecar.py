"""``specobs exporter``: a sidecar that follows event files or vLLM logs and serves /metrics.

Every poll (default 1 s) the follower hands over new complete lines; event-file records feed
the metrics step by step, vLLM V1 log lines become windows (counts per logging interval) and
feed the counters; Parquet parts are read once when they appear. Every ``tuning_interval``
seconds the recommendation is refitted on the most recent steps (or windows) and published as
gauges. vLLM V0 logs print running totals, which cannot be followed piecewise: they are
reported once and skipped.

Run-metadata files (``-meta-``) publish ``specobs_engine_info`` per engine, the latest record of
an engine winning (a restart with another configuration replaces the series); finished-request
files (``-requests-``, and the other ``requests`` inputs) feed ``specobs_request_acceptance_length``.
Both go through their validated readers too.

Event-file records go through the validated reader (:func:`specobs.ingest.events.parse_line`,
:func:`~specobs.ingest.events.read_parquet_checked`): a bad record is skipped whole, logged as
``FILE:LINE: why`` (the first of each reason per file) and counted in
``specobs_skipped_records_total{reason}``; it never drops its neighbours, and a row that still
fails inside the metrics update is counted there too (reason ``error``).
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
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from specobs import schema
from specobs.advice.recommend import recommend
from specobs.errors import Notice, Skipped
from specobs.exporters.families import Exported, counted
from specobs.exporters.follow import Follower, Lines, _Followed
from specobs.exporters.prometheus import families
from specobs.ingest import decisions, detect, events, metadata_files, read_source
from specobs.ingest import request_rows as request_files
from specobs.ingest.events import steps_to_windows
from specobs.ingest.source import Source
from specobs.ingest.specobs_metrics import SIDECAR, of_source

logger = logging.getLogger("specobs")
RECENT_ROWS = 20_000
#: The column of a refit's rows that holds the order they were read in.
ARRIVAL = "arrival"
#: ``reason`` of ``specobs_skipped_records_total``: the event reader's reasons, and ``error`` for a
#: row the metrics update could not take.
SKIP_REASONS = (*events.REASONS, "error")


class Sidecar:
    """Follows inputs and keeps an exporter's metrics up to date (a
    :class:`~specobs.exporters.prometheus.PrometheusMetrics` or an
    :class:`~specobs.exporters.otel.OtelMetrics`: both are fed through the same dispatch)."""

    def __init__(
        self,
        paths: list[str],
        metrics: Exported,
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
        self.skipped: dict[str, int] = dict.fromkeys(SKIP_REASONS, 0)
        self._last_tuning = 0.0
        self._stop = threading.Event()
        self._warned: set[str] = set()

    def poll_once(self) -> int:
        """Read what is new everywhere; return the rows (steps or windows) fed to the metrics."""
        fed = 0
        for path in self.follower.new_parquet_files():
            try:
                src = Source(str(path), path, False, path.stat().st_size)
                reasons: list[str] = []
                frame, skipped = events.read_parquet_checked(src, reasons)
                for reason, bad in zip(reasons, skipped, strict=True):
                    self._skip(reason, str(bad), key=str(path))
                fed += self._feed_frame(frame.collect(), step=True)
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
            return self._feed_jsonl(state, data)
        if state.kind == decisions.FORMAT:
            return self._feed_decisions(state, data)
        if state.kind == metadata_files.FORMAT:
            self._feed_metadata(state, data)
            return 0  # describes an engine; nothing to count
        if state.kind in request_files.FORMATS:
            self._feed_requests(state, data)
            return 0  # finished requests: the per-request histogram, no steps
        src = Source(str(state.path), None, False, len(data), head=data[:65536], data=data)
        windows = read_source(src, state.kind).windows
        if windows is None:
            return 0  # side records only
        frame = windows.collect()
        if state.kind == "vllm-log" and (frame["counters"] == "cumulative").any():
            self._warn(f"v0 {state.path}", f"specobs exporter: {state.path}: V0 running totals cannot be followed")
            frame = frame.filter(pl.col("counters") != "cumulative")
        return self._feed_frame(frame, step=False)

    def _feed_jsonl(self, state: _Followed, data: bytes) -> int:
        first = data.first_line if isinstance(data, Lines) else None
        fed = 0
        for number, raw in enumerate(data.split(b"\n"), start=first or 1):
            line = raw.strip()
            if not line:
                continue
            row, reason, why = events.parse_line(line)
            if row is None:
                where = f"{state.path}:{number}" if first is not None else str(state.path)
                self._skip(reason or events.INVALID_JSON, f"{where}: {why}", key=str(state.path))
                continue
            self.rows_seen += 1
            if row.get("request_id") is None and self._observe(row, step=True, where=state.path):
                fed += 1
        return fed

    def _feed_decisions(self, state: _Followed, data: bytes) -> int:
        """The online tuner's decision log: counted by action, the k per bucket as a gauge."""
        first = data.first_line if isinstance(data, Lines) else None
        for number, raw in enumerate(data.split(b"\n"), start=first or 1):
            line = raw.strip()
            if not line:
                continue
            try:
                decision, why = decisions.parse(json.loads(line))
            except (ValueError, RecursionError):
                decision, why = None, "not valid JSON"
            if decision is None:
                where = f"{state.path}:{number}" if first is not None else str(state.path)
                self._skip(events.INVALID_JSON, f"{where}: {why}", key=str(state.path))
                continue
            self.metrics.observe_decision(decision.to_row())
        return 0

    def _feed_metadata(self, state: _Followed, data: bytes) -> None:
        """Run metadata: each valid record replaces its engine's ``specobs_engine_info``."""
        src = Source(str(state.path), None, False, len(data), head=data[:65536], data=data)
        records, skipped, _ = metadata_files.read(src)
        self._skipped_lines(state, data, skipped)
        for record in records:
            self.metrics.observe_metadata(record)

    def _feed_requests(self, state: _Followed, data: bytes) -> None:
        """Finished requests, read by the validated ``requests`` reader: one histogram observation each."""
        src = Source(str(state.path), None, False, len(data), head=data[:65536], data=data)
        frame, skipped, _ = request_files.read(src, str(state.kind))
        self._skipped_lines(state, data, skipped)
        for row in frame.iter_rows(named=True):
            self.rows_seen += 1
            try:
                self.metrics.observe_request(row)
            except Exception as exc:
                self._skip("error", f"{state.path}: {type(exc).__name__}: {exc}", key=str(state.path))

    def _skipped_lines(self, state: _Followed, data: bytes, skipped: list[Skipped]) -> None:
        """Count and name (``FILE:LINE``) what a side-file reader skipped; notices are not skips."""
        first = data.first_line if isinstance(data, Lines) else None
        for bad in skipped:
            if isinstance(bad, Notice):
                continue
            line = None if bad.line is None or first is None else first + bad.line - 1
            where = f"{state.path}:{line}" if line is not None else str(state.path)
            self._skip(_reason(bad.why), f"{where}: {bad.why}", key=str(state.path))

    def _feed_frame(self, frame: pl.DataFrame, *, step: bool) -> int:
        fed = 0
        for row in frame.iter_rows(named=True):
            self.rows_seen += 1
            if (not step or row.get("request_id") is None) and self._observe(row, step=step, where="rows"):
                fed += 1
        return fed

    def _observe(self, row: dict[str, Any], *, step: bool, where: object) -> bool:
        """Feed one row; a row that fails is counted (``error``) and its neighbours still go in."""
        try:
            if step:
                self.metrics.observe_step(row)
            else:
                self.metrics.observe_window(row)
        except Exception as exc:
            self._skip("error", f"{where}: {type(exc).__name__}: {exc}", key=str(where))
            return False
        self.recent.append(row)
        return True

    def _skip(self, reason: str, message: str, *, key: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        self._warn(f"skip {reason} {key}", f"specobs exporter: skipped {message} (further ones counted only)")

    def _tune(self) -> None:

        try:
            frame = pl.DataFrame(list(self.recent), infer_schema_length=None)
            windows: pl.DataFrame | pl.LazyFrame
            if "end_ts" in frame.columns:
                windows = schema.conform(frame, schema.WINDOWS)
            else:
                windows = steps_to_windows(schema.conform(frame, schema.STEPS).lazy(), "exporter", "events")
            # one refit per published model_name: models over the label budget are folded into "other"
            windows = windows.lazy().collect()
            cap = self.metrics.cap.published
            models = [cap("model_name", str(m or "")) for m in windows["model"]]
            methods = [None if m is None else cap("method", str(m)) for m in windows["method"]]
            windows = windows.with_columns(
                model=pl.Series(models, dtype=pl.String), method=pl.Series(methods, dtype=pl.String)
            ).with_row_index(ARRIVAL)
            latest = {}
            for (model,), part in windows.group_by(["model"]):
                rec = recommend(part, bootstrap=0)
                if rec is None:
                    continue
                latest[str(model or "")] = (rec, running_k(part))
            self.metrics.replace_recommendations(latest)  # a model no longer seen stops being published
        except Exception as exc:
            self.errors += 1
            self._warn("tuning", f"specobs exporter: tuning failed ({type(exc).__name__}: {exc})")

    def counts(self) -> dict[str, Any]:
        """What the sidecar read and could not: ``rows``, ``errors`` and ``skipped`` (reason →
        records), the ``specobs_exporter_*`` and ``specobs_skipped_records`` families."""
        return {"rows": self.rows_seen, "errors": self.errors, "skipped": dict(self.skipped)}

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


#: How many of a method's latest rows decide the k it runs now (:func:`running_k`).
RECENT_ROWS = 64


def running_k(windows: pl.DataFrame, recent: int = RECENT_ROWS) -> dict[str, int]:
    """Method → the k it runs now: the ``num_spec_tokens`` most of its latest ``recent`` rows
    reported (rows in the order read, :data:`ARRIVAL`; a tie goes to the k reported later).

    Not the largest k seen: a batch-size schedule or the online tuner runs a smaller k in some
    buckets, and the largest names a k that may no longer run. Not the last row's either: under a
    schedule the rows alternate between the buckets' k, and the gauge would follow whichever batch
    size came last; the k most recent steps ran is the one most of the traffic meets. A row
    without a speculative k (none, 0) is passed over::

        running_k(rows with method ngram and k 6, 6, 3 in that order) == {"ngram": 6}
    """
    ran = windows.filter(pl.col("num_spec_tokens") > 0)
    if ran.is_empty():
        return {}
    latest = ran.sort(ARRIVAL).group_by("method", maintain_order=True).tail(recent)
    votes = latest.group_by("method", "num_spec_tokens").agg(rows=pl.len(), last=pl.col(ARRIVAL).max())
    chosen = votes.sort("rows", "last", descending=True).group_by("method", maintain_order=True).first()
    return {method: int(k) for method, k in chosen.select("method", "num_spec_tokens").iter_rows()}


def _reason(why: str) -> str:
    """The ``specobs_skipped_records_total`` reason of a side-file record a reader skipped, from its why."""
    if why.startswith("not valid JSON"):
        return events.INVALID_JSON
    if " is negative" in why:
        return events.NEGATIVE
    if " is not " in why or why.startswith("not a"):
        return events.WRONG_TYPE
    return events.INCONSISTENT


class SidecarHealth(Collector):
    """The sidecar's own families for its /metrics (``specobs_exporter_rows_total``,
    ``specobs_exporter_errors_total``, ``specobs_skipped_records_total{reason}``), built from the
    family table like every other (:meth:`Exported.attach_sidecar` publishes them through an
    exporter's own families instead: OpenTelemetry's, or Prometheus' without this collector)."""

    def __init__(self, sidecar: Sidecar) -> None:
        self.sidecar = sidecar

    def collect(self) -> Iterator[Metric]:
        published = of_source(SIDECAR)
        yield from families(published, counted(published, self.sidecar.counts()))
