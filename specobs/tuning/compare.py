"""Compare two runs: acceptance, per-position rates, cost and throughput, with a verdict.

The verdict on acceptance length uses the two runs' 95% intervals: the change is called a
regression (or an improvement) when it exceeds 1.96 standard errors of the difference, with
each run's standard error read off its interval; otherwise the runs agree within noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import polars as pl

from specobs.analysis.acceptance import summarize
from specobs.analysis.cost import timing_by_batch

Z95 = 1.959963984540054


@dataclass
class Comparison:
    a: dict[str, Any]
    b: dict[str, Any]
    verdict: str
    kind: str  # regression, improvement, unchanged, unknown
    positions: list[dict[str, Any]]
    timing: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        keys = ("mean_acceptance_length", "mean_acceptance_length_low", "mean_acceptance_length_high",
                "draft_acceptance_rate", "num_drafts", "num_accepted_tokens")  # fmt: skip
        return {
            "verdict": self.verdict,
            "kind": self.kind,
            "a": {k: self.a.get(k) for k in keys},
            "b": {k: self.b.get(k) for k in keys},
            "positions": self.positions,
            "timing": self.timing,
        }


def _se(row: dict) -> float | None:
    low, high = row.get("mean_acceptance_length_low"), row.get("mean_acceptance_length_high")
    if low is None or high is None:
        return None
    return (high - low) / (2 * Z95)


def _overall_timing(windows: pl.LazyFrame | pl.DataFrame) -> dict[str, Any] | None:
    timed = timing_by_batch(windows, [])
    if timed.is_empty():
        return None
    steps = timed["timed_steps"]

    def mean(col: str) -> float | None:
        values = timed[col]
        mask = values.is_not_null()
        if not mask.any():
            return None
        return float((values.filter(mask) * steps.filter(mask)).sum() / steps.filter(mask).sum())

    return {
        "mean_draft_seconds": mean("mean_draft_seconds"),
        "mean_verify_seconds": mean("mean_verify_seconds"),
        "mean_step_seconds": mean("mean_step_seconds"),
        "generated_tokens_per_second": mean("generated_tokens_per_second"),
    }


def compare(a: pl.LazyFrame | pl.DataFrame, b: pl.LazyFrame | pl.DataFrame) -> Comparison:
    """Run A (before) against run B (after)."""
    ra = summarize(a, by=()).row(0, named=True)
    rb = summarize(b, by=()).row(0, named=True)
    la, lb = ra.get("mean_acceptance_length"), rb.get("mean_acceptance_length")
    if la is None or lb is None:
        verdict, kind = "acceptance length unknown in one of the runs: no verdict", "unknown"
    else:
        sa, sb = _se(ra), _se(rb)
        threshold = Z95 * math.sqrt((sa or 0) ** 2 + (sb or 0) ** 2) if (sa or sb) else 0.0
        diff = lb - la
        if abs(diff) > threshold and threshold > 0:
            kind = "regression" if diff < 0 else "improvement"
            direction = "fell" if diff < 0 else "rose"
            verdict = f"acceptance length {direction} {la:.2f} → {lb:.2f}, outside the 95% interval: {kind}"
        else:
            kind = "unchanged"
            verdict = f"acceptance length {la:.2f} → {lb:.2f}, within the 95% interval: no significant change"
    positions = []
    rates_a = ra.get("acceptance_rate_per_position") or []
    rates_b = rb.get("acceptance_rate_per_position") or []
    for i in range(max(len(rates_a), len(rates_b))):
        row: dict[str, Any] = {"position": i + 1}
        for name, r in (("a", ra), ("b", rb)):
            rates = r.get("acceptance_rate_per_position") or []
            lows = r.get("acceptance_rate_per_position_low") or []
            highs = r.get("acceptance_rate_per_position_high") or []
            row[name] = rates[i] if i < len(rates) else None
            row[f"{name}_interval"] = [lows[i], highs[i]] if i < len(lows) and lows[i] is not None else None
        ia, ib = row["a_interval"], row["b_interval"]
        row["changed"] = bool(ia and ib and (ia[1] < ib[0] or ib[1] < ia[0]))
        positions.append(row)
    timing = {"a": _overall_timing(a), "b": _overall_timing(b)}
    return Comparison(ra, rb, verdict, kind, positions, timing)
