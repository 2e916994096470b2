"""Charts written to files (``specobs tune``'s PNG), drawn by the dashboard's own chart code."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from specobs.records import Serving, TuneResult

if TYPE_CHECKING:
    import polars as pl


def tune_frame(result: TuneResult) -> pl.DataFrame:
    """``result.measurements`` as a frame, with ``chosen``: the k the schedule uses at that batch size."""
    import polars as pl

    chosen = {
        (b.measured_batch_size, b.num_speculative_tokens)
        for b in result.buckets
        if b.basis == "measured" and result.speculative_config is not None
    }
    rows = [m.to_dict() | {"chosen": (m.batch_size, m.num_speculative_tokens) in chosen and m.engine == "speculative"}
            for m in result.measurements]  # fmt: skip
    return pl.DataFrame(rows)


def save_tune_plot(result: TuneResult, path: Path) -> Path | None:
    """Measured tokens/s against k per batch size as a PNG; None without Altair or vl-convert."""
    if not result.measurements or any(importlib.util.find_spec(m) is None for m in ("altair", "vl_convert")):
        return None
    from specobs.render.charts import tune_measurements

    tune_measurements(tune_frame(result)).save(str(path), format="png", scale_factor=2)
    return path


def save_serving_plot(bench: pl.DataFrame, serving: Serving, path: Path) -> Path | None:
    """Throughput and TPOT against load, plain against each configuration, crossovers marked, as
    a PNG; None without Altair or vl-convert, or without results."""
    if not bench.height or any(importlib.util.find_spec(m) is None for m in ("altair", "vl_convert")):
        return None
    import altair as alt

    from specobs.render.charts import serving_frames, serving_load

    charts = [serving_load(frame).properties(title=title) for title, frame in serving_frames(bench, serving)]
    alt.vconcat(*charts).save(str(path), format="png", scale_factor=2)
    return path
