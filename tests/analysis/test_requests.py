"""Finished-request rows (``requests``): capture state, sinks, the three inputs, analysis and the report.

Every number below is worked out by hand in the comment beside it.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest
from support.helpers import report_json, run_cli

from specobs import schema
from specobs.advice.report_builder import analyze
from specobs.analysis import per_request as analysis
from specobs.capture import JsonlSink, MemorySink, ParquetSink
from specobs.capture.config import CaptureConfig
from specobs.ingest import load
from specobs.vllm import hooks


def spec(histogram: list[int], drafted: int, k: int = 3, **extra) -> dict:
    """vLLM's ``RequestSpecDecodeMetrics.to_dict()`` for a histogram."""
    steps = sum(histogram)
    accepted = sum(i * n for i, n in enumerate(histogram))
    return {
        "mean_acceptance_length": 1.0 + accepted / steps if steps else 1.0,
        "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
        "acceptance_histogram": histogram,
        "num_spec_steps": steps,
        "num_accepted_draft_tokens": accepted,
        "num_draft_tokens": drafted,
        "num_spec_tokens": k,
        **extra,
    }


def offline(request_id: str, prompt: int, output: int, metrics: dict | None, **labels) -> dict:
    out = {"index": 0, "num_output_tokens": output, "finish_reason": "length", "spec_decode_metrics": metrics}
    return {"request_id": request_id, "num_prompt_tokens": prompt, "outputs": [out], **labels}


def write_lines(path: Path, records: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


# --- capture ----------------------------------------------------------------------------------


def request(request_id: str, prompt: int, output: int, reason: str = "length") -> SimpleNamespace:
    """What the hook reads of vLLM's ``Request`` when it is freed."""
    return SimpleNamespace(
        request_id=request_id,
        num_prompt_tokens=prompt,
        num_output_tokens=output,
        get_finished_reason=lambda: reason,
    )


def test_request_state_sums_each_steps_pairs_like_vllms_per_request_metrics():
    state = hooks._Requests(detailed=True)
    state.randomized = True
    # Three verify steps: (drafted 3, accepted 2), (3, 0), (2, 2) → histogram [1, 0, 2, 0].
    for drafted, accepted in ((3, 2), (3, 0), (2, 2)):
        state.observe("chat-7-0a1b2c3d", drafted, accepted)
    state.observe("other-1b2c3d4e", 3, 3)
    row = state.finished(SimpleNamespace(num_spec_tokens=3), request("chat-7-0a1b2c3d", 40, 12), {"run_id": "r"})
    assert row == {
        "ts": row["ts"],
        "run_id": "r",
        "request_key": schema.request_key("chat-7"),  # vLLM's random suffix is not the caller's id
        "finish_reason": "length",
        "num_prompt_tokens": 40,
        "num_output_tokens": 12,
        "num_spec_tokens": 3,
        "num_spec_steps": 3,
        "num_draft_tokens": 8,
        "num_accepted_tokens": 4,  # 0·1 + 2·2
        "acceptance_histogram": [1, 0, 2, 0],  # k + 1 elements, as vLLM's
        "per_step_drafted": [3, 3, 2],
        "per_step_accepted": [2, 0, 2],
    }
    assert list(state.open) == ["other-1b2c3d4e"]  # the finished one is forgotten


def test_a_request_that_never_drafted_gets_a_zero_row_and_a_plain_engine_none():
    state = hooks._Requests(detailed=False)
    row = state.finished(SimpleNamespace(num_spec_tokens=2), request("5", 3, 9, "stop"), {})
    assert row is not None
    assert (row["acceptance_histogram"], row["num_spec_steps"], row["per_step_drafted"]) == ([0, 0, 0], 0, None)
    assert row["finish_reason"] == "stop" and row["request_key"] == schema.request_key("5")
    assert state.finished(SimpleNamespace(num_spec_tokens=0), request("6", 3, 9), {}) is None


def test_external_id_strips_only_vllms_random_suffix():
    assert hooks._external_id("7-1a2b3c4d") == "7"
    assert hooks._external_id("cmpl-abc-0-deadbeef") == "cmpl-abc-0"
    assert hooks._external_id("7-1a2b3c4g") == "7-1a2b3c4g"  # not hex
    assert hooks._external_id("7-1a2b3c4d", randomized=False) == "7-1a2b3c4d"


def test_requests_env_variable():
    assert CaptureConfig.from_env({}).requests is None
    assert CaptureConfig.from_env({"SPECOBS_REQUESTS": "1"}).requests == "summary"
    assert CaptureConfig.from_env({"SPECOBS_REQUESTS": "Detailed"}).requests == "detailed"
    assert CaptureConfig.from_env({"SPECOBS_REQUESTS": "off"}).requests is None


ROW = {
    "ts": 10.0, "run_id": "r", "request_key": "00ff", "num_prompt_tokens": 4, "num_output_tokens": 9,
    "num_spec_tokens": 2, "num_spec_steps": 3, "num_draft_tokens": 6, "num_accepted_tokens": 3,
    "acceptance_histogram": [1, 1, 1],
}  # fmt: skip


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_request_rows_go_to_their_own_files_never_into_steps(tmp_path, kind):
    sink = JsonlSink(tmp_path, "r") if kind == "jsonl" else ParquetSink(tmp_path, "r")
    step = {"ts": 1.0, "num_drafts": 2, "num_draft_tokens": 4, "num_accepted_tokens": 1}
    sink.write([step, ROW])
    sink.write([ROW | {"request_key": "11ee"}, step | {"ts": 2.0}])  # opening the steps file keeps it
    sink.close()
    (requests,) = tmp_path.glob("specobs-r-requests-p*-0001.jsonl")  # one file, both rows
    assert len(list(tmp_path.glob("specobs-r-requests-*"))) == 1
    saved = [json.loads(line) for line in requests.read_text().splitlines()]
    assert saved == [{name: ROW.get(name) for name in schema.REQUESTS}, {**saved[0], "request_key": "11ee"}]
    ingested = load([str(tmp_path)])
    assert ingested.requests["num_spec_steps"].to_list() == [3, 3]
    steps = ingested.windows.collect()
    assert steps["num_drafts"].to_list() == [2, 2]  # the request rows are no steps
    memory = MemorySink()
    memory.write([step, ROW])
    assert len(memory.rows) == 1 and memory.requests[0]["acceptance_histogram"] == [1, 1, 1]


# --- ingest -----------------------------------------------------------------------------------


def test_offline_outputs_become_rows_with_hashed_ids(tmp_path):
    path = write_lines(
        tmp_path / "outputs.jsonl",
        [
            offline("a", 12, 48, spec([3, 5, 9, 12], 87), workload="chat"),
            {"request_id": "b", "prompt_token_ids": [1, 2, 3], "outputs": [
                {"index": 0, "token_ids": [5, 6], "spec_decode_metrics": spec([1, 1, 0, 0], 6,
                 per_step_drafted=[3, 3], per_step_accepted=[0, 1])},
                {"index": 1, "token_ids": [5], "spec_decode_metrics": spec([0, 0, 0, 1], 3)},
            ]},
        ],
    )  # fmt: skip
    ingested = load([str(path)])
    assert ingested.sources[0].format == "vllm-outputs" and not ingested.skipped
    rows = ingested.requests.to_dicts()
    assert [r["request_key"] for r in rows] == [schema.request_key(x) for x in ("a", "b", "b:1")]
    assert [r["num_spec_steps"] for r in rows] == [29, 2, 1]  # 3+5+9+12
    assert [r["num_accepted_tokens"] for r in rows] == [59, 1, 3]  # 5 + 18 + 36
    assert [r["num_prompt_tokens"] for r in rows] == [12, 3, 3]
    assert [r["num_output_tokens"] for r in rows] == [48, 2, 1]
    assert rows[1]["per_step_accepted"] == [0, 1] and rows[2]["per_step_accepted"] is None
    assert rows[0]["workload"] == "chat" and rows[0]["ts"] is None  # no time given: unknown
    assert "a" not in ingested.requests["request_key"].to_list()


def test_server_responses_plain_and_streamed(tmp_path):
    plain = {
        "id": "cmpl-1", "object": "text_completion", "created": 1764472000, "model": "m",
        "choices": [{"index": 0, "text": "secret words", "finish_reason": "length"}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 16},
        "metrics": {"time_to_first_token_ms": 3.0, "speculative_decoding": spec([2, 1, 0, 2], 15)},
    }  # fmt: skip
    chunk = {"id": "cmpl-2", "object": "text_completion", "created": 1764472001, "model": "m",
             "choices": [{"index": 0, "text": "x", "finish_reason": None}]}  # fmt: skip
    last = {**chunk, "choices": [{"index": 0, "text": "y", "finish_reason": "stop"}]}
    usage = {**chunk, "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3},
             "metrics": {"speculative_decoding": spec([1, 1, 0, 0], 6)}}  # fmt: skip
    path = tmp_path / "responses.jsonl"
    path.write_text(
        json.dumps(plain)
        + "\n"
        + "".join(f"data: {json.dumps(c)}\n\n" for c in (chunk, last, usage))
        + "data: [DONE]\n"
    )
    ingested = load([str(path)])
    assert ingested.sources[0].format == "openai-responses" and not ingested.skipped
    rows = ingested.requests.to_dicts()
    assert [r["request_key"] for r in rows] == [schema.request_key("cmpl-1"), schema.request_key("cmpl-2")]
    assert [(r["num_spec_steps"], r["num_accepted_tokens"], r["num_draft_tokens"]) for r in rows] == [
        (5, 7, 15),  # 1·1 + 3·2
        (2, 1, 6),
    ]
    assert [(r["num_prompt_tokens"], r["num_output_tokens"], r["finish_reason"]) for r in rows] == [
        (7, 16, "length"),
        (5, 3, "stop"),  # the stream's finish reason is on its last content chunk
    ]
    assert rows[0]["ts"] == 1764472000.0 and rows[0]["model"] == "m"
    assert [n.why for n in ingested.notices] == [
        "2 record(s) without metrics.speculative_decoding, passed over (vLLM fills it with "
        "--per-request-spec-decode-metrics summary|detailed (streams: the final usage chunk))"
    ]


BAD = [
    ('{"request_id": "x", "outputs": [', "not valid JSON"),
    (offline("x", 1, 1, spec([1, 1], 2) | {"num_spec_steps": 3}), "acceptance_histogram sums to 2, not num_spec_steps 3"),
    (offline("x", 1, 1, spec([1, 1], 2) | {"num_accepted_draft_tokens": 2}),
     "acceptance_histogram gives 1 accepted tokens, not 2"),
    (offline("x", 1, 1, spec([0, 0, 2], 3)), "accepted tokens 4 above drafted 3"),
    (offline("x", 1, 1, spec([1, 1], 2) | {"mean_acceptance_length": 1.75}),
     "mean_acceptance_length 1.75 is not 1 + accepted/steps = 1.5"),
    (offline("x", 1, 1, spec([1, -1], 2)), "acceptance_histogram is not a non-empty list of non-negative integers"),
    (offline("x", 1, 1, spec([1, 1], 2, per_step_drafted=[1, 2], per_step_accepted=[0, 1])),
     "per_step lists do not add up to num_draft_tokens and num_accepted_tokens"),
    (offline("x", 1.5, 1, spec([1, 1], 2)), "num_prompt_tokens is not a non-negative integer"),
    (offline("x", 1, 1, spec([1, 1, 0, 0, 0], 2, k=3)),
     "acceptance_histogram has 5 elements, more than num_spec_tokens + 1 = 4"),
    ("[1, 2]", "not a JSON object"),
]  # fmt: skip


@pytest.mark.parametrize(("record", "why"), BAD, ids=[w for _, w in BAD])
def test_a_bad_record_is_skipped_whole_and_named(tmp_path, record, why):
    good = offline("ok", 4, 8, spec([1, 2, 0, 1], 12))
    path = write_lines(tmp_path / "outputs.jsonl", [good, record, good | {"request_id": "ok2"}])
    ingested = load([str(path)])
    assert [str(s) for s in ingested.skipped] == [f"{path}:2: {why}"]
    assert ingested.requests.height == 2 and ingested.sources[0].skipped == 1


def test_a_bad_record_on_the_command_line_is_one_line_not_a_traceback(tmp_path):
    good = offline("ok", 4, 8, spec([1, 2, 0, 1], 12))
    path = write_lines(tmp_path / "outputs.jsonl.gz", [])
    path.write_bytes(gzip.compress((json.dumps(good) + "\n" + json.dumps(BAD[3][0]) + "\n").encode()))
    result = run_cli("report", str(path), "--format", "json")
    assert result.returncode == 0, result.stderr.decode()
    assert result.stderr.decode().splitlines() == [f"specobs: skipped {path}:2: accepted tokens 4 above drafted 3"]
    data = json.loads(result.stdout)
    assert data["skipped_lines"]["total"] == 1 and data["requests"]["overall"]["num_requests"] == 1


def test_the_same_request_captured_and_saved_counts_once(tmp_path):
    events = tmp_path / "events"
    sink = JsonlSink(events, "r")
    sink.write([{**ROW, "request_key": schema.request_key("q1")}])
    sink.close()
    saved = write_lines(tmp_path / "outputs.jsonl", [offline("q1", 4, 9, spec([1, 1, 1], 6, k=2))])
    ingested = load([str(events), str(saved)])
    assert ingested.requests.height == 1
    assert [n.why for n in ingested.notices] == [
        "1 finished request(s) read twice (same request id and counts, e.g. captured and saved as outputs): "
        "counted once"
    ]


# --- analysis ---------------------------------------------------------------------------------


def frame(rows: list[tuple[int, int, int, int, str | None]]) -> pl.DataFrame:
    """(accepted, steps, prompt tokens, output tokens, workload) per request."""
    return pl.DataFrame(
        [
            {"request_key": str(i), "num_accepted_tokens": a, "num_spec_steps": s, "num_draft_tokens": 3 * s,
             "num_prompt_tokens": p, "num_output_tokens": o, "workload": w, "method": "ngram"}
            for i, (a, s, p, o, w) in enumerate(rows)
        ]
    ).pipe(schema.conform, schema.REQUESTS)  # fmt: skip


#: Lengths 3.0, 2.0, (none: no steps), 3.25.
FOUR = [(6, 3, 5, 20, "chat"), (1, 1, 16, 3, "chat"), (0, 0, 17, 1, "code"), (9, 4, 40, 30, "code")]


def test_request_and_token_weighted_means_and_percentiles():
    (row,) = analysis.summarize(analysis.per_request(frame(FOUR))).to_dicts()
    assert row["num_requests"] == 4 and row["num_requests_without_drafts"] == 1
    assert row["request_weighted_mean_acceptance_length"] == pytest.approx((3.0 + 2.0 + 3.25) / 3)  # 2.75
    assert row["token_weighted_mean_acceptance_length"] == pytest.approx(1 + 16 / 8)  # 3.0
    # Linear between the sorted lengths [2, 3, 3.25] at rank q·(n−1):
    assert row["p10"] == pytest.approx(2.2)  # rank 0.2: 2 + 0.2·1
    assert row["p50"] == pytest.approx(3.0)
    assert row["p90"] == pytest.approx(3.2)  # rank 1.8: 3 + 0.8·0.25
    assert row["p99"] == pytest.approx(3.245)  # rank 1.98
    assert row["mean_prompt_tokens"] == pytest.approx(78 / 4)


def test_groups_by_prompt_and_output_bucket_and_workload():
    by_prompt = analysis.summarize(analysis.per_request(frame(FOUR)), "prompt_bucket")
    assert by_prompt["prompt_bucket"].to_list() == ["4-7", "16-31", "32-63"]  # numeric order
    assert by_prompt["num_requests"].to_list() == [1, 2, 1]
    assert by_prompt["request_weighted_mean_acceptance_length"].to_list() == [3.0, 2.0, 3.25]
    by_output = analysis.summarize(analysis.per_request(frame(FOUR)), "output_bucket")
    assert by_output["output_bucket"].to_list() == ["1", "2-3", "16-31"]
    by_workload = analysis.summarize(analysis.per_request(frame(FOUR)), "workload")
    assert by_workload["workload"].to_list() == ["chat", "code"]
    assert by_workload["token_weighted_mean_acceptance_length"].to_list() == pytest.approx([1 + 7 / 4, 1 + 9 / 4])
    assert by_workload["request_weighted_mean_acceptance_length"].to_list() == pytest.approx([2.5, 3.25])


def test_histogram_bins_from_one_with_the_last_closed():
    bins = analysis.histogram(frame(FOUR))
    assert [b["low"] for b in bins] == [1.0 + 0.25 * i for i in range(9)]  # up to 3.25
    assert [b["requests"] for b in bins] == [0, 0, 0, 0, 1, 0, 0, 0, 2]  # 2.0 → [2, 2.25); 3.0 and 3.25 last
    assert analysis.histogram(frame([(0, 0, 1, 1, None)])) == []


def test_result_and_its_json():
    result = analysis.request_acceptance(frame(FOUR))
    assert result is not None
    data = result.to_dict()
    assert data["overall"]["label"] is None and data["overall"]["num_accepted_tokens"] == 16
    assert [g["label"] for g in data["by_workload"]] == ["chat", "code"]
    assert sum(b["requests"] for b in data["histogram"]) == 3
    assert analysis.request_acceptance(schema.empty(schema.REQUESTS)) is None


# --- the report -------------------------------------------------------------------------------


def test_report_shows_the_distribution_and_why_the_means_differ(tmp_path):
    # Long requests accept more: (30 accepted, 10 steps) → 4.0 and four short ones at 1 + 1/2 = 1.5.
    records = [offline("long", 50, 40, spec([0, 0, 0, 10], 30))]
    records += [offline(f"short{i}", 10, 3, spec([1, 1, 0, 0], 6)) for i in range(4)]
    path = write_lines(tmp_path / "outputs.jsonl", records)
    data = report_json(str(path))
    overall = data["requests"]["overall"]
    assert overall["request_weighted_mean_acceptance_length"] == pytest.approx((4.0 + 4 * 1.5) / 5)  # 2.0
    assert overall["token_weighted_mean_acceptance_length"] == pytest.approx(1 + 34 / 18)  # 2.888889
    finding = next(f for f in data["findings"] if f.startswith("Per request"))
    assert "2.00" in finding and "2.89" in finding
    assert "long requests weigh more in the token-weighted mean, so long requests accept more" in finding
    markdown = run_cli("report", str(path), "--format", "markdown").stdout.decode()
    assert "### Acceptance per request" in markdown
    assert "| all |  | 5 | 0 | 2.00 | 2.89 | 1.50 | 1.50 | 3.00 | 3.90 | 18 | 10 |" in markdown
    rich = run_cli("report", str(path)).stdout.decode()
    summary, details = rich.split(" Details ", 1)  # the summary repeats the findings that matter most
    assert "Per request, the acceptance length" in summary
    assert "Requests by acceptance length" in details and details.count("Per request, the acceptance length") == 1


def test_analyze_without_request_rows_has_none():
    report = analyze(load([]))
    assert report.requests is None and report.to_dict()["requests"] is None


def test_request_rows_never_count_as_steps_in_the_prometheus_exporter():
    from prometheus_client import CollectorRegistry

    from specobs.exporters.prometheus import PrometheusMetrics, PrometheusSink

    registry = CollectorRegistry()
    step = {"ts": 1.0, "model": "m", "engine": 0, "method": "ngram", "batch_size": 2, "num_spec_tokens": 2,
            "num_drafts": 2, "num_draft_tokens": 4, "num_accepted_tokens": 1}  # fmt: skip
    request_row = {**ROW, "model": "m", "engine": 0, "method": "ngram"}
    PrometheusSink(PrometheusMetrics(registry)).write([step, request_row, request_row])
    labels = {"model_name": "m", "engine": "0", "method": "ngram"}
    assert registry.get_sample_value("specobs_steps_total", labels) == 1  # the step alone
    assert registry.get_sample_value("specobs_drafts_total", labels) == 2


# --- finished requests alone, and responses saved indented -------------------------------------


def response(request_id: str, metrics: dict | None, created: int = 1764472000) -> dict:
    """A vLLM completion response as the server returns it (``--per-request-spec-decode-metrics``)."""
    record = {
        "id": request_id, "object": "text_completion", "created": created, "model": "m",
        "choices": [{"index": 0, "text": "words", "finish_reason": "length"}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 16},
    }  # fmt: skip
    if metrics is not None:
        record["metrics"] = {"speculative_decoding": metrics}
    return record


RESPONSES = [
    response("cmpl-a", spec([2, 1, 0, 2], 15)),
    response("cmpl-b", spec([1, 1, 0, 0], 6)),
    # Detailed: 11 steps drafted 3 tokens (accepting 2, 2, 2, 2, 3, 3, 3, 3, 3, 1, 1), the last drafted 1 (accepted 1).
    response("cmpl-c", spec([0, 3, 4, 5], 34, per_step_drafted=[3] * 11 + [1],
                            per_step_accepted=[2] * 4 + [3] * 5 + [1] * 3)),
]  # fmt: skip


@pytest.mark.parametrize(
    "layout",
    [
        pytest.param(lambda rs: "".join(json.dumps(r, indent=2) + "\n" for r in rs), id="documents"),
        pytest.param(lambda rs: json.dumps(rs, indent=2) + "\n", id="list"),
        pytest.param(lambda rs: json.dumps(rs) + "\n", id="list-on-one-line"),
    ],
)
def test_responses_saved_indented_are_read_like_json_lines(tmp_path, layout):
    lines = write_lines(tmp_path / "responses.jsonl", RESPONSES)
    pretty = tmp_path / "responses.json"
    pretty.write_text(layout(RESPONSES))
    expected, got = load([str(lines)]), load([str(pretty)])
    assert got.sources[0].format == "openai-responses" and got.skipped == []
    assert got.requests.to_dicts() == expected.requests.to_dicts()
    assert got.requests["num_spec_steps"].to_list() == [5, 2, 12]


def test_one_indented_response_is_read_and_a_bad_document_named_by_its_line(tmp_path):
    one = tmp_path / "one.json"
    one.write_text(json.dumps(RESPONSES[0], indent=2) + "\n")
    assert load([str(one)]).requests["num_accepted_tokens"].to_list() == [7]  # 1·1 + 3·2
    broken = tmp_path / "broken.json"
    first = json.dumps(RESPONSES[0], indent=2)
    broken.write_text(first + "\n" + json.dumps(RESPONSES[1], indent=2)[:-3] + "\n")
    ingested = load([str(broken)])
    assert ingested.requests["request_key"].to_list() == [schema.request_key("cmpl-a")]  # the one before is kept
    start = first.count("\n") + 2  # the second document's first line
    assert [(s.line, s.why.split(" (")[0]) for s in ingested.skipped] == [(start, "not valid JSON")]


def test_json_that_is_no_format_says_what_would_be_read(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"hello": [1, 2]}, indent=2))
    result = run_cli("report", str(path))
    err = result.stderr.decode()
    assert result.returncode == 2 and err.count("\n") == 1, err
    assert f"{path}: JSON, but not a format specobs reads" in err and "--per-request-spec-decode-metrics" in err


def test_an_indented_response_without_the_metrics_says_which_server_flag_fills_them(tmp_path):
    path = tmp_path / "plain.json"
    path.write_text(json.dumps(response("cmpl-x", None), indent=2))
    result = run_cli("report", str(path))
    err = result.stderr.decode()
    assert result.returncode == 1, err
    assert "1 record(s) without metrics.speculative_decoding" in err and "--per-request-spec-decode-metrics" in err


def test_finished_requests_alone_fill_the_summary_from_their_counts(tmp_path):
    path = write_lines(tmp_path / "responses.jsonl", RESPONSES)
    data = report_json(str(path))
    s = data["summary"]
    # Steps 5 + 2 + 12, drafted 15 + 6 + 34, accepted 7 + 1 + (3 + 8 + 15).
    assert (s["num_drafts"], s["num_draft_tokens"], s["num_accepted_tokens"]) == (19, 55, 34)
    assert s["mean_acceptance_length"] == pytest.approx(1 + 34 / 19, abs=1e-6)
    assert s["mean_acceptance_length"] == pytest.approx(
        data["requests"]["overall"]["token_weighted_mean_acceptance_length"], abs=1e-6
    )
    assert s["draft_acceptance_rate"] == pytest.approx(34 / 55, abs=1e-6)
    # a_i: steps accepting more than i tokens, request by request: [3, 2, 2] + [1, 0, 0] + [12, 9, 5].
    assert s["num_accepted_tokens_per_pos"] == [16, 11, 7]
    # Which drafts reached a position: every draft of the first two (no per-step lists), and of
    # the third, the 11 steps that drafted 3 tokens past position 1 (its last step drafted 1).
    assert s["num_drafts_per_pos"] == [19, 5 + 2 + 11, 5 + 2 + 11]
    # β's trials at position 3: drafts that reached it with the first two accepted. The third
    # request knows them (9 of its 11 three-token steps accepted 2 or more); the others are
    # estimated per row as a_1 · n_2 / n_1 (= a_1: every draft of theirs reached position 3).
    cond = s["conditional_acceptance_rate_per_position"]
    assert cond[2] == pytest.approx(7 / (2 + 0 + 9), abs=1e-6)
    assert data["details"]["summary"]["num_windows"] == 3  # one window per request
    assert data["findings"][0].startswith("The input holds only finished requests (3 of them")
    assert "19 verify steps" in data["findings"][0]


def test_recommend_on_finished_requests_alone_says_what_it_needs(tmp_path):
    path = write_lines(tmp_path / "responses.jsonl", RESPONSES)
    result = run_cli("recommend", str(path))
    err = result.stderr.decode()
    assert result.returncode == 1 and err.count("\n") == 1, err
    assert err.startswith(f"specobs: {path}: per-request acceptance only (3 finished request(s)): no step or interval")
    assert "engine steps" in err and "no drafts" not in err


def test_requests_beside_steps_leave_the_summary_to_the_steps(tmp_path):
    from specobs import simulate
    from specobs.capture import JsonlSink

    sink = JsonlSink(str(tmp_path), "sim")
    sink.write(simulate("ngram", [3], [1], 20, seed=1).to_dicts())
    sink.close()
    write_lines(tmp_path / "responses.jsonl", RESPONSES)
    data = report_json(str(tmp_path))
    steps = report_json(str(next(tmp_path.glob("specobs-sim*"))))
    assert data["summary"] == steps["summary"]  # the requests are shown apart, not added
    assert data["requests"]["overall"]["num_requests"] == 3


def _class_requests(rng, count: int, rate: float, *, workload: str, prompt: int, drafts: int = 60) -> list[dict]:
    rows = []
    for i in range(count):
        accepted = int(rng.binomial(drafts, rate))
        rows.append({"request_key": f"{workload}-{prompt}-{rate}-{i}", "workload": workload,
                     "num_prompt_tokens": prompt, "num_output_tokens": 100, "num_spec_steps": drafts // 3,
                     "num_draft_tokens": drafts, "num_accepted_tokens": accepted})  # fmt: skip
    return rows


def test_a_request_far_below_its_class_is_flagged_and_a_low_class_is_not():
    import numpy as np

    from specobs import schema
    from specobs.analysis.per_request import FLAG_SHARE, flagged_requests, per_request, request_acceptance

    rng = np.random.default_rng(7)
    rows = (
        _class_requests(rng, 40, 0.7, workload="chat", prompt=100)
        + _class_requests(rng, 1, 0.1, workload="chat", prompt=100, drafts=90)  # far below its class
        + _class_requests(rng, 40, 0.15, workload="code", prompt=1000)  # a whole class accepts little: no flag
        + _class_requests(rng, 1, 0.05, workload="chat", prompt=100, drafts=12)  # too few drafts to judge
    )
    frame = schema.conform(pl.DataFrame(rows), schema.REQUESTS)
    count, flagged = flagged_requests(per_request(frame))
    assert count == 1
    (worst,) = flagged
    assert worst.request_key == "chat-100-0.1-0" and worst.prompt_bucket == "64-127"
    # By hand: the class's rate without the request, and the request's own.
    others = frame.filter((pl.col("workload") == "chat") & (pl.col("request_key") != worst.request_key))
    assert worst.class_draft_acceptance_rate == pytest.approx(
        others["num_accepted_tokens"].sum() / others["num_draft_tokens"].sum()
    )
    assert worst.draft_acceptance_rate < FLAG_SHARE * worst.class_draft_acceptance_rate
    result = request_acceptance(frame)
    assert result.num_flagged == 1 and result.to_dict()["flagged"][0]["request_key"] == worst.request_key
