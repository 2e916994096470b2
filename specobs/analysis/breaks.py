"""Acceptance that breaks against its own past, and its likely causes.

A **lineage** is what one deployment keeps across restarts: the same model, method and
workload (:data:`LINEAGE`). Each engine run in it (``run_id``, ``engine``) has a steady state
(warm-up trimmed, ``analysis.cost.steady_state``); every run is compared with the run before
it in the lineage (the same engine index where there is one), which ended before it started:

- ``fall`` / ``rise``: the acceptance length at the positions both runs drafted (``depth``),
  from each side's per-position conditional rates, moved beyond noise: |z| past
  ``BREAK_Z`` (Bonferroni over the comparisons made) and by ``MIN_CHANGE`` or more;
- ``collapse``: the later run's draft acceptance rate is below
  :data:`specobs.analysis.pitfalls.COLLAPSED_BELOW` (with its predecessor, or alone);
- ``stale_after_off``: within one run, the first :data:`RESUME_STEPS` drafting steps after
  each stretch with drafting off (k = 0) against the last ones before it, paired per resume
  (position 1's rate: a schedule can change k at the same time).

``causes`` are the run-metadata fields that differ between the two runs, ranked: those that
make the later run meet a known pitfall first, then by :data:`CAUSE_ORDER` (how directly a
field changes what the drafter or the verifier computes). No differing field is said as
``coincident_change`` False; no metadata on a side as None.

The interval of a length at depth d, ``1 + Σ_i Π_{j≤i} c_j``, comes from the conditional
rates' intervals by the delta method, widened by the ratio of the run's step-level standard
error of its mean length to the same delta-method error at its own k: steps cluster tokens
(a request accepts alike across its steps), which binomial counts alone would miss.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import polars as pl

from specobs.analysis import acceptance
from specobs.analysis.intervals import Z95, mean_and_standard_error, mean_interval
from specobs.analysis.pitfalls import COLLAPSED_BELOW, field_names, matching, metadata_meets
from specobs.analysis.timeseries import split_threshold
from specobs.formulas import acceptance_length, acceptance_length_of_conditional
from specobs.records import Break, BreakKind, Cause, Change, IntegrityIssue, RunMetadata, RunRef

#: What stays the same across a lineage's restarts.
LINEAGE = ("model", "method", "workload")
#: The ``--by`` names of a lineage's runs.
RUN_BY = ("model", "method", "workload", "run", "engine")
#: |z| a restart's change must pass (before the Bonferroni bound over comparisons).
BREAK_Z = 4.0
#: Smallest relative change in acceptance length called a break.
MIN_CHANGE = 0.05
#: Drafts a run needs before it is compared.
MIN_DRAFTS = 200
#: Drafting steps on each side of a K=0 stretch compared by ``stale_after_off``.
RESUME_STEPS = 16
#: Resumes (K=0 stretches with drafting on both sides) needed before the check speaks.
MIN_RESUMES = 3
#: |t| the mean difference over resumes must pass for ``stale_after_off``.
STALE_Z = 3.0

#: Run-metadata fields compared between runs, most direct cause first.
CAUSE_ORDER = (
    "draft_model", "attention_backend", "draft_attention_backend", "environment", "kv_cache_dtype", "dtype",
    "num_speculative_tokens", "schedule", "speculative_config", "vllm_version", "model_runner", "graph_mode",
    "rejection_sample_method", "draft_sample_method", "tensor_parallel_size", "pipeline_parallel_size",
    "data_parallel_size", "model_path",
    "platform", "device", "device_arch",
)  # fmt: skip
#: Speculative-config settings already compared as fields of their own.
_SPEC_COVERED = {"method", "model", "num_speculative_tokens", "num_speculative_tokens_per_batch_size"}


@dataclass(frozen=True)
class RunState:
    """One run's steady state: identity, span, per-position conditional rates and their
    standard errors, and how much steps widen the binomial error (``design``)."""

    labels: Mapping[str, Any]
    ref: RunRef
    rates: tuple[float, ...]
    errors: tuple[float, ...]
    k: int
    design: float
    draft_acceptance_rate: float | None


def length_error(rates: Sequence[float], errors: Sequence[float], depth: int) -> float:
    """The delta-method standard error of the acceptance length of drafts ``depth`` long from
    conditional rates (:func:`~specobs.formulas.acceptance_length_of_conditional`; rates independent)."""
    variance = 0.0
    for j in range(depth):
        before = math.prod(rates[:j])
        after = acceptance_length_of_conditional(rates[j + 1 : depth])
        variance += (before * after * errors[j]) ** 2
    return math.sqrt(variance)


def _state(row: Mapping[str, Any]) -> RunState | None:
    rates = row.get("conditional_acceptance_rate_per_position") or []
    lows = row.get("conditional_acceptance_rate_per_position_low") or []
    highs = row.get("conditional_acceptance_rate_per_position_high") or []
    summary = acceptance.summary_of(row)
    supported = set(summary.supported_positions)
    usable: list[tuple[float, float]] = []
    for i, (c, lo, hi) in enumerate(zip(rates, lows, highs, strict=False)):
        if c is None or lo is None or hi is None or i not in supported:
            break
        usable.append((float(c), (float(hi) - float(lo)) / (2 * Z95)))
    if not usable or not row.get("num_drafts"):
        return None
    values, errors = tuple(c for c, _ in usable), tuple(e for _, e in usable)
    design = 1.0
    se, k = row.get("mean_acceptance_length_se"), len(values)
    binomial = length_error(values, errors, k)
    if se is not None and binomial > 0 and (row.get("num_spec_tokens") or 0) == k:
        design = max(1.0, float(se) / binomial)
    ref = RunRef(row["run_id"], row["engine"], row.get("start_ts"), row.get("end_ts"), int(row["num_drafts"]))
    return RunState({c: row.get(c) for c in LINEAGE}, ref, values, errors, k, design,
                    row.get("draft_acceptance_rate"))  # fmt: skip


def run_states(cells: pl.DataFrame) -> list[RunState]:
    """Each run's :class:`RunState`, from report cells (``analysis.cost.step_cells``) or rows."""
    if not cells.height:
        return []
    rows = acceptance.summarize(cells, by=RUN_BY)
    states = [_state(r) for r in rows.filter(pl.col("num_drafts") > 0).iter_rows(named=True)]
    return [s for s in states if s is not None]


def _first_metadata(metadata: Sequence[RunMetadata]) -> dict[tuple[str | None, int | None], RunMetadata]:
    """The first record per (run, engine), and per run under engine None for sources that do
    not say which engine a record is (a log's start-up lines)."""
    out: dict[tuple[str | None, int | None], RunMetadata] = {}
    for m in metadata:
        out.setdefault((m.run_id, m.engine), m)
    for m in metadata:
        out.setdefault((m.run_id, None), m)
    return out


def _metadata_of(known: Mapping[tuple[str | None, int | None], RunMetadata], ref: RunRef) -> RunMetadata | None:
    return known.get((ref.run_id, ref.engine)) or known.get((ref.run_id, None))


def _differences(a: RunMetadata, b: RunMetadata) -> Iterator[tuple[str, Any, Any]]:
    """Every compared field that differs, environment variables and speculative settings one by one."""
    names = {f.name for f in fields(RunMetadata)}
    for name in CAUSE_ORDER:
        if name not in names:
            continue
        if name == "environment":
            for var in sorted(set(a.environment) | set(b.environment)):
                if a.environment.get(var) != b.environment.get(var):
                    yield f"environment.{var}", a.environment.get(var), b.environment.get(var)
        elif name == "speculative_config":
            sa, sb = dict(a.speculative_config or {}), dict(b.speculative_config or {})
            if a.speculative_config is None or b.speculative_config is None:
                continue  # a source that does not show the settings says nothing about them
            for key in sorted((set(sa) | set(sb)) - _SPEC_COVERED):
                if sa.get(key) != sb.get(key):
                    yield f"speculative_config.{key}", sa.get(key), sb.get(key)
        else:
            va, vb = getattr(a, name), getattr(b, name)
            if va != vb and not (va is None or vb is None):  # an unknown value is not a change
                yield name, va, vb


def causes(before: RunMetadata, after: RunMetadata, acceptance_after: float | None) -> tuple[Cause, ...]:
    """The fields that changed from ``before`` to ``after``, ranked: a change that makes the
    later run meet a known pitfall (which the earlier did not) first, then :data:`CAUSE_ORDER`."""
    met = [p for p in matching(after, acceptance_after) if not metadata_meets(p, before)]
    found = []
    for rank, (name, va, vb) in enumerate(_differences(before, after)):
        base = name.split(".")[0]
        pitfall = next((p.id for p in met if base in field_names(p)), None)
        found.append((pitfall is None, rank, Cause(name, va, vb, pitfall)))
    return tuple(c for *_, c in sorted(found, key=lambda t: (t[0], t[1])))


def _predecessor(run: RunState, earlier: Sequence[RunState]) -> RunState | None:
    """The run this one replaced: ended before it started, the same engine index first, latest end."""
    start = run.ref.start_ts
    if start is None:
        return None
    ended = [e for e in earlier if e.ref.end_ts is not None and e.ref.end_ts <= start]
    same = [e for e in ended if e.ref.engine == run.ref.engine]
    pool = same or ended
    return max(pool, key=lambda e: e.ref.end_ts or 0.0) if pool else None


def _lineages(states: Sequence[RunState]) -> dict[tuple[Any, ...], list[RunState]]:
    out: dict[tuple[Any, ...], list[RunState]] = {}
    for s in sorted(states, key=lambda s: (s.ref.start_ts is None, s.ref.start_ts or 0.0)):
        out.setdefault(tuple(s.labels[c] for c in LINEAGE), []).append(s)
    return out


def restart_breaks(states: Sequence[RunState], metadata: Sequence[RunMetadata]) -> list[Break]:
    """``fall``, ``rise`` and ``collapse`` across each lineage's restarts (module docstring)."""
    known = _first_metadata(metadata)
    pairs: list[tuple[RunState | None, RunState]] = []
    for runs in _lineages(states).values():
        for i, run in enumerate(runs):
            before = _predecessor(run, runs[:i])
            if run.ref.num_drafts < MIN_DRAFTS or (before is not None and before.ref.num_drafts < MIN_DRAFTS):
                before = None
            pairs.append((before, run))
    compared = sum(1 for before, _ in pairs if before is not None)
    threshold = split_threshold(compared, BREAK_Z)
    out = []
    for before, run in pairs:
        m_after = _metadata_of(known, run.ref)
        collapsed = (
            run.draft_acceptance_rate is not None
            and run.draft_acceptance_rate < COLLAPSED_BELOW
            and run.ref.num_drafts >= MIN_DRAFTS
        )
        pitfalls = tuple(p.id for p in matching(m_after, run.draft_acceptance_rate)) if m_after else ()
        if before is None:
            if collapsed:
                after = acceptance_length_of_conditional(run.rates, run.k)
                out.append(Break(BreakKind.COLLAPSE, dict(run.labels), run.ref.start_ts, None, after, None, None,
                                 None, None, run.k, None, run.ref, (), False, pitfalls))  # fmt: skip
            continue
        rates, errors = run.rates, run.errors
        if collapsed and before.k > run.k:  # positions a collapsed drafter never reached accept nothing
            rates, errors = rates + (0.0,) * (before.k - run.k), errors + (0.0,) * (before.k - run.k)
        depth = min(before.k, len(rates))
        lb, la = acceptance_length_of_conditional(before.rates, depth), acceptance_length_of_conditional(rates, depth)
        se = math.hypot(
            before.design * length_error(before.rates, before.errors, depth),
            run.design * length_error(rates, errors, depth),
        )
        diff = la - lb
        z = diff / se if se > 0 else (0.0 if diff == 0 else math.copysign(math.inf, diff))
        if not collapsed and (abs(z) < threshold or abs(diff) < MIN_CHANGE * lb):
            continue
        m_before = _metadata_of(known, before.ref)
        found = causes(m_before, m_after, run.draft_acceptance_rate) if m_before and m_after else ()
        coincident = bool(found) if m_before and m_after else None
        kind = BreakKind.COLLAPSE if collapsed else BreakKind.FALL if diff < 0 else BreakKind.RISE
        out.append(Break(kind, dict(run.labels), run.ref.start_ts, lb, la, diff, diff - Z95 * se, diff + Z95 * se,
                         z, depth, before.ref, run.ref, found, coincident, pitfalls))  # fmt: skip
    return out


def resume_sums(steps: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """Per resume (a K=0 stretch with drafting steps on both sides, within one run): position
    1's accepted and drafted counts over the :data:`RESUME_STEPS` drafting steps before and
    after it. Columns: the lineage, ``run_id``, ``engine``, ``ts`` (the resume), ``before_accepted``,
    ``before_drafts``, ``after_accepted``, ``after_drafts``."""
    keys = [*LINEAGE, "run_id", "engine"]
    schema = steps.collect_schema()
    empty = pl.DataFrame(schema={**{c: schema.get(c, pl.String) for c in keys}, "ts": pl.Float64,
                                 "before_accepted": pl.Int64, "before_drafts": pl.Int64,
                                 "after_accepted": pl.Int64, "after_drafts": pl.Int64})  # fmt: skip
    needed = {*keys, "counters", "end_ts", "num_spec_tokens", "num_drafts", "num_accepted_tokens_per_pos"}
    if not needed <= set(steps.collect_schema().names()):
        return empty
    off = (pl.col("num_spec_tokens") == 0) & (pl.col("num_drafts").fill_null(0) == 0)
    step = pl.col("counters").eq_missing("step")
    # Only runs with a K=0 step have a resume: the others (most inputs) cost one filter.
    with_off = steps.lazy().filter(step & off.fill_null(False)).select(keys).unique().collect()
    if not with_off.height:
        return empty
    # One 64-bit id per run (a hash of its labels): windows over one integer column, not five
    # categoricals (3.7 s → 1.5 s on 10M steps with K=0 stretches in every run).
    run = pl.struct(keys).hash()
    ids = with_off.with_columns(_g=run)
    rows = (
        steps.lazy()
        .filter(step)
        .select(
            run.alias("_g"),
            pl.col("end_ts").alias("ts"),
            "num_spec_tokens",
            "num_drafts",
            pl.col("num_accepted_tokens_per_pos").list.get(0, null_on_oob=True).alias("_first"),
        )
        .filter(pl.col("_g").is_in(ids["_g"].implode()))
        .collect()
    )
    drafting = (pl.col("num_drafts") > 0) & pl.col("_first").is_not_null()
    marked = (
        # Time order alone: every window below runs over one run's rows, in frame order.
        rows.sort("ts", nulls_last=True, maintain_order=True)
        .with_columns(_off=off.fill_null(False), _drafting=drafting.fill_null(False))
        .filter(pl.col("_off") | pl.col("_drafting"))
        .with_columns(_switch=(pl.col("_off") != pl.col("_off").shift(1)).over("_g").fill_null(True))
        .with_columns(_stretch=pl.col("_switch").cum_sum().over("_g"))
    )
    runs = (
        marked.filter(pl.col("_drafting"))
        .with_columns(
            _head=pl.int_range(pl.len()).over(["_g", "_stretch"]),
            _tail=pl.int_range(pl.len()).reverse().over(["_g", "_stretch"]),
        )
        .group_by(["_g", "_stretch"], maintain_order=True)
        .agg(
            start=pl.col("ts").min(),
            head_accepted=pl.col("_first").filter(pl.col("_head") < RESUME_STEPS).sum(),
            head_drafts=pl.col("num_drafts").filter(pl.col("_head") < RESUME_STEPS).sum(),
            tail_accepted=pl.col("_first").filter(pl.col("_tail") < RESUME_STEPS).sum(),
            tail_drafts=pl.col("num_drafts").filter(pl.col("_tail") < RESUME_STEPS).sum(),
        )
    )  # first appearance is time order: each run's stretches come in order
    # Drafting stretches alternate with off ones: stretch s + 2 follows the off stretch s + 1.
    paired = runs.with_columns(
        _prev=pl.col("_stretch").shift(1).over("_g"),
        before_accepted=pl.col("tail_accepted").shift(1).over("_g"),
        before_drafts=pl.col("tail_drafts").shift(1).over("_g"),
    ).filter(pl.col("_prev").is_not_null() & (pl.col("_stretch") == pl.col("_prev") + 2))
    return paired.join(ids, on="_g", how="inner", maintain_order="left").select(
        *keys,
        pl.col("start").alias("ts"),
        pl.col("before_accepted").cast(pl.Int64),
        pl.col("before_drafts").cast(pl.Int64),
        pl.col("head_accepted").cast(pl.Int64).alias("after_accepted"),
        pl.col("head_drafts").cast(pl.Int64).alias("after_drafts"),
    )


def stale_breaks(resumes: pl.DataFrame) -> list[Break]:
    """``stale_after_off`` per run: the mean over resumes of position 1's rate after minus
    before, with a t interval over resumes (each resume one paired observation)."""
    if not resumes.height:
        return []
    keys = [*LINEAGE, "run_id", "engine"]
    out = []
    for values, part in (
        resumes.filter((pl.col("before_drafts") > 0) & (pl.col("after_drafts") > 0))
        .partition_by(keys, as_dict=True, maintain_order=True)
        .items()
    ):
        n = part.height
        if n < MIN_RESUMES:
            continue
        before = part["before_accepted"] / part["before_drafts"]
        after = part["after_accepted"] / part["after_drafts"]
        diffs = (after - before).to_list()
        mean, se = mean_and_standard_error(diffs)
        _, low, high = mean_interval(diffs)
        t = mean / se if se > 0 else 0.0
        totals = part.select(pl.col("before_accepted", "before_drafts", "after_accepted", "after_drafts").sum())
        ba, bd, aa, ad = (float(v) for v in totals.row(0))
        rb = ba / bd
        if t > -STALE_Z or -mean < MIN_CHANGE * rb:
            continue
        labels = dict(zip(keys, values, strict=True))
        ref = RunRef(labels["run_id"], labels["engine"], None, None, int(part["after_drafts"].sum()))
        length_before, length_after = acceptance_length(ba, bd), acceptance_length(aa, ad)
        out.append(Break(BreakKind.STALE_AFTER_OFF, {c: labels[c] for c in LINEAGE}, part["ts"].cast(pl.Float64).min(),  # type: ignore[arg-type]
                         length_before, length_after, mean, low, high, t, 1, None, ref, (), False,
                         resumes=n))  # fmt: skip
    return out


def across_restart(change: Change, breaks: Sequence[Break]) -> bool:
    """True when ``change`` (a step of a series that spans runs: one log appended across
    restarts) is a restart a break already names: same direction, between the runs (or within
    the first tenth of the later one)."""
    if change.change.trend or change.change.ts is None or change.kind == "configuration_change":
        return False
    for b in breaks:
        if b.before_run is None or b.after_run is None or b.difference is None:
            continue
        ended, started, last = b.before_run.end_ts, b.after_run.start_ts, b.after_run.end_ts
        if ended is None or started is None or last is None:
            continue
        same_way = (change.change.after < change.change.before) == (b.difference < 0)
        if same_way and ended <= change.change.ts <= started + 0.1 * (last - started):
            return True
    return False


def not_named_by(issues: Sequence[IntegrityIssue], breaks: Sequence[Break]) -> list[IntegrityIssue]:
    """``issues`` less the known pitfalls a break already names for the same run (said once, as a cause)."""
    named = {(b.after_run.run_id, b.after_run.engine, p) for b in breaks if b.after_run for p in b.pitfalls}
    return [i for i in issues if i.kind != "known_pitfall" or (i.run_id, i.engine, i.pitfall) not in named]


def find_breaks(cells: pl.DataFrame, metadata: Sequence[RunMetadata], resumes: pl.DataFrame) -> list[Break]:
    """Every break of the input: restarts per lineage, then stale resumes, in time order."""
    found = restart_breaks(run_states(cells), metadata) + stale_breaks(resumes)
    return sorted(found, key=lambda b: (b.ts is None, b.ts or 0.0))


__all__ = [
    "BREAK_Z",
    "CAUSE_ORDER",
    "LINEAGE",
    "RunState",
    "across_restart",
    "causes",
    "find_breaks",
    "length_error",
    "not_named_by",
    "restart_breaks",
    "resume_sums",
    "run_states",
    "stale_breaks",
]  # fmt: skip
