"""Two runs compared: configurations, differences, per-position changes, throughput, the verdict's facts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from specobs.records.acceptance_summary import Summary
from specobs.records.context_split import Split
from specobs.records.history import Cause
from specobs.records.result import Result, jsonable, rounded
from specobs.records.serving_load import LoadRatio

# --- comparison -----------------------------------------------------------------------------------

#: The relative change in step time (B over A) from which a comparison says its steps took longer
#: or less time (below it they took the same time, to the percent shown).
STEP_TIME_MOVED = 0.005


@dataclass(frozen=True)
class Configuration(Result):
    """Methods, draft models and ks a run used, its schedule (the ks per batch bucket), and what
    it ran on: the values of each run-metadata field (:data:`ENVIRONMENT_FIELDS`, and each
    recorded environment variable by name) over its engines."""

    method: tuple[str, ...]
    draft_model: tuple[str, ...]
    num_spec_tokens: tuple[int, ...]
    schedule: Mapping[str, tuple[int, ...]]
    environment: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    engines_with_metadata: int = 0


@dataclass(frozen=True)
class Difference(Result):
    """A configuration field in which A and B are known to differ."""

    field: str
    a: Any
    b: Any


@dataclass(frozen=True)
class ConfigurationComparison(Result):
    a: Configuration
    b: Configuration
    differences: tuple[Difference, ...]
    #: Run-metadata fields in which A and B differ (attention backend, graph mode, device, …):
    #: named before anything else, since numbers across them are not comparable unsaid.
    environment: tuple[Difference, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.differences or self.environment)

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "changed": self.changed}


@dataclass(frozen=True)
class PositionChange(Result):
    """One position's rate on both sides; ``changed`` when the 95% intervals do not overlap."""

    position: int
    a: float | None
    a_interval: tuple[float, float] | None
    b: float | None
    b_interval: tuple[float, float] | None

    @property
    def changed(self) -> bool:
        ia, ib = self.a_interval, self.b_interval
        return bool(ia and ib and (ia[1] < ib[0] or ib[1] < ia[0]))

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "changed": self.changed}


@dataclass(frozen=True)
class SideTiming(Result):
    """Steps-weighted means over every batch bucket of one side."""

    mean_draft_seconds: float | None
    mean_verify_seconds: float | None
    mean_step_seconds: float | None
    generated_tokens_per_second: float | None


@dataclass(frozen=True)
class BucketThroughput(Result):
    """Generated tokens/s of both sides at one batch bucket both ran."""

    batch_bucket: str | None
    steps_a: int
    steps_b: int
    runs_a: int | None
    runs_b: int | None
    tokens_per_second_a: float
    tokens_per_second_b: float
    ratio: float
    step_seconds_ratio: float | None
    tested: bool


class ThroughputBasis(StrEnum):
    """What ``Throughput.ratio`` compares (``Throughput.basis``; the value is the JSON's words)."""

    DECODE_PER_BUCKET = "generated tokens per second of step time, steady-state steps, per batch bucket in both"


class ThroughputInterval(StrEnum):
    """How ``Throughput.low`` and ``high`` were found (``Throughput.interval``)."""

    WELCH_BETWEEN_RUNS = "95%, Student's t (Welch–Satterthwaite) on the spread between runs"


@dataclass(frozen=True)
class Throughput(Result):
    """B/A generated tokens per second at matched batch buckets, with a 95% interval."""

    basis: ThroughputBasis
    interval: ThroughputInterval
    ratio: float | None
    low: float | None
    high: float | None
    degrees_of_freedom: float | None
    step_seconds_ratio: float | None
    direction: str | None  # fell, rose, unchanged; None: nothing tested
    buckets: tuple[BucketThroughput, ...]
    buckets_only_in_a: tuple[str | None, ...]
    buckets_only_in_b: tuple[str | None, ...]

    @property
    def steps_moved(self) -> bool:
        """B's steps took longer or less time than A's by :data:`STEP_TIME_MOVED` or more (what the
        verdict says beside acceptance as why throughput moved)."""
        ratio = self.step_seconds_ratio
        return ratio is not None and abs(ratio - 1) >= STEP_TIME_MOVED


@dataclass(frozen=True)
class AcceptanceTest(Result):
    """The z test of B − A on the mean acceptance length."""

    difference: float | None = None
    standard_error: float | None = None
    z: float | None = None
    direction: str | None = None  # fell, rose, unchanged; None: not tested


@dataclass(frozen=True)
class Comparison(Result):
    """Run A (before) against run B (after): the JSON of ``specobs compare``."""

    kind: str  # regression, improvement, unchanged, configuration_changed, unknown
    a: Summary
    b: Summary
    positions: tuple[PositionChange, ...]
    timing_a: SideTiming | None
    timing_b: SideTiming | None
    configuration: ConfigurationComparison
    throughput: Throughput | None
    acceptance: AcceptanceTest
    #: Run-metadata fields that differ between A's and B's engines, most likely cause of an
    #: acceptance change first (``analysis.breaks.causes``); empty without metadata on both sides.
    causes: tuple[Cause, ...] = ()
    #: Serving-benchmark results on both sides: B over A per configuration and load level
    #: (``analysis.serving.serving_changes``; ``plain_config`` is A's configuration).
    serving: tuple[LoadRatio, ...] = ()
    #: Each side's targets and k against its own plain engine (or its k = 0 steps), at matched
    #: batch sizes, with the known pitfalls its engines meet (``analysis.split``; None: not timed).
    own_a: Split | None = None
    own_b: Split | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "a": self.a.side(),
            "b": self.b.side(),
            "positions": jsonable(self.positions),
            "timing": {"a": jsonable(self.timing_a), "b": jsonable(self.timing_b)},
            "configuration": self.configuration.to_dict(),
            "throughput": jsonable(self.throughput),
            "acceptance": self.acceptance.to_dict(),
            "causes": [c.to_dict() for c in self.causes],
            "serving": [rounded(r.to_dict()) for r in self.serving],
            "against_own_plain": {
                "a": rounded(self.own_a.to_dict()) if self.own_a is not None else None,
                "b": rounded(self.own_b.to_dict()) if self.own_b is not None else None,
            },
        }
