"""The capture's typed row: one engine step, or one request's share of a step.

The hooks build a :class:`StepRow` per step (and per sampled request when per-request rows are
on); a misspelt column is a ``TypeError`` at construction (counted in ``hook_errors``, logged
once) and an error for the type checker, not a column that silently stays null. The recorder's
flush thread turns each row into a plain dict with :meth:`StepRow.to_dict`, off the engine's
hot path, so sinks keep receiving dicts of ``steps`` columns::

    row = StepRow(ts=1764472000.0, run_id="r", batch_size=4, num_spec_tokens=3, num_drafts=4)
    row.to_dict()["num_drafts"]       # 4
    row.to_dict()["request_id"]       # None: unknown is null, never 0

Its fields are exactly the ``steps`` columns of :data:`specobs.schema.STEPS`, in order
(tests/test_capture.py checks it; the schema stays the one place that names them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specobs.capture.timing import Span

#: Seconds, or the spans that make them up while the step may still run on the device.
Seconds = float | Sequence["Span"] | None


@dataclass(slots=True)
class StepRow:
    """One ``steps`` row (see docs/schema.md for every column's contract).

    Nothing changes a row once it is built: the recorder resolves the spans in
    ``draft_seconds`` and ``verify_seconds`` in the dict :meth:`to_dict` returns (and keeps
    that dict back while a device span is still in flight), never in the row. The class is
    still not ``frozen``, for the engine thread's sake: a frozen dataclass stores each of its
    27 fields through ``object.__setattr__``, which costs about 3.5 µs more per row than
    plain slot stores — +15% on all hooks of a step at batch 8, and the same again for every
    per-request row (benchmarks/bench_capture.py).
    """

    ts: float | None = None
    """Wall-clock time (Unix seconds) when the scheduler finished the step."""
    run_id: str | None = None
    """The serving run (``SPECOBS_RUN_ID``)."""
    engine: int | None = None
    """Data-parallel rank of the engine."""
    model: str | None = None
    """Served (target) model."""
    method: str | None = None
    """vLLM's speculative method (``SpeculativeConfig.method``)."""
    draft_model: str | None = None
    """Draft model, when the method has one."""
    platform: str | None = None
    """``cuda``, ``rocm``, ``cpu``, …"""
    device: str | None = None
    """Device (or CPU) name."""
    vllm_version: str | None = None
    """vLLM's version."""
    attention_backend: str | None = None
    """The target's attention backend (vLLM's name, e.g. ``FLASH_ATTN``, ``ROCM_AITER_FA``)."""
    graph_mode: str | None = None
    """``eager``, or the CUDA/HIP graph mode (``piecewise``, ``full``, ``full_and_piecewise``, …)."""
    workload: str | None = None
    """A label for the traffic (``SPECOBS_WORKLOAD``)."""
    request_id: str | None = None
    """Set on per-request rows; null on step rows."""
    batch_size: int | None = None
    """Requests scheduled in the step."""
    num_scheduled_tokens: int | None = None
    """Tokens the target model processed in the step: prompt chunks, decode tokens and drafts."""
    context_length: float | None = None
    """Mean tokens in context (prompt plus output so far) of the step's requests, after the step."""
    context_length_max: int | None = None
    """The longest context of the step's requests, in tokens."""
    num_spec_tokens: int | None = None
    """k of the step (the scheduled one under a batch-size → k schedule)."""
    num_drafts: int | None = None
    """Drafts verified in the step."""
    num_draft_tokens: int | None = None
    """Draft tokens verified (grammar-invalid ones excluded, as vLLM counts them)."""
    num_accepted_tokens: int | None = None
    """Draft tokens accepted."""
    num_accepted_tokens_per_pos: list[int] | None = None
    """a_i: drafts accepted past position i."""
    num_drafts_per_pos: list[int] | None = None
    """n_i: drafts that reached position i (drafted more than i tokens)."""
    num_drafts_accepted_before_pos: list[int] | None = None
    """m_i: drafts that reached position i with positions 0..i-1 accepted."""
    num_generated_tokens: int | None = None
    """Tokens the step produced and the requests kept (accepted drafts plus the bonus or
    recovered token, less what a stop cut off)."""
    num_accepted_tokens_past_end: int | None = None
    """Accepted draft tokens counted in ``num_accepted_tokens`` that a stop then cut off."""
    draft_seconds: Seconds = None
    """Time in the proposer (spans until resolved)."""
    verify_seconds: Seconds = None
    """Time in the target forward and rejection sampling (spans until resolved)."""
    step_seconds: float | None = None
    """Wall time from ``schedule`` to the end of ``update_from_output``."""
    timing_clock: str | None = None
    """The clock of ``draft_seconds`` and ``verify_seconds``: ``device``, ``host`` or ``mixed``."""

    def to_dict(self) -> dict[str, Any]:
        """A plain dict of every column (a new dict; span values are left for the recorder)."""
        return {name: getattr(self, name) for name in COLUMNS}


#: The field names, in order: the ``steps`` columns.
COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(StepRow))

__all__ = ["COLUMNS", "StepRow"]
