"""Acceptance results: one group's summary, per-position rates and bounds, truncation, timing per
batch size and the k=0 tax of a schedule."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specobs.records.result import DETAIL_KEYS, SIDE_KEYS, SUMMARY_KEYS, Result, internal, jsonable

# --- acceptance -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PositionRate(Result):
    """One draft position (1-based): ``r_i = a_i/n_i`` and ``β_i = a_i/m_i`` with 95% intervals."""

    position: int
    accepted: int | None
    drafts: int | None
    rate: float | None
    rate_low: float | None
    rate_high: float | None
    conditional: float | None
    conditional_low: float | None
    conditional_high: float | None


@dataclass(frozen=True)
class PositionBound(Result):
    """A per-position rate read from a source that divides by all drafts, and how high it may be."""

    position: int
    rate: float
    rate_high: float


@dataclass(frozen=True)
class Truncation(Result):
    """Tokens per verification step and the share of accepted tokens kept if drafting stopped at k."""

    k: int
    tokens_per_step: float
    share_of_accepted: float | None


@dataclass(frozen=True)
class Summary(Result):
    """Acceptance of one group (or of everything): counts, rates, intervals and diagnoses.

    ``to_dict()`` gives the :data:`SUMMARY_KEYS`; ``details()`` the :data:`DETAIL_KEYS`.
    Unknown is None, never 0.
    """

    num_drafts: int | None = None
    num_draft_tokens: int | None = None
    num_accepted_tokens: int | None = None
    mean_acceptance_length: float | None = None
    draft_acceptance_rate: float | None = None
    acceptance_rate_per_position: tuple[float | None, ...] | None = None
    conditional_acceptance_rate_per_position: tuple[float | None, ...] | None = None
    num_accepted_tokens_per_pos: tuple[int | None, ...] | None = None
    num_drafts_per_pos: tuple[int | None, ...] | None = None
    num_windows: int | None = None
    num_spec_tokens: int | None = None
    mean_acceptance_length_se: float | None = None
    mean_acceptance_length_low: float | None = None
    mean_acceptance_length_high: float | None = None
    mean_acceptance_length_basis: str | None = None  # "counts" or "reported"
    acceptance_rate_per_position_low: tuple[float | None, ...] | None = None
    acceptance_rate_per_position_high: tuple[float | None, ...] | None = None
    conditional_acceptance_rate_per_position_low: tuple[float | None, ...] | None = None
    conditional_acceptance_rate_per_position_high: tuple[float | None, ...] | None = None
    iid_alpha: float | None = None
    iid_max_gap: float | None = None
    conditional_trend: str | None = None  # falling, rising, flat
    num_drafts_derived: bool | None = None
    start_ts: float | None = None
    end_ts: float | None = None
    # What the findings need beyond the JSON.
    num_drafts_allowed_per_pos: tuple[int | None, ...] | None = internal()
    drafts_for_length: int | None = internal()
    draft_tokens_per_draft: float | None = internal()  # T/D over the rows with per-position counts
    windows_contradicting: int | None = internal()  # printed length or rate off their own counts
    supported_positions: tuple[int, ...] = field(default=(), metadata={"json": False}, compare=False)
    wasted_positions: tuple[int, ...] = field(default=(), metadata={"json": False}, compare=False)
    truncation: tuple[Truncation, ...] = field(default=(), metadata={"json": False}, compare=False)
    position_bounds: tuple[PositionBound, ...] | None = internal()

    def to_dict(self) -> dict[str, Any]:
        return {k: jsonable(getattr(self, k)) for k in SUMMARY_KEYS}

    def details(self) -> dict[str, Any]:
        return {k: jsonable(getattr(self, k)) for k in DETAIL_KEYS}

    def side(self) -> dict[str, Any]:
        """The acceptance keys of one side of a comparison (:data:`SIDE_KEYS`)."""
        return {k: jsonable(getattr(self, k)) for k in SIDE_KEYS}

    @property
    def positions(self) -> tuple[PositionRate, ...]:
        """Every position's rates and counts, 1-based."""
        rates = self.acceptance_rate_per_position or ()

        def at(values: Sequence[Any] | None, i: int) -> Any:
            return values[i] if values is not None and i < len(values) else None

        return tuple(
            PositionRate(
                i + 1,
                at(self.num_accepted_tokens_per_pos, i),
                at(self.num_drafts_per_pos, i),
                rate,
                at(self.acceptance_rate_per_position_low, i),
                at(self.acceptance_rate_per_position_high, i),
                at(self.conditional_acceptance_rate_per_position, i),
                at(self.conditional_acceptance_rate_per_position_low, i),
                at(self.conditional_acceptance_rate_per_position_high, i),
            )
            for i, rate in enumerate(rates)
        )


@dataclass(frozen=True)
class GroupSummary(Result):
    """A group's labels (its ``--by`` columns) and its acceptance summary."""

    labels: Mapping[str, Any]
    summary: Summary

    def to_dict(self) -> dict[str, Any]:
        return {**jsonable(self.labels), **self.summary.to_dict()}

    def details(self) -> dict[str, Any]:
        return {**jsonable(self.labels), **self.summary.details()}


@dataclass(frozen=True)
class BatchTiming(Result):
    """Where step time goes at one batch bucket of one group (``analysis.cost.timing_by_batch``)."""

    labels: Mapping[str, Any]
    batch_bucket: str | None
    timed_steps: int
    mean_draft_seconds: float | None
    mean_verify_seconds: float | None
    mean_step_seconds: float | None
    mean_other_seconds: float | None
    draft_share: float | None
    cost_ratio: float | None
    rejected_draft_share: float | None
    generated_tokens_per_second: float | None

    def to_dict(self) -> dict[str, Any]:
        return {**jsonable(self.labels), **{k: v for k, v in super().to_dict().items() if k != "labels"}}

    @classmethod
    def from_row(cls, row: Mapping[str, Any], label_columns: Sequence[str]) -> BatchTiming:
        return cls(
            labels={c: row[c] for c in label_columns if c in row},
            batch_bucket=row.get("batch_bucket"),
            timed_steps=row["timed_steps"],
            mean_draft_seconds=row.get("mean_draft_seconds"),
            mean_verify_seconds=row.get("mean_verify_seconds"),
            mean_step_seconds=row.get("mean_step_seconds"),
            mean_other_seconds=row.get("mean_other_seconds"),
            draft_share=row.get("draft_share"),
            cost_ratio=row.get("cost_ratio"),
            rejected_draft_share=row.get("rejected_draft_share"),
            generated_tokens_per_second=row.get("generated_tokens_per_second"),
        )


@dataclass(frozen=True)
class ScheduleTax(Result):
    """What a speculative engine's k = 0 steps cost against a plain engine (``analysis.cost.schedule_tax``)."""

    model: str | None
    platform: str | None
    device: str | None
    method: str | None
    steps: int
    off_seconds: float
    plain_seconds: float
    batch_sizes: tuple[int, ...]
    tax_seconds: float
    tax_share: float
