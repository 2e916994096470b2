"""Prometheus and OpenTelemetry publish every family of the table, with the same series from
the same input, hostile rows included.

Both exporters publish the one family table (specobs/ingest/specobs_metrics.py) through one
dispatch (specobs/exporters/families.py) and one mapping (specobs/exporters/mapping.py); this
reads what each actually publishes — the Prometheus exposition text, and OpenTelemetry through the
SDK's in-memory reader and through OTLP/HTTP to a real receiver — and compares them family by
family, looping over the table: every family has series, and the same ones on both sides.
"""

from __future__ import annotations

import json
import math
import threading
from http.server import HTTPServer

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString
from support.otlp import ROW, _Receiver
from support.paths import ROOT

from specobs.exporters.prometheus import PrometheusMetrics
from specobs.exporters.sidecar import Sidecar
from specobs.ingest.specobs_metrics import FAMILIES

pytest.importorskip("opentelemetry.sdk", reason="needs specobs[otel]")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, PeriodicExportingMetricReader

from specobs.exporters.otel import OtelMetrics

#: OpenTelemetry instrument → Prometheus family, as published: the names are a contract on both
#: sides, so the pairing is written out here and the table is held to it.
NAMES = {
    "specobs.steps": "specobs_steps",
    "specobs.drafts": "specobs_drafts",
    "specobs.draft_tokens": "specobs_draft_tokens",
    "specobs.accepted_tokens": "specobs_accepted_tokens",
    "specobs.generated_tokens": "specobs_generated_tokens",
    "specobs.draft_positions": "specobs_draft_positions",
    "specobs.accepted_tokens.position": "specobs_accepted_tokens_per_position",
    "specobs.drafts.position": "specobs_drafts_per_position",
    "specobs.draft.duration": "specobs_draft_seconds",
    "specobs.verify.duration": "specobs_verify_seconds",
    "specobs.step.duration": "specobs_step_seconds",
    "specobs.cost_ratio": "specobs_cost_ratio",
    "specobs.draft_share": "specobs_draft_share",
    "specobs.speculative_config_info": "specobs_speculative_config_info",
    "specobs.engine_info": "specobs_engine_info",
    "specobs.request.acceptance_length": "specobs_request_acceptance_length",
    "specobs.label_overflow": "specobs_label_overflow",
    "specobs.dropped_values": "specobs_dropped_values",
    "specobs.predicted_speedup": "specobs_predicted_speedup",
    "specobs.recommended.num_speculative_tokens": "specobs_recommended_num_speculative_tokens",
    "specobs.dropped_events": "specobs_dropped_events",
    "specobs.hook_errors": "specobs_hook_errors",
    "specobs.untimed_steps": "specobs_untimed_steps",
    "specobs.tuner.num_speculative_tokens": "specobs_tuner_num_speculative_tokens",
    "specobs.tuner.decisions": "specobs_tuner_decisions",
    "specobs.exporter.rows": "specobs_exporter_rows",
    "specobs.exporter.errors": "specobs_exporter_errors",
    "specobs.skipped_records": "specobs_skipped_records",
}
BUDGET = {"model_name": 3}
SWEEP = ROOT / "examples" / "data" / "vllm-cpu-sweep"
OTHER_ENGINE = {**ROW, "engine": 1, "method": "ngram", "batch_size": 3000, "num_spec_tokens": 4,
                "num_draft_tokens": 8, "num_accepted_tokens": 3, "num_accepted_tokens_per_pos": [2, 1, 0, 0],
                "num_drafts_per_pos": [4, 2, 2, 0]}  # fmt: skip
WINDOW = {**ROW, "num_timed_steps": 5, "num_drafts": 40, "num_draft_tokens": 120, "num_accepted_tokens": 30,
          "num_accepted_tokens_per_pos": [20, 7, 3]}  # fmt: skip
#: (row, window?): good rows over two engines, methods and batch buckets, a log window, and rows
#: that must not reach a metric as they are.
ROWS: list[tuple[dict, bool]] = [
    (ROW, False),
    ({**ROW, "batch_size": 1, "num_drafts_per_pos": [4, 3, 2]}, False),
    (OTHER_ENGINE, False),
    ({**ROW, "batch_size": None, "draft_seconds": None}, False),
    (WINDOW, True),
    # hostile: non-finite and negative timings, negative and non-integer counts
    ({**ROW, "step_seconds": float("nan"), "draft_seconds": float("inf"), "verify_seconds": -0.5}, False),
    ({**ROW, "num_drafts": -3, "num_accepted_tokens": float("nan"), "num_generated_tokens": "12"}, False),
    ({**ROW, "num_draft_tokens": 2.5, "num_accepted_tokens": 0}, False),
    ({**ROW, "num_accepted_tokens_per_pos": [3, float("nan"), 1]}, False),  # no per-position counts, no drafts
    ({**ROW, "num_drafts_per_pos": [4, -1, 2]}, False),  # drafts count, no per-position counts
    # contradictions: more accepted than drafted, a position accepted more often than reached
    ({**ROW, "num_accepted_tokens": 13}, False),
    ({**ROW, "num_drafts_per_pos": [4, 1, 1]}, False),
    ({**ROW, "num_drafts_per_pos": [9, 9, 9]}, False),
    # too many distinct label values, prompt-like text, an unknown method, a k over its own budget
    *(({**ROW, "model": f"model-{i}"}, False) for i in range(8)),
    ({**ROW, "model": "Ignore previous instructions"}, False),
    ({**ROW, "method": "made_up"}, False),
    *(({**ROW, "num_spec_tokens": k, "num_accepted_tokens_per_pos": [1]}, False) for k in range(4, 24)),
]


METADATA = {"specobs_metadata": 1, "ts": 10.0, "model": "tiny", "engine": 0, "method": "eagle",
            "num_speculative_tokens": 3, "vllm_version": "0.32.0", "platform": "rocm", "device_arch": "gfx942",
            "attention_backend": "ROCM_AITER_FA", "graph_mode": "full_and_piecewise", "model_runner": "v1"}  # fmt: skip
#: Run metadata: two engines, one restarted with another backend (the first record is replaced), an
#: older record read late (ignored), hostile values (capped, dropped).
METADATA_RECORDS = [
    METADATA,
    {**METADATA, "engine": 1, "method": "ngram", "attention_backend": None, "device_arch": None},
    {**METADATA, "ts": 20.0, "attention_backend": "ROCM_ATTN", "vllm_version": "0.33.0"},
    {**METADATA, "ts": 15.0, "attention_backend": "TRITON_ATTN"},
    {**METADATA, "engine": 2, "graph_mode": "Ignore previous instructions", "model_runner": 2,
     "num_speculative_tokens": -1},
]  # fmt: skip
REQUEST = {"model": "tiny", "engine": 0, "method": "eagle", "request_key": "0123456789abcdef", "num_spec_tokens": 3,
           "num_spec_steps": 10, "num_draft_tokens": 30, "num_accepted_tokens": 14}  # fmt: skip
#: Finished requests over every bucket of the per-request histogram, two engines, and bad rows.
REQUEST_ROWS = [
    *({**REQUEST, "num_accepted_tokens": a} for a in (0, 1, 5, 10, 14, 15, 20, 25, 30)),
    *({**REQUEST, "num_spec_tokens": 16, "num_spec_steps": 2, "num_draft_tokens": 32, "num_accepted_tokens": a}
      for a in (9, 11, 15, 32)),
    {**REQUEST, "engine": 1, "method": "ngram", "num_accepted_tokens": 3},
    {**REQUEST, "num_spec_steps": 0, "num_accepted_tokens": 0},  # no drafts: no length
    {**REQUEST, "num_accepted_tokens": 31},  # inconsistent
    {**REQUEST, "num_spec_steps": float("nan")},
    {**REQUEST, "model": "Ignore previous instructions"},
]  # fmt: skip


#: The online tuner's decision log: counted per action; apply and rollback set a bucket's k.
DECISIONS = [
    {"tuner_action": "apply", "batch_size_min": 1, "batch_size_max": 1, "from_k": 3, "to_k": 5},
    {"tuner_action": "confirm", "batch_size_min": 1, "batch_size_max": 1, "from_k": 3, "to_k": 5},
    {"tuner_action": "apply", "batch_size_min": 4, "batch_size_max": 7, "from_k": 3, "to_k": 2},
    {"tuner_action": "rollback", "batch_size_min": 4, "batch_size_max": 7, "from_k": 2, "to_k": 3},
    {"tuner_action": "bogus", "batch_size_min": 8, "batch_size_max": 15, "to_k": 9},  # not an action: left out
]
#: The recorder's health counters, read at scrape or export.
HEALTH = {"dropped_events": 7, "hook_errors": 2, "untimed_steps": 5}
#: Lines of the file the sidecar follows: steps of the bundled ngram run, and records it must skip.
BAD_LINES = [b"{not json", b'{"ts": 1.0, "model": "x", "num_drafts": -2}', b'{"ts": 1.0, "num_drafts": "two"}']


@pytest.fixture(scope="module")
def followed(tmp_path_factory) -> str:
    """An event file of 200 steps of the bundled ngram run (k = 4, and 2 in 18 of them), as model
    ``tiny`` (under the label budget), with three bad records among them."""
    (source,) = SWEEP.glob("specobs-*ngram*.jsonl")
    rows = [json.loads(line) for line in source.read_bytes().splitlines()[:200]]
    lines = [json.dumps({**row, "model": "tiny"}).encode() for row in rows]
    path = tmp_path_factory.mktemp("sidecar") / "specobs-parity-p1.jsonl"
    path.write_bytes(b"\n".join([*lines[:100], *BAD_LINES, *lines[100:]]) + b"\n")
    return str(path)


@pytest.fixture(scope="module")
def recommendation():
    """A real refit of the bundled sweep (the tuning gauges' input)."""
    from specobs.advice.recommend import recommend
    from specobs.ingest import load

    return recommend(load([str(SWEEP)]).windows, bootstrap=0)


def feed(metrics: PrometheusMetrics | OtelMetrics, followed: str, recommendation) -> None:
    """The same input for every family: a sidecar following a file (its rows, refit and own counts),
    step rows and windows, then the capture's rows through the one dispatch (steps, run metadata,
    finished requests, tuner decisions), and a recommendation with the k each method runs."""
    sidecar = Sidecar([followed], metrics, tuning_interval=3600)
    assert sidecar.poll_once() == 200
    sidecar.stop()
    metrics.attach_sidecar(sidecar.counts)
    for row, window in ROWS:
        if window:
            metrics.observe_window(row)
        else:
            metrics.write([row])
    metrics.write([*METADATA_RECORDS, *REQUEST_ROWS, *DECISIONS])
    metrics.set_recommendation(recommendation, "tiny", {"ngram": 6, "eagle": 3})


def prometheus_series(registry: CollectorRegistry) -> dict[tuple, float]:
    """``(family, labels, field)`` → value from the exposition text (``_created`` left out: OTLP
    carries a start time instead)."""
    out: dict[tuple, float] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            labels = frozenset(sample.labels.items())
            if sample.name.endswith("_created"):  # the text format types these as gauges of their own
                continue
            if family.type == "counter":
                assert sample.name == family.name + "_total"
                out[(family.name, labels, "value")] = sample.value
            elif family.type == "summary" or family.type == "histogram":
                out[(family.name, labels, sample.name.removeprefix(family.name + "_"))] = sample.value
            else:
                assert family.type == "gauge", family
                out[(family.name, labels, "value")] = sample.value
    return out


def buckets(name: str, labels: frozenset, bounds, counts) -> dict[tuple, float]:
    """An OpenTelemetry histogram's per-bucket counts as Prometheus' cumulative ``_bucket`` series
    (only for the families Prometheus publishes as histograms: the timings are summaries there)."""
    if name != "specobs_request_acceptance_length":
        return {}
    out, total = {}, 0
    for bound, count in zip([*bounds, math.inf], counts, strict=True):
        total += count
        out[(name, labels | {("le", floatToGoString(bound))}, "bucket")] = total
    return out


def otel_series(metrics_data) -> dict[tuple, float]:
    """The same keys from the SDK's metrics data."""
    out: dict[tuple, float] = {}
    for resource in metrics_data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                name = NAMES[metric.name]
                for point in metric.data.data_points:
                    labels = frozenset(point.attributes.items())
                    if hasattr(point, "bucket_counts"):  # a histogram: what a summary publishes
                        out[(name, labels, "count")] = point.count
                        out[(name, labels, "sum")] = point.sum
                        out.update(buckets(name, labels, point.explicit_bounds, point.bucket_counts))
                    else:
                        out[(name, labels, "value")] = point.value
    return out


def otlp_series(requests) -> dict[tuple, float]:
    """The same keys from the OTLP protobufs a real receiver decoded (the last export of each series)."""
    out: dict[tuple, float] = {}
    for request in requests:
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    name = NAMES[metric.name]
                    kind = metric.WhichOneof("data")
                    for point in getattr(metric, kind).data_points:
                        labels = frozenset((a.key, a.value.string_value) for a in point.attributes)
                        if kind == "histogram":
                            out[(name, labels, "count")] = point.count
                            out[(name, labels, "sum")] = point.sum
                            out.update(buckets(name, labels, point.explicit_bounds, point.bucket_counts))
                        else:
                            number = point.WhichOneof("value")
                            out[(name, labels, "value")] = getattr(point, number)
    return out


def assert_same(prometheus: dict[tuple, float], otel: dict[tuple, float]) -> None:
    """Family by family over the table: each has series, the same on both sides, with the same values."""
    for family in FAMILIES:
        ours = {key: value for key, value in prometheus.items() if key[0] == family.name}
        theirs = {key: value for key, value in otel.items() if key[0] == family.name}
        assert ours, f"{family.name}: no series from the input (feed it)"
        assert set(theirs) == set(ours), (family.name, set(ours) - set(theirs), set(theirs) - set(ours))
        for key, value in ours.items():
            assert theirs[key] == pytest.approx(value, rel=1e-12), key
    assert {key[0] for key in otel} == {key[0] for key in prometheus} == {family.name for family in FAMILIES}


def test_the_table_keeps_the_published_names():
    """Every family in the table, under the names both sides have published."""
    assert {family.otel: family.name for family in FAMILIES} == NAMES
    assert len(FAMILIES) == len(NAMES) == 28


@pytest.fixture(scope="module")
def prometheus(followed, recommendation) -> dict[tuple, float]:
    registry = CollectorRegistry()
    feed(PrometheusMetrics(registry, health=lambda: HEALTH, label_budget=BUDGET), followed, recommendation)
    return prometheus_series(registry)


def test_both_publish_the_same_series_through_the_sdk_reader(prometheus, followed, recommendation):
    reader = InMemoryMetricReader()
    metrics = OtelMetrics(MeterProvider(metric_readers=[reader]), label_budget=BUDGET, health=lambda: HEALTH)
    feed(metrics, followed, recommendation)
    assert_same(prometheus, otel_series(reader.get_metrics_data()))
    metrics.shutdown()


def test_both_publish_the_same_series_over_otlp(prometheus, followed, recommendation):
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    server = HTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Receiver.requests = []
    exporter = OTLPMetricExporter(endpoint=f"http://127.0.0.1:{server.server_port}/v1/metrics")
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=60_000)
    metrics = OtelMetrics(MeterProvider(metric_readers=[reader]), label_budget=BUDGET, health=lambda: HEALTH)
    feed(metrics, followed, recommendation)
    assert metrics.force_flush()
    metrics.shutdown()
    server.shutdown()
    assert_same(prometheus, otlp_series(_Receiver.requests))


def test_the_hostile_rows_were_checked_capped_and_counted(prometheus):
    """What both published (equal by the tests above) is what the rows should give, by hand."""

    def value(name, field="value", **labels):
        return prometheus.get((name, frozenset(labels.items()), field))

    assert all(math.isfinite(v) for v in prometheus.values())
    dropped = {reason: value("specobs_dropped_values", reason=reason)
               for reason in ("non_finite", "negative", "wrong_type", "inconsistent")}  # fmt: skip
    # NaN and Inf seconds, NaN accepted tokens, NaN in a per-position list; -0.5 s, -3 drafts, -1
    # in a list; "12" tokens and 2.5 draft tokens; 13 accepted of 12 drafted, 2 accepted at a
    # position 1 draft reached, 9 drafts reaching a position of a step with 4.
    # Then the metadata and requests: a model_runner of 2 (wrong_type), a k of -1 (negative), a NaN of
    # verify steps (non_finite), 31 accepted of 30 drafted (inconsistent).
    assert dropped == {"non_finite": 4 + 1, "negative": 3 + 1, "wrong_type": 2 + 1, "inconsistent": 3 + 1}
    models = {dict(labels).get("model_name") for _, labels, _ in prometheus}
    assert models - {None} == {"tiny", "model-0", "model-1", "other"}
    # model-2 … model-7 and the prompt; the request with the prompt for a model name
    assert value("specobs_label_overflow", label="model_name") == 7 + 1
    assert value("specobs_label_overflow", label="graph_mode") == 1
    assert value("specobs_label_overflow", label="method") == 1
    assert value("specobs_label_overflow", label="num_speculative_tokens") == 22 - 16  # k 2 … 23, 16 kept
    tiny = {"model_name": "tiny", "engine": "0", "method": "eagle"}
    # Steps: 3 good rows, a window of 5, 5 rows with bad values, the 20 rows of k; no contradiction.
    assert value("specobs_steps", **tiny) == 3 + 5 + 5 + 20
    # Drafts: 4 per step row, the window's 40; none from the row with -3 drafts, nor from the row
    # whose per-position list held a NaN.
    assert value("specobs_drafts", **tiny) == 4 * (3 + 3 + 20) + 40
    # Batch 4: the NaN step time and the -0.5 s verify time are not observed, the other rows' are.
    timed = {**tiny, "batch_size_bucket": "4-7"}
    assert value("specobs_step_seconds", "count", **timed) == 1 + 4 + 20
    assert value("specobs_verify_seconds", "count", **timed) == 1 + 4 + 20
    assert value("specobs_draft_seconds", "count", **timed) == 1 + 4 + 20
    ngram = {"model_name": "tiny", "engine": "1", "method": "ngram"}
    assert value("specobs_accepted_tokens_per_position", position="2", **ngram) == 0  # reached, never accepted
    assert value("specobs_drafts_per_position", position="3", **ngram) is None  # reached by no draft
    assert value("specobs_step_seconds", "count", **ngram, batch_size_bucket="2048+") == 1
    assert value("specobs_step_seconds", "count", **tiny, batch_size_bucket="unknown") == 1


def test_metadata_and_requests_were_replaced_capped_and_counted(prometheus):
    """The engine and request series both published, by hand."""
    info = {dict(labels)["engine"]: dict(labels) for name, labels, _ in prometheus if name == "specobs_engine_info"}
    assert sorted(info) == ["0", "1", "2"]
    assert info["0"]["attention_backend"] == "ROCM_ATTN" and info["0"]["vllm_version"] == "0.33.0"
    assert info["1"]["attention_backend"] == "" and info["1"]["method"] == "ngram"
    assert info["2"]["graph_mode"] == "other" and info["2"]["model_runner"] == ""
    assert info["2"]["num_speculative_tokens"] == ""

    def value(field, **labels):
        return prometheus.get(("specobs_request_acceptance_length", frozenset(labels.items()), field))

    tiny = {"model_name": "tiny", "engine": "0", "method": "eagle"}
    # k = 3, 10 steps: lengths 1.0, 1.1, 1.5, 2.0, 2.4, 2.5, 3.0, 3.5, 4.0; k = 16, 2 steps: 5.5, 6.5, 8.5, 17.0
    assert value("count", **tiny) == 13
    assert value("sum", **tiny) == pytest.approx(
        1.0 + 1.1 + 1.5 + 2.0 + 2.4 + 2.5 + 3.0 + 3.5 + 4.0 + 5.5 + 6.5 + 8.5 + 17
    )
    cumulative = [value("bucket", **tiny, le=le) for le in ("1.1", "1.5", "2.0", "2.5", "3.0", "3.5", "4.0", "5.0",
                                                             "6.0", "8.0", "+Inf")]  # fmt: skip
    assert cumulative == [2, 3, 4, 6, 7, 8, 9, 9, 10, 11, 13]
    assert value("count", model_name="tiny", engine="1", method="ngram") == 1
    assert value("count", model_name="other", engine="0", method="eagle") == 1  # the prompt-like model name


def test_the_tuning_decision_health_and_sidecar_families_hold_their_input(prometheus, recommendation):
    """The families the table added to OpenTelemetry (equal on both sides by the tests above), by hand."""

    def value(name, **labels):
        return prometheus.get((name, frozenset(labels.items()), "value"))

    def series(name):
        return sorted(sorted(labels) for family, labels, _ in prometheus if family == name)

    # Decisions: two applies, a confirm, a rollback; "bogus" is no action. Bucket 1 was set to 5;
    # bucket 4-7 to 2, then rolled back to 3; nothing set bucket 8-15.
    assert series("specobs_tuner_decisions") == [[("action", a)] for a in ("apply", "confirm", "rollback")]
    assert [value("specobs_tuner_decisions", action=a) for a in ("apply", "confirm", "rollback")] == [2, 1, 1]
    assert series("specobs_tuner_num_speculative_tokens") == [[("batch_size_bucket", b)] for b in ("1", "4-7")]
    assert value("specobs_tuner_num_speculative_tokens", batch_size_bucket="1") == 5
    assert value("specobs_tuner_num_speculative_tokens", batch_size_bucket="4-7") == 3
    assert [value(f"specobs_{key}") for key in HEALTH] == [7, 2, 5]
    # The sidecar read 200 rows and skipped the three bad records, one per reason.
    assert value("specobs_exporter_rows") == 200 and value("specobs_exporter_errors") == 0
    skipped = {dict(k[1])["reason"]: v for k, v in prometheus.items() if k[0] == "specobs_skipped_records"}
    assert skipped == {"invalid_json": 1, "wrong_type": 1, "negative": 1, "non_finite": 0, "inconsistent": 0,
                       "error": 0}  # fmt: skip
    # The speedup of k = 6 weighted by each bucket's traffic steps; ngram's recommended k per bucket.
    ngram = [p for p in recommendation.predicted if p.method == "ngram" and p.num_speculative_tokens == 6]
    weighted = sum(p.estimate * p.steps for p in ngram) / sum(p.steps for p in ngram)
    assert value("specobs_predicted_speedup", model_name="tiny", method="ngram") == pytest.approx(weighted)
    assert 0.5 < weighted < 3
    assert value("specobs_predicted_speedup", model_name="tiny", method="eagle") is None  # not in the refit
    recommended = {dict(labels)["batch_size_bucket"]: v for (name, labels, _), v in prometheus.items()
                   if name == "specobs_recommended_num_speculative_tokens" and dict(labels)["method"] == "ngram"}  # fmt: skip
    assert recommended == {"1": 5, "2-3": 5, "4-7": 3, "8-15": 3, "16-31": 4}
