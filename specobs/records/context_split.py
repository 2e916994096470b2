"""Numbers split by an environment dimension or by context length (``analysis.split``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from specobs.records.acceptance_summary import Summary
from specobs.records.result import Result, jsonable


@dataclass(frozen=True)
class SplitRow(Result):
    """Acceptance, cost and measured speed of one target at one k at one value of the split's
    dimensions (a context bucket; an attention backend and platform…) (``analysis.split``).
    ``tokens_per_second``: generated tokens per second of step time, the geometric mean over
    ``stretches`` (runs of consecutive timed steps of one engine at this k and these values);
    ``speedup`` its ratio to the ``baseline``'s at the same values, with Welch's 95% interval over
    the stretches (None where not timed or without a baseline). ``pitfalls``: the known pitfalls
    (``analysis.pitfalls``) the row's engines meet."""

    labels: Mapping[str, Any]  # the target (schema.TARGET_LABELS)
    values: Mapping[str, Any]  # the split's columns → their values
    k: int | None
    summary: Summary
    draft_ms: float | None = None  # mean per timed step
    verify_ms: float | None = None
    step_ms: float | None = None
    tokens_per_second: float | None = None
    stretches: int = 0
    speedup: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    baseline: str | None = None  # "plain engine", else "k=0" (the same engine with drafting off)
    pitfalls: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = {"labels": dict(self.labels), **dict(self.values), "k": self.k}
        out.update(self.summary.to_dict())
        out.update({f.name: jsonable(getattr(self, f.name)) for f in fields(self)[4:]})
        return out


@dataclass(frozen=True)
class ContextTrend(Result):
    """Acceptance of one target at one k from its shortest to its longest context bucket (each
    with at least ``analysis.split.MIN_DRAFTS`` drafts): ``beyond_noise`` when the two
    acceptance-length intervals do not overlap."""

    labels: Mapping[str, Any]
    k: int | None
    short_bucket: str
    long_bucket: str
    short_length: float
    short_interval: tuple[float | None, float | None]
    long_length: float
    long_interval: tuple[float | None, float | None]
    short_rate: float | None
    long_rate: float | None
    beyond_noise: bool


@dataclass(frozen=True)
class SplitBest(Result):
    """The fastest measured k of one target at one value of the split, against the runner-up:
    ``ratio`` (low, high) its tokens per second over the runner-up's, Welch 95% over stretches;
    ``clear`` when the whole interval is above 1."""

    labels: Mapping[str, Any]
    values: Mapping[str, Any]
    k: int | None
    runner_up: int | None
    ratio: float | None
    low: float | None
    high: float | None
    clear: bool


@dataclass(frozen=True)
class Split(Result):
    """Acceptance, cost, measured speed and the best k of every target at each value of ``by``
    (``analysis.split``): by context length, or side by side by what the engines ran on.

    ``best_k_differs``: two values of one target whose best k differ, each beating the other's k
    beyond noise at its own value. ``trends``: for context only (its buckets are ordered).
    ``vllm_option``: for context, the speculative-config field that would apply a per-context k
    where the user's vLLM declares one (None: no release up to 0.33 has one, so none is printed)."""

    by: tuple[str, ...]  # dimension names
    rows: tuple[SplitRow, ...]
    trends: tuple[ContextTrend, ...] = ()
    best: tuple[SplitBest, ...] = ()
    best_k_differs: bool = False
    vllm_option: str | None = None
    #: Steps whose split values are known, of all steps (context: logs, scrapes and older captures have none).
    steps_known: int = 0
    steps: int = 0
