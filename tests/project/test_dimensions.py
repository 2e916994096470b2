"""The vocabulary of dimensions (``specobs/dimensions.py``) against everything that names one.

Every check loops over the vocabulary: a dimension added there is checked here without a hand list.
- ``--by`` takes each grouping dimension, on real bundled captures and logs, and a run-metadata
  dimension's group labels are the values of that run's metadata, read here from the files by hand;
- the exporters publish each dimension's Prometheus label and OpenTelemetry attribute;
- the key lists the rest of the package uses are the vocabulary's.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from support.paths import ROOT

from specobs import api, dimensions, schema
from specobs.analysis import acceptance
from specobs.analysis.runs import schedule_text, with_run_dimensions
from specobs.errors import SpecobsError
from specobs.records import ENVIRONMENT_FIELDS, RunMetadata

DATA = ROOT / "examples" / "data"
#: Real captures with run metadata beside them (CPU_ATTN, TP = 2, DP = 2, eight methods, short and long contexts).
CAPTURES = ("vllm-cpu-sweep", "vllm-cpu-parallel", "vllm-cpu-methods", "vllm-cpu-context")
GROUPING = dimensions.having(dimensions.GROUP)
#: What the run metadata fills: its own dimensions, and the row labels the capture copies from it.
FROM_METADATA = [d for d in GROUPING if d.source == dimensions.METADATA or d.column in schema.METADATA_LABELS]


def _metadata_by_hand(folder: Path) -> dict[tuple[str, int], dict]:
    """Each engine's newest metadata record, read with json (gzipped or not)."""
    out: dict[tuple[str, int], dict] = {}
    for path in sorted(folder.rglob("*meta*.jsonl*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as f:
            for line in f:
                record = json.loads(line)
                out[(record["run_id"], record["engine"])] = record
    return out


@pytest.fixture(scope="module")
def loaded():
    return {name: api.load(str(DATA / name)) for name in CAPTURES}


def test_every_grouping_dimension_is_a_by_name_and_back():
    assert list(acceptance.GROUP_KEYS) == [d.name for d in GROUPING]
    for d in GROUPING:
        assert acceptance.parse_by(d.name) == [d.name]
    with pytest.raises(SpecobsError) as caught:
        acceptance.parse_by("attention_backend,nonsense")
    assert "unknown --by nonsense" in str(caught.value) and "device_arch" in str(caught.value)


@pytest.mark.slow
@pytest.mark.parametrize("dimension", [d.name for d in GROUPING])
def test_by_every_dimension_on_the_bundled_captures(loaded, dimension):
    d = dimensions.by_name(dimension)
    for name, data in loaded.items():
        by = list(dict.fromkeys(["run", "engine", dimension]))
        report = api.analyze(data, by=by, timing=False, with_recommendation=False)
        drafts = sum(g.summary.num_drafts or 0 for g in report.groups)
        assert drafts == report.summary.num_drafts, (name, dimension)  # a split never loses or adds counts
        if d not in FROM_METADATA:
            continue
        by_hand = _metadata_by_hand(DATA / name)
        assert by_hand, name
        for group in report.groups:
            record = by_hand[(group.labels["run_id"], group.labels["engine"])]
            want = record.get(d.field)
            if d.name == "schedule":
                want = schedule_text(want)
            assert group.labels[d.column] == want, (name, dimension, group.labels)


def test_a_dimension_the_inputs_lack_is_said_not_guessed():
    report = api.analyze(str(DATA / "vllm-cpu-sweep"), by="device_arch,context", with_recommendation=False)
    assert report.unrecorded == ("device_arch", "context")  # no arch in the metadata; captured before context
    assert report.to_dict()["unrecorded_dimensions"] == ["device_arch", "context"]
    assert all(g.labels["device_arch"] is None and g.labels["context_bucket"] is None for g in report.groups)


def test_a_log_takes_its_labels_from_its_own_metadata():
    data = api.load(str(DATA / "vllm-cpu-ngram-k3.log"))
    (record,) = data.metadata
    report = api.analyze(data, by="vllm_version,tensor_parallel_size,dtype", with_recommendation=False)
    (group,) = report.groups
    assert group.labels == {
        "vllm_version": record.vllm_version,
        "tensor_parallel_size": record.tensor_parallel_size,
        "dtype": record.dtype,
    }
    assert record.vllm_version is not None and record.dtype is not None


def test_the_join_fills_only_what_the_rows_lack_and_matches_run_and_engine():
    rows = pl.DataFrame(
        {
            "run_id": ["a", "a", "b", "c"],
            "engine": [0, 1, 0, 0],
            "attention_backend": [None, "ROW_WINS", None, None],
        }
    ).lazy()
    metadata = [
        RunMetadata(run_id="a", engine=0, attention_backend="OLD", device_arch="gfx942"),
        RunMetadata(run_id="a", engine=0, attention_backend="ROCM_AITER_FA", device_arch="gfx942"),  # newest wins
        RunMetadata(run_id="a", engine=1, attention_backend="TRITON_ATTN", tensor_parallel_size=8),
        RunMetadata(run_id="b", engine=None, kv_cache_dtype="fp8", schedule=((1, 8, 3), (9, 64, 1))),  # any engine
    ]
    out = with_run_dimensions(rows, metadata).collect()
    assert out["attention_backend"].to_list() == ["ROCM_AITER_FA", "ROW_WINS", None, None]
    assert out["device_arch"].to_list() == ["gfx942", None, None, None]
    assert out["tensor_parallel_size"].to_list() == [None, 8, None, None]
    assert out["kv_cache_dtype"].to_list() == [None, None, "fp8", None]
    assert out["schedule"].to_list() == [None, None, "1-8:3,9-64:1", None]
    assert out.height == 4  # a left join: no row lost or doubled
    # Without metadata every column is there and unknown.
    empty = with_run_dimensions(rows, []).collect()
    assert set(schema.RUN_DIMENSIONS) <= set(empty.columns) and empty["dtype"].null_count() == 4


# --- the vocabulary against the exporters and the key lists ----------------------------------


@pytest.fixture(scope="module")
def exported():
    """Every Prometheus family the sidecar serves for a bundled run, and the labels each has."""
    from prometheus_client import CollectorRegistry

    from specobs.exporters.prometheus import PrometheusMetrics
    from specobs.exporters.sidecar import Sidecar

    folder = DATA / "vllm-cpu-sweep"
    registry = CollectorRegistry()
    files = sorted(str(p) for p in folder.glob("*ngram*.jsonl"))
    sidecar = Sidecar(files, PrometheusMetrics(registry), tuning_interval=0)
    try:
        sidecar.poll_once()
    finally:
        sidecar.stop()
    labels: dict[str, set[str]] = {}
    for family in registry.collect():
        for sample in family.samples:
            labels.setdefault(family.name, set()).update(sample.labels)
    return labels


def test_every_dimension_with_a_prometheus_label_is_on_the_exported_series(exported):
    everywhere = set.union(*exported.values())
    for d in dimensions.DIMENSIONS:
        if d.prometheus is not None:
            assert d.prometheus in everywhere, d.name
        if dimensions.SERIES in d.roles:  # the engine's identity: on every step series
            assert d.prometheus in exported["specobs_steps"], d.name
        if dimensions.INFO in d.roles:
            assert d.field in exported["specobs_engine_info"], d.name
    # and nothing else is: every label of a step or info series is a dimension's, a position, or a reason
    known = {d.prometheus for d in dimensions.DIMENSIONS if d.prometheus} | {d.field for d in dimensions.DIMENSIONS}
    for name in ("specobs_steps", "specobs_engine_info", "specobs_draft_seconds"):
        assert exported[name] - {"quantile"} <= known, name


def test_every_otel_attribute_comes_from_the_vocabulary_and_reaches_the_resource():
    from specobs.exporters.otel import RESOURCE_ATTRIBUTES, resource_attributes

    assert {
        d.field: d.otel for d in dimensions.DIMENSIONS if dimensions.RESOURCE in d.roles and d.field and d.otel
    } == RESOURCE_ATTRIBUTES
    record = {d.field: (2 if d.field.endswith("_size") or d.field in ("engine",) else f"v-{d.name}")
              for d in dimensions.having(dimensions.RESOURCE) if d.field}  # fmt: skip
    record["num_speculative_tokens"] = 3
    assert set(resource_attributes(record)) == set(RESOURCE_ATTRIBUTES.values())


def test_the_key_lists_are_the_vocabularys():
    from specobs.analysis.sums import SERIES_KEYS
    from specobs.dashboard.data import FILTER_COLUMNS
    from specobs.exporters.mapping import INFO_FIELDS, LABEL_BUDGET, LABELS

    cell = dimensions.columns(dimensions.CELL)
    assert (*cell, acceptance.HOUR_NUMBER) == acceptance.CELL_KEYS
    assert (*cell, "batch_bucket") == SERIES_KEYS
    assert LABELS == ("model_name", "engine", "method")
    assert dimensions.fields_of(dimensions.INFO) == INFO_FIELDS
    assert set(LABEL_BUDGET) <= {d.prometheus for d in dimensions.DIMENSIONS}
    assert schema.TARGET_LABELS == ("model", "method", "draft_model", "platform", "device")
    assert ENVIRONMENT_FIELDS[:-1] == dimensions.fields_of(dimensions.ENVIRONMENT)
    assert set(FILTER_COLUMNS) <= set(schema.LABELS)  # a filter is a row label: every kept sum has it
    # every row label is a dimension's column, every cell key a row column or a derived one
    columns = {d.column for d in dimensions.DIMENSIONS}
    assert set(schema.LABELS) <= columns
    assert all(c in schema.WINDOWS or dimensions.by_name(n).source == dimensions.DERIVED
               for n, c in ((d.name, d.column) for d in dimensions.having(dimensions.CELL)))  # fmt: skip
