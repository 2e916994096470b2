"""Run metadata and finished requests on the wire: ``specobs_engine_info`` and
``specobs_request_acceptance_length`` (Prometheus), their OpenTelemetry twins and resource attributes.

Values here are worked by hand: the info labels of a known record, the series that replaces it when
the engine restarts with another backend, label caps and drops, and each request's bucket.
"""

from __future__ import annotations

import json
import threading
from http.server import HTTPServer

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from support.capture_records import METADATA, REQUEST
from support.otlp import ROW, _Receiver

from specobs.exporters.prometheus import PrometheusMetrics, PrometheusSink
from specobs.exporters.sidecar import Sidecar, SidecarHealth
from specobs.records import RunMetadata

INFO_LABELS = {
    "model_name": "tiny", "engine": "0", "method": "eagle", "num_speculative_tokens": "3",
    "vllm_version": "0.32.0", "platform": "rocm", "device_arch": "gfx942", "attention_backend": "ROCM_AITER_FA",
    "draft_attention_backend": "ROCM_AITER_FA", "graph_mode": "full_and_piecewise", "model_runner": "v1",
    # fields the record lacks: empty, never a guess
    "tensor_parallel_size": "", "pipeline_parallel_size": "", "data_parallel_size": "", "dtype": "", "kv_cache_dtype": "",
}  # fmt: skip


def info_series(registry: CollectorRegistry) -> list[dict[str, str]]:
    return [s.labels for f in registry.collect() if f.name == "specobs_engine_info" for s in f.samples if s.value == 1]


def test_engine_info_carries_the_run_metadata_as_labels():
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    metrics.observe_metadata(METADATA)  # the capture's record
    assert info_series(registry) == [INFO_LABELS]
    text = generate_latest(registry).decode()
    # Only the bounded fields: no pid, run id, model path, device name or environment on the wire.
    for unbounded in ("/models/tiny", "r1", "MI300X", "VLLM_ROCM_USE_AITER"):
        assert unbounded not in text
    # The same record read back from a metadata file (RunMetadata) publishes the same series.
    registry = CollectorRegistry()
    PrometheusMetrics(registry).observe_metadata(
        RunMetadata(**{k: v for k, v in METADATA.items() if k != "specobs_metadata"})
    )
    assert info_series(registry) == [INFO_LABELS]


def test_a_missing_field_is_an_empty_label_never_a_guess():
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    metrics.observe_metadata({"specobs_metadata": 1, "model": "tiny", "engine": 1, "vllm_version": "0.32.0"})
    assert info_series(registry) == [{
        "model_name": "tiny", "engine": "1", "method": "none", "num_speculative_tokens": "", "vllm_version": "0.32.0",
        "platform": "", "device_arch": "", "attention_backend": "", "graph_mode": "", "model_runner": "",
        "draft_attention_backend": "", "tensor_parallel_size": "", "pipeline_parallel_size": "",
        "data_parallel_size": "", "dtype": "", "kv_cache_dtype": "",
    }]  # fmt: skip
    # k = 0 is known (no speculation), not missing
    metrics.observe_metadata({"model": "tiny", "engine": 1, "num_speculative_tokens": 0})
    assert info_series(registry)[0]["num_speculative_tokens"] == "0"


def test_a_restart_with_another_backend_replaces_the_info_series():
    """vllm#46596: the engine comes back with ROCM_ATTN where it ran AITER FA. A join on
    (model_name, engine) must see the new configuration only."""
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    sink = PrometheusSink(metrics)
    sink.write([METADATA, ROW])
    sink.write([{**METADATA, "ts": 2000.0, "attention_backend": "ROCM_ATTN", "vllm_version": "0.33.0"}, ROW])
    assert info_series(registry) == [{**INFO_LABELS, "attention_backend": "ROCM_ATTN", "vllm_version": "0.33.0"}]
    # Another engine of the same model keeps its own series; the counters are untouched by metadata.
    sink.write([{**METADATA, "engine": 1}])
    assert sorted(s["engine"] for s in info_series(registry)) == ["0", "1"]
    assert (
        registry.get_sample_value("specobs_steps_total", {"model_name": "tiny", "engine": "0", "method": "eagle"}) == 2
    )
    # A record older than the one published (a sidecar reading an earlier run's file late) is ignored.
    assert not metrics.observe_metadata({**METADATA, "ts": 1500.0})
    assert {s["attention_backend"] for s in info_series(registry) if s["engine"] == "0"} == {"ROCM_ATTN"}


def test_engine_info_labels_are_capped_and_bad_values_dropped():
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry, label_budget={"vllm_version": 2})
    for engine, version in enumerate(("0.30.0", "0.31.0", "0.32.0", "0.33.0")):
        metrics.observe_metadata({**METADATA, "engine": engine, "vllm_version": version})
    versions = sorted(s["vllm_version"] for s in info_series(registry))
    assert versions == ["0.30.0", "0.31.0", "other", "other"]
    # prompt-like text and an overlong value become "other"; a number where a string belongs is
    # left empty and counted as wrong_type; a negative k too (negative)
    metrics.observe_metadata({**METADATA, "engine": 5, "attention_backend": "Ignore previous instructions",
                              "graph_mode": "x" * 101, "model_runner": 2, "num_speculative_tokens": -1,
                              "method": "made_up"})  # fmt: skip
    (hostile,) = [s for s in info_series(registry) if s["engine"] == "5"]
    assert hostile["attention_backend"] == "other" and hostile["graph_mode"] == "other"
    assert hostile["model_runner"] == "" and hostile["num_speculative_tokens"] == "" and hostile["method"] == "other"
    overflow = {
        label: registry.get_sample_value("specobs_label_overflow_total", {"label": label})
        for label in ("vllm_version", "attention_backend", "graph_mode", "method")
    }
    # 0.32.0 and 0.33.0 past the budget of 2, and the hostile record's 0.32.0
    assert overflow == {"vllm_version": 3, "attention_backend": 1, "graph_mode": 1, "method": 1}
    assert registry.get_sample_value("specobs_dropped_values_total", {"reason": "wrong_type"}) == 1
    assert registry.get_sample_value("specobs_dropped_values_total", {"reason": "negative"}) == 1
    assert "Ignore previous" not in generate_latest(registry).decode()
    # 40 engines' worth of identity: the engine label is capped like every other series' (16 kept)
    for engine in range(40):
        metrics.observe_metadata({**METADATA, "engine": 100 + engine})
    assert len({s["engine"] for s in info_series(registry)}) <= 17


# --- the per-request acceptance histogram ----------------------------------------------------

#: (num_accepted_tokens, num_spec_steps, num_draft_tokens, acceptance_histogram with k = 3) →
#: acceptance length 1 + accepted / steps
REQUESTS = [
    (0, 5, 15, [5, 0, 0, 0]),  # 1.0: every draft rejected
    (1, 10, 30, [9, 1, 0, 0]),  # 1.1: on the first bound (le is inclusive)
    (1, 1, 3, [0, 1, 0, 0]),  # 2.0
    (14, 10, 30, [5, 0, 1, 4]),  # 2.4
    (6, 3, 9, [1, 0, 0, 2]),  # 3.0
    (9, 3, 9, [0, 0, 0, 3]),  # 4.0
]


def request_rows() -> list[dict]:
    return [{**REQUEST, "num_accepted_tokens": a, "num_spec_steps": s, "num_draft_tokens": d,
             "acceptance_histogram": h} for a, s, d, h in REQUESTS]  # fmt: skip


def test_request_histogram_counts_match_a_hand_computation():
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    sink = PrometheusSink(metrics)
    rows = request_rows()
    rows += [
        {**REQUEST, "num_spec_steps": 0, "num_accepted_tokens": 0, "num_draft_tokens": 0},  # never drafted: no length
        {**REQUEST, "num_accepted_tokens": 31},  # more accepted than drafted (30)
        {**REQUEST, "num_spec_steps": 2, "num_accepted_tokens": 7, "num_draft_tokens": 30},  # > k = 3 per step
        {**REQUEST, "num_spec_steps": float("nan")},
        {**REQUEST, "num_accepted_tokens": -2},
    ]
    sink.write(rows)
    labels = {"model_name": "tiny", "engine": "0", "method": "eagle"}

    def bucket(le: str) -> float | None:
        return registry.get_sample_value("specobs_request_acceptance_length_bucket", {**labels, "le": le})

    cumulative = {le: bucket(le) for le in ("1.1", "1.5", "2.0", "2.5", "3.0", "3.5", "4.0", "5.0", "6.0", "8.0",
                                            "+Inf")}  # fmt: skip
    assert cumulative == {"1.1": 2, "1.5": 2, "2.0": 3, "2.5": 4, "3.0": 5, "3.5": 5, "4.0": 6, "5.0": 6, "6.0": 6,
                          "8.0": 6, "+Inf": 6}  # fmt: skip
    count = registry.get_sample_value("specobs_request_acceptance_length_count", labels)
    total = registry.get_sample_value("specobs_request_acceptance_length_sum", labels)
    assert count == 6 and total == pytest.approx(1.0 + 1.1 + 2.0 + 2.4 + 3.0 + 4.0)
    dropped = {r: registry.get_sample_value("specobs_dropped_values_total", {"reason": r})
               for r in ("inconsistent", "non_finite", "negative")}  # fmt: skip
    assert dropped == {"inconsistent": 2, "non_finite": 1, "negative": 1}
    # no request key, no request id on the wire; request rows never count as steps
    text = generate_latest(registry).decode()
    assert "0123456789abcdef" not in text and "request_key" not in text
    assert registry.get_sample_value("specobs_steps_total", labels) is None


# --- the sidecar: metadata and request files beside the event files --------------------------


def test_sidecar_publishes_engine_info_and_request_histogram_from_capture_files(tmp_path, caplog):
    events = tmp_path / "specobs-r1-p7-0001.jsonl"
    events.write_text(json.dumps(ROW) + "\n")
    meta = tmp_path / "specobs-r1-meta-p7-0001.jsonl"
    meta.write_text(json.dumps(METADATA) + "\n")
    requests = tmp_path / "specobs-r1-requests-p7-0001.jsonl"
    good = request_rows()
    requests.write_text("\n".join([*map(json.dumps, good[:3]), "{not json", json.dumps({**REQUEST, "num_spec_steps": -1})])
                        + "\n")  # fmt: skip
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    sidecar = Sidecar([str(tmp_path)], metrics, tuning_interval=3600)
    registry.register(SidecarHealth(sidecar))
    sidecar.poll_once()
    assert info_series(registry) == [INFO_LABELS]
    labels = {"model_name": "tiny", "engine": "0", "method": "eagle"}
    assert registry.get_sample_value("specobs_request_acceptance_length_count", labels) == 3
    assert registry.get_sample_value("specobs_request_acceptance_length_bucket", {**labels, "le": "1.1"}) == 2
    assert registry.get_sample_value("specobs_skipped_records_total", {"reason": "invalid_json"}) == 1
    assert registry.get_sample_value("specobs_skipped_records_total", {"reason": "wrong_type"}) == 1
    assert f"{requests}:4: not valid JSON" in caplog.text
    assert f"{requests}:5: num_spec_steps is not a non-negative integer" in caplog.text
    # more finished requests arrive; the engine restarts with another backend and version: its
    # new metadata file replaces the info series
    with open(requests, "a") as f:
        f.write("\n".join(map(json.dumps, good[3:])) + "\n")
    (tmp_path / "specobs-r2-meta-p8-0001.jsonl").write_text(
        json.dumps({**METADATA, "ts": 2000.0, "pid": 8, "attention_backend": "ROCM_ATTN", "vllm_version": "0.33.0"})
        + "\n"
    )
    sidecar.poll_once()
    assert registry.get_sample_value("specobs_request_acceptance_length_count", labels) == 6
    assert info_series(registry) == [{**INFO_LABELS, "attention_backend": "ROCM_ATTN", "vllm_version": "0.33.0"}]
    assert registry.get_sample_value("specobs_drafts_total", labels) == 4  # the one event row, once
    assert sidecar.errors == 0
    sidecar.stop()


def test_the_bundled_metadata_files_publish_one_info_series_per_engine(tmp_path):
    """The bundled sweep ran three engines (plain, ngram, draft model) one after another as engine 0
    of tiny-llama, without a timestamp in their metadata: the one read last is the one published."""
    from support.paths import ROOT

    sweep = ROOT / "examples" / "data" / "vllm-cpu-sweep"
    registry = CollectorRegistry()
    sidecar = Sidecar(
        [str(sweep / "run-metadata-ngram-p29587.jsonl")], PrometheusMetrics(registry), tuning_interval=3600
    )
    sidecar.poll_once()
    assert info_series(registry) == [{
        "model_name": "tiny-llama", "engine": "0", "method": "ngram", "num_speculative_tokens": "6",
        "vllm_version": "0.32.0", "platform": "cpu", "device_arch": "", "attention_backend": "", "graph_mode": "eager",
        "model_runner": "", "draft_attention_backend": "", "tensor_parallel_size": "1", "pipeline_parallel_size": "",
        "data_parallel_size": "1", "dtype": "float32", "kv_cache_dtype": "auto",
    }]  # fmt: skip
    sidecar.stop()


# --- in the engine: the capture hands its metadata and finished requests to the exporters ----


def _fake_engine(backend: str):
    from types import SimpleNamespace

    spec = SimpleNamespace(method="eagle3", model="/drafts/eagle3", num_speculative_tokens=3,
                           num_speculative_tokens_per_batch_size=None)  # fmt: skip
    config = SimpleNamespace(
        model_config=SimpleNamespace(served_model_name="tiny", model="/models/tiny", enforce_eager=False,
                                     dtype="torch.bfloat16"),
        speculative_config=spec,
        compilation_config=SimpleNamespace(cudagraph_mode=SimpleNamespace(name="FULL_AND_PIECEWISE")),
        attention_config=SimpleNamespace(backend=backend),
        parallel_config=SimpleNamespace(data_parallel_rank=0, tensor_parallel_size=1, data_parallel_size=1),
        use_v2_model_runner=False,
    )  # fmt: skip
    return SimpleNamespace(num_spec_tokens=3, dynamic_sd_lookup=None, vllm_config=config)


def test_the_capture_hands_metadata_and_finished_requests_to_the_prometheus_exporter(tmp_path):
    from types import SimpleNamespace

    from specobs.capture.config import CaptureConfig
    from specobs.vllm import hooks, wiring

    config = CaptureConfig(directory=str(tmp_path), run_id="u", requests="summary", prometheus="127.0.0.1:0",
                           otel=False)  # fmt: skip
    capture = hooks.Capture(config, wiring=wiring())
    scheduler = _fake_engine("ROCM_AITER_FA")
    for accepted in (3, 1):  # one request, two verify steps: 4 of 6 drafted tokens accepted
        capture.begin_update()
        capture.observe_draft(3, accepted, None, "req-secret-7-0123abcd")
        drafts = capture.end_update()
        output = SimpleNamespace(num_scheduled_tokens={"r": 4}, total_num_scheduled_tokens=4)
        capture.finish_step(scheduler, output, SimpleNamespace(sampled_token_ids=[[1] * (accepted + 1)]), drafts)
    request = SimpleNamespace(request_id="req-secret-7-0123abcd", num_prompt_tokens=5, num_output_tokens=6,
                              get_finished_reason=lambda: "stop")  # fmt: skip
    hooks._request_finished(capture, scheduler, request)
    recorder = capture.recorder
    recorder.flush(final=True)
    (sink,) = [s for s in recorder.sinks if isinstance(s, PrometheusSink)]
    registry = sink.metrics.registry
    (info,) = info_series(registry)
    assert {k: info[k] for k in ("model_name", "engine", "method", "num_speculative_tokens", "attention_backend",
                                 "graph_mode", "model_runner")} == {
        "model_name": "tiny", "engine": "0", "method": "eagle3", "num_speculative_tokens": "3",
        "attention_backend": "ROCM_AITER_FA", "graph_mode": "full_and_piecewise", "model_runner": "v1",
    }  # fmt: skip
    labels = {"model_name": "tiny", "engine": "0", "method": "eagle3"}
    # 1 + 4 accepted / 2 verify steps = 3.0
    assert registry.get_sample_value("specobs_request_acceptance_length_sum", labels) == 3.0
    assert registry.get_sample_value("specobs_request_acceptance_length_bucket", {**labels, "le": "2.5"}) == 0
    assert registry.get_sample_value("specobs_request_acceptance_length_bucket", {**labels, "le": "3.0"}) == 1
    assert registry.get_sample_value("specobs_steps_total", labels) == 2
    assert "req-secret" not in generate_latest(registry).decode()
    assert recorder.hook_errors == 0
    recorder.close()


# --- OpenTelemetry: resource attributes at a real OTLP receiver ------------------------------


def test_otel_resource_attributes_and_engine_series_arrive_at_a_real_receiver(monkeypatch):
    pytest.importorskip("opentelemetry.sdk", reason="needs specobs[otel]")
    from specobs.capture.config import CaptureConfig
    from specobs.exporters.otel import RESOURCE_ATTRIBUTES, OtelSink
    from specobs.exporters.wiring import capture_sinks

    server = HTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Receiver.requests = []
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "60000")
    # What the capture passes: the engine's labels and run-metadata fields, raw (hooks.Capture._new_recorder)
    engine = {k: str(v) for k, v in METADATA.items() if isinstance(v, str | int) and not isinstance(v, bool)}
    engine["model_path"] = "/models/tiny"  # not a resource attribute
    engine["draft_model"] = "x" * 101  # nor this (and too long anyway)
    engine["graph_mode"] = "full_and_piecewise\n"  # a control character: left out
    sinks = capture_sinks(CaptureConfig(directory="/nonexistent-unused", otel=True), 0, None, engine)
    (otel,) = [s for s in sinks if isinstance(s, OtelSink)]
    otel.write([METADATA, ROW, {**REQUEST, "num_accepted_tokens": 14}, {**REQUEST, "num_accepted_tokens": 6}])
    otel.close()
    server.shutdown()
    resource, received = {}, {}
    for request in _Receiver.requests:
        for rm in request.resource_metrics:
            resource.update({a.key: a.value.string_value for a in rm.resource.attributes})
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    received[m.name] = m
    assert {k: v for k, v in resource.items() if not k.startswith(("telemetry.", "service.instance"))} == {
        "service.name": "specobs", "specobs.model": "tiny", "specobs.platform": "rocm",
        "specobs.device": "AMD Instinct MI300X", "specobs.device.arch": "gfx942", "vllm.version": "0.32.0",
        "vllm.engine.index": "0", "vllm.attention.backend": "ROCM_AITER_FA",
        "vllm.model_runner": "v1", "vllm.speculative.method": "eagle",
        "vllm.speculative.num_speculative_tokens": "3", "vllm.speculative.attention.backend": "ROCM_AITER_FA",
    }  # fmt: skip
    # what the record lacks is left out
    assert set(RESOURCE_ATTRIBUTES.values()) - set(resource) == {
        "vllm.graph_mode", "vllm.parallel.tensor_size", "vllm.parallel.pipeline_size", "vllm.parallel.data_size",
        "vllm.dtype", "vllm.kv_cache.dtype",
    }  # fmt: skip
    (point,) = received["specobs.engine_info"].gauge.data_points
    assert {a.key: a.value.string_value for a in point.attributes} == INFO_LABELS and point.as_int == 1
    (hist,) = received["specobs.request.acceptance_length"].histogram.data_points
    # lengths 1 + 14/10 = 2.4 and 1 + 6/10 = 1.6: both in (1.5, 2.5]; buckets per bound, not cumulative
    assert list(hist.explicit_bounds) == [1.1, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0]
    assert list(hist.bucket_counts) == [0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    assert hist.count == 2 and hist.sum == pytest.approx(4.0)
    for sink in sinks:
        if sink is not otel:
            sink.close()


def test_otel_is_a_no_op_when_unconfigured(monkeypatch):
    from specobs.capture.config import CaptureConfig
    from specobs.exporters.otel import OtelSink
    from specobs.exporters.wiring import capture_sinks

    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", raising=False)
    sinks = capture_sinks(CaptureConfig(directory="/nonexistent-unused", otel=True), 0, None, {"vllm_version": "1"})
    assert not [s for s in sinks if isinstance(s, OtelSink)]


# --- a real Prometheus: the replaced info series goes stale, a join sees the new one ----------


@pytest.mark.prometheus
@pytest.mark.slow
def test_a_real_prometheus_sees_only_the_new_info_series_after_a_restart(tmp_path):
    """The in-process exporter served to a real Prometheus scraping every second: after the engine's
    metadata is replaced (ROCM_AITER_FA → ROCM_ATTN), an instant query returns the new series only
    (the old one was marked stale at the first scrape without it), a join of the acceptance counters
    with it carries the new backend, and ``last_over_time`` still holds both sides of the change."""
    import shutil
    import sys
    import time

    from support.paths import ROOT

    if shutil.which("prometheus") is None:
        pytest.skip("needs Debian's prometheus (apt-get install prometheus)")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_soak

    from specobs.exporters.prometheus import serve

    metrics = PrometheusMetrics(CollectorRegistry())
    metrics.observe_metadata(METADATA)
    metrics.observe_step({**ROW, "method": "eagle"})
    address = serve(metrics, "127.0.0.1:0")
    with bench_soak.processes() as procs:
        base = bench_soak.start_prometheus(procs, tmp_path, address)

        def backends(promql: str) -> list[str]:
            return sorted(r["metric"]["attention_backend"] for r in bench_soak.query(base, promql))

        bench_soak.wait_for(lambda: backends("specobs_engine_info") == ["ROCM_AITER_FA"], 30, "the first info series")
        metrics.observe_metadata({**METADATA, "ts": 2000.0, "attention_backend": "ROCM_ATTN", "vllm_version": "0.33.0"})
        bench_soak.wait_for(lambda: backends("specobs_engine_info") == ["ROCM_ATTN"], 30, "the replaced info series")
        time.sleep(2)  # a few more scrapes: the old series stays gone
        assert backends("specobs_engine_info") == ["ROCM_ATTN"]
        joined = bench_soak.query(
            base,
            "sum by (model_name, engine) (specobs_accepted_tokens_total) * on (model_name, engine) "
            "group_left (attention_backend, vllm_version) specobs_engine_info",
        )
        assert [
            (r["metric"]["attention_backend"], r["metric"]["vllm_version"], float(r["value"][1])) for r in joined
        ] == [("ROCM_ATTN", "0.33.0", 6.0)]
        assert backends("last_over_time(specobs_engine_info[5m])") == ["ROCM_AITER_FA", "ROCM_ATTN"]
