"""The tables in docs/ that come from the code: regenerate them, or check that they are current.

    python docs/generate.py           rewrite every generated table in docs/*.md
    python docs/generate.py --check   exit 1, listing the tables that differ from the code

A table lives between two marker comments, so the prose around it stays hand-written::

    <!-- generated: env -->
    | variable | default | meaning |
    ...
    <!-- end generated -->

Sources of truth (see :data:`TABLES` for where each table goes):

- environment variables: the :class:`specobs.capture.config.EnvironmentVariable` constants in
  ``specobs.capture.config.VARIABLES`` and ``specobs.exporters.otel.VARIABLES``; a ``SPECOBS_*``
  or ``OTEL_*`` name spelt out as a string anywhere in ``specobs/`` must be one of them (or be
  listed in :data:`UNDOCUMENTED_VARIABLES` with the reason);
- CLI options: the typer app ``specobs.cli.app``, through click (one table per command; a
  command without a table in docs/cli.md is an error);
- exit codes: ``specobs.errors.EXIT_CODES``;
- Prometheus metrics: every family a fresh registry holds once ``specobs exporter``'s sidecar
  has read the bundled ngram run (counters, histograms and, after its refit, the tuning gauges);
  OpenTelemetry instruments: ``OtelMetrics`` on an in-memory reader fed the same rows;
- JSON keys: the JSON that ``specobs report``, ``recommend`` and ``compare`` print for the
  bundled sweep (``examples/data/vllm-cpu-sweep``), walked into dotted paths
  (``recommended.speculative_config``, ``by_batch_size[].basis``). Key names come from the
  code; their descriptions live here, in :data:`JSON_KEYS` (the results code is being
  refactored; they may move next to the code that produces each key later). A key without a
  description, or a description of a key that no longer appears, is an error.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import json
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # this checkout's specobs, not an installed one

DOCS = ROOT / "docs"
SWEEP = ROOT / "examples" / "data" / "vllm-cpu-sweep"
#: The worked ``specobs tune`` output (examples/make_tune_example.py) that docs/tune.md shows.
TUNE_EXAMPLE = ROOT / "examples" / "data" / "tune-ngram" / "tune.json"
NGRAM_LOG = ROOT / "examples" / "data" / "vllm-cpu-ngram-k3.log"
REGENERATE = "python docs/generate.py"
MARKER = re.compile(
    r"(?P<open><!-- generated: (?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(?P<close><!-- end generated -->)", re.S
)


class GenerationError(Exception):
    """The code and the docs disagree in a way regenerating cannot fix (an undescribed key...)."""


def _sweep_file(method: str) -> Path:
    (path,) = sorted(SWEEP.glob(f"specobs-sweep-{method}-*.jsonl"))
    return path


# --- markdown -------------------------------------------------------------------------------------


def cell(value: Any) -> str:
    """Text safe inside a Markdown table cell."""
    return " ".join(str(value).split()).replace("|", "\\|")


def code(value: Any) -> str:
    text = str(value)
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> str:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# --- environment variables ------------------------------------------------------------------------

#: Names spelt out in specobs/ that are deliberately not in the table, and why.
UNDOCUMENTED_VARIABLES = {
    "SPECOBS_DASHBOARD_ARGS": "internal: `specobs dashboard` hands its arguments to the Streamlit process",
}
_LITERAL_NAME = re.compile(r"""(["'])((?:SPECOBS|OTEL)_[A-Z0-9_]+)\1""")


def variables() -> list[Any]:
    from specobs import cli
    from specobs.capture import config
    from specobs.exporters import otel

    return [*config.VARIABLES, *otel.VARIABLES, *cli.VARIABLES]


def env_table() -> str:
    rows = []
    for var in variables():
        default = var.shown_default or (code(var.default) if var.default is not None else "unset")
        rows.append((code(var.name), default, var.meaning))
    return table(("variable", "default", "meaning"), rows)


def undocumented_variables() -> list[str]:
    """``SPECOBS_*`` / ``OTEL_*`` names written as string literals in specobs/ but not documented."""
    known = {name for v in variables() for name in (v.name, *v.aliases)} | set(UNDOCUMENTED_VARIABLES)
    problems = []
    for path in sorted((ROOT / "specobs").rglob("*.py")):
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in _LITERAL_NAME.finditer(line):
                if match.group(2) not in known:
                    where = f"{path.relative_to(ROOT)}:{lineno}"
                    problems.append(
                        f"{where}: {match.group(2)} is read by name but documented nowhere: make it an "
                        "EnvironmentVariable in a module's VARIABLES (see specobs/capture/config.py)"
                    )
    return problems


# --- CLI ------------------------------------------------------------------------------------------


@functools.cache
def _cli():
    import typer

    from specobs.cli import app

    return typer.main.get_command(app)


def _default(param: Any) -> str:
    value = param.default
    if getattr(param, "is_flag", False) and param.secondary_opts:
        return code(param.secondary_opts[0] if not value else param.opts[0])
    if value is None or (param.nargs == -1 and not value):
        return "required" if param.required else "—"
    if isinstance(value, bool):
        return "on" if value else "off"
    value = getattr(value, "value", value)  # an enum's value
    return code(repr(value) if value == "" else value)


def _option(param: Any) -> str:
    if param.param_type_name == "argument":
        name = param.name.upper() + ("…" if param.nargs == -1 else "")
        return code(name) + " (argument)"
    names = [code(o) for o in param.opts]
    if param.secondary_opts:
        names += [code(o) for o in param.secondary_opts]
    return ", ".join(names) if not param.secondary_opts else " / ".join(names)


def cli_commands_table() -> str:
    group = _cli()
    rows = [
        (code("specobs " + name), (cmd.help or "").strip().split("\n\n")[0]) for name, cmd in group.commands.items()
    ]
    return table(("command", "what it does"), rows)


def cli_global_table() -> str:
    params = [p for p in _cli().params if p.name != "help"]
    return table(("option", "default", "help"), [(_option(p), _default(p), p.help or "") for p in params])


def cli_command_table(name: str) -> str:
    command = _cli().commands[name]
    rows = [(_option(p), _default(p), getattr(p, "help", None) or "") for p in command.params if p.name != "help"]
    return table(("option", "default", "help"), rows)


def pitfalls_table() -> str:
    from specobs.analysis.pitfalls import PITFALLS

    def condition(p: Any) -> str:
        parts = [f"{name} {test}" if isinstance(test, str) else f"{name} ∈ {', '.join(map(str, test))}"
                 for name, test in p.when.items()]  # fmt: skip
        if p.acceptance_below is not None:
            parts.append(f"draft acceptance rate < {p.acceptance_below:g}")
        return "; ".join(parts)

    rows = [(code(p.id), p.title, condition(p), p.source) for p in PITFALLS]
    return table(("id", "pitfall", "condition", "source"), rows)


def exit_codes_table() -> str:
    from specobs.errors import EXIT_CODES

    return table(("status", "meaning"), [(code(status), meaning) for status, meaning in sorted(EXIT_CODES.items())])


# --- metrics --------------------------------------------------------------------------------------


@functools.cache
def _exporter_families() -> list[Any]:
    """Every family ``specobs exporter`` serves once it has read the bundled ngram run and refitted."""
    from prometheus_client import CollectorRegistry

    from specobs.exporters.prometheus import PrometheusMetrics
    from specobs.exporters.sidecar import Sidecar

    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry, health=lambda: {"dropped_events": 0, "hook_errors": 0})
    sidecar = Sidecar([str(_sweep_file("ngram")), str(_metadata_file("ngram"))], metrics, tuning_interval=0)
    try:
        sidecar.poll_once()
    finally:
        sidecar.stop()
    # The online tuner's families get samples only from its decision log: one decision shows them.
    metrics.observe_decision({"tuner_action": "apply", "batch_size_min": 1, "batch_size_max": 1, "to_k": 3})
    # The per-request histogram, only from finished requests (SPECOBS_REQUESTS): one request shows it.
    metrics.observe_request(_REQUEST)
    if sidecar.errors:
        raise GenerationError(f"the exporter met {sidecar.errors} error(s) reading {_sweep_file('ngram').name}")
    health = _sidecar_health()
    if health is not None:
        registry.register(health(sidecar))
    return list(registry.collect())


#: A finished request (a ``requests`` row) of the ngram run, for the metric tables.
_REQUEST = {"model": "tiny-llama", "engine": 0, "method": "ngram", "num_spec_tokens": 6, "num_spec_steps": 4,
            "num_draft_tokens": 24, "num_accepted_tokens": 6}  # fmt: skip


def _metadata_file(method: str) -> Path:
    (path,) = sorted(SWEEP.glob(f"run-metadata-{method}-*.jsonl"))
    return path


def _sidecar_health() -> Any:
    """The exporter command's own health collector, wherever it lives now (None: not found)."""
    import importlib

    for module, name in (("specobs.exporters.sidecar", "SidecarHealth"),):
        found = getattr(importlib.import_module(module), name, None)
        if found is not None:
            return found
    return None


def metrics_table() -> str:
    rows = []
    for family in _exporter_families():
        if not family.samples:
            raise GenerationError(
                f"metric family {family.name} has no samples after the exporter read the sweep: its labels are "
                "unknown (feed it in docs/generate.py's _exporter_families)"
            )
        labels: list[str] = []
        for sample in family.samples:
            labels += [k for k in sample.labels if k not in labels and k not in ("le", "quantile")]
        name = family.name + ("_total" if family.type == "counter" else "")
        rows.append((code(name), family.type, ", ".join(labels) or "—", family.documentation))
    return table(("metric", "type", "labels", "help"), rows)


def series_budget_table() -> str:
    """The series one engine publishes at most, by family (``series_budget``): one method, and three."""
    from specobs.exporters.prometheus import SERIES_PER_ENGINE, series_budget

    one, three = series_budget(methods=1), series_budget(methods=3)
    rows: list[tuple[Any, ...]] = [
        (", ".join(code(f) for f in families), samples, n, n3)
        for (families, samples, n), (_, _, n3) in zip(one, three, strict=True)
    ]
    rows.append(("all", "", sum(n for *_, n in one), f"{sum(n for *_, n in three)} (budget {SERIES_PER_ENGINE})"))
    return table(("families", "series of each", "one method", "three methods"), rows)


def otel_table() -> str:
    """Every instrument ``OtelMetrics`` makes: one per row of the family table, as the SDK names its kind."""
    from specobs.ingest.specobs_metrics import COUNTER, FAMILIES, GAUGE

    kinds = {COUNTER: "counter", GAUGE: "gauge"}
    rows = [
        (code(f.otel), kinds.get(f.kind, "histogram"), code(f.unit), ", ".join(f.labels) or "—", f.help)
        for f in FAMILIES
    ]
    return table(
        ("instrument", "kind", "unit", "attributes", "description"), sorted(rows, key=lambda r: r[0].strip("`"))
    )


# --- JSON keys ------------------------------------------------------------------------------------

#: Paths whose values are keyed by data (a method name, a batch bucket): described, not walked.
OPAQUE = {
    "report": {
        "change_points[].changed",
        # The facts differ per kind (specobs/records/finding_facts.py), described in prose in docs/report.md.
        "finding_facts[].facts",
        "group_finding_facts[].finding_facts[].facts",
    },
    # The config checks are null where no vLLM is installed.
    "recommend": {"method_comparison[].speedups", "recommended.config_check", "bands[].config_check"},
    "tune": {"schedule", "noise.idle_cpu_seconds", "noise.busy_seconds"},
    "compare": {
        "configuration.a.schedule",
        "configuration.b.schedule",
        "configuration.differences[].a",
        "configuration.differences[].b",
        "configuration.a.environment",
        "configuration.b.environment",
        "against_own_plain.a",
        "against_own_plain.b",
    },
}
#: Objects with the keys of another one: only the first is listed key by key.
SAME_AS = {
    "report": {
        "groups[]": "summary",
        "details.groups[]": "details.summary",
        "group_finding_facts[].finding_facts[]": "finding_facts[]",
    },
    "recommend": {},
    "tune": {},
    "compare": {"b": "a", "timing.b": "timing.a", "configuration.b": "configuration.a"},
}
#: Lists whose objects start with the group's labels (which ``--by`` chooses).
LABELLED = {"groups[]", "details.groups[]", "group_findings[]", "group_finding_facts[]", "timing[]", "change_points[]"}
_LABELS = (
    "starting with the group's labels (with the default `--by`: {labels}; "
    "`--by batch` adds `batch_bucket`, `run` adds `run_id`, `k` adds `num_spec_tokens`)"
)

#: A split (``records.Split``): the same keys wherever one appears.
_SPLIT = (
    "`by` (the dimensions), `rows` (per target `labels`, the dimensions' values (`context_bucket`, "
    "`attention_backend`…) and `k`: every `summary` key, `draft_ms`, `verify_ms`, `step_ms` per timed step, "
    "`tokens_per_second` (generated tokens per second of step time, geometric mean over `stretches`: blocks of "
    "consecutive timed steps), `speedup` with `speedup_low`/`speedup_high` (at matched batch buckets, Welch 95% "
    "over blocks) against `baseline` (`plain engine` of the same model, platform and device where one ran; "
    "else `k=0`: the same engine with drafting off, which still pays for its drafter), `pitfalls` "
    "(ids of the known pitfalls its engines meet)); `best` (per target and value: the fastest `k`, its `ratio` "
    "over `runner_up` with `low`/`high`, `clear` when `low` > 1); `best_k_differs` (two values whose best k "
    "differ, each beyond noise); `steps_known` of `steps`; `findings`: what it shows, in words"
)

JSON_KEYS: dict[str, dict[str, str]] = {
    "report": {
        "serving": "serving-benchmark results (`vllm bench serve` / sweep files; `analysis.under_load`), null without "
        "them: `levels` (per model, `config`, `speculative`, `load` (`concurrency` or `rate`) and `level`: `runs`, "
        "mean `output_throughput`, `mean_tpot_ms`, `p99_tpot_ms`, `mean_ttft_ms`, `acceptance_length`, "
        "`spec_decode_num_drafts`; from the in-engine capture inside those runs' time windows `captured_steps`, "
        "`captured_batch_size`, `captured_acceptance_length`, `captured_per_position` (share of drafts accepted at "
        "each position, as vLLM's per-position rates), `captured_step_ms`, `captured_draft_ms`, "
        "`captured_verify_ms`, `captured_drafting_share`, `run_ids`; under `--slo`, `goodput` (good requests/s) "
        "and `slo_attained`), `ratios` (each speculative "
        "config over the plain one at a level: `throughput_ratio`, `tpot_ratio` and `goodput_ratio` B/A with 95% "
        "`_low`/`_high` over repeats, null with one run a side; `latency`: `[{measure, ratio, low, high, unit}]` for "
        "the median, p90 and p99 of TTFT, TPOT, ITL and E2EL both report, `unit` what the measure is per (`per "
        "request`, `per output token`, `per output event`: ITL, whose ratios compare a speculative step's burst "
        "with one token); `drafting_share`: the share of steps that "
        "drafted, 0 when the benchmark counted no drafts: near 0 the ratios are the K=0 tax; captured "
        "`step_time_ratio`, speculative over plain step time, and `acceptance_length`: why), `crossovers` (per "
        "`metric` — `output_throughput`, `mean_tpot_ms`, `goodput` — the `level` where speculation stops paying, "
        "`how`: crossed, never, below, unknown; `low`/`high` where its bounds cross), `slo` (`ttft_s`, "
        "`tpot_s`, `e2el_s`, or null) and `synthetic` (results whose prompts were synthetic tokens, vLLM's random "
        "datasets: `dataset`, `client`, `configs`, `results`); each level names its `clients` (`vllm bench serve`, "
        "`aiperf`, `guidellm`)",
        "load_advice": "per speculative configuration of the serving results, where it should draft "
        "(`advice.load`): `verdict` (`switch_off_above`, `speculate`, `plain`, `not_shown`), the crossover it "
        "rests on (`metric`, `stops_paying_at` with 95% `_low`/`_high`), `losses`, `draft_up_to` "
        "(the largest batch that drafts: the batch at the crossover's lower bound, where the gain is still shown; "
        "`crossover_batch` and `crossover_batch_high` at the point estimate and upper bound; `batch_from`: `capture` "
        "or `concurrency`), "
        "`schedule` and `speculative_config` (vLLM's `num_speculative_tokens_per_batch_size`, k=0 above), "
        "`missing` settings, `schedule_measured`, `k0_tax` (ratios where a server did not draft); empty without "
        "serving results",
        "breaks": "acceptance that broke against its own past (`analysis.breaks`; see Breaks and causes below), "
        "one object per break: the lineage's `model`, `method`, `workload`; `kind` (`fall`, `rise`, `collapse`, "
        "`stale_after_off`); `ts`; `before` and `after` (acceptance length at `depth` positions: the earlier "
        "run's steady state and the later one's, or the steps before and after K=0 stretches); `difference` and "
        "its 95% `interval`; `z`; `depth`; `before_run` / `after_run` (`run_id`, `engine`, `start_ts`, "
        "`end_ts`, `num_drafts`); `causes` (run-metadata fields that changed, most likely first: `field`, "
        "`before`, `after`, `pitfall`); `coincident_change` (false: nothing changed; null: no metadata); "
        "`pitfalls` the later run meets; `resumes` (K=0 stretches checked)",
        "unrecorded_dimensions": "the `--by` names no group knows a value of: the inputs do not record them "
        "(a log has no context length; a run without metadata no attention backend); their groups show null",
        "context": "acceptance, cost and measured speed by context length (null when no step row has "
        "`context_length`): " + _SPLIT + "; `trends` (per target and k: acceptance length and rate at "
        "`short_bucket` against `long_bucket`, `beyond_noise` when the intervals do not overlap); `vllm_option` "
        "(the config field that would apply a per-context k; null: the installed vLLM has none, so none is printed)",
        "side_by_side": "with environment dimensions in `--by` (platform, attention_backend, vllm_version…): the same "
        "split by them, each against its own plain engine (null otherwise): " + _SPLIT,
        "run_metadata": "one object per engine read from the run-metadata files beside captured event files "
        "(vLLM version, platform, device and its architecture, attention backends, graph mode, parallelism, "
        "speculative config, dtypes, environment): the fields of docs/schema.md, Run metadata",
        "tuner_decisions": "the online tuner's decision log (`SPECOBS_ONLINE_TUNER`; docs/tune.md), oldest first: "
        "`ts`, "
        "`batch_size_min`, `batch_size_max`, `action` (suggest, apply, confirm, rollback, refuse), `from_k`, "
        "`to_k`, `predicted_gain` with `predicted_low`/`predicted_high`, `measured_gain`, `reason` (why: "
        "`measured_faster`, `forced`, `no_earlier_measurement`, `window_measured`, `no_speculative_decoding`, "
        "`data_parallel`, `model_runner_v2`, `no_schedule`, or `other` for free text from logs written before "
        "reasons were typed), `reason_text` (that free text; null otherwise), `run_id`, `engine`, "
        "`reason_words` (the reason in words); empty without one",
        "requests": "acceptance per finished request (`requests` rows: capture request files, server responses, "
        "saved offline outputs; docs/schema.md), null without any: `overall`, then `by_prompt_length`, "
        "`by_output_length` (power-of-two token buckets), `by_workload` and `by_method`, each a list of groups with "
        "`label` (the bucket or label value; null overall), `num_requests`, `num_requests_without_drafts` (no verify "
        "step: left out of the distribution), `num_spec_steps`, `num_draft_tokens`, `num_accepted_tokens`, "
        "`request_weighted_mean_acceptance_length` (the mean of each request's `1 + accepted/steps`), "
        "`token_weighted_mean_acceptance_length` (`1 + Σ accepted / Σ steps`: long requests weigh more), `p10`, "
        "`p50`, `p90`, `p99` (of the requests' acceptance lengths, linear), `mean_prompt_tokens`, "
        "`mean_output_tokens`; and `histogram`: `low`, `high`, `requests` per 0.25-wide bin of acceptance length "
        "from 1",
        "summary": "over all inputs, exactly these keys (null when unknown)",
        "summary.num_drafts": "drafts verified, `D`",
        "summary.num_draft_tokens": "draft tokens proposed and verified, `T`",
        "summary.num_accepted_tokens": "draft tokens accepted, `A`",
        "summary.mean_acceptance_length": "`1 + A/D` (counts the bonus token)",
        "summary.draft_acceptance_rate": "`A/T`",
        "summary.acceptance_rate_per_position": "`r_i = a_i / n_i`, per position",
        "summary.conditional_acceptance_rate_per_position": "`β_i = a_i / m_i`, per position",
        "summary.num_accepted_tokens_per_pos": "`a_i`: drafts whose first i+1 tokens were accepted",
        "summary.num_drafts_per_pos": "`n_i`: drafts that reached position i",
        "groups[]": "one object per group, " + _LABELS + ", then every `summary` key for the group",
        "details": "intervals and diagnoses, kept apart so `summary` stays exactly its keys",
        "details.summary": "over all inputs",
        "details.summary.num_windows": "windows (steps, log intervals, scrape pairs) read; finished requests when "
        "the input holds only those",
        "details.summary.num_spec_tokens": "largest k seen",
        "details.summary.mean_acceptance_length_se": "standard error of the mean acceptance length",
        "details.summary.mean_acceptance_length_low": "95% interval, lower end (clipped at 1)",
        "details.summary.mean_acceptance_length_high": "95% interval, upper end",
        "details.summary.mean_acceptance_length_basis": "`counts` (from drafts and accepted tokens) or `reported` "
        "(the engine's own printed mean)",
        "details.summary.acceptance_rate_per_position_low": "Wilson 95% interval of `r_i`, lower ends",
        "details.summary.acceptance_rate_per_position_high": "Wilson 95% interval of `r_i`, upper ends",
        "details.summary.conditional_acceptance_rate_per_position_low": "Wilson 95% interval of `β_i`, lower ends",
        "details.summary.conditional_acceptance_rate_per_position_high": "Wilson 95% interval of `β_i`, upper ends",
        "details.summary.iid_alpha": "`α` with `Σ α^i = Σ r_i` (the implied iid rate)",
        "details.summary.iid_max_gap": "`max |r_i − α^(i+1)|`",
        "details.summary.conditional_trend": "`falling`, `rising` or `flat` (see iid diagnosis above)",
        "details.summary.num_drafts_derived": "true when drafts (and per-position counts) were derived from printed "
        "rates (vLLM V1 log lines), not counted",
        "details.summary.start_ts": "unix seconds of the first window",
        "details.summary.end_ts": "unix seconds of the last window",
        "details.groups[]": "one object per group (same order as `groups`), "
        + _LABELS
        + ", then every `details.summary` key for the group",
        "findings": "the report-wide sentences of the rich report (under `all inputs`, or under the only group): "
        "what the input holds when it is a plain engine's alone or finished requests alone, config integrity, "
        "acceptance over all inputs, changes over time, costs, per-request acceptance",
        "group_findings[]": "one object per group (same order as `groups`), " + _LABELS + ", then `findings`",
        "finding_facts[]": "the same findings as data, one per sentence of `findings`, in the same order: `kind`, "
        "`severity`, `facts`",
        "finding_facts[].kind": "the finding's kind (`specobs.records.FindingKind`: `acceptance_length`, "
        "`conditional_trend`, `schedule_tax`, `regression`, `serving`, …)",
        "finding_facts[].severity": "`integrity`, `regression`, `tax`, `limit`, `model`, `spread`, `provenance`, "
        "`other` (the summary's order, `FINDING_RANK` in specobs/advice/report_findings.py), or `context` "
        "(never in the summary)",
        "finding_facts[].facts": "the numbers the sentence says and the decision behind it (per kind: "
        "specobs/records/finding_facts.py)",
        "group_finding_facts[]": "one object per group (same order as `group_findings`), "
        + _LABELS
        + ", then `finding_facts`, aligned with that group's `findings`",
        "group_finding_facts[].finding_facts[]": "the group's findings as data, aligned with its `findings`: "
        "as `finding_facts[]`",
        "group_findings[].findings": "the group's own sentences, as the rich report prints them under the group's "
        "per-position table (acceptance length, rate, wasted positions, the iid diagnosis, interval bias); empty for "
        "a group without drafts",
        "timing[]": "inputs with step timing (capture event files, V0 stage times): one object per group and "
        "batch bucket, " + _LABELS,
        "timing[].batch_bucket": "power-of-two batch bucket (`1`, `2-3`, `4-7`, …)",
        "timing[].timed_steps": "steady-state timed steps in the bucket",
        "timing[].mean_draft_seconds": "mean proposer time per step",
        "timing[].mean_verify_seconds": "mean target forward + rejection sampling per step",
        "timing[].mean_step_seconds": "mean whole-step time",
        "timing[].mean_other_seconds": "step − draft − verify (scheduling, bookkeeping)",
        "timing[].draft_share": "share of step time spent drafting: mean draft seconds ÷ mean step seconds",
        "timing[].cost_ratio": "the `c` of Leviathan, one drafter pass against one target forward: draft seconds per "
        "drafted position per request (draft tokens ÷ batch size) ÷ verify seconds per step",
        "timing[].rejected_draft_share": "draft time × rejected share of drafted tokens, over step time",
        "timing[].generated_tokens_per_second": "generated tokens per second of step time",
        "recommendation": "the `specobs recommend` object (keys below) with point estimates only (no bootstrap: "
        "its `interval`s are null); null when nothing drafted. `--method` names the method of rows that carry none",
        "change_points[]": "changes of acceptance length (`detect_changes`), one object per change, " + _LABELS,
        "change_points[].ts": "time (unix seconds) of the first window after the change",
        "change_points[].kind": "`regression` / `improvement` within one configuration, `drift` (a steady "
        "slide: adds `end_ts`, `rate_per_hour` and its 95% `rate_interval`), or `configuration_change`",
        "change_points[].before": "mean acceptance length before",
        "change_points[].after": "mean acceptance length after",
        "change_points[].z": "two-sample z statistic of the split",
        "change_points[].configuration": "the configuration it happened within (or switched to)",
        "change_points[].configuration.method": "method",
        "change_points[].configuration.num_spec_tokens": "k",
        "change_points[].configuration.batch_bucket": "batch bucket",
        "change_points[].configuration.workload": "workload label",
        "change_points[].changed": "configuration changes only: field → `[before, after]` (empty otherwise)",
        "sources[]": "one object per input",
        "sources[].source": "the input's name",
        "sources[].format": "the format read (detected, or `--input-format`)",
        "sources[].lines": "lines read (null where not counted)",
        "sources[].windows": "windows it gave",
        "sources[].skipped": "lines skipped",
        "skipped_lines": "lines skipped over all inputs",
        "skipped_lines.total": "how many",
        "skipped_lines.examples[]": "up to 20 of them",
        "skipped_lines.examples[].source": "input",
        "skipped_lines.examples[].line": "line number (null when not a line)",
        "skipped_lines.examples[].why": "why it was skipped",
        "notices": "what was assumed while reading the inputs (a counter that fell: engine restart assumed; a "
        "baseline taken at a range's first sample; a stream cut short): objects with source, line, why; never "
        "counted as skipped",
    },
    "recommend": {
        "recommended": "the headline: exactly the configuration to run",
        "recommended.method": "method to run; null to run without speculation (and when the input cannot name "
        "it: pass `--method`)",
        "recommended.draft_model": "its draft checkpoint (`speculative_config.model`), null when none",
        "recommended.num_speculative_tokens": "k (a schedule's largest); 0 with no speculative config",
        "recommended.schedule": "`[low, high, k]` batch-size ranges from batch 1 (k = 0: no drafting there) for a "
        "schedule; null for a static k",
        "recommended.predicted_speedup": "the config's own speedup over plain decoding, weighted by the steps in "
        "each batch bucket (measured where measured)",
        "recommended.interval": "bootstrap 2.5–97.5 percentiles `[low, high]` of it; null without bootstrap",
        "recommended.speculative_config": "the `--speculative-config` JSON: the method, draft model and every "
        "speculative setting the input's engines of that method ran with (prompt lookup bounds, draft tensor "
        "parallel size, …, from their run metadata), at the recommended k (`num_speculative_tokens_per_batch_size` "
        "for a schedule); ready to paste only when `missing_fields` is empty and `config_check` found no problems; "
        "null for no config or an unknown method",
        "recommended.missing_fields": "fields the config needs that the input does not show, or shows with "
        "different values in different engines (`model`: a draft model's path; `prompt_lookup_min`, "
        "`prompt_lookup_max`: ngram's bounds when the input shows no config); empty: complete",
        "recommended.config_check": "the config checked against the vLLM installed where specobs ran (null without "
        "one, or with `--no-check-config`): `vllm_version`; `fields_checked` (names, types and bounds against the "
        "fields its `SpeculativeConfig` declares); `built` (vLLM built the whole config with the target's and "
        "draft's model configs, as at start-up: only for a complete config whose model folders are on this "
        "machine); `problems` (what vLLM refuses; empty: nothing); `target_path` (the target as the engines "
        "loaded it, null when the input does not show it); `folders_not_found` (model folders the config names "
        "that are not here); `load_error` (why the target's config would not load here)",
        "recommended.baseline": "what speedups are against: `plain engine`, or how plain decoding was estimated "
        "(`not measured`: see `not_measured`)",
        "recommended.measures": "what the speedup measures: `decode steps only` (generated tokens over the seconds "
        "of decode steps, from the capture: prompt steps and idle left out) or `served throughput` (a server's "
        "printed generation throughput over whole stats intervals at a running count: prefill, idle moments and "
        "turnover inside them count, as clients see them)",
        "not_measured": "per method with no measured speedup, why: `reason` (`no step timing and no plain engine in "
        "the input`; a plain engine of another model, platform or device, listed in `plain_targets`; too few "
        "steady intervals at a running count both engines show, with `running`, `intervals`, `plain_intervals`, "
        "`needed`, `running_shown`, `plain_running_shown`; no throughput lines on one side; steps timed whole, "
        "without the verify time the cost model needs, with `timed_steps` and `verify_timed_steps`), `method`, "
        "`draft_model`; empty when every method was measured",
        "recommended.basis": "`measured` (every bucket measured against a measured plain engine), `modelled` (some "
        "part from the model: the buckets say which) or `not measured` (no step timing: `predicted_speedup` is "
        "null and `bands` says what the input can)",
        "by_batch_size[]": "per power-of-two batch bucket: what the recommended config does there",
        "by_batch_size[].method": "method (null when off overall)",
        "by_batch_size[].batch_size_min": "lowest batch size of the bucket",
        "by_batch_size[].batch_size_max": "highest batch size of the bucket",
        "by_batch_size[].num_speculative_tokens": "k in the bucket (0: off)",
        "by_batch_size[].predicted_speedup": "speedup in the bucket (an off range of a schedule: the k = 0 tax, ≤ 1)",
        "by_batch_size[].interval": "bootstrap interval of it, or null",
        "by_batch_size[].basis": "`measured`, `measured, plain modelled`, `model` or `plain decoding`",
        "by_batch_size[].measured_steps": "steps the input spent in the bucket (the weight)",
        "predicted[]": "every method × k (0 to `--max-k`) × bucket evaluated",
        "predicted[].method": "method",
        "predicted[].draft_model": "draft checkpoint, or null",
        "predicted[].num_speculative_tokens": "k (0: plain decoding)",
        "predicted[].batch_size": "batch size the model is evaluated at (the bucket's median observed one)",
        "predicted[].batch_size_min": "lowest batch size of the bucket",
        "predicted[].batch_size_max": "highest batch size of the bucket",
        "predicted[].tokens_per_second": "the model's throughput; null without step timing",
        "predicted[].speedup": "the model's speedup over plain decoding",
        "predicted[].measured_speedup": "measured speedup (at least 20 timed decode steps at that k in the "
        "bucket), else null",
        "predicted[].estimate": "what the choice uses: measured, else the model anchored to the nearest measured k",
        "predicted[].basis": "`measured`, `measured, plain modelled`, `model` or `plain decoding`",
        "predicted[].interval": "bootstrap 2.5–97.5 percentiles of `estimate`, or null",
        "predicted[].extrapolated": "true when k is beyond the measured k (acceptance extrapolated)",
        "assumptions": "sentences: cost-model notes, the baseline, drafts per request-step, the extrapolation's β",
        "explanations": "one sentence per bucket: why this k there",
        "method_comparison[]": "with several methods: per bucket, which method wins at its best k (else empty)",
        "method_comparison[].batch_size_min": "lowest batch size of the bucket",
        "method_comparison[].batch_size_max": "highest batch size of the bucket",
        "method_comparison[].winner": "winning method",
        "method_comparison[].draft_model": "its draft checkpoint, or null",
        "method_comparison[].num_speculative_tokens": "its best k in the bucket",
        "method_comparison[].speedups": "method (with its draft model in parentheses) → its best speedup there",
        "method_comparison[].labels": "the winner's labels",
        "method_comparison[].labels.model": "served model",
        "method_comparison[].labels.platform": "`rocm`, `cuda`, `cpu`…",
        "method_comparison[].labels.device": "device name",
        "target": "what the recommendation is for: methods compete on one target only (the busiest, or `--model`'s)",
        "target.model": "served model",
        "target.platform": "`rocm`, `cuda`, `cpu`…",
        "target.device": "device name",
        "target.steps": "steps of its speculative engines in the input (the traffic it was chosen by)",
        "other_targets": "the input's other targets (`[{model, platform, device, steps}]`, busiest first): each needs "
        "its own `recommend --model`; empty with one target",
        "served": "speculative servers measured against a plain server from their own throughput lines (a log's "
        "stats lines, a scrape's generation counter) at matched running requests, per batch bucket and `overall`: "
        "objects with `method`, `draft_model`, `num_speculative_tokens`, `batch_size_min`/`max`, `running` (the "
        "running-request counts matched), `speedup` and its 95% `interval`, `tokens_per_second` and "
        "`plain_tokens_per_second`, `intervals`/`plain_intervals`, `tokens_per_step`, `measures` (`served "
        'throughput`; docs/model.md, "Measured from serving throughput"); empty without a plain server\'s lines',
        "under_load": "with serving-benchmark results: where each configuration should draft, from its measured "
        "crossover — the objects of the report's `load_advice`; empty without them",
        "by_context": "the best k by context length, measured (the report's `context`; null when no step knows its "
        "context): advice only, no vLLM release up to 0.33 takes a per-context k",
        "bands[]": "per method whose input has no step timing: not measured, a modelled band per k (docs/model.md, "
        "Inputs without timing); empty when every method was timed",
        "bands[].method": "method",
        "bands[].draft_model": "draft checkpoint, or null",
        "bands[].drafter_kind": "`lookup`, `autoregressive` or `parallel`: the cost class the band assumes",
        "bands[].per_position_cost": "`[low, high]` drafter cost per drafted position per request, in plain steps",
        "bands[].per_step_cost": "`[low, high]` drafter cost per drafting step whatever k is, in plain steps",
        "bands[].overhead": "`[low, high]` extra cost per step of a speculative engine, in plain steps",
        "bands[].cost_ratio_given": "true when `per_position_cost` is the user's `--cost-ratio`",
        "bands[].drafts_per_request_step": "share of request-steps that drafted, measured from generated tokens; "
        "null when the input cannot say (then taken as 1)",
        "bands[].measured_k": "positions with acceptance counts",
        "bands[].ran_k": "the largest k the input ran",
        "bands[].best_k_memory_bound": "the k with the highest band top (verification flat in tokens scored)",
        "bands[].best_k_compute_bound": "the k with the highest band bottom (verification grows with tokens "
        "scored); 0: no speculation",
        "bands[].speculative_config": "the config that ran (its method and draft model at `ran_k`, every setting "
        "the input's run metadata shows): what to measure, not a recommendation; null when the method is unknown",
        "bands[].missing_fields": "what the input does not show of it (as `recommended.missing_fields`)",
        "bands[].config_check": "it checked against the installed vLLM (as `recommended.config_check`)",
        "bands[].by_k[]": "per k from 0",
        "bands[].by_k[].num_speculative_tokens": "k",
        "bands[].by_k[].tokens_per_draft": "1 + accepted tokens per draft at k (measured, or extrapolated)",
        "bands[].by_k[].tokens_per_draft_low": "its 95% low end (each position's Wilson bound; the tail's low β)",
        "bands[].by_k[].tokens_per_draft_high": "its 95% high end",
        "bands[].by_k[].speedup_low": "modelled speedup if verification grows with tokens scored and the drafter "
        "costs the top of its class",
        "bands[].by_k[].speedup_high": "modelled speedup if verification is flat and the drafter costs the bottom "
        "of its class",
        "bands[].by_k[].extrapolated": "true when k is beyond the measured k",
    },
    "tune": {
        "method": "the method tuned (from `--speculative-config`)",
        "speculative_config": "the ready `--speculative-config` (a JSON string): yours with k and the schedule; "
        "null when plain decoding was measured fastest",
        "schedule": "`[[batch_min, batch_max, k], …]`, equal neighbours merged (k 0: drafting off)",
        "buckets[]": "per power-of-two batch bucket",
        "buckets[].batch_size_min": "lowest batch size",
        "buckets[].batch_size_max": "highest batch size",
        "buckets[].num_speculative_tokens": "the k chosen there (0: off)",
        "buckets[].basis": "`measured`, `measured either side`, `model`, `nearest measured`, `plain engine` or "
        "`best static k` (data parallel > 1: one k everywhere)",
        "buckets[].measured_batch_size": "the measured batch size the choice comes from, or null",
        "buckets[].tokens_per_second": "tokens/s measured there for the chosen k, or null",
        "buckets[].decided": "the race established the leader's advantage, or a tie within ±2%, at 95% over its "
        "looks (false: the measured leader, undecided)",
        "measurements[]": "every candidate at every measured batch size",
        "measurements[].batch_size": "concurrent requests",
        "measurements[].num_speculative_tokens": "k (0 on the `plain` engine: plain decoding; on the "
        "`speculative` engine: drafting off by the schedule)",
        "measurements[].tokens_per_second": "generated tokens over the wall time (start to start) of its counted steps",
        "measurements[].low": "95% jackknife interval over its cycles (plain engine: rounds), lower end",
        "measurements[].high": "upper end",
        "measurements[].rounds": "rounds it ran in",
        "measurements[].steps": "steps counted for it (each block's first step is not)",
        "measurements[].units": "cycles (speculative engine) or rounds (plain engine) it was measured in",
        "measurements[].vs_leader": "its tokens/s over the leader's, paired (null: the leader)",
        "measurements[].vs_leader_low": "interval at the per-look level (95% over all looks), lower end; plain vs "
        "speculative widened by the engines' bias",
        "measurements[].vs_leader_high": "upper end (null when unbounded)",
        "measurements[].engine": "`plain` or `speculative`",
        "measurements[].eliminated": "dropped from the race: slower than the leader beyond noise at a look",
        "measurements[].leader": "the fastest candidate at that batch size when the race ended",
        "verification": "the chosen configuration vs the best static k vs the plain engine on one workload",
        "verification.rounds": "rounds (one stretch of each engine, alternate order)",
        "verification.cycles": "cycles of blocks behind the gain over the best static k",
        "verification.half_width_target": "the relative half-width both gains' intervals were run to (0.05)",
        "verification.target_met": "both gains' 95% intervals within the target",
        "verification.workload": "the workload, in words, with the shape the engines ran at when not one device "
        "(`on engines of tensor parallel 2`, `one data-parallel rank of 4`)",
        "verification.schedule_tokens_per_second": "tokens/s of the chosen configuration",
        "verification.best_static_num_speculative_tokens": "the single k with the best predicted workload time",
        "verification.best_static_tokens_per_second": "its tokens/s",
        "verification.plain_tokens_per_second": "the plain engine's tokens/s",
        "verification.gain_vs_best_static": "chosen vs best static k, same generations, paired by cycle "
        "(tokens/s ratio − 1)",
        "verification.gain_vs_best_static_low": "95% jackknife interval, lower end",
        "verification.gain_vs_best_static_high": "upper end",
        "verification.gain_vs_plain": "chosen vs plain (0 when the chosen configuration is the plain engine)",
        "verification.gain_vs_plain_low": "95% jackknife interval over rounds, widened by the engines' bias, lower end",
        "verification.gain_vs_plain_high": "upper end",
        "noise": "how noisy the measurements were and how they were compared",
        "noise.round_to_round": "median relative standard deviation of a candidate's rounds",
        "noise.cycle_to_cycle": "the same for a speculative k's cycles",
        "noise.comparison": "how the speculative engine's ks were compared",
        "noise.engine_bias": "how far two engine processes doing the same work differ: the plain engine over a "
        "second plain process (1: alike)",
        "noise.engine_bias_basis": "how it was measured (without a second process: plain over the speculative "
        "engine at k=0 less its drafting, an upper bound)",
        "noise.engine_bias_low": "95% interval, lower end",
        "noise.engine_bias_high": "upper end",
        "noise.k0_tax": "share of a k=0 step the drafter still takes (captured steps; null: not captured)",
        "noise.rounds": "race rounds run",
        "noise.idle_cpu_seconds": "engine → CPU seconds it used while the other engine worked",
        "noise.busy_seconds": "engine → wall seconds it spent generating",
        "seconds": "wall time: `engine_start`, `race`, `fit`, `verification`, `total`",
        "seconds.engine_start": "starting both engines (not counted in `--budget`)",
        "seconds.race": "measuring the engines' bias on two plain processes, then the race",
        "seconds.fit": "reading the captured steps and fitting the model",
        "seconds.verification": "the verification",
        "seconds.total": "all of it",
        "decided": "every measured batch size's race ended with a decision",
        "parallel": "the shape every engine ran at: `tensor_parallel_size`, `pipeline_parallel_size`, "
        "`data_parallel_size` (1 each on one device)",
        "parallel.tensor_parallel_size": "tensor parallel size of every engine",
        "parallel.pipeline_parallel_size": "pipeline parallel size of every engine",
        "parallel.data_parallel_size": "data parallel size of the deployment (the engines ran one rank)",
    },
    "compare": {
        "verdict": "the sentence: configuration first, then throughput, then acceptance",
        "kind": "`regression`, `improvement`, `configuration_changed`, `unchanged` or `unknown`",
        "a": "run A's summary",
        "a.mean_acceptance_length": "mean acceptance length",
        "a.mean_acceptance_length_low": "95% interval, lower end",
        "a.mean_acceptance_length_high": "95% interval, upper end",
        "a.mean_acceptance_length_se": "its standard error (what the z test uses)",
        "a.draft_acceptance_rate": "`A/T`",
        "a.num_drafts": "drafts",
        "a.num_accepted_tokens": "accepted tokens",
        "b": "run B's, the same keys as `a`",
        "positions[]": "per position",
        "positions[].position": "position, from 1",
        "positions[].a": "`r_i` of A",
        "positions[].a_interval": "its Wilson 95% interval",
        "positions[].b": "`r_i` of B",
        "positions[].b_interval": "its Wilson 95% interval",
        "positions[].changed": "true when the two intervals do not overlap",
        "timing": "mean timing of each side",
        "timing.a": "A's (null values without timing)",
        "timing.a.mean_draft_seconds": "mean proposer time per step",
        "timing.a.mean_verify_seconds": "mean verification time per step",
        "timing.a.mean_step_seconds": "mean step time",
        "timing.a.generated_tokens_per_second": "generated tokens per second of step time",
        "timing.b": "B's, the same keys as `timing.a`",
        "configuration": "what each side ran",
        "configuration.a": "A's configuration",
        "configuration.a.method": "methods (sorted)",
        "configuration.a.draft_model": "draft models",
        "configuration.a.num_spec_tokens": "ks",
        "configuration.a.schedule": "batch bucket → the ks used there",
        "configuration.b": "B's, the same keys as `configuration.a`",
        "configuration.differences[]": "fields in which A and B are known to differ",
        "configuration.differences[].field": "`method`, `draft_model`, `num_spec_tokens` or `schedule`",
        "configuration.differences[].a": "A's value",
        "configuration.differences[].b": "B's value",
        "configuration.a.environment": "what A ran on: each run-metadata field (`attention_backend`, `graph_mode`, "
        "`device_arch`, …, then each recorded environment variable by name) → its values over A's engines; "
        "without metadata, read off the row labels (see docs/schema.md, Run metadata)",
        "configuration.a.engines_with_metadata": "engines of A with a run-metadata record",
        "configuration.environment": "run-metadata fields in which A and B differ, named first in the verdict "
        "(`[{field, a, b}]`; an environment variable one side did not set reads `unset`)",
        "configuration.changed": "true when there is any difference (configuration or environment)",
        "throughput": "both sides timed: B/A generated tokens per second at matched batch buckets; else null",
        "throughput.basis": "what is compared, in words",
        "throughput.interval": "how the interval is made, in words",
        "throughput.ratio": "steps-weighted geometric mean of the buckets' B/A",
        "throughput.low": "95% interval, lower end (null when no bucket could be tested)",
        "throughput.high": "95% interval, upper end",
        "throughput.degrees_of_freedom": "Welch–Satterthwaite degrees of freedom",
        "throughput.step_seconds_ratio": "B/A mean step time",
        "throughput.direction": "`fell`, `rose`, `unchanged` or null",
        "throughput.buckets[]": "per batch bucket both ran",
        "throughput.buckets[].batch_bucket": "the bucket",
        "throughput.buckets[].steps_a": "A's timed steps",
        "throughput.buckets[].steps_b": "B's timed steps",
        "throughput.buckets[].runs_a": "A's runs (stretches of consecutive timed rows)",
        "throughput.buckets[].runs_b": "B's runs",
        "throughput.buckets[].tokens_per_second_a": "A's generated tokens per second",
        "throughput.buckets[].tokens_per_second_b": "B's",
        "throughput.buckets[].ratio": "B/A",
        "throughput.buckets[].step_seconds_ratio": "B/A mean step time",
        "throughput.buckets[].tested": "two runs or more on each side: in the interval",
        "throughput.buckets_only_in_a": "buckets only A ran",
        "throughput.buckets_only_in_b": "buckets only B ran",
        "acceptance": "the z test of B − A on the mean acceptance length",
        "acceptance.difference": "B − A",
        "acceptance.standard_error": "its standard error (no smaller than the pooled one)",
        "acceptance.z": "difference / standard error",
        "acceptance.direction": "`fell`, `rose`, `unchanged` (|z| ≤ 1.96) or null",
        "against_own_plain": "each side's targets and k against its own plain engine or k = 0 steps",
        "against_own_plain.a": "A's (null without timing): " + _SPLIT,
        "against_own_plain.b": "B's, the same keys",
        "serving": "serving-benchmark results on both sides: B over A per configuration and load level (the "
        "fields of the report's `serving.ratios`, `plain_config` naming A's configuration); empty without them",
        "causes": "run-metadata fields that differ between A's and B's first engines, most likely cause of an "
        "acceptance change first (`field`, `before`, `after`, `pitfall`: a known pitfall B meets); empty "
        "without metadata on both sides",
    },
}


def walk(value: Any, opaque: set[str], prefix: str = "") -> Iterator[str]:
    """Dotted paths of every key in ``value``, in order: ``a.b``, ``list[]``, ``list[].key``."""
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(item, list) and any(isinstance(x, dict) for x in item) and path not in opaque:
                yield path + "[]"
                for x in item:
                    if isinstance(x, dict):
                        yield from walk(x, opaque, path + "[]")
            else:
                yield path
                if path not in opaque:
                    yield from walk(item, opaque, path)


def _run_cli(*args: str) -> dict[str, Any]:
    from typer.testing import CliRunner

    from specobs.cli import app

    result = CliRunner().invoke(app, [*args, "--format", "json"])
    if result.exit_code not in (0, 3):  # compare exits 3 on a regression, which these inputs are
        raise GenerationError(f"specobs {' '.join(args)} --format json exited {result.exit_code}: {result.output}")
    return json.loads(result.stdout)


@functools.cache
def json_outputs() -> dict[str, dict[str, Any]]:
    """What the CLI prints for the bundled sweep: ``report`` (with one unreadable line added, so
    that ``skipped_lines.examples`` has an entry), ``recommend`` and ``compare`` (ngram → draft model)."""
    ngram, draft, plain = (str(_sweep_file(m)) for m in ("ngram", "draft_model", "plain"))
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / Path(plain).name
        copy.write_text(Path(plain).read_text(encoding="utf-8") + '{"not json\n', encoding="utf-8")
        report = _run_cli("report", ngram, draft, str(copy))
    return {
        "report": report,
        "tune": json.loads(TUNE_EXAMPLE.read_text(encoding="utf-8")),
        # The sweep is timed, so it has no bands: those come from the bundled (untimed) ngram log.
        "recommend": {
            **_run_cli("recommend", str(SWEEP), "--bootstrap", "0"),
            "bands": _run_cli("recommend", str(NGRAM_LOG))["bands"],
        },
        "compare": _run_cli("compare", ngram, draft),
    }


def json_paths(document: str) -> list[str]:
    data = json_outputs()[document]
    opaque = OPAQUE[document] | (
        {"recommendation." + p for p in OPAQUE["recommend"]} if document == "report" else set()
    )
    paths = list(dict.fromkeys(walk(data, opaque)))
    # A list that is empty in one object and holds objects in another is listed once, as `key[]`,
    # so that the order of the groups (which follows the inputs' paths) does not move a row.
    listed = {p.removesuffix("[]") for p in paths if p.endswith("[]")}
    paths = [p for p in paths if p not in listed]
    if document == "report":  # the nested recommendation is `recommend`'s object: listed there
        nested = [p.removeprefix("recommendation.") for p in paths if p.startswith("recommendation.")]
        # The report's inputs are timed: its bands are empty, their keys listed under `recommend`.
        own = {"bands" if p.startswith("bands[]") else p for p in json_paths("recommend")}
        if set(nested) != own:
            raise GenerationError(
                "report's `recommendation` keys differ from `specobs recommend`'s: "
                f"only in report {sorted(set(nested) - own)}, only in recommend {sorted(own - set(nested))}"
            )
        paths = [p for p in paths if not p.startswith("recommendation.")]
    return paths


def _covered(path: str, document: str, paths: set[str]) -> bool:
    """Whether ``path`` is listed through another row: a label of a labelled list, or a key of an
    object documented as having the keys of another (``groups[]`` → ``summary``)."""
    if _is_label(path):
        return True
    return any(
        path.startswith(alias + ".") and original + path.removeprefix(alias) in paths
        for alias, original in SAME_AS[document].items()
    )


@functools.cache
def _labels() -> tuple[str, ...]:
    """The group labels the report was run with: ``--by``'s default."""
    (by,) = [p for p in _cli().commands["report"].params if p.name == "by"]
    return tuple(b.strip() for b in by.default.split(",") if b.strip())


def _is_label(path: str) -> bool:
    return any(path.startswith(p + ".") and path.removeprefix(p + ".") in _labels() for p in LABELLED)


def _describe(document: str, path: str) -> str:
    text = JSON_KEYS[document].get(path, "")
    return text.replace("{labels}", ", ".join(code(label) for label in _labels()))


def json_problems(document: str) -> list[str]:
    """Undescribed keys, descriptions of keys that are gone, and aliases that do not hold."""
    paths = json_paths(document)
    present = set(paths)
    described = JSON_KEYS[document]
    listed = [p for p in paths if not _covered(p, document, present)]
    problems = [
        f"{document} JSON: key {p} has no description (add it to JSON_KEYS in docs/generate.py)"
        for p in listed
        if p not in described
    ]
    problems += [
        f"{document} JSON: described key {p} is not in the output any more (remove it from JSON_KEYS in "
        "docs/generate.py, or choose inputs that show it)"
        for p in described
        if p not in present
    ]
    for alias, original in SAME_AS[document].items():
        mine = {p.removeprefix(alias) for p in present if p.startswith(alias + ".") and not _is_label(p)}
        theirs = {p.removeprefix(original) for p in present if p.startswith(original + ".")}
        if mine != theirs:
            problems.append(
                f"{document} JSON: {alias} is documented as having {original}'s keys, but differs: "
                f"{sorted(mine ^ theirs)}"
            )
    return problems


def json_table(document: str) -> str:
    paths = json_paths(document)
    present = set(paths)
    rows = [(code(p), _describe(document, p)) for p in paths if not _covered(p, document, present)]
    return table(("key", "content"), rows)


def tune_example() -> str:
    """The bundled ``specobs tune`` run as ``-f markdown`` prints it."""
    from specobs.records import TuneResult
    from specobs.render.tuning import tune_to_markdown

    return tune_to_markdown(TuneResult.from_dict(json_outputs()["tune"]))


# --- vLLM releases ----------------------------------------------------------------------------------

#: The release checks' results (specobs.vllm.releases), rewritten by
#: ``python -m tests.support.releases`` and compared exactly by the tests that re-check each release.
RELEASES = DOCS / "vllm-releases.json"


def _names(findings: Iterable[Any]) -> str:
    return ", ".join(f.name.rsplit(".", 1)[-1] if f.kind.value != "metric" else f.name for f in findings)


def _counted(findings: tuple[Any, ...], what: str) -> str:
    """``all 11 hook points`` or ``10 of 11 hook points (missing: x; changed: y (sig))``."""
    from specobs.vllm.releases import Status

    wanted = [f for f in findings if not f.optional]
    present = [f for f in wanted if f.status is Status.PRESENT]
    if len(present) == len(wanted):
        return f"all {len(wanted)} {what}"
    parts = [f"{s.value}: " + ", ".join(f"{f.name}" + (f" {f.detail}" if s is Status.CHANGED and f.detail else "")
                                        for f in wanted if f.status is s)
             for s in (Status.MISSING, Status.CHANGED) if any(f.status is s for f in wanted)]  # fmt: skip
    return f"{len(present)} of {len(wanted)} {what} ({'; '.join(parts)})"


def dimensions_table() -> str:
    """Every dimension of ``specobs.dimensions``: its ``--by`` name, column, origin, exports and roles."""
    from specobs import dimensions

    rows = [
        [code(d.name), code(d.column), d.source, code(d.prometheus) if d.prometheus else "",
         code(d.otel) if d.otel else "", ", ".join(sorted(d.roles)), d.description]
        for d in dimensions.DIMENSIONS
    ]  # fmt: skip
    return table(("`--by`", "column", "from", "Prometheus label", "OpenTelemetry attribute", "roles", "meaning"), rows)


def releases_table() -> str:
    from specobs.vllm.releases import Kind, ReleaseCheck, Status

    rows = []
    for entry in json.loads(RELEASES.read_text(encoding="utf-8"))["releases"]:
        result = ReleaseCheck.from_dict(entry["check"])
        how = {"run": "run in CI", "source": "source only"}[entry["how"]]
        hooks = result.of(Kind.HOOK_POINT) + result.of(Kind.CALL)
        code_names = f"{_counted(hooks, 'hook points and calls')}; {_counted(result.of(Kind.ATTRIBUTE), 'attributes')}"
        methods = result.of(Kind.METHOD)
        gone = [f for f in methods if f.status is not Status.PRESENT]
        config = [
            _counted(result.of(Kind.FIELD), "fields"),
            f"methods: all {len(methods)} known" if not gone else
            f"methods: {len(methods) - len(gone)} of {len(methods)} known ({_names(gone)} not in this release)",
            "rejection_sample_method: " + ", ".join(result.rejection_sample_methods),
        ]  # fmt: skip
        if result.unknown_methods:
            config.append("methods new to specobs: " + ", ".join(result.unknown_methods))
        rows.append((
            f"{result.distribution} {result.version}", f"{how}: {entry['note']}", code_names,
            "; ".join(result.absent) or "nothing", "; ".join(config), _counted(result.of(Kind.METRIC), "series"),
        ))  # fmt: skip
    return table(("release", "checked", "hook points and attributes", "rows lack", "config names", "/metrics names"),
                 rows)  # fmt: skip


# --- the tables and where they go -----------------------------------------------------------------


def _tables() -> dict[str, tuple[str, Callable[[], str]]]:
    """Table name → (the doc it belongs in, how to build it)."""
    out: dict[str, tuple[str, Callable[[], str]]] = {
        "env": ("vllm.md", env_table),
        "vllm-releases": ("vllm.md", releases_table),
        "cli-commands": ("cli.md", cli_commands_table),
        "cli-global": ("cli.md", cli_global_table),
        "exit-codes": ("cli.md", exit_codes_table),
        "pitfalls": ("report.md", pitfalls_table),
        "dimensions": ("report.md", dimensions_table),
        "metrics": ("exporters.md", metrics_table),
        "series-budget": ("exporters.md", series_budget_table),
        "otel-instruments": ("exporters.md", otel_table),
        "report-json": ("report.md", functools.partial(json_table, "report")),
        "recommend-json": ("report.md", functools.partial(json_table, "recommend")),
        "compare-json": ("report.md", functools.partial(json_table, "compare")),
        "tune-json": ("tune.md", functools.partial(json_table, "tune")),
        "tune-example": ("tune.md", tune_example),
    }
    for name in _cli().commands:
        out[f"cli-{name}"] = ("cli.md", functools.partial(cli_command_table, name))
    return out


#: Tables that need an optional dependency: left as they are (with a note) when it is missing.
OPTIONAL = {"otel-instruments": "opentelemetry.sdk"}


def _installed(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


def _diff(old: str, new: str, most: int = 12) -> str:
    """The first lines of a unified diff, indented, to show what changed."""
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), "docs", "code", n=0, lineterm=""))[2:]
    shown = [f"      {line}" for line in lines[:most]]
    if len(lines) > most:
        shown.append(f"      … {len(lines) - most} more line(s)")
    return "\n".join(shown)


def update(check: bool) -> tuple[list[str], list[str]]:
    """Rebuild every table; write the docs unless ``check``. Returns (stale tables, other problems)."""
    tables = _tables()
    stale: list[str] = []
    problems: list[str] = []
    placed: set[str] = set()
    for path in sorted(DOCS.glob("*.md")):
        text = path.read_text(encoding="utf-8")

        def replace(match: re.Match[str], path: Path = path) -> str:
            name = match.group("name")
            placed.add(name)
            if name not in tables:
                problems.append(f"docs/{path.name}: unknown generated table {name!r}")
                return match.group(0)
            home, build = tables[name]
            if home != path.name:
                problems.append(f"docs/{path.name}: table {name!r} belongs in docs/{home}")
            module = OPTIONAL.get(name)
            if module is not None and not _installed(module):
                print(f"note: docs/{path.name} table {name!r} left as it is ({module} is not installed)")
                return match.group(0)
            try:
                body = build()
            except GenerationError as exc:
                problems.append(f"docs/{path.name} table {name!r}: {exc}")
                return match.group(0)
            if body != match.group("body"):
                stale.append(f"docs/{path.name}: table {name!r}\n" + _diff(match.group("body"), body))
            return match.group("open") + body + match.group("close")

        new = MARKER.sub(replace, text)
        if not check and new != text:
            path.write_text(new, encoding="utf-8")
    for name, (home, _) in tables.items():
        if name not in placed:
            problems.append(
                f"docs/{home}: no place for table {name!r}: add `<!-- generated: {name} -->` and "
                "`<!-- end generated -->` where it belongs"
            )
    for document in JSON_KEYS:
        try:
            problems += json_problems(document)
        except GenerationError as exc:
            problems.append(f"{document} JSON: {exc}")
    problems += undocumented_variables()
    return stale, list(dict.fromkeys(problems))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table is stale")
    args = parser.parse_args(argv)
    stale, problems = update(check=args.check)
    for line in problems:
        print(line, file=sys.stderr)
    if args.check and stale:
        print("stale generated tables (the code changed; the docs did not):", file=sys.stderr)
        for line in stale:
            print(f"  {line}", file=sys.stderr)
        print(f"regenerate them with: {REGENERATE}", file=sys.stderr)
    elif stale:
        print("rewrote: " + ", ".join(line.split("\n")[0] for line in stale))
    return 1 if problems or (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
