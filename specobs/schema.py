"""The frames every part of specobs speaks: ``steps``, ``windows`` and ``requests``.

This module is the only place that names their columns. Capture and ingest produce these
frames; analysis, tuning and every surface consume them. Counter names follow vLLM's own
``SpecDecodingStats`` fields and Prometheus base units (seconds, plain counts).

Unknown values are null, never 0: a log line that does not print the number of drafts
leaves ``num_drafts`` null, and every aggregate skips it instead of counting it as zero.
See ``docs/schema.md`` for the full contract.
"""

from __future__ import annotations

import hashlib
from typing import TypeVar

import polars as pl

from specobs import dimensions

#: An eager or a lazy frame: :func:`conform` returns the kind it was given.
Frame = TypeVar("Frame", pl.DataFrame, pl.LazyFrame)

#: Labels that identify what was measured. Shared by steps and windows.
LABELS: dict[str, pl.DataType] = {
    "run_id": pl.String(),
    "engine": pl.Int64(),
    "model": pl.String(),
    "method": pl.String(),
    "draft_model": pl.String(),
    "platform": pl.String(),
    "device": pl.String(),
    # What makes two engines' numbers comparable at all, from the run metadata (docs/schema.md):
    # on ROCm the attention backend changes acceptance, not only speed.
    "vllm_version": pl.String(),
    "attention_backend": pl.String(),
    "graph_mode": pl.String(),
    "workload": pl.String(),
}
#: The run-metadata fields every row carries as labels (``RunMetadata.labels()``): the row labels
#: that make runs incomparable and are not part of a target's identity.
METADATA_LABELS = tuple(
    d.column
    for d in dimensions.having(dimensions.ENVIRONMENT)
    if d.source == dimensions.ROW and dimensions.TARGET not in d.roles
)
#: What a method's fit is keyed on: one method (and draft model) on one target model, platform
#: and device (recommendations compare methods on one target only).
TARGET_LABELS = dimensions.columns(dimensions.TARGET)
#: What two runs must share for their numbers to compare (``specobs compare`` names it first).
ENVIRONMENT_LABELS = dimensions.columns(dimensions.ENVIRONMENT, dimensions.ROW)
#: The run-metadata fields rows do not carry, joined to the rows of their run and engine when a
#: report groups by them (``analysis.runs``); ``schedule`` as text (``1-8:3,9-16:1``).
RUN_DIMENSIONS: dict[str, pl.DataType] = {
    d.column: pl.Int64() if d.column.endswith("_parallel_size") else pl.String()
    for d in dimensions.DIMENSIONS
    if d.source == dimensions.METADATA
}

#: Speculative-decoding counters, summable over steps and windows.
COUNTERS: dict[str, pl.DataType] = {
    "num_drafts": pl.Int64(),
    "num_draft_tokens": pl.Int64(),
    "num_accepted_tokens": pl.Int64(),
    "num_accepted_tokens_per_pos": pl.List(pl.Int64()),
    # Drafts that reached each position (drafted more than i tokens): the denominator of r_i.
    # Null when the source cannot know (log lines, scrapes, older captures); then every draft
    # of a step or window whose k exceeds i is taken to have reached position i.
    "num_drafts_per_pos": pl.List(pl.Int64()),
    # Drafts that reached position i with every earlier position accepted: the trials of the
    # conditional rate β_i (element 0 = drafts). Null when unknown; then β_i's trials are
    # a_{i−1} scaled by n_i / n_{i−1}, exact while drafts are cut only by k.
    "num_drafts_accepted_before_pos": pl.List(pl.Int64()),
    "num_generated_tokens": pl.Int64(),
    # Accepted draft tokens that vLLM counted in num_accepted_tokens although a stop (max_tokens,
    # EOS, a stop string) then cut them off the request: acceptance inflated at request ends.
    "num_accepted_tokens_past_end": pl.Int64(),
}

#: Wall-clock or device time, in seconds.
TIMINGS: dict[str, pl.DataType] = {
    "draft_seconds": pl.Float64(),
    "verify_seconds": pl.Float64(),
    "step_seconds": pl.Float64(),
}

#: How long the contexts of a step's requests were, in tokens (prompt plus output so far, after
#: the step): acceptance moves with context length. Null when the source does not say (logs,
#: scrapes, captures before this column), never 0; a window of several steps keeps the mean of
#: its steps weighted by batch size, and the largest.
CONTEXT: dict[str, pl.DataType] = {
    "context_length": pl.Float64(),  # mean over the step's requests: what a step's context bucket is of
    "context_length_max": pl.Int64(),
}

#: One row per engine step (or per request per step when ``request_id`` is set).
STEPS: dict[str, pl.DataType] = {
    "ts": pl.Float64(),
    **LABELS,
    "request_id": pl.String(),
    "batch_size": pl.Int64(),
    # Tokens the target model processed in the step: prompt chunks, decode tokens and drafts.
    "num_scheduled_tokens": pl.Int64(),
    **CONTEXT,
    "num_spec_tokens": pl.Int64(),
    **COUNTERS,
    **TIMINGS,
    # The clock behind the step's timings: "device" (events), "host" (perf_counter) or "mixed".
    "timing_clock": pl.String(),
}

#: One row per interval aggregate: a log line, a pair of Prometheus scrapes, or a step.
WINDOWS: dict[str, pl.DataType] = {
    "start_ts": pl.Float64(),
    "end_ts": pl.Float64(),
    "source": pl.String(),
    "source_line": pl.Int64(),
    "source_format": pl.String(),
    **LABELS,
    "batch_size": pl.Int64(),
    "num_scheduled_tokens": pl.Int64(),
    **CONTEXT,
    "num_spec_tokens": pl.Int64(),
    **COUNTERS,
    # Timings are sums over ``num_timed_steps`` steps (mean = sum / num_timed_steps).
    **TIMINGS,
    "num_timed_steps": pl.Int64(),
    "timing_clock": pl.String(),
    # Generated tokens per second over the window, as the serving engine measured it: a log's
    # ``Avg generation throughput`` for its interval, or a scrape pair's generation counter over
    # the time between them. Null for steps (their timings say more) and when the source has none.
    "generation_tokens_per_second": pl.Float64(),
    # What the source printed, kept when counts cannot be recovered (SGLang, V0 gauges).
    "reported_mean_acceptance_length": pl.Float64(),
    "reported_draft_acceptance_rate": pl.Float64(),
    # True when num_drafts (and per-position counts) were derived from printed rates.
    "num_drafts_derived": pl.Boolean(),
    # "interval" when the source printed per-interval counts, "cumulative" when it printed
    # running totals that specobs turned into differences, "step" for event-file rows.
    "counters": pl.String(),
}

#: One row per finished request: its speculative decoding over its whole life, as vLLM's
#: ``--per-request-spec-decode-metrics`` gives it. Never prompt text, never the raw request id.
REQUESTS: dict[str, pl.DataType] = {
    # Unix seconds when the request finished (capture), was created (server responses: ``created``),
    # or null when the input does not say (offline outputs without ``ts``).
    "ts": pl.Float64(),
    **LABELS,
    # A hash of the request id (:func:`request_key`), so rows of one request join across inputs.
    "request_key": pl.String(),
    # vLLM's finish reason: "stop", "length", "abort", …
    "finish_reason": pl.String(),
    "num_prompt_tokens": pl.Int64(),
    "num_output_tokens": pl.Int64(),
    # k configured (the largest under a schedule): the histogram has k + 1 elements.
    "num_spec_tokens": pl.Int64(),
    # Verify steps of the request (each drafted at least one token): the histogram's sum.
    "num_spec_steps": pl.Int64(),
    "num_draft_tokens": pl.Int64(),
    # Draft tokens accepted (the bonus token not counted): sum of i × histogram[i].
    "num_accepted_tokens": pl.Int64(),
    # Element i: verify steps that accepted exactly i draft tokens.
    "acceptance_histogram": pl.List(pl.Int64()),
    # Every verify step's drafted and accepted counts, in order; null unless "detailed".
    "per_step_drafted": pl.List(pl.Int64()),
    "per_step_accepted": pl.List(pl.Int64()),
}

#: Latency metrics of a serving benchmark and the statistics kept of each (milliseconds).
BENCH_LATENCIES = ("ttft", "tpot", "itl", "e2el")
BENCH_STATISTICS = ("mean", "median", "std", "p50", "p90", "p95", "p99")

#: The serving-benchmark clients whose results are read (``BENCH.client``).
BENCH_CLIENTS = ("vllm bench serve", "aiperf", "guidellm")

#: One row per serving-benchmark result (``vllm bench serve`` or one run of ``vllm bench sweep
#: serve``): a server configuration under one load level, measured from the client.
BENCH: dict[str, pl.DataType] = {
    "source": pl.String(),
    "source_line": pl.Int64(),  # the record's line (JSON Lines) or item number (a sweep's summary)
    "date": pl.String(),  # as vLLM writes it (YYYYMMDD-HHMMSS, local time)
    "label": pl.String(),
    # The client that measured it: "vllm bench serve", "aiperf" or "guidellm" (:data:`BENCH_CLIENTS`).
    "client": pl.String(),
    # The prompts' dataset as the result names it (vLLM's ``dataset_name`` from --metadata or a
    # sweep's bench parameters; the other clients' own dataset settings); null where unsaid.
    "dataset": pl.String(),
    # The configuration the result is of: ``config`` from --metadata, else the sweep's server
    # combination, else the label, else the speculative settings, else the model.
    "config": pl.String(),
    "model": pl.String(),
    "backend": pl.String(),
    "method": pl.String(),  # speculative method where the result says (metadata, sweep parameters)
    "num_spec_tokens": pl.Int64(),  # k where it says; 0 for a plain server
    # True: a speculative server (a spec_decode section, or a method named); False: plain.
    "speculative": pl.Boolean(),
    "max_concurrency": pl.Int64(),
    "request_rate": pl.Float64(),  # requests/s; null for "inf" (all at once)
    "burstiness": pl.Float64(),
    "run_number": pl.Int64(),  # a sweep's repeat number
    "num_prompts": pl.Int64(),
    "completed": pl.Int64(),
    "failed": pl.Int64(),
    "duration": pl.Float64(),  # seconds
    "request_throughput": pl.Float64(),
    "output_throughput": pl.Float64(),  # output tokens/s
    "total_token_throughput": pl.Float64(),
    **{f"{stat}_{name}_ms": pl.Float64() for name in BENCH_LATENCIES for stat in BENCH_STATISTICS},
    "spec_decode_acceptance_length": pl.Float64(),
    "spec_decode_acceptance_rate": pl.Float64(),  # a share (vLLM writes a percentage)
    "spec_decode_num_drafts": pl.Int64(),
    "spec_decode_draft_tokens": pl.Int64(),
    "spec_decode_accepted_tokens": pl.Int64(),
    "spec_decode_per_position": pl.List(pl.Float64()),
    # Per request, in the order sent (what ``--save-detailed`` keeps; ``latencies`` is always
    # written): end-to-end seconds, seconds to the first token, output tokens, and whether it
    # succeeded (from ``errors``). What an SLO's goodput is computed from.
    "request_latency_s": pl.List(pl.Float64()),
    "request_ttft_s": pl.List(pl.Float64()),
    "request_output_tokens": pl.List(pl.Int64()),
    "request_ok": pl.List(pl.Boolean()),
}

#: The key that marks a captured row as a ``requests`` row (written to its own files).
REQUEST_KEY = "request_key"


def request_key(request_id: object) -> str:
    """The ``request_key`` of a request id: 16 hex digits of its BLAKE2b hash.

    The same id always gives the same key, so a request's captured row and its saved output
    join; the id itself is never stored::

        request_key("0") == request_key("0") != request_key("1")
    """
    return hashlib.blake2b(str(request_id).encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


#: The key that marks a run-metadata record (one per engine, in its own file beside the event
#: files); its value is the record's format version. See docs/schema.md.
METADATA_KEY = "specobs_metadata"
METADATA_VERSION = 1

#: Columns an event file must have to be recognised as one (others may be missing).
EVENT_FILE_REQUIRED = ("ts", "num_drafts", "num_accepted_tokens")

#: vLLM's names for speculative methods (``SpeculativeConfig.method``).
KNOWN_METHODS = (
    "ngram",
    "ngram_gpu",
    "suffix",
    "medusa",
    "mlp_speculator",
    "draft_model",
    "eagle",
    "eagle3",
    "mtp",
    "deepseek_mtp",
    "qwen3_next_mtp",
    "dflash",
    "dspark",
    "extract_hidden_states",
    "custom_class",
)


def empty(schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """An empty frame with exactly these columns."""
    return pl.DataFrame(schema=schema)


def conform(frame: Frame, schema: dict[str, pl.DataType]) -> Frame:
    """Select and cast ``frame`` to ``schema``: missing columns become null, extras are dropped.

    Works on eager and lazy frames alike, so a Parquet scan stays lazy.
    """
    names = frame.collect_schema().names() if isinstance(frame, pl.LazyFrame) else frame.columns
    if not names:
        result = empty(schema)
        return result.lazy() if isinstance(frame, pl.LazyFrame) else result
    missing = [pl.lit(None, dtype).alias(name) for name, dtype in schema.items() if name not in names]
    types = frame.collect_schema() if isinstance(frame, pl.LazyFrame) else frame.schema
    return frame.with_columns(missing).select(
        [
            pl.col(name)
            if dtype == pl.String and types.get(name) == pl.Categorical
            else pl.col(name).cast(dtype, strict=False)
            for name, dtype in schema.items()
        ]
    )


def categorical_labels(windows: pl.LazyFrame | pl.DataFrame) -> pl.LazyFrame:
    """``windows`` with its text labels as categoricals: every group-by on labels then hashes
    small integers instead of strings (3× faster on 10M rows) and the labels take a quarter of
    the memory. Categoricals sort and compare as their text, so no result changes."""
    names = windows.lazy().collect_schema()
    text = [c for c in (*LABELS, "source", "counters") if names.get(c) == pl.String]
    return windows.lazy().with_columns([pl.col(c).cast(pl.Categorical) for c in text])
