"""Every sentence specobs says: findings, explanations, assumptions and verdicts, worded from
the typed results (``specobs.results``). Numbers are read, never computed, here."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

from specobs.analysis.acceptance import MATERIAL_IID_GAP, WASTED_THRESHOLD
from specobs.analysis.requests import MATERIAL_MEAN_GAP
from specobs.analysis.timeseries import Change
from specobs.results import (
    AcceptanceTest,
    BucketChoice,
    Comparison,
    Difference,
    Finding,
    IntegrityIssue,
    Recommendation,
    Recommended,
    Report,
    RequestAcceptance,
    RunMetadata,
    ScheduleTax,
    Summary,
    Target,
    Throughput,
    TunerDecision,
    TuneResult,
)

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


# --- the report -----------------------------------------------------------------------------------


def acceptance_findings(s: Summary) -> list[Finding]:
    """What one group's acceptance numbers mean, in sentences with the numbers in them."""
    out: list[Finding] = []
    length = s.mean_acceptance_length
    if length is None:
        if s.draft_acceptance_rate is not None:
            out.append(Finding("acceptance_rate", (
                f"{s.draft_acceptance_rate:.1%} of drafted tokens were accepted; the number of drafts is not "
                "known, so the acceptance length cannot be computed (newer vLLM versions print it)."
            )))  # fmt: skip
        return out
    low, high = s.mean_acceptance_length_low, s.mean_acceptance_length_high
    interval = f" (95% interval {low:.2f}–{high:.2f})" if low is not None and high is not None else ""
    if s.mean_acceptance_length_basis == "reported":
        text = (
            f"Each draft yields {length:.2f} tokens per verification on average{interval}, as printed by the "
            "engine (no counts: the mean is weighted by running requests)."
        )
    else:
        text = (
            f"Each draft yields {length:.2f} tokens per verification on average{interval}: "
            f"{length - 1:.2f} accepted draft tokens plus the one token the target model adds (requests that "
            "did not draft in a step add one token)."
        )
    out.append(Finding("acceptance_length", text))
    if s.draft_acceptance_rate is not None:
        out.append(Finding("acceptance_rate", (
            f"{s.draft_acceptance_rate:.1%} of drafted tokens are accepted; the rest is draft and verify work "
            "thrown away."
        )))  # fmt: skip
    rates = s.acceptance_rate_per_position or ()
    wasted = list(s.wasted_positions)
    if rates and wasted:
        tail_start = wasted[0]
        if wasted == list(range(tail_start, len(rates))) and tail_start > 0:
            cut = s.truncation[tail_start - 1]
            full = s.truncation[-1].tokens_per_step
            share = cut.share_of_accepted or 0.0
            text = (
                f"{_positions(wasted).capitalize()} accepted in under {WASTED_THRESHOLD:.0%} of drafts: "
                f"k={tail_start} keeps {share:.0%} of the accepted tokens "
                f"({cut.tokens_per_step:.2f} tokens per step instead of {full:.2f})."
            )
        else:
            text = f"{_positions(wasted).capitalize()} accepted in under {WASTED_THRESHOLD:.0%} of drafts."
        out.append(Finding("wasted_positions", text))
    trend, alpha, gap = s.conditional_trend, s.iid_alpha, s.iid_max_gap
    cond = s.conditional_acceptance_rate_per_position or ()
    if trend in ("falling", "rising") and alpha is not None and s.supported_positions:
        first, last = s.supported_positions[0], s.supported_positions[-1]
        change = f"{cond[first]:.2f} at position {first + 1}, {cond[last]:.2f} at position {last + 1}"
        if gap is not None and gap >= MATERIAL_IID_GAP:
            text = (
                f"Conditional acceptance is {trend} ({change}): the iid (Leviathan) formula with α={alpha:.2f} "
                f"misses some positions by up to {gap:.2f}; use the per-position rates, not α, to predict other k."
            )
        else:
            text = (
                f"Conditional acceptance is slightly {trend} ({change}), but the iid formula with α={alpha:.2f} "
                f"stays within {gap or 0:.2f} of every position: a fair model here."
            )
        out.append(Finding("conditional_trend", text))
    elif trend == "flat" and alpha is not None:
        out.append(Finding("conditional_trend", (
            f"Conditional acceptance is flat across positions (consistent with a constant α={alpha:.2f}): "
            "the iid formula is a fair model here."
        )))  # fmt: skip
    bounds = s.position_bounds
    if bounds:
        widest = max(bounds[1:], key=lambda b: b.rate_high - b.rate, default=None)
        if widest is not None and widest.rate_high > widest.rate + 0.005:
            out.append(Finding("interval_bias", (
                f"Drafts were shorter than k ({s.draft_tokens_per_draft or 0:.2f} tokens per draft at "
                f"k={len(bounds)}: a batch-size schedule or short lookups), and this source divides every position "
                f"by all drafts: positions 2–{len(bounds)} are underestimated; position {widest.position} reads "
                f"{widest.rate:.2f} but may be up to {widest.rate_high:.2f}. In-engine capture counts the "
                "drafts that reached each position."
            )))  # fmt: skip
    if s.windows_contradicting:
        out.append(Finding("printed_values_contradict_counts", (
            f"{s.windows_contradicting:,} window(s) print a mean acceptance length or acceptance rate that their own "
            "counts contradict (beyond the printed rounding); the counts are used, the printed values are not."
        )))  # fmt: skip
    if s.num_drafts_derived:
        out.append(Finding("drafts_derived", (
            "The number of drafts is derived from the printed acceptance rates (vLLM's log line does not print it)."
        )))  # fmt: skip
    return out


def change_findings(changes: Sequence[Change]) -> list[Finding]:
    """Where acceptance changed over time, and whether a configuration change explains it."""
    out = []
    for change in changes:
        c = change.change
        where = ", ".join(f"{k}={v}" for k, v in change.labels.items() if v is not None)
        where = f" ({where})" if where else ""
        direction = "fell" if c.after < c.before else "rose"
        if change.kind == "configuration_change":
            switched = ", ".join(f"{CONFIG_NAMES.get(k, k)} {a} → {b}" for k, (a, b) in change.changed.items())
            text = (
                f"Acceptance length {direction} {c.before:.2f} → {c.after:.2f} at {_when(c.ts)}{where} when "
                f"{switched}: a configuration change, not a regression."
            )
        else:
            known = {k: v for k, v in change.configuration.items() if v is not None}
            within = ", ".join(f"{CONFIG_NAMES.get(k, k)} {v}" for k, v in known.items())
            text = (
                f"Acceptance length {direction} {c.before:.2f} → {c.after:.2f} at {_when(c.ts)}{where}"
                f"{' within ' + within if within else ''}: {change.kind} (z={c.z:.1f})."
            )
        out.append(Finding(change.kind, text))
    return out


def cost_findings(tax: Sequence[ScheduleTax], unsteady: Mapping[str, int]) -> list[Finding]:
    """The k = 0 tax (``analysis.cost.schedule_tax``) and the steps left out of timing."""
    out = []
    for t in tax:
        sizes = ", ".join(map(str, t.batch_sizes))
        if t.tax_seconds <= 0:
            text = (
                f"With drafting switched off (k=0) the {t.method} engine took {t.off_seconds * 1e3:.1f} ms per "
                f"step against {t.plain_seconds * 1e3:.1f} ms in the plain engine ({t.tax_share:+.0%}, batch "
                f"{sizes}): no measurable k=0 tax, and a k=0 step does more than a plain one, so the engines differ "
                "by more than that (separate processes can differ by 20–40% on shared machines)."
            )
        else:
            text = (
                f"With drafting switched off (k=0) the {t.method} engine still takes {t.off_seconds * 1e3:.1f} ms "
                f"per step against {t.plain_seconds * 1e3:.1f} ms in the plain engine ({t.tax_seconds * 1e3:+.1f} "
                f"ms, {t.tax_share:+.0%}, batch {sizes}): a schedule's k=0 ranges pay this; no speculative config "
                "does not. Separate engine processes can differ by 20–40% on shared machines, so part of it may be "
                "the engines' own noise."
            )
        out.append(Finding("schedule_tax", text))
    if unsteady:
        parts = [f"{n:,} {why}" for why, n in sorted(unsteady.items())]
        out.append(Finding("unsteady_steps", (
            f"Left out of timing and cost fits: {' and '.join(parts)} step(s), each over 4× the median step time "
            "of its configuration (10× the time per token of its engine's steps at that k where the configuration "
            "is too small to judge): compilation, graph capture and first allocations are not steady state."
        )))  # fmt: skip
    return out


def report_findings(report: Report) -> list[Finding]:
    """The overall findings of a report: config integrity first (it says what the numbers
    mean), then acceptance, changes over time, then costs."""
    return (
        integrity_findings(report.integrity)
        + acceptance_findings(report.summary)
        + change_findings(report.changes)
        + cost_findings(report.tax, report.unsteady)
        + request_findings(report.requests)
    )


def request_findings(r: RequestAcceptance | None) -> list[Finding]:
    """The spread of acceptance across requests, and why its two means differ."""
    if r is None:
        return []
    o = r.overall
    out: list[Finding] = []
    rw, tw = o.request_weighted_mean_acceptance_length, o.token_weighted_mean_acceptance_length
    if rw is not None and tw is not None:
        spread = ""
        if o.p10 is not None and o.p50 is not None and o.p90 is not None:
            spread = f" (median {o.p50:.2f}; 10% of requests at or below {o.p10:.2f}, 10% at or above {o.p90:.2f})"
        if abs(rw - tw) < MATERIAL_MEAN_GAP:
            why = "close to it: long and short requests accept alike"
        else:
            who = (
                "long requests accept more than short ones" if tw > rw else "long requests accept less than short ones"
            )
            why = f"long requests weigh more in the token-weighted mean, so {who}"
        drafted = o.num_requests - o.num_requests_without_drafts
        out.append(Finding("requests", (
            f"Per request, the acceptance length averages {rw:.2f} over {drafted:,} "
            f"request(s){spread}; weighted by verify steps (what the engine gets) it is {tw:.2f}, {why}."
        )))  # fmt: skip
    if o.num_requests_without_drafts:
        out.append(Finding("requests", (
            f"{o.num_requests_without_drafts:,} of {o.num_requests:,} finished request(s) never verified a draft "
            "(the drafter proposed nothing for them, or they ended first): left out of the per-request distribution."
        )))  # fmt: skip
    return out


def _who(issue: IntegrityIssue) -> str:
    parts = [issue.method or "", f"run {issue.run_id}" if issue.run_id else "",
             f"engine {issue.engine}" if issue.engine is not None and issue.run_id else ""]  # fmt: skip
    named = ", ".join(p for p in parts if p)
    return f" ({named})" if named else ""


def integrity_findings(issues: Sequence[IntegrityIssue]) -> list[Finding]:
    """One finding per config-integrity issue (``analysis.integrity``)."""
    out = []
    for i in issues:
        who = _who(i)
        if i.kind == "schedule_ignored":
            text = (
                f"The batch-size schedule is being ignored{who}: in {i.affected:,} of {i.checked:,} steps where it "
                f"allows fewer than k={i.max_k} tokens (k={i.corrected or 0:.1f} on average), drafts were longer "
                f"({i.observed or 0:.2f} tokens per draft). The engine drafts the maximum k whatever the batch size "
                "(reported for Model Runner V2): the schedule's savings at large batches are not happening."
            )
        elif i.kind == "schedule_disabled":
            text = (
                f"The batch-size schedule was configured{who} with data parallel size {i.affected}, where vLLM "
                f"disables it (ranks could pick different k and deadlock): every step drafts the static "
                f"k={i.max_k}. Run one engine per rank without data parallel to use a schedule."
            )
        elif i.kind == "synthetic_rejection":
            text = (
                f"Rejection sampling is synthetic{who} (rejection_sample_method=synthetic): vLLM accepts drafts at "
                "configured rates, so these acceptance numbers measure the configuration, not the drafter."
            )
        elif i.kind == "short_drafts":
            text = (
                f"Drafts fill {i.observed or 0:.0%} of k{who} ({i.affected:,} draft tokens where k allowed "
                f"{i.checked:,}, k up to {i.max_k}): the drafter often proposes fewer than k tokens (ngram finds "
                "shorter matches, a schedule or an early stop), so the last positions are rarely tried while "
                "verification is sized for k."
            )
        elif i.kind == "host_timed":
            text = (
                f"{i.affected:,} of {i.checked:,} GPU steps were timed on the host clock (timing_clock host or "
                "mixed): a timed call ran inside a graph capture, where HIP refuses device events. Their draft and "
                "verify times include launch and queueing, not only device work."
            )
        elif i.kind == "accepted_past_end":
            share = i.affected / i.checked if i.checked else 0.0
            text = (
                f"{i.affected:,} accepted draft tokens ({share:.1%} of accepted){who} were counted by vLLM although "
                "a stop (max_tokens, EOS) then cut them off the request: the draft acceptance rate is "
                f"{i.observed or 0:.1%} as counted, {i.corrected or 0:.1%} without them. Short outputs inflate it most."
            )
        else:
            continue
        out.append(Finding(i.kind, text))
    return out


# --- the recommendation ---------------------------------------------------------------------------


def headline(rec: Recommendation) -> str:
    """One sentence naming exactly the config printed beneath it, with that config's own prediction."""
    r = rec.recommended
    estimated = "no plain engine in the input: baseline estimated" if r.baseline != "plain engine" else ""
    if not r.num_speculative_tokens:
        note = f"; {estimated}" if estimated else ""
        return f"Recommendation: run without speculative decoding (no speculative config{note})."
    name = r.method or "speculative decoding"
    if r.schedule:
        ranges = ", ".join(f"{batch_range(low, high)}: {'off' if k == 0 else f'k={k}'}" for low, high, k in r.schedule)
        what = f"{name} with a batch-size schedule ({ranges})"
    else:
        what = f"{name} with k={r.num_speculative_tokens}"
    target = f" for {rec.target.model or 'the unnamed model'}" if rec.other_targets and rec.target else ""
    text = (
        f"Recommendation{target}: {what}, predicted {speedup_with_interval(r.predicted_speedup, r.interval)} "
        "plain decoding"
    )
    text += " on this traffic" + (f" ({estimated})" if estimated else "") + "."
    if not r.method:
        text += " The input has no method label (vLLM's counters carry none): pass --method to get a ready config."
    return text


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
        model = f"model: {tokens:.2f} tokens per step for a step {t.step_ratio:.2f}× as long as a plain one"
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
    verb = "measured at" if t.basis.startswith("measured") else "predicted"
    k = t.num_speculative_tokens
    text = f"At {where}, {name} with k={k} is {verb} {t.predicted_speedup:.2f}×{ci} plain decoding"
    model = f"{tokens:.2f} tokens per step"
    if t.step_ratio is not None:
        model += f" for a step {t.step_ratio:.2f}× as long as a plain one"
    if t.basis == "measured, plain modelled":
        text += f" (plain decoding at these batch sizes from the model; model: {model})"
    else:
        text += f" (model: {model})" if t.basis == "measured" else f": {model}"
    anchored = t.basis == "model" and t.model_speedup and abs(t.predicted_speedup / t.model_speedup - 1) > 0.005
    if anchored and t.model_speedup:
        text += (
            f", {t.model_speedup:.2f}× by the model alone, scaled by {t.predicted_speedup / t.model_speedup:.2f} "
            "to agree with the k measured in this bucket"
        )
    if t.num_speculative_tokens > t.measured_k:
        text += f" (k beyond the measured {t.measured_k}: extrapolated)"
    return text + "."


def explanations(rec: Recommendation) -> list[str]:
    out = [explain_bucket(t) for t in rec.by_batch_size]
    if not rec.recommended.num_speculative_tokens:
        out.insert(0, RUN_WITHOUT)
    return out


def assumptions(rec: Recommendation) -> list[str]:
    """What each method's fit rests on (sorted, each once)."""
    out: list[str] = []
    for m in rec.methods:
        name = m.method or "unknown method"
        if not m.timed:
            out.append(
                f"{name}: no step timing in the input, speedups use the per-position Leviathan formula with "
                f"{m.cost_ratio_source}"
            )
        else:
            out += [f"{name}: {note}" for note in m.model_notes]
            if m.plain_measured:
                out.append(
                    f"{name}: speedups are against a plain engine (no speculative config) measured in a separate "
                    "engine process; separate processes of one configuration can differ by 20–40% on shared machines"
                )
        if m.drafts_per_request_step < 0.999:
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
    "data_parallel_size": "data parallel size", "dtype": "dtype", "kv_cache_dtype": "KV-cache dtype",
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
    if steps is not None and abs(steps - 1) >= 0.005:
        timing = f"; steps took {abs(steps - 1):.0%} {'longer' if steps > 1 else 'less time'}"
    return f" {_capital(_acceptance_sentence(la, lb, test))}{timing}."


def verdict(cmp: Comparison) -> str:
    """The comparison's one-paragraph verdict; ``cmp.kind`` (``tuning.compare``) decides what it says."""
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
                f"; verified {_gain(v.gain_vs_best_static, v.gain_vs_best_static_low, v.gain_vs_best_static_high)} "
                f"vs the best static k={v.best_static_num_speculative_tokens}"
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
    return (
        f"{what}; verified {_gain(v.gain_vs_plain, v.gain_vs_plain_low, v.gain_vs_plain_high)} vs plain decoding and "
        f"{_gain(v.gain_vs_best_static, v.gain_vs_best_static_low, v.gain_vs_best_static_high)} vs the best static "
        f"k={v.best_static_num_speculative_tokens}."
    )


def tune_notes(result: TuneResult) -> list[str]:
    """How far the numbers can be trusted: noise, undecided races, idle engines, time spent."""
    n = result.noise
    out = [
        f"{n.rounds} race round(s); a candidate's tokens/s varied {n.round_to_round:.1%} (median relative "
        "standard deviation) from round to round, so candidates were compared round by round (paired)."
    ]
    undecided = [b.measured_batch_size for b in result.buckets if b.basis == "measured" and not b.decided]
    if undecided:
        sizes = ", ".join(str(b) for b in undecided)
        out.append(
            f"Batch size {sizes}: the race ended (budget or round limit) before it could separate the leading "
            "candidates, so the best static k was kept where it was still in the race (else the fastest on "
            "average); a longer --budget narrows this."
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
            out.append(f"k={d.to_k} at {where} since {_clock(d.ts)} UTC: rolled back ({d.reason}).")
            continue
        start = applied.get(key, d)
        text = f"k={d.to_k} at {where} since {_clock(start.ts)} UTC"
        if start.predicted_gain is not None and start.predicted_low is not None and start.predicted_high is not None:
            text += f": {_gain(start.predicted_gain, start.predicted_low, start.predicted_high)} predicted"
        if d.action == "confirm" and d.measured_gain is not None:
            text += f", {d.measured_gain:+.1%} measured after the switch"
        out.append(text + ".")
    out += [f"Online tuning off: {d.reason}." for d in decisions if d.action == "refuse"]
    return out


METADATA_HEADERS = ("run · engine", "vLLM", "device", "attention (target / drafter)", "graphs", "TP · DP",
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
            f"{text(m.tensor_parallel_size)} · {text(m.data_parallel_size)}",
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
                     f"{d.from_k} → {d.to_k}", predicted, measured, d.reason])  # fmt: skip
    return rows
