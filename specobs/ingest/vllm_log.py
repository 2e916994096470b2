"""vLLM server logs, every generation of the speculative-decoding metrics line.

Lines read (matched by field name, in any order, with any prefix before the level):

V1, per logging interval (counts reset after each line), oldest first::

    Speculative metrics: Draft acceptance rate: 1.000, Number of accepted tokens: 66, Number of draft tokens: 66,
    SpecDecoding metrics: Draft acceptance rate: 60.4%, Accepted: 91 tokens, Drafted: 151 tokens
    SpecDecoding metrics: Draft acceptance rate: 15.5%, Mean acceptance length: 1.77, Accepted: 17 tokens,
        Drafted: 110 tokens, Per-position acceptance rate: 0.318, 0.182, 0.091, 0.091, 0.091
    SpecDecoding metrics: Mean acceptance length: 3.46, Accepted throughput: 564.02 tokens/s, Drafted
        throughput: 662.37 tokens/s, Accepted: 1124 tokens, Drafted: 1320 tokens, Per-position acceptance
        rate: 0.877, 0.807, 0.781, Avg Draft acceptance rate: 85.2%

    Engine 000: Avg prompt throughput: 0.4 tokens/s, ..., Running: 8 reqs, Waiting: 0 reqs, ...
        (precedes the SpecDecoding line of the same engine; gives engine index and batch size)

V0, cumulative since engine start::

    Speculative metrics: Draft acceptance rate: 0.642, System efficiency: 0.598, Number of speculative
        tokens: 3, Number of accepted tokens: 8547, Number of draft tokens: 13311, Number of emitted tokens: 10616.
    SpecDecodeWorker stage times: average_time_per_proposal_tok_ms=4.96 scoring_time_ms=54.92
        verification_time_ms=1.20

Counting conventions (see docs/formats.md):
- V1 ``Accepted`` is the accepted prefix; ``num_drafts`` is not printed, so it is derived as
  accepted / Σ per-position rates (or accepted / (mean acceptance length − 1)) and flagged.
- V0 ``Number of accepted tokens`` counts every accepted position, even after a rejection.
  The accepted prefix is emitted − drafts, with drafts = draft tokens / k; that is what
  specobs stores, and V0's own rate is kept as ``reported_draft_acceptance_rate``.
- V0 stage times are the wall times of one step, so each becomes a single timed step.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from typing import Any

import polars as pl

from specobs.errors import Skipped
from specobs.formulas import acceptance_rate_or_none
from specobs.ingest import columns as C
from specobs.ingest.columns import reference_year
from specobs.ingest.metadata_files import settings
from specobs.ingest.registry import Progress, Read, Reader
from specobs.ingest.scan import Fields, FoundLines, find_lines
from specobs.ingest.source import Source
from specobs.records import RunMetadata, SourceReport

FORMAT = "vllm-log"

NEEDLES = (
    b"SpecDecoding metrics:",
    b"Speculative metrics:",
    b"Avg prompt throughput",
    b"SpecDecodeWorker stage times",
    b"speculative_config",
)

#: What a line holding NEEDLES[i] is (the legacy needle and the config one are checked further).
_NEEDLE_KINDS = {0: "spec", 2: "stats", 3: "stages"}
_CONFIG_LINE = r"speculative_config\s*[=:]\s*(?:SpeculativeConfig\(|\{|None\b)"

# Every numeric field is anchored: its value must run up to the next comma (or the end of the
# line), so "Accepted: 11x4 tokens" or "0.877, ," match nothing and the line is skipped.
_N = C.DECIMAL
_ACCEPTED = r"(?:Accepted|Number of accepted tokens): ([0-9]+)(?: tokens)?" + C.END
_DRAFTED = r"(?:Drafted|Number of draft tokens(?: tokens)?): ([0-9]+)(?: tokens)?" + C.END
_PER_POS = r"Per-position acceptance rate: (" + _N + r"(?:, *" + _N + r")*)(?:,?" + C.MARKUP + r"\s*$|, *[A-Z])"
_MAL = r"Mean acceptance length: (" + _N + ")" + C.END
_THROUGHPUT = r"Accepted throughput: (" + _N + ") tokens/s" + C.END
_DRAFT_RATE = r"Draft acceptance rate: (" + _N + "%?)" + C.END
_K = r"Number of speculative tokens: ([0-9]+)" + C.END
_EFFICIENCY = r"System efficiency: (" + _N + ")" + C.END
_EMITTED = r"Number of emitted tokens(?: tokens)?: ([0-9]+)" + C.END
#: (label, anchored pattern) of every numeric field of the spec lines: a label with a value that
#: does not match makes the line malformed.
_V1_CHECKS = [
    ("Accepted:", _ACCEPTED),
    ("Number of accepted tokens:", _ACCEPTED),
    ("Drafted:", _DRAFTED),
    ("Number of draft tokens", _DRAFTED),
    ("Mean acceptance length:", _MAL),
    ("Per-position acceptance rate:", _PER_POS),
    ("Accepted throughput:", _THROUGHPUT),
    ("Draft acceptance rate:", _DRAFT_RATE),
]
_V0_CHECKS = [
    *_V1_CHECKS,
    ("Number of speculative tokens:", _K),
    ("Number of emitted tokens", _EMITTED),
    ("System efficiency:", _EFFICIENCY),
]
#: The parsed columns of those fields: a line where all of them parsed needs no label check.
_V1_VALUES = ["accepted", "drafted", "mal", "per_pos_rates", "accepted_throughput"]
_V0_VALUES = ["accepted", "drafted", "k", "emitted", "efficiency"]
#: Slack for rates printed with three decimals.
_RATE_SLACK = 1e-9
# The optional "(Name pid=N) " and vLLM's own "LEVEL MM-DD HH:MM:SS": one regex pass for both.
_PREFIX = (
    r"(?:\(([A-Za-z0-9_]+) pid=([0-9]+)\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) +"
    r"([0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2})"
)


def scan_fields(head: bytes) -> Fields:
    """Per-line fields for ``scan.find_lines``, by needle index (None: every line found).

    Regexes run only on the lines of their needle; the collector-date and compose-service
    regexes only when the first bytes of the input show such prefixes.
    """
    text = pl.col("text")
    prefix = text.str.extract_groups(_PREFIX)
    every_line = {
        "process_name": prefix.struct.field("1"),
        "pid": prefix.struct.field("2"),
        "stamp": prefix.struct.field("3"),
    }
    if re.search(rb"(?m)^(?:[A-Za-z][\w.-]*\s+\|\s)?\[?\d{4}-\d\d-\d\d[ T]\d\d:", head):
        every_line["full_ts"] = C.full_date_timestamp(text)
    if re.search(rb"(?m)^[A-Za-z][\w.-]*\s+\|\s", head):
        every_line["service"] = text.str.extract(C.COMPOSE_SERVICE, 1)
    counts = {"accepted": C.field_int(text, _ACCEPTED), "drafted": C.field_int(text, _DRAFTED)}
    return {
        None: every_line,
        0: {
            **counts,
            "mal": C.field_float(text, _MAL),
            "per_pos_rates": _rates(text),
            "accepted_throughput": C.field_float(text, _THROUGHPUT),
        },
        1: {
            **counts,
            "legacy_v0": text.str.contains(r"System efficiency|Number of emitted tokens|Number of speculative tokens"),
            "k": C.field_int(text, _K),
            "emitted": C.field_int(text, _EMITTED),
            "efficiency": C.field_float(text, _EFFICIENCY),
        },
        2: {
            "stats_engine": C.field_int(text, r"Engine ([0-9]+):"),
            "stats_aggregated": text.str.contains("Engines Aggregated:", literal=True),
            "stats_batch": C.field_int(text, r"Running: ([0-9]+) reqs"),
            "gen_throughput": C.field_float(text, r"Avg generation throughput: (" + _N + r") tokens/s"),
        },
        3: {
            "proposal_per_token": C.field_float(text, r"average_time_per_proposal_tok_ms=([0-9.]+)") / 1000,
            "scoring": C.field_float(text, r"scoring_time_ms=([0-9.]+)") / 1000,
            "verification": C.field_float(text, r"verification_time_ms=([0-9.]+)") / 1000,
        },
    }


def _rates(text: pl.Expr) -> pl.Expr:
    """``C.float_list(text, _PER_POS)`` at a third of its cost (0.3 → 0.1 s of CPU for the 572k
    SpecDecoding lines of a 1 GB log: its per-item expression was the dearest step after the regex).

    The capture holds only numbers and ``nan`` separated by commas and spaces (``_PER_POS`` says
    so), so dropping the spaces and the ``nan``s (an empty item casts to null, as ``float_list``
    makes ``nan``) and casting the split list gives the same list without a per-item expression.
    """
    bare = text.str.extract(_PER_POS, 1).str.replace_all(" ", "", literal=True).str.replace_all("nan", "", literal=True)
    return bare.str.split(",").cast(pl.List(pl.Float64), strict=False)


_LINE_COLUMNS: dict[str, pl.DataType] = {
    "process_name": pl.String(), "pid": pl.String(), "stamp": pl.String(), "full_ts": pl.Float64(),
    "service": pl.String(), "accepted": pl.Int64(), "drafted": pl.Int64(), "mal": pl.Float64(),
    "per_pos_rates": pl.List(pl.Float64), "accepted_throughput": pl.Float64(), "legacy_v0": pl.Boolean(),
    "k": pl.Int64(), "emitted": pl.Int64(), "stats_engine": pl.Int64(), "stats_aggregated": pl.Boolean(),
    "stats_batch": pl.Int64(), "gen_throughput": pl.Float64(), "proposal_per_token": pl.Float64(),
    "scoring": pl.Float64(), "verification": pl.Float64(), "efficiency": pl.Float64(),
}  # fmt: skip


def parse(found: FoundLines, source: str, *, year: int, reference: float | None) -> tuple[pl.DataFrame, list[Skipped]]:
    """Windows from the lines and fields ``scan.find_lines`` found for :data:`NEEDLES`."""
    lines = found.frame
    missing = [pl.lit(None, dtype).alias(name) for name, dtype in _LINE_COLUMNS.items() if name not in lines.columns]
    lines = lines.with_columns(missing)
    text = pl.col("text")
    lines = lines.with_columns(
        # The scanner says which needle each line holds (see NEEDLES); only the legacy
        # "Speculative metrics:" needle needs a look at the fields to tell V0 from early V1.
        kind=pl.when(pl.col("needle") == 1)
        .then(pl.when(pl.col("legacy_v0")).then(pl.lit("spec_v0")).otherwise(pl.lit("spec")))
        .when(pl.col("needle") == 4)
        .then(pl.when(text.str.contains(_CONFIG_LINE)).then(pl.lit("config")))
        .otherwise(pl.col("needle").replace_strict(_NEEDLE_KINDS, default=None, return_dtype=pl.String)),
        process=pl.concat_str(
            [pl.col("service"), pl.col("process_name") + " pid=" + pl.col("pid")], separator=" ", ignore_nulls=True
        ).replace("", None),
    ).filter(pl.col("kind").is_not_null())
    lines = C.with_vllm_timestamp(lines, year=year, reference=reference)

    config = _config(lines)
    skipped: list[Skipped] = []
    v1 = _v1_windows(lines, config, source, skipped)
    taken = v1["stats_line"] if "stats_line" in v1.columns else pl.Series("stats_line", [], pl.Int64)
    quiet = _stats_windows(lines, config, taken, source)
    v0 = _v0_windows(lines, config, source, skipped)
    v1 = _with_generated(pl.concat([_finished(v1), _finished(quiet)], how="vertical"), lines, taken)
    # Labelled together: whether several processes share the file is a fact of the file.
    v1 = C.finish(v1.with_columns(source=_source_label(source), run_id=_source_label(source))).sort("source_line")
    windows = pl.concat([v1, C.finish(v0)], how="vertical")
    return windows, skipped


#: Columns a V1 window carries until its generated tokens are known (see :func:`_with_generated`).
_CARRIED = {"stats_line": pl.Int64(), "spec_seconds": pl.Float64(), "process": pl.String()}


def _finished(frame: pl.DataFrame) -> pl.DataFrame:
    """``C.finish`` that keeps :data:`_CARRIED`."""
    if frame.is_empty():
        return C.finish(frame).with_columns([pl.lit(None, t).alias(c) for c, t in _CARRIED.items()])
    carried = [(pl.col(c) if c in frame.columns else pl.lit(None)).cast(t).alias(c) for c, t in _CARRIED.items()]
    return pl.concat([C.finish(frame), frame.with_columns(carried).select(*_CARRIED)], how="horizontal")


def _with_generated(windows: pl.DataFrame, lines: pl.DataFrame, taken: pl.Series) -> pl.DataFrame:
    """``num_generated_tokens`` of each window from its stats line: the printed generation
    throughput × the interval it covers. The throughput itself is kept only for an interval whose
    load held (:func:`_load_changed`).

    The interval is the time since the engine's previous stats line. When that line too had a
    SpecDecoding line, both loggers were reset at the same moment, so the spec line's own
    accepted / accepted-throughput gives it to the millisecond; otherwise it is the difference of
    the two lines' timestamps (whole seconds: the error cancels over consecutive intervals).
    """
    if windows.is_empty():
        return windows.drop("stats_line", "spec_seconds")
    stats = (
        lines.filter(pl.col("kind") == "stats")
        .sort("line")
        .select(
            stats_line="line",
            _seconds=pl.col("ts") - pl.col("ts").shift(1).over([pl.col("process").fill_null(""), "stats_engine"]),
            _chained=pl.col("line")
            .shift(1)
            .over([pl.col("process").fill_null(""), "stats_engine"])
            .is_in(taken.implode()),
            _unsteady=_load_changed(
                pl.col("stats_batch").shift(1).over([pl.col("process").fill_null(""), "stats_engine"]),
                pl.col("stats_batch"),
            ),
        )
    )
    precise = pl.col("_chained") & pl.col("spec_seconds").is_not_null()
    seconds = pl.when(precise).then(pl.col("spec_seconds")).otherwise(pl.col("_seconds"))
    # A rate no engine prints (1.8e22 tokens/s in a damaged line) overflows: no count, not a crash.
    generated = (pl.col("generation_tokens_per_second") * seconds).round(0).cast(pl.Int64, strict=False)
    return (
        windows.join(stats, on="stats_line", how="left")
        .with_columns(
            num_generated_tokens=pl.when(seconds > 0).then(generated),
            generation_tokens_per_second=pl.when(~pl.col("_unsteady")).then(pl.col("generation_tokens_per_second")),
        )
        .drop("_seconds", "_chained", "_unsteady", "stats_line", "spec_seconds")
    )


def _load_changed(before: pl.Expr, after: pl.Expr) -> pl.Expr:
    """Whether the running requests at an interval's two ends (the stats lines before and at it)
    differ by more than :data:`LOAD_HELD` times, or none ran at its start. Such an interval's
    throughput is not the throughput of the requests running at its end: one that began idle
    mixes in idle time; one at the end of a burst (8 running, then 1) generated at the burst's
    rate while its closing snapshot says 1. Small changes (8 and 7: a request just finished,
    the next not yet admitted) keep it."""
    before, after = before.fill_null(0), after.fill_null(0)
    ratio = pl.max_horizontal(before, after) / pl.min_horizontal(before, after)
    return (before <= 0) | ((after > 0) & (ratio > LOAD_HELD))


#: Most the running requests may change across an interval whose throughput is kept (× or ÷).
LOAD_HELD = 1.5


def _stats_windows(lines: pl.DataFrame, config: pl.DataFrame, taken: pl.Series, source: str) -> pl.DataFrame:
    """Windows of the busy intervals no speculative line speaks for, from their V1 stats lines.

    vLLM prints ``Engine NNN: ... Avg generation throughput: X tokens/s, Running: N reqs`` every
    interval, and the SpecDecoding line only when something was drafted in it. So a stats line
    without one is, in a speculative engine, an interval that drafted nothing (its counts are 0),
    and in a plain engine (no speculative config) the plain engine's own throughput: the
    baseline a speculative server's log is measured against. Idle intervals (nothing generated,
    nothing running) are left out; so are lines of engines the log does not configure.
    """
    stats = lines.filter((pl.col("kind") == "stats") & pl.col("stats_engine").is_not_null())
    if stats.is_empty():
        return stats
    stats = stats.sort("line").with_columns(
        process_filled=pl.col("process").fill_null(""),
        start_ts=pl.col("ts").shift(1).over([pl.col("process").fill_null(""), "stats_engine"]),
    )
    busy = (pl.col("gen_throughput").fill_null(0) > 0) | (pl.col("stats_batch").fill_null(0) > 0)
    quiet = stats.filter(busy & ~pl.col("line").is_in(taken.implode()) & ~pl.col("stats_aggregated").fill_null(False))
    if quiet.is_empty():
        return quiet
    quiet = _attach_config(quiet, config)
    speculative = pl.col("config_k").fill_null(0) > 0
    plain = pl.col("method").is_null() & (pl.col("config_k").fill_null(0) == 0) & (pl.col("model").is_not_null())
    zero = pl.when(speculative).then(pl.lit(0, pl.Int64))
    return quiet.select(
        **_interval_columns(source),
        start_ts="start_ts",
        engine="stats_engine",
        num_spec_tokens=pl.when(speculative).then(pl.col("config_k")).when(plain).then(pl.lit(0, pl.Int64)),
        num_drafts=zero,
        num_draft_tokens=zero,
        num_accepted_tokens=zero,
        num_accepted_tokens_per_pos=pl.when(speculative).then(
            pl.int_ranges(0, pl.col("config_k")).list.eval(pl.element() * 0)
        ),
        stats_line="line",
    )


def _interval_columns(source: str) -> dict[str, pl.Expr | str]:
    """What every V1 interval window carries besides its counts: where it came from, the labels of
    its engine's start-up line, the running requests at the line and the engine's own throughput."""
    return {
        "end_ts": "ts",
        "source": _source_label(source),
        "source_line": "line",
        "source_format": pl.lit(FORMAT),
        "run_id": _source_label(source),
        "model": "model",
        "method": "method",
        "draft_model": "draft_model",
        "vllm_version": "vllm_version",
        "graph_mode": "graph_mode",
        # A snapshot at log time: 0 means the batch drained before the line was printed.
        "batch_size": pl.when(pl.col("stats_batch") > 0).then(pl.col("stats_batch")),
        "counters": pl.lit("interval"),
        "process": "process",
        "generation_tokens_per_second": "gen_throughput",
    }


def _config(lines: pl.DataFrame) -> pl.DataFrame:
    """Model, method, draft model and k from engine start-up lines, by line number.

    Reads both ``Initializing a V1 LLM engine ... with config: model='m', speculative_config=
    SpeculativeConfig(method='eagle', model='d', num_spec_tokens=3), ..., served_model_name=s``
    and ``non-default args: {'model': 'm', 'served_model_name': ['s'], 'speculative_config':
    {'method': 'ngram', 'num_speculative_tokens': 3}}``.
    """
    text = pl.col("text")
    spec_part = text.str.extract(r"speculative_config'?\s*[=:]\s*((?:SpeculativeConfig\([^)]*\))|\{[^}]*\})", 1)
    return (
        lines.filter(pl.col("kind") == "config")
        .select(
            "line",
            model=pl.coalesce(
                text.str.extract(r"served_model_name=([^,\s)]+)", 1),
                text.str.extract(r"'served_model_name': \['([^']*)'", 1),
                text.str.extract(r"'served_model_name': '([^']*)'", 1),
                text.str.extract(r"with config: model='([^']*)'", 1),
                text.str.extract(r"'model': '([^']*)'", 1),
            ),
            method=spec_part.str.extract(r"method'?\s*[=:]\s*'([A-Za-z0-9_]+)'", 1),
            draft_model=spec_part.str.extract(r"(?-u:\b)model'?\s*[=:]\s*'([^']*)'", 1),
            # A plain engine's start line says ``speculative_config=None``: k = 0, not unknown.
            num_spec_tokens=pl.when(text.str.contains("speculative_config=None", literal=True))
            .then(pl.lit(0, pl.Int64))
            .otherwise(C.field_int(spec_part, r"num_spec(?:ulative)?_tokens'?\s*[=:]\s*([0-9]+)")),
            # The run metadata's labels (``run_metadata`` reads the rest of these lines).
            vllm_version=text.str.extract(r"Initializing a V1 LLM engine \(v([^)\s]+)\)", 1),
            graph_mode=pl.when(text.str.contains("enforce_eager=True", literal=True))
            .then(pl.lit("eager"))
            .otherwise(text.str.extract(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)", 1).str.to_lowercase())
            .replace("none", "eager"),
        )
        .sort("line")
    )


_ENGINE_START = re.compile(r"Initializing a V1 LLM engine \(v([^)\s]+)\) with config: (.*)")
_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})\s*$")
_START_FIELDS = {
    "dtype": r"(?<![\w_])dtype=(?:torch\.)?(\w+)",
    "tensor_parallel_size": r"tensor_parallel_size=(\d+)",
    "pipeline_parallel_size": r"pipeline_parallel_size=(\d+)",
    "data_parallel_size": r"(?<![\w_])data_parallel_size=(\d+)",
    "kv_cache_dtype": r"kv_cache_dtype=(\w+)",
    "enforce_eager": r"enforce_eager=(True|False)",
    "cudagraph_mode": r"'cudagraph_mode': <CUDAGraphMode\.(\w+)",
    "platform": r"device_config=(\w+)",
    "model": r"served_model_name=([^,\s)]+)",
    "model_path": r"^model='([^']*)'",
    "method": r"SpeculativeConfig\(method='(\w+)'",
    "draft_model": r"SpeculativeConfig\(method='\w+', model='([^']*)'",
    "num_speculative_tokens": r"SpeculativeConfig\([^)]*num_spec_tokens=(\d+)",
}


def run_metadata(found: FoundLines, source: str) -> list[RunMetadata]:
    """Run metadata from engine start-up lines: one record per ``Initializing a V1 LLM engine``
    line (vLLM's version, dtypes, parallelism, graph mode, the target's path, method, draft model
    and k), with the user's own settings from the ``non-default args`` line printed before it
    (its whole ``speculative_config``: prompt lookup bounds, the configured batch-size schedule,
    which vLLM drops with data parallel > 1, the rejection sampler). The attention backend and
    device are not in these lines: left unknown.
    """

    frame = found.frame
    if frame.is_empty():
        return []
    config = frame.filter(pl.col("needle") == NEEDLES.index(b"speculative_config"))
    out: list[RunMetadata] = []
    args: dict[str, Any] = {}
    for line, text in config.select("line", "text").iter_rows():
        non_default = _NON_DEFAULT.search(text)
        if non_default is not None:
            args = _literal(non_default.group(1))
            continue
        start = _ENGINE_START.search(text)
        if start is None:
            continue
        body = start.group(2)
        got = {name: m.group(1) for name, pattern in _START_FIELDS.items() if (m := re.search(pattern, body))}
        found_spec, args = args.get("speculative_config"), {}  # one engine's arguments
        if isinstance(found_spec, str):  # as typed on the command line, when vLLM kept the JSON text
            found_spec = _json_object(found_spec)
        spec: dict[str, Any] = found_spec if isinstance(found_spec, dict) else {}
        configured = _schedule(spec.get("num_speculative_tokens_per_batch_size"))
        dp = int(got["data_parallel_size"]) if "data_parallel_size" in got else None
        graphs = got.get("cudagraph_mode")
        eager = got.get("enforce_eager") == "True" or graphs == "NONE"
        out.append(RunMetadata(
            run_id=source, model=got.get("model"), model_path=got.get("model_path"), method=got.get("method"),
            draft_model=got.get("draft_model"),
            # The user's own settings; none shown without a non-default args line (offline LLM).
            speculative_config=settings(spec) if isinstance(found_spec, dict) else None,
            num_speculative_tokens=(
                int(got["num_speculative_tokens"]) if "num_speculative_tokens" in got
                else 0 if "speculative_config=None" in body else None
            ),
            schedule_configured=configured,
            # vLLM's own rule (VllmConfig._maybe_disable_dynamic_sd_for_data_parallel)
            schedule=configured if configured and (dp or 1) <= 1 else None,
            rejection_sample_method=_text(spec.get("rejection_sample_method")),
            draft_sample_method=_text(spec.get("draft_sample_method")),
            vllm_version=start.group(1), platform=got.get("platform"),
            graph_mode="eager" if eager else graphs.lower() if graphs else None,
            tensor_parallel_size=int(got["tensor_parallel_size"]) if "tensor_parallel_size" in got else None,
            pipeline_parallel_size=(
                int(got["pipeline_parallel_size"]) if "pipeline_parallel_size" in got else None
            ),
            data_parallel_size=dp, dtype=got.get("dtype"), kv_cache_dtype=got.get("kv_cache_dtype"),
            source=f"{source}:{line}",
        ))  # fmt: skip
    return out


def _with_run_ids(metadata: list[RunMetadata], windows: pl.DataFrame) -> list[RunMetadata]:
    """Each start-up record with the run id of the first window after its line: a log that
    several server processes wrote (a restart) labels each process's windows apart
    (``file [APIServer pid=N]``), and an engine's start-up line comes before its windows, so a
    restart's metadata joins its own windows."""
    if not metadata or windows.is_empty():
        return metadata
    ordered = windows.select("source_line", "run_id").drop_nulls().sort("source_line")
    lines = ordered["source_line"].to_list()
    runs = ordered["run_id"].to_list()
    out = []
    for m in metadata:
        line = int(m.source.rsplit(":", 1)[1]) if m.source and ":" in m.source else None
        at = bisect.bisect_right(lines, line) if line is not None else len(lines)
        out.append(dataclasses.replace(m, run_id=runs[at]) if at < len(runs) else m)
    return out


def _literal(text: str) -> dict[str, Any]:
    """A Python dict literal as vLLM prints its arguments (``{'model': 'm', ...}``); {} when it
    is not one (an object repr inside, a cut line)."""
    import ast

    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _json_object(text: str) -> dict[str, Any] | None:
    import json

    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _schedule(value: object) -> tuple[tuple[int, int, int], ...] | None:
    if not isinstance(value, list | tuple) or not value:
        return None
    try:
        return tuple((int(a), int(b), int(k)) for a, b, k in value)
    except (TypeError, ValueError):
        return None


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _attach_config(windows: pl.DataFrame, config: pl.DataFrame) -> pl.DataFrame:
    """The most recent start-up config before each window (or the first one after it)."""
    if config.is_empty():
        return windows.with_columns(
            model=pl.lit(None, pl.String),
            method=pl.lit(None, pl.String),
            draft_model=pl.lit(None, pl.String),
            config_k=pl.lit(None, pl.Int64),
            vllm_version=pl.lit(None, pl.String),
            graph_mode=pl.lit(None, pl.String),
        )
    config = config.rename({"line": "config_line", "num_spec_tokens": "config_k"})
    before = windows.sort("line").join_asof(config, left_on="line", right_on="config_line", strategy="backward")
    after = windows.sort("line").join_asof(config, left_on="line", right_on="config_line", strategy="forward")
    cols = ["model", "method", "draft_model", "config_k", "vllm_version", "graph_mode"]
    # One config, whole: the one before, else the first after (a plain engine's null method must
    # not be filled in from the next engine's start line).
    none_before = pl.col("config_line").is_null()
    return before.with_columns([pl.when(none_before).then(after[c]).otherwise(pl.col(c)).alias(c) for c in cols]).drop(
        "config_line"
    )


#: What a spec line takes from its engine's stats line (``stats_line``: which one it took).
_STATS_PICKED = ("stats_engine", "stats_aggregated", "stats_batch", "gen_throughput", "stats_line")


def _attach_stats(spec: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """Engine index and running requests from the stats line printed with each spec line.

    vLLM prints ``Engine NNN: ... Running: N reqs`` and then that engine's SpecDecoding line,
    so within one process a spec line takes the stats line just before it. When a process's
    first metric line is a spec line directly followed by a stats line of the same second
    (some collectors reorder lines within a second), the whole process is read the other way
    round: each spec line takes the stats line just after it.
    """
    stats = lines.filter(pl.col("kind") == "stats").select(
        "line", "kind", "ts", "process", "stats_engine", "stats_aggregated", "stats_batch", "gen_throughput",
        stats_line="line",
    )  # fmt: skip
    ordered = pl.concat([stats, spec.select("line", "kind", "ts", "process")], how="diagonal").sort("line")
    several = ordered["process"].n_unique() > 1

    def shifted(name: str, n: int) -> pl.Expr:
        return pl.col(name).shift(n).over("process") if several else pl.col(name).shift(n)

    first = (pl.int_range(pl.len()).over("process") if several else pl.int_range(pl.len())) == 0
    staged = (
        ordered.lazy()
        .with_columns(pl.col("process").fill_null(""))
        .with_columns(
            _prev_is_stats=shifted("kind", 1) == "stats",
            _next_is_stats=(shifted("kind", -1) == "stats") & (shifted("ts", -1) == pl.col("ts")),
            _first=first,
        )
        .with_columns(
            _reversed=(pl.col("_first") & (pl.col("kind") == "spec") & pl.col("_next_is_stats")).any().over("process")
        )
    )
    picked = [
        pl.when(pl.col("_reversed") & pl.col("_next_is_stats"))
        .then(shifted(name, -1))
        .when(~pl.col("_reversed") & pl.col("_prev_is_stats"))
        .then(shifted(name, 1))
        .otherwise(None)
        .alias(name)
        for name in _STATS_PICKED
    ]
    attributed = staged.with_columns(picked).filter(pl.col("kind") == "spec").select("line", *_STATS_PICKED).collect()
    return spec.join(attributed, on="line", how="left")


def _v1_windows(lines: pl.DataFrame, config: pl.DataFrame, source: str, skipped: list[Skipped]) -> pl.DataFrame:
    spec = _with_malformed(lines.filter(pl.col("kind") == "spec"), _V1_CHECKS, _V1_VALUES)
    spec = spec.drop("text", "stats_engine", "stats_aggregated", "stats_batch", "gen_throughput")
    missing = (
        pl.col("accepted").is_null() | pl.col("drafted").is_null(),
        _with_detail("speculative metrics line without accepted and drafted token counts"),
    )
    malformed = (pl.col("malformed").is_not_null(), pl.col("malformed"))
    spec = _drop_invalid(spec, [missing, malformed, *_invalid("accepted")], source, skipped)
    if spec.is_empty():
        return spec
    spec = _attach_stats(spec, lines)
    spec = _attach_config(spec, config)
    too_long = (
        pl.col("per_pos_rates").list.len() > pl.col("config_k"),
        pl.format("{} per-position rates for k = {}", pl.col("per_pos_rates").list.len(), pl.col("config_k")),
    )
    spec = _drop_invalid(spec, [too_long], source, skipped)
    if spec.is_empty():
        return spec

    rate_sum = pl.col("per_pos_rates").list.sum()
    derived = (
        pl.when(rate_sum > 0)
        .then(pl.col("accepted") / rate_sum)
        .when(pl.col("mal") > 1)
        .then(pl.col("accepted") / (pl.col("mal") - 1))
        .otherwise(None)
        .round(0)
        .cast(pl.Int64)
    )
    spec = spec.with_columns(num_drafts=derived, num_drafts_derived=pl.when(derived.is_not_null()).then(True))
    spec = spec.with_columns(
        num_accepted_tokens_per_pos=pl.when(pl.col("num_drafts").is_not_null())
        .then(_scale_list(pl.col("per_pos_rates"), pl.col("num_drafts")))
        .otherwise(None),
    )
    prev_end = pl.col("ts").shift(1).over(["process_filled", "engine_filled"])
    interval = pl.col("accepted") / pl.col("accepted_throughput")
    spec = spec.sort("line").with_columns(
        process_filled=pl.col("process").fill_null(""),
        engine_filled=pl.col("stats_engine").fill_null(-1),
    )
    return spec.select(
        **_interval_columns(source),
        start_ts=pl.when((pl.col("accepted_throughput") > 0) & (pl.col("accepted") > 0))
        .then(pl.col("ts") - interval)
        .otherwise(prev_end),
        engine=pl.when(pl.col("stats_aggregated").fill_null(False))
        .then(None)
        .otherwise(pl.col("stats_engine").fill_null(0)),
        num_spec_tokens=pl.coalesce(pl.col("config_k"), pl.col("per_pos_rates").list.len().cast(pl.Int64)),
        num_drafts="num_drafts",
        num_draft_tokens="drafted",
        num_accepted_tokens="accepted",
        num_accepted_tokens_per_pos="num_accepted_tokens_per_pos",
        reported_mean_acceptance_length="mal",
        num_drafts_derived="num_drafts_derived",
        stats_line="stats_line",
        spec_seconds=pl.when((pl.col("accepted_throughput") > 0) & (pl.col("accepted") > 0)).then(interval),
    )


def _with_malformed(spec: pl.DataFrame, checks: list[tuple[str, str]], values: list[str]) -> pl.DataFrame:
    """Add ``malformed`` (see :func:`columns.malformed`).

    A field that parsed is complete (its pattern is anchored), so only the lines where some
    field came out null (absent, ``nan`` or malformed) need their labels looked at: on a
    well-formed log that is few lines, which keeps the check off the fast path.
    """
    suspect = pl.any_horizontal([pl.col(c).is_null() for c in values])
    if not spec.select(suspect.any()).item():
        return spec.with_columns(malformed=pl.lit(None, pl.String))
    fine = spec.filter(~suspect).with_columns(malformed=pl.lit(None, pl.String))
    looked_at = spec.filter(suspect).with_columns(malformed=C.malformed(pl.col("text"), checks))
    return pl.concat([fine, looked_at]).sort("line")


def _with_detail(why: str) -> pl.Expr:
    """``why``, followed by the malformed field when there is one."""
    return pl.concat_str([pl.lit(why), pl.lit(" (") + pl.col("malformed") + pl.lit(")")], ignore_nulls=True)


def _invalid(accepted: str) -> list[tuple[pl.Expr, pl.Expr]]:
    """Why a spec line whose fields all parsed is still not a record (null when it is one):
    accepted above drafted, a rate outside [0, 1], per-position rates that rise, a mean
    acceptance length below 1 or a value too large to be finite."""
    rates = pl.col("per_pos_rates")
    reasons = [
        (
            pl.col(accepted) > pl.col("drafted"),
            pl.format("accepted tokens ({}) exceed drafted tokens ({})", pl.col(accepted), pl.col("drafted")),
        ),
        ((rates.list.max() > 1) | (rates.list.min() < 0), pl.lit("a per-position acceptance rate outside [0, 1]")),
        (
            # rate[i + 1] − rate[i] element-wise (list arithmetic: an order faster than list.diff).
            (rates.list.slice(1) - rates.list.head(rates.list.len() - 1)).list.max() > _RATE_SLACK,
            pl.lit("per-position acceptance rates rise with the position (an accepted prefix cannot)"),
        ),
        (pl.col("mal") < 1, pl.lit("mean acceptance length below 1")),
        (
            pl.col("mal").is_infinite() | pl.col("accepted_throughput").is_infinite(),
            pl.lit("a number too large to be finite"),
        ),
    ]
    return reasons


#: A condition that makes a line invalid, and the reason given for it.
Check = tuple[pl.Expr, pl.Expr]


def _drop_invalid(spec: pl.DataFrame, checks: list[Check], source: str, skipped: list[Skipped]) -> pl.DataFrame:
    """Skip (and report) the lines that fail one of ``checks`` (the first one names the reason);
    keep the others whole. Reasons are worded only for the lines that fail."""
    spec = spec.with_columns(_bad=pl.any_horizontal([condition.fill_null(False) for condition, _ in checks]))
    if not spec["_bad"].any():
        return spec.drop("_bad")
    why = pl.lit(None, pl.String)
    for condition, reason in reversed(checks):
        why = pl.when(condition.fill_null(False)).then(reason).otherwise(why)
    bad = spec.filter(pl.col("_bad")).select("line", why.alias("_why"))
    skipped.extend(Skipped(source, line, reason) for line, reason in bad.iter_rows())
    return spec.filter(~pl.col("_bad")).drop("_bad")


def _scale_list(rates: pl.Expr, drafts: pl.Expr) -> pl.Expr:
    """``round(rate_i × drafts)`` element-wise: per-position counts from printed rates."""
    return (rates * drafts).list.eval(pl.element().round(0).cast(pl.Int64))


def _v0_windows(lines: pl.DataFrame, config: pl.DataFrame, source: str, skipped: list[Skipped]) -> pl.DataFrame:
    spec = _with_malformed(lines.filter(pl.col("kind") == "spec_v0"), _V0_CHECKS, _V0_VALUES)
    spec = spec.rename({"accepted": "accepted_raw"})
    required = ["k", "accepted_raw", "drafted", "emitted"]
    missing = (
        pl.any_horizontal([pl.col(c).is_null() for c in required]) | (pl.col("k") <= 0),
        _with_detail("V0 speculative metrics line without k, accepted, draft or emitted counts"),
    )
    malformed = (pl.col("malformed").is_not_null(), pl.col("malformed"))
    spec = _drop_invalid(spec, [missing, malformed, *_invalid("accepted_raw")], source, skipped)
    if spec.is_empty():
        return spec
    spec = (
        _attach_config(spec, config)
        .with_columns(process=pl.col("process").fill_null(""), end_ts=pl.col("ts"))
        .sort("line")
    )
    windows = C.windows_from_cumulative(spec, ["process"], ["accepted_raw", "drafted", "emitted"])
    windows = windows.with_columns(num_drafts=(pl.col("drafted") // pl.col("k")))
    windows = _attach_stage_times(windows, lines)
    return windows.select(
        "start_ts",
        "end_ts",
        source=_source_label(source),
        source_line="line",
        source_format=pl.lit(FORMAT),
        run_id=_source_label(source),
        engine=pl.lit(0, pl.Int64),
        model="model",
        method="method",
        draft_model="draft_model",
        batch_size="batch",
        num_spec_tokens="k",
        num_drafts="num_drafts",
        num_draft_tokens="drafted",
        num_accepted_tokens=(pl.col("emitted") - pl.col("num_drafts")).clip(lower_bound=0),
        num_generated_tokens="emitted",
        draft_seconds="draft_seconds",
        verify_seconds="verify_seconds",
        num_timed_steps="num_timed_steps",
        reported_draft_acceptance_rate=acceptance_rate_or_none(pl.col("accepted_raw"), pl.col("drafted")),
        num_drafts_derived=pl.lit(True),
        counters=pl.lit("cumulative"),
        process="process",
    )


def _attach_stage_times(windows: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """Running requests from the stats line before each metrics line, and V0 stage times.

    Each ``SpecDecodeWorker stage times`` line is the timing of one step; it is given to the
    metrics line nearest to it, so no step is counted twice.
    """
    stats = lines.filter(pl.col("kind") == "stats").select(stats_line="line", batch="stats_batch").sort("stats_line")
    windows = windows.sort("line").join_asof(stats, left_on="line", right_on="stats_line", strategy="backward")
    stages = (
        lines.filter(pl.col("kind") == "stages")
        .select(
            stage_line="line", proposal_per_token="proposal_per_token", scoring="scoring", verification="verification"
        )
        .sort("stage_line")
    )
    owners = windows.select(owner="line", k="k").sort("owner")
    per_window = (
        stages.join_asof(owners, left_on="stage_line", right_on="owner", strategy="nearest")
        .group_by("owner")
        .agg(
            # The proposal time is printed per draft token; one step drafts k tokens.
            draft_seconds=(pl.col("proposal_per_token") * pl.col("k")).sum(),
            verify_seconds=(pl.col("scoring") + pl.col("verification")).sum(),
            num_timed_steps=pl.len().cast(pl.Int64),
        )
    )
    return windows.join(per_window, left_on="line", right_on="owner", how="left")


def _source_label(source: str) -> pl.Expr:
    """``file`` or, when several processes share the file, ``file [pid=N]``."""
    process = pl.col("process").fill_null("")
    several = process.n_unique() > 1
    return pl.when(several & (process != "")).then(pl.lit(source) + " [" + process + "]").otherwise(pl.lit(source))


_LINE_START = re.compile(rb"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d")


def _sniff(head: bytes) -> str | None:
    return FORMAT if any(needle in head for needle in NEEDLES[:4]) or _LINE_START.search(head) else None


def _read_log(src: Source, fmt: str, progress: Progress = None) -> Read:
    found = find_lines(src, NEEDLES, fields=scan_fields(src.head), progress=progress)
    mtime = src.path.stat().st_mtime if src.path is not None else None
    frame, skipped = parse(found, src.name, year=reference_year(mtime), reference=mtime)
    metadata = tuple(_with_run_ids(run_metadata(found, src.name), frame))
    skipped = found.skipped + skipped
    report = SourceReport(src.name, fmt, found.total_lines, frame.height, len(skipped), metadata)
    return Read(report, skipped, windows=frame.lazy(), metadata=metadata)


READER = Reader((FORMAT,), _sniff, _read_log, detect_order=7, list_order=0)
