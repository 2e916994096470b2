"""SGLang scheduler logs: the ``Decode batch`` line.

Lines read (fields by name; prefixes ``[2026-07-21 15:00:13 TP0 EP0]``, ``DP0 TP0``, Python
logging styles)::

    [2025-05-31 18:31:21 DP0 TP0] Decode batch. #running-req: 8, #token: 37217, token usage: 0.13,
        accept len: 2.90, cuda graph: True, gen throughput (token/s): 171.01, #queue-req: 0
    [2026-07-21 15:00:13 TP0 EP0] Decode batch, #running-req: 24, #token: 233600, token usage: 0.66,
        accept len: 3.05, accept rate: 0.68, npu graph: True, gen throughput (token/s): 239.06, #queue-req: 2

SGLang prints the mean acceptance length over the decode batches since its previous line
(every ``decode_log_interval`` = 40 batches), not the counts. Windows therefore carry
``reported_mean_acceptance_length`` and ``batch_size`` with null counters; analysis weights
them by batch size, which is proportional to the number of drafts when every line covers the
same number of decode batches. ``accept rate`` changed meaning between SGLang releases (with
and without the bonus token), so it is kept as printed and not used for summaries.
"""

from __future__ import annotations

import re

import polars as pl

from specobs.errors import Skipped
from specobs.ingest import columns as C
from specobs.ingest.registry import Reader, line_reader
from specobs.ingest.scan import FoundLines

FORMAT = "sglang-log"
NEEDLES = (b"Decode batch", b"ServerArgs(")

#: SGLang's ``speculative_algorithm`` → vLLM's method names used across specobs.
_METHODS = {"eagle": "eagle", "eagle3": "eagle3", "nextn": "mtp", "standalone": "draft_model", "ngram": "ngram"}


# Numeric fields are anchored: the value runs up to the next comma or the end of the line.
_RUNNING = r"#running-req: ([0-9]+)" + C.END
_ACCEPT_LEN = r"accept len: (" + C.DECIMAL + ")" + C.END
_ACCEPT_RATE = r"accept rate: (" + C.DECIMAL + ")" + C.END
_CHECKS = [
    ("#running-req:", _RUNNING),
    ("accept len:", _ACCEPT_LEN),
    ("accept rate:", _ACCEPT_RATE),
    ("#token:", r"#token: [0-9]+" + C.END),
    ("token usage:", r"token usage: " + C.DECIMAL + C.END),
    ("gen throughput (token/s):", r"gen throughput \(token/s\): " + C.DECIMAL + C.END),
]


def parse(found: FoundLines, source: str) -> tuple[pl.DataFrame, list[Skipped]]:
    """Windows from the lines ``scan.find_lines`` found for :data:`NEEDLES`."""
    lines = found.frame
    text = pl.col("text")
    config = (
        lines.filter(text.str.contains("ServerArgs(", literal=True))
        .select(
            config_line="line",
            model=pl.coalesce(
                text.str.extract(r"served_model_name='([^']*)'", 1), text.str.extract(r"model_path='([^']*)'", 1)
            ),
            method=text.str.extract(r"speculative_algorithm='(\w+)'", 1).str.to_lowercase().replace(_METHODS),
            draft_model=text.str.extract(r"speculative_draft_model_path='([^']*)'", 1),
            num_spec_tokens=C.field_int(text, r"speculative_num_steps=(\d+)"),
        )
        .sort("config_line")
    )
    decode = lines.filter(text.str.contains(r"Decode batch(?: \[\d+\])?[.,]")).with_columns(
        running=C.field_int(text, _RUNNING),
        accept_len=C.field_float(text, _ACCEPT_LEN),
        accept_rate=C.field_float(text, _ACCEPT_RATE),
        ts=C.full_date_timestamp(text),
        engine=C.field_int(text.str.extract(r"^(.*?)Decode batch", 1), r"(?-u:\b)DP(\d+)(?-u:\b)").fill_null(0),
        malformed=C.malformed(text, _CHECKS),
    )
    # A line is taken whole or not at all: every field it prints must be a complete number.
    reasons = [
        (pl.col("running").is_null(), pl.lit("Decode batch line without '#running-req'")),
        (pl.col("malformed").is_not_null(), pl.col("malformed")),
        (pl.col("accept_len").is_infinite(), pl.lit("accept len too large to be finite")),
        (pl.col("accept_len") < 1, pl.lit("accept len below 1")),
        ((pl.col("accept_rate") < 0) | (pl.col("accept_rate") > 1), pl.lit("accept rate outside [0, 1]")),
    ]
    why = pl.lit(None, pl.String)
    for condition, reason in reversed(reasons):
        why = pl.when(condition.fill_null(False)).then(reason).otherwise(why)
    decode = decode.with_columns(_why=why)
    skipped = [
        Skipped(source, line, reason)
        for line, reason in decode.filter(pl.col("_why").is_not_null()).select("line", "_why").iter_rows()
    ]
    spec = decode.filter(pl.col("_why").is_null() & pl.col("accept_len").is_not_null()).sort("line")
    if not config.is_empty():
        spec = spec.join_asof(config, left_on="line", right_on="config_line", strategy="backward")
    windows = spec.select(
        start_ts=pl.col("ts").shift(1).over("engine"),
        end_ts="ts",
        source=pl.lit(source),
        source_line="line",
        source_format=pl.lit(FORMAT),
        run_id=pl.lit(source),
        engine="engine",
        model=pl.col("model") if "model" in spec.columns else pl.lit(None, pl.String),
        method=pl.col("method") if "method" in spec.columns else pl.lit(None, pl.String),
        draft_model=pl.col("draft_model") if "draft_model" in spec.columns else pl.lit(None, pl.String),
        num_spec_tokens=pl.col("num_spec_tokens") if "num_spec_tokens" in spec.columns else pl.lit(None, pl.Int64),
        batch_size="running",
        reported_mean_acceptance_length="accept_len",
        reported_draft_acceptance_rate="accept_rate",
        counters=pl.lit("interval"),
    )
    return C.finish(windows), skipped


_PREFIX = re.compile(rb"(?m)^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: [A-Z_]+\d+)*\] ")


def _sniff(head: bytes) -> str | None:
    return FORMAT if b"Decode batch" in head or _PREFIX.search(head) else None


READER = Reader((FORMAT,), _sniff, line_reader(NEEDLES, parse), detect_order=8, list_order=1)
