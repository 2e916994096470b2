"""Render recommendations and comparisons as rich tables, Markdown or JSON. No math here."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from specobs.tuning.compare import Comparison
from specobs.tuning.recommend import Recommendation


def _fmt(value: Any, fmt: str = "{:.2f}") -> str:
    return "–" if value is None else fmt.format(value)


def _interval(value: float | None, interval: list[float] | None) -> str:
    if value is None:
        return "–"
    if not interval:
        return f"{value:.2f}×"
    return f"{value:.2f}× [{interval[0]:.2f}–{interval[1]:.2f}]"


def _batch(row: dict) -> str:
    low, high = row["batch_size_min"], row["batch_size_max"]
    return str(low) if low == high else f"{low}–{high}"


def recommendation_rows(rec: Recommendation) -> list[list[str]]:
    return [
        [
            _batch(r),
            "off" if r["num_speculative_tokens"] == 0 else str(r["num_speculative_tokens"]),
            _interval(r["predicted_speedup"], r["interval"]),
            r.get("basis") or "model",
            str(r["measured_steps"]),
        ]
        for r in rec.by_batch_size
    ]


BY_BATCH_HEADERS = ("batch", "k", "speedup [95%]", "basis", "traffic steps")


def headline(rec: Recommendation) -> str:
    """One sentence naming exactly the config printed beneath it, with that config's own prediction."""
    r = rec.recommended
    estimated = ""
    if r.get("baseline") not in (None, "plain engine"):
        estimated = "no plain engine in the input: baseline estimated"
    if not r["num_speculative_tokens"]:
        note = f"; {estimated}" if estimated else ""
        return f"Recommendation: run without speculative decoding (no speculative config{note})."
    name = r["method"] or "speculative decoding"
    if r.get("schedule"):
        ranges = ", ".join(
            f"{_batch({'batch_size_min': low, 'batch_size_max': high})}: {'off' if k == 0 else f'k={k}'}"
            for low, high, k in r["schedule"]
        )
        what = f"{name} with a batch-size schedule ({ranges})"
    else:
        what = f"{name} with k={r['num_speculative_tokens']}"
    text = f"Recommendation: {what}, predicted {_interval(r['predicted_speedup'], r['interval'])} plain decoding"
    text += " on this traffic" + (f" ({estimated})" if estimated else "") + "."
    if not r["method"]:
        text += " The input has no method label (vLLM's counters carry none): pass --method to get a ready config."
    return text


def recommendation_to_rich(rec: Recommendation, console: Console) -> None:
    console.print(Text(headline(rec), style="bold"))
    if rec.recommended.get("speculative_config"):
        console.print(Text("--speculative-config '" + rec.recommended["speculative_config"] + "'"))
    method = rec.by_batch_size[0]["method"] if rec.by_batch_size else None
    table = Table(title=f"By batch size ({method or 'unknown method'})", title_justify="left", show_edge=False)
    for header in BY_BATCH_HEADERS:
        table.add_column(header, justify="left" if header == "batch" else "right")
    for cells in recommendation_rows(rec):
        table.add_row(*cells)
    console.print(table)
    if rec.comparison:
        methods = list(rec.comparison[0]["speedups"])
        cmp_table = Table(title="Best speedup per method", title_justify="left", show_edge=False)
        cmp_table.add_column("batch")
        for m in methods:
            cmp_table.add_column(m, justify="right")
        cmp_table.add_column("winner")
        for row in rec.comparison:
            cmp_table.add_row(_batch(row), *[_fmt(row["speedups"].get(m), "{:.2f}×") for m in methods], row["winner"])
        console.print(cmp_table)
    for line in rec.explanations:
        console.print(Text(f"• {line}"))
    if rec.assumptions:
        console.print(Text("Assumptions", style="dim"))
        for line in rec.assumptions:
            console.print(Text(f"  - {line}", style="dim"))


def recommendation_to_markdown(rec: Recommendation) -> str:
    parts = [f"**{headline(rec)}**", ""]
    if rec.recommended.get("speculative_config"):
        parts += ["```", "--speculative-config '" + rec.recommended["speculative_config"] + "'", "```", ""]
    parts.append("| " + " | ".join(BY_BATCH_HEADERS) + " |")
    parts.append("|" + "|".join("---" for _ in BY_BATCH_HEADERS) + "|")
    parts += ["| " + " | ".join(row) + " |" for row in recommendation_rows(rec)]
    parts += [""] + [f"- {line}" for line in rec.explanations]
    if rec.assumptions:
        parts += ["", "Assumptions:", ""] + [f"- {line}" for line in rec.assumptions]
    return "\n".join(parts) + "\n"


def recommendation_to_json(rec: Recommendation) -> str:
    return json.dumps(rec.to_dict(), indent=2, allow_nan=False)


def _config_value(values: Any) -> str:
    if isinstance(values, dict):
        return ", ".join(f"{bucket}: {_config_value(ks)}" for bucket, ks in values.items()) or "–"
    return "/".join(str(v) for v in values) if values else "–"


def comparison_to_rich(cmp: Comparison, console: Console, names: tuple[str, str]) -> None:
    style = {"regression": "bold red", "improvement": "bold green", "configuration_changed": "bold yellow"}
    console.print(Text(cmp.verdict, style=style.get(cmp.kind, "bold")))
    table = Table(show_edge=False)
    table.add_column("")
    table.add_column(f"A: {names[0]}", justify="right")
    table.add_column(f"B: {names[1]}", justify="right")
    ca, cb = cmp.configuration.get("a") or {}, cmp.configuration.get("b") or {}
    differing = {d["field"] for d in cmp.configuration.get("differences", [])}
    for label, key in (("method", "method"), ("draft model", "draft_model"), ("k", "num_spec_tokens")):
        mark = " *" if key in differing else ""
        table.add_row(f"{label}{mark}", _config_value(ca.get(key)), _config_value(cb.get(key)))
    if "schedule" in differing:
        table.add_row("schedule *", _config_value(ca.get("schedule")), _config_value(cb.get("schedule")))
    for label, key, fmt in (
        ("acceptance length", "mean_acceptance_length", "{:.2f}"),
        ("  standard error", "mean_acceptance_length_se", "{:.3f}"),
        ("draft acceptance rate", "draft_acceptance_rate", "{:.1%}"),
        ("drafts", "num_drafts", "{:,}"),
    ):
        table.add_row(label, _fmt(cmp.a.get(key), fmt), _fmt(cmp.b.get(key), fmt))
    for p in cmp.positions:
        mark = " *" if p["changed"] else ""
        table.add_row(f"r_{p['position']}{mark}", _fmt(p["a"], "{:.3f}"), _fmt(p["b"], "{:.3f}"))
    ta, tb = cmp.timing.get("a") or {}, cmp.timing.get("b") or {}
    for label, key, scale in (
        ("draft ms / step", "mean_draft_seconds", 1000),
        ("verify ms / step", "mean_verify_seconds", 1000),
        ("step ms", "mean_step_seconds", 1000),
        ("tokens/s (step time)", "generated_tokens_per_second", 1),
    ):
        if ta.get(key) is not None or tb.get(key) is not None:
            va = None if ta.get(key) is None else ta[key] * scale
            vb = None if tb.get(key) is None else tb[key] * scale
            table.add_row(label, _fmt(va), _fmt(vb))
    console.print(table)
    notes = []
    if differing:
        notes.append("* configuration differs between A and B")
    if any(p["changed"] for p in cmp.positions):
        notes.append("* per-position rate changed beyond both 95% intervals")
    for note in notes:
        console.print(Text(note, style="dim"))
    tp = cmp.throughput
    if tp and tp.get("buckets"):
        by_bucket = Table(title="Throughput at matched batch sizes (steady-state steps)", title_justify="left",
                          show_edge=False)  # fmt: skip
        for header in ("batch", "A tokens/s", "B tokens/s", "B/A", "steps A/B", "runs A/B"):
            by_bucket.add_column(header, justify="left" if header == "batch" else "right")
        for row in tp["buckets"]:
            runs = f"{row['runs_a']}/{row['runs_b']}" + ("" if row["tested"] else " (untested)")
            by_bucket.add_row(
                row["batch_bucket"] or "–",
                _fmt(row["tokens_per_second_a"], "{:,.0f}"),
                _fmt(row["tokens_per_second_b"], "{:,.0f}"),
                _fmt(row["ratio"], "{:.2f}×"),
                f"{row['steps_a']:,}/{row['steps_b']:,}",
                runs,
            )
        console.print(by_bucket)
        combined = _interval(tp.get("ratio"), [tp["low"], tp["high"]] if tp.get("low") is not None else None)
        console.print(Text(f"B/A combined (steps-weighted): {combined}; {tp['interval']}", style="dim"))


def comparison_to_json(cmp: Comparison) -> str:
    return json.dumps(cmp.to_dict(), indent=2, allow_nan=False)
