"""Where to draft under load, from the measured crossover of a serving benchmark.

``analysis.under_load`` finds where each speculative configuration stops paying against the plain
server (its throughput, or goodput under an SLO, crossing the plain server's). Here that level
becomes vLLM's schedule by batch size, ``num_speculative_tokens_per_batch_size``: the
configuration's k up to the batch size reached at the crossover's 95% lower bound — the highest
load at which its gain is still shown beyond noise — and k=0 above. Between that and the
crossover's upper bound the measurement cannot say which is faster; the point estimate is
reported beside it, not drafted to (at 10% noise per run it lands past the true crossover by
more than a level about one time in ten: benchmarks/bench_serving.py). A concurrency is a
bound on the batch, not the batch: where the in-engine capture recorded the servers, the mean
batch size per level is interpolated (on logs) at the crossover and at its 95% bounds; without
it the concurrency is taken as the batch, which drafts up to a larger batch than the engine
reached. A request rate has no batch size without the capture.

The schedule is advice from a measurement of the static configuration, not a measurement of the
schedule: its k=0 steps still run the drafter (the K=0 tax). Where a server of the sweep did not
draft at some level (a schedule's k=0 tier), that level's ratios are that tax, measured, and are
carried along.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import polars as pl

from specobs.advice import config_line as speculative
from specobs.advice.report_findings import not_drafting
from specobs.records import Crossover, LoadAdvice, LoadRatio, RunMetadata, Serving, ServingLevel

#: The crossover a schedule rests on: goodput when an SLO was given and it has one, else throughput.
METRICS = ("goodput", "output_throughput")


def _interpolated(levels: Sequence[tuple[float, float]], at: float | None) -> float | None:
    """The batch size at load level ``at`` from (level, mean batch) points, on log–log between
    the two around it; None outside the levels measured."""
    if at is None:
        return None
    points = sorted((x, b) for x, b in levels if x > 0 and b > 0)
    for (x1, b1), (x2, b2) in itertools.pairwise(points):
        if x1 <= at <= x2:
            t = (math.log(at) - math.log(x1)) / (math.log(x2) - math.log(x1)) if x2 > x1 else 0.0
            return math.exp(math.log(b1) + t * (math.log(b2) - math.log(b1)))
    return None


def _batch(value: float | None) -> int | None:
    return None if value is None else max(1, math.floor(value + 1e-9))


def _pays(ratio: LoadRatio, metric: str) -> bool | None:
    """True: paid beyond noise; False: lost beyond noise; None: neither shown."""
    field = "throughput" if metric == "output_throughput" else "goodput"
    low, high = getattr(ratio, f"{field}_low"), getattr(ratio, f"{field}_high")
    if low is not None and low > 1:
        return True
    if high is not None and high < 1:
        return False
    return None


def _identity(bench: pl.DataFrame, model: str | None, config: str | None) -> tuple[str | None, int | None]:
    """The method and k the results of a configuration name (metadata or sweep parameters)."""
    rows = bench.filter(pl.col("model").eq_missing(model) & pl.col("config").eq_missing(config))
    methods = rows["method"].drop_nulls().unique().to_list()
    ks = rows["num_spec_tokens"].drop_nulls().unique().to_list()
    return (methods[0] if len(methods) == 1 else None), (ks[0] if len(ks) == 1 else None)


def _runs(levels: Sequence[ServingLevel], metadata: Sequence[RunMetadata]) -> list[RunMetadata]:
    """The run metadata of the engines captured during a configuration's results."""
    ids = {run for lv in levels for run in lv.run_ids}
    return [m for m in metadata if m.run_id in ids]


def advise(serving: Serving, bench: pl.DataFrame, metadata: Sequence[RunMetadata] = ()) -> tuple[LoadAdvice, ...]:
    """One :class:`LoadAdvice` per speculative configuration and load kind of ``serving``."""
    out = []
    keys = dict.fromkeys((c.model, c.config, c.load) for c in serving.crossovers)
    for model, config, load in keys:
        mine = [c for c in serving.crossovers if (c.model, c.config, c.load) == (model, config, load)]
        crossing = next((c for m in METRICS for c in mine if c.metric == m and c.how != "unknown"), None)
        if crossing is None:
            continue
        ratios = [r for r in serving.ratios if (r.model, r.config, r.load) == (model, config, load)]
        levels = [lv for lv in serving.levels if (lv.model, lv.config, lv.load) == (model, config, load)]
        out.append(_advice(crossing, ratios, levels, bench, metadata, serving))
    return tuple(out)


def _verdict(crossing: Crossover, ratios: Sequence[LoadRatio]) -> str:
    """A crossover with a lower bound (a gain shown below it) gives a switch-off point; a loss
    beyond noise without a gain shown anywhere, or ratios at or below parity from the lowest
    level, give the plain server (no gain was measured to keep); otherwise nothing is shown."""
    shown = [_pays(r, crossing.metric) for r in ratios]
    if crossing.how == "crossed":
        if crossing.low is not None:
            return "switch_off_above"
        return "plain" if False in shown else "not_shown"
    if crossing.how == "never":
        return "speculate" if True in shown else "not_shown"
    return "plain"


def _advice(
    crossing: Crossover,
    ratios: Sequence[LoadRatio],
    levels: Sequence[ServingLevel],
    bench: pl.DataFrame,
    metadata: Sequence[RunMetadata],
    serving: Serving,
) -> LoadAdvice:
    model, config, load = crossing.model, crossing.config, crossing.load
    method, k = _identity(bench, model, config)
    engines = _runs(levels, metadata)
    if method is None:  # results name no method: the captured engines' own
        named = {m.method for m in engines if m.method}
        method = named.pop() if len(named) == 1 else None
    verdict = _verdict(crossing, ratios)
    losses = tuple(r.level for r in ratios if _pays(r, crossing.metric) is False)
    ran_schedule = any(m.schedule for m in engines)
    captured = [(lv.level, lv.captured_batch_size) for lv in levels if lv.captured_batch_size]
    batch_from: str | None = None
    draft_up_to = at = high = None
    if verdict == "switch_off_above" and not ran_schedule:
        if captured:
            batch_from = "capture"
            draft_up_to = _batch(_interpolated(captured, crossing.low))
            at = _batch(_interpolated(captured, crossing.level))
            high = _batch(_interpolated(captured, crossing.high))
        elif load == "concurrency":
            batch_from = "concurrency"
            draft_up_to, at, high = _batch(crossing.low), _batch(crossing.level), _batch(crossing.high)
    schedule = next((m.schedule for m in engines if m.schedule), None)  # as it ran, when it ran one
    text: str | None = None
    missing: tuple[str, ...] = ()
    if method is not None and k and (verdict in ("switch_off_above", "speculate")):
        if draft_up_to is not None and schedule is None:
            # To the engine's max_num_seqs where the metadata says it (vLLM carries the last range's k
            # on to it anyway), else the highest concurrency measured.
            highest = int(crossing.highest_level) if load == "concurrency" else draft_up_to + 1
            largest = max((m.max_num_seqs for m in engines if m.max_num_seqs), default=highest)
            schedule = ((1, draft_up_to, k), (draft_up_to + 1, max(largest, draft_up_to + 1), 0))
        built = speculative.config_for(method, None, k, schedule, speculative.ran(engines, method, {}))
        text, missing = built.text, built.missing
    tax = tuple(r for r in serving.ratios if r.model == model and r.load == load and not_drafting(r))
    return LoadAdvice(
        model=model, config=config, method=method, num_speculative_tokens=k, load=load, metric=crossing.metric,
        verdict=verdict, stops_paying_at=crossing.level, stops_paying_low=crossing.low,
        stops_paying_high=crossing.high, lowest_level=crossing.lowest_level, highest_level=crossing.highest_level,
        losses=losses, draft_up_to=draft_up_to, crossover_batch=at, crossover_batch_high=high,
        batch_from=batch_from, schedule=schedule, speculative_config=text, missing=missing,
        schedule_measured=ran_schedule, k0_tax=tax,
    )  # fmt: skip


__all__ = ["METRICS", "advise"]
