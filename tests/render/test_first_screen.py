"""The report's first screen (its summary, ``--brief``) and tables that never cut a number at
80 or 60 columns (docs/report.md, "The summary" and "Narrow terminals")."""

from __future__ import annotations

import io
import itertools
import json
import math
import os
import re
import subprocess
import sys

import pytest
from rich.cells import cell_len
from rich.console import Console
from support.helpers import run_cli
from support.paths import ROOT

from specobs.advice.compare import compare
from specobs.advice.recommend import recommend
from specobs.advice.report_builder import analyze, recommendation_input
from specobs.advice.report_findings import SUMMARY_FINDINGS, rank
from specobs.analysis.findings import finding
from specobs.ingest import load
from specobs.records import Report, Severity, Summary, TunerDecision, TuneResult
from specobs.render import emit, fit
from specobs.render.fit import Col, layout, shorten_path
from specobs.render.sentences import headline
from specobs.render.summary import key_findings

DATA = ROOT / "examples" / "data"
SCREEN_COLUMNS, SCREEN_ROWS = 80, 30

#: README command 1 and two more bundled inputs a newcomer starts from.
FIRST_SCREENS = [
    ("examples/data/vllm-cpu-sweep", "--by", "method,k"),
    ("examples/data/vllm-cpu-ngram-k3.log",),
    ("examples/data/vllm-cpu-methods",),
]


def cli(*args: str, columns: int = SCREEN_COLUMNS) -> subprocess.CompletedProcess:
    """The CLI as on a terminal ``columns`` wide (rich reads COLUMNS), from the repository root."""
    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "specobs.cli", *args], capture_output=True, env=env, timeout=120, cwd=ROOT, text=True
    )


def row_ends(lines: list[str], columns: int) -> list[int]:
    """The terminal row on which each line ends (a line wider than the terminal takes more rows)."""
    return list(itertools.accumulate(max(1, math.ceil(cell_len(line) / columns)) for line in lines))


def _by(args: tuple[str, ...]) -> list[str]:
    return args[args.index("--by") + 1].split(",") if "--by" in args else ["source", "engine", "model", "method"]


@pytest.mark.parametrize("args", FIRST_SCREENS, ids=lambda a: a[0].rsplit("/", 1)[-1])
def test_the_recommendation_and_its_config_are_on_the_first_screen(args):
    if "--by" in args:  # README command 1, as the README spells it
        assert "specobs report " + " ".join(args) in (ROOT / "README.md").read_text()
    rec = analyze(load([str(ROOT / args[0])]), _by(args)).recommendation
    assert rec is not None
    out = cli("report", *args)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    ends = row_ends(lines, SCREEN_COLUMNS)
    said = next(i for i, line in enumerate(lines) if line and headline(rec).startswith(line.rstrip()))
    assert ends[said] <= SCREEN_ROWS
    config = json.loads(cli("report", *args, "--format", "json").stdout)["recommendation"]["recommended"]
    if config["speculative_config"]:  # printed whole on one line (to copy), right under the sentence
        flag = lines.index(f"--speculative-config '{config['speculative_config']}'")
        assert said < flag and ends[flag] <= SCREEN_ROWS
    # Before: the recommendation came after every table, on row 340 or so of the sweep.
    assert said < lines.index(next(line for line in lines if "Details" in line))


@pytest.mark.parametrize("args", FIRST_SCREENS, ids=lambda a: a[0].rsplit("/", 1)[-1])
def test_brief_is_the_opening_of_the_report_and_fits_one_screen(args):
    brief, full = cli("report", *args, "--brief"), cli("report", *args)
    assert brief.returncode == 0 and full.returncode == 0
    assert full.stdout.startswith(brief.stdout)
    assert row_ends(brief.stdout.splitlines(), SCREEN_COLUMNS)[-1] <= SCREEN_ROWS
    assert "Details" not in brief.stdout and "┃" not in brief.stdout
    assert "Details" in full.stdout[len(brief.stdout) :]
    assert brief.stdout.startswith("Inputs: ")


def test_the_markdown_summary_and_brief():
    args = FIRST_SCREENS[0]
    rec = analyze(load([str(ROOT / args[0])]), _by(args)).recommendation
    assert rec is not None and rec.recommended.speculative_config
    brief = cli("report", *args, "--format", "markdown", "--brief").stdout
    full = cli("report", *args, "--format", "markdown").stdout
    assert brief.startswith(
        "## Speculative decoding acceptance (specobs)\n\nInputs: 6 files (3 run-metadata, 3 events-jsonl) · "
    )
    assert f"**{headline(rec)}**" in brief
    assert f"```\n--speculative-config '{rec.recommended.speculative_config}'\n```" in brief
    assert "- ngram: k=1 1.84 · k=2 2.55 · k=3 2.99 · k=4 3.58 · k=5 3.88 · k=6 4.21" in brief
    assert "### Details" not in brief and "|---" not in brief
    assert full.startswith(brief.rstrip("\n")) and "\n### Details\n" in full
    assert full.index(f"**{headline(rec)}**") < full.index("### Details")


def test_brief_leaves_json_whole():
    out = run_cli("report", str(DATA / "vllm-cpu-ngram-k3.log"), "--format", "json", "--brief")
    assert out.returncode == 2 and out.stdout == b""
    assert out.stderr.decode().count("\n") == 1 and "--brief" in out.stderr.decode()


def test_the_summary_names_what_was_read_and_the_acceptance_per_group():
    brief = cli("report", "examples/data/vllm-cpu-methods", "--brief").stdout
    one_line = " ".join(brief.split())
    assert one_line.startswith(
        "Inputs: 24 files (12 run-metadata, 12 events-jsonl) · 5,508 steps · 12 engines: dflash, draft_model, "
        "eagle, eagle3, mtp, ngram, plain · no line skipped."
    )
    # two mtp engines on different models: told apart by the model, the others by the method alone
    assert "By method and model: dflash 1.52 · draft_model 2.20 · eagle 2.12 · eagle3 1.79 · mtp (tiny-gemma4) " \
           "2.72 · mtp (tiny-mimo) 1.78 · ngram 2.90" in one_line  # fmt: skip
    data = json.loads(cli("report", "examples/data/vllm-cpu-methods", "--format", "json").stdout)
    lengths = {(g["model"], g["method"]): g["mean_acceptance_length"] for g in data["groups"] if g["method"]}
    assert f"mtp (tiny-mimo) {lengths[('tiny-mimo', 'mtp')]:.2f}" in one_line
    log = " ".join(cli("report", "examples/data/vllm-cpu-ngram-k3.log", "--brief").stdout.split())
    assert log.startswith("Inputs: 1 file (vllm-log) · 23 log intervals · 1 engine: ngram · no line skipped.")
    assert "Acceptance length 2.95 [95% 2.89–3.00] tokens per verification, 66.3% of drafted tokens accepted." in log


# --- which findings the summary shows ---------------------------------------------------------------


def test_findings_rank_integrity_then_regressions_then_the_tax_one_kind_at_a_time():
    kinds = ["acceptance_length", "acceptance_rate", "conditional_trend", "configuration_change", "schedule_tax",
             "schedule_tax", "requests", "accepted_past_end", "accepted_past_end", "regression", "unsteady_steps",
             "serving"]  # fmt: skip
    # The iid model holds (severity `context`) unless it misleads (`model`: decided with the finding).
    fair = [finding(kind, severity=Severity.CONTEXT if kind == "conditional_trend" else None) for kind in kinds]
    named = {id(f): f"{kind} {i}" for i, (kind, f) in enumerate(zip(kinds, fair, strict=True))}
    top = rank(fair)
    assert [named[id(f)] for f in top] == ["accepted_past_end 7", "regression 9", "schedule_tax 4"]
    assert len(top) == SUMMARY_FINDINGS
    every = [named[id(f)] for f in rank(fair, most=20)]
    # first of each kind by rank, then the repeats by rank; what the summary says itself, and bookkeeping, never
    assert every == ["accepted_past_end 7", "regression 9", "schedule_tax 4", "requests 6", "serving 11",
                     "accepted_past_end 8", "schedule_tax 5"]  # fmt: skip
    misleading = [finding(kind, severity=Severity.MODEL if kind == "conditional_trend" else None) for kind in kinds]
    named = {id(f): f"{kind} {i}" for i, (kind, f) in enumerate(zip(kinds, misleading, strict=True))}
    misleads = [named[id(f)] for f in rank(misleading, most=20)]
    assert misleads.index("conditional_trend 2") == 3  # after the tax, before the spread across requests


@pytest.mark.parametrize(
    ("path", "kinds"),
    [
        # No regression: mtp-mimo's last 34 zero-acceptance steps repeat a stretch its run shows
        # twice before (the same prompt again), which the steps' autocorrelation accounts for.
        ("vllm-cpu-methods", ["accepted_past_end", "accepted_past_end", "accepted_past_end"]),
        ("vllm-cpu-sweep", ["schedule_tax", "schedule_tax"]),
        ("vllm-cpu-sweep.log", ["wasted_positions", "interval_bias", "conditional_trend"]),
        ("vllm-cpu-ngram-k3.log", ["interval_bias", "drafts_derived"]),
    ],
)
def test_the_bundled_inputs_key_findings(path, kinds):
    report = analyze(load([str(DATA / path)]))
    assert [f.kind for f in key_findings(report)] == kinds


# --- tables at 80 and 60 columns ----------------------------------------------------------------------

NUMBER = re.compile(r"[\[(]?[-+]?\d[\d.,]*(?:[–-][-+]?\d[\d.,]*)*[%×*]?[\])]?")


def test_shorten_path_keeps_the_file_name_and_what_fits_before_it():
    path = "examples/data/vllm-cpu-sweep/specobs-sweep-ngram-p29587-0001.jsonl"
    assert shorten_path(path, 80) == path
    assert shorten_path(path, 60) == "…/data/vllm-cpu-sweep/specobs-sweep-ngram-p29587-0001.jsonl"
    assert shorten_path(path, 50) == "…/specobs-sweep-ngram-p29587-0001.jsonl"
    assert shorten_path(path, 10) == "…/specobs-sweep-ngram-p29587-0001.jsonl"  # never the name itself
    assert shorten_path("vllm.log", 3) == "vllm.log"


def test_layout_leaves_out_the_largest_priority_first_the_rightmost_of_equals():
    columns = [Col("a"), Col("b", 2), Col("c", 1), Col("d", 2)]
    rows = [["12345", "123", "1234567", "12"]]
    # content 5 + 3 + 7 + 2, two cells of padding per column, one separator between columns
    assert layout(28, columns, rows) == ([0, 1, 2, 3], [5, 3, 7, 2])
    assert layout(27, columns, rows) == ([0, 1, 2], [5, 3, 7])
    assert layout(22, columns, rows) == ([0, 2], [5, 7])
    assert layout(16, columns, rows) == ([0], [5])
    assert layout(3, columns, rows) == ([0], [5])  # priority 0 stays, whole, even where nothing fits


def _tables(text: str) -> list[list[str]]:
    """The cells of every table row (a line with a column separator) of a rendering."""
    return [[cell.strip() for cell in re.split("[│┃]", line)] for line in text.splitlines() if re.search("[│┃]", line)]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> list[tuple[str, object, tuple[str, str]]]:
    """Every kind of result the CLI renders, from the bundled inputs (and a simulated folder)."""
    sim = tmp_path_factory.mktemp("sim")
    out = run_cli("simulate", str(sim), "--method", "eagle3", "--k", "0,2,5", "--batch", "1,8,64", "--steps", "60")
    assert out.returncode == 0, out.stderr
    reports = [
        ("sweep", [DATA / "vllm-cpu-sweep"], None),
        ("sweep by method,k", [DATA / "vllm-cpu-sweep"], ["method", "k"]),
        ("sweep by method,k,batch", [DATA / "vllm-cpu-sweep"], ["method", "k", "batch"]),
        ("methods", [DATA / "vllm-cpu-methods"], None),
        ("sweep log", [DATA / "vllm-cpu-sweep.log"], None),
        ("logs", [DATA / f"vllm-cpu-{m}-k3.log" for m in ("ngram", "draft", "eagle")], None),
        ("scrapes", [DATA / f"vllm-cpu-{m}-k3.metrics.txt" for m in ("ngram", "draft", "eagle")], None),
        ("simulated", [sim], ["method", "k", "batch"]),
    ]
    out: list[tuple[str, object, tuple[str, str]]] = []
    for name, paths, by in reports:
        ingested = load([str(p) for p in paths])
        out.append((f"report {name}", analyze(ingested, by) if by else analyze(ingested), ("A", "B")))
    for name, path in (("sweep", "vllm-cpu-sweep"), ("methods", "vllm-cpu-methods"), ("log", "vllm-cpu-ngram-k3.log")):
        rec = recommend(recommendation_input(load([str(DATA / path)])), bootstrap=8)
        out.append((f"recommend {name}", rec, ("A", "B")))
    sweep = DATA / "vllm-cpu-sweep"
    for a, b in (
        (DATA / "vllm-cpu-ngram-k3.log", DATA / "vllm-cpu-draft-k3.log"),
        (sweep / "specobs-sweep-ngram-p29587-0001.jsonl", sweep / "specobs-sweep-draft_model-p29645-0001.jsonl"),
        (DATA / "vllm-cpu-methods", DATA / "vllm-cpu-sweep"),
    ):
        sa, sb = load([str(a)]), load([str(b)])
        out.append((f"compare {a.name}", compare(sa.windows, sb.windows, sa.metadata, sb.metadata), (str(a), str(b))))
    out.append(("tune", TuneResult.from_dict(json.loads((DATA / "tune-ngram" / "tune.json").read_text())), ("A", "B")))
    switches = [(1, 3, "apply", 2), (4, 15, "confirm", 3), (16, 63, "rollback", 4)]
    decisions = tuple(
        TunerDecision(
            1.8e9 + 60 * i,
            lo,
            hi,
            action,
            k,
            k + 2,
            0.123,
            0.081,
            0.154,
            None if action == "apply" else -0.02,
            f"{action}: measured over {120 * (i + 1):,} steps",
        )
        for i, (lo, hi, action, k) in enumerate(switches)
    )
    tuner = Report((), (), Summary(), (), (), (), tuner_decisions=decisions)
    out.append(("report tuner decisions", tuner, ("A", "B")))
    requests = tmp_path_factory.mktemp("requests") / "outputs.jsonl"
    records = []
    for i in range(12):  # two verify steps each: one accepting i % 4 draft tokens, one none
        histogram = [1, 0, 0, 0]
        histogram[i % 4] += 1
        metrics = {"mean_acceptance_length": 1 + (i % 4) / 2, "draft_acceptance_rate": (i % 4) / 6,
                   "acceptance_histogram": histogram, "num_spec_steps": 2, "num_accepted_draft_tokens": i % 4,
                   "num_draft_tokens": 6, "num_spec_tokens": 3}  # fmt: skip
        output = {"index": 0, "num_output_tokens": 3 * 2**i, "finish_reason": "length", "spec_decode_metrics": metrics}
        records.append({"request_id": f"r{i}", "num_prompt_tokens": 10 * 2**i, "outputs": [output]})
    requests.write_text("".join(json.dumps(r) + "\n" for r in records))
    out.append(("report requests", analyze(load([str(requests)])), ("A", "B")))
    return out


def render(result, width: int, names: tuple[str, str]) -> tuple[str, set[str]]:
    """The rich rendering ``width`` cells wide, and every word of every cell and header its tables
    were given (what a number reads before any layout)."""
    given: set[str] = set()
    real = fit.fitted

    def spy(width, columns, rows, title=None):
        given.update(word for col in columns for word in col.header.split())
        given.update(word for row in rows for cell in row for word in str(getattr(cell, "plain", cell)).split())
        return real(width, columns, rows, title)

    buffer = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fit, "fitted", spy)
        emit(result, "rich", console=Console(width=width, file=buffer, color_system=None), names=names)  # type: ignore[arg-type]
    return buffer.getvalue(), given


@pytest.mark.parametrize("width", [80, 60])
def test_no_table_cuts_a_number(results, width):
    checked = 0
    for name, result, names in results:
        text, given = render(result, width, names)
        for row in _tables(text):
            checked += 1
            for cell in row:
                assert not (cell.endswith("…") and re.search(r"\d", cell)), f"{name}: cut number {cell!r}"
                assert not cell.endswith("…"), f"{name}: cut cell {cell!r}"
                for word in cell.split():  # a number is whole (not folded): as the table was given it
                    assert not NUMBER.fullmatch(word) or word in given, f"{name}: {word!r} is not a whole number"
        tables = [line for line in text.splitlines() if re.search("[│┃━]", line)]
        assert all(cell_len(line) <= width for line in tables), name
    assert checked > 500


@pytest.mark.parametrize("width", [80, 60])
def test_the_cli_tables_at_80_and_60_columns(width):
    """The same through the CLI's own console (COLUMNS), for the tables the issue quoted."""
    out = cli("report", "examples/data/vllm-cpu-methods", columns=width)
    assert out.returncode == 0
    cells = [cell for row in _tables(out.stdout) for cell in row]
    assert cells and not [cell for cell in cells if cell.endswith("…")]
    assert "4,8…" not in out.stdout and "3,3…" not in out.stdout
    sources = [row[0] for row in _tables(out.stdout) if row[0].startswith("…/")]
    assert len(sources) == 24 and all(s.startswith("…/specobs-methods-") for s in sources)  # the end of each path
