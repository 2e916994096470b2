"""Per-request acceptance: groups, length bins, flagged requests."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from specobs.records.result import Result

# --- per request ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestGroup(Result):
    """Acceptance across the finished requests of one group (``label``: a bucket or a label's value).

    ``request_weighted_mean_acceptance_length`` is the mean of the requests' own lengths
    (``1 + accepted/steps`` each, the bonus token counted); ``token_weighted_…`` is
    ``1 + Σ accepted / Σ steps``, in which long requests weigh more. Percentiles are over the
    requests that verified a draft. Unknown is None.
    """

    label: str | None
    num_requests: int
    num_requests_without_drafts: int
    num_spec_steps: int
    num_draft_tokens: int
    num_accepted_tokens: int
    request_weighted_mean_acceptance_length: float | None
    token_weighted_mean_acceptance_length: float | None
    p10: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    mean_prompt_tokens: float | None
    mean_output_tokens: float | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any], label: str | None = None) -> RequestGroup:
        """From a row of ``analysis.per_request.summarize``."""
        values: dict[str, Any] = {f.name: row.get(f.name) for f in fields(cls) if f.name != "label"}
        for name in ("num_requests", "num_requests_without_drafts", "num_spec_steps", "num_draft_tokens",
                     "num_accepted_tokens"):  # fmt: skip
            values[name] = int(values[name] or 0)
        return cls(label=None if label is None else str(label), **values)


@dataclass(frozen=True)
class LengthBin(Result):
    """Requests whose acceptance length is in ``[low, high)`` (the last bin closed)."""

    low: float
    high: float
    requests: int


@dataclass(frozen=True)
class FlaggedRequest(Result):
    """A request whose draft acceptance rate sits far below its class's (same workload and
    prompt-length bucket, the request itself left out): a quality signal (``analysis.per_request``)."""

    request_key: str | None  # a hash of the request id, never the id or its text
    workload: str | None
    prompt_bucket: str | None
    num_draft_tokens: int
    draft_acceptance_rate: float
    class_draft_acceptance_rate: float
    z: float


@dataclass(frozen=True)
class RequestAcceptance(Result):
    """Acceptance per request (``requests`` rows): overall, its distribution, and by group;
    ``flagged``: the worst of the ``num_flagged`` requests far below their class."""

    overall: RequestGroup
    histogram: tuple[LengthBin, ...]
    by_prompt_length: tuple[RequestGroup, ...]
    by_output_length: tuple[RequestGroup, ...]
    by_workload: tuple[RequestGroup, ...]
    by_method: tuple[RequestGroup, ...]
    num_flagged: int = 0
    flagged: tuple[FlaggedRequest, ...] = ()
