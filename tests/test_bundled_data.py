"""The bundled real vLLM runs: the server log and the /metrics scrapes of the same run must agree.

vLLM's log line does not print the number of drafts (specobs derives it from the printed
rates), while the Prometheus counters count it exactly, so this checks the derivation, the
attribution and the cumulative-scrape differencing against real output.
"""

from __future__ import annotations

import glob
from pathlib import Path

import pytest
from conftest import report_json, run_cli, windows_of

DATA = Path(__file__).resolve().parent.parent / "examples" / "data"
RUNS = {"ngram": "ngram", "draft": "draft_model", "eagle": "eagle"}


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


def test_readme_main_command_runs():
    result = run_cli("report", *sorted(glob.glob(str(DATA / "*.log"))))
    assert result.returncode == 0, result.stderr.decode()
    out = result.stdout.decode()
    for method in RUNS.values():
        assert method in out
    assert "Each verification step yields" in out
