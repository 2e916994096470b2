"""Render a :class:`specobs.records.Report` as rich tables, Markdown or JSON. No math here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.text import Text

from specobs.records import FindingKind, GroupSummary, Report, RequestAcceptance, RequestGroup, Summary
from specobs.render import sentences, tuning
from specobs.render.fit import Col, Kind, cols, print_table, shorten_path
from specobs.render.markdown import md_table
from specobs.render.split_table import split_to_markdown, split_to_rich
from specobs.render.summary import first_screen

BAR_WIDTH = 20


def _num(value: object, fmt: str = "{:,}") -> str:
    return "–" if value is None else fmt.format(value)


def _interval(value: float | None, low: float | None, high: float | None, fmt: str = "{:.2f}") -> str:
    if value is None:
        return "–"
    if low is None or high is None:
        return fmt.format(value)
    return f"{fmt.format(value)} [{fmt.format(low)}–{fmt.format(high)}]"


def _bar(rate: float | None) -> str:
    if rate is None:
        return ""
    filled = round(max(0.0, min(1.0, rate)) * BAR_WIDTH)
    return "█" * filled + "·" * (BAR_WIDTH - filled)


def _label(labels: Mapping[str, Any], columns: list[str]) -> str:
    return " · ".join(str(labels.get(c)) for c in columns if labels.get(c) is not None) or "all"


def _drafted(summary: Summary) -> bool:
    return bool(summary.num_drafts or summary.num_draft_tokens)


def _shown_groups(report: Report) -> list[GroupSummary]:
    """Groups that drafted: a group without drafts (the plain engine, k=0 steps) has no
    acceptance to show; it is named in one line under the table instead."""
    return [g for g in report.groups if _drafted(g.summary)]


def _empty_groups_line(report: Report) -> str | None:
    empty = [g for g in report.groups if not _drafted(g.summary)]
    if not empty or len(report.groups) == 1:
        return None
    cols = _shown_columns(report)
    windows = sum(g.summary.num_windows or 0 for g in empty)
    names = ", ".join(" · ".join(_label_value(c, g.labels.get(c)) for c in cols) for g in empty[:8])
    names += ", …" if len(empty) > 8 else ""
    return f"Not shown: {len(empty):,} group(s) without drafts ({windows:,} windows): {names}"


def _unrecorded_line(report: Report) -> str | None:
    if not report.unrecorded:
        return None
    why = " Context length comes only from specobs's capture (vLLM's logs and metrics do not carry it)."
    return f"Not recorded in these inputs: {', '.join(report.unrecorded)} (unknown in every group, shown as –)." + (
        why if "context" in report.unrecorded else ""
    )


def _label_value(column: str, value: object) -> str:
    """A group label in a sentence: a source by its file name (the Inputs table has the path)."""
    return shorten_path(_num(value, "{}"), 1) if column == "source" else _num(value, "{}")


def _shown_columns(report: Report) -> list[str]:
    """Group columns with at least one known value (an all-null column says nothing)."""
    return [c for c in report.group_columns if any(g.labels.get(c) is not None for g in report.groups)]


def _summary_rows(report: Report) -> list[tuple[list[str], Summary]]:
    """``(group label cells, summary)`` for every group that drafted, plus the overall row when
    the input has several groups."""
    cols = _shown_columns(report)
    # No label tells the groups apart (one group, labels unknown): the "group" column says "all".
    rows = [([_num(g.labels.get(c), "{}") for c in cols] or ["all"], g.summary) for g in _shown_groups(report)]
    if len(report.groups) != 1:
        rows.append((["all"] + [""] * (len(cols) - 1) if cols else ["all"], report.summary))
    return rows


#: Friendlier headers for group columns.
DISPLAY = {"num_spec_tokens": "k", "batch_bucket": "batch", "run_id": "run"}


def _summary_headers(report: Report) -> list[str]:
    measures = [h for h in MEASURE_HEADERS if h != "k" or not _grouped_by_k(report)]
    return [DISPLAY.get(c, c) for c in _shown_columns(report) or ["group"]] + measures


def _grouped_by_k(report: Report) -> bool:
    """When k is a group column, its measure column would repeat it."""
    return "num_spec_tokens" in _shown_columns(report)


MEASURE_HEADERS = ("windows", "k", "drafts", "drafted", "accepted", "acceptance length [95%]", "accept rate")
#: Which measure a narrow console leaves out first (the largest number; 0: never).
MEASURE_PRIORITY = (6, 2, 4, 5, 3, 0, 1)
#: How group label columns are laid out on a narrow console (text wraps; a path keeps its end).
LABEL_KINDS: dict[str, Kind] = {"source": "path", "run_id": "path", "num_spec_tokens": "number",
                                "batch_bucket": "number", "batch_size": "number", "engine": "number"}  # fmt: skip


#: Label columns a narrow console leaves out first, when the others still tell the rows apart.
LABEL_DROP_ORDER = ("source", "run_id", "engine", "hour")


def _label_cols(columns: list[str], rows: list[list[str]], also: Sequence[int] = ()) -> list[Col]:
    """The group label columns (the first cells of ``rows``). A label the same in every row
    (the overall row aside) is left out first on a narrow console; then, while the remaining
    labels (and the cells at ``also``) still tell every row apart, the source, run, engine,
    hour and the others from the last; a label that tells rows apart stays."""
    groups = rows[:-1] if len(rows) > 1 and rows[-1][:1] == ["all"] else rows
    kept = list(range(len(columns)))

    def distinct(indices: list[int]) -> bool:
        keys = {tuple(row[i] for i in [*indices, *also]) for row in groups}
        return len(keys) == len(groups)

    order = sorted(range(len(columns)), key=lambda i: (
        columns[i] not in LABEL_DROP_ORDER, LABEL_DROP_ORDER.index(columns[i]) if columns[i] in LABEL_DROP_ORDER else -i
    ))  # fmt: skip
    priority = dict.fromkeys(range(len(columns)), 0)
    for i in range(len(columns)):
        if len({row[i] for row in groups}) <= 1:
            priority[i] = 9
            kept.remove(i)
    rank = 8
    for i in order:
        if i in kept and len(kept) > 1 and distinct([j for j in kept if j != i]):
            priority[i] = rank
            kept.remove(i)
            rank = max(rank - 1, 7)
    return [
        Col(DISPLAY.get(c, c), priority[i], LABEL_KINDS.get(c, "text"), justify="left") for i, c in enumerate(columns)
    ]


def _summary_cols(report: Report, rows: list[list[str]]) -> list[Col]:
    columns = _shown_columns(report)
    labels = _label_cols(columns, rows) if columns else [Col("group", 0, "text")]
    return labels + [
        Col(h, p)
        for h, p in zip(MEASURE_HEADERS, MEASURE_PRIORITY, strict=True)
        if h != "k" or not _grouped_by_k(report)
    ]


def _summary_row(label: list[str], s: Summary, *, with_k: bool = True) -> list[str]:
    derived = "*" if s.num_drafts_derived else ""
    return [
        *label,
        _num(s.num_windows),
        *([_num(s.num_spec_tokens)] if with_k else []),
        _num(s.num_drafts) + derived,
        _num(s.num_draft_tokens),
        _num(s.num_accepted_tokens),
        _interval(s.mean_acceptance_length, s.mean_acceptance_length_low, s.mean_acceptance_length_high),
        _num(s.draft_acceptance_rate, "{:.1%}"),
    ]


def _position_rows(s: Summary) -> list[list[str]]:
    return [
        [
            str(p.position),
            _interval(p.rate, p.rate_low, p.rate_high, "{:.3f}"),
            _interval(p.conditional, p.conditional_low, p.conditional_high, "{:.3f}"),
            _bar(p.rate),
        ]
        for p in s.positions
    ]


POSITION_HEADERS = ("position", "accepted share r_i [95%]", "conditional β_i [95%]", "r_i")
POSITION_COLS = (
    Col("position"), Col("accepted share r_i [95%]"), Col("conditional β_i [95%]", 2),
    Col("r_i", 3, "bar", style="cyan"),
)  # fmt: skip


def _sections(report: Report) -> list[tuple[str, Summary, list[str]]]:
    """One section per group (and the overall one when there are several): title, summary, findings."""
    cols = _shown_columns(report)
    # A request spread is said in the per-request section.
    overall = [f.text for f in sentences.report_findings(report) if f.finding.kind != FindingKind.REQUESTS]
    carried = {id(g): own for g, own in zip(report.groups, sentences.group_findings(report), strict=True)}
    sections = [(_label(g.labels, cols), g.summary, [f.text for f in carried[id(g)]]) for g in _shown_groups(report)]
    if len(report.groups) == 1 and len(sections) == 1:
        return [(sections[0][0], sections[0][1], overall)]
    return [*sections, ("all inputs", report.summary, overall)]


REQUEST_HEADERS = (
    "by", "group", "requests", "no drafts", "request-weighted", "token-weighted", "p10", "p50", "p90", "p99",
    "prompt tokens", "output tokens",
)  # fmt: skip
REQUEST_KINDS: tuple[Kind, ...] = ("text", "text", *(("number",) * 10))
REQUEST_COLS = cols(REQUEST_HEADERS, (0, 0, 1, 5, 0, 0, 3, 2, 3, 4, 6, 6), REQUEST_KINDS)
HISTOGRAM_COLS = (Col("acceptance length", justify="left"), Col("", 1, "bar", style="cyan"), Col("requests"))
#: How each grouping of the per-request summary is named in its rows.
REQUEST_GROUPS = (
    ("by_prompt_length", "prompt tokens"),
    ("by_output_length", "output tokens"),
    ("by_workload", "workload"),
    ("by_method", "method"),
)


def _request_row(kind: str, g: RequestGroup) -> list[str]:
    def length(value: float | None) -> str:
        return _num(value, "{:.2f}")

    return [
        kind,
        _num(g.label, "{}") if kind != "all" else "",
        _num(g.num_requests),
        _num(g.num_requests_without_drafts),
        length(g.request_weighted_mean_acceptance_length),
        length(g.token_weighted_mean_acceptance_length),
        length(g.p10),
        length(g.p50),
        length(g.p90),
        length(g.p99),
        _num(g.mean_prompt_tokens, "{:,.0f}"),
        _num(g.mean_output_tokens, "{:,.0f}"),
    ]


def _request_rows(r: RequestAcceptance) -> list[list[str]]:
    """The overall row, then every group of a grouping that splits the requests (more than one value)."""
    rows = [_request_row("all", r.overall)]
    for name, kind in REQUEST_GROUPS:
        groups: tuple[RequestGroup, ...] = getattr(r, name)
        if len(groups) > 1:
            rows += [_request_row(kind, g) for g in groups]
    return rows


def _request_histogram(r: RequestAcceptance) -> list[tuple[str, str, str]]:
    """(bin, bar, requests) per bin of the acceptance-length histogram."""
    most = max((b.requests for b in r.histogram), default=0)
    return [
        (
            f"{b.low:.2f}–{b.high:.2f}",
            "█" * round(BAR_WIDTH * b.requests / most) if most else "",
            f"{b.requests:,}",
        )
        for b in r.histogram
    ]


REQUEST_TITLE = "Acceptance per request (mean acceptance length of each finished request; means and percentiles)"


def _requests_to_rich(r: RequestAcceptance, findings: Sequence[sentences.Worded], console: Console) -> None:
    console.print()
    print_table(console, REQUEST_COLS, _request_rows(r), REQUEST_TITLE)
    if r.histogram:
        bins = [list(row) for row in _request_histogram(r)]
        print_table(console, HISTOGRAM_COLS, bins, "Requests by acceptance length")
    for finding in findings:
        console.print(Text(f"• {finding.text}"))


def _requests_to_markdown(r: RequestAcceptance, findings: Sequence[sentences.Worded]) -> list[str]:
    parts = ["", "### Acceptance per request", "", *md_table(REQUEST_HEADERS, _request_rows(r))]
    if r.histogram:
        rows = [[label, f"`{bar}`" if bar else "", count] for label, bar, count in _request_histogram(r)]
        parts += ["", *md_table(("acceptance length", "", "requests"), rows)]
    if findings:
        parts += [""] + [f"- {f.text}" for f in findings]
    return parts


INPUT_COLS = (Col("source", 0, "path"), Col("format", 1, "text"), Col("lines", 3), Col("windows"), Col("skipped", 2))
#: The run-metadata table: what tells engines apart stays longest.
METADATA_PRIORITY = (0, 1, 2, 3, 5, 7, 6, 0, 4)
METADATA_KINDS: tuple[Kind, ...] = ("path", "text", "text", "text", "text", "text", "text", "text", "text")


def summary_to_rich(report: Report, console: Console) -> None:
    """The first screen: inputs, acceptance, the recommendation and the findings that matter most."""
    screen = first_screen(report)
    console.print(Text(screen.inputs))
    console.print(Text(screen.acceptance + (f" By {screen.grouped_by}:" if screen.by_group else "")))
    for line in screen.by_group:
        console.print(Text(f"  {line}"))
    console.print(Text(screen.recommendation, style="bold"))
    if screen.speculative_config:
        console.print(Text(screen.speculative_config), soft_wrap=True)  # one line, to copy whole
    for finding in screen.findings:
        console.print(Text(f"• {finding}"))


def to_rich(report: Report, console: Console, *, brief: bool = False) -> None:
    """Print the summary, then (unless ``brief``) the report as tables and findings."""
    summary_to_rich(report, console)
    if brief:
        return
    console.print()
    console.rule("Details", style="dim")
    rows = [[s.name, s.format, _num(s.lines), _num(s.windows), _num(s.skipped)] for s in report.sources]
    print_table(console, INPUT_COLS, rows, "Inputs")
    console.print()
    if report.metadata:
        columns = cols(sentences.METADATA_HEADERS, METADATA_PRIORITY, METADATA_KINDS)
        print_table(console, columns, sentences.metadata_rows(report.metadata), "Engines (run metadata)")
        console.print()

    if report.summary.num_windows:
        _acceptance_to_rich(report, console)
    if report.requests is not None:
        _requests_to_rich(report.requests, sentences.request_findings(report), console)
    _after_acceptance_to_rich(report, console)


def _acceptance_to_rich(report: Report, console: Console) -> None:
    with_k = not _grouped_by_k(report)
    rows = [_summary_row(label, row, with_k=with_k) for label, row in _summary_rows(report)]
    print_table(console, _summary_cols(report, rows), rows, "Acceptance")
    if empty := _empty_groups_line(report):
        console.print(Text(empty, style="dim"))
    if unrecorded := _unrecorded_line(report):
        console.print(Text(unrecorded, style="dim"))
    if any(row.num_drafts_derived for _, row in _summary_rows(report)):
        console.print(Text("* derived from printed rates (vLLM does not print the number of drafts)", style="dim"))

    for title, row, findings in _sections(report):
        console.print()
        console.print(Text(title, style="bold"))
        positions = _position_rows(row)
        if positions:
            print_table(console, POSITION_COLS, positions)
        for line in findings:
            console.print(Text(f"• {line}"))


def _after_acceptance_to_rich(report: Report, console: Console) -> None:
    if report.timing:
        console.print()
        rows = _timing_rows(report)
        columns = _timing_columns(report)
        labels = _label_cols(columns, rows, also=[len(columns)])  # the batch tells rows apart too
        print_table(console, labels + list(TIMING_COLS), rows, "Timing by batch size (per step)")
    for split in (report.context, report.side_by_side):
        if split is not None:
            split_to_rich(split, console)
    if report.serving is not None and report.serving.ratios:
        console.print()
        print_table(console, SERVING_COLS, serving_rows(report), "Under load: speculative over plain (measured)")
    if report.load_advice:
        print_table(console, tuning.LOAD_COLS, tuning.load_rows(report.load_advice), "Where to draft under load")
    if report.recommendation is not None:
        console.print()
        tuning.recommendation_to_rich(report.recommendation, console)
    if report.skipped:
        console.print()
        console.print(Text(f"Skipped {len(report.skipped):,} input line(s); first ones:", style="yellow"))
        for skipped in report.skipped[:5]:
            console.print(Text(f"  {skipped}", style="yellow"))
    if report.notices:
        console.print()
        console.print(Text("Assumed while reading the inputs:", style="yellow"))
        for notice in report.notices:
            console.print(Text(f"  {notice}", style="yellow"))
    if report.tuner_decisions:
        console.print()
        rows = sentences.tuner_rows(report.tuner_decisions)
        print_table(console, TUNER_COLS, rows, "Online tuner (latest decisions)")
        for line in sentences.tuner_state(report.tuner_decisions):
            console.print(Text(f"• {line}"))


TUNER_COLS = cols(sentences.TUNER_HEADERS, (3, 0, 0, 0, 1, 2, 0), ("number", "number", "text", "number", "number",
                                                                 "number", "text"))  # fmt: skip


SERVING_HEADERS = ("configuration", "against", "load", "runs", "throughput [95%]", "TPOT [95%]", "goodput [95%]",
                   "drafting")  # fmt: skip
SERVING_COLS = [Col("configuration", 0, "text"), Col("against", 3, "text"), Col("load", 0, "text"), Col("runs", 4),
                Col("throughput [95%]", 0, "text"), Col("TPOT [95%]", 1, "text"), Col("goodput [95%]", 2, "text"),
                Col("drafting", 2)]  # fmt: skip


def serving_rows(report: Report) -> list[list[str]]:
    """One row per configuration and level: B/A of the speculative server over plain."""
    assert report.serving is not None

    def ratio(value: float | None, low: float | None, high: float | None) -> str:
        return "–" if value is None else sentences.ratio_text(value, low, high)

    return [
        [str(r.config), str(r.plain_config or "plain"), sentences.load_level(r.load, r.level),
         f"{r.runs}·{r.plain_runs}", ratio(r.throughput_ratio, r.throughput_low, r.throughput_high),
         ratio(r.tpot_ratio, r.tpot_low, r.tpot_high), ratio(r.goodput_ratio, r.goodput_low, r.goodput_high),
         "–" if r.drafting_share is None else f"{r.drafting_share:.0%}"]
        for r in report.serving.ratios
    ]  # fmt: skip


TIMING_HEADERS = ("batch", "steps", "draft ms", "verify ms", "step ms", "draft share", "cost ratio", "tokens/s")
TIMING_COLS = (Col("batch", justify="left"), *cols(TIMING_HEADERS[1:], (4, 3, 3, 1, 2, 2, 0)))


def _timing_columns(report: Report) -> list[str]:
    return [c for c in _shown_columns(report) if c != "batch_bucket"]


def _timing_headers(report: Report) -> list[str]:
    return [DISPLAY.get(c, c) for c in _timing_columns(report)] + list(TIMING_HEADERS)


def _timing_rows(report: Report) -> list[list[str]]:
    def ms(value: float | None) -> str:
        return _num(None if value is None else value * 1000, "{:.2f}")

    return [
        [_num(t.labels.get(c), "{}") for c in _timing_columns(report)]
        + [
            _num(t.batch_bucket, "{}"),
            _num(t.timed_steps),
            ms(t.mean_draft_seconds),
            ms(t.mean_verify_seconds),
            ms(t.mean_step_seconds),
            _num(t.draft_share, "{:.0%}"),
            _num(t.cost_ratio, "{:.3f}"),
            _num(t.generated_tokens_per_second, "{:,.0f}"),
        ]
        for t in report.timing
    ]


def summary_to_markdown(report: Report) -> list[str]:
    """The summary as Markdown lines: the same as the rich one, the config in a code block."""
    screen = first_screen(report)
    parts = [screen.inputs, "", screen.acceptance + (f" By {screen.grouped_by}:" if screen.by_group else "")]
    if screen.by_group:
        parts += ["", *(f"- {line}" for line in screen.by_group)]
    parts += ["", f"**{screen.recommendation}**"]
    if screen.speculative_config:
        parts += ["", "```", screen.speculative_config, "```"]
    if screen.findings:
        parts += ["", *(f"- {finding}" for finding in screen.findings)]
    return parts


def to_markdown(report: Report, *, brief: bool = False) -> str:
    """The report as GitHub-flavoured Markdown, for pasting into a PR or an issue: the summary,
    then (unless ``brief``) the details."""
    parts = ["## Speculative decoding acceptance (specobs)", "", *summary_to_markdown(report)]
    if brief:
        return "\n".join(parts) + "\n"
    parts += ["", "### Details", ""]
    parts += md_table(
        ("source", "format", "lines", "windows", "skipped"),
        [[s.name, s.format, _num(s.lines), _num(s.windows), _num(s.skipped)] for s in report.sources],
    )
    if report.metadata:
        parts += ["", "Engines (run metadata):", ""]
        parts += md_table(sentences.METADATA_HEADERS, sentences.metadata_rows(report.metadata))
    if report.summary.num_windows:
        rows = [_summary_row(label, row, with_k=not _grouped_by_k(report)) for label, row in _summary_rows(report)]
        parts += ["", *md_table(_summary_headers(report), rows)]
        if empty := _empty_groups_line(report):
            parts += ["", empty]
        if unrecorded := _unrecorded_line(report):
            parts += ["", unrecorded]
        for title, row, findings in _sections(report):
            parts += ["", f"### {title}"]
            positions = _position_rows(row)
            if positions:
                parts += ["", *md_table(POSITION_HEADERS, [[*p[:3], f"`{p[3]}`"] for p in positions])]
            if findings:
                parts += [""] + [f"- {line}" for line in findings]
    if report.requests is not None:
        parts += _requests_to_markdown(report.requests, sentences.request_findings(report))
    if report.timing:
        parts += [
            "",
            "### Timing by batch size (per step)",
            "",
            *md_table(_timing_headers(report), _timing_rows(report)),
        ]
    for split in (report.context, report.side_by_side):
        if split is not None:
            parts += split_to_markdown(split)
    if report.serving is not None and report.serving.ratios:
        parts += [
            "",
            "### Under load: speculative over plain (measured)",
            "",
            *md_table(SERVING_HEADERS, serving_rows(report)),
        ]
    if report.load_advice:
        parts += ["", "### Where to draft under load", "",
                  *md_table(tuning.LOAD_HEADERS, tuning.load_rows(report.load_advice))]  # fmt: skip
    if report.recommendation is not None:
        parts += ["", "### Recommendation", "", tuning.recommendation_to_markdown(report.recommendation).rstrip("\n")]
    if report.skipped:
        parts += ["", f"Skipped {len(report.skipped):,} input line(s); first ones:", ""]
        parts += [f"- `{s}`" for s in report.skipped[:5]]
    if report.notices:
        parts += ["", "Assumed while reading the inputs:", ""]
        parts += [f"- `{n}`" for n in report.notices]
    if report.tuner_decisions:
        parts += ["", "### Online tuner (latest decisions)", ""]
        parts += md_table(sentences.TUNER_HEADERS, sentences.tuner_rows(report.tuner_decisions))
        parts += [""] + [f"- {line}" for line in sentences.tuner_state(report.tuner_decisions)]
    return "\n".join(parts) + "\n"
