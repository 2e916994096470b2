"""Saved Prometheus ``/metrics`` scrapes (text exposition), one or several concatenated.

Series read (labels ``model_name``, ``engine``; ``_created`` series ignored)::

    vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 440.0
    vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 1320.0
    vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 1124.0
    vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 386.0

The counters are cumulative: one scrape gives one window of totals since the engine
started, several scrapes give the differences between consecutive ones. A reset is decided
per counter series: a series whose value falls restarted and counts from its new value, the
others keep their differences; each fall is reported as a :class:`Notice` naming the scrape
and its line. A NaN, infinite or negative sample is skipped with its line, and the series'
next difference is taken from its last good value. A new scrape starts where a series
repeats. Sample timestamps, when present, become the window times.

V0 names are read too (``vllm:spec_decode_draft_acceptance_rate``, ``..._efficiency``,
``..._num_emitted_tokens_total``), but V0 incremented its ``_total`` counters by lifetime
totals at every log interval, so they do not count tokens; only the acceptance-rate gauge
is kept, as ``reported_draft_acceptance_rate``.
"""

from __future__ import annotations

import math
import re

import polars as pl
from prometheus_client.parser import text_string_to_metric_families

from specobs.errors import Notice, Skipped
from specobs.ingest import columns as C
from specobs.ingest.registry import Reader, line_reader
from specobs.ingest.scan import FoundLines
from specobs.vllm import metric_series as vllm_metrics

FORMAT = "prometheus-text"
#: Serving series read beside the speculative ones (sample name → column; the names live in
#: :mod:`specobs.vllm.metric_series`).
_SERVING = vllm_metrics.SERVING
_SERVING_COUNTERS = ("generated", "itl_sum", "itl_count")
NEEDLES = (b"vllm:spec_decode", *(name.encode() for name in _SERVING))

_PREFIX = vllm_metrics.SPEC_DECODE_PREFIX
#: Sample name (without ``_total``) → windows column.
_COUNTERS = {
    "num_drafts": "num_drafts",
    "num_draft_tokens": "num_draft_tokens",
    "num_accepted_tokens": "num_accepted_tokens",
    "num_emitted_tokens": "v0_emitted",
}
_GAUGES = {"draft_acceptance_rate": "v0_rate", "efficiency": "v0_efficiency"}


def parse(found: FoundLines, source: str) -> tuple[pl.DataFrame, list[Skipped]]:
    """Windows from the ``vllm:spec_decode*`` lines ``scan.find_lines`` found."""
    skipped: list[Skipped] = []
    rows: list[dict[str, object]] = []
    scrape = 0
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    scrape_line: dict[int, int] = {}
    for line_no, text in found.frame.select("line", "text").iter_rows():
        text = text.strip()
        if not text or text.startswith("#"):
            continue
        try:
            samples = [s for family in text_string_to_metric_families(text + "\n") for s in family.samples]
        except Exception as exc:  # the parser raises ValueError, KeyError, IndexError... on bad lines
            skipped.append(Skipped(source, line_no, f"not a Prometheus sample line ({exc or type(exc).__name__})"))
            continue
        for sample in samples:
            name = sample.name.removeprefix(_PREFIX)
            if sample.name in _SERVING:
                column = _SERVING[sample.name]
            elif name.endswith("_created") or not sample.name.startswith(_PREFIX):
                continue
            elif (name := name.removesuffix("_total")) == "num_accepted_tokens_per_pos":
                position = sample.labels.get("position", "")
                if not position.isdigit():
                    skipped.append(Skipped(source, line_no, "per-position sample without a numeric 'position' label"))
                    continue
                column = f"pos_{int(position)}"
            elif name in _COUNTERS:
                column = _COUNTERS[name]
            elif name in _GAUGES:
                column = _GAUGES[name]
            else:
                continue
            value = float(sample.value)
            if not math.isfinite(value) or (value < 0 and column not in (*_GAUGES.values(), "running")):
                why = "not a finite number" if not math.isfinite(value) else "a negative counter"
                skipped.append(Skipped(source, line_no, f"{sample.name} is {sample.value} ({why}): sample skipped"))
                continue
            # Only a sample that counts can start a new scrape: a skipped one must not split
            # the scrape it sits in, nor a gauge (the running requests: read, never a boundary).
            key = (sample.name, tuple(sorted(sample.labels.items())))
            if column != "running":
                if key in seen:
                    scrape += 1
                    seen.clear()
                seen.add(key)
            scrape_line.setdefault(scrape, line_no)
            engine = sample.labels.get("engine")
            rows.append(
                {
                    "scrape": scrape,
                    "model": sample.labels.get("model_name"),
                    "engine": int(engine) if engine and engine.isdigit() else 0,
                    "column": column,
                    "value": value,
                    "ts": float(sample.timestamp) if sample.timestamp is not None else None,
                }
            )
    if not rows:
        return C.finish(pl.DataFrame()), skipped
    long = pl.DataFrame(rows, schema_overrides={"ts": pl.Float64, "model": pl.String})
    long, repeated = _drop_repeated_scrapes(long, scrape_line, source)
    skipped += repeated
    wide = long.pivot(on="column", index=["scrape", "model", "engine"], values="value", aggregate_function="last")
    times = long.group_by("scrape").agg(end_ts=pl.col("ts").max())
    wide = (
        wide.join(times, on="scrape")
        .sort("scrape")
        .with_columns(source_line=pl.col("scrape").replace_strict(scrape_line, return_dtype=pl.Int64))
    )
    is_v0 = "v0_emitted" in wide.columns or "v0_rate" in wide.columns
    speculative = any(c in wide.columns for c in ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "v0_rate"))
    counters = [c for c in wide.columns if c in ("num_drafts", "num_draft_tokens", "num_accepted_tokens")]
    counters += [c for c in wide.columns if c.startswith("pos_")]
    if is_v0:
        # V0's counters are sums of lifetime totals (see module docstring): keep only the gauge.
        wide = wide.drop([c for c in counters if c in wide.columns])
        counters = []
    counters += [c for c in _SERVING_COUNTERS if c in wide.columns]
    wide, notices = _per_series_windows(wide, ["model", "engine"], counters, source)
    skipped += notices
    wide = wide.with_columns(
        [pl.lit(None, pl.Float64).alias(c) for c in (*_SERVING.values(),) if c not in wide.columns]
    )
    windows = wide.with_columns(
        C.per_pos_list(wide),
        source=pl.lit(source),
        run_id=pl.lit(source),
        source_format=pl.lit(FORMAT),
        counters=pl.lit("cumulative"),
        reported_draft_acceptance_rate=pl.col("v0_rate") if "v0_rate" in wide.columns else pl.lit(None),
        num_generated_tokens=pl.col("generated").round(0).cast(pl.Int64),
        batch_size=pl.when(pl.col("running") > 0).then(pl.col("running").round(0).cast(pl.Int64)),
        generation_tokens_per_second=_served_throughput(),
    ).with_columns(
        # A server that exports no speculative series at all is a plain engine: k = 0.
        num_spec_tokens=pl.col("num_accepted_tokens_per_pos").list.len().cast(pl.Int64)
        if speculative
        else pl.lit(0, pl.Int64)
    )
    return C.finish(windows), skipped


def _served_throughput() -> pl.Expr:
    """Generated tokens per second between two scrapes: over their time where the samples carry
    timestamps; else from the inter-token latency (each running request adds its own latency to
    ``_sum``, so the time with N running is about ``Δ_sum / N``: ``Δgenerated · N / Δ_sum``), with
    N the requests running at the scrape. Null when neither is known or nothing ran."""
    seconds = pl.col("end_ts") - pl.col("start_ts")
    by_clock = pl.col("generated") / seconds
    by_latency = pl.col("generated") * pl.col("running") / pl.col("itl_sum")
    return (
        pl.when((seconds > 0) & pl.col("generated").is_not_null())
        .then(by_clock)
        .when((pl.col("itl_sum") > 0) & (pl.col("running") > 0) & (pl.col("generated") > 0))
        .then(by_latency)
    )


def _drop_repeated_scrapes(
    long: pl.DataFrame, scrape_line: dict[int, int], source: str
) -> tuple[pl.DataFrame, list[Skipped]]:
    """Leave out a scrape identical to an earlier one that is not the scrape just before it: the
    file holds the same scrapes twice (concatenated with itself), and reading the copy as an
    engine restart would count everything again. An idle engine's identical consecutive
    scrapes are kept (they add nothing)."""
    seen: dict[tuple[object, ...], int] = {}
    last: tuple[object, ...] | None = None
    repeats: list[tuple[int, int]] = []
    ordered = long.sort("scrape", "model", "engine", "column", nulls_last=True, maintain_order=True)
    for (scrape,), part in ordered.group_by("scrape", maintain_order=True):
        signature = tuple(part.select("model", "engine", "column", "value", "ts").iter_rows())
        if signature in seen and (signature != last or (repeats and repeats[-1][0] == int(scrape) - 1)):
            repeats.append((int(scrape), seen[signature]))
            continue
        seen.setdefault(signature, int(scrape))
        last = signature
    if not repeats:
        return long, []
    (first, earlier), n = repeats[0], len(repeats)
    notice = Notice(
        source, scrape_line.get(first),
        f"{n} scrape(s) repeat earlier ones exactly (first: scrape {first + 1} = scrape {earlier + 1}; "
        "the file holds the same scrapes twice?): each counted once",
    )  # fmt: skip
    return long.filter(~pl.col("scrape").is_in([r[0] for r in repeats])), [notice]


def _per_series_windows(
    wide: pl.DataFrame, keys: list[str], counters: list[str], source: str
) -> tuple[pl.DataFrame, list[Skipped]]:
    """Running totals → differences, deciding a reset per counter series (``C.windows_from_cumulative``
    decides one for all counters of a row).

    Each counter is differenced against its last known value in the same ``keys`` group (a
    skipped or missing sample does not break the chain); a value below it is a restart of that
    series, which counts from its new value. ``start_ts`` is null on a group's first row and on
    rows where a counter fell, as before. Returns the windows and one notice per row with a fall.
    """
    if wide.is_empty() or not counters:
        return wide.with_columns(start_ts=pl.lit(None, pl.Float64)), []
    previous = {c: pl.col(c).shift(1).forward_fill().over(keys) for c in counters}
    fell = {c: (pl.col(c) < previous[c]).fill_null(False) for c in counters}
    first = pl.int_range(pl.len()).over(keys) == 0
    restart = pl.any_horizontal(list(fell.values()))
    marked = wide.with_columns(
        [previous[c].alias(f"_prev_{c}") for c in counters] + [fell[c].alias(f"_fell_{c}") for c in counters]
    )
    notices = _reset_notices(
        marked.filter(pl.any_horizontal([pl.col(f"_fell_{c}") for c in counters])), counters, source
    )
    windows = marked.with_columns(
        [
            pl.when(pl.col(f"_prev_{c}").is_null() | pl.col(f"_fell_{c}"))
            .then(pl.col(c))
            .otherwise(pl.col(c) - pl.col(f"_prev_{c}"))
            .alias(c)
            for c in counters
        ]
        + [pl.when(first | restart).then(None).otherwise(pl.col("end_ts").shift(1).over(keys)).alias("start_ts")]
    )
    return windows.drop([f"_{part}_{c}" for part in ("prev", "fell") for c in counters]), notices


def _reset_notices(falls: pl.DataFrame, counters: list[str], source: str) -> list[Skipped]:
    """One notice per (scrape, model, engine) where counters fell."""
    notices: list[Skipped] = []
    for row in falls.iter_rows(named=True):
        names = [c for c in counters if row[f"_fell_{c}"]]
        what = ", ".join(f"{c} {row[f'_prev_{c}']:g} → {row[c]:g}" for c in names)
        whom = f"model {row['model']} engine {row['engine']}" if row["model"] is not None else f"engine {row['engine']}"
        if len(names) == len([c for c in counters if row[c] is not None]):
            why = (
                f"scrape {row['scrape'] + 1}, {whom}: every counter fell ({what}): "
                "engine restart assumed, counted from the new values"
            )
        else:
            why = (
                f"scrape {row['scrape'] + 1}, {whom}: counter {', '.join(names)} fell on its own ({what}): "
                "reset of that series assumed, counted from its new value; the other counters keep their differences"
            )
        notices.append(Notice(source, row["source_line"], why))
    return notices


_PROM_LINE = re.compile(rb"^(?:# (?:HELP|TYPE|EOF|UNIT)\b.*|[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{.*\})?\s+\S+(?:\s+\d+)?)$")
_ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")


def _sniff(head: bytes) -> str | None:
    """Saved ``/metrics`` text: most of the first lines are exposition lines, and vLLM's among them."""
    lines = [_ANSI.sub(b"", raw).strip() for raw in head.split(b"\n")[:-1] or [head]]
    lines = [line for line in lines if line][:500]
    if lines and b"vllm:" in head and sum(1 for line in lines if _PROM_LINE.match(line)) >= 0.8 * len(lines):
        return FORMAT
    return None


READER = Reader((FORMAT,), _sniff, line_reader(NEEDLES, parse), detect_order=6, list_order=2)
