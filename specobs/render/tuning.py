"""Render recommendations and comparisons as rich tables or Markdown. No math here."""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from specobs.dimensions import method_label
from specobs.records import (
    Comparison,
    LoadAdvice,
    LoadRecommendation,
    Recommendation,
    Recommended,
    SpeedupBand,
    TuneResult,
)
from specobs.render import sentences
from specobs.render.fit import PADDING, TEXT_FLOOR, Col, cols, print_table, shorten_path
from specobs.render.markdown import md_table
from specobs.render.sentences import (
    band_range,
    batch_range,
    config_check_note,
    config_values,
    config_warning,
    environment_name,
    headline,
    ran_config_line,
    speculative_config_line,
    speedup_with_interval,
    tune_headline,
    tune_notes,
)
from specobs.render.split_table import split_to_markdown, split_to_rich


def _fmt(value: float | int | None, fmt: str = "{:.2f}") -> str:
    return "–" if value is None else fmt.format(value)


def recommendation_rows(rec: Recommendation) -> list[list[str]]:
    return [
        [
            batch_range(r.batch_size_min, r.batch_size_max),
            "off" if r.num_speculative_tokens == 0 else str(r.num_speculative_tokens),
            speedup_with_interval(r.predicted_speedup, r.interval),
            r.basis or "model",
            str(r.measured_steps),
        ]
        for r in rec.by_batch_size
    ]


BY_BATCH_HEADERS = ("batch", "k", "speedup [95%]", "basis", "traffic steps")
BAND_HEADERS = ("k", "tokens per draft [95%]", "speedup (modelled)", "")
BAND_COLS = (Col("k"), Col("tokens per draft [95%]"), Col("speedup (modelled)"), Col("", 1, "text"))


def band_rows(band: SpeedupBand) -> list[list[str]]:
    """One row per k: tokens per draft and the modelled band (``compute-bound–memory-bound``)."""
    rows = []
    for row in band.by_k:
        k = row.num_speculative_tokens
        notes = []
        if k == band.ran_k:
            notes.append("as run")
        if k and k == band.best_k_memory_bound:
            notes.append("best if memory-bound")
        if k and k == band.best_k_compute_bound:
            notes.append("best if compute-bound")
        if row.extrapolated:
            notes.append("extrapolated")
        tokens = (
            f"{row.tokens_per_draft:.2f} [{row.tokens_per_draft_low:.2f}–{row.tokens_per_draft_high:.2f}]"
            if k
            else "1 (no drafting)"
        )
        speed = band_range(row.speedup_low, row.speedup_high) if k else "1× (plain)"
        rows.append([str(k), tokens, speed, ", ".join(notes)])
    return rows


def band_title(band: SpeedupBand) -> str:
    return f"Not measured: {method_label(band.method, band.draft_model, 'unknown method')}, modelled band per k"


BY_BATCH_COLS = (Col("batch", justify="left"), Col("k"), Col("speedup [95%]"), Col("basis", 1, "text", "right"),
                 Col("traffic steps", 2))  # fmt: skip


def _config_to_rich(r: Recommended, console: Console) -> None:
    """The config on one line (to copy whole), or, when it is not ready, why and the bare JSON."""
    if not r.speculative_config:
        return
    warning = config_warning(r)
    if warning:  # the config alone, not a flag to paste
        console.print(Text(warning, style="bold yellow"))
        console.print(Text(r.speculative_config), soft_wrap=True)
    else:
        console.print(Text(speculative_config_line(r.speculative_config)), soft_wrap=True)
    note = config_check_note(r)
    if note:
        console.print(Text(note, style="dim"))


def recommendation_to_rich(rec: Recommendation, console: Console) -> None:
    console.print(Text(headline(rec), style="bold"))
    _config_to_rich(rec.recommended, console)
    if rec.by_batch_size:
        print_table(
            console, BY_BATCH_COLS, recommendation_rows(rec), f"By batch size ({rec.method or 'unknown method'})"
        )
    for band in rec.bands:
        print_table(console, BAND_COLS, band_rows(band), band_title(band))
        if line := ran_config_line(band):
            console.print(Text(line), soft_wrap=True)
    if rec.method_comparison:
        methods = list(rec.method_comparison[0].speedups)
        # A narrow console leaves out the methods listed last first; the winner column stays.
        columns = [Col("batch", justify="left"), *(Col(m, 1 + i) for i, m in enumerate(methods)),
                   Col("winner", 0, "text")]  # fmt: skip
        rows = [
            [batch_range(row.batch_size_min, row.batch_size_max),
             *(_fmt(row.speedups.get(m), "{:.2f}×") for m in methods), str(row.winner)]
            for row in rec.method_comparison
        ]  # fmt: skip
        print_table(console, columns, rows, "Best speedup per method")
    for line in sentences.explanations(rec):
        console.print(Text(f"• {line}"))
    if rec.by_context is not None:  # the table where the best k moves with context beyond noise
        split_to_rich(rec.by_context, console, table=rec.by_context.best_k_differs)
    if sentences.assumptions(rec):
        console.print(Text("Assumptions", style="dim"))
        for line in sentences.assumptions(rec):
            console.print(Text(f"  - {line}", style="dim"))


#: The table of advice under load: one row per configuration.
LOAD_HEADERS = ("configuration", "k", "verdict", "stops paying near [95%]", "draft up to batch",
                "crossover batch [to]", "batch from")  # fmt: skip
LOAD_COLS = [Col("configuration", 0, "text"), Col("k", 2), Col("verdict", 0, "text"),
             Col("stops paying near [95%]", 1, "text"), Col("draft up to batch", 0),
             Col("crossover batch [to]", 3, "text"), Col("batch from", 4, "text")]  # fmt: skip
VERDICTS = {
    "switch_off_above": "switch off above",
    "speculate": "speculate (paid at every level)",
    "plain": "plain (never paid)",
    "not_shown": "not shown (noise)",
}


def _bounded(value: float | int | None, low: float | int | None, high: float | int | None) -> str:
    if value is None:
        return "–"
    return f"{value:.3g} [{'≤' if low is None else f'{low:.3g}'}–{'…' if high is None else f'{high:.3g}'}]"


def load_rows(advice: tuple[LoadAdvice, ...]) -> list[list[str]]:
    return [
        [str(a.config), _fmt(a.num_speculative_tokens, "{}"), VERDICTS.get(a.verdict, a.verdict),
         _bounded(a.stops_paying_at, a.stops_paying_low, a.stops_paying_high),
         _fmt(a.draft_up_to, "{}"),
         "–" if a.crossover_batch is None else f"{a.crossover_batch} [to {_fmt(a.crossover_batch_high, '{}')}]",
         a.batch_from or "–"]
        for a in advice
    ]  # fmt: skip


def load_recommendation_to_rich(rec: LoadRecommendation, console: Console) -> None:
    console.print(Text(sentences.load_headline(rec), style="bold"))
    print_table(console, LOAD_COLS, load_rows(rec.under_load), "Where to draft under load (measured crossovers)")
    for line in sentences.load_explanations(rec):
        console.print(Text(f"• {line}"), soft_wrap=True)


def load_recommendation_to_markdown(rec: LoadRecommendation) -> str:
    parts = [f"**{sentences.load_headline(rec)}**", "", *md_table(LOAD_HEADERS, load_rows(rec.under_load)), ""]
    parts += [f"- {line}" for line in sentences.load_explanations(rec)]
    return "\n".join(parts) + "\n"


def recommendation_to_markdown(rec: Recommendation) -> str:
    parts = [f"**{headline(rec)}**", ""]
    r = rec.recommended
    if r.speculative_config:
        warning = config_warning(r)
        if warning:  # the config alone, not a flag to paste
            parts += [f"**{warning}**", "", "```json", r.speculative_config, "```", ""]
        else:
            parts += ["```", speculative_config_line(r.speculative_config), "```", ""]
        note = config_check_note(r)
        if note:
            parts += [note, ""]
    if rec.by_batch_size:
        parts += md_table(BY_BATCH_HEADERS, recommendation_rows(rec))
    for band in rec.bands:
        parts += ["", f"{band_title(band)}:", "", *md_table(BAND_HEADERS, band_rows(band))]
        if line := ran_config_line(band):
            parts += ["", line]
    parts += [""] + [f"- {line}" for line in sentences.explanations(rec)]
    if rec.by_context is not None:
        parts += split_to_markdown(rec.by_context, table=rec.by_context.best_k_differs)
    if sentences.assumptions(rec):
        parts += ["", "Assumptions:", ""] + [f"- {line}" for line in sentences.assumptions(rec)]
    return "\n".join(parts) + "\n"


def _comparison_rows(cmp: Comparison) -> list[list[str]]:
    """``[label, A, B]`` rows: configuration (``*`` where it differs), acceptance, positions, timing."""
    ca, cb = cmp.configuration.a, cmp.configuration.b
    differing = {d.field for d in cmp.configuration.differences}
    rows = []
    for label, key in (("method", "method"), ("draft model", "draft_model"), ("k", "num_spec_tokens")):
        mark = " *" if key in differing else ""
        rows.append([f"{label}{mark}", config_values(getattr(ca, key)), config_values(getattr(cb, key))])
    if "schedule" in differing:
        rows.append(["schedule *", config_values(ca.schedule), config_values(cb.schedule)])
    for d in cmp.configuration.environment:
        rows.append([f"{environment_name(d.field)} *", config_values(d.a), config_values(d.b)])
    a, b = cmp.a, cmp.b
    rows += [
        ["acceptance length", _fmt(a.mean_acceptance_length), _fmt(b.mean_acceptance_length)],
        ["  standard error", _fmt(a.mean_acceptance_length_se, "{:.3f}"), _fmt(b.mean_acceptance_length_se, "{:.3f}")],
        ["draft acceptance rate", _fmt(a.draft_acceptance_rate, "{:.1%}"), _fmt(b.draft_acceptance_rate, "{:.1%}")],
        ["drafts", _fmt(a.num_drafts, "{:,}"), _fmt(b.num_drafts, "{:,}")],
    ]
    for p in cmp.positions:
        rows.append([f"r_{p.position}{' *' if p.changed else ''}", _fmt(p.a, "{:.3f}"), _fmt(p.b, "{:.3f}")])
    ta, tb = cmp.timing_a, cmp.timing_b
    for label, key, scale in (
        ("draft ms / step", "mean_draft_seconds", 1000),
        ("verify ms / step", "mean_verify_seconds", 1000),
        ("step ms", "mean_step_seconds", 1000),
        ("tokens/s (step time)", "generated_tokens_per_second", 1),
    ):
        va, vb = (getattr(t, key) if t is not None else None for t in (ta, tb))
        if va is not None or vb is not None:
            rows.append([label, _fmt(None if va is None else va * scale), _fmt(None if vb is None else vb * scale)])
    return rows


def _comparison_notes(cmp: Comparison) -> list[str]:
    notes = []
    if cmp.configuration.differences:
        notes.append("* configuration differs between A and B")
    if cmp.configuration.environment:
        notes.append("* A and B ran on different setups (run metadata)")
    if any(p.changed for p in cmp.positions):
        notes.append("* per-position rate changed beyond both 95% intervals")
    return notes


THROUGHPUT_HEADERS = ("batch", "A tokens/s", "B tokens/s", "B/A", "steps A/B", "runs A/B")
THROUGHPUT_COLS = (Col("batch", justify="left"), *cols(THROUGHPUT_HEADERS[1:5], (0, 0, 0, 2)),
                   Col("runs A/B", 3, "text", "right"))  # fmt: skip


def _throughput_rows(cmp: Comparison) -> list[list[str]]:
    tp = cmp.throughput
    if tp is None:
        return []
    return [
        [
            row.batch_bucket or "–",
            _fmt(row.tokens_per_second_a, "{:,.0f}"),
            _fmt(row.tokens_per_second_b, "{:,.0f}"),
            _fmt(row.ratio, "{:.2f}×"),
            f"{row.steps_a:,}/{row.steps_b:,}",
            f"{row.runs_a}/{row.runs_b}" + ("" if row.tested else " (untested)"),
        ]
        for row in tp.buckets
    ]


def _combined(cmp: Comparison) -> str:
    tp = cmp.throughput
    assert tp is not None
    interval = (tp.low, tp.high) if tp.low is not None and tp.high is not None else None
    return f"B/A combined (steps-weighted): {speedup_with_interval(tp.ratio, interval)}; {tp.interval}"


def comparison_to_rich(cmp: Comparison, console: Console, names: tuple[str, str]) -> None:
    style = {"regression": "bold red", "improvement": "bold green", "configuration_changed": "bold yellow"}
    console.print(Text(sentences.verdict(cmp), style=style.get(cmp.kind, "bold")))
    # Each side is headed by its name, shortened from the left; where even its file name would not
    # fit a narrow console beside the labels, the headers say A and B and a line above names them.
    room = (console.width - 3 * PADDING - 2 - TEXT_FLOOR) // 2
    shown = [shorten_path(name, room - 3) for name in names]
    if any(cell_len(name) + 3 > room for name in shown):
        for side, name in zip("AB", names, strict=True):
            console.print(Text(f"{side}: {shorten_path(name, console.width - 3)}", style="dim"))
        headers = ["A", "B"]
    else:
        headers = [f"{side}: {name}" for side, name in zip("AB", shown, strict=True)]
    columns = [Col("", 0, "text"), *(Col(h, 0, "text", "right") for h in headers)]
    print_table(console, columns, _comparison_rows(cmp))
    for note in _comparison_notes(cmp):
        console.print(Text(note, style="dim"))
    rows = _throughput_rows(cmp)
    if rows:
        print_table(console, THROUGHPUT_COLS, rows, "Throughput at matched batch sizes (steady-state steps)")
        console.print(Text(_combined(cmp), style="dim"))
    for side, own in zip(headers, (cmp.own_a, cmp.own_b), strict=True):
        if own is not None and any(r.speedup is not None or r.pitfalls for r in own.rows):
            console.print(Text(side, style="bold"))
            split_to_rich(own, console)


def comparison_to_markdown(cmp: Comparison, names: tuple[str, str]) -> str:
    parts = [f"**{sentences.verdict(cmp)}**", ""]
    parts += md_table(["", f"A: {names[0]}", f"B: {names[1]}"], _comparison_rows(cmp))
    notes = _comparison_notes(cmp)
    if notes:
        parts += [""] + [f"{note}" for note in notes]
    rows = _throughput_rows(cmp)
    if rows:
        parts += ["", "Throughput at matched batch sizes (steady-state steps):", ""]
        parts += [*md_table(THROUGHPUT_HEADERS, rows), "", _combined(cmp)]
    for side, own in zip(("A", "B"), (cmp.own_a, cmp.own_b), strict=True):
        if own is not None and any(r.speedup is not None or r.pitfalls for r in own.rows):
            parts += ["", f"**{side}**", *split_to_markdown(own)]
    return "\n".join(parts) + "\n"


# --- specobs tune ---------------------------------------------------------------------------------

TUNE_BUCKET_HEADERS = ("batch", "k", "basis", "measured at", "tokens/s")
TUNE_MEASUREMENT_HEADERS = ("batch", "engine", "k", "tokens/s", "95%", "steps", "vs leader [per look]", "race")
TUNE_VERIFY_HEADERS = ("configuration", "tokens/s", "gain of the chosen config [95%]")
TUNE_BUCKET_COLS = (Col("batch", justify="left"), Col("k"), Col("basis", 1, "text", "right"), Col("measured at", 2),
                    Col("tokens/s"))  # fmt: skip
TUNE_MEASUREMENT_COLS = (Col("batch", justify="left"), Col("engine", 0, "text", "right"), Col("k"), Col("tokens/s"),
                         Col("95%", 1), Col("steps", 3), Col("vs leader [per look]", 2),
                         Col("race", 2, "text", "right"))  # fmt: skip
TUNE_VERIFY_COLS = (Col("configuration", 0, "text"), Col("tokens/s"), Col("gain of the chosen config [95%]"))


def _k(k: int) -> str:
    return "off" if k == 0 else str(k)


def tune_bucket_rows(result: TuneResult) -> list[list[str]]:
    return [
        [batch_range(b.batch_size_min, b.batch_size_max), _k(b.num_speculative_tokens), b.basis,
         _fmt(b.measured_batch_size, "{}"), _fmt(b.tokens_per_second, "{:,.0f}")]
        for b in result.buckets
    ]  # fmt: skip


def tune_measurement_rows(result: TuneResult) -> list[list[str]]:
    rows = []
    for m in result.measurements:
        status = "leader" if m.leader else "dropped" if m.eliminated else "within noise"
        k = "–" if m.engine == "plain" else str(m.num_speculative_tokens)
        vs = (
            ""
            if m.vs_leader is None
            else f"{m.vs_leader:.3f} [{_fmt(m.vs_leader_low, '{:.3f}')}–{_fmt(m.vs_leader_high, '{:.3f}')}]"
        )
        rows.append([str(m.batch_size), m.engine, k, f"{m.tokens_per_second:,.0f}",
                     f"{m.low:,.0f}–{m.high:,.0f}", f"{m.steps:,}", vs, status])  # fmt: skip
    return rows


def tune_verification_rows(result: TuneResult) -> list[list[str]]:
    v = result.verification
    if v is None:
        return []
    chosen = "chosen (plain engine)" if result.speculative_config is None else "chosen schedule"
    rows = [
        [chosen, f"{v.schedule_tokens_per_second:,.0f}", ""],
        [
            f"best static k={v.best_static_num_speculative_tokens}",
            f"{v.best_static_tokens_per_second:,.0f}",
            f"{v.gain_vs_best_static:+.1%} [{v.gain_vs_best_static_low:+.1%} to {v.gain_vs_best_static_high:+.1%}]",
        ],
    ]
    if result.speculative_config is not None:
        rows.append(
            [
                "plain engine",
                f"{v.plain_tokens_per_second:,.0f}",
                f"{v.gain_vs_plain:+.1%} [{v.gain_vs_plain_low:+.1%} to {v.gain_vs_plain_high:+.1%}]",
            ]
        )
    return rows  # fmt: skip


def tune_to_rich(result: TuneResult, console: Console) -> None:
    console.print(Text(tune_headline(result), style="bold"))
    if result.speculative_config:  # what tune applied and measured: always complete
        console.print(Text(speculative_config_line(result.speculative_config)), soft_wrap=True)
    print_table(console, TUNE_BUCKET_COLS, tune_bucket_rows(result), "Schedule by batch size")
    print_table(console, TUNE_MEASUREMENT_COLS, tune_measurement_rows(result),
                "Measured (generated tokens/s of counted steps, 95% interval; vs the leader, paired)")  # fmt: skip
    v = result.verification
    if v is not None:
        print_table(console, TUNE_VERIFY_COLS, tune_verification_rows(result),
                    f"Verification: {v.workload}, {v.rounds} round(s), {v.cycles} cycle(s)")  # fmt: skip
    for line in tune_notes(result):
        console.print(Text(f"• {line}"))


def tune_to_markdown(result: TuneResult) -> str:
    parts = [f"**{tune_headline(result)}**", ""]
    if result.speculative_config:
        parts += ["```", speculative_config_line(result.speculative_config), "```", ""]
    parts += ["Schedule by batch size:", "", *md_table(TUNE_BUCKET_HEADERS, tune_bucket_rows(result))]
    parts += ["", "Measured (generated tokens/s of counted steps, 95% interval; vs the leader, paired):", ""]
    parts += md_table(TUNE_MEASUREMENT_HEADERS, tune_measurement_rows(result))
    v = result.verification
    if v is not None:
        parts += ["", f"Verification: {v.workload}, {v.rounds} round(s), {v.cycles} cycle(s):", ""]
        parts += md_table(TUNE_VERIFY_HEADERS, tune_verification_rows(result))
    parts += [""] + [f"- {line}" for line in tune_notes(result)]
    return "\n".join(parts) + "\n"
