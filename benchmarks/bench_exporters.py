"""Exporter cost: rendering a scrape, and exporting one engine step.

    python benchmarks/bench_exporters.py [--no-write]

- Scrape render time (``generate_latest``) with 8 engines × 3 methods × 16 positions of series,
  timing summaries over 4 batch buckets (target < 5 ms).
- ``PrometheusMetrics.observe_step`` for one step row, beside calling ``Summary.observe``
  directly once per timing field and ``Counter.inc`` per counter field (the floor for
  exporting the same numbers by hand).
- The series one engine publishes at most (one method, k = 16, every batch bucket) against
  ``SERIES_PER_ENGINE``.
Appends the results to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import timeit
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Summary, generate_latest
from results import machine, publish

from specobs.exporters.prometheus import SERIES_PER_ENGINE, PrometheusMetrics, series_of

HERE = Path(__file__).resolve().parent
ROW = {
    "model": "meta-llama/Llama-3.1-70B-Instruct", "engine": 0, "method": "eagle3", "batch_size": 16,
    "num_spec_tokens": 16, "num_drafts": 16, "num_draft_tokens": 256, "num_accepted_tokens": 60,
    "num_accepted_tokens_per_pos": [14, 12, 10, 8, 6, 4, 2, 1, 1, 1, 1, 0, 0, 0, 0, 0],
    "num_generated_tokens": 76, "draft_seconds": 0.004, "verify_seconds": 0.021, "step_seconds": 0.027,
}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    metrics = PrometheusMetrics(CollectorRegistry(), health=lambda: {"dropped_events": 0, "hook_errors": 0})
    for engine in range(8):
        for method in ("eagle3", "ngram", "mtp"):
            for batch in (1, 8, 32, 128):
                metrics.observe_step({**ROW, "engine": engine, "method": method, "batch_size": batch})
    series = series_of(metrics.registry)
    render = min(timeit.repeat(lambda: generate_latest(metrics.registry), number=20, repeat=5)) / 20

    fresh = PrometheusMetrics(CollectorRegistry())
    n = 20_000
    observe = min(timeit.repeat(lambda: fresh.observe_step(ROW), number=n, repeat=3)) / n
    r = CollectorRegistry()
    hist = [Summary(f"h{i}", "x", ["a", "b", "c", "d"], registry=r).labels("m", "0", "e", "16-31") for i in range(3)]
    counters = [Counter(f"c{i}", "x", ["a", "b", "c"], registry=r).labels("m", "0", "e") for i in range(5)]
    pos = [Counter(f"p{i}", "x", ["a", "b", "c"], registry=r).labels("m", "0", "e") for i in range(16)]

    def by_hand() -> None:
        for h, v in zip(hist, (0.004, 0.021, 0.027), strict=True):
            h.observe(v)
        for c in counters:
            c.inc(16)
        for c in pos:
            c.inc(1)

    one = PrometheusMetrics(CollectorRegistry(), health=lambda: {"dropped_events": 0, "hook_errors": 0})
    for batch in (None, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
        one.observe_step({**ROW, "batch_size": batch})
    per_engine = series_of(one.registry)
    direct = min(timeit.repeat(by_hand, number=n, repeat=3)) / n
    single = min(timeit.repeat(lambda: hist[0].observe(0.01), number=n, repeat=3)) / n
    lines = [
        f"## {dt.date.today().isoformat()} — exporter cost",
        "",
        "Command: `python benchmarks/bench_exporters.py`.",
        machine(),
        "",
        "| measure | value |",
        "|---|---:|",
        f"| series in the scrape (8 engines × 3 methods × 16 positions, 4 batch buckets) | {series:,} |",
        f"| scrape render (`generate_latest`) | {render * 1000:.2f} ms (target < 5 ms) |",
        f"| `observe_step`, one step with 16 positions | {observe * 1e6:.1f} µs |",
        f"| the same numbers exported by hand (3 observe + 21 inc) | {direct * 1e6:.1f} µs |",
        f"| one `Summary.observe` | {single * 1e6:.2f} µs |",
        f"| series of one engine at most (k = 16, every batch bucket) | {per_engine} (budget {SERIES_PER_ENGINE}) |",
        "",
    ]
    publish(lines, write=not args.no_write)


if __name__ == "__main__":
    main()
