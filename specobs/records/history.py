"""Inputs read, and changes found over time: change points, drifts, breaks and their causes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from specobs.records.result import Result, _round, jsonable
from specobs.records.run_metadata import RunMetadata

# --- inputs read, and changes found over time --------------------------------------------------


@dataclass
class SourceReport:
    """What was read from one input."""

    name: str
    format: str
    lines: int | None
    windows: int
    skipped: int
    #: Run metadata the input itself holds (engine start-up lines of a log).
    metadata: tuple[RunMetadata, ...] = ()


@dataclass(frozen=True)
class ChangePoint:
    """A step change in acceptance length between two stretches of windows, or (``trend``) a
    gradual drift: then ``index``/``ts`` are where the slide starts, ``end_ts`` where it ends,
    ``before``/``after`` the fitted length at both ends and ``z`` the slope's."""

    index: int  # first window (0-based, in series order) after the change
    ts: float | None
    before: float
    after: float
    z: float
    end_ts: float | None = None
    rate_per_hour: float | None = None  # a drift's fitted slope, acceptance length per hour
    trend: bool = False
    rate_interval: tuple[float, float] | None = None  # the slope's 95% interval, per hour

    @property
    def kind(self) -> str:
        if self.trend:
            return "drift"
        return "regression" if self.after < self.before else "improvement"


@dataclass(frozen=True)
class Change:
    """A detected step in acceptance length, classified.

    ``kind``: ``regression`` / ``improvement`` (within one configuration) or
    ``configuration_change`` (the step coincides with a switch of method, k, batch bucket or
    workload; ``changed`` says which, before → after). ``labels`` are the group's values of the
    requested keys, ``configuration`` the configuration it happened within (or switched to),
    ``change`` where it is and how large (its own ``kind`` is only the direction).
    """

    kind: str
    labels: Mapping[str, Any]
    configuration: Mapping[str, Any]
    change: ChangePoint
    changed: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: the labels, then ``ts``, ``kind``, ``before``, ``after``, ``z``,
        ``configuration`` and ``changed`` (field → [before, after]); a ``drift`` adds
        ``end_ts`` and ``rate_per_hour``."""
        out = {
            **self.labels,
            "ts": self.change.ts,
            "kind": self.kind,
            "before": round(self.change.before, 4),
            "after": round(self.change.after, 4),
            "z": round(self.change.z, 2),
            "configuration": dict(self.configuration),
            "changed": {name: list(pair) for name, pair in self.changed.items()},
        }
        if self.change.trend:
            out["end_ts"] = self.change.end_ts
            out["rate_per_hour"] = round(self.change.rate_per_hour or 0.0, 4)
            out["rate_interval"] = [round(v, 4) for v in self.change.rate_interval or ()]
        return out


@dataclass(frozen=True)
class Cause(Result):
    """A run-metadata field that changed where acceptance broke (before → after), ranked by how
    often such a change moves acceptance; ``pitfall`` names a known pitfall its new value meets
    (``specobs.analysis.pitfalls``)."""

    field: str
    before: Any
    after: Any
    pitfall: str | None = None


@dataclass(frozen=True)
class RunRef(Result):
    """One engine run of a lineage: its identity, span and steady-state acceptance."""

    run_id: str | None
    engine: int | None
    start_ts: float | None
    end_ts: float | None
    num_drafts: int


class BreakKind(StrEnum):
    """What broke: acceptance fell or rose across a restart, collapsed near zero, or came back
    lower right after a stretch with drafting off (k=0)."""

    FALL = "fall"
    RISE = "rise"
    COLLAPSE = "collapse"
    STALE_AFTER_OFF = "stale_after_off"


@dataclass(frozen=True)
class Break(Result):
    """Acceptance that broke in one lineage (same model, method and workload), against the
    lineage's own earlier steady state: the run before and the run after a restart (``fall``,
    ``rise``, ``collapse``), or the steps before and after K=0 stretches (``stale_after_off``).

    ``before``/``after`` are acceptance lengths at ``depth`` drafted positions (both sides'
    per-position conditional rates, so a k change is compared on the positions both drafted);
    ``interval`` is the 95% interval of ``after − before``. ``causes`` are the run-metadata
    fields that changed between the two runs, most likely first; ``coincident_change`` is
    False when none did (a restart alone, or within one run)."""

    kind: BreakKind
    labels: Mapping[str, Any]
    ts: float | None
    before: float | None  # None: a collapse with no earlier run to compare
    after: float
    difference: float | None
    low: float | None
    high: float | None
    z: float | None
    depth: int
    before_run: RunRef | None = None
    after_run: RunRef | None = None
    causes: tuple[Cause, ...] = ()
    coincident_change: bool | None = None  # None: a side has no run metadata to compare
    pitfalls: tuple[str, ...] = ()  # known pitfalls the run after meets (ids)
    resumes: int | None = None  # stale_after_off: K=0 stretches checked

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.labels,
            "kind": str(self.kind),
            "ts": self.ts,
            "before": _round(self.before, 4),
            "after": _round(self.after, 4),
            "difference": _round(self.difference, 4),
            "interval": None if self.low is None or self.high is None else [round(self.low, 4), round(self.high, 4)],
            "z": _round(self.z, 2),
            "depth": self.depth,
            "before_run": jsonable(self.before_run),
            "after_run": jsonable(self.after_run),
            "causes": [c.to_dict() for c in self.causes],
            "coincident_change": self.coincident_change,
            "pitfalls": list(self.pitfalls),
            "resumes": self.resumes,
        }
