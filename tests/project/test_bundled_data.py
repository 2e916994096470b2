"""The bundled real vLLM runs: the server log and the /metrics scrapes of the same run must agree.

vLLM's log line does not print the number of drafts (specobs derives it from the printed
rates), while the Prometheus counters count it exactly, so this checks the derivation, the
attribution and the cumulative-scrape differencing against real output.
"""

from __future__ import annotations

import pytest
from support.helpers import report_json, run_cli, windows_of
from support.paths import ROOT

DATA = ROOT / "examples" / "data"
RUNS = {"ngram": "ngram", "draft": "draft_model", "eagle": "eagle"}


@pytest.mark.slow
@pytest.mark.parametrize("run", sorted(RUNS))
def test_log_and_scrapes_of_one_run_agree(run):
    log = report_json(str(DATA / f"vllm-cpu-{run}-k3.log"))["summary"]
    prom = report_json(str(DATA / f"vllm-cpu-{run}-k3.metrics.txt"))["summary"]
    assert log["num_draft_tokens"] == prom["num_draft_tokens"] > 1000
    assert log["num_accepted_tokens"] == prom["num_accepted_tokens"] > 1000
    # Derived from 3-decimal rates: within a few drafts of the exact counter.
    assert abs(log["num_drafts"] - prom["num_drafts"]) <= max(2, prom["num_drafts"] // 1000)
    assert log["acceptance_rate_per_position"] == pytest.approx(prom["acceptance_rate_per_position"], abs=2e-3)
    assert log["mean_acceptance_length"] == pytest.approx(prom["mean_acceptance_length"], abs=2e-3)


@pytest.mark.parametrize("run", sorted(RUNS))
def test_log_labels_and_batch_sizes(run):
    w = windows_of(DATA / f"vllm-cpu-{run}-k3.log")
    assert set(w["method"]) == {RUNS[run]}
    assert set(w["model"]) == {"tiny-llama"}
    assert set(w["num_spec_tokens"]) == {3}
    assert set(w["engine"]) == {0}
    # The recording drove concurrency 1..12 against max_num_seqs=8.
    assert w["batch_size"].min() >= 1 and w["batch_size"].max() == 8  # "Running: 0" (drained) is null
    assert w["end_ts"].is_sorted() and w["start_ts"].null_count() == 0


def test_readme_main_command_runs_on_the_captured_sweep():
    result = run_cli("report", str(DATA / "vllm-cpu-sweep"), "--by", "method,k")
    assert result.returncode == 0, result.stderr.decode()
    out = result.stdout.decode()
    assert "draft_model" in out and "ngram" in out and "Timing by batch size" in out


@pytest.mark.slow
def test_captured_sweep_is_real_and_consistent():
    data = report_json(str(DATA / "vllm-cpu-sweep"), "--by", "method,k")
    groups = {(g["method"], g["num_spec_tokens"]): g for g in data["groups"]}
    assert set(groups) == {(None, 0)} | {(m, k) for m in ("ngram", "draft_model") for k in range(7)}
    for key in ((None, 0), ("ngram", 0), ("draft_model", 0)):  # plain engine, and drafting switched off
        assert groups[key]["num_drafts"] == 0 and groups[key]["mean_acceptance_length"] is None
    for method in ("ngram", "draft_model"):
        lengths = [groups[(method, k)]["mean_acceptance_length"] for k in range(1, 7)]
        assert lengths == sorted(lengths) and lengths[0] > 1.3  # more k, more tokens per step
        for k in range(1, 7):
            assert len(groups[(method, k)]["acceptance_rate_per_position"]) == k
    timing = data["timing"]
    assert {t["batch_bucket"] for t in timing} >= {"1", "4-7", "16-31"}
    draft = [t for t in timing if t["method"] == "draft_model"]
    ngram = [t for t in timing if t["method"] == "ngram"]
    # A draft model costs real time; ngram lookup is nearly free.
    assert min(t["mean_draft_seconds"] for t in draft) > 5 * max(t["mean_draft_seconds"] for t in ngram)
