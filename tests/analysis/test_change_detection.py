"""Change detection within one configuration: a planned k switch or a batch-size change is
never a regression; a real drop in acceptance within one configuration still is."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from support.paths import ROOT

from specobs import schema
from specobs.analysis.acceptance import DEFAULT_BY, group_columns, with_group_columns
from specobs.analysis.timeseries import CONFIGURATION, acceptance_over_time, change_points, detect_changes
from specobs.ingest import load
from specobs.records import Change

SWEEP = ROOT / "examples" / "data" / "vllm-cpu-sweep"


def windows(segments: list[tuple[int, dict]], *, seed: int = 0, drafts: int = 200) -> pl.DataFrame:
    """Consecutive 10 s windows; each segment is (count, settings) with ``beta`` (iid per-token
    acceptance), ``k`` and ``batch_size`` (one value or a list to cycle through)."""
    rng = np.random.default_rng(seed)
    rows, ts = [], 1.7e9
    for count, settings in segments:
        beta, k = settings.get("beta", 0.8), settings.get("k", 3)
        sizes = settings.get("batch_size", 4)
        sizes = sizes if isinstance(sizes, list) else [sizes]
        for i in range(count):
            passed = rng.random((drafts, k)) < beta
            lengths = np.where(passed.all(-1), k, np.argmin(passed, -1))
            rows.append(
                {
                    "start_ts": ts,
                    "end_ts": ts + 10.0,
                    "source": "s",
                    "source_line": len(rows) + 1,
                    "engine": 0,
                    "model": "m",
                    "method": settings.get("method", "eagle3"),
                    "workload": settings.get("workload"),
                    "counters": "interval",
                    "batch_size": sizes[i % len(sizes)],
                    "num_spec_tokens": k,
                    "num_drafts": drafts,
                    "num_draft_tokens": drafts * k,
                    "num_accepted_tokens": int(lengths.sum()),
                    "num_accepted_tokens_per_pos": [int((lengths > j).sum()) for j in range(k)],
                }
            )
            ts += 10.0
    return schema.conform(pl.DataFrame(rows), schema.WINDOWS)


@pytest.fixture(scope="module")
def sweep() -> pl.DataFrame:
    return load([str(SWEEP)]).windows.collect()


@pytest.mark.parametrize("by", [DEFAULT_BY, ("method", "k"), ("method", "batch"), ()])
def test_bundled_sweep_has_no_regressions(sweep, by):
    keys = group_columns(by)
    found = detect_changes(sweep, keys)
    assert not [c for c in found if c.kind in ("regression", "improvement")]
    for change in found:
        assert change.kind == "configuration_change" and change.changed
        assert set(change.changed) <= set(CONFIGURATION)
        assert all(before != after for before, after in change.changed.values())
        assert set(change.labels) == set(keys) and set(change.configuration) == set(CONFIGURATION)


def test_the_sweeps_steps_are_its_planned_switches(sweep):
    # Without configurations, the same detector reads the planned k switches as regressions ...
    keys = group_columns(DEFAULT_BY)
    series = acceptance_over_time(with_group_columns(sweep.lazy()), keys)
    mixed = [
        c for _, part in series.partition_by(keys, as_dict=True).items() for c in change_points(part, serial=False)
    ]
    assert any(c.kind == "regression" for c in mixed)
    # ... which are switches of k or batch size: every one named as a configuration change is one.
    found = detect_changes(sweep, keys)
    assert found and all({"num_spec_tokens", "batch_bucket"} & set(c.changed) for c in found)


def test_a_real_drop_within_one_configuration_is_a_regression():
    frame = windows([(70, {"beta": 0.8}), (50, {"beta": 0.65})])
    found = detect_changes(frame, ["method"])
    assert [c.kind for c in found] == ["regression"]
    change = found[0]
    assert change.labels == {"method": "eagle3"}
    assert change.configuration == {"method": "eagle3", "num_spec_tokens": 3, "batch_bucket": "4-7", "workload": None}
    assert change.change.ts == pytest.approx(frame["end_ts"][70], abs=30)
    assert change.change.after < change.change.before and not change.changed
    assert detect_changes(windows([(120, {"beta": 0.8})]), ["method"]) == []


def test_a_planned_k_change_is_a_configuration_change_not_a_regression():
    frame = windows([(60, {"k": 6, "beta": 0.8}), (60, {"k": 2, "beta": 0.8})])  # shorter drafts, shorter length
    found = detect_changes(frame, ["method"])
    assert [c.kind for c in found] == ["configuration_change"]
    assert found[0].changed == {"num_spec_tokens": (6, 2)}
    assert found[0].change.after < found[0].change.before  # acceptance did fall: by plan
    assert found[0].to_dict()["changed"] == {"num_spec_tokens": [6, 2]}


def test_a_batch_size_change_is_a_configuration_change():
    frame = windows([(60, {"batch_size": 1, "beta": 0.85}), (60, {"batch_size": 16, "beta": 0.7})])
    found = detect_changes(frame, [])
    assert [(c.kind, c.changed) for c in found] == [("configuration_change", {"batch_bucket": ("1", "16-31")})]


def test_a_drop_under_alternating_batch_sizes_is_found_in_each_configuration():
    frame = windows([(80, {"batch_size": [2, 8], "beta": 0.8}), (80, {"batch_size": [2, 8], "beta": 0.65})])
    found = detect_changes(frame, ["method"])
    regressions = [c for c in found if c.kind == "regression"]
    assert sorted(c.configuration["batch_bucket"] for c in regressions) == ["2-3", "8-15"]
    assert all(c.kind != "improvement" for c in found)


def test_change_json_form():
    change = detect_changes(windows([(60, {"k": 6}), (60, {"k": 2})]), ["method"])[0]
    assert isinstance(change, Change)
    data = change.to_dict()
    assert list(data) == ["method", "ts", "kind", "before", "after", "z", "configuration", "changed"]
    assert data["kind"] == "configuration_change" and data["configuration"]["num_spec_tokens"] == 2
