"""The aggregate-first path gives the numbers the rows give.

The report sums its steady-state rows once into cells (``analysis.cost.step_cells``) and reads
every grouping of the acceptance summary and the timing by batch from them; these tests build a
frame with several sources, engines, methods, k, batch sizes, hours, unknown values, per-position
lists longer than k and outliers, and compare the cells' answers with the rows' exactly.
"""

from __future__ import annotations

import math
import random

import polars as pl
import pytest

from specobs import schema
from specobs.analysis import acceptance
from specobs.analysis.cost import steady_state, step_cells, timing_by_batch


def generated_windows(n: int = 20000, seed: int = 11) -> pl.DataFrame:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        method = rng.choice(["ngram", "eagle3", "draft_model", None])
        k = 0 if method is None else rng.choice([1, 2, 3, 5])
        batch = rng.choice([1, 3, 4, 8, 31, None])
        drafts = 0 if not k else rng.randint(0, batch or 4)
        per_pos = sorted((rng.randint(0, drafts) for _ in range(k)), reverse=True) if k else None
        if per_pos is not None and rng.random() < 0.05:
            per_pos = [*per_pos, 0]  # a list longer than k widens the positions
        draft_tokens = drafts * k - (rng.randint(0, drafts) if method == "ngram" and drafts else 0)
        accepted = sum(per_pos or [])
        slow = 40.0 if rng.random() < 0.01 else 1.0  # a few outliers lose their timing
        step = (0.01 + 0.001 * (batch or 1) + 0.002 * k) * slow * rng.uniform(0.9, 1.1)
        unknown = rng.random() < 0.05
        source, engine = rng.choice(["a.parquet", "b.jsonl"]), rng.choice([0, 1])
        rows.append(
            {
                "end_ts": 1_764_000_000.0 + i * 0.4 + rng.random(),
                "source": source,
                "engine": engine,
                "run_id": {"a.parquet": "r1", "b.jsonl": "r2"}[source],
                "model": "m",
                "method": method,
                "platform": ["cuda", "rocm"][engine],
                "workload": rng.choice(["chat", None]),
                "batch_size": batch,
                "num_scheduled_tokens": None if batch is None else batch + draft_tokens + rng.choice([0, 0, 0, 64]),
                "num_spec_tokens": k,
                "num_drafts": None if unknown else drafts,
                "num_draft_tokens": draft_tokens,
                "num_accepted_tokens": None if unknown and rng.random() < 0.5 else accepted,
                "num_accepted_tokens_per_pos": per_pos,
                "num_drafts_per_pos": [drafts] * len(per_pos) if per_pos is not None and rng.random() < 0.3 else None,
                "num_generated_tokens": None if batch is None else (batch + accepted),
                "draft_seconds": None if not k or rng.random() < 0.1 else step * 0.3,
                "verify_seconds": step * 0.6,
                "step_seconds": None if rng.random() < 0.02 else step,
                "num_timed_steps": 1,
                "counters": "step",
            }
        )
    frame = pl.DataFrame(rows, schema_overrides={k: v for k, v in schema.WINDOWS.items() if k in rows[0]})
    return schema.conform(frame.with_columns(start_ts=pl.col("end_ts") - pl.col("step_seconds")), schema.WINDOWS)


def assert_same(a: pl.DataFrame, b: pl.DataFrame) -> None:
    """Equal frames: integers, strings and lists exactly, floats to their last bits (sums of
    floats are added in another order)."""
    assert a.columns == b.columns
    assert a.height == b.height
    for x, y in zip(a.iter_rows(named=True), b.iter_rows(named=True), strict=True):
        for name in a.columns:
            assert _close(x[name], y[name]), (name, x[name], y[name])


def _close(x: object, y: object) -> bool:
    if isinstance(x, float) and isinstance(y, float):
        return x == y or (math.isnan(x) and math.isnan(y)) or abs(x - y) <= 1e-12 * max(abs(x), abs(y))
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(_close(p, q) for p, q in zip(x, y, strict=True))
    return x == y


@pytest.fixture(scope="module")
def trimmed() -> pl.DataFrame:
    frame = steady_state(generated_windows()).collect()
    assert frame["unsteady"].drop_nulls().len() > 0  # the outliers are in the test
    return frame


BYS = [
    acceptance.DEFAULT_BY,
    ("method",),
    ("method", "k"),
    ("k", "batch"),
    ("batch_size",),
    ("engine", "run", "workload"),
    ("platform", "hour"),
    ("source", "engine", "model", "method", "draft_model", "workload", "platform", "device", "run", "k", "batch"),
]


@pytest.mark.parametrize("by", BYS)
def test_summary_from_cells_is_the_summary_from_rows(trimmed: pl.DataFrame, by: tuple[str, ...]) -> None:
    cells = step_cells(trimmed)
    assert cells.height < trimmed.height / 5
    for from_rows, from_cells in zip(
        acceptance.summarize_with_total(trimmed, by), acceptance.summarize_with_total(cells, by), strict=True
    ):
        assert_same(from_rows, from_cells)


def test_cells_hold_exact_counts(trimmed: pl.DataFrame) -> None:
    """Counts are integers: the cells' totals are the rows' totals to the token."""
    total, _ = acceptance.summarize_with_total(step_cells(trimmed), ())
    row = total.row(0, named=True)
    known = trimmed.filter(pl.col("num_drafts").is_not_null() & pl.col("num_accepted_tokens").is_not_null())
    assert row["num_drafts"] == trimmed["num_drafts"].sum()
    assert row["num_accepted_tokens"] == trimmed["num_accepted_tokens"].sum()
    assert row["num_windows"] == trimmed.height
    assert row["drafts_for_length"] == known.filter(pl.col("num_drafts") > 0)["num_drafts"].sum()
    positions = trimmed.filter(pl.col("num_accepted_tokens_per_pos").is_not_null() & (pl.col("num_drafts") > 0))
    first = positions.select(pl.col("num_accepted_tokens_per_pos").list.get(0, null_on_oob=True)).to_series().sum()
    assert row["num_accepted_tokens_per_pos"][0] == first


@pytest.mark.parametrize("keys", [[], ["method"], ["source", "engine", "model", "method"], ["num_spec_tokens"]])
def test_timing_from_cells_is_the_timing_from_rows(trimmed: pl.DataFrame, keys: list[str]) -> None:
    assert_same(timing_by_batch(trimmed, keys), timing_by_batch(step_cells(trimmed), keys))


@pytest.mark.parametrize("by", [("method", "k"), ("k", "batch"), ()])
def test_the_same_cells_in_any_order_give_the_same_digits(trimmed: pl.DataFrame, by: tuple[str, ...]) -> None:
    """A group-by hands cells (and groups) back in any order; a float sum taken in that order
    differs in its last bits from one run to the next. Summed in order of value, one input
    reports the same digits every time (the dashboard compares a report with itself)."""
    cells = step_cells(trimmed)
    keys = acceptance.group_columns(by)
    first_summary = acceptance.summarize_with_total(cells, by)
    first_timing = timing_by_batch(cells, keys)
    sums = [c for c, dtype in first_timing.schema.items() if dtype.is_float()]
    assert sums and first_timing.select(sums).null_count().row(0) != tuple(first_timing.height for _ in sums)
    for seed in range(8):
        shuffled = cells.sample(fraction=1.0, shuffle=True, seed=seed)
        assert timing_by_batch(shuffled, keys).equals(first_timing), seed
        total, groups = acceptance.summarize_with_total(shuffled, by)
        assert total.equals(first_summary[0]), seed
        assert groups.sort(keys or pl.first()).equals(first_summary[1].sort(keys or pl.first())), seed


def test_parquet_labels_are_read_as_codes_and_mix_with_text_sources(tmp_path):
    """A Parquet event file is decoded once with its labels as categoricals (``schema.conform``
    keeps them); read beside a JSON-lines file (labels as text) the windows concatenate, and
    every label reads back as the text each file holds, with the report the same either way."""
    from specobs.advice.report_builder import analyze
    from specobs.ingest import load

    def steps(method: str, run: str, n: int) -> pl.DataFrame:
        rows = [
            {"ts": 1000.0 + i, "run_id": run, "engine": 0, "model": "m", "method": method, "batch_size": 1 + i % 4,
             "num_spec_tokens": 3, "num_drafts": 1, "num_draft_tokens": 3, "num_accepted_tokens": i % 4,
             "step_seconds": 0.02}
            for i in range(n)
        ]  # fmt: skip
        return schema.conform(pl.DataFrame(rows, infer_schema_length=None), schema.STEPS)

    steps("ngram", "p", 50).write_parquet(tmp_path / "a.parquet")
    steps("eagle3", "j", 40).write_ndjson(tmp_path / "b.jsonl")
    alone = load([str(tmp_path / "a.parquet")]).windows.collect()
    assert alone.schema["method"] == pl.Categorical and alone.schema["run_id"] == pl.Categorical
    mixed = load([str(tmp_path / "a.parquet"), str(tmp_path / "b.jsonl")])
    frame = mixed.windows.collect()
    assert frame.schema["method"] == pl.String
    counts = frame.group_by("run_id", "method").len().sort("run_id")
    assert counts.rows() == [("j", "eagle3", 40), ("p", "ngram", 50)]
    parquet_part = analyze(load([str(tmp_path / "a.parquet")])).summary
    assert parquet_part.num_drafts == 50 and parquet_part.num_accepted_tokens == sum(i % 4 for i in range(50))
    text = tmp_path / "text"
    text.mkdir()
    steps("ngram", "p", 50).write_ndjson(text / "a.jsonl")
    assert (
        analyze(load([str(text / "a.jsonl")])).to_dict()["summary"]
        == analyze(load([str(tmp_path / "a.parquet")])).to_dict()["summary"]
    )
