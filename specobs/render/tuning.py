"""Render recommendations and comparisons as rich tables or Markdown. No math here."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from specobs.render.markdown import md_table
from specobs.render.sentences import (
    batch_range,
    config_check_note,
    config_values,
    config_warning,
    environment_name,
    headline,
    speedup_with_interval,
    tune_headline,
    tune_notes,
)
from specobs.results import Comparison, Recommendation, TuneResult


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


def recommendation_to_rich(rec: Recommendation, console: Console) -> None:
    console.print(Text(headline(rec), style="bold"))
    r = rec.recommended
    if r.speculative_config:
        warning = config_warning(r)
        if warning:  # the config alone, not a flag to paste
            console.print(Text(warning, style="bold yellow"))
            console.print(Text(r.speculative_config))
        else:
            console.print(Text("--speculative-config '" + r.speculative_config + "'"))
        note = config_check_note(r)
        if note:
            console.print(Text(note, style="dim"))
    table = Table(title=f"By batch size ({rec.method or 'unknown method'})", title_justify="left", show_edge=False)
    for header in BY_BATCH_HEADERS:
        table.add_column(header, justify="left" if header == "batch" else "right")
    for cells in recommendation_rows(rec):
        table.add_row(*cells)
    console.print(table)
    if rec.method_comparison:
        methods = list(rec.method_comparison[0].speedups)
        cmp_table = Table(title="Best speedup per method", title_justify="left", show_edge=False)
        cmp_table.add_column("batch")
        for m in methods:
            cmp_table.add_column(m, justify="right")
        cmp_table.add_column("winner")
        for row in rec.method_comparison:
            cells = [_fmt(row.speedups.get(m), "{:.2f}×") for m in methods]
            cmp_table.add_row(batch_range(row.batch_size_min, row.batch_size_max), *cells, str(row.winner))
        console.print(cmp_table)
    for line in rec.explanations:
        console.print(Text(f"• {line}"))
    if rec.assumptions:
        console.print(Text("Assumptions", style="dim"))
        for line in rec.assumptions:
            console.print(Text(f"  - {line}", style="dim"))


def recommendation_to_markdown(rec: Recommendation) -> str:
    parts = [f"**{headline(rec)}**", ""]
    r = rec.recommended
    if r.speculative_config:
        warning = config_warning(r)
        if warning:  # the config alone, not a flag to paste
            parts += [f"**{warning}**", "", "```json", r.speculative_config, "```", ""]
        else:
            parts += ["```", "--speculative-config '" + r.speculative_config + "'", "```", ""]
        note = config_check_note(r)
        if note:
            parts += [note, ""]
    parts += md_table(BY_BATCH_HEADERS, recommendation_rows(rec))
    parts += [""] + [f"- {line}" for line in rec.explanations]
    if rec.assumptions:
        parts += ["", "Assumptions:", ""] + [f"- {line}" for line in rec.assumptions]
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
    console.print(Text(cmp.verdict, style=style.get(cmp.kind, "bold")))
    table = Table(show_edge=False)
    table.add_column("")
    table.add_column(f"A: {names[0]}", justify="right")
    table.add_column(f"B: {names[1]}", justify="right")
    for row in _comparison_rows(cmp):
        table.add_row(*row)
    console.print(table)
    for note in _comparison_notes(cmp):
        console.print(Text(note, style="dim"))
    rows = _throughput_rows(cmp)
    if rows:
        by_bucket = Table(title="Throughput at matched batch sizes (steady-state steps)", title_justify="left",
                          show_edge=False)  # fmt: skip
        for header in THROUGHPUT_HEADERS:
            by_bucket.add_column(header, justify="left" if header == "batch" else "right")
        for cells in rows:
            by_bucket.add_row(*cells)
        console.print(by_bucket)
        console.print(Text(_combined(cmp), style="dim"))


def comparison_to_markdown(cmp: Comparison, names: tuple[str, str]) -> str:
    parts = [f"**{cmp.verdict}**", ""]
    parts += md_table(["", f"A: {names[0]}", f"B: {names[1]}"], _comparison_rows(cmp))
    notes = _comparison_notes(cmp)
    if notes:
        parts += [""] + [f"{note}" for note in notes]
    rows = _throughput_rows(cmp)
    if rows:
        parts += ["", "Throughput at matched batch sizes (steady-state steps):", ""]
        parts += [*md_table(THROUGHPUT_HEADERS, rows), "", _combined(cmp)]
    return "\n".join(parts) + "\n"


# --- specobs tune ---------------------------------------------------------------------------------

TUNE_BUCKET_HEADERS = ("batch", "k", "basis", "measured at", "tokens/s")
TUNE_MEASUREMENT_HEADERS = ("batch", "engine", "k", "tokens/s", "95%", "rounds", "race")
TUNE_VERIFY_HEADERS = ("configuration", "tokens/s", "gain of the chosen config [95%]")


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
        rows.append([str(m.batch_size), m.engine, k, f"{m.tokens_per_second:,.0f}",
                     f"{m.low:,.0f}–{m.high:,.0f}", str(m.rounds), status])  # fmt: skip
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


def _table(title: str, headers: tuple[str, ...], rows: list[list[str]]) -> Table:
    table = Table(title=title, title_justify="left", show_edge=False)
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i == 0 else "right")
    for cells in rows:
        table.add_row(*cells)
    return table


def tune_to_rich(result: TuneResult, console: Console) -> None:
    console.print(Text(tune_headline(result), style="bold"))
    if result.speculative_config:
        console.print(Text("--speculative-config '" + result.speculative_config + "'"))
    console.print(_table("Schedule by batch size", TUNE_BUCKET_HEADERS, tune_bucket_rows(result)))
    console.print(_table("Measured (generated tokens/s per round, 95% t interval)", TUNE_MEASUREMENT_HEADERS,
                         tune_measurement_rows(result)))  # fmt: skip
    v = result.verification
    if v is not None:
        console.print(_table(f"Verification: {v.workload}, {v.rounds} interleaved round(s)", TUNE_VERIFY_HEADERS,
                             tune_verification_rows(result)))  # fmt: skip
    for line in tune_notes(result):
        console.print(Text(f"• {line}"))


def tune_to_markdown(result: TuneResult) -> str:
    parts = [f"**{tune_headline(result)}**", ""]
    if result.speculative_config:
        parts += ["```", "--speculative-config '" + result.speculative_config + "'", "```", ""]
    parts += ["Schedule by batch size:", "", *md_table(TUNE_BUCKET_HEADERS, tune_bucket_rows(result))]
    parts += ["", "Measured (generated tokens/s per round, 95% t interval):", ""]
    parts += md_table(TUNE_MEASUREMENT_HEADERS, tune_measurement_rows(result))
    v = result.verification
    if v is not None:
        parts += ["", f"Verification: {v.workload}, {v.rounds} interleaved round(s):", ""]
        parts += md_table(TUNE_VERIFY_HEADERS, tune_verification_rows(result))
    parts += [""] + [f"- {line}" for line in tune_notes(result)]
    return "\n".join(parts) + "\n"
