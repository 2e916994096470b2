"""A step drains below the batch its stretch reached: the same read whole or in slices.

``with_draining`` follows each engine's steps in order, so a slice of a file begins inside a
stretch that began in the slice before; ``draining_state`` carries where each engine stood.
"""

from __future__ import annotations

import polars as pl
from support.paths import ROOT

from specobs.analysis.cost import draining_state, with_draining
from specobs.ingest import events
from specobs.ingest.source import open_source

SWEEP = ROOT / "examples" / "data" / "vllm-cpu-sweep"


def steps() -> pl.DataFrame:
    """The bundled sweep's steps of its three engines, interleaved in time (engines of one
    source file each), as windows."""
    frames = [events.read_jsonl(open_source(str(p)))[0].collect() for p in sorted(SWEEP.glob("specobs-*"))]
    one = pl.concat(frames).sort("ts")
    return events.steps_to_windows(one.lazy(), "engines.parquet", events.FORMAT_PARQUET).collect()


def in_slices(frame: pl.DataFrame, cuts: list[int], carry: bool) -> pl.Series:
    state = None
    drained = []
    for lo, hi in zip([0, *cuts], [*cuts, frame.height], strict=True):
        part = with_draining(frame.slice(lo, hi - lo), state if carry else None, keep_state=True).collect()
        state = draining_state(part, state)
        drained.append(part.get_column("draining"))
    return pl.concat(drained)


def test_slices_carried_from_one_to_the_next_drain_as_the_whole() -> None:
    frame = steps().with_columns(engine=pl.col("run_id").rank("dense").cast(pl.Int64))
    whole = with_draining(frame).collect().get_column("draining")
    assert 0 < whole.sum() < frame.height  # some steps drain, some do not
    for cuts in ([frame.height // 2], [97, 1_000, 1_001, 4_321, 8_000], list(range(250, frame.height, 250))):
        assert in_slices(frame, cuts, carry=True).equals(whole), cuts
    # Without the carry the slices would not agree: the test can tell.
    assert not in_slices(frame, list(range(250, frame.height, 250)), carry=False).equals(whole)


def test_an_engine_missing_from_a_slice_keeps_its_state() -> None:
    frame = pl.DataFrame(
        {
            "source": ["f"] * 6,
            "engine": [0, 0, 1, 1, 0, 0],
            "batch_size": [8, 8, 4, 4, 6, 9],
            "counters": ["step"] * 6,
            "num_scheduled_tokens": [8, 8, 4, 4, 6, 9],
            "num_draft_tokens": [0] * 6,
        }
    ).with_columns(pl.col("source", "counters").cast(pl.Categorical))
    whole = with_draining(frame).collect().get_column("draining").to_list()
    assert whole == [False, False, False, False, True, False]  # 6 drains below engine 0's 8
    assert in_slices(frame, [2, 4], carry=True).to_list() == whole
    assert in_slices(frame, [2, 4], carry=False).to_list() != whole
