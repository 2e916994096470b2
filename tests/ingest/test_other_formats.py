"""SGLang logs, Prometheus text scrapes and specobs event files."""

from __future__ import annotations

import json

import polars as pl
import pytest
from support.helpers import windows_of
from support.paths import ROOT

from specobs import schema
from specobs.ingest import load

# Real SGLang lines (sgl-project/sglang PR 6081, issue 11948, sgl-kernel-npu PR 608).
SGLANG = """\
[2025-05-31 18:31:00] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', tokenizer_path='meta-llama/Llama-3.1-8B-Instruct', speculative_algorithm='EAGLE3', speculative_draft_model_path='jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B', speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4)
[2025-05-31 18:31:21 DP0 TP0] Decode batch. #running-req: 8, #token: 37217, token usage: 0.13, accept len: 2.90, cuda graph: True, gen throughput (token/s): 171.01, #queue-req: 0
[2025-05-31 18:31:21 DP6 TP6] Decode batch. #running-req: 8, #token: 36267, token usage: 0.12, accept len: 2.86, cuda graph: True, gen throughput (token/s): 168.28, #queue-req: 0
[2025-10-22 10:27:57 TP0] Decode batch. #running-req: 1, #token: 108, token usage: 0.00, accept len: 2.17, accept rate: 0.54, cuda graph: True, gen throughput (token/s): 0.39, #queue-req: 0, 
[2026-07-21 15:00:13 TP0 EP0] Decode batch, #running-req: 24, #token: 233600, token usage: 0.66, accept len: 3.05, accept rate: 0.68, npu graph: True, gen throughput (token/s): 239.06, #queue-req: 2
[2025-03-14 02:16:14 TP0] Decode batch. #running-req: 509, #token: 180776, token usage: 0.43, gen throughput (token/s): 7897.87, largest-len: 0, #queue-req: 0, 
2026-07-21 15:00:17,120 - sglang.srt.managers.scheduler - INFO - Decode batch, #running-req: 23, #token: 227968, token usage: 0.64, accept len: 2.63, accept rate: 0.54, npu graph: True, gen throughput (token/s): 631.96, #queue-req: 3
"""


def test_sglang_decode_batches(write):
    w = windows_of(write("sglang.log", SGLANG))
    # The non-speculative line (no accept len) is not a window.
    assert w["source_line"].to_list() == [2, 3, 4, 5, 7]
    assert w["reported_mean_acceptance_length"].to_list() == [2.90, 2.86, 2.17, 3.05, 2.63]
    assert w["batch_size"].to_list() == [8, 8, 1, 24, 23]
    assert w["engine"].to_list() == [0, 6, 0, 0, 0]
    assert w["num_drafts"].null_count() == w.height  # counts are unknown, never 0
    assert w["method"][0] == "eagle3" and w["num_spec_tokens"][0] == 3
    assert w["model"][0] == "meta-llama/Llama-3.1-8B-Instruct"
    assert w["end_ts"][-1] == pytest.approx(1784646017.12)


def test_sglang_mean_is_weighted_by_running_requests(write):
    from specobs.analysis.acceptance import summarize

    w = windows_of(write("sglang.log", SGLANG))
    row = summarize(w, by=()).row(0, named=True)
    expected = (2.90 * 8 + 2.86 * 8 + 2.17 * 1 + 3.05 * 24 + 2.63 * 23) / (8 + 8 + 1 + 24 + 23)
    assert row["mean_acceptance_length"] == pytest.approx(expected)
    assert row["mean_acceptance_length_basis"] == "reported"
    assert row["num_drafts"] is None and row["draft_acceptance_rate"] is None


def _scrape(drafts, draft_tokens, accepted, per_pos, *, engine="0", model="tiny", ts=None):
    stamp = f" {ts}" if ts is not None else ""
    lines = [
        "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        f'vllm:spec_decode_num_drafts_total{{engine="{engine}",model_name="{model}"}} {drafts}{stamp}',
        f'vllm:spec_decode_num_drafts_created{{engine="{engine}",model_name="{model}"}} 1.7647e+09{stamp}',
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
        f'vllm:spec_decode_num_draft_tokens_total{{engine="{engine}",model_name="{model}"}} {draft_tokens}{stamp}',
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="{engine}",model_name="{model}"}} {accepted}{stamp}',
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
    ]
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="{engine}",model_name="{model}",position="{i}"}} '
        f"{v}{stamp}"
        for i, v in enumerate(per_pos)
    ]
    lines.append('vllm:num_requests_running{engine="0",model_name="tiny"} 3.0')
    return "\n".join(lines) + "\n"


def test_single_prometheus_scrape_is_one_window_of_totals(write):
    w = windows_of(write("m.txt", _scrape(440, 1320, 1124, [400, 368, 356])))
    row = w.row(0, named=True)
    assert (row["num_drafts"], row["num_draft_tokens"], row["num_accepted_tokens"]) == (440, 1320, 1124)
    assert row["num_accepted_tokens_per_pos"] == [400, 368, 356]
    assert row["counters"] == "cumulative" and row["start_ts"] is None
    assert row["model"] == "tiny" and row["engine"] == 0 and row["num_spec_tokens"] == 3


def test_concatenated_scrapes_become_differences_with_timestamps(write):
    text = (
        _scrape(100, 300, 200, [90, 70, 40], ts=1764472000000)
        + "# scrape 2\n"
        + _scrape(250, 750, 520, [230, 180, 110], ts=1764472015000)
        + _scrape(40, 120, 70, [30, 25, 15], ts=1764472030000)  # restart: counters fell
    )
    w = windows_of(write("m.txt", text))
    assert w["num_drafts"].to_list() == [100, 150, 40]
    assert w["num_accepted_tokens"].to_list() == [200, 320, 70]
    assert w["num_accepted_tokens_per_pos"].to_list() == [[90, 70, 40], [140, 110, 70], [30, 25, 15]]
    assert w["end_ts"].to_list() == [1764472000.0, 1764472015.0, 1764472030.0]
    assert w["start_ts"].to_list() == [None, 1764472000.0, None]


def test_prometheus_engines_and_models_are_separate(write):
    text = _scrape(10, 30, 20, [8, 7, 5], engine="0") + _scrape(20, 60, 30, [12, 10, 8], engine="1").replace(
        "# HELP", "# HELPX"
    )
    w = windows_of(write("m.txt", text.replace("# HELPX", "# HELP")))
    assert sorted(zip(w["engine"].to_list(), w["num_drafts"].to_list(), strict=True)) == [(0, 10), (1, 20)]


def test_prometheus_bad_sample_line_is_skipped(write):
    text = _scrape(10, 30, 20, [8, 7, 5]).replace(
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 30',
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny" 30',
    )
    path = write("m.txt", text)
    result = load([str(path)])
    row = result.windows.collect().row(0, named=True)
    assert row["num_drafts"] == 10 and row["num_draft_tokens"] is None
    assert [s.line for s in result.skipped] == [6]


def test_v0_prometheus_keeps_only_the_rate_gauge(write):
    text = """\
# HELP vllm:spec_decode_draft_acceptance_rate Speulative token acceptance rate.
# TYPE vllm:spec_decode_draft_acceptance_rate gauge
vllm:spec_decode_draft_acceptance_rate{model_name="m"} 0.642
# HELP vllm:spec_decode_efficiency Speculative decoding system efficiency.
# TYPE vllm:spec_decode_efficiency gauge
vllm:spec_decode_efficiency{model_name="m"} 0.598
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 85470.0
# TYPE vllm:spec_decode_num_emitted_tokens_total counter
vllm:spec_decode_num_emitted_tokens_total{model_name="m"} 106160.0
"""
    row = windows_of(write("v0.txt", text)).row(0, named=True)
    assert row["reported_draft_acceptance_rate"] == pytest.approx(0.642)
    assert row["num_accepted_tokens"] is None and row["num_drafts"] is None


def _steps(n: int = 4) -> list[dict]:
    return [
        {
            "ts": 1764472000.0 + i,
            "run_id": "r1",
            "engine": 0,
            "model": "tiny",
            "method": "eagle3",
            "platform": "rocm",
            "device": "AMD Instinct MI300X",
            "batch_size": 8,
            "num_spec_tokens": 3,
            "num_drafts": 8,
            "num_draft_tokens": 24,
            "num_accepted_tokens": 12 + i,
            "num_accepted_tokens_per_pos": [6 + (i + 1) // 2, 4 + i // 2, 2],  # never rising, sums to accepted
            "draft_seconds": 0.002,
            "verify_seconds": 0.013,
            "step_seconds": 0.016,
            "num_generated_tokens": 20 + i,
        }
        for i in range(n)
    ]


def test_jsonl_and_parquet_event_files_agree(write, tmp_path):
    steps = _steps()
    jsonl = write("events.jsonl", "\n".join(json.dumps(s) for s in steps) + "\n")
    parquet = tmp_path / "events.parquet"
    pl.DataFrame(steps, schema=schema.STEPS).write_parquet(parquet)
    for path in (jsonl, parquet):
        w = windows_of(path)
        assert w.height == 4
        assert w["num_accepted_tokens"].to_list() == [12, 13, 14, 15]
        assert w["platform"].unique().to_list() == ["rocm"]
        assert w["counters"].unique().to_list() == ["step"]
        assert w["start_ts"][0] == pytest.approx(1764472000.0 - 0.016)
        assert w["num_timed_steps"].sum() == 4


def test_jsonl_bad_records_are_skipped_and_named(write):
    steps = [json.dumps(s) for s in _steps(3)]
    bad = ["{not json", json.dumps({**_steps(1)[0], "num_drafts": "eight"}), "[1, 2]"]
    path = write("events.jsonl", "\n".join([steps[0], bad[0], steps[1], bad[1], bad[2], steps[2]]) + "\n")
    result = load([str(path)])
    assert result.windows.collect().height == 3
    assert [s.line for s in result.skipped] == [2, 4, 5]
    assert "num_drafts is not an integer" in result.skipped[1].why


def test_jsonl_record_that_is_not_utf8_is_skipped_and_named(write):
    # json.loads raises UnicodeDecodeError (which has no .msg) before it parses anything.
    steps = [json.dumps(s).encode() for s in _steps(2)]
    path = write("events.jsonl", b"\n".join([steps[0], b'{"ts": 1, "model": "\xff"}', steps[1]]) + b"\n")
    result = load([str(path)])
    assert result.windows.collect().height == 2
    assert [(s.line, s.why) for s in result.skipped] == [(2, "not valid UTF-8 (invalid start byte)")]


def test_parquet_without_steps_columns_is_rejected(tmp_path):
    from specobs.errors import InputError

    path = tmp_path / "other.parquet"
    pl.DataFrame({"a": [1, 2]}).write_parquet(path)
    with pytest.raises(InputError, match="missing columns: ts, num_drafts, num_accepted_tokens"):
        load([str(path)])


def test_folder_of_mixed_inputs_keeps_each_source(write, tmp_path):
    write(
        "a.log",
        "INFO 04-02 10:00:00 [metrics.py:60] SpecDecoding metrics: Draft acceptance rate: 60.4%, Accepted: 91 tokens, Drafted: 151 tokens\n",
    )
    write("b.txt", _scrape(10, 30, 20, [8, 7, 5]))
    write("notes.md", "just some notes, not metrics\n")
    result = load([str(tmp_path)])
    assert sorted(s.format for s in result.sources) == ["prometheus-text", "vllm-log"]
    assert [s.why for s in result.skipped] == ["not a recognised log, scrape or event file"]
    assert result.windows.collect()["source"].n_unique() == 2


def test_every_format_is_one_reader_and_detection_finds_each_bundled_input():
    """The registry: each format module declares its reader (a new format is one file), and the
    first bytes of every bundled input name the format its reader reads."""

    from specobs.ingest import FORMATS
    from specobs.ingest.registry import detect, readers
    from specobs.ingest.source import open_source

    names = [f for r in readers() for f in r.formats]
    assert len(names) == len(set(names)) and set(FORMATS) <= {*names, "events"}
    assert [r.detect_order for r in readers()] == sorted(r.detect_order for r in readers())
    data = ROOT / "examples" / "data"
    inputs = (".log", ".txt", ".jsonl", ".parquet", ".json")
    # Not inputs: a client's own record of a served run, and the CPU use beside the bench recording.
    files = [p for p in data.rglob("*") if p.suffix in inputs and not p.name.endswith(".clients.json")
             and p.name != "cpu.json"]  # fmt: skip
    seen = {detect(open_source(str(p))) for p in files}
    assert {"vllm-log", "prometheus-text", "events-jsonl", "run-metadata", "specobs-tune", "vllm-bench-serve"} <= seen
