"""Serving under load: how honest the crossover's interval is, and what the analysis costs.

    python benchmarks/bench_serving.py [--draws 200] [--no-write]

1. Coverage. Speculative over plain throughput falls as ``1.4 · c^-0.2`` with the concurrency
   ``c`` (true crossover 1.4^5 ≈ 5.38), measured at concurrency 1, 2, 4, 8, 16 with 2, 3 or 5 runs a
   side, each run's throughput off by a log-normal factor (σ 0.10, about the spread of separate
   server processes here). Per draw: whether the crossover is found (``crossed``), whether its 95%
   interval holds the true one (an open end holds everything beyond it), and whether the schedule
   advice (``advice.load``, drafting up to the crossover's lower bound) drafts at batch 8 or more,
   past the true crossover by more than rounding (the concurrency taken as the batch), against a
   schedule drafting up to the point estimate. Targets: coverage ≥ 95%, drafting past the truth
   ≤ 5%.
2. Cost. ``specobs report`` (ingest, analysis, goodput under an SLO) on a sweep of 4
   configurations × 8 levels × 5 repeats = 160 result files of 1,000 requests each, saved with
   ``--save-detailed`` (per-request lists): wall time and peak RSS of the whole command.
Appends the results to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
from results import machine, publish

import specobs
from specobs import schema
from specobs.advice.load import advise
from specobs.analysis.under_load import serving

LEVELS = (1, 2, 4, 8, 16)
TRUE_CROSSOVER = 1.4**5
SIGMA = 0.10


def true_ratio(level: float) -> float:
    return 1.4 * level**-0.2


def draw(rng: random.Random, runs: int) -> pl.DataFrame:
    """A sweep's rows (``schema.BENCH`` columns the analysis reads) with noisy throughputs."""
    rows = []
    for level in LEVELS:
        plain = 100.0 * level**0.8
        for n in range(runs):
            for config, mean in (("plain", plain), ("spec", plain * true_ratio(level))):
                rows.append({
                    "source": f"{config}-{level}-{n}", "source_line": 1, "model": "m", "config": config,
                    "speculative": config == "spec", "method": "ngram" if config == "spec" else None,
                    "num_spec_tokens": 3 if config == "spec" else 0, "max_concurrency": level, "request_rate": None,
                    "output_throughput": mean * math.exp(rng.gauss(0, SIGMA)), "mean_tpot_ms": 1000 / mean * level,
                    "duration": 10.0, "failed": 0,
                })  # fmt: skip
    return schema.conform(pl.DataFrame(rows), schema.BENCH)


def coverage(draws: int) -> list[str]:
    lines = [
        "| runs a side | crossed | interval holds the truth | crossover on the wrong side of a level | "
        "schedule given | schedule drafts past the truth | the point estimate would |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for runs in (2, 3, 5):
        rng = random.Random(runs)
        crossed = held = wrong = past = past_point = given = 0
        for _ in range(draws):
            bench = draw(rng, runs)
            got = serving(bench)
            assert got is not None
            c = next(x for x in got.crossovers if x.metric == "output_throughput")
            if c.how == "crossed" and c.level is not None:
                crossed += 1
                low_ok = c.low is None or c.low <= TRUE_CROSSOVER
                high_ok = c.high is None or c.high >= TRUE_CROSSOVER
                held += low_ok and high_ok
                wrong += not (4 <= c.level <= 8)  # the truth lies between concurrency 4 and 8
            (advice,) = advise(got, bench)
            given += advice.schedule is not None
            beyond = math.floor(TRUE_CROSSOVER) + 2  # batch 8 and up: past the truth by more than rounding
            past += advice.draft_up_to is not None and advice.draft_up_to > beyond
            past_point += advice.crossover_batch is not None and advice.crossover_batch > beyond
        lines.append(
            f"| {runs} | {crossed / draws:.0%} | {held / max(crossed, 1):.0%} | {wrong / max(crossed, 1):.0%} | "
            f"{given / draws:.0%} | {past / draws:.0%} | {past_point / draws:.0%} |"
        )
    return lines


def result_file(config: str, level: int, run: int, rng: random.Random, requests: int) -> dict:
    speculative = config != "plain"
    ttfts = [abs(rng.gauss(0.05, 0.01)) for _ in range(requests)]
    latencies = [t + abs(rng.gauss(0.5, 0.1)) for t in ttfts]
    out = {
        "date": f"20261203-{level:02d}{run:02d}00", "backend": "vllm", "label": config, "model_id": "m",
        "num_prompts": requests, "config": config, "request_rate": "inf", "burstiness": 1.0,
        "max_concurrency": level, "duration": 60.0, "completed": requests, "failed": 0,
        "output_throughput": 1000.0 * (1 + rng.random()), "mean_tpot_ms": 10.0, "p99_tpot_ms": 15.0,
        "median_itl_ms": 9.0, "p99_e2el_ms": 900.0, "ttfts": ttfts, "latencies": latencies,
        "output_lens": [64] * requests, "errors": [""] * requests,
    }  # fmt: skip
    if speculative:
        out |= {"spec_decode_acceptance_rate": 50.0, "spec_decode_acceptance_length": 2.5,
                "spec_decode_num_drafts": 100, "spec_decode_draft_tokens": 300, "spec_decode_accepted_tokens": 150,
                "spec_decode_per_position_acceptance_rates": [0.7, 0.5, 0.3]}  # fmt: skip
    return out


def cost() -> list[str]:
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "sweep"
        folder.mkdir()
        for config in ("plain", "ngram-k2", "ngram-k4", "eagle3"):
            for level in (1, 2, 4, 8, 16, 32, 64, 128):
                for run in range(5):
                    record = result_file(config, level, run, rng, 1000)
                    (folder / f"{config}-c{level}-r{run}.json").write_text(json.dumps(record))
        size = sum(p.stat().st_size for p in folder.iterdir())
        command = [sys.executable, "-m", "specobs.cli", "report", str(folder), "--slo", "tpot:12ms,ttft:60ms",
                   "--format", "json"]  # fmt: skip
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, check=True)
        wall = time.perf_counter() - started
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        report = json.loads(done.stdout)
    levels = report["serving"]["levels"]
    assert len(levels) == 32 and all(lv["goodput"] is not None for lv in levels)
    return [
        f"160 result files ({size / 2**20:.0f} MiB, 1,000 requests each, per-request lists), 4 configurations × 8 "
        f"levels × 5 runs, `specobs report --slo tpot:12ms,ttft:60ms -f json`: **{wall:.1f} s** wall, peak RSS "
        f"{max(rss, before) / 1024:.0f} MiB (the whole command, Python start-up included).",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    lines = [
        f"## {dt.date.today().isoformat()} — serving under load (crossover intervals, cost)",
        "",
        machine(f", specobs {specobs.__version__}"),
        "",
        f"Coverage: {args.draws} draws per row; true throughput ratio 1.4·c^-0.2 (crossover {TRUE_CROSSOVER:.2f}), "
        f"levels {', '.join(map(str, LEVELS))}, log-normal run noise σ {SIGMA}.",
        "",
        *coverage(args.draws),
        "",
        *cost(),
    ]
    publish(lines, write=not args.no_write)


if __name__ == "__main__":
    main()
