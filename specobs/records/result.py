"""The base of every result (``Result``: ``to_dict()`` is the JSON contract), the JSON helpers, the
keys the report groups its acceptance numbers under, and the vocabularies whose values are the JSON's words."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import field, fields
from enum import StrEnum
from typing import Any

#: The per-group acceptance keys of ``summary`` and each ``groups`` entry (docs/report.md).
SUMMARY_KEYS = (
    "num_drafts",
    "num_draft_tokens",
    "num_accepted_tokens",
    "mean_acceptance_length",
    "draft_acceptance_rate",
    "acceptance_rate_per_position",
    "conditional_acceptance_rate_per_position",
    "num_accepted_tokens_per_pos",
    "num_drafts_per_pos",
)
#: Intervals and diagnoses under ``details``.
DETAIL_KEYS = (
    "num_windows",
    "num_spec_tokens",
    "mean_acceptance_length_se",
    "mean_acceptance_length_low",
    "mean_acceptance_length_high",
    "mean_acceptance_length_basis",
    "acceptance_rate_per_position_low",
    "acceptance_rate_per_position_high",
    "conditional_acceptance_rate_per_position_low",
    "conditional_acceptance_rate_per_position_high",
    "iid_alpha",
    "iid_max_gap",
    "conditional_trend",
    "num_drafts_derived",
    "start_ts",
    "end_ts",
)
#: The acceptance keys of each side of a comparison.
SIDE_KEYS = (
    "mean_acceptance_length",
    "mean_acceptance_length_low",
    "mean_acceptance_length_high",
    "mean_acceptance_length_se",
    "draft_acceptance_rate",
    "num_drafts",
    "num_accepted_tokens",
)
#: Skipped lines listed by example in a report's JSON (the total is always given).
MAX_SKIPPED_EXAMPLES = 20


def internal() -> Any:
    """A field a renderer reads but the JSON leaves out."""
    return field(default=None, metadata={"json": False}, compare=False)


def jsonable(value: Any) -> Any:
    """Results, sequences and mappings → plain JSON values (tuples become lists)."""
    if isinstance(value, Result):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def rounded(value: Any, digits: int = 6) -> Any:
    """``value`` with every float rounded (the report's JSON); NaN and infinities become null."""
    if isinstance(value, float):
        return round(value, digits) if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v, digits) for v in value]
    return value


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


class Result:
    """Base of the result types: ``to_dict()`` from the fields, in order, internal ones left out."""

    def to_dict(self) -> dict[str, Any]:
        return {
            f.name: jsonable(getattr(self, f.name))
            for f in fields(self)  # type: ignore[arg-type]
            if f.metadata.get("json", True)
        }


# --- vocabularies: enum values are the JSON's words --------------------------------------------


class Baseline(StrEnum):
    """What speedups are against: a plain engine measured, or how its step time was estimated."""

    PLAIN = "plain engine"
    OFF_MINUS_DRAFT = "estimated: k=0 steps of the speculative engine minus their drafting"
    VERIFY = "estimated: verify at one token per request plus overhead"
    NONE = "not measured"  # why: ``Recommendation.not_measured`` (:class:`Unmeasured`)


class Unmeasured(StrEnum):
    """Why a method's speed was not measured (``NotMeasured.reason``): the thing the input lacks."""

    NO_PLAIN = "no step timing and no plain engine in the input"
    PLAIN_OTHER_TARGET = "no step timing, and the plain engine in the input runs another model, platform or device"
    FEW_INTERVALS = "no step timing, and too few steady intervals at a running count both engines show"
    NO_TIMING = "no step timing, and no throughput lines to compare with the plain engine's"
    #: Steps timed whole (``step_seconds``) but not split into drafting and verifying: the cost
    #: model needs the verify time (a capture from before the split timing, or a timing hook
    #: that did not run).
    NO_VERIFY_TIMING = "steps timed whole, without the verify time the cost model needs"


class Measures(StrEnum):
    """What a measured speedup measures (``Recommended.measures``, ``ServedSpeedup.measures``)."""

    DECODE = "decode steps only"  # generated tokens over the seconds of decode steps: prompt steps and idle left out
    SERVED = "served throughput"  # whole intervals while the load held: prompt processing and turnover gaps in


class Basis(StrEnum):
    """What a headline number rests on (``Recommended.basis``)."""

    MEASURED = "measured"  # every part
    MODELLED = "modelled"  # some part from the model: the buckets say which
    NOT_MEASURED = "not measured"  # no timing: no number, see the bands


class BucketBasis(StrEnum):
    """What one bucket's speedup rests on (``Prediction.basis``, ``BucketChoice.basis``,
    ``TuneBucket.basis``)."""

    MEASURED = "measured"
    PLAIN_MODELLED = "measured, plain modelled"  # the plain engine did not run most of those batch sizes
    MODEL = "model"
    DRAINED = "model, measured only while draining"  # a k seen only while larger batches drained
    PLAIN_DECODING = "plain decoding"  # the bucket switches speculation off


#: The bucket bases whose k was measured in the bucket (the plain engine there perhaps modelled).
MEASURED_BASES = frozenset({BucketBasis.MEASURED, BucketBasis.PLAIN_MODELLED})


class NoteKind(StrEnum):
    """What a cost fit assumed or measured (``ModelNote.kind``)."""

    NO_DRAFT_TIMING = "no_draft_timing"
    DRAFT_MEASURED = "draft_measured"
    DRAFT_SCALED = "draft_scaled"
    DRAFT_FLAT = "draft_flat"
    NO_PLAIN_ENGINE = "no_plain_engine"
