"""One mapping from a steps (or windows) row to the specobs metrics, for Prometheus and OpenTelemetry.

Both exporters publish what this module makes of a row, so they cannot drift apart (they used to
map a step each by hand, and OpenTelemetry had no label cap, count check or NaN guard):

- Every metric is one row of the family table (:mod:`specobs.ingest.specobs_metrics`: its
  Prometheus family, OpenTelemetry instrument, kind, labels, unit, help and source); :data:`SPECS`
  are the rows this mapping feeds. Names differ only by each system's conventions
  (``specobs_drafts_total`` and ``specobs.drafts``; a Prometheus summary is an OpenTelemetry histogram).
- :class:`StepMapper` turns a row into one :class:`StepUpdate` (labels, counts, per-position counts,
  timings of a single step, k). Label values come from the input, so they are capped
  (:class:`LabelCap`: a budget of distinct values, ``other`` past it, counted per label). Values
  are checked: a count must be a non-negative integer, a timing finite and non-negative; a bad
  value is left out and counted by reason (:data:`DROP_REASONS`, the event reader's names for the
  same faults), and a row whose counts contradict each other (more accepted than drafted, a
  position accepted more often than reached) is left out whole, counted as ``inconsistent``.
- :class:`StepSums` adds updates as plain numbers under one lock (a ``Counter.inc`` per field cost
  more than all the rest of a step's export) and lists them as :class:`Point`\\ s, the cost ratio,
  draft share and config info included: the Prometheus collector builds its families from them
  at scrape, the OpenTelemetry exporter reports them from observable instruments.
- :class:`EngineInfo` holds each engine's latest run metadata (``specobs_engine_info``, one series
  per ``(model_name, engine)``: a restart with another configuration replaces it), and
  :class:`RequestSums` the per-request acceptance histogram of finished requests
  (``specobs_request_acceptance_length``), both made by :class:`StepMapper` with the same caps and checks.

Every number comes from the analysis functions (bucket labels, drafts per position, a step's
drafted positions, the cost ratio and draft share): this module only checks, caps and adds.
"""

from __future__ import annotations

import bisect
import math
import operator
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from specobs import buckets, dimensions, schema, validity
from specobs.analysis.acceptance import drafts_per_position
from specobs.analysis.cost import cost_ratio, draft_positions, draft_share
from specobs.formulas import acceptance_length
from specobs.ingest import specobs_metrics as m
from specobs.ingest.specobs_metrics import (
    ACCEPTED_PER_POSITION,
    CONFIG_INFO,
    COST_RATIO,
    DRAFT_SHARE,
    DRAFTS_PER_POSITION,
    DROPPED_VALUES,
    ENGINE_INFO,
    INFO_FIELDS,
    LABEL_OVERFLOW,
    LABELS,
    REQUEST_ACCEPTANCE,
    REQUEST_ACCEPTANCE_BOUNDS,
)
from specobs.ingest.specobs_metrics import Family as Spec

MAX_POSITIONS = 16
#: ``specobs_speculative_config_info`` series per (model, engine, method): the k values seen
#: last (a schedule or a tuner switches between a few; each new one replaces the oldest).
MAX_K_SERIES = 4
#: Info fields that are counts (parallel sizes): an integer is their value, a text is not.
INTEGER_INFO = frozenset(n for n in INFO_FIELDS if n in schema.RUN_DIMENSIONS and schema.RUN_DIMENSIONS[n].is_integer())
#: Distinct values each input-derived label may take before the rest are folded into ``other``.
LABEL_BUDGET = {d.prometheus: d.budget for d in dimensions.DIMENSIONS if d.prometheus and d.budget}
#: ``method`` takes vLLM's method names, ``none`` (no method in the input) and ``other``.
METHODS = frozenset((*schema.KNOWN_METHODS, "none"))
MAX_LABEL_LENGTH = 100
OTHER = "other"
#: Rows' (model, engine, method, k) whose published labels are remembered (past it they are capped row by row).
PUBLISHED_CACHE = 4096
#: Why a value never reaches a metric (``specobs_dropped_values_total{reason}``): the names the
#: event reader (``specobs.ingest.events.REASONS``) gives the same faults.
NON_FINITE, NEGATIVE, WRONG_TYPE = validity.NON_FINITE, validity.NEGATIVE, validity.WRONG_TYPE
INCONSISTENT = validity.INCONSISTENT
DROP_REASONS = validity.VALUE_REASONS  # the event reader's reasons, in one home
#: Labels whose folds are counted from the start (``num_speculative_tokens`` from its first fold).
CAPPED_LABELS = LABELS

#: The families a steps row feeds, from the one table (:mod:`specobs.ingest.specobs_metrics`).
#: The counters of every (model_name, engine, method), in the order :attr:`StepUpdate.counts` holds
#: them: steps, ``num_drafts``, ``num_draft_tokens``, ``num_accepted_tokens``,
#: ``num_generated_tokens``, and the drafted positions per request of a step with draft time
#: (``analysis.cost.draft_positions``).
COUNTER_SPECS = (m.STEPS_OBSERVED, m.DRAFTS, m.DRAFT_TOKENS, m.ACCEPTED_TOKENS, m.GENERATED_TOKENS, m.DRAFT_POSITIONS)
#: Where the drafted positions are in :data:`COUNTER_SPECS` (the cost ratio's denominator).
POSITIONS_INDEX = 5
#: The timings of a single step, in the order of :attr:`StepUpdate.timing`'s seconds.
TIMING_SPECS = (m.DRAFT_SECONDS, m.VERIFY_SECONDS, m.STEP_SECONDS)
#: What a steps row becomes, in the order the exporters publish it.
STEP_SPECS = m.of_source(m.STEPS)
#: What a run-metadata record and a finished request (a ``requests`` row) become.
ENGINE_SPECS = (ENGINE_INFO, REQUEST_ACCEPTANCE)
#: What the mapping counts about itself.
HEALTH_SPECS = m.of_source(m.MAPPING)
#: Every family a row feeds (steps, run metadata, finished requests) and the mapping's own counts.
SPECS = (*STEP_SPECS, *ENGINE_SPECS, *HEALTH_SPECS)

_POSITION_LABELS = tuple(str(p) for p in range(MAX_POSITIONS))


class Point(NamedTuple):
    """One series' value: label values in ``spec.labels`` order; a timing's value is ``(count, sum)``;
    ``created`` is when a counter's series appeared (None for gauges and timings)."""

    spec: Spec
    labels: tuple[str, ...]
    value: Any
    created: float | None


class StepUpdate(NamedTuple):
    """What one checked row adds: ``counts`` in :data:`COUNTER_SPECS` order (0 where the row has
    none), per-position ``(accepted, reached)``, ``(batch bucket, seconds in TIMING_SPECS order or
    None)`` of a single step, and the k label."""

    labels: tuple[str, str, str]
    counts: tuple[Any, ...]
    positions: tuple[Sequence[int], Sequence[int]] | None
    timing: tuple[str, tuple[Any, Any, Any]] | None
    k_label: str | None

    def points(self) -> Iterator[Point]:
        """The update as series increments (no gauges: those follow from the sums): what a push
        exporter would add; tests read the mapping through it."""
        for spec, value in zip(COUNTER_SPECS, self.counts, strict=True):
            if value:
                yield Point(spec, self.labels, value, None)
        if self.positions is not None:
            for spec, values in zip((ACCEPTED_PER_POSITION, DRAFTS_PER_POSITION), self.positions, strict=True):
                for position, value in enumerate(values[:MAX_POSITIONS]):
                    yield Point(spec, (*self.labels, _POSITION_LABELS[position]), value, None)
        if self.timing is not None:
            bucket, seconds = self.timing
            for spec, value in zip(TIMING_SPECS, seconds, strict=True):
                if value is not None:
                    yield Point(spec, (*self.labels, bucket), (1, value), None)


class InfoUpdate(NamedTuple):
    """One run-metadata record as ``specobs_engine_info`` publishes it: the engine's key
    ``(model_name, engine)``, every label in ``ENGINE_INFO.labels`` order, and when the record
    was taken (None: unknown)."""

    key: tuple[str, str]
    labels: tuple[str, ...]
    ts: float | None


class RequestUpdate(NamedTuple):
    """One finished request: its labels and its acceptance length (tokens per verify step)."""

    labels: tuple[str, str, str]
    length: float


def _plain(value: str) -> bool:
    """A label value fit to publish: short, printable, no whitespace (never prompt-like text)."""
    return len(value) <= MAX_LABEL_LENGTH and value.isprintable() and not any(c.isspace() for c in value)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _positive(value: Any) -> Any:
    """``value`` when it is a finite positive number (a batch size, a k), else None; never counted
    as dropped: these only choose labels."""
    if type(value) is int:
        return value if value > 0 else None
    return value if _finite(value) and value > 0 else None


class LabelCap:
    """Folds input-derived label values into ``other`` past a budget of distinct values, counting
    each fold per label (``specobs_label_overflow_total{label}``)."""

    def __init__(self, budget: dict[str, int]) -> None:
        self.budget = dict(budget)
        self._kept: dict[str, set[str]] = {label: set() for label in (*CAPPED_LABELS, *budget)}
        now = time.time()
        #: label → (folds, when its series appeared)
        self.overflow: dict[str, list[Any]] = {label: [0, now] for label in CAPPED_LABELS}
        self._lock = threading.Lock()

    def published(self, label: str, value: str) -> str:
        """What ``value`` is published as, without counting or keeping it."""
        return value if value in self._kept.get(label, ()) else OTHER

    def __call__(self, label: str, value: str) -> str:
        kept = self._kept[label]
        if value in kept:
            return value
        with self._lock:
            if value in kept:
                return value
            if _plain(value) and (value in METHODS if label == "method" else len(kept) < self.budget.get(label, 32)):
                kept.add(value)
                return value
            folds = self.overflow.get(label)
            if folds is None:
                folds = self.overflow[label] = [0, time.time()]
            folds[0] += 1
        return OTHER

    def points(self) -> Iterator[Point]:
        with self._lock:
            overflow = [(label, *folds) for label, folds in self.overflow.items()]
        for label, count, created in overflow:
            yield Point(LABEL_OVERFLOW, (label,), count, created)


class StepMapper:
    """Checks a row, caps its labels and makes its :class:`StepUpdate`, counting what it leaves out."""

    def __init__(self, label_budget: dict[str, int] | None = None) -> None:
        """``label_budget``: distinct values per label (``model_name``, ``engine``,
        ``num_speculative_tokens``) before the rest become ``other``; :data:`LABEL_BUDGET` by default."""
        self.cap = LabelCap({**LABEL_BUDGET, **(label_budget or {})})
        now = time.time()
        #: reason → values left out (see :data:`DROP_REASONS`)
        self.dropped = dict.fromkeys(DROP_REASONS, 0)
        self._dropped_created = now
        self._lock = threading.Lock()
        #: a row's (model, engine, method, num_spec_tokens) → its labels, k and k label, for rows
        #: none of whose values was folded into ``other`` (a folded one is counted row by row)
        self._published: dict[tuple[Any, ...], tuple[tuple[str, str, str], Any, str | None]] = {}

    def drop(self, reason: str) -> None:
        with self._lock:
            self.dropped[reason] += 1

    def points(self) -> Iterator[Point]:
        """``specobs_label_overflow`` and ``specobs_dropped_values``: what the mapping left out."""
        yield from self.cap.points()
        with self._lock:
            dropped = list(self.dropped.items())
        for reason, count in dropped:
            yield Point(DROPPED_VALUES, (reason,), count, self._dropped_created)

    def labels_of(self, row: dict[str, Any]) -> tuple[str, str, str]:
        """``(model_name, engine, method)`` of a row, each capped (see :class:`LabelCap`)."""
        engine = row.get("engine")
        cap = self.cap
        return (
            cap("model_name", str(row.get("model") or "")),
            "" if engine is None else cap("engine", str(engine)),
            cap("method", str(row.get("method") or "none")),
        )

    def _labels_and_k(self, row: dict[str, Any]) -> tuple[tuple[str, str, str], Any, str | None]:
        """The row's labels (:meth:`labels_of`), its k and k label, remembered per raw values."""
        raw = (row.get("model"), row.get("engine"), row.get("method"), row.get("num_spec_tokens"))
        try:
            published = self._published.get(raw)
            hashable = True
        except TypeError:  # an unhashable value (a list for a model name): capped, never remembered
            published, hashable = None, False
        if published is not None:
            return published
        labels = self.labels_of(row)
        k = _positive(row.get("num_spec_tokens"))
        k_label = self.cap("num_speculative_tokens", str(k)) if k else None
        published = (labels, k, k_label)
        if hashable and OTHER not in labels and k_label != OTHER and len(self._published) < PUBLISHED_CACHE:
            self._published[raw] = published
        return published

    def _count(self, value: Any) -> int | None:
        """``value`` as a count: a non-negative integer (None when absent or left out, and counted)."""
        if type(value) is int and value >= 0:  # what capture and the validated readers give: checked fast
            return value
        if value is None:
            return None
        if isinstance(value, float) and value.is_integer() and value >= 0:
            return int(value)
        self.drop(validity.count_fault(value))
        return None

    def _counts(self, values: Any) -> Sequence[int] | None:
        """A per-position list fit to add (non-negative integers), else None (counted)."""
        if type(values) is list and set(map(type, values)) <= {int} and (not values or min(values) >= 0):
            return values
        if not isinstance(values, list | tuple):  # a number, a string: no per-position counts
            self.drop(WRONG_TYPE)
            return None
        for value in values:
            if not (type(value) is int and value >= 0):
                self.drop(validity.count_fault(value))
                return None
        return values

    def _seconds(self, value: Any) -> Any:
        """A timing fit to observe: finite and not negative (a NaN would poison the sum for good)."""
        if type(value) is float and 0.0 <= value < math.inf:
            return value
        if value is None:
            return None
        if _finite(value) and value >= 0:
            return value
        self.drop(validity.count_fault(value))
        return None

    def map_metadata(self, record: Mapping[str, Any] | Any) -> InfoUpdate:
        """A run-metadata record (the capture's dict or a :class:`specobs.records.RunMetadata`) as
        ``specobs_engine_info``'s labels. Identity labels are capped as a step row's are; a field
        the record lacks is an empty label (never a guess), a value of the wrong type too (counted
        ``wrong_type``), and a string over its budget or unfit for a label is ``other`` (counted
        per label)."""
        get = record.get if isinstance(record, Mapping) else (lambda name: getattr(record, name, None))
        cap = self.cap
        labels = self.labels_of({"model": get("model"), "engine": get("engine"), "method": get("method")})
        k = get("num_speculative_tokens")
        if k is None:
            k_label = ""
        elif type(k) is int and k >= 0:
            k_label = cap("num_speculative_tokens", str(k))
        else:
            self.drop(validity.count_fault(k))
            k_label = ""
        fields = []
        for name in INFO_FIELDS:
            value = get(name)
            if type(value) is int and value >= 0 and name in INTEGER_INFO:  # a parallel size
                value = str(value)
            elif value is not None and not isinstance(value, str):
                self.drop(WRONG_TYPE)
                value = None
            fields.append("" if value is None else cap(name, value))
        ts = get("ts")
        when = float(ts) if isinstance(ts, int | float) and _finite(ts) else None
        return InfoUpdate((labels[0], labels[1]), (*labels, k_label, *fields), when)

    def map_request(self, row: dict[str, Any]) -> RequestUpdate | None:
        """A finished request (a ``requests`` row) as its acceptance length,
        ``1 + num_accepted_tokens / num_spec_steps`` (``specobs.analysis.per_request.acceptance_length``);
        None for a request that never verified a draft (no length, as the analysis leaves it out)
        and for a row whose counts are bad (counted by reason) or contradict each other (more
        accepted than drafted, or than k per verify step: ``inconsistent``)."""
        steps = self._count(row.get("num_spec_steps"))
        accepted = self._count(row.get("num_accepted_tokens"))
        if not steps or accepted is None:
            return None
        drafted = self._count(row.get("num_draft_tokens"))
        k = _positive(row.get("num_spec_tokens"))
        if validity.request_contradiction(accepted, drafted, steps, k) is not None:
            self.drop(INCONSISTENT)
            return None
        labels, _, _ = self._labels_and_k(row)
        return RequestUpdate(labels, acceptance_length(accepted, steps))

    def map(self, row: dict[str, Any], steps: int | None = None) -> StepUpdate | None:
        """A steps row (``steps=1``) or a window of counts (``num_timed_steps`` of them); None when
        its counts contradict each other (counted ``inconsistent``)."""
        get = self._count
        timed = get(row.get("num_timed_steps")) if steps is None else steps
        drafts = get(row.get("num_drafts")) or 0
        draft_tokens = get(row.get("num_draft_tokens"))
        accepted = get(row.get("num_accepted_tokens")) or 0
        generated = get(row.get("num_generated_tokens")) or 0
        if draft_tokens is not None and validity.accepted_exceeds_drafted(accepted, draft_tokens):
            self.drop(INCONSISTENT)
            return None
        draft_tokens = draft_tokens or 0
        per_pos = row.get("num_accepted_tokens_per_pos")
        if per_pos:
            per_pos = self._counts(per_pos)
            if per_pos is None:
                drafts = 0  # drafts without their per-position counts would dilute every rate
        per_pos = per_pos or []
        labels, k, k_label = self._labels_and_k(row)
        positions = None
        if drafts:
            reached = self._counts(drafts_per_position(row, drafts, k))
            if reached is not None:
                if (
                    (reached and max(reached) > drafts)
                    or any(map(operator.gt, per_pos, reached))
                    or (len(per_pos) > len(reached) and any(per_pos[len(reached) :]))
                ):
                    self.drop(INCONSISTENT)
                    return None
                positions = (per_pos, reached)
        timing = None
        drafted = 0.0
        if timed == 1:  # a single step: its timings are one observation each
            seconds = (self._seconds(row.get("draft_seconds")), self._seconds(row.get("verify_seconds")),
                       self._seconds(row.get("step_seconds")))  # fmt: skip
            batch = row.get("batch_size")
            timing = (buckets.bounded_label(batch), seconds)
            requests = _positive(batch)
            if seconds[0] is not None and draft_tokens and requests is not None and requests >= 1:
                drafted = draft_positions(draft_tokens, requests)  # a step with draft time
        counts = (timed or 0, drafts, draft_tokens, accepted, generated, drafted)
        return StepUpdate(labels, counts, positions, timing, k_label)


class _Group:
    """One (model_name, engine, method)'s running sums, as plain numbers."""

    __slots__ = ("accepted", "accepted_created", "complete", "ks", "reached", "reached_created", "timings",
                 "totals", "totals_created")  # fmt: skip

    def __init__(self) -> None:
        self.totals: list[Any] = [0] * len(COUNTER_SPECS)
        self.totals_created = [0.0] * len(COUNTER_SPECS)
        self.accepted: list[Any] = [0] * MAX_POSITIONS
        self.reached: list[Any] = [0] * MAX_POSITIONS
        self.accepted_created = [0.0] * MAX_POSITIONS
        self.reached_created = [0.0] * MAX_POSITIONS
        self.complete = 0  #: positions below this have both per-position series (and their creation time)
        #: batch bucket → [sum, count] of each timing in TIMING_SPECS, one after the other
        self.timings: dict[str, list[Any]] = {}
        #: the k labels seen last, oldest first (a dict as an ordered set), at most MAX_K_SERIES
        self.ks: dict[str, None] = {}

    def add_positions(self, accepted: Sequence[Any], reached: Sequence[Any]) -> None:
        """Add one row's per-position counts. A reached position gets its accepted series too, at 0
        if need be (a rate of 0 must be a sample that raises SpecDecodeWastedPositions, not a
        missing series)."""
        width = max(min(len(accepted), MAX_POSITIONS), min(len(reached), MAX_POSITIONS))
        if accepted:
            self.accepted[: min(len(accepted), MAX_POSITIONS)] = map(operator.add, self.accepted, accepted)
        if reached:
            self.reached[: min(len(reached), MAX_POSITIONS)] = map(operator.add, self.reached, reached)
        if width > self.complete:  # a position may have got its first series: read the clock
            now = time.time()
            for position in range(self.complete, width):
                if self.reached[position] and not self.reached_created[position]:
                    self.reached_created[position] = now
                if (self.accepted[position] or self.reached[position]) and not self.accepted_created[position]:
                    self.accepted_created[position] = now
            while (
                self.complete < MAX_POSITIONS
                and self.reached_created[self.complete]
                and self.accepted_created[self.complete]
            ):
                self.complete += 1

    def derived(self) -> tuple[float | None, float | None]:
        """The cost ratio and draft share over every batch bucket (the sums the timings publish, as
        the recording rule reads them); None where they are undefined."""
        totals = [sum(column) for column in zip(*self.timings.values(), strict=True)]
        if not totals:
            return None, None
        draft, drafted, verify, verified, step, stepped = totals
        positions = self.totals[POSITIONS_INDEX]
        ratio = cost_ratio(draft, positions, verify, verified) if positions and verify else None
        share = (draft_share(draft, drafted, step, stepped) if drafted else 0.0) if step else None
        return ratio, share


class StepSums:
    """Every (model_name, engine, method)'s counters, per-position counters, timing sums and k labels,
    added to as plain numbers under one lock per row and listed as :class:`Point`\\ s on demand."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[tuple[str, str, str], _Group] = {}

    def add(self, update: StepUpdate) -> None:
        labels, counts, positions, timing, k = update
        with self._lock:
            group = self._groups.get(labels)
            if group is None:
                group = self._groups[labels] = _Group()
            group.totals[:] = map(operator.add, group.totals, counts)
            created = group.totals_created
            if 0.0 in created:  # a counter may have got its first series: read the clock
                for i, value in enumerate(counts):
                    if value and not created[i]:
                        created[i] = time.time()
            if positions is not None:
                group.add_positions(*positions)
            if timing is not None:
                bucket, seconds = timing
                sums = group.timings.get(bucket)
                if sums is None:
                    sums = group.timings[bucket] = [0.0, 0] * len(TIMING_SPECS)
                for i, value in enumerate(seconds):
                    if value is not None:
                        sums[2 * i] += value
                        sums[2 * i + 1] += 1
            if k is not None and k not in group.ks:
                group.ks[k] = None
                if len(group.ks) > MAX_K_SERIES:  # a tuner trying many k: the oldest goes
                    del group.ks[next(iter(group.ks))]

    def points(self) -> list[Point]:
        """Every series with its value now, grouped by (model_name, engine, method), in
        :data:`STEP_SPECS` order within a group."""
        out: list[Point] = []
        add = out.append
        with self._lock:
            for key, group in self._groups.items():
                for spec, total, created in zip(COUNTER_SPECS, group.totals, group.totals_created, strict=True):
                    if created:
                        add(Point(spec, key, total, created))
                for position in range(MAX_POSITIONS):
                    if group.accepted_created[position]:
                        add(Point(ACCEPTED_PER_POSITION, (*key, _POSITION_LABELS[position]),
                                  group.accepted[position], group.accepted_created[position]))  # fmt: skip
                    if group.reached_created[position]:
                        add(Point(DRAFTS_PER_POSITION, (*key, _POSITION_LABELS[position]),
                                  group.reached[position], group.reached_created[position]))  # fmt: skip
                for bucket, sums in group.timings.items():
                    for i, spec in enumerate(TIMING_SPECS):
                        if sums[2 * i + 1]:
                            add(Point(spec, (*key, bucket), (sums[2 * i + 1], sums[2 * i]), None))
                ratio, share = group.derived()
                if ratio is not None:
                    add(Point(COST_RATIO, key, ratio, None))
                if share is not None:
                    add(Point(DRAFT_SHARE, key, share, None))
                for k in sorted(group.ks):
                    add(Point(CONFIG_INFO, (*key, k), 1, None))
        return out


class EngineInfo:
    """Each engine's latest run metadata, one ``specobs_engine_info`` series per ``(model_name,
    engine)``. A record for an engine replaces its series (a restart with another configuration:
    the old series is gone at the next scrape, so Prometheus marks it stale and a join sees only
    the current one), unless it is older than the one published (both timed): a sidecar may read
    a previous run's metadata file after the current one's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: dict[tuple[str, str], tuple[tuple[str, ...], float | None]] = {}

    def set(self, update: InfoUpdate) -> bool:
        """Publish ``update`` for its engine; False when an older record was ignored."""
        with self._lock:
            current = self._latest.get(update.key)
            if current is not None and update.ts is not None and current[1] is not None and update.ts < current[1]:
                return False
            self._latest[update.key] = (update.labels, update.ts)
        return True

    def points(self) -> list[Point]:
        with self._lock:
            return [Point(ENGINE_INFO, labels, 1, None) for labels, _ in self._latest.values()]


class RequestSums:
    """The per-request acceptance histogram of every (model_name, engine, method): counts per
    bucket of :data:`REQUEST_ACCEPTANCE_BOUNDS` (an upper bound is inclusive, as ``le`` is), sum
    and count, as plain numbers under one lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: labels → [count in each bucket (the last one +Inf), sum, count]
        self._groups: dict[tuple[str, str, str], list[Any]] = {}

    def add(self, update: RequestUpdate) -> None:
        bucket = bisect.bisect_left(REQUEST_ACCEPTANCE_BOUNDS, update.length)
        with self._lock:
            group = self._groups.get(update.labels)
            if group is None:
                group = self._groups[update.labels] = [[0] * (len(REQUEST_ACCEPTANCE_BOUNDS) + 1), 0.0, 0]
            group[0][bucket] += 1
            group[1] += update.length
            group[2] += 1

    def points(self) -> list[Point]:
        """One point per group: ``(cumulative counts per bound, +Inf last; sum; count)``."""
        with self._lock:
            groups = [(labels, list(counts), total, n) for labels, (counts, total, n) in self._groups.items()]
        out = []
        for labels, counts, total, n in groups:
            cumulative = tuple(sum(counts[: i + 1]) for i in range(len(counts)))
            out.append(Point(REQUEST_ACCEPTANCE, labels, (cumulative, total, n), None))
        return out
