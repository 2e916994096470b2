"""Every exported family from one table, fed through one dispatch: what both exporters share.

The table is :data:`specobs.ingest.specobs_metrics.FAMILIES` (name, OpenTelemetry instrument, kind,
labels, unit, help, source, how the value is derived). :class:`Exported` holds the state every
family is read from and is the one dispatch that feeds it: :meth:`Exported.write` sends each
recorder row to its ``observe_*`` (a step, a decision of the online tuner, a run-metadata record, a
finished request), and :meth:`Exported.points` lists every published family's series as
:class:`~specobs.exporters.mapping.Point`\\ s, source by source. The exporters are thin subclasses:

- :class:`~specobs.exporters.prometheus.PrometheusMetrics` builds one ``*MetricFamily`` per family
  from the points at each scrape;
- :class:`~specobs.exporters.otel.OtelMetrics` makes one instrument per family: counters and gauges
  are observable instruments reading the same points at each export; the timings and the
  per-request histogram are recorded as they come (OpenTelemetry has no observable histogram),
  through the :meth:`Exported._timed` and :meth:`Exported._requested` hooks.

So from the same input both publish the same series with the same values
(``tests/exporters/test_exporter_parity.py`` loops over the table). Where a source is absent its
families are not published: the recorder's health counters need ``health=`` (the in-engine
exporter), the sidecar's counts :meth:`Exported.attach_sidecar` (``specobs exporter``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from specobs import buckets, schema
from specobs.advice.recommend import traffic_speedup
from specobs.capture.sinks import DECISION_KEY, is_step, side_kind
from specobs.exporters.mapping import (
    EngineInfo,
    Point,
    RequestSums,
    RequestUpdate,
    StepMapper,
    StepSums,
    StepUpdate,
)
from specobs.ingest import specobs_metrics as table
from specobs.ingest.specobs_metrics import FAMILIES, Family
from specobs.records import TUNER_ACTIONS, Recommendation

#: Counts read at scrape or export (the recorder's health, the sidecar's own): key → a number, or
#: a label value → number mapping for a labelled family (``skipped``: reason → records).
Counts = Callable[[], Mapping[str, Any]]
#: Tuner actions that set the k of a batch bucket.
SETS_K = ("apply", "rollback")


class Tuning:
    """The latest recommendation per model and the k each method runs now: ``specobs_predicted_speedup``
    and ``specobs_recommended_num_speculative_tokens``, listed afresh each time (a method or bucket no
    longer recommended disappears)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: dict[str, tuple[Recommendation, dict[str, int]]] = {}

    def set(self, model: str, recommendation: Recommendation, running: Mapping[str, int]) -> None:
        with self._lock:
            self._latest[model] = (recommendation, dict(running))

    def replace(self, latest: Mapping[str, tuple[Recommendation, Mapping[str, int]]]) -> None:
        """Every model's latest recommendation at once: models left out disappear."""
        with self._lock:
            self._latest = {m: (rec, dict(running)) for m, (rec, running) in latest.items()}

    def points(self) -> list[Point]:
        with self._lock:
            latest = list(self._latest.items())
        speedups, recommended = [], []
        for model, (rec, running) in latest:
            for method, k in running.items():
                value = traffic_speedup(rec, method, k)
                if value is not None:
                    speedups.append(Point(table.PREDICTED_SPEEDUP, (model, method), value, None))
            for row in rec.by_batch_size:
                bucket = buckets.label(row.batch_size_min, row.batch_size_max)
                labels = (model, row.method or "none", bucket)
                recommended.append(Point(table.RECOMMENDED_K, labels, row.num_speculative_tokens, None))
        return speedups + recommended


class Decisions:
    """The online tuner's decision log: decisions per action (``specobs_tuner_decisions_total``)
    and the k its latest apply or rollback set per batch bucket (``specobs_tuner_num_speculative_tokens``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: action → [decisions, when its series appeared]
        self._actions: dict[str, list[Any]] = {}
        #: batch bucket → k
        self._k: dict[str, int] = {}

    def add(self, row: Mapping[str, Any]) -> bool:
        """One row of the decision log (``TunerDecision.to_row()``); False: not a tuner action."""
        action = row.get("tuner_action")
        if action not in TUNER_ACTIONS:
            return False
        low, k = row.get("batch_size_min"), row.get("to_k")
        with self._lock:
            counted = self._actions.get(action)
            if counted is None:
                counted = self._actions[action] = [0, time.time()]
            counted[0] += 1
            if action in SETS_K and isinstance(low, int) and isinstance(k, int):
                self._k[buckets.bounded_label(low)] = k
        return True

    def points(self) -> list[Point]:
        with self._lock:
            ks = [Point(table.TUNER_K, (bucket,), k, None) for bucket, k in self._k.items()]
            actions = [Point(table.TUNER_DECISIONS, (a,), n, created) for a, (n, created) in self._actions.items()]
        return ks + actions


def counted(families: Iterable[Family], counts: Mapping[str, Any] | None) -> list[Point]:
    """The series of families read from a counts mapping (``Family.key``): one unlabelled series per
    family (0 where the key is missing), or one per label value of a labelled one::

        counted(of_source(SIDECAR), {"rows": 12, "errors": 0, "skipped": {"negative": 1}})
        == [Point(EXPORTER_ROWS, (), 12, None), Point(EXPORTER_ERRORS, (), 0, None),
            Point(SKIPPED_RECORDS, ("negative",), 1, None)]
    """
    counts = counts or {}
    out = []
    for family in families:
        value = counts.get(family.key, {} if family.labels else 0)
        if family.labels:
            out += [Point(family, (str(label),), n, None) for label, n in value.items()]
        else:
            out.append(Point(family, (), value, None))
    return out


class Exported:
    """Every family's state, the one dispatch that feeds it, and every family's series.

    The base of both exporters (``PrometheusMetrics``, ``OtelMetrics``); ``health``: the recorder's
    counters (``dropped_events``, ``hook_errors``, ``untimed_steps``), read at scrape or export;
    ``label_budget``: distinct values per label before the rest become ``other``
    (:data:`~specobs.exporters.mapping.LABEL_BUDGET` by default)."""

    def __init__(self, label_budget: dict[str, int] | None = None, health: Counts | None = None) -> None:
        #: the one mapping from a row to metric updates, and its sums
        self.mapper = StepMapper(label_budget)
        self.cap = self.mapper.cap
        self.sums = StepSums()
        #: each engine's latest run metadata, and the per-request acceptance histogram
        self.info = EngineInfo()
        self.requests = RequestSums()
        self.tuning = Tuning()
        self.decisions = Decisions()
        self.health = health
        self.sidecar: Counts | None = None
        #: source → what lists its series (each call reads the state as it is now)
        self._sources: dict[str, Callable[[], list[Point]]] = {
            table.STEPS: self.sums.points,
            table.METADATA: self.info.points,
            table.REQUESTS: self.requests.points,
            table.MAPPING: lambda: list(self.mapper.points()),
            table.TUNING: self.tuning.points,
            table.DECISIONS: self.decisions.points,
            table.RECORDER: lambda: counted(table.of_source(table.RECORDER), self.health()) if self.health else [],
            table.SIDECAR: lambda: counted(table.of_source(table.SIDECAR), self.sidecar()) if self.sidecar else [],
        }

    # --- the one dispatch -------------------------------------------------------------------------

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        """Recorder rows: a step feeds the step families (per-request shares of a step would count
        its steps twice, and are left out); a tuner decision, run metadata or a finished request its own."""
        for row in rows:
            if is_step(row):
                self.observe_step(row)
                continue
            kind = side_kind(row)
            if kind == DECISION_KEY:
                self.observe_decision(row)
            elif kind == schema.METADATA_KEY:
                self.observe_metadata(row)
            elif kind == schema.REQUEST_KEY:
                self.observe_request(row)

    def observe_step(self, row: dict[str, Any]) -> None:
        """One steps row (a capture row or an event-file record)."""
        self.observe_window(row, 1)

    def observe_window(self, row: dict[str, Any], steps: int | None = None) -> None:
        """A window of counts (a log interval) or a single step; timings only when timed."""
        update = self.mapper.map(row, steps)
        if update is not None:
            self.sums.add(update)
            if update.timing is not None:
                self._timed(update)

    def observe_metadata(self, record: Any) -> bool:
        """An engine's run metadata (the capture's record or a :class:`~specobs.records.RunMetadata`):
        ``specobs_engine_info`` of its ``(model_name, engine)`` becomes this one (False: the record
        is older than the one published, and ignored)."""
        return self.info.set(self.mapper.map_metadata(record))

    def observe_request(self, row: dict[str, Any]) -> None:
        """A finished request (a ``requests`` row): one observation of
        ``specobs_request_acceptance_length`` (none for a request without drafts)."""
        update = self.mapper.map_request(row)
        if update is not None:
            self.requests.add(update)
            self._requested(update)

    def observe_decision(self, row: dict[str, Any]) -> None:
        """One row of the online tuner's decision log (``TunerDecision.to_row()``)."""
        self.decisions.add(row)

    def set_recommendation(self, recommendation: Recommendation, model: str | None, running: dict[str, int]) -> None:
        """Publish one model's latest recommendation (``running``: method → the k it runs with now).

        ``specobs_predicted_speedup`` is the traffic-weighted speedup of what runs now
        (``advice.recommend.traffic_speedup``: measured where the input measured it, else the
        model's, as the recommendation compares them); below 1 it says speculation, as
        configured, costs throughput. ``specobs_recommended_num_speculative_tokens`` is the
        recommended k per bucket (0 = off). Series of an earlier refit are gone after this one.
        """
        self.tuning.set(model or "", recommendation, running)

    def replace_recommendations(self, latest: dict[str, tuple[Recommendation, dict[str, int]]]) -> None:
        """Every model's latest recommendation at once (model → (recommendation, running)):
        models left out are no longer published."""
        self.tuning.replace(latest)

    def attach_sidecar(self, counts: Counts) -> None:
        """Publish the sidecar's own counts (``rows``, ``errors``, ``skipped``: reason → records)."""
        self.sidecar = counts

    def _timed(self, update: StepUpdate) -> None:
        """A single step's timings, once added to the sums (OpenTelemetry records its histograms here)."""

    def _requested(self, update: RequestUpdate) -> None:
        """A finished request's acceptance length, once added to the sums (OpenTelemetry records it here)."""

    # --- every family's series --------------------------------------------------------------------

    def published(self) -> tuple[Family, ...]:
        """The families this exporter publishes: every one, less those of an absent source."""
        absent = {table.RECORDER} if self.health is None else set()
        if self.sidecar is None:
            absent.add(table.SIDECAR)
        return tuple(family for family in FAMILIES if family.source not in absent)

    def points(self, source: str) -> list[Point]:
        """Every series ``source`` feeds, with its value now."""
        return self._sources[source]()

    def all_points(self) -> list[Point]:
        """Every series of every source."""
        return [point for source in table.SOURCES for point in self.points(source)]


class Sink:
    """Recorder sink: every row goes through the one dispatch (:meth:`Exported.write`)."""

    def __init__(self, metrics: Exported) -> None:
        self.metrics = metrics

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        self.metrics.write(rows)

    def close(self) -> None:
        pass


__all__ = ["Counts", "Decisions", "Exported", "Sink", "Tuning", "counted"]
