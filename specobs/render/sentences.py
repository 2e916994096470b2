"""Every sentence specobs says: findings, explanations, assumptions and verdicts, worded from
the typed results (``specobs.records``). Numbers are read, never computed, here."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specobs.analysis.pitfalls import BREAK_SOURCES
from specobs.analysis.pitfalls import BY_ID as PITFALL_BY_ID
from specobs.dimensions import method_label
from specobs.errors import SpecobsError
from specobs.records import (
    MEASURED_BASES,
    AcceptanceLengthFacts,
    AcceptanceRateFacts,
    AcceptanceTest,
    Baseline,
    Basis,
    BreakFacts,
    BreakKind,
    BucketBasis,
    BucketChoice,
    BurstLatency,
    Cause,
    ChangeFacts,
    Comparison,
    ConditionalTrendFacts,
    ContradictionFacts,
    CrossoverVerdict,
    Difference,
    Finding,
    FindingKind,
    FlaggedRequestsFacts,
    GroupSummary,
    IntegrityFacts,
    IntegrityIssue,
    IntervalBiasFacts,
    LatencyShift,
    LoadAdvice,
    LoadAdviceFacts,
    LoadRecommendation,
    ModelNote,
    NoFacts,
    NoSpeculativeDecodingFacts,
    NoteKind,
    Recommendation,
    Recommended,
    Report,
    RequestsOnlyFacts,
    RequestSpreadFacts,
    RunMetadata,
    RunRef,
    ServingFacts,
    ServingLevel,
    Slo,
    SpeedupBand,
    Split,
    Summary,
    SyntheticPromptsFacts,
    Target,
    TaxFacts,
    Throughput,
    TunerDecision,
    TuneResult,
    TunerReason,
    TuneVerification,
    UndraftedRequestsFacts,
    UnsteadyFacts,
    WastedPositionsFacts,
)
from specobs.records.recommendation import NotMeasured
from specobs.records.result import Unmeasured
from specobs.schema import BENCH_CLIENTS

#: How configuration columns read in sentences.
CONFIG_NAMES = {"num_spec_tokens": "k", "batch_bucket": "batch", "method": "method", "workload": "workload"}
#: Said when the input cannot name the method (vLLM's counters carry no method label).
UNKNOWN_METHOD = "the input has no method label (vLLM's counters carry none): pass --method to name it"
#: Said when no candidate beats plain decoding by the margin.
RUN_WITHOUT = "No method and k beats plain decoding by the margin on this traffic: run without speculation."


def _positions(indices: Sequence[int]) -> str:
    """``[4, 5, 6]`` (0-based) → ``positions 5–7 are``."""
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


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def batch_range(low: int, high: int) -> str:
    return str(low) if low == high else f"{low}–{high}"


# --- the report's findings (decided in analysis.findings and advice.report_findings; worded here) ----------


@dataclass(frozen=True)
class Worded:
    """A finding with its sentence: ``kind`` and ``text`` (what every surface prints) and the
    typed ``finding`` it words (its severity and facts)."""

    kind: str
    text: str
    finding: Finding


def _acceptance_length(f: AcceptanceLengthFacts) -> str:
    length, low, high = f.mean_acceptance_length, f.low, f.high
    interval = f" (95% interval {low:.2f}–{high:.2f})" if low is not None and high is not None else ""
    if f.reported:
        return (
            f"Each draft yields {length:.2f} tokens per verification on average{interval}, as printed by the "
            "engine (no counts: the mean is weighted by running requests)."
        )
    return (
        f"Each draft yields {length:.2f} tokens per verification on average{interval}: "
        f"{length - 1:.2f} accepted draft tokens plus the one token the target model adds (requests that "
        "did not draft in a step add one token)."
    )


def _acceptance_rate(f: AcceptanceRateFacts) -> str:
    if not f.drafts_known:
        return (
            f"{f.draft_acceptance_rate:.1%} of drafted tokens were accepted; the number of drafts is not "
            "known, so the acceptance length cannot be computed (newer vLLM versions print it)."
        )
    return (
        f"{f.draft_acceptance_rate:.1%} of drafted tokens are accepted; the rest is draft and verify work thrown away."
    )


def _wasted_positions(f: WastedPositionsFacts) -> str:
    text = f"{_positions(f.positions).capitalize()} accepted in under {f.threshold:.0%} of drafts"
    if f.keep_k is None:
        return text + "."
    return (
        f"{text}: k={f.keep_k} keeps {f.share_of_accepted or 0.0:.0%} of the accepted tokens "
        f"({f.tokens_per_step:.2f} tokens per step instead of {f.full_tokens_per_step:.2f})."
    )


def _conditional_trend(f: ConditionalTrendFacts) -> str:
    if f.first_position is None or f.last_position is None:
        return (
            f"Conditional acceptance is flat across positions (consistent with a constant α={f.alpha:.2f}): "
            "the iid formula is a fair model here."
        )
    change = (
        f"{f.first_rate:.2f} at position {f.first_position + 1}, {f.last_rate:.2f} at position {f.last_position + 1}"
    )
    if f.iid_misleads:
        return (
            f"Conditional acceptance is {f.trend} ({change}): the iid (Leviathan) formula with α={f.alpha:.2f} "
            f"misses some positions by up to {f.max_gap:.2f}; use the per-position rates, not α, to predict other k."
        )
    return (
        f"Conditional acceptance is slightly {f.trend} ({change}), but the iid formula with α={f.alpha:.2f} "
        f"stays within {f.max_gap or 0:.2f} of every position: a fair model here."
    )


def _interval_bias(f: IntervalBiasFacts) -> str:
    return (
        f"Drafts were shorter than k ({f.tokens_per_draft:.2f} tokens per draft at "
        f"k={f.k}: a batch-size schedule or short lookups), and this source divides every position "
        f"by all drafts: positions 2–{f.k} are underestimated; position {f.position} reads "
        f"{f.rate:.2f} but may be up to {f.rate_high:.2f}. In-engine capture counts the "
        "drafts that reached each position."
    )


def _contradiction(f: ContradictionFacts) -> str:
    return (
        f"{f.windows:,} window(s) print a mean acceptance length or acceptance rate that their own "
        "counts contradict (beyond the printed rounding); the counts are used, the printed values are not."
    )


def _drafts_derived(f: NoFacts) -> str:
    return "The number of drafts is derived from the printed acceptance rates (vLLM's log line does not print it)."


def _change(f: ChangeFacts) -> str:
    change = f.change
    c = change.change
    where = ", ".join(f"{k}={v}" for k, v in change.labels.items() if v is not None)
    where = f" ({where})" if where else ""
    direction = "fell" if f.fell else "rose"
    if change.kind == "drift":
        low, high = c.rate_interval or (math.nan, math.nan)
        hours = f.hours if f.hours is not None else math.nan
        known = {k: v for k, v in change.configuration.items() if v is not None}
        within = ", ".join(f"{CONFIG_NAMES.get(k, k)} {v}" for k, v in known.items())
        return (
            f"Acceptance length {'slid' if f.fell else 'climbed'} {c.before:.2f} → {c.after:.2f} "
            f"over {hours:.1f} h from {_when(c.ts)}{where}{' within ' + within if within else ''}: a gradual "
            f"drift of {c.rate_per_hour or 0:+.3f} per hour (95% interval {low:+.3f} to {high:+.3f}), not a "
            "step, with nothing in the configuration changing. EAGLE acceptance drifting down for hours and "
            f"recovering only on restart was reported with prefix caching on ({BREAK_SOURCES['drift']}): "
            "compare with a freshly restarted engine."
        )
    if change.kind == "configuration_change":
        switched = ", ".join(f"{CONFIG_NAMES.get(k, k)} {a} → {b}" for k, (a, b) in change.changed.items())
        return (
            f"Acceptance length {direction} {c.before:.2f} → {c.after:.2f} at {_when(c.ts)}{where} when "
            f"{switched}: a configuration change, not a regression."
        )
    known = {k: v for k, v in change.configuration.items() if v is not None}
    within = ", ".join(f"{CONFIG_NAMES.get(k, k)} {v}" for k, v in known.items())
    return (
        f"Acceptance length {direction} {c.before:.2f} → {c.after:.2f} at {_when(c.ts)}{where}"
        f"{' within ' + within if within else ''}: {change.kind} (z={c.z:.1f})."
    )


#: How a break's cause fields read (beyond :data:`ENVIRONMENT_NAMES`).
CAUSE_NAMES = {
    "draft_model": "draft model", "num_speculative_tokens": "k", "schedule": "batch-size schedule",
    "model_path": "target model path",
}  # fmt: skip


def _cause(cause: Cause) -> str:
    name = CAUSE_NAMES.get(cause.field) or environment_name(cause.field)
    text = f"{name} {config_values(cause.before)} → {config_values(cause.after)}"
    if cause.pitfall is not None:
        p = PITFALL_BY_ID[cause.pitfall]
        text += f" (a known pitfall: {p.title}, {p.source})"
    return text


def _run(ref: RunRef | None) -> str:
    if ref is None:
        return "?"
    return f"{ref.run_id or '?'}" + (f" engine {ref.engine}" if ref.engine is not None else "")


def _break(f: BreakFacts) -> str:
    b = f.brk
    where = ", ".join(f"{k}={v}" for k, v in b.labels.items() if v is not None)
    where = f" ({where})" if where else ""
    interval = f"95% interval {b.low:+.2f} to {b.high:+.2f}" if b.low is not None and b.high is not None else ""
    if b.kind == BreakKind.STALE_AFTER_OFF:
        return (
            f"Right after drafting was switched off (k=0) and back on, position 1's acceptance rate drops from "
            f"{b.before - 1 if b.before is not None else 0:.2f} to {b.after - 1:.2f}{where}, run "
            f"{_run(b.after_run)}: {b.difference or 0:+.2f} on average over {b.resumes} resumes ({interval}). "
            "The drafter's state looks stale after a K=0 stretch (reported for TensorRT-LLM, "
            f"{BREAK_SOURCES['stale_after_off']}): prefer a schedule without k=0 ranges at the batch sizes this "
            "engine crosses, or check the drafter keeps its KV cache in sync while k=0."
        )
    if b.before is None:
        text = (
            f"Acceptance collapsed{where}: the drafter's tokens are almost never accepted (acceptance length "
            f"{b.after:.2f}, run {_run(b.after_run)}) — a broken drafter, backend or checkpoint, not a weak one."
        )
    else:
        verb = {BreakKind.FALL: "fell", BreakKind.RISE: "rose", BreakKind.COLLAPSE: "collapsed"}[b.kind]
        text = (
            f"Acceptance length {verb} {b.before:.2f} → {b.after:.2f}{where} when the engine restarted at "
            f"{_when(b.ts)} (run {_run(b.before_run)} → {_run(b.after_run)}; {b.difference or 0:+.2f}, "
            f"{interval}"
            + (f", over the first {b.depth} positions both drafted" if b.depth and b.kind != BreakKind.COLLAPSE else "")
            + ")."
        )
    if b.coincident_change is None:
        text += " A run has no run metadata, so no configuration change can be named."
    elif b.causes:
        text += " Changed with it, most likely cause first: " + "; ".join(_cause(c) for c in b.causes) + "."
    elif b.before is not None:
        text += (
            " Nothing in the run metadata changed with it: not a configuration change (a drift the restart "
            "reset, different traffic, or a change specobs does not record)."
        )
    named = {c.pitfall for c in b.causes}
    for pid in b.pitfalls:
        if pid not in named:
            p = PITFALL_BY_ID[pid]
            text += f" It meets a known pitfall: {p.title} ({p.source}): {p.advice}"
    return text


def load_level(load: str, level: float | None) -> str:
    """``concurrency 4`` or ``2.5 requests/s``."""
    return _level(load, level)


def _level(load: str, level: float | None) -> str:
    if level is None:
        return "?"
    value = f"{level:.1f}" if level != round(level) else f"{level:.0f}"
    return f"concurrency {value}" if load == "concurrency" else f"{value} requests/s"


def ratio_text(value: float | None, low: float | None, high: float | None) -> str:
    if value is None:
        return "unknown"
    return f"{value:.2f}× [{low:.2f}–{high:.2f}]" if low is not None and high is not None else f"{value:.2f}× (one run)"


#: Per crossover metric: its words.
_SERVING_METRICS: dict[str, str] = {"output_throughput": "throughput", "mean_tpot_ms": "TPOT", "goodput": "goodput"}


def _crossover_verdict(v: CrossoverVerdict) -> str:
    """Where one metric stops paying, in words: near a level with its interval, or paying (or
    not) at every level measured and where that is beyond noise."""
    c = v.crossover
    words = _SERVING_METRICS[c.metric]
    span = f"{_level(c.load, c.lowest_level)} to {_level(c.load, c.highest_level)}"
    if c.how == "crossed":
        low = _level(c.load, c.low) if c.low is not None else f"at or below {_level(c.load, c.lowest_level)}"
        high = _level(c.load, c.high) if c.high is not None else f"beyond {_level(c.load, c.highest_level)}"
        return f"in {words} it stops paying near {_level(c.load, c.level)} (95%: {low} to {high})"
    if c.how not in ("never", "below"):
        return f"in {words}, no level has both a speculative and a plain result"
    side, word = ("better than", "a gain") if c.how == "never" else ("no better than", "a loss")
    where = ", ".join(_level(c.load, level) for level in v.beyond_noise_levels)
    return f"in {words} it is {side} plain at every level measured ({span}): " + (
        f"{word} beyond noise at {where}" if v.beyond_noise_levels else f"{word} beyond noise at none of them"
    )


def _latency_beyond_noise(shifts: Sequence[LatencyShift]) -> str:
    """The tail-latency ratios whose interval excludes parity (p99 and p90 first)."""
    seen = []
    for m in shifts:
        stat, name = m.measure.removesuffix("_ms").split("_", 1)
        seen.append(f"{stat} {name.upper()} {ratio_text(m.ratio, m.low, m.high)} at {_level(m.load, m.level)}")
    return f" Latency beyond noise: {'; '.join(seen[:6])}." if seen else ""


def _why_under_load(f: ServingFacts) -> str:
    """Why the ratio moves with load, from the capture: the speculative step's cost against the
    plain step's, and the tokens each draft yields, from the lowest level to the highest."""
    timed = [r for r in f.ratios if r.step_time_ratio is not None]
    if not timed:
        return ""
    steps = ", ".join(f"{r.step_time_ratio:.2f}× at {_level(r.load, r.level)}" for r in timed if r.step_time_ratio)
    text = f" Why: a speculative step cost, against a plain one, {steps}"
    if f.step_cost is not None:
        text += f" (its relative cost {f.step_cost.way} with load)"
    if f.tokens_per_draft is not None:
        t = f.tokens_per_draft
        text += f", while tokens per draft {t.way} ({t.first:.2f} → {t.last:.2f})"
    return text + "."


def _not_drafting(f: ServingFacts) -> str:
    """The K=0 tax under load: levels where the speculative server drafted (almost) nothing."""
    if not f.not_drafting:
        return ""
    each = "; ".join(
        f"{_level(r.load, r.level)} (drafting in {r.drafting_share:.0%} of steps): throughput "
        f"{ratio_text(r.throughput_ratio, r.throughput_low, r.throughput_high)}, TPOT "
        f"{ratio_text(r.tpot_ratio, r.tpot_low, r.tpot_high)}"
        for r in f.not_drafting
        if r.drafting_share is not None
    )
    verdict = (
        "a tax beyond noise at " + ", ".join(_level(f.load, level) for level in f.taxed_levels)
        if f.taxed_levels
        else "no tax beyond noise"
    )
    return (
        f" Where {f.config} drafted (almost) nothing — a k=0 tier of its schedule, or no draft found — the ratios are "
        f"what a speculative server costs when it does not speculate (the K=0 tax): {each}; {verdict}."
    )


def _goodput_note(slo: Slo | None, levels: Sequence[ServingLevel]) -> str:
    """Goodput under the SLO per level, or why it could not be computed."""
    if slo is None:
        return ""
    known = [lv for lv in levels if lv.goodput is not None]
    if not known:
        return (
            f" Goodput under the SLO ({slo}) could not be computed: the results lack the per-request data "
            "it needs (TTFT and TPOT need vllm bench serve --save-detailed; failed requests need its errors)."
        )
    by_config: dict[str | None, list[ServingLevel]] = {}
    for lv in known:
        by_config.setdefault(lv.config, []).append(lv)
    each = "; ".join(
        f"{config}: "
        + ", ".join(
            f"{_level(lv.load, lv.level)} {lv.goodput:.2f}/s ({lv.slo_attained:.0%})"
            for lv in group
            if lv.goodput is not None and lv.slo_attained is not None
        )
        for config, group in by_config.items()
    )
    return f" Under the SLO ({slo}), good requests per second (share of requests that met it) — {each}."


def _serving(f: ServingFacts) -> str:
    """Speculation against the plain server under load, for one configuration: measured by
    vLLM's benchmark client, with where it stops paying in throughput, TPOT and goodput, the K=0
    tax where it did not draft, and what the capture saw."""
    load = f.load
    each = "; ".join(
        f"{_level(r.load, r.level)}: throughput "
        f"{ratio_text(r.throughput_ratio, r.throughput_low, r.throughput_high)}, TPOT "
        f"{ratio_text(r.tpot_ratio, r.tpot_low, r.tpot_high)}"
        + (f", goodput {ratio_text(r.goodput_ratio, r.goodput_low, r.goodput_high)}" if r.goodput_ratio else "")
        for r in f.ratios
    )
    verdicts = "; ".join(_crossover_verdict(v) for v in f.verdicts)
    repeats = "" if f.repeated else " Some levels have one run a side: no interval there; repeat the runs to get one."
    plains = {lv.level: lv for lv in f.plain_levels}
    seen = []
    for lv in sorted(f.levels, key=lambda lv: lv.level):
        if not lv.captured_steps or lv.captured_batch_size is None or lv.captured_step_ms is None:
            continue
        base = plains.get(lv.level)
        versus = f" (plain {base.captured_step_ms:.1f} ms)" if base is not None and base.captured_step_ms else ""
        drafting = (
            f", drafting in {lv.captured_drafting_share:.0%} of steps" if lv.captured_drafting_share is not None else ""
        )
        positions = (
            " (accepted by position " + "/".join(f"{p:.2f}" for p in lv.captured_per_position) + ")"
            if lv.captured_per_position
            else ""
        )
        split = (
            f" (draft {lv.captured_draft_ms:.1f} + verify {lv.captured_verify_ms:.1f} ms)"
            if lv.captured_draft_ms is not None and lv.captured_verify_ms is not None
            else ""
        )
        seen.append(
            f"{_level(load, lv.level)}: batch {lv.captured_batch_size:.1f}, "
            f"{lv.captured_acceptance_length or 1:.2f} tokens per draft{positions}{drafting}, "
            f"{lv.captured_step_ms:.1f} ms per step{split}{versus}"
        )
    why = f" Captured in the engine during those runs — {'; '.join(seen)}.{_why_under_load(f)}" if seen else ""
    goodput = _goodput_note(f.slo, [*f.levels, *f.plain_levels])
    clients = sorted({c for lv in (*f.levels, *f.plain_levels) for c in lv.clients})
    by = _CLIENT_WORDS.get(clients[0], clients[0]) if len(clients) == 1 else "serving benchmarks"
    if len(clients) > 1:
        by += " (" + ", ".join(clients) + ")"
    return (
        f"Measured under load by {by} ({f.model or 'model ?'}), {f.config} against "
        f"{f.plain_config or 'the plain server'} — {each}: {verdicts}.{_latency_beyond_noise(f.latency)}"
        f"{_bursts(f.bursts)}{_not_drafting(f)}{goodput}{repeats}{why}"
    )


#: Each serving-benchmark client (``schema.BENCH_CLIENTS``) in a sentence.
_CLIENT_WORDS = dict(zip(BENCH_CLIENTS, ("vLLM's serving benchmark", "AIPerf", "GuideLLM"), strict=True))


def _bursts(bursts: Sequence[BurstLatency]) -> str:
    """Why ITL is not compared: it is per output event, and a speculative step streams a burst."""
    shown = [b for b in bursts if b.median_itl_ratio is not None or b.p99_itl_ratio is not None]
    if not shown:
        return ""
    b = shown[0]
    itl = ", ".join(
        f"{name} ITL {value:.3g}×"
        for name, value in (("median", b.median_itl_ratio), ("p99", b.p99_itl_ratio))
        if value is not None
    )
    tpot = f"; TPOT {b.tpot_ratio:.2f}×" if b.tpot_ratio is not None else ""
    return (
        f" ITL is per output event, not per token: a speculative step streams the tokens it accepted as one "
        f"event (and a busy stream coalesces tokens too), so ITL percentiles compare bursts of different sizes "
        f"({itl} at {_level(b.load, b.level)}{tpot}): TPOT is the per-token latency to compare."
    )


def _synthetic_prompts(f: SyntheticPromptsFacts) -> str:
    """Results measured on random token ids: their acceptance is not what real text gets."""
    each = "; ".join(
        f"{u.results} result(s) of {', '.join(str(c) for c in u.configs)} on dataset {u.dataset!r}"
        + (f" ({u.client})" if u.client else "")
        for u in f.uses
    )
    return (
        f"Serving results measured on synthetic tokens, not text — {each}. A drafter guesses continuations of "
        "text; on random token ids it guesses far less (users report 12% acceptance on random tokens against "
        "52% on prose), so these acceptance and speedup figures say little about real traffic: measure on "
        "prompts like the real ones (specobs sweep uses real text unless asked for random tokens)."
    )


def _batch_bound(value: int | None, fallback: str) -> str:
    return f"batch {value}" if value is not None else fallback


def load_advice_text(a: LoadAdvice) -> str:
    """One configuration's advice under load, from its measured crossover, in words."""
    name = f"{a.config} ({a.method or 'method ?'} k={a.num_speculative_tokens or '?'})"
    metric = _SERVING_METRICS[a.metric]
    span = f"{_level(a.load, a.lowest_level)} to {_level(a.load, a.highest_level)}"
    if a.verdict == "plain":
        lost = (
            f"a loss beyond noise at {', '.join(_level(a.load, x) for x in a.losses)}"
            if a.losses
            else "no loss beyond noise either: no gain was measured to keep"
        )
        return (
            f"{name} did not pay in {metric} at any level measured ({span}; {lost}): run the plain server at these "
            "loads; a schedule cannot help where the static configuration never paid."
        )
    if a.verdict == "not_shown":
        return (
            f"{name}: no level showed a {metric} difference beyond noise ({span}); no schedule can be read from "
            "these runs: repeat them (more runs per level narrow the intervals)."
        )
    config = f" --speculative-config '{a.speculative_config}'" if a.speculative_config else ""
    incomplete = f" (incomplete: add {', '.join(a.missing)})" if a.missing else ""
    if a.verdict == "speculate":
        return (
            f"{name} paid in {metric} at every level measured ({span}), beyond noise at some: keep it as it ran"
            f"{config}{incomplete}; where it stops paying lies beyond {_level(a.load, a.highest_level)}, not measured."
        )
    if a.schedule_measured:
        return (
            f"{name} ran its own schedule: it stops paying in {metric} near {_level(a.load, a.stops_paying_at)} as "
            f"it ran{config}{incomplete}."
        )
    where = f"near {_level(a.load, a.stops_paying_at)}"
    if a.draft_up_to is None:
        return (
            f"{name} stops paying in {metric} {where}, but that load has no batch size here (a request rate "
            "without the capture): run the servers with the capture on (SPECOBS_ENABLE=1) to turn it into a "
            "schedule."
        )
    source = (
        "the capture's mean batch at each level, interpolated"
        if a.batch_from == "capture"
        else "the concurrency taken as the batch: an upper bound, the engine's batches are smaller"
    )
    point = (
        f"the crossover itself is near batch {a.crossover_batch}"
        + (f", its upper bound batch {a.crossover_batch_high}" if a.crossover_batch_high is not None else
           ", its upper bound beyond the levels measured")
        if a.crossover_batch is not None
        else "the crossover's batch is unknown"
    )  # fmt: skip
    taxed = "; ".join(
        f"{r.config} at {_level(r.load, r.level)}: throughput "
        f"{ratio_text(r.throughput_ratio, r.throughput_low, r.throughput_high)}"
        for r in a.k0_tax
    )
    tax = (
        f" The K=0 tax was measured where a server of this sweep did not draft — {taxed}."
        if taxed
        else " The K=0 tax is not measured here: run the schedule in the sweep to measure it."
    )
    return (
        f"{name} stops paying in {metric} {where} (measured; 95%: {_level(a.load, a.stops_paying_low)} to "
        f"{_level(a.load, a.stops_paying_high) if a.stops_paying_high is not None else 'beyond the levels measured'}"
        f"): draft up to batch {a.draft_up_to}, the highest load where its gain is still shown beyond noise "
        f"({point}; batch sizes from {source}), and switch off above —{config}{incomplete}. That schedule was not "
        f"itself run: its k=0 steps still run the drafter (the K=0 tax), so above the boundary it is not the plain "
        f"server.{tax}"
    )


def load_headline(rec: LoadRecommendation) -> str:
    """The headline of a recommendation from serving-benchmark results alone: what it rests on."""
    slo = f", goodput under the SLO ({rec.slo}) where it could be computed" if rec.slo is not None else ""
    return (
        "Measured by vLLM's serving benchmark against the plain server (no engine steps in the input): where "
        f"each configuration stops paying{slo}, and the schedule that follows from it."
    )


def load_explanations(rec: LoadRecommendation) -> list[str]:
    return [load_advice_text(a) for a in rec.under_load]


def _schedule_under_load(f: LoadAdviceFacts) -> str:
    return load_advice_text(f.advice)


def _schedule_tax(f: TaxFacts) -> str:
    t = f.tax
    sizes = ", ".join(map(str, t.batch_sizes))
    if not f.measurable:
        return (
            f"With drafting switched off (k=0) the {t.method} engine took {t.off_seconds * 1e3:.1f} ms per "
            f"step against {t.plain_seconds * 1e3:.1f} ms in the plain engine ({t.tax_share:+.0%}, batch "
            f"{sizes}): no measurable k=0 tax, and a k=0 step does more than a plain one, so the engines differ "
            "by more than that (separate processes can differ by 20–40% on shared machines)."
        )
    return (
        f"With drafting switched off (k=0) the {t.method} engine still takes {t.off_seconds * 1e3:.1f} ms "
        f"per step against {t.plain_seconds * 1e3:.1f} ms in the plain engine ({t.tax_seconds * 1e3:+.1f} "
        f"ms, {t.tax_share:+.0%}, batch {sizes}): a schedule's k=0 ranges pay this; no speculative config "
        "does not. Separate engine processes can differ by 20–40% on shared machines, so part of it may be "
        "the engines' own noise."
    )


def _unsteady_steps(f: UnsteadyFacts) -> str:
    parts = [f"{n:,} {why}" for why, n in sorted(f.steps.items())]
    return (
        f"Left out of timing and cost fits: {' and '.join(parts)} step(s), each over {f.outlier_factor:g}× the "
        f"median step time of its configuration ({f.coarse_outlier_factor:g}× the time per token of its engine's "
        "steps at that k where the configuration is too small to judge): compilation, graph capture and first "
        "allocations are not steady state."
    )


def _requests_only(f: RequestsOnlyFacts) -> str:
    return (
        f"The input holds only finished requests ({f.num_requests:,} of them, with per-request speculative "
        "decoding metrics): the acceptance above is summed from their own counts "
        f"({f.num_drafts:,} verify steps, one window per request). Without engine steps or logging "
        "intervals there is no timing and nothing for specobs recommend to fit."
    )


def _no_speculative_decoding(f: NoSpeculativeDecodingFacts) -> str:
    what = (
        f"a plain engine's {f.num_windows:,} {f.unit} (k = 0, nothing drafted)"
        if not f.max_k
        else f"{f.num_windows:,} {f.unit} of an engine configured with k up to {f.max_k} that drafted nothing"
    )
    return f"The input holds no speculative decoding: {what}, so there is no acceptance to report" + (
        "; its timing is in the table below." if f.timed else "."
    )


def nothing_to_tune(names: str, windows: int, requests: int) -> str:
    """Why ``specobs recommend`` has no recommendation: what the input holds instead of drafted
    steps or intervals, and what a recommendation needs."""
    if requests:
        return (
            f"{names}: per-request acceptance only ({requests:,} finished request(s)): no step or interval counts to "
            "recommend from; recommend fits acceptance per k and the cost of a step from engine steps (specobs event "
            "files), a vLLM log's SpecDecoding lines or Prometheus counters (specobs report shows the requests' "
            "acceptance)"
        )
    if windows:
        return (
            f"{names}: no speculative decoding to tune ({windows:,} step(s) or interval(s) read, none with drafts); "
            "recommend needs the steps or intervals of an engine that drafted"
        )
    return f"{names}: no speculative decoding to tune (no drafts in the input)"


def _request_spread(f: RequestSpreadFacts) -> str:
    spread = ""
    if f.p10 is not None and f.p50 is not None and f.p90 is not None:
        spread = f" (median {f.p50:.2f}; 10% of requests at or below {f.p10:.2f}, 10% at or above {f.p90:.2f})"
    if f.long_requests == "alike":
        why = "close to it: long and short requests accept alike"
    else:
        who = f"long requests accept {f.long_requests} than short ones"
        why = f"long requests weigh more in the token-weighted mean, so {who}"
    return (
        f"Per request, the acceptance length averages {f.request_weighted:.2f} over {f.num_drafted:,} "
        f"request(s){spread}; weighted by verify steps (what the engine gets) it is {f.token_weighted:.2f}, {why}."
    )


def _requests_flagged(f: FlaggedRequestsFacts) -> str:
    worst = f.worst
    return (
        f"{f.num_flagged:,} request(s) accepted far less than others of their workload and prompt length (under "
        f"half their class's draft acceptance rate, beyond noise): the worst, request {worst.request_key}, "
        f"accepted {worst.draft_acceptance_rate:.0%} of {worst.num_draft_tokens:,} draft tokens against "
        f"{worst.class_draft_acceptance_rate:.0%} for its class. Low acceptance on one request often means "
        "unusual output (another language, a loop, garbled text): check those outputs, listed under "
        "requests.flagged."
    )


def _undrafted_requests(f: UndraftedRequestsFacts) -> str:
    return (
        f"{f.num_without_drafts:,} of {f.num_requests:,} finished request(s) never verified a draft "
        "(the drafter proposed nothing for them, or they ended first): left out of the per-request distribution."
    )


def _who(issue: IntegrityIssue) -> str:
    parts = [issue.method or "", f"run {issue.run_id}" if issue.run_id else "",
             f"engine {issue.engine}" if issue.engine is not None and issue.run_id else ""]  # fmt: skip
    named = ", ".join(p for p in parts if p)
    return f" ({named})" if named else ""


def _integrity(f: IntegrityFacts) -> str:
    i = f.issue
    who = _who(i)
    if i.kind == "schedule_ignored":
        return (
            f"The batch-size schedule is being ignored{who}: in {i.affected:,} of {i.checked:,} steps where it "
            f"allows fewer than k={i.max_k} tokens (k={i.corrected or 0:.1f} on average), drafts were longer "
            f"({i.observed or 0:.2f} tokens per draft). The engine drafts the maximum k whatever the batch size "
            "(reported for Model Runner V2): the schedule's savings at large batches are not happening."
        )
    if i.kind == "schedule_disabled":
        return (
            f"The batch-size schedule was configured{who} with data parallel size {i.affected}, where vLLM "
            f"disables it (ranks could pick different k and deadlock): every step drafts the static "
            f"k={i.max_k}. Run one engine per rank without data parallel to use a schedule."
        )
    if i.kind == "synthetic_rejection":
        return (
            f"Rejection sampling is synthetic{who} (rejection_sample_method=synthetic): vLLM accepts drafts at "
            "configured rates, so these acceptance numbers measure the configuration, not the drafter."
        )
    if i.kind == "known_pitfall":
        p = PITFALL_BY_ID[i.pitfall or ""]
        rate = (
            f" (draft acceptance rate {i.observed:.1%})"
            if p.acceptance_below is not None and i.observed is not None
            else ""
        )
        return f"Known pitfall{who}: {p.title}{rate}. {p.advice} Source: {p.source}"
    if i.kind == "short_drafts":
        return (
            f"Drafts fill {i.observed or 0:.0%} of k{who} ({i.affected:,} draft tokens where k allowed "
            f"{i.checked:,}, k up to {i.max_k}): the drafter often proposes fewer than k tokens (ngram finds "
            "shorter matches, a schedule or an early stop), so the last positions are rarely tried while "
            "verification is sized for k."
        )
    if i.kind == "missing_hooks":
        release = f"vLLM {i.vllm_version}" if i.vllm_version else "This vLLM release"
        return (
            f"{release} lacks {i.affected} hook point(s) specobs uses{who}, so these numbers are absent from "
            f"its rows (unknown, not zero): {'; '.join(i.lost)}. docs/vllm.md lists what each release has."
        )
    if i.kind == "host_timed":
        return (
            f"{i.affected:,} of {i.checked:,} GPU steps were timed on the host clock (timing_clock host or "
            "mixed): a timed call ran inside a graph capture, where HIP refuses device events. Their draft and "
            "verify times include launch and queueing, not only device work."
        )
    # accepted_past_end
    return (
        f"{i.affected:,} accepted draft tokens ({f.share or 0.0:.1%} of accepted){who} were counted by vLLM although "
        "a stop (max_tokens, EOS) then cut them off the request: the draft acceptance rate is "
        f"{i.observed or 0:.1%} as counted, {i.corrected or 0:.1%} without them. Short outputs inflate it most."
    )


#: The wording of each kind of facts: one dispatch (a kind's facts type names its sentence;
#: ``requests`` has two: the spread, and the requests that never drafted).
_WORDS: dict[type, Callable[[Any], str]] = {
    AcceptanceLengthFacts: _acceptance_length,
    AcceptanceRateFacts: _acceptance_rate,
    WastedPositionsFacts: _wasted_positions,
    ConditionalTrendFacts: _conditional_trend,
    IntervalBiasFacts: _interval_bias,
    ContradictionFacts: _contradiction,
    ChangeFacts: _change,
    BreakFacts: _break,
    TaxFacts: _schedule_tax,
    UnsteadyFacts: _unsteady_steps,
    IntegrityFacts: _integrity,
    RequestSpreadFacts: _request_spread,
    FlaggedRequestsFacts: _requests_flagged,
    UndraftedRequestsFacts: _undrafted_requests,
    RequestsOnlyFacts: _requests_only,
    NoSpeculativeDecodingFacts: _no_speculative_decoding,
    ServingFacts: _serving,
    LoadAdviceFacts: _schedule_under_load,
    SyntheticPromptsFacts: _synthetic_prompts,
}
#: Kinds whose sentence needs no facts.
_PLAIN_WORDS: dict[str, Callable[[Any], str]] = {FindingKind.DRAFTS_DERIVED: _drafts_derived}


def word(f: Finding) -> str:
    """A finding's sentence, with its numbers in it."""
    wording = _WORDS.get(type(f.facts)) or _PLAIN_WORDS.get(str(f.kind))
    if wording is None:
        raise SpecobsError(f"no wording for a {f.kind} finding with {type(f.facts).__name__}")
    return wording(f.facts)


def worded(findings: Iterable[Finding]) -> list[Worded]:
    """Each finding with its sentence."""
    return [Worded(str(f.kind), word(f), f) for f in findings]


def report_findings(report: Report) -> list[Worded]:
    """The overall findings a report carries (decided in ``advice.report_findings`` when it was
    built: ``report.findings``), worded."""
    return worded(report.findings or ())


def group_findings(report: Report) -> list[list[Worded]]:
    """Each group's own findings that the report carries (``report.group_findings``, in the order
    of ``report.groups``), worded."""
    carried = report.group_findings if report.group_findings is not None else ((),) * len(report.groups)
    return [worded(fs) for fs in carried]


#: The kinds said under the per-request distribution.
REQUEST_KINDS = (FindingKind.REQUESTS, FindingKind.REQUESTS_FLAGGED)


def request_findings(report: Report) -> list[Worded]:
    """The findings a report carries about its finished requests (their spread, requests far below
    their class, requests that never drafted), worded, in the report's order."""
    return worded(f for f in report.findings or () if f.kind in REQUEST_KINDS)


#: The kinds said under serving under load.
SERVING_KINDS = (FindingKind.SERVING, FindingKind.SYNTHETIC_PROMPTS)


def serving_findings(report: Report) -> list[Worded]:
    """The findings a report carries about serving under load, worded, in the report's order."""
    return worded(f for f in report.findings or () if f.kind in SERVING_KINDS)


# --- the recommendation ---------------------------------------------------------------------------


#: How to turn a band into a measurement (said wherever something is not measured).
HOW_TO_MEASURE = (
    "to measure it: run the server with the capture plugin (SPECOBS_ENABLE=1), run `specobs tune`, "
    "or add a plain server's log or scrape of the same model beside this one"
)


def headline(rec: Recommendation) -> str:
    """One sentence naming exactly the config printed beneath it, with that config's own number,
    and whether that number was measured or modelled (never a point where nothing was timed)."""
    r = rec.recommended
    if r.basis == Basis.NOT_MEASURED or r.predicted_speedup is None:
        return _not_measured_headline(rec)
    estimated = "no plain engine in the input: baseline estimated" if r.baseline != Baseline.PLAIN else ""
    if not r.num_speculative_tokens:
        note = f"; {estimated}" if estimated else ""
        basis = "" if r.basis == Basis.MEASURED else "; modelled in part: see the batch sizes"
        return f"Recommendation: run without speculative decoding (no speculative config{note}{basis})."
    name = r.method or "speculative decoding"
    if r.schedule:
        ranges = ", ".join(f"{batch_range(low, high)}: {'off' if k == 0 else f'k={k}'}" for low, high, k in r.schedule)
        what = f"{name} with a batch-size schedule ({ranges})"
    else:
        what = f"{name} with k={r.num_speculative_tokens}"
    target = f" for {rec.target.model or 'the unnamed model'}" if rec.other_targets and rec.target else ""
    verb = "measured" if r.basis == Basis.MEASURED else "modelled"
    text = (
        f"Recommendation{target}: {what}, {verb} {speedup_with_interval(r.predicted_speedup, r.interval)} "
        "plain decoding"
    )
    said = ", ".join(x for x in (str(r.measures) if r.measures else "", estimated) if x)
    text += " on this traffic" + (f" ({said})" if said else "") + "."
    if r.within_noise:
        text += " Its interval reaches below 1×: a gain not shown beyond noise."
    if not r.method:
        text += " The input has no method label (vLLM's counters carry none): pass --method to get a ready config."
    return text


def _not_measured_headline(rec: Recommendation) -> str:
    """No number: why (what the input lacks), and what it can say instead (the band of the k that ran)."""
    why = not_measured_reason(rec.not_measured[0]) if rec.not_measured else str(Unmeasured.NO_PLAIN)
    text = f"No recommendation: not measured ({why})."
    for band in rec.bands[:1]:
        text += " " + band_summary(band)
    return text


def not_measured_reason(n: NotMeasured) -> str:
    """What the input lacks to measure a method's speed, with the counts that decided it."""
    name = _method_name(n.method, n.draft_model)
    if n.reason == Unmeasured.PLAIN_OTHER_TARGET:
        others = "; ".join(
            " on ".join(x for x in (t.model or "an unnamed model", t.platform, t.device) if x) for t in n.plain_targets
        )
        return (
            f"{name}: no step timing, and the plain engine in the input runs another model, platform or device "
            f"({others}): the baseline must be a plain server of the same model"
        )
    if n.reason == Unmeasured.FEW_INTERVALS and n.running is None:
        return (
            f"{name}: no step timing, and the plain and speculative servers show no load in common (speculative at "
            f"{_counts(n.running_shown)}, plain at {_counts(n.plain_running_shown)} running requests)"
        )
    if n.reason == Unmeasured.FEW_INTERVALS:
        return (
            f"{name}: no step timing, and too few steady intervals at a load both servers show: at most "
            f"{n.intervals} of the speculative server's and {n.plain_intervals} of the plain server's at "
            f"{n.running} running request(s), {n.needed} each needed (hold each load longer)"
        )
    if n.reason == Unmeasured.NO_VERIFY_TIMING:
        split = f"only {n.verify_timed_steps:,} split" if n.verify_timed_steps else "none split"
        return (
            f"{name}: its {n.timed_steps:,} timed steps were timed whole, {split} into drafting and verifying "
            "(verify_seconds: a capture from before the split timing, or its timing hooks did not run), and the "
            "cost model needs the verify time of decode steps: capture with a current specobs"
        )
    if n.reason == Unmeasured.NO_TIMING:
        side = "the plain server's" if n.running_shown else "the speculative server's"
        return f"{name}: no step timing, and {side} input prints no throughput over steady intervals to compare"
    return f"{name}: {n.reason}"


def _counts(values: Sequence[int]) -> str:
    return ", ".join(str(v) for v in values) or "none"


def _method_name(method: str | None, draft_model: str | None) -> str:
    return method_label(method, draft_model, "speculative decoding")


def band_range(low: float, high: float) -> str:
    return f"{low:.2f}×–{high:.2f}×"


def band_summary(band: SpeedupBand) -> str:
    """The band of the k that ran, in one sentence."""
    k = band.ran_k if band.ran_k is not None else band.measured_k
    row = band.at(k)
    name = _method_name(band.method, band.draft_model)
    if row is None:
        return f"{name}: no acceptance counts to model from."
    return (
        f"{name} at k={k} yields {row.tokens_per_draft:.2f} tokens per draft "
        f"[{row.tokens_per_draft_low:.2f}–{row.tokens_per_draft_high:.2f}]: modelled "
        f"{band_range(row.speedup_low, row.speedup_high)} plain decoding, between compute-bound and "
        "memory-bound verification."
    )


def _cost_range(values: tuple[float, float]) -> str:
    low, high = values
    return f"{low:g}" if low == high else f"{low:g}–{high:g}"


def band_notes(band: SpeedupBand) -> list[str]:
    """Why the band is what it is and how to narrow it."""
    name = _method_name(band.method, band.draft_model)
    best_high, best_low = band.at(band.best_k_memory_bound), band.at(band.best_k_compute_bound)
    out = []
    if best_high is not None and best_low is not None:
        low_k = "no speculation" if band.best_k_compute_bound == 0 else f"k={band.best_k_compute_bound}"
        out.append(
            f"{name}: the k that maximises throughput depends on the hardware's regime: k={band.best_k_memory_bound} "
            f"where verification is flat in tokens scored (memory-bound, up to {best_high.speedup_high:.2f}×), "
            f"{low_k} where it grows with them (compute-bound, {best_low.speedup_low:.2f}×)."
        )
    drafting = []
    if band.cost_ratio_given:
        drafting.append(f"{_cost_range(band.per_position_cost)} of a plain step per drafted position (--cost-ratio)")
    elif band.per_position_cost[1] > 0:
        drafting.append(f"{_cost_range(band.per_position_cost)} of a plain step per drafted position")
    if band.per_step_cost[1] > 0:
        drafting.append(f"{_cost_range(band.per_step_cost)} per drafting step")
    drafting.append(f"{_cost_range(band.overhead)} per step of the speculative engine besides")
    q = band.drafts_per_request_step
    share = (
        f"{q:.0%} of request-steps draft (measured)"
        if q is not None
        else "every request-step is taken to draft (the input does not say how many did)"
    )
    out.append(f"{name}: drafter cost class {band.drafter_kind}: {', '.join(drafting)}; {share}.")
    if band.method is None:
        out.append(f"{_capital(UNKNOWN_METHOD)} (its drafter's cost class: the band assumes the widest).")
    out.append(f"{_capital(HOW_TO_MEASURE)}.")
    return out


def ran_config_line(band: SpeedupBand) -> str | None:
    """The config that ran, as the thing to measure: pasteable when complete, else what it lacks."""
    if band.speculative_config is None:
        return None
    if band.missing_fields:
        return (
            f"As it ran (incomplete: the input does not show {' and '.join(band.missing_fields)}): "
            f"{band.speculative_config}"
        )
    return f"As it ran, to measure: --speculative-config '{band.speculative_config}'"


def config_warning(r: Recommended) -> str | None:
    """Why the printed ``--speculative-config`` is not ready to paste (None when it is): the
    fields it lacks and why the input does not give them, or what the installed vLLM refuses."""
    if r.speculative_config is None or r.ready:
        return None
    if r.missing_fields:
        parts = []
        lookups = [f for f in r.missing_fields if f.startswith("prompt_lookup_") and f not in r.differing]
        for name in r.missing_fields:
            if name in r.differing:
                parts.append(f"{name} (the input's engines of this method ran with {' and '.join(r.differing[name])})")
            elif name == "model":
                parts.append("model (the draft model's path: the input does not show it)")
            elif name not in lookups:
                parts.append(name)
        if lookups:
            parts.append(
                f"{' and '.join(lookups)} (the input does not show the config that ran; without them vLLM runs its "
                "default lookup bounds, another drafter than the one measured)"
            )
        return "Incomplete, not ready to paste: add " + "; ".join(parts) + "."
    check = r.config_check
    problems = "; ".join(check.problems) if check else ""
    return f"Not ready to paste: vLLM {_version(check)} refuses it: {problems}."


def _version(check: object) -> str:
    version = getattr(check, "vllm_version", None)
    return f"{version} (installed here)" if version else "(installed here)"


def config_check_note(r: Recommended) -> str | None:
    """How far the installed vLLM checked the printed config (None: not checked, no vLLM here)."""
    check = r.config_check
    if check is None or check.problems or r.speculative_config is None:
        return None  # a refusal is the warning itself
    if check.built:
        return f"vLLM {_version(check)} built this config (its SpeculativeConfig, with the model folders found here)."
    text = f"Its fields are ones vLLM {_version(check)} takes (names, types and bounds of its SpeculativeConfig)"
    if r.missing_fields:
        return text + "; built once complete."
    text += "; not built"
    if check.folders_not_found:
        folders = ", ".join(check.folders_not_found)
        return (
            f"{text}: no model folder {folders} here (the paths as the engine named them); run specobs where "
            "the models are to build it."
        )
    if check.load_error:
        return f"{text}: vLLM could not load the target model's config here ({check.load_error})."
    return text + ": the input does not show the target model's path."


def speedup_with_interval(value: float | None, interval: Sequence[float] | None) -> str:
    if value is None:
        return "–"
    if not interval:
        return f"{value:.2f}×"
    return f"{value:.2f}× [{interval[0]:.2f}–{interval[1]:.2f}]"


def explain_bucket(t: BucketChoice) -> str:
    """Why a bucket got its k (or is off), with the numbers behind it."""
    where = f"batch {t.batch_size_min}" if t.batch_size_min == t.batch_size_max else (
        f"batch {t.batch_size_min}–{t.batch_size_max}"
    )  # fmt: skip
    name = t.reference_method or t.method or "speculation"
    tokens = t.tokens_per_step or 0.0
    if t.num_speculative_tokens == 0:
        k, speedup = t.reference_k, t.reference_speedup
        if t.step_ratio is None or speedup is None:
            return f"At {where}, {name} does not pay: {tokens:.2f} tokens per step do not cover the drafting cost."
        source = "measured" if t.reference_basis == BucketBasis.MEASURED else "model"
        model = f"{source}: {tokens:.2f} tokens per step for a step {t.step_ratio:.2f}× as long as a plain one"
        if speedup > 1:  # it would pay here, but not enough over all traffic (or not over its k=0 steps)
            text = (
                f"At {where}, the best {name} k ({k}) reaches {speedup:.2f}× plain decoding ({model}), too "
                "little to pay for speculation over the whole traffic"
            )
        else:
            text = (
                f"At {where}, the best {name} k ({k}) reaches only {speedup:.2f}× plain decoding ({model}): "
                "switch speculation off here"
            )
        if t.in_schedule and t.off_ratio is not None and t.off_ratio > 1:
            text += (
                f"; its k=0 steps {'still cost' if t.off_measured else 'are estimated at'} {t.off_ratio:.2f}× a "
                "plain step (the schedule's k=0 tax)"
            )
        return text + "."
    ci = f" ({t.interval[0]:.2f}–{t.interval[1]:.2f})" if t.interval else ""
    verb = "measured at" if t.basis in MEASURED_BASES else "predicted"
    k = t.num_speculative_tokens
    text = f"At {where}, {name} with k={k} is {verb} {t.predicted_speedup:.2f}×{ci} plain decoding"
    model = f"{tokens:.2f} tokens per step"
    if t.step_ratio is not None:
        model += f" for a step {t.step_ratio:.2f}× as long as a plain one"
    source = "measured" if t.reference_basis == BucketBasis.MEASURED else "model"
    if t.basis == BucketBasis.PLAIN_MODELLED:
        text += f" (plain decoding at these batch sizes from the model; {source}: {model})"
    else:
        text += f" ({source}: {model})" if t.basis == BucketBasis.MEASURED else f": {model}"
    if t.anchored and t.model_speedup:
        text += (
            f", {t.model_speedup:.2f}× by the model alone, scaled by {t.predicted_speedup / t.model_speedup:.2f} "
            "to agree with the k measured in this bucket"
        )
    if t.num_speculative_tokens > t.measured_k:
        text += f" (k beyond the measured {t.measured_k}: extrapolated)"
    return text + "."


def model_note(note: ModelNote) -> str:
    """One thing a cost fit rests on, in words (the assumptions quote it)."""
    if note.kind == NoteKind.NO_DRAFT_TIMING:
        return "no draft timing: drafting assumed free"
    if note.kind == NoteKind.DRAFT_SCALED:
        return f"draft time scaled with k from k={note.k_low} ({note.drafter} drafter)"
    if note.kind == NoteKind.DRAFT_FLAT:
        return f"draft time taken as flat in k from k={note.k_low} ({note.drafter} drafter)"
    if note.kind == NoteKind.NO_PLAIN_ENGINE:
        return f"no plain engine in the input: plain decoding {note.baseline}"
    verdict = "grows with k (one pass per token)" if note.grows else "flat in k (one pass)"
    ratio = f"{note.growth:.2f}×" if note.growth is not None else "from 0"
    usual = note.drafter
    said = "" if note.measured_drafter == usual else f"; the method's usual kind is {usual}: the measurement decides"
    return f"draft time measured at k={note.k_low}…{note.k_high}: {ratio} at batch {note.batch:.0f}, {verdict}{said}"


def explanations(rec: Recommendation) -> list[str]:
    out = [explain_bucket(t) for t in rec.by_batch_size]
    if not rec.recommended.num_speculative_tokens and rec.recommended.predicted_speedup is not None:
        out.insert(0, RUN_WITHOUT)
    served = {(s.method, s.draft_model) for s in rec.served}
    why = {(n.method, n.draft_model): n for n in rec.not_measured}
    for band in rec.bands:
        if rec.recommended.predicted_speedup is not None:  # beside a timed recommendation
            out.append(f"Not timed: {band_summary(band)}")
        notes = band_notes(band)
        key = (band.method, band.draft_model)
        if key in served:  # the k that ran was measured: the band is for the others
            notes = [n for n in notes if n != f"{_capital(HOW_TO_MEASURE)}."]
        elif key in why and why[key].reason != Unmeasured.NO_PLAIN:  # else: add a plain server, as it says
            notes = [
                f"Not measured: {not_measured_reason(why[key])}." if n == f"{_capital(HOW_TO_MEASURE)}." else n
                for n in notes
            ]
        out += notes
    return out + [f"Under load: {load_advice_text(a)}" for a in rec.under_load]


def assumptions(rec: Recommendation) -> list[str]:
    """What each method's fit rests on (sorted, each once)."""
    out: list[str] = []
    served = {s.method for s in rec.served}
    for m in rec.methods:
        name = m.method or "unknown method"
        if not m.timed and m.method in served:
            out.append(
                f"{name}: speedups measured from the servers' own generation throughput (served throughput: every "
                "interval of a busy stretch but its first and last, prompt processing and turnover gaps included) "
                "against a plain server at the same load; k other than the one that ran are a modelled band. The "
                "plain server is a separate process: separate processes of one configuration can differ by 20–40% "
                "on shared machines"
            )
        elif not m.timed:
            out.append(f"{name}: no step timing in the input: its speed is a modelled band, not a measurement")
        else:
            out += [f"{name}: {model_note(note)}" for note in m.model_notes]
            if m.plain_measured:
                out.append(
                    f"{name}: speedups are against a plain engine (no speculative config) measured in a separate "
                    "engine process; separate processes of one configuration can differ by 20–40% on shared machines"
                )
        if m.partial_drafting:
            by_k = ", ".join(f"{q:.0%} at k={k}" for k, q in m.drafts_per_request_step_by_k)
            measured = f"measured: {by_k}" if by_k else "measured"
            out.append(
                f"{name}: {m.drafts_per_request_step:.0%} of request-steps draft ({measured}); "
                "an unmeasured k takes the share of the nearest measured k"
            )
        out.append(
            f"{name}: acceptance beyond k={m.measured_k} is extrapolated with conditional rate "
            f"{m.conditional_tail:.2f} ({m.conditional_tail_low:.2f}–{m.conditional_tail_high:.2f})"
        )
    if rec.unknown_method:
        out.append(UNKNOWN_METHOD)
    return sorted(set(out)) + ([other_targets(rec)] if rec.other_targets else [])


def _target_name(t: Target) -> str:
    where = " · ".join(v for v in (t.platform, t.device) if v)
    return (t.model or "unnamed model") + (f" ({where})" if where else "")


def other_targets(rec: Recommendation) -> str:
    """Why the recommendation covers one target of several, and how to get the others."""
    if rec.target is None:
        return ""
    others = ", ".join(f"{_target_name(t)}: {t.steps:,} steps" for t in rec.other_targets)
    return (
        f"The input holds {len(rec.other_targets) + 1} targets; this is for {_target_name(rec.target)} "
        f"({rec.target.steps:,} speculative steps, the most) and compares only its methods: methods on different "
        f"models or devices answer different questions. Others: {others}; pass --model to recommend for one of them."
    )


# --- the comparison -------------------------------------------------------------------------------

_FIELD_NAMES = {"method": "method", "draft_model": "draft model", "num_spec_tokens": "k", "schedule": "schedule"}


def config_values(value: object) -> str:
    """``[2, 4]`` → ``2/4``; a schedule → ``1: 4, 2-3: 2``; nothing → ``none``."""
    if isinstance(value, Mapping):
        return ", ".join(f"{bucket}: {config_values(ks)}" for bucket, ks in value.items())
    if isinstance(value, list | tuple):
        return "/".join(str(v) for v in value) if value else "none"
    return "none" if value is None else str(value)


#: How run-metadata fields read in sentences (environment variables read as their own names).
ENVIRONMENT_NAMES = {
    "platform": "platform", "device": "device", "device_arch": "device architecture",
    "attention_backend": "attention backend", "draft_attention_backend": "drafter attention backend",
    "graph_mode": "graph mode", "vllm_version": "vLLM version", "tensor_parallel_size": "tensor parallel size",
    "pipeline_parallel_size": "pipeline parallel size", "data_parallel_size": "data parallel size",
    "dtype": "dtype", "kv_cache_dtype": "KV-cache dtype",
    "rejection_sample_method": "rejection sampling", "draft_sample_method": "draft sampling",
    "model_runner": "model runner",
}  # fmt: skip


def environment_name(field: str) -> str:
    return ENVIRONMENT_NAMES.get(field, field)


def describe_environment(differences: Sequence[Difference]) -> str:
    """``attention backend differs: ROCM_ATTN vs ROCM_AITER_FA; …``, then what it means."""
    parts = [f"{environment_name(d.field)} differs: {config_values(d.a)} vs {config_values(d.b)}" for d in differences]
    return _capital("; ".join(parts)) + " (A and B ran on different setups: their numbers are not like for like)."


def _describe_differences(differences: Sequence[Difference]) -> str:
    parts = [f"{_FIELD_NAMES[d.field]} {config_values(d.a)} → {config_values(d.b)}" for d in differences]
    return "A and B differ in configuration: " + "; ".join(parts) + "."


def _acceptance_sentence(la: float, lb: float, test: AcceptanceTest) -> str:
    if test.direction in ("fell", "rose"):
        return f"acceptance length {test.direction} {la:.2f} → {lb:.2f}, outside the 95% interval"
    if test.direction == "unchanged":
        return f"acceptance length {la:.2f} → {lb:.2f}, within the 95% interval"
    return f"acceptance length {la:.2f} → {lb:.2f} (no standard error: not tested)"


def _throughput_sentence(tp: Throughput) -> str:
    buckets = [x.batch_bucket for x in tp.buckets if x.tested] or [x.batch_bucket for x in tp.buckets]
    where = f"at matched batch sizes {', '.join(str(x) for x in buckets)}"
    ratio = tp.ratio
    if tp.direction is None:
        why = "one run per side" if tp.buckets else "no batch bucket in both"
        if ratio is None:
            return f"throughput not comparable ({why})"
        return f"throughput B/A {ratio:.2f}× {where} ({why}: no interval, not tested)"
    interval = f"B/A {ratio:.2f}×, 95% interval {tp.low:.2f}–{tp.high:.2f}"
    if tp.direction == "unchanged":
        return f"throughput within noise {where} ({interval})"
    return f"throughput {tp.direction} {abs((ratio or 1) - 1):.0%} {where} ({interval})"


def _why(la: float | None, lb: float | None, test: AcceptanceTest, tp: Throughput) -> str:
    """Why throughput moved: tokens per step (acceptance) against time per step."""
    if la is None or lb is None:
        return ""
    steps = tp.step_seconds_ratio
    timing = ""
    if steps is not None and tp.steps_moved:
        timing = f"; steps took {abs(steps - 1):.0%} {'longer' if steps > 1 else 'less time'}"
    return f" {_capital(_acceptance_sentence(la, lb, test))}{timing}."


def verdict(cmp: Comparison) -> str:
    """The comparison's one-paragraph verdict; ``cmp.kind`` (``tuning.compare``) decides what it
    says; where acceptance moved, the run-metadata changes ranked as its likely causes follow."""
    served = ""
    if cmp.serving:
        each = "; ".join(
            f"{r.config} at {_level(r.load, r.level)}: throughput "
            f"{ratio_text(r.throughput_ratio, r.throughput_low, r.throughput_high)}, TPOT "
            f"{ratio_text(r.tpot_ratio, r.tpot_low, r.tpot_high)}"
            + (f", goodput {ratio_text(r.goodput_ratio, r.goodput_low, r.goodput_high)}" if r.goodput_ratio else "")
            for r in cmp.serving
        )
        served = f"Under load (vLLM's serving benchmark, measured), B over A — {each}"
    if served and cmp.a.mean_acceptance_length is None and cmp.b.mean_acceptance_length is None:
        label = {
            "regression": "throughput fell beyond noise: a regression",
            "improvement": "throughput rose beyond noise: an improvement",
            "unchanged": "no change beyond noise",
        }.get(cmp.kind, "no level has repeats on both sides to test: no verdict")
        return f"{served}: {label}."
    text = _verdict(cmp) + (f" {served}." if served else "")
    if cmp.causes and cmp.acceptance.direction in ("fell", "rose"):
        text += (
            f" Acceptance {cmp.acceptance.direction}; likely causes, most likely first: "
            + "; ".join(_cause(c) for c in cmp.causes)
            + "."
        )
    return text


def _verdict(cmp: Comparison) -> str:
    la, lb = cmp.a.mean_acceptance_length, cmp.b.mean_acceptance_length
    tp, test, differences = cmp.throughput, cmp.acceptance, cmp.configuration.differences
    setup = cmp.configuration.environment
    lead = (describe_environment(setup) + " " if setup else "") + (
        _describe_differences(differences) + " " if differences else ""
    )
    differences = differences + setup
    if tp is not None and tp.direction is not None:
        label = cmp.kind if tp.direction in ("fell", "rose") else "no significant change"
        return lead + _capital(f"{_throughput_sentence(tp)}: {label}.") + _why(la, lb, test, tp)
    tail = f" {_capital(_throughput_sentence(tp))}." if tp is not None else ""
    if la is None or lb is None:
        return lead + "Acceptance length unknown in one of the runs: no verdict." + tail
    sentence = _acceptance_sentence(la, lb, test)
    if differences:
        moved = test.direction in ("fell", "rose")
        note = "a difference between configurations, not a regression" if moved else "no significant difference"
        without = " (no step timing on both sides to compare throughput)" if tp is None else ""
        return lead + _capital(f"{sentence}: {note}{without}.") + tail
    if test.direction is None:
        return _capital(f"{sentence}: no verdict.") + tail
    label = "no significant change" if cmp.kind == "unchanged" else cmp.kind
    return f"{sentence}: {label}" + (f".{tail}" if tail else "")


# --- specobs tune ---------------------------------------------------------------------------------


def _gain(value: float, low: float, high: float) -> str:
    return f"{value:+.1%} [{low:+.1%} to {high:+.1%}]"


def tune_headline(result: TuneResult) -> str:
    """What to deploy, and the verified gain that backs it."""
    v = result.verification
    if result.speculative_config is None:
        what = "Tuned: run without speculative decoding (the plain engine was measured fastest on this workload)"
        if v is not None:
            what += (
                f"; measured {_gain(v.gain_vs_best_static, v.gain_vs_best_static_low, v.gain_vs_best_static_high)} "
                f"vs the best static k={v.best_static_num_speculative_tokens}{_precision(v)}"
            )
        return what + "."
    name = result.method or "speculative decoding"
    if len(result.schedule) > 1:
        ranges = ", ".join(f"{batch_range(lo, hi)}: {'off' if k == 0 else f'k={k}'}" for lo, hi, k in result.schedule)
        what = f"Tuned: {name} with a batch-size schedule ({ranges})"
    else:
        what = f"Tuned: {name} with k={result.schedule[0][2]}"
    if v is None:
        return what + " (not verified)."
    vs_plain = _gain(v.gain_vs_plain, v.gain_vs_plain_low, v.gain_vs_plain_high)
    vs_static = _gain(v.gain_vs_best_static, v.gain_vs_best_static_low, v.gain_vs_best_static_high)
    verdict = "verified" if v.verified else "measured (not verified: the interval reaches a loss)"
    return f"{what}; {verdict} {vs_plain} vs plain decoding and {vs_static} vs the best static " + (
        f"k={v.best_static_num_speculative_tokens}{_precision(v)}."
    )


def _precision(v: TuneVerification) -> str:
    """Said in the headline when the verification did not reach its target precision."""
    if v.target_met:
        return ""
    widest = max(h for h in v.half_widths)
    return (
        f" — undecided to ±{v.half_width_target:.0%}: the budget ended at ±{widest:.1%}"
        if math.isfinite(widest)
        else f" — undecided to ±{v.half_width_target:.0%}: too few rounds for an interval"
    )


def tune_notes(result: TuneResult) -> list[str]:
    """How far the numbers can be trusted: noise, undecided races, idle engines, time spent."""
    n = result.noise
    if n.comparison.startswith("steps"):
        cycles = f"{n.cycle_to_cycle:.0%}" if n.cycle_to_cycle is not None else "–"
        out = [
            f"{n.rounds} race round(s). The speculative engine's ks were compared inside one generation, switched "
            f"every few steps in cycles of a random order and paired cycle by cycle (a k's tokens/s varied {cycles} "
            f"from cycle to cycle); the plain engine round by round in alternate order (rounds varied "
            f"{n.round_to_round:.0%}). Each look at the race is taken at a level that keeps 95% over all looks."
        ]
    else:
        out = [
            f"{n.rounds} race round(s); a candidate's tokens/s varied {n.round_to_round:.1%} (median relative "
            "standard deviation) from round to round, so candidates were compared round by round (paired)."
        ]
    if n.engine_bias is not None:
        tax = f"{n.k0_tax:.1%}" if n.k0_tax is not None else "not captured"
        low = f"{n.engine_bias_low:.2f}" if n.engine_bias_low is not None else "–"
        high = f"{n.engine_bias_high:.2f}" if n.engine_bias_high is not None else "–"
        out.append(
            f"Engine bias {n.engine_bias:.2f}× [{low}–{high}] ({n.engine_bias_basis}): what of it is more than "
            f"noise, at 95%, widens every plain-vs-speculative interval. The drafter takes {tax} of a k=0 step."
        )
    undecided = [b for b in result.buckets if b.basis == "measured" and not b.decided]
    if undecided:
        sizes = ", ".join(f"{b.measured_batch_size} (k={b.num_speculative_tokens})" for b in undecided)
        out.append(
            f"Batch size {sizes}: undecided when the race ended (budget or round limit): the measured leader was "
            "taken, but it is not established beyond noise against every other candidate (see the table's "
            "ratios); a longer --budget narrows this."
        )
    modelled = [batch_range(b.batch_size_min, b.batch_size_max) for b in result.buckets if b.basis == "model"]
    if modelled:
        out.append(
            f"Batch {', '.join(modelled)}: not measured; chosen by the model fitted on the captured steps of every "
            "measured k, between the choices measured either side."
        )
    idle = ", ".join(f"{name} {sec:.1f} s" for name, sec in n.idle_cpu_seconds.items())
    busy = ", ".join(f"{name} {sec:.0f} s" for name, sec in n.busy_seconds.items())
    if idle:
        out.append(f"CPU used by an engine while it waited: {idle} (busy: {busy}).")
    s = result.seconds
    out.append(
        f"Time: {s.get('total', 0):.0f} s in all — engine start {s.get('engine_start', 0):.0f} s, race "
        f"{s.get('race', 0):.0f} s, verification {s.get('verification', 0):.0f} s."
    )
    return out


# --- the online tuner -----------------------------------------------------------------------------


def _clock(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%H:%M:%S")


#: Each reason of the online tuner in words (``other`` says its own text; ``window_measured`` its number).
TUNER_REASONS = {
    TunerReason.MEASURED_FASTER: "measured faster than the current k beyond noise",
    TunerReason.FORCED: "forced",
    TunerReason.NO_EARLIER_MEASUREMENT: "no earlier measurement to compare with",
    TunerReason.NO_SPECULATIVE_DECODING: "no speculative decoding in this engine",
    TunerReason.DATA_PARALLEL: "data parallel > 1: vLLM disables the batch-size schedule there",
    TunerReason.MODEL_RUNNER_V2: "Model Runner V2 is reported to ignore the batch-size schedule",
    TunerReason.NO_SCHEDULE: (
        "the engine has no batch-size schedule: start it with num_speculative_tokens_per_batch_size "
        "in --speculative-config (e.g. [[1, MAX_NUM_SEQS, K]])"
    ),
}


def tuner_reason(d: TunerDecision) -> str:
    """Why the online tuner decided ``d``, in words."""
    if d.reason == TunerReason.WINDOW_MEASURED and d.measured_gain is not None:
        return f"the window after the switch measured {d.measured_gain:+.1%}"
    return TUNER_REASONS.get(d.reason) or d.reason_text or str(d.reason)


def tuner_state(decisions: Sequence[TunerDecision]) -> list[str]:
    """Per bucket and engine, the k the tuner runs now and since when: "k=4 at batch 1–3 since
    10:42:05 UTC: +12% [+8% to +15%] predicted, +11% measured"."""
    latest: dict[tuple[object, ...], TunerDecision] = {}
    applied: dict[tuple[object, ...], TunerDecision] = {}
    for d in decisions:
        key: tuple[object, ...] = (d.run_id, d.engine, d.batch_size_min, d.batch_size_max)
        if d.action in ("apply", "rollback", "confirm"):
            latest[key] = d
        if d.action == "apply":
            applied[key] = d
    out = []
    for key, d in latest.items():
        where = f"batch {batch_range(d.batch_size_min, d.batch_size_max)}"
        if d.action == "rollback":
            out.append(f"k={d.to_k} at {where} since {_clock(d.ts)} UTC: rolled back ({tuner_reason(d)}).")
            continue
        start = applied.get(key, d)
        text = f"k={d.to_k} at {where} since {_clock(start.ts)} UTC"
        if start.predicted_gain is not None and start.predicted_low is not None and start.predicted_high is not None:
            text += f": {_gain(start.predicted_gain, start.predicted_low, start.predicted_high)} predicted"
        if d.action == "confirm" and d.measured_gain is not None:
            text += f", {d.measured_gain:+.1%} measured after the switch"
        out.append(text + ".")
    out += [f"Online tuning off: {tuner_reason(d)}." for d in decisions if d.action == "refuse"]
    return out


METADATA_HEADERS = ("run · engine", "vLLM", "device", "attention (target / drafter)", "graphs", "TP · PP · DP",
                    "dtype · KV cache", "speculative", "environment")  # fmt: skip


def metadata_rows(metadata: Sequence[RunMetadata]) -> list[list[str]]:
    """One row per engine's run metadata (``–`` where a field was not readable)."""

    def text(value: object) -> str:
        return "–" if value is None else str(value)

    rows = []
    for m in metadata:
        device = " ".join(str(v) for v in (m.platform, m.device, f"({m.device_arch})" if m.device_arch else None) if v)
        attention = text(m.attention_backend) + (f" / {m.draft_attention_backend}" if m.draft_attention_backend else "")
        if m.method:
            spec = f"{m.method} k={text(m.num_speculative_tokens)}"
            if m.schedule:
                spec += ", schedule " + ", ".join(f"{batch_range(lo, hi)}: {k}" for lo, hi, k in m.schedule)
            if m.rejection_sample_method not in (None, "standard"):
                spec += f", {m.rejection_sample_method} rejection sampling"
            if m.draft_sample_method not in (None, "greedy"):
                spec += f", {m.draft_sample_method} drafts"
        else:
            spec = "off"
        version = text(m.vllm_version) + (f" ({m.model_runner})" if m.model_runner else "")
        rows.append([
            f"{text(m.run_id)} · {text(m.engine)}", version, device or "–", attention, text(m.graph_mode),
            f"{text(m.tensor_parallel_size)} · {text(m.pipeline_parallel_size)} · {text(m.data_parallel_size)}",
            f"{text(m.dtype)} · {text(m.kv_cache_dtype)}", spec,
            ", ".join(f"{k}={v}" for k, v in m.environment.items()) or "–",
        ])  # fmt: skip
    return rows


TUNER_HEADERS = ("time (UTC)", "batch", "action", "k", "predicted [95%]", "measured", "reason")


def tuner_rows(decisions: Sequence[TunerDecision], most: int = 20) -> list[list[str]]:
    """The latest ``most`` decisions as table cells."""
    rows = []
    for d in list(decisions)[-most:]:
        predicted = "–"
        if d.predicted_gain is not None and d.predicted_low is not None and d.predicted_high is not None:
            predicted = _gain(d.predicted_gain, d.predicted_low, d.predicted_high)
        measured = "–" if d.measured_gain is None else f"{d.measured_gain:+.1%}"
        rows.append([_clock(d.ts), batch_range(d.batch_size_min, d.batch_size_max), d.action,
                     f"{d.from_k} → {d.to_k}", predicted, measured, tuner_reason(d)])  # fmt: skip
    return rows


# --- the report's summary (its first screen) ------------------------------------------------------

#: How each input format's windows are called in the summary's inputs line.
WINDOW_UNITS = {
    "events-jsonl": "steps", "events-parquet": "steps", "vllm-log": "log intervals", "sglang-log": "log intervals",
    "prometheus-text": "scrape intervals", "prometheus-api": "scrape intervals",
}  # fmt: skip
#: Group columns in the order the summary names groups by (the rest, then these last: long or opaque).
SUMMARY_LABEL_ORDER = ("method", "num_spec_tokens", "draft_model", "model", "workload", "platform", "device",
                       "batch_bucket", "batch_size", "hour")  # fmt: skip
SUMMARY_LABEL_LAST = ("run_id", "engine", "source")
#: At most this many groups are named in the summary's acceptance line (the table below has every one).
SUMMARY_GROUPS = 12


def _plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else many or word + 's'}"


def _methods_read(report: Report) -> tuple[list[str], bool]:
    """The methods in the input (run metadata, group labels, the recommendation's fits) and
    whether a plain engine (no speculative config) is among them."""
    methods: list[str] = []
    plain = any(m.method is None for m in report.metadata)
    methods += [m.method for m in report.metadata if m.method]
    for g in report.groups:
        if "method" not in g.labels:
            continue
        drafted = bool(g.summary.num_drafts or g.summary.num_draft_tokens)
        if g.labels["method"] is not None and drafted:
            methods.append(str(g.labels["method"]))
        elif g.labels["method"] is None and not drafted and not g.summary.num_spec_tokens:
            plain = True
    if report.recommendation is not None:
        methods += [m.method for m in report.recommendation.methods if m.method]
        plain = plain or any(m.plain_measured for m in report.recommendation.methods)
    return sorted(set(methods)), plain


def inputs_line(report: Report) -> str:
    """``Inputs: 3 files (events-jsonl) · 9,332 steps · methods draft_model, ngram and a plain
    engine · no line skipped.``: what was read, in one line."""
    sources = report.sources
    files = all(s.name != "<stdin>" and "://" not in s.name for s in sources)
    formats: dict[str, int] = {}
    for s in sources:
        formats[s.format] = formats.get(s.format, 0) + 1
    kinds = ", ".join(f if len(formats) == 1 else f"{n:,} {f}" for f, n in formats.items())
    parts = [_plural(len(sources), "file" if files else "input") + (f" ({kinds})" if kinds else "")]
    if report.summary.num_windows:
        units = {WINDOW_UNITS.get(s.format, "windows") for s in sources if s.windows > 0}
        unit = units.pop() if len(units) == 1 else "windows"
        parts.append(_plural(report.summary.num_windows, unit[:-1], unit))
    if report.requests is not None:
        parts.append(_plural(report.requests.overall.num_requests, "finished request"))
    methods, plain = _methods_read(report)
    if report.metadata:  # engines named by their method ("plain": no speculative config)
        named = ", ".join(methods + (["plain"] if plain else []))
        parts.append(_plural(len(report.metadata), "engine") + (f": {named}" if named else ""))
    elif methods:
        parts.append(("method " if len(methods) == 1 else "methods ") + ", ".join(methods)
                     + (" and a plain engine" if plain else ""))  # fmt: skip
    elif plain:
        parts.append("a plain engine only")
    skipped = len(report.skipped)
    parts.append(f"{_plural(skipped, 'line')} skipped" if skipped else "no line skipped")
    return "Inputs: " + " · ".join(parts) + "."


def _length(s: Summary) -> str:
    return "–" if s.mean_acceptance_length is None else f"{s.mean_acceptance_length:.2f}"


def acceptance_line(report: Report) -> str:
    """The acceptance headline: the overall acceptance length with its 95% interval and the
    share of drafted tokens accepted (per-request means when the input holds only requests)."""
    s = report.summary
    rate = "" if s.draft_acceptance_rate is None else f"{s.draft_acceptance_rate:.1%} of drafted tokens accepted"
    if s.mean_acceptance_length is not None:
        low, high = s.mean_acceptance_length_low, s.mean_acceptance_length_high
        interval = f" [95% {low:.2f}–{high:.2f}]" if low is not None and high is not None else ""
        printed = " as printed by the engine" if s.mean_acceptance_length_basis == "reported" else ""
        text = f"Acceptance length {s.mean_acceptance_length:.2f}{interval} tokens per verification{printed}"
        return text + (f", {rate}." if rate else ".")
    if rate:
        return f"Acceptance length unknown (the input does not count drafts); {rate}."
    r = report.requests
    if r is not None:
        o = r.overall
        rw, tw = o.request_weighted_mean_acceptance_length, o.token_weighted_mean_acceptance_length
        if rw is not None and tw is not None:
            requests = _plural(o.num_requests, "finished request")
            return (
                f"Acceptance length {tw:.2f} weighted by verify steps over {requests} ({rw:.2f} per request on "
                "average)."
            )
    return "Acceptance length unknown: the input counts no drafts."


def _summary_value(column: str, value: object) -> str:
    if column == "num_spec_tokens":
        return f"k={value}"
    if column == "source":
        return str(value).rstrip("/").rsplit("/", 1)[-1]
    if column in ("engine", "batch_bucket", "batch_size", "run_id"):
        return f"{CONFIG_NAMES.get(column, column.removesuffix('_id'))} {value}"
    return str(value)


def _summary_columns(columns: Sequence[str]) -> list[str]:
    order = {c: i for i, c in enumerate(SUMMARY_LABEL_ORDER)}
    last = {c: i for i, c in enumerate(SUMMARY_LABEL_LAST)}
    return sorted(columns, key=lambda c: (c in last, last.get(c, order.get(c, len(order)))))


def _short_labels(labels: Sequence[Mapping[str, object]], columns: Sequence[str]) -> tuple[list[str], list[str]]:
    """Each group named by its first column, and by as many more as it takes to tell it from
    the others (``mtp (tiny-mimo)``); and the columns that named any group."""
    out, used = [], 1
    for own in labels:
        n = 1
        while n < len(columns) and sum(
            all(other.get(c) == own.get(c) for c in columns[:n]) for other in labels
        ) > 1:  # fmt: skip
            n += 1
        used = max(used, n)
        values = [_summary_value(c, own.get(c)) for c in columns[:n] if own.get(c) is not None]
        out.append(values[0] + (f" ({' · '.join(values[1:])})" if len(values) > 1 else "") if values else "–")
    return out, list(columns[:used])


def _drafted_groups(report: Report) -> list[GroupSummary]:
    return [g for g in report.groups if g.summary.num_drafts or g.summary.num_draft_tokens]


def acceptance_by_group(report: Report) -> tuple[list[str], str]:
    """The acceptance length of each group that drafted, briefly (no intervals: the Acceptance
    table has them), and what they are per (``method and k``): one line per method with its k
    side by side when grouped by k (``ngram: k=1 1.84 · k=2 2.55``), else one line of groups
    (``dflash 1.52 · eagle 2.12``); nothing when there is only one group."""
    drafted = _drafted_groups(report)
    varying = [c for c in report.group_columns if len({str(g.labels.get(c)) for g in drafted}) > 1]
    columns = _summary_columns(varying)
    if len(drafted) < 2 or not columns:
        return [], ""
    if "num_spec_tokens" in columns:
        rest = [c for c in columns if c != "num_spec_tokens"]
        rows: dict[tuple[object, ...], list[str]] = {}
        firsts: dict[tuple[object, ...], Mapping[str, object]] = {}
        for g in drafted:
            key = tuple(g.labels.get(c) for c in rest)
            firsts.setdefault(key, g.labels)
            rows.setdefault(key, []).append(f"k={g.labels.get('num_spec_tokens')} {_length(g.summary)}")
        names, used = _short_labels(list(firsts.values()), rest) if rest else ([""] * len(rows), [])
        lines = [(f"{name}: " if name else "") + " · ".join(ks) for name, ks in zip(names, rows.values(), strict=True)]
        more = len(lines) - SUMMARY_GROUPS // 2
        if more > 0:
            lines = [*lines[: SUMMARY_GROUPS // 2], f"and {more:,} more in the Acceptance table below"]
        return lines, _names([*used, "num_spec_tokens"])
    names, used = _short_labels([g.labels for g in drafted], columns)
    entries = [f"{name} {_length(g.summary)}" for name, g in zip(names, drafted, strict=True)]
    more = len(entries) - SUMMARY_GROUPS
    tail = f" · and {more:,} more in the Acceptance table below" if more > 0 else ""
    return [" · ".join(entries[:SUMMARY_GROUPS]) + tail], _names(used)


def _names(columns: Sequence[str]) -> str:
    """``method, model and k``."""
    names = [CONFIG_NAMES.get(c, c.removesuffix("_id")) for c in columns]
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def no_recommendation(report: Report) -> str:
    """Why a report carries no recommendation."""
    if not report.summary.num_windows and report.requests is None and report.serving is not None:
        return (
            "No recommendation from the engine's steps: the input holds serving-benchmark results alone (what they "
            "measured under load is in the findings); add the servers' capture or logs for acceptance per step."
        )
    if not report.summary.num_windows:
        return (
            "No recommendation: finished requests alone do not say what drafting costs per step (read the engine's "
            "steps, log or scrapes too)."
        )
    if not report.summary.num_drafts:
        return (
            "No recommendation: the input does not count drafts, so neither the acceptance length nor a speedup can "
            "be computed from it."
        )
    return "No recommendation: nothing in the input drafted."


def speculative_config_line(config: str) -> str:
    """The flag as vLLM takes it, ready to paste."""
    return f"--speculative-config '{config}'"


# --- split by context length, or side by side ---------------------------------------------------

SPLIT_HEADERS = ("target", "k", "drafts", "acceptance length [95%]", "accept rate", "r_i", "draft ms", "verify ms",
                 "step ms", "tokens/s", "speedup [95%]", "pitfalls")  # fmt: skip


def _value(value: float | int | None, spec: str) -> str:
    return "–" if value is None else spec.format(value)


def _split_target(labels: Mapping[str, Any]) -> str:
    return method_label(labels.get("method"), labels.get("draft_model"))


def _interval(value: float | None, low: float | None, high: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.2f} [{low:.2f}–{high:.2f}]" if low is not None and high is not None else f"{value:.2f}"


def split_headers(split: Split) -> list[str]:
    """The value columns (``context``, ``attention_backend``…), then :data:`SPLIT_HEADERS`."""
    return [*split.by, *SPLIT_HEADERS]


def split_values(values: Mapping[str, Any]) -> str:
    return " · ".join(str(v) for v in values.values())


def split_rows(split: Split) -> list[list[str]]:
    """One row per value, target and k (the model named when there are several); the fastest k
    of a value marked ``*``."""
    models = len({r.labels.get("model") for r in split.rows}) > 1

    def target(labels: Mapping[str, Any]) -> str:
        name = _split_target(labels)
        return f"{labels.get('model')} · {name}" if models else name

    best = {(target(b.labels), split_values(b.values), b.k) for b in split.best}
    rows = []
    for r in split.rows:
        s = r.summary
        mark = " *" if (target(r.labels), split_values(r.values), r.k) in best else ""
        speed = "–"
        if r.speedup is not None:
            speed = f"{ratio_text(r.speedup, r.speedup_low, r.speedup_high)} vs {r.baseline}"
        rates = " ".join(f"{x:.2f}" for x in (s.acceptance_rate_per_position or ()) if x is not None) or "–"
        rows.append([
            *(str(v) for v in r.values.values()), target(r.labels), f"{r.k}{mark}",
            _value(s.num_drafts, "{:,}"),
            _interval(s.mean_acceptance_length, s.mean_acceptance_length_low, s.mean_acceptance_length_high),
            _value(s.draft_acceptance_rate, "{:.1%}"), rates, _value(r.draft_ms, "{:.2f}"),
            _value(r.verify_ms, "{:.2f}"), _value(r.step_ms, "{:.2f}"), _value(r.tokens_per_second, "{:,.0f}"), speed,
            ", ".join(r.pitfalls) or "–",
        ])  # fmt: skip
    return rows


def split_title(split: Split) -> str:
    if not split.by:
        return "Each against its own plain engine (* fastest k)"
    if split.by == ("context",):
        return "By context length (* fastest k)"
    return f"Side by side by {', '.join(split.by)}: each against its own plain engine (* fastest k)"


def split_findings(split: Split) -> list[str]:
    """What the split shows, in words: the acceptance trend with context, the best k per value and
    whether it moves beyond noise, what vLLM can apply, the pitfalls met, and what is left out."""
    out = []
    context = split.by == ("context",)
    for t in split.trends:
        way = "rises" if t.long_length > t.short_length else "falls"
        noise = "beyond noise" if t.beyond_noise else "within noise (the intervals overlap)"
        rates = ""
        if t.short_rate is not None and t.long_rate is not None:
            rates = f" ({t.short_rate:.0%} → {t.long_rate:.0%} of drafted tokens accepted)"
        out.append(
            f"Acceptance {way} with context ({_split_target(t.labels)}, k={t.k}): "
            f"{_interval(t.short_length, *t.short_interval)} tokens per verification at {t.short_bucket} tokens "
            f"of context against {_interval(t.long_length, *t.long_interval)} at {t.long_bucket}{rates}, {noise}."
        )
    if split.best:
        per = "; ".join(
            f"{split_values(b.values)}: k={b.k}"
            + (f" ({ratio_text(b.ratio, b.low, b.high)} over k={b.runner_up}"
               + (", beyond noise)" if b.clear else ", within noise)"))
            for b in split.best
        )  # fmt: skip
        what = "context" if context else ", ".join(split.by) or "the target"
        moves = "changes" if split.best_k_differs else "does not change"
        out.append(
            f"The best k {moves} with {what} beyond noise (tokens per second of step time at matched batch "
            f"sizes, measured in blocks of consecutive steps): {per}."
        )
        if context and split.vllm_option is None:
            out.append(
                "vLLM has no per-context k (none up to 0.33; `num_speculative_tokens_per_seq_len` is proposed in "
                "vllm#54801): the best k by context is advice, and no config is printed for it."
            )
        elif context:
            out.append(f"The installed vLLM declares `{split.vllm_option}`: a per-context k can be configured.")
    for r in split.rows:
        for pitfall in r.pitfalls:
            entry = PITFALL_BY_ID.get(pitfall)
            if entry is not None:
                out.append(f"{split_values(r.values)} ({_split_target(r.labels)}): {entry.title} — {entry.advice}")
    missing = split.steps - split.steps_known
    if missing > 0:
        why = "logs, scrapes and older captures do not have it" if context else "no run metadata says"
        out.append(
            f"{missing:,} of {split.steps:,} steps carry no {', '.join(split.by)} ({why}): they are left out of "
            "this table."
        )
    return list(dict.fromkeys(out))
