"""The acceptance report: ingest → analysis → one :class:`Report`, which every surface renders.

The JSON form (``Report.to_dict``) is a public contract: ``summary`` and each entry of
``groups`` carry exactly the keys in :data:`SUMMARY_KEYS` (plus, for groups, their labels);
intervals, diagnoses and plain-language findings live under ``details``, ``findings`` and
``change_points``. See docs/report.md.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specobs.analysis import acceptance
from specobs.analysis.cost import schedule_tax, timing_by_batch, unsteady_counts
from specobs.analysis.timeseries import Change, detect_changes
from specobs.errors import Skipped
from specobs.ingest import Ingested, SourceReport, counted_sources
from specobs.tuning.recommend import recommend, with_method

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
#: Positions accepted in fewer than this share of drafts are called wasted.
WASTED_THRESHOLD = 0.10
MAX_SKIPPED_EXAMPLES = 20
#: Below this largest gap between r_i and α^(i+1), the iid formula is called a fair model.
MATERIAL_IID_GAP = 0.05


@dataclass
class Report:
    """Everything ``specobs report`` shows, computed once."""

    by: list[str]
    summary: dict
    groups: list[dict]
    sources: list[SourceReport]
    skipped: list[Skipped]
    changes: list[Change] = field(default_factory=list)  # analysis.timeseries.detect_changes
    timing: list[dict] = field(default_factory=list)
    recommendation: Any = None  # specobs.tuning.recommend.Recommendation, when speculation ran
    tax: list[dict] = field(default_factory=list)  # analysis.cost.schedule_tax
    unsteady: dict[str, int] = field(default_factory=dict)  # analysis.cost.unsteady_counts

    @property
    def group_columns(self) -> list[str]:
        return acceptance.group_columns(self.by)

    def findings(self, row: dict | None = None) -> list[str]:
        """Plain-language sentences about ``row`` (default: the overall summary, with the
        report-wide ones: the k = 0 tax and the steps left out of cost fits)."""
        if row is not None:
            return explain(row)
        return explain(self.summary, changes=self.changes) + explain_costs(self.tax, self.unsteady)

    def to_dict(self) -> dict:
        cols = self.group_columns
        return {
            "summary": {k: _clean(self.summary.get(k)) for k in SUMMARY_KEYS},
            "groups": [
                {**{c: _clean(g.get(c)) for c in cols}, **{k: _clean(g.get(k)) for k in SUMMARY_KEYS}}
                for g in self.groups
            ],
            "details": {
                "summary": {k: _clean(self.summary.get(k)) for k in DETAIL_KEYS},
                "groups": [
                    {**{c: _clean(g.get(c)) for c in cols}, **{k: _clean(g.get(k)) for k in DETAIL_KEYS}}
                    for g in self.groups
                ],
            },
            "findings": self.findings(),
            "timing": [{k: _clean(v) for k, v in t.items()} for t in self.timing],
            "recommendation": _clean_tree(self.recommendation.to_dict()) if self.recommendation else None,
            "change_points": [_clean_tree(c.to_dict()) for c in self.changes],
            "sources": [
                {"source": s.name, "format": s.format, "lines": s.lines, "windows": s.windows, "skipped": s.skipped}
                for s in self.sources
            ],
            "skipped_lines": {
                "total": len(self.skipped),
                "examples": [
                    {"source": s.source, "line": s.line, "why": s.why} for s in self.skipped[:MAX_SKIPPED_EXAMPLES]
                ],
            },
        }


def _clean_tree(value):
    if isinstance(value, dict):
        return {k: _clean_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean_tree(v) for v in value]
    return _clean(value)


def _clean(value):
    """JSON-safe: round floats, keep None, convert lists."""
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def build(
    ingested: Ingested,
    by: Sequence[str] = acceptance.DEFAULT_BY,
    *,
    tune: bool = True,
    timing: bool = True,
    method: str | None = None,
) -> Report:
    """Analyse ``ingested`` into a :class:`Report` grouped by ``by`` (with a point-estimate
    recommendation unless ``tune`` is False, and timing by batch size unless ``timing`` is;
    ``method`` names the method of speculative rows that carry none)."""
    windows = ingested.windows
    if method is not None:
        windows = with_method(windows.lazy(), method)
    overall, groups = acceptance.summarize_with_total(windows, by=by)
    keys = acceptance.group_columns(by)
    summary = overall.to_dicts()[0] if overall.height else {}
    sources = counted_sources(ingested)
    changes = detect_changes(windows, keys)
    by_batch = timing_by_batch(windows, keys).to_dicts() if timing else []
    # Point estimates only: `specobs recommend` adds bootstrap intervals.
    recommendation = recommend(windows, bootstrap=0) if tune and summary.get("num_drafts") else None
    tax, unsteady = schedule_tax(windows), unsteady_counts(windows)
    rows = groups.to_dicts()
    return Report(list(by), summary, rows, sources, ingested.skipped, changes, by_batch, recommendation, tax, unsteady)


def _positions(indices: list[int]) -> str:
    """``[4, 5, 6]`` (0-based) → ``positions 5–7``."""
    ones = [i + 1 for i in indices]
    if len(ones) == 1:
        return f"position {ones[0]} is"
    if ones == list(range(ones[0], ones[-1] + 1)):
        return f"positions {ones[0]}–{ones[-1]} are"
    return "positions " + ", ".join(map(str, ones)) + " are"


def _when(ts: float | None) -> str:
    if ts is None:
        return "an unknown time"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def explain(row: dict, *, changes: Sequence[Change] = ()) -> list[str]:
    """What the numbers mean, in sentences with the numbers in them."""
    out: list[str] = []
    length = row.get("mean_acceptance_length")
    if length is None:
        if row.get("draft_acceptance_rate") is not None:
            out.append(
                f"{row['draft_acceptance_rate']:.1%} of drafted tokens were accepted; the number of drafts is not "
                "known, so the acceptance length cannot be computed (newer vLLM versions print it)."
            )
        return out
    low, high = row.get("mean_acceptance_length_low"), row.get("mean_acceptance_length_high")
    interval = f" (95% interval {low:.2f}–{high:.2f})" if low is not None and high is not None else ""
    if row.get("mean_acceptance_length_basis") == "reported":
        out.append(
            f"Each draft yields {length:.2f} tokens per verification on average{interval}, as printed by the "
            "engine (no counts: the mean is weighted by running requests)."
        )
    else:
        out.append(
            f"Each draft yields {length:.2f} tokens per verification on average{interval}: "
            f"{length - 1:.2f} accepted draft tokens plus the one token the target model adds (requests that "
            "did not draft in a step add one token)."
        )
    rate = row.get("draft_acceptance_rate")
    if rate is not None:
        out.append(f"{rate:.1%} of drafted tokens are accepted; the rest is draft and verify work thrown away.")
    rates = row.get("acceptance_rate_per_position") or []
    wasted = acceptance.wasted_positions(rates, WASTED_THRESHOLD)
    if rates and wasted:
        tail_start = wasted[0]
        if wasted == list(range(tail_start, len(rates))) and tail_start > 0:
            cut = acceptance.truncation(rates)[tail_start - 1]
            share = cut["share_of_accepted"]
            out.append(
                f"{_positions(wasted).capitalize()} accepted in under {WASTED_THRESHOLD:.0%} of drafts: "
                f"k={tail_start} keeps {share:.0%} of the accepted tokens "
                f"({cut['tokens_per_step']:.2f} tokens per step instead of {1 + sum(r or 0 for r in rates):.2f})."
            )
        else:
            out.append(f"{_positions(wasted).capitalize()} accepted in under {WASTED_THRESHOLD:.0%} of drafts.")
    trend, alpha, gap = row.get("conditional_trend"), row.get("iid_alpha"), row.get("iid_max_gap")
    cond = row.get("conditional_acceptance_rate_per_position") or []
    supported = acceptance.supported_positions(row)
    if trend in ("falling", "rising") and alpha is not None:
        first, last = supported[0], supported[-1]
        change = f"{cond[first]:.2f} at position {first + 1}, {cond[last]:.2f} at position {last + 1}"
        if gap is not None and gap >= MATERIAL_IID_GAP:
            out.append(
                f"Conditional acceptance is {trend} ({change}): the iid (Leviathan) formula with α={alpha:.2f} "
                f"misses some positions by up to {gap:.2f}; use the per-position rates, not α, to predict other k."
            )
        else:
            out.append(
                f"Conditional acceptance is slightly {trend} ({change}), but the iid formula with α={alpha:.2f} "
                f"stays within {gap:.2f} of every position: a fair model here."
            )
    elif trend == "flat" and alpha is not None:
        out.append(
            f"Conditional acceptance is flat across positions (consistent with a constant α={alpha:.2f}): "
            "the iid formula is a fair model here."
        )
    bias = acceptance.interval_bias(row)
    if bias:
        widest = max(bias[1:], key=lambda b: b["rate_high"] - b["rate"], default=None)
        if widest is not None and widest["rate_high"] > widest["rate"] + 0.005:
            out.append(
                f"Drafts were shorter than k ({row['tokens_for_pos'] / row['drafts_for_pos']:.2f} tokens per draft "
                f"at k={len(bias)}: a batch-size schedule or short lookups), and this source divides every position "
                f"by all drafts: positions 2–{len(bias)} are underestimated; position {widest['position']} reads "
                f"{widest['rate']:.2f} but may be up to {widest['rate_high']:.2f}. In-engine capture counts the "
                "drafts that reached each position."
            )
    if row.get("num_drafts_derived"):
        out.append(
            "The number of drafts is derived from the printed acceptance rates (vLLM's log line does not print it)."
        )
    for change in changes:
        c = change.change
        where = ", ".join(f"{k}={v}" for k, v in change.labels.items() if v is not None)
        where = f" ({where})" if where else ""
        direction = "fell" if c.after < c.before else "rose"
        if change.kind == "configuration_change":
            switched = ", ".join(f"{_CONFIG_NAMES.get(k, k)} {a} → {b}" for k, (a, b) in change.changed.items())
            out.append(
                f"Acceptance length {direction} {c.before:.2f} → {c.after:.2f} at {_when(c.ts)}{where} when "
                f"{switched}: a configuration change, not a regression."
            )
        else:
            within = ", ".join(
                f"{_CONFIG_NAMES.get(k, k)} {v}" for k, v in change.configuration.items() if v is not None
            )
            out.append(
                f"Acceptance length {direction} {c.before:.2f} → {c.after:.2f} at {_when(c.ts)}{where}"
                f"{' within ' + within if within else ''}: {change.kind} (z={c.z:.1f})."
            )
    return out


#: How configuration columns read in sentences.
_CONFIG_NAMES = {"num_spec_tokens": "k", "batch_bucket": "batch", "method": "method", "workload": "workload"}


def explain_costs(tax: Sequence[dict], unsteady: dict[str, int]) -> list[str]:
    """Sentences about the k = 0 tax (``analysis.cost.schedule_tax``) and left-out steps."""
    out = []
    for t in tax:
        sizes = ", ".join(map(str, t["batch_sizes"]))
        if t["tax_seconds"] <= 0:
            out.append(
                f"With drafting switched off (k=0) the {t['method']} engine took {t['off_seconds'] * 1e3:.1f} ms per "
                f"step against {t['plain_seconds'] * 1e3:.1f} ms in the plain engine ({t['tax_share']:+.0%}, batch "
                f"{sizes}): no measurable k=0 tax, and a k=0 step does more than a plain one, so the engines differ "
                "by more than that (separate processes can differ by 20–40% on shared machines)."
            )
            continue
        out.append(
            f"With drafting switched off (k=0) the {t['method']} engine still takes {t['off_seconds'] * 1e3:.1f} ms "
            f"per step against {t['plain_seconds'] * 1e3:.1f} ms in the plain engine ({t['tax_seconds'] * 1e3:+.1f} "
            f"ms, {t['tax_share']:+.0%}, batch {sizes}): a schedule's k=0 ranges pay this; no speculative config "
            "does not. Separate engine processes can differ by 20–40% on shared machines, so part of it may be "
            "the engines' own noise."
        )
    if unsteady:
        parts = [f"{n:,} {why}" for why, n in sorted(unsteady.items())]
        out.append(
            f"Left out of timing and cost fits: {' and '.join(parts)} step(s), each over 4× the median step time "
            "of its configuration (10× the time per token of its engine's steps at that k where the configuration "
            "is too small to judge): compilation, graph capture and first allocations are not steady state."
        )
    return out
