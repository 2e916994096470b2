"""Serving under load: SLOs, levels, ratios between configurations, crossovers, load advice."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from specobs.records.result import Result


class LatencyUnit(StrEnum):
    """What one latency measure of a serving benchmark is per, which decides whether its ratio
    between a speculative and a plain server compares like with like."""

    #: TTFT and end-to-end latency: one number per request.
    REQUEST = "per request"
    #: TPOT: (end-to-end − TTFT) / (output tokens − 1) of each request: the per-token measure.
    TOKEN = "per output token"
    #: ITL: the gaps between streamed output events. A speculative step streams the tokens it
    #: accepted as one event, so its gaps are bursts (one long gap, then none) where a plain
    #: server's are one token each: percentiles of ITL compare unlike things under speculation.
    EVENT = "per output event"


#: The unit of each latency measure (``schema.BENCH_LATENCIES``).
LATENCY_UNITS: dict[str, LatencyUnit] = {
    "ttft": LatencyUnit.REQUEST,
    "tpot": LatencyUnit.TOKEN,
    "itl": LatencyUnit.EVENT,
    "e2el": LatencyUnit.REQUEST,
}


def latency_unit(measure: str) -> LatencyUnit:
    """The unit of a latency column (``p99_itl_ms`` → per output event)."""
    return LATENCY_UNITS[measure.removesuffix("_ms").split("_", 1)[1]]


@dataclass(frozen=True)
class Slo(Result):
    """A per-request service-level objective, in seconds (vLLM's ``--goodput`` measures): a
    request is *good* when it succeeded and meets every bound set; goodput is good requests per
    second of the run, as vLLM computes it."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2el_s: float | None = None

    def __str__(self) -> str:
        parts = [(n, v) for n, v in (("ttft", self.ttft_s), ("tpot", self.tpot_s), ("e2el", self.e2el_s))]
        return ", ".join(f"{n} ≤ {v * 1e3:g} ms" for n, v in parts if v is not None)


@dataclass(frozen=True)
class ServingLevel(Result):
    """One configuration at one load level of a serving benchmark: runs and mean measures."""

    model: str | None
    config: str | None
    speculative: bool | None
    load: str  # concurrency | rate
    level: float
    runs: int
    output_throughput: float | None
    mean_tpot_ms: float | None
    p99_tpot_ms: float | None
    mean_ttft_ms: float | None
    acceptance_length: float | None  # the benchmark's spec_decode section (the server's counters)
    #: Drafts the server counted during these runs (the spec_decode sections; 0: it drafted nothing).
    spec_decode_num_drafts: int | None = None
    #: What the in-engine capture recorded during these runs (their time windows): steps, mean
    #: batch size, acceptance length, mean step time, the share of steps that drafted, the engine
    #: runs; None without a capture of the server.
    captured_steps: int | None = None
    captured_batch_size: float | None = None
    captured_acceptance_length: float | None = None
    captured_step_ms: float | None = None
    captured_drafting_share: float | None = None
    #: Per position, the share of drafts whose token there was accepted (as vLLM's
    #: ``spec_decode_per_position_acceptance_rates``), and the mean draft and verify ms per step.
    captured_per_position: tuple[float, ...] | None = None
    captured_draft_ms: float | None = None
    captured_verify_ms: float | None = None
    run_ids: tuple[str, ...] = ()
    #: The benchmark clients whose results these are (``schema.BENCH_CLIENTS``).
    clients: tuple[str, ...] = ()
    #: Under an SLO (``Serving.slo``): good requests per second (mean over runs) and the share of
    #: requests that met it; None without an SLO or without the per-request data it needs.
    goodput: float | None = None
    slo_attained: float | None = None


@dataclass(frozen=True)
class MeasureRatio(Result):
    """B/A of one latency measure (``p99_tpot_ms``…) with its 95% interval over repeats, and
    what the measure is per (:class:`LatencyUnit`: ITL's ratios compare bursts with tokens)."""

    measure: str
    ratio: float | None
    low: float | None
    high: float | None

    @property
    def unit(self) -> LatencyUnit:
        return latency_unit(self.measure)

    def to_dict(self) -> dict[str, object]:
        return {**super().to_dict(), "unit": self.unit.value}


@dataclass(frozen=True)
class LoadRatio(Result):
    """A speculative configuration over the plain server at one load level (B/A of geometric
    means over repeats; 95% interval, None with one run on a side)."""

    model: str | None
    config: str | None
    plain_config: str | None
    load: str
    level: float
    runs: int
    plain_runs: int
    throughput_ratio: float | None
    throughput_low: float | None
    throughput_high: float | None
    tpot_ratio: float | None  # below 1: tokens come faster
    tpot_low: float | None
    tpot_high: float | None
    #: Medians and percentiles of TTFT, TPOT, ITL and end-to-end latency both sides report.
    latency: tuple[MeasureRatio, ...] = ()
    goodput_ratio: float | None = None  # under ``Serving.slo``
    goodput_low: float | None = None
    goodput_high: float | None = None
    #: The share of the speculative engine's steps that drafted here (capture; 0 when the
    #: benchmark counted no drafts): near 0, the ratios are the cost of a speculative server
    #: that does not speculate at this load (a k=0 tier of a schedule: the K=0 tax).
    drafting_share: float | None = None
    #: Captured: the speculative engine's mean step time over the plain engine's at this level,
    #: and its tokens per draft (why the ratio is what it is: step cost against acceptance).
    step_time_ratio: float | None = None
    acceptance_length: float | None = None


@dataclass(frozen=True)
class Crossover(Result):
    """Where a configuration stops paying in one metric (``output_throughput``, ``mean_tpot_ms``
    or ``goodput``): its ratio against plain crosses parity (``how``: ``crossed``, ``never``
    within the levels measured, ``below`` parity from the lowest, ``unknown``), with the levels
    where its 95% bounds cross (None: open at that end)."""

    model: str | None
    config: str | None
    load: str
    metric: str
    level: float | None
    how: str
    low: float | None
    high: float | None
    lowest_level: float
    highest_level: float
    repeated: bool  # every level had repeats on both sides (else no interval)


@dataclass(frozen=True)
class SyntheticPrompts(Result):
    """Serving results whose prompts were synthetic tokens (vLLM's ``random`` datasets): a
    drafter guesses continuations of text, and on random token ids it guesses far less (users
    report 12% acceptance on random tokens against 52% on prose), so their acceptance and
    speedup say little about real traffic."""

    dataset: str
    client: str | None
    configs: tuple[str | None, ...]
    results: int


@dataclass(frozen=True)
class Serving(Result):
    """Speculation under load, from serving-benchmark results (``analysis.serving``)."""

    levels: tuple[ServingLevel, ...]
    ratios: tuple[LoadRatio, ...]
    crossovers: tuple[Crossover, ...]
    slo: Slo | None = None
    #: The results measured on synthetic tokens, per dataset and client (empty: none said so).
    synthetic: tuple[SyntheticPrompts, ...] = ()


@dataclass(frozen=True)
class LoadAdvice(Result):
    """Where one speculative configuration should draft, from where it stopped paying against
    the plain server under load (``advice.load``): a measured crossover, not a model.

    ``verdict``: ``switch_off_above`` (its gain is shown beyond noise at low load and it stops
    paying within the levels measured), ``speculate`` (it paid at every level measured, beyond
    noise at some), ``plain`` (no gain shown: at or below parity from the lowest level, or a loss
    beyond noise), ``not_shown`` (no difference beyond noise either way). ``draft_up_to`` is the
    largest batch size that drafts: the batch at the crossover's 95% lower bound, the highest load
    where the gain is still shown (``crossover_batch`` is the point estimate's,
    ``crossover_batch_high`` the upper bound's); turned into batch sizes by the capture's mean
    batch per level, else taken as the concurrency, an upper bound (``batch_from``).
    ``schedule`` is vLLM's ``num_speculative_tokens_per_batch_size`` with k=0 above it, in
    ``speculative_config`` with every setting the run metadata shows (``missing`` names the rest).
    The schedule itself was not run unless ``schedule_measured``; its k=0 steps still pay the K=0
    tax, measured in ``k0_tax`` where a server of the sweep did not draft."""

    model: str | None
    config: str | None
    method: str | None
    num_speculative_tokens: int | None
    load: str
    metric: str  # the crossover it rests on
    verdict: str
    stops_paying_at: float | None = None
    stops_paying_low: float | None = None  # 95% bounds of the crossover level (None: open)
    stops_paying_high: float | None = None
    lowest_level: float | None = None
    highest_level: float | None = None
    losses: tuple[float, ...] = ()  # levels where it lost beyond noise
    draft_up_to: int | None = None
    crossover_batch: int | None = None
    crossover_batch_high: int | None = None
    batch_from: str | None = None  # capture | concurrency
    schedule: tuple[tuple[int, int, int], ...] | None = None
    speculative_config: str | None = None
    missing: tuple[str, ...] = ()
    schedule_measured: bool = False
    k0_tax: tuple[LoadRatio, ...] = ()


@dataclass(frozen=True)
class LoadRecommendation(Result):
    """What ``specobs recommend`` returns for serving-benchmark results alone: where each
    configuration should draft, from its measured crossover (``advice.load``)."""

    under_load: tuple[LoadAdvice, ...]
    slo: Slo | None = None
