"""The bundled serve recordings (examples/data/vllm-cpu-serve/): ground truth for speedups read from
logs and scrapes, so each run's client counts must agree with its own log and scrapes
(tests/serve_checks.py), and the files must stay what the README says."""

from __future__ import annotations

import json
import re

import pytest
from support.paths import ROOT
from support.serve_checks import check_clients, check_scrapes, check_stats_lines

DATA = ROOT / "examples" / "data" / "vllm-cpu-serve"
RUNS = [f"vllm-cpu-{m}-r{r}" for r in (1, 2) for m in ("plain", "ngram-k3", "draft-k3")]
METHOD = {"plain": None, "ngram": "ngram", "draft": "draft_model"}


def test_the_runs_and_nothing_else_are_bundled():
    names = {p.name for p in DATA.iterdir()}
    assert names == {f"{run}{ext}" for run in RUNS for ext in (".log", ".metrics.txt", ".clients.json")}
    assert max(p.stat().st_size for p in DATA.iterdir()) < 600_000


@pytest.mark.parametrize("run", RUNS)
def test_clients_log_and_scrapes_of_a_run_agree(run):
    saved = json.loads((DATA / f"{run}.clients.json").read_text())
    method = METHOD[run.split("-")[2]]
    assert saved["name"] == run and saved["vllm_version"] == "0.32.0"
    assert (saved["speculative_config"] or {}).get("method") == method
    check_clients(saved, (1, 4, 8), 20.0)
    check_stats_lines(DATA / f"{run}.log", saved)
    by_phase = check_scrapes(DATA / f"{run}.metrics.txt", saved)
    log = (DATA / f"{run}.log").read_text()
    assert ("SpecDecoding metrics" in log) == (method is not None)
    assert ("vllm:spec_decode_num_drafts_total" in by_phase["start"]) == (method is not None)
    # Anonymised: every Python file path in the log is under the stand-in prefixes.
    paths = set(re.findall(r"(?<![\w.:/])(/[\w.+-]+(?:/[\w.+-]+)*\.py)\b", log))
    assert paths and all(p.startswith(("/opt/venv/lib/python3.11/", "/usr/lib/python3.11/")) for p in paths), paths
