"""Exporter cost: rendering a scrape, and exporting one engine step.

    python benchmarks/bench_exporters.py [--no-write] [--repeat N]

- Scrape render time (``generate_latest``) with 8 engines × 3 methods × 16 positions of series,
  timing summaries over 4 batch buckets (target ≤ 5 ms), split into building the families
  (``registry.collect``) and formatting them; beside it, ``generate_latest`` of a plain
  ``CounterMetricFamily`` with as many samples of four labels (what ``prometheus_client``'s
  exposition alone costs for that many samples: the floor of any design that renders with it).
- ``PrometheusMetrics.observe_step`` for one step row with 16 positions (target ≤ 15 µs), beside
  calling ``Summary.observe`` once per timing field and ``Counter.inc`` per counter field, and
  ``OtelMetrics.observe_step`` for the same row (the same mapping and sums, plus three histogram
  records; on an in-memory reader, when ``specobs[otel]`` is installed).
- The series one engine publishes at most (three methods, k = 16, every batch bucket) against
  ``SERIES_PER_ENGINE``.

Each measure is the best of ``--repeat`` rounds, the rounds interleaved so that a noisy neighbour
slows the measure and its anchor alike; the ratios to the anchors are the figures to compare
across machines. Appends the results to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import timeit
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Summary, generate_latest
from prometheus_client.core import CounterMetricFamily
from results import machine, publish

from specobs.buckets import BOUNDED_LABELS
from specobs.exporters.prometheus import SERIES_PER_ENGINE, PrometheusMetrics, series_of

try:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from specobs.exporters.otel import OtelMetrics
except ImportError:  # specobs[otel] not installed: the OpenTelemetry row is left out
    OtelMetrics = None  # type: ignore[assignment,misc]

ROW = {
    "model": "meta-llama/Llama-3.1-70B-Instruct", "engine": 0, "method": "eagle3", "batch_size": 16,
    "num_spec_tokens": 16, "num_drafts": 16, "num_draft_tokens": 256, "num_accepted_tokens": 60,
    "num_accepted_tokens_per_pos": [14, 12, 10, 8, 6, 4, 2, 1, 1, 1, 1, 0, 0, 0, 0, 0],
    "num_generated_tokens": 76, "draft_seconds": 0.004, "verify_seconds": 0.021, "step_seconds": 0.027,
}  # fmt: skip
METHODS = ("eagle3", "ngram", "mtp")
HEALTH = {"dropped_events": 0, "hook_errors": 0}


def fleet() -> PrometheusMetrics:
    """8 engines × 3 methods, each timed in 4 batch buckets."""
    metrics = PrometheusMetrics(CollectorRegistry(), health=lambda: HEALTH)
    for engine in range(8):
        for method in METHODS:
            for batch in (1, 8, 32, 128):
                metrics.observe_step({**ROW, "engine": engine, "method": method, "batch_size": batch})
    return metrics


def plain_exposition(samples: int) -> CollectorRegistry:
    """A registry of one counter family with ``samples`` samples of four labels, nothing else."""

    class Plain:
        def collect(self) -> list[CounterMetricFamily]:
            family = CounterMetricFamily("plain", "x", labels=["model_name", "engine", "method", "position"])
            for i in range(samples):
                family.add_metric(["meta-llama/Llama-3.1-70B-Instruct", str(i % 8), "eagle3", str(i)], float(i))
            return [family]

    registry = CollectorRegistry()
    registry.register(Plain())
    return registry


def by_hand() -> Callable[[], None]:
    """The step's numbers exported with ``prometheus_client`` instruments: 3 observe + 21 inc."""
    r = CollectorRegistry()
    timing = ["a", "b", "c", "d"]
    summaries = [Summary(f"h{i}", "x", timing, registry=r).labels("m", "0", "e", "16-31") for i in range(3)]
    counters = [Counter(f"c{i}", "x", ["a", "b", "c"], registry=r).labels("m", "0", "e") for i in range(5)]
    positions = [Counter(f"p{i}", "x", ["a", "b", "c"], registry=r).labels("m", "0", "e") for i in range(16)]

    def export() -> None:
        for summary, seconds in zip(summaries, (0.004, 0.021, 0.027), strict=True):
            summary.observe(seconds)
        for counter in counters:
            counter.inc(16)
        for counter in positions:
            counter.inc(1)

    return export


def worst_engine() -> int:
    """Series of one engine at its worst by design: three methods, k = 16, every batch bucket."""
    metrics = PrometheusMetrics(CollectorRegistry(), health=lambda: HEALTH)
    batches = [1 << e for e in range(len(BOUNDED_LABELS) - 1)] + [None]
    for method in METHODS:
        for batch in batches:
            metrics.observe_step({**ROW, "method": method, "batch_size": batch})
    return series_of(metrics.registry)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--repeat", type=int, default=10, help="interleaved rounds; the best of each is kept")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line (bench_fleet.py)")
    args = parser.parse_args()
    metrics = fleet()
    series = series_of(metrics.registry)
    plain = plain_exposition(series)
    step = PrometheusMetrics(CollectorRegistry())
    export = by_hand()
    one = Summary("one", "x", registry=CollectorRegistry())
    n = 2_000
    measures: dict[str, tuple[Callable[[], object], int]] = {
        "render": (lambda: generate_latest(metrics.registry), 2),
        "collect": (lambda: list(metrics.registry.collect()), 2),
        "plain": (lambda: generate_latest(plain), 2),
        "observe": (lambda: step.observe_step(ROW), n),
        "by hand": (export, n),
        "one observe": (lambda: one.observe(0.01), n),
    }
    if OtelMetrics is not None:
        otel = OtelMetrics(MeterProvider(metric_readers=[InMemoryMetricReader()]))
        measures["otel observe"] = (lambda: otel.observe_step(ROW), n)
    best = dict.fromkeys(measures, float("inf"))
    for _ in range(args.repeat):
        for name, (call, number) in measures.items():
            best[name] = min(best[name], timeit.timeit(call, number=number) / number)
    if args.json:
        figures = {
            "series": series, "series_per_engine": worst_engine(), "render_ms": best["render"] * 1e3,
            "plain_ms": best["plain"] * 1e3, "observe_step_us": best["observe"] * 1e6,
            "by_hand_us": best["by hand"] * 1e6, "otel_observe_step_us": best.get("otel observe", math.nan) * 1e6,
        }  # fmt: skip
        print(json.dumps(figures))
        return
    ms, us = (lambda s: f"{s * 1e3:.2f} ms"), (lambda s: f"{s * 1e6:.1f} µs")
    lines = [
        f"## {dt.date.today().isoformat()} — exporter cost",
        "",
        f"Command: `python benchmarks/bench_exporters.py --repeat {args.repeat}` "
        f"(best of {args.repeat} interleaved rounds).",
        machine(),
        "",
        "| measure | value |",
        "|---|---:|",
        f"| series in the scrape (8 engines × 3 methods × 16 positions, 4 batch buckets) | {series:,} |",
        f"| scrape render (`generate_latest`) | {ms(best['render'])} (target ≤ 5 ms) |",
        f"| … of which building the families (`registry.collect`) | {ms(best['collect'])} |",
        f"| `generate_latest` of {series:,} plain four-label samples (the exposition's floor) | {ms(best['plain'])} "
        f"(render = {best['render'] / best['plain']:.2f}×) |",
        f"| `observe_step`, one step with 16 positions | {us(best['observe'])} (target ≤ 15 µs) |",
        f"| the same numbers exported by hand (3 observe + 21 inc) | {us(best['by hand'])} "
        f"(`observe_step` = {best['observe'] / best['by hand']:.2f}×) |",
        f"| one `Summary.observe` | {best['one observe'] * 1e6:.2f} µs |",
        *(
            [f"| `OtelMetrics.observe_step`, the same step (in-memory reader) | {us(best['otel observe'])} |"]
            if "otel observe" in best
            else []
        ),
        f"| series of one engine at most (3 methods, k = 16, every batch bucket) | {worst_engine()} "
        f"(budget {SERIES_PER_ENGINE}) |",
        "",
    ]
    publish(lines, write=not args.no_write)


if __name__ == "__main__":
    main()
