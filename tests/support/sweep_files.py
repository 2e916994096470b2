"""By-hand numbers from a ``specobs sweep`` folder's result files (plain :mod:`json` and :mod:`math`,
no specobs code): the references the sweep tests compare ``specobs report`` against."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

from support.bench_files import expected_rows


def geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def rows_at(rows: list[dict[str, Any]], config: str, level: int) -> list[dict[str, Any]]:
    return [r for r in rows if r["config"] == config and r["max_concurrency"] == level]


def ratios_by_hand(folder: Path, plain: str = "plain") -> dict[tuple[str, int], float]:
    """(config, concurrency) → geometric mean of the configuration's output throughputs over the
    plain configuration's, at every level both ran."""
    rows = expected_rows(folder)
    out = {}
    for config in sorted({r["config"] for r in rows} - {plain}):
        for level in sorted({r["max_concurrency"] for r in rows if r["config"] == config}):
            spec = [r["output_throughput"] for r in rows_at(rows, config, level)]
            base = [r["output_throughput"] for r in rows_at(rows, plain, level)]
            out[(config, level)] = geometric_mean(spec) / geometric_mean(base)
    return out


def crossing_by_hand(points: list[tuple[int, float]]) -> tuple[str, tuple[int, int] | None]:
    """Where a ratio curve first falls to 1 or below: ``below`` (from the lowest level), ``never``,
    or ``crossed`` with the two levels around it."""
    if points[0][1] <= 1:
        return "below", None
    for (x1, _), (x2, r2) in itertools.pairwise(points):
        if r2 <= 1:
            return "crossed", (x1, x2)
    return "never", None


def pooled_acceptance(rows: list[dict[str, Any]]) -> float:
    """1 + accepted / drafts over the rows' ``spec_decode`` counts (vLLM's /metrics differences)."""
    drafts = sum(r["spec_decode"]["num_drafts"] for r in rows)
    accepted = sum(r["spec_decode"]["accepted_tokens"] for r in rows)
    return 1 + accepted / drafts
