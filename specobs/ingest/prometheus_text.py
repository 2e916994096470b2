"""Saved Prometheus ``/metrics`` scrapes (text exposition), one or several concatenated.

Series read (labels ``model_name``, ``engine``; ``_created`` series ignored)::

    vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 440.0
    vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 1320.0
    vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 1124.0
    vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 386.0

The counters are cumulative: one scrape gives one window of totals since the engine
started, several scrapes give the differences between consecutive ones (a counter that
falls means a restart). A new scrape starts where a series repeats. Sample timestamps,
when present, become the window times.

V0 names are read too (``vllm:spec_decode_draft_acceptance_rate``, ``..._efficiency``,
``..._num_emitted_tokens_total``), but V0 incremented its ``_total`` counters by lifetime
totals at every log interval, so they do not count tokens; only the acceptance-rate gauge
is kept, as ``reported_draft_acceptance_rate``.
"""

from __future__ import annotations

import polars as pl
from prometheus_client.parser import text_string_to_metric_families

from specobs.errors import Skipped
from specobs.ingest import columns as C
from specobs.ingest.scan import FoundLines

FORMAT = "prometheus-text"
NEEDLES = (b"vllm:spec_decode",)

_PREFIX = "vllm:spec_decode_"
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
            if name.endswith("_created") or not sample.name.startswith(_PREFIX):
                continue
            name = name.removesuffix("_total")
            key = (sample.name, tuple(sorted(sample.labels.items())))
            if key in seen:
                scrape += 1
                seen.clear()
            seen.add(key)
            scrape_line.setdefault(scrape, line_no)
            if name == "num_accepted_tokens_per_pos":
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
            engine = sample.labels.get("engine")
            rows.append(
                {
                    "scrape": scrape,
                    "model": sample.labels.get("model_name"),
                    "engine": int(engine) if engine and engine.isdigit() else 0,
                    "column": column,
                    "value": float(sample.value),
                    "ts": float(sample.timestamp) if sample.timestamp is not None else None,
                }
            )
    if not rows:
        return C.finish(pl.DataFrame()), skipped
    long = pl.DataFrame(rows, schema_overrides={"ts": pl.Float64, "model": pl.String})
    wide = long.pivot(on="column", index=["scrape", "model", "engine"], values="value", aggregate_function="last")
    times = long.group_by("scrape").agg(end_ts=pl.col("ts").max())
    wide = (
        wide.join(times, on="scrape")
        .sort("scrape")
        .with_columns(source_line=pl.col("scrape").replace_strict(scrape_line, return_dtype=pl.Int64))
    )
    is_v0 = "v0_emitted" in wide.columns or "v0_rate" in wide.columns
    counters = [c for c in wide.columns if c in ("num_drafts", "num_draft_tokens", "num_accepted_tokens")]
    counters += [c for c in wide.columns if c.startswith("pos_")]
    if is_v0:
        # V0's counters are sums of lifetime totals (see module docstring): keep only the gauge.
        wide = wide.drop([c for c in counters if c in wide.columns])
        counters = []
    wide = C.windows_from_cumulative(wide, ["model", "engine"], counters)
    windows = wide.with_columns(
        C.per_pos_list(wide),
        source=pl.lit(source),
        run_id=pl.lit(source),
        source_format=pl.lit(FORMAT),
        counters=pl.lit("cumulative"),
        reported_draft_acceptance_rate=pl.col("v0_rate") if "v0_rate" in wide.columns else pl.lit(None),
    ).with_columns(num_spec_tokens=pl.col("num_accepted_tokens_per_pos").list.len().cast(pl.Int64))
    return C.finish(windows), skipped
