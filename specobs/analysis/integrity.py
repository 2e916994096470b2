"""Config integrity: where the numbers do not measure what the configuration says they do.

Each check reads the steps (and the run metadata) once and returns typed facts
(:class:`specobs.records.IntegrityIssue`); :mod:`specobs.render.sentences` words them.

- ``schedule_ignored``: a batch-size → k schedule is configured, yet drafts are longer than
  the k it allows at their batch size (as reported for Model Runner V2, which drafts the
  maximum k whatever the schedule says). A step's allowed k is the k the scheduler recorded
  for it when that is below the maximum, else the schedule's k at its batch size (vLLM's
  dense lookup: gaps and the tail carry the previous range's k). Runs where the online tuner
  applied a k are left out: it rewrites the lookup at run time.
- known pitfalls (:mod:`specobs.analysis.pitfalls`, a table with a public source per entry):
  each engine whose metadata (and draft acceptance rate, where the entry needs it) meets an
  entry's condition. Two keep their own kind: ``schedule_disabled`` (a batch-size schedule
  configured with data parallel > 1, where vLLM drops it and every step drafts the static k)
  and ``synthetic_rejection`` (vLLM accepts drafts at configured rates, so acceptance
  measures the configuration, not the drafter); the others are ``known_pitfall``.
- ``short_drafts``: drafts fill less than :data:`FILL_BELOW` of k (ngram lookups that find
  shorter matches, a drafter that stops early): positions past the fill are rarely tried,
  while verification pays for k.
- ``host_timed``: steps on a GPU (``cuda``/``rocm``) whose draft or verify time came from the
  host clock (``timing_clock`` ``host`` or ``mixed``): a span that would have fallen inside a
  graph capture, where HIP refuses events. Those times include launch and queueing, not only
  device work.
- ``missing_hooks``: the engine's vLLM release lacks hook points the capture uses (the run
  metadata's ``missing_hooks``, the engine core's and its timing worker's): the numbers named
  there are absent from its rows, not zero.
- ``accepted_past_end``: accepted draft tokens that vLLM counted although a stop
  (``max_tokens``, EOS) then cut them off the request: acceptance is inflated at request
  ends, most on short outputs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import polars as pl

from specobs.analysis.pitfalls import matching
from specobs.formulas import acceptance_rate, tokens_per_draft
from specobs.records import IntegrityIssue, RunMetadata, TunerDecision

#: Steps below the schedule's maximum k needed before calling the schedule ignored.
MIN_STEPS = 20
#: Share of those steps whose drafts exceed the allowed k that makes the schedule ignored.
IGNORED_SHARE = 0.9
#: Drafts filling less than this share of k are called short.
FILL_BELOW = 0.9
#: Accepted tokens past the end below this share of all accepted are not worth a finding.
PAST_END_AT_LEAST = 0.005


def schedule_lookup(schedule: Sequence[tuple[int, int, int]], max_batch: int, max_k: int) -> list[int]:
    """vLLM's dense batch size → k table (index = batch size; index 0 unused), as
    ``build_dynamic_sd_schedule_lookup`` builds it: each range's k capped at ``max_k``, gaps
    and the tail after the last range carrying the previous range's k::

        schedule_lookup([(1, 2, 3), (5, 6, 1)], 8, 4) == [0, 3, 3, 3, 3, 1, 1, 1, 1]
    """
    table = [0] * (max_batch + 1)
    previous: int | None = None
    following = 1
    for low, high, k in sorted(schedule):
        for b in range(following, min(low, max_batch + 1)):
            if previous is not None:
                table[b] = min(max_k, previous)
        for b in range(max(low, following), min(high, max_batch) + 1):
            table[b] = min(max_k, k)
        following, previous = max(following, high + 1), k
    for b in range(following, max_batch + 1):
        if previous is not None:
            table[b] = min(max_k, previous)
    return table


def _schedules(
    metadata: Sequence[RunMetadata], tuned: set[tuple[str | None, int | None]]
) -> Iterator[tuple[tuple[str | None, int | None], RunMetadata, int, list[int]]]:
    """Each run with a schedule that asks for less than its maximum k somewhere (first metadata
    per run; runs the tuner rewrote left out): its key, metadata, largest batch and k table."""
    seen: set[tuple[str | None, int | None]] = set()
    for m in metadata:
        key = (m.run_id, m.engine)
        if not m.schedule or not m.num_speculative_tokens or key in seen or key in tuned:
            continue
        seen.add(key)
        max_k = m.num_speculative_tokens
        largest = max(m.max_num_seqs or 0, max(high for _, high, _ in m.schedule))
        table = schedule_lookup(m.schedule, largest, max_k)
        if min(table[1:], default=max_k) >= max_k:
            continue  # the schedule never asks for less than the maximum
        yield key, m, largest, table


def _schedule_sums(
    steps: pl.DataFrame, metadata: Sequence[RunMetadata], tuned: set[tuple[str | None, int | None]]
) -> dict[tuple[str | None, int | None], tuple[int, int, float, int, float]]:
    """Per run of :func:`_schedules`: steps below the maximum k, those drafting more than
    allowed, the sum and count of their known draft lengths, and the sum of their allowed k."""
    out = {}
    for key, m, largest, table in _schedules(metadata, tuned):
        max_k = m.num_speculative_tokens or 0
        rows = steps.filter(
            pl.col("run_id").eq_missing(m.run_id)
            & pl.col("engine").eq_missing(m.engine)
            & (pl.col("num_drafts") > 0)
            & pl.col("batch_size").is_between(1, largest)
        )
        if rows.is_empty():
            continue
        scheduled = pl.col("batch_size").replace_strict(list(range(len(table))), table, default=max_k)
        allowed = pl.when(pl.col("num_spec_tokens") < max_k).then(pl.col("num_spec_tokens")).otherwise(scheduled)
        per_draft = tokens_per_draft(pl.col("num_draft_tokens"), pl.col("num_drafts"))
        below = rows.with_columns(allowed=allowed, per_draft=per_draft).filter(pl.col("allowed") < max_k)
        over = below.filter(pl.col("per_draft") > pl.col("allowed") + 1e-9).height
        per_draft_known = below["per_draft"].drop_nulls()
        out[key] = (
            below.height,
            over,
            float(per_draft_known.sum()),
            per_draft_known.len(),
            float(below["allowed"].sum()),
        )
    return out


def _schedule_ignored(sums: IntegritySums, metadata: Sequence[RunMetadata], tuned: set) -> list[IntegrityIssue]:
    out = []
    for key, m, _, _ in _schedules(metadata, tuned):
        below, over, per_draft, per_draft_known, allowed = sums.schedules.get(key, (0, 0, 0.0, 0, 0.0))
        if below < MIN_STEPS or over < IGNORED_SHARE * below:
            continue
        out.append(
            IntegrityIssue(
                "schedule_ignored",
                run_id=m.run_id,
                engine=m.engine,
                method=m.method,
                affected=over,
                checked=below,
                observed=per_draft / per_draft_known if per_draft_known else None,
                corrected=allowed / below,
                max_k=m.num_speculative_tokens,
            )
        )
    return out


#: Pitfalls with a check of their own name: their issue kind is their id (the rest: ``known_pitfall``).
OWN_KINDS = ("schedule_disabled", "synthetic_rejection")


def _pitfalls(metadata: Sequence[RunMetadata], sums: IntegritySums) -> list[IntegrityIssue]:
    """Every known pitfall (``analysis.pitfalls``) each engine's metadata meets, its draft
    acceptance rate (from its steps) checked where the entry needs it: first metadata per run."""
    rates = {
        (r["run_id"], r["engine"]): acceptance_rate(r["accepted"], r["drafted"])
        for r in sums.runs.iter_rows(named=True)
        if r["drafted"]
    }
    out, seen = [], set()
    for m in metadata:
        key = (m.run_id, m.engine)
        if key in seen:
            continue
        seen.add(key)
        rate = rates.get(key)
        for pitfall in matching(m, rate):
            out.append(
                IntegrityIssue(
                    pitfall.id if pitfall.id in OWN_KINDS else "known_pitfall",
                    run_id=m.run_id,
                    engine=m.engine,
                    method=m.method,
                    affected=(m.data_parallel_size or 0) if pitfall.id == "schedule_disabled" else 0,
                    observed=rate,
                    max_k=m.num_speculative_tokens,
                    pitfall=pitfall.id,
                )
            )
    return out


def _missing_hooks(metadata: Sequence[RunMetadata]) -> list[IntegrityIssue]:
    """Each engine (first metadata per run) whose capture lacked hook points in its vLLM release."""
    out, seen = [], set()
    for m in metadata:
        key = (m.run_id, m.engine)
        if key in seen or not m.missing_hooks:
            continue
        seen.add(key)
        out.append(IntegrityIssue("missing_hooks", run_id=m.run_id, engine=m.engine, method=m.method,
                                  affected=len(m.missing_hooks), lost=tuple(m.missing_hooks),
                                  vllm_version=m.vllm_version))  # fmt: skip
    return out


def _short_drafts(sums: IntegritySums) -> list[IntegrityIssue]:
    rows = sums.short_drafts.filter((pl.col("room") > 0) & (pl.col("drafted") < FILL_BELOW * pl.col("room")))
    return [
        IntegrityIssue(
            "short_drafts",
            method=r["method"],
            affected=r["drafted"],
            checked=r["room"],
            observed=r["drafted"] / r["room"],
            max_k=r["k"],
        )
        for r in rows.iter_rows(named=True)
    ]


def _host_timed(sums: IntegritySums) -> list[IntegrityIssue]:
    host, on_device = sums.host_timed
    return [IntegrityIssue("host_timed", affected=host, checked=on_device)] if host else []


def _past_end(sums: IntegritySums) -> list[IntegrityIssue]:
    rows = sums.past_end.filter((pl.col("accepted") > 0) & (pl.col("past") >= PAST_END_AT_LEAST * pl.col("accepted")))
    return [
        IntegrityIssue(
            "accepted_past_end",
            method=r["method"],
            affected=r["past"],
            checked=r["accepted"],
            observed=acceptance_rate(r["accepted"], r["drafted"]),
            corrected=acceptance_rate(r["accepted"] - r["past"], r["drafted"]),
        )
        for r in rows.iter_rows(named=True)
        if r["drafted"]
    ]


_STEP_COLUMNS = ["run_id", "engine", "method", "platform", "batch_size", "num_spec_tokens", "num_drafts",
                 "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_past_end", "timing_clock"]  # fmt: skip


def _tuned(decisions: Sequence[TunerDecision]) -> set[tuple[str | None, int | None]]:
    return {(d.run_id, d.engine) for d in decisions if d.action in ("apply", "rollback")}


@dataclass(frozen=True)
class IntegritySums:
    """What the step checks read of the steps: sums per method and per scheduled run, and the
    GPU steps timed on the host. Sums of the parts of an input (:meth:`merge`) are the whole's."""

    short_drafts: pl.DataFrame  # method, drafted (tokens), room (drafts × k), steps, k (max)
    past_end: pl.DataFrame  # method, past, accepted, drafted
    host_timed: tuple[int, int]  # GPU steps timed on the host clock, GPU steps timed
    schedules: dict[tuple[str | None, int | None], tuple[int, int, float, int, float]]  # see _schedule_sums
    runs: pl.DataFrame  # run_id, engine, accepted, drafted (tokens): each engine's draft acceptance rate

    @classmethod
    def of(
        cls, windows: pl.DataFrame | pl.LazyFrame, metadata: Sequence[RunMetadata], decisions: Sequence[TunerDecision]
    ) -> IntegritySums:
        steps = (
            windows.lazy()
            .filter(pl.col("counters").eq_missing("step") & pl.col("num_drafts").is_not_null())
            .select(_STEP_COLUMNS)
            .collect()
        )
        short = (
            steps.filter((pl.col("num_drafts") > 0) & (pl.col("num_spec_tokens") > 0))
            .group_by("method", maintain_order=True)
            .agg(
                drafted=pl.col("num_draft_tokens").sum(),
                room=(pl.col("num_drafts") * pl.col("num_spec_tokens")).sum(),
                steps=pl.len(),
                k=pl.col("num_spec_tokens").max(),
            )
        )
        past = (
            steps.filter(pl.col("num_accepted_tokens_past_end").is_not_null())
            .group_by("method", maintain_order=True)
            .agg(
                past=pl.col("num_accepted_tokens_past_end").sum(),
                accepted=pl.col("num_accepted_tokens").sum(),
                drafted=pl.col("num_draft_tokens").sum(),
            )
        )
        on_device = steps.filter(pl.col("platform").is_in(["cuda", "rocm"]) & pl.col("timing_clock").is_not_null())
        host = on_device.filter(pl.col("timing_clock").is_in(["host", "mixed"])).height
        schedules = _schedule_sums(steps, metadata, _tuned(decisions))
        runs = steps.group_by("run_id", "engine", maintain_order=True).agg(
            accepted=pl.col("num_accepted_tokens").sum(), drafted=pl.col("num_draft_tokens").sum()
        )
        return cls(short, past, (host, on_device.height), schedules, runs)

    @classmethod
    def merge(cls, parts: Sequence[IntegritySums]) -> IntegritySums:
        def added(frames: list[pl.DataFrame], ops: dict[str, str], keys: Sequence[str] = ("method",)) -> pl.DataFrame:
            both = pl.concat(frames, how="vertical_relaxed")
            return both.group_by(keys, maintain_order=True).agg(getattr(pl.col(c), op)() for c, op in ops.items())

        schedules: dict[tuple[str | None, int | None], tuple[int, int, float, int, float]] = {}
        for part in parts:
            for key, values in part.schedules.items():
                had = schedules.get(key, (0, 0, 0.0, 0, 0.0))
                schedules[key] = (had[0] + values[0], had[1] + values[1], had[2] + values[2], had[3] + values[3],
                                  had[4] + values[4])  # fmt: skip
        return cls(
            added([p.short_drafts for p in parts], {"drafted": "sum", "room": "sum", "steps": "sum", "k": "max"}),
            added([p.past_end for p in parts], {"past": "sum", "accepted": "sum", "drafted": "sum"}),
            (sum(p.host_timed[0] for p in parts), sum(p.host_timed[1] for p in parts)),
            schedules,
            added([p.runs for p in parts], {"accepted": "sum", "drafted": "sum"}, ("run_id", "engine")),
        )


def integrity(
    windows: pl.DataFrame | pl.LazyFrame | IntegritySums,
    metadata: Sequence[RunMetadata] = (),
    decisions: Sequence[TunerDecision] = (),
) -> list[IntegrityIssue]:
    """Every config-integrity issue of these windows (step rows only, or their
    :class:`IntegritySums`) and their run metadata."""
    sums = windows if isinstance(windows, IntegritySums) else IntegritySums.of(windows, metadata, decisions)
    return [
        *_missing_hooks(metadata), *_pitfalls(metadata, sums), *_schedule_ignored(sums, metadata, _tuned(decisions)),
        *_short_drafts(sums), *_past_end(sums), *_host_timed(sums),
    ]  # fmt: skip


__all__ = ["IntegritySums", "integrity", "schedule_lookup"]
