"""The acceptance report: ingest → analysis → one :class:`specobs.results.Report`, which every surface renders.

The JSON form (``Report.to_dict``) is a public contract: ``summary`` and each entry of
``groups`` carry exactly the keys in :data:`specobs.results.SUMMARY_KEYS` (plus, for groups,
their labels); intervals, diagnoses and plain-language findings live under ``details``,
``findings`` and ``change_points``. See docs/report.md.
"""

from __future__ import annotations

from collections.abc import Sequence

from specobs.analysis import acceptance
from specobs.analysis.cost import schedule_tax, steady_state, step_cells, timing_by_batch, unsteady_counts
from specobs.analysis.integrity import integrity
from specobs.analysis.timeseries import detect_changes
from specobs.ingest import Ingested, counted_sources
from specobs.results import BatchTiming, GroupSummary, Report, RequestAcceptance, Summary
from specobs.schema import categorical_labels
from specobs.tuning.recommend import recommend, with_method


def analyze(
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
    windows = categorical_labels(ingested.windows)
    if method is not None:
        windows = with_method(windows.lazy(), method)
    # Read and trimmed once: every analysis below takes this frame (steady_state is idempotent);
    # left lazy, each of them would read the inputs and rank their steps again.
    frame = steady_state(windows).collect()
    # Summed once into cells: the acceptance summary, its groups and the timing by batch read them.
    cells = step_cells(frame)
    overall, groups = acceptance.summarize_with_total(cells, by=by)
    keys = acceptance.group_columns(by)
    summary = Summary.from_row(overall.row(0, named=True)) if overall.height else Summary()
    by_batch = timing_by_batch(cells, keys).to_dicts() if timing else []
    # Point estimates only: `specobs recommend` adds bootstrap intervals.
    recommendation = recommend(frame, bootstrap=0) if tune and summary.num_drafts else None
    return Report(
        by=tuple(by),
        group_columns=tuple(keys),
        summary=summary,
        groups=tuple(
            GroupSummary({c: row.get(c) for c in keys}, Summary.from_row(row)) for row in groups.iter_rows(named=True)
        ),
        sources=tuple(counted_sources(ingested)),
        skipped=tuple(ingested.skipped),
        changes=tuple(detect_changes(frame, keys)),
        timing=tuple(BatchTiming.from_row(row, [c for c in keys if c != "batch_bucket"]) for row in by_batch),
        recommendation=recommendation,
        tax=tuple(schedule_tax(frame)),
        unsteady=unsteady_counts(frame),
        notices=tuple(ingested.notices),
        tuner_decisions=tuple(ingested.decisions),
        requests=RequestAcceptance.from_frame(ingested.requests),
        metadata=tuple(ingested.metadata),
        integrity=tuple(integrity(frame, ingested.metadata, ingested.decisions)),
    )


__all__ = ["analyze"]
