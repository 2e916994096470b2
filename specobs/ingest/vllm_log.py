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

import polars as pl

from specobs.errors import Skipped
from specobs.ingest import columns as C
from specobs.ingest.scan import FoundLines

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
_CONFIG_LINE = r"speculative_config\s*[=:]\s*(?:SpeculativeConfig\(|\{)"

_ACCEPTED = r"(?:Accepted|Number of accepted tokens): (\d+)"
_DRAFTED = r"(?:Drafted|Number of draft tokens(?: tokens)?): (\d+)"
_EMITTED = r"Number of emitted tokens(?: tokens)?: (\d+)"
_PER_POS = r"Per-position acceptance rate: ((?:nan|[\d.]+)(?:, ?(?:nan|[\d.]+))*)"


def parse(found: FoundLines, source: str, *, year: int, reference: float | None) -> tuple[pl.DataFrame, list[Skipped]]:
    """Windows from the lines ``scan.find_lines`` found for :data:`NEEDLES`."""
    lines = C.clean(found.frame)
    text = pl.col("text")
    legacy_v0 = text.str.contains(r"System efficiency|Number of emitted tokens|Number of speculative tokens")
    lines = lines.with_columns(
        # The scanner says which needle each line holds (see NEEDLES); only the legacy
        # "Speculative metrics:" needle needs a look at the fields to tell V0 from early V1.
        kind=pl.when(pl.col("needle") == 1)
        .then(pl.when(legacy_v0).then(pl.lit("spec_v0")).otherwise(pl.lit("spec")))
        .when(pl.col("needle") == 4)
        .then(pl.when(text.str.contains(_CONFIG_LINE)).then(pl.lit("config")))
        .otherwise(pl.col("needle").replace_strict(_NEEDLE_KINDS, default=None, return_dtype=pl.String)),
        process=C.process_key(text),
    ).filter(pl.col("kind").is_not_null())
    lines = C.with_vllm_timestamp(lines, year=year, reference=reference)

    config = _config(lines)
    skipped: list[Skipped] = []
    v1 = _v1_windows(lines, config, source, skipped)
    v0 = _v0_windows(lines, config, source, skipped)
    windows = pl.concat([C.finish(v1), C.finish(v0)], how="vertical")
    return windows, skipped


def _config(lines: pl.DataFrame) -> pl.DataFrame:
    """Model, method, draft model and k from engine start-up lines, by line number."""
    text = pl.col("text")
    spec_part = text.str.extract(r"speculative_config\s*[=:]\s*((?:SpeculativeConfig\([^)]*\))|\{[^}]*\})", 1)
    return (
        lines.filter(pl.col("kind") == "config")
        .select(
            "line",
            model=pl.coalesce(
                text.str.extract(r"served_model_name=([^,\s)]+)", 1),
                text.str.extract(r"with config: model='([^']*)'", 1),
                text.str.extract(r"'model': '([^']*)'", 1),
            ),
            method=spec_part.str.extract(r"method'?\s*[=:]\s*'(\w+)'", 1),
            draft_model=spec_part.str.extract(r"(?-u:\b)model'?\s*[=:]\s*'([^']*)'", 1),
            num_spec_tokens=C.field_int(spec_part, r"num_spec(?:ulative)?_tokens'?\s*[=:]\s*(\d+)"),
        )
        .sort("line")
    )


def _attach_config(windows: pl.DataFrame, config: pl.DataFrame) -> pl.DataFrame:
    """The most recent start-up config before each window (or the first one after it)."""
    if config.is_empty():
        return windows.with_columns(
            model=pl.lit(None, pl.String),
            method=pl.lit(None, pl.String),
            draft_model=pl.lit(None, pl.String),
            config_k=pl.lit(None, pl.Int64),
        )
    config = config.rename({"line": "config_line", "num_spec_tokens": "config_k"})
    before = windows.sort("line").join_asof(config, left_on="line", right_on="config_line", strategy="backward")
    after = windows.sort("line").join_asof(config, left_on="line", right_on="config_line", strategy="forward")
    cols = ["model", "method", "draft_model", "config_k"]
    return before.with_columns([pl.coalesce(pl.col(c), after[c]).alias(c) for c in cols]).drop("config_line")


def _attach_stats(spec: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """Engine index and running requests from the stats line printed with each spec line.

    vLLM prints ``Engine NNN: ... Running: N reqs`` and then that engine's SpecDecoding line,
    so within one process a spec line takes the stats line just before it. When a process's
    first metric line is a spec line directly followed by a stats line of the same second
    (some collectors reorder lines within a second), the whole process is read the other way
    round: each spec line takes the stats line just after it.
    """
    text = pl.col("text")
    ordered = (
        lines.filter(pl.col("kind").is_in(["stats", "spec"]))
        .sort("line")
        .with_columns(
            stats_engine=pl.when(pl.col("kind") == "stats").then(C.field_int(text, r"Engine (\d+):")),
            stats_aggregated=pl.when(pl.col("kind") == "stats").then(text.str.contains(r"Engines Aggregated:")),
            stats_batch=pl.when(pl.col("kind") == "stats").then(C.field_int(text, r"Running: (\d+) reqs")),
        )
    )
    over = "process"
    ordered = ordered.with_columns(pl.col("process").fill_null(""))
    prev_is_stats = pl.col("kind").shift(1).over(over) == "stats"
    next_is_stats = (pl.col("kind").shift(-1).over(over) == "stats") & (
        pl.col("ts").shift(-1).over(over) == pl.col("ts")
    )
    # Reversed order (spec line first) when a process's first metric line is a spec line
    # followed by a stats line of the same second.
    first = pl.int_range(pl.len()).over(over) == 0
    reversed_order = (first & (pl.col("kind") == "spec") & next_is_stats).any().over(over)
    picked = []
    for name in ("stats_engine", "stats_aggregated", "stats_batch"):
        picked.append(
            pl.when(reversed_order & next_is_stats)
            .then(pl.col(name).shift(-1).over(over))
            .when(~reversed_order & prev_is_stats)
            .then(pl.col(name).shift(1).over(over))
            .otherwise(None)
            .alias(name)
        )
    attributed = (
        ordered.with_columns(picked)
        .filter(pl.col("kind") == "spec")
        .select("line", "stats_engine", "stats_aggregated", "stats_batch")
    )
    return spec.join(attributed, on="line", how="left")


def _v1_windows(lines: pl.DataFrame, config: pl.DataFrame, source: str, skipped: list[Skipped]) -> pl.DataFrame:
    text = pl.col("text")
    spec = lines.filter(pl.col("kind") == "spec").with_columns(
        accepted=C.field_int(text, _ACCEPTED),
        drafted=C.field_int(text, _DRAFTED),
        printed_drafts=C.field_int(text, r"[ ,:]Drafts: (\d+)"),
        mal=C.field_float(text, r"Mean acceptance length: (" + C.NUMBER + ")"),
        rate_value=C.field_float(text, r"Draft acceptance rate: (" + C.NUMBER + ")"),
        rate_is_percent=text.str.contains(r"Draft acceptance rate: [^,]*%"),
        per_pos_rates=C.float_list(text, _PER_POS),
        accepted_throughput=C.field_float(text, r"Accepted throughput: (" + C.NUMBER + ") tokens/s"),
    )
    bad = spec.filter(pl.col("accepted").is_null() | pl.col("drafted").is_null())
    skipped.extend(
        Skipped(source, line, "speculative metrics line without accepted and drafted token counts")
        for line in bad["line"].to_list()
    )
    spec = spec.filter(pl.col("accepted").is_not_null() & pl.col("drafted").is_not_null())
    if spec.is_empty():
        return spec
    spec = _attach_stats(spec, lines)
    spec = _attach_config(spec, config)

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
    spec = spec.with_columns(
        num_drafts=pl.coalesce(pl.col("printed_drafts"), derived),
        num_drafts_derived=pl.when(pl.col("printed_drafts").is_not_null())
        .then(False)
        .when(derived.is_not_null())
        .then(True)
        .otherwise(None),
    )
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
        start_ts=pl.when((pl.col("accepted_throughput") > 0) & (pl.col("accepted") > 0))
        .then(pl.col("ts") - interval)
        .otherwise(prev_end),
        end_ts="ts",
        source=_source_label(source),
        source_line="line",
        source_format=pl.lit(FORMAT),
        run_id=_source_label(source),
        engine=pl.when(pl.col("stats_aggregated").fill_null(False))
        .then(None)
        .otherwise(pl.col("stats_engine").fill_null(0)),
        model="model",
        method="method",
        draft_model="draft_model",
        batch_size="stats_batch",
        num_spec_tokens=pl.coalesce(pl.col("config_k"), pl.col("per_pos_rates").list.len().cast(pl.Int64)),
        num_drafts="num_drafts",
        num_draft_tokens="drafted",
        num_accepted_tokens="accepted",
        num_accepted_tokens_per_pos="num_accepted_tokens_per_pos",
        reported_mean_acceptance_length="mal",
        reported_draft_acceptance_rate=pl.when(pl.col("rate_is_percent"))
        .then(pl.col("rate_value") / 100)
        .otherwise(pl.col("rate_value")),
        num_drafts_derived="num_drafts_derived",
        counters=pl.lit("interval"),
        process="process",
    )


def _scale_list(rates: pl.Expr, drafts: pl.Expr) -> pl.Expr:
    """``round(rate_i × drafts)`` element-wise: per-position counts from printed rates."""
    return (rates * drafts).list.eval(pl.element().round(0).cast(pl.Int64))


def _v0_windows(lines: pl.DataFrame, config: pl.DataFrame, source: str, skipped: list[Skipped]) -> pl.DataFrame:
    text = pl.col("text")
    spec = lines.filter(pl.col("kind") == "spec_v0").with_columns(
        k=C.field_int(text, r"Number of speculative tokens: (\d+)"),
        accepted_raw=C.field_int(text, r"Number of accepted tokens: (\d+)"),
        drafted=C.field_int(text, r"Number of draft tokens(?: tokens)?: (\d+)"),
        emitted=C.field_int(text, _EMITTED),
        rate=C.field_float(text, r"Draft acceptance rate: (" + C.NUMBER + ")"),
    )
    required = ["k", "accepted_raw", "drafted", "emitted"]
    bad = spec.filter(pl.any_horizontal([pl.col(c).is_null() for c in required]) | (pl.col("k") <= 0))
    skipped.extend(
        Skipped(source, line, "V0 speculative metrics line without k, accepted, draft or emitted counts")
        for line in bad["line"].to_list()
    )
    spec = spec.filter(pl.all_horizontal([pl.col(c).is_not_null() for c in required]) & (pl.col("k") > 0))
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
        reported_draft_acceptance_rate=pl.when(pl.col("drafted") > 0).then(pl.col("accepted_raw") / pl.col("drafted")),
        num_drafts_derived=pl.lit(True),
        counters=pl.lit("cumulative"),
        process="process",
    )


def _attach_stage_times(windows: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """Running requests from the stats line before each metrics line, and V0 stage times.

    Each ``SpecDecodeWorker stage times`` line is the timing of one step; it is given to the
    metrics line nearest to it, so no step is counted twice.
    """
    text = pl.col("text")
    stats = (
        lines.filter(pl.col("kind") == "stats")
        .select(stats_line="line", batch=C.field_int(text, r"Running: (\d+) reqs"))
        .sort("stats_line")
    )
    windows = windows.sort("line").join_asof(stats, left_on="line", right_on="stats_line", strategy="backward")
    stages = (
        lines.filter(pl.col("kind") == "stages")
        .select(
            stage_line="line",
            proposal_per_token=C.field_float(text, r"average_time_per_proposal_tok_ms=(" + C.NUMBER + ")") / 1000,
            scoring=C.field_float(text, r"scoring_time_ms=(" + C.NUMBER + ")") / 1000,
            verification=C.field_float(text, r"verification_time_ms=(" + C.NUMBER + ")") / 1000,
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
