"""``specobs tune``: measurements, buckets, verification and noise of the closed loop."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specobs.records.result import Result

# --- the closed loop (specobs tune) -------------------------------------------------------------


@dataclass(frozen=True)
class TuneMeasurement(Result):
    """One candidate at one batch size: generated tokens per wall-clock second of its counted
    steps (start to start), with a 95% jackknife interval over its units.

    ``num_speculative_tokens`` 0 on the ``plain`` engine is plain decoding; 0 on the
    ``speculative`` engine is drafting switched off by the schedule (the drafter still runs).
    The speculative engine's ks are compared block by block inside one generation (units are
    cycles of blocks); the plain engine against them round by round (units are rounds), its
    interval widened by the bias between the two engine processes (``TuneNoise.engine_bias``).
    """

    batch_size: int
    num_speculative_tokens: int
    tokens_per_second: float
    low: float
    high: float
    rounds: int  # rounds this candidate ran in
    engine: str  # plain | speculative
    eliminated: bool  # dropped from the race: slower than the leader beyond noise
    leader: bool  # the fastest candidate at this batch size when the race ended
    steps: int = 0  # counted steps
    units: int = 0  # cycles (speculative) or rounds (plain) it was measured in
    vs_leader: float | None = None  # tokens/s over the leader's, paired (None: the leader itself)
    vs_leader_low: float | None = None  # at the race's per-look level (95% over all its looks)
    vs_leader_high: float | None = None


@dataclass(frozen=True)
class TuneBucket(Result):
    """The k chosen for one batch-size bucket and where that choice comes from."""

    batch_size_min: int
    batch_size_max: int
    num_speculative_tokens: int
    basis: str  # measured | model | nearest measured | measured either side | plain engine
    measured_batch_size: int | None  # the measured batch size this bucket's choice comes from
    tokens_per_second: float | None  # measured at that batch size (None: from the model)
    decided: bool  # the race established the leader's advantage, or a tie within 2%, at 95%


@dataclass(frozen=True)
class TuneVerification(Result):
    """The chosen configuration against the best static k and the plain engine on one mixed-batch
    workload. The chosen schedule and the best static k run in the same generations, switched
    block by block (gain paired over cycles); the plain engine runs in rounds beside them (gain
    paired over rounds, widened by the engine bias). 95% intervals."""

    rounds: int
    workload: str
    schedule_tokens_per_second: float
    best_static_num_speculative_tokens: int
    best_static_tokens_per_second: float
    plain_tokens_per_second: float
    gain_vs_best_static: float
    gain_vs_best_static_low: float
    gain_vs_best_static_high: float
    gain_vs_plain: float
    gain_vs_plain_low: float
    gain_vs_plain_high: float
    cycles: int = 0  # cycles of blocks behind the gain over the best static k
    half_width_target: float = 0.05  # the half-width (relative) the verification ran for
    target_met: bool = False  # both gains' intervals are within the target

    @property
    def verified(self) -> bool:
        """The gain over plain decoding is shown: its whole 95% interval is a gain (above 0); else
        the interval reaches a loss and the gain is measured, not verified."""
        return self.gain_vs_plain_low > 0

    @property
    def half_widths(self) -> tuple[float, float]:
        """Relative half-widths of the gain over the best static k and over plain."""

        def half(low: float, high: float, gain: float) -> float:
            return (high - low) / (2 * (1 + gain)) if math.isfinite(high - low) else math.inf

        return (
            half(self.gain_vs_best_static_low, self.gain_vs_best_static_high, self.gain_vs_best_static),
            half(self.gain_vs_plain_low, self.gain_vs_plain_high, self.gain_vs_plain),
        )


@dataclass(frozen=True)
class TuneNoise(Result):
    """How noisy the measurements were, how they were compared, and whether an idle engine
    stayed idle."""

    round_to_round: float  # median relative standard deviation of a candidate's rounds
    rounds: int  # race rounds run
    idle_cpu_seconds: dict[str, float]  # CPU an engine used while the other one ran
    busy_seconds: dict[str, float]  # wall time each engine spent generating
    cycle_to_cycle: float | None = None  # the same, for a speculative k's cycles of blocks
    comparison: str = "rounds"  # how the speculative engine's ks were compared
    engine_bias: float | None = None  # how far two engine processes doing the same work differ (ratio)
    engine_bias_low: float | None = None
    engine_bias_high: float | None = None
    engine_bias_basis: str | None = None  # how it was measured
    k0_tax: float | None = None  # share of a k=0 step the drafter still takes (captured steps)


@dataclass(frozen=True)
class TuneResult(Result):
    """What ``specobs tune`` returns: the chosen speculative config, the measurements it rests on,
    and their verification."""

    method: str | None
    speculative_config: str | None  # ready for --speculative-config; None: no speculation
    schedule: tuple[tuple[int, int, int], ...]
    buckets: tuple[TuneBucket, ...]
    measurements: tuple[TuneMeasurement, ...]
    verification: TuneVerification | None
    noise: TuneNoise
    seconds: dict[str, float]  # engine start, race, fit, verification, total
    decided: bool  # every measured batch size's race ended with a decision
    #: The shape every engine ran at: tensor, pipeline and data parallel sizes (None: a result
    #: from before the loops took a shape, or from a bench that is not vLLM).
    parallel: Mapping[str, int] | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TuneResult:
        """A result back from its JSON (``tune.json``), for the dashboard and the docs."""
        verification = data.get("verification")
        return cls(
            method=data["method"],
            speculative_config=data["speculative_config"],
            schedule=tuple((int(a), int(b), int(k)) for a, b, k in data["schedule"]),
            buckets=tuple(TuneBucket(**b) for b in data["buckets"]),
            measurements=tuple(TuneMeasurement(**m) for m in data["measurements"]),
            verification=TuneVerification(**verification) if verification else None,
            noise=TuneNoise(**data["noise"]),
            seconds=dict(data["seconds"]),
            decided=bool(data["decided"]),
            parallel={str(k): int(v) for k, v in data["parallel"].items()} if data.get("parallel") else None,
        )
