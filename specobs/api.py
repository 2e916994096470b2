"""The verbs of the public API, one family: each takes what :func:`load` returns, a path, a list
of paths, or a polars frame of ``windows`` rows, normalised once here (:func:`ingested`).

    data = load("examples/data/vllm-cpu-sweep")
    report = analyze(data, by="method,k")
    rec = recommend(data)
    cmp = compare(load("before/"), load("after/"))   # or compare("before/", "after/")
    groups = summarize(data, by=["method"])

The CLI calls the same functions, so the API sees what the CLI sees (a comparison gets both
sides' run metadata; an input read in parts is read part by part by every verb). A bad input
or argument raises :class:`~specobs.errors.SpecobsError` (:class:`~specobs.errors.InputError`
for an input that cannot be read), never an ``AttributeError``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace

import polars as pl

from specobs.advice import recommend as recommending
from specobs.advice.compare import compare as compare_windows
from specobs.advice.load import advise
from specobs.advice.report_builder import analyze as analyze_ingested
from specobs.advice.report_builder import context_split, recommendation_input
from specobs.analysis import acceptance
from specobs.analysis.under_load import capture_sums, parse_slo, serving
from specobs.errors import SpecobsError
from specobs.ingest import Ingested, load
from specobs.records import RECOMMEND_DEFAULTS, Comparison, LoadRecommendation, Recommendation, Report, Slo

#: What every verb takes.
Data = Ingested | str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | pl.DataFrame | pl.LazyFrame


def ingested(data: Data) -> Ingested:
    """``data`` as an :class:`Ingested`: itself, the paths read, or a frame of ``windows`` rows."""
    if isinstance(data, Ingested):
        return data
    if isinstance(data, pl.DataFrame | pl.LazyFrame):
        return Ingested(windows=data.lazy())
    if isinstance(data, str | os.PathLike) or (isinstance(data, Sequence) and not isinstance(data, bytes)):
        return load(data)
    raise SpecobsError(
        f"expected what specobs.load returns, a path, a list of paths or a polars frame; got {type(data).__name__}"
    )


def windows(data: Data) -> pl.LazyFrame:
    """Every ``windows`` row of ``data``; an input read in parts is read part by part (rows are
    concatenated lazily: for large inputs prefer a verb, which reduces each part first)."""
    whole = ingested(data)
    if not whole.deferred:
        return whole.windows.lazy()
    return pl.concat([part.lazy() for part in whole.parts()], how="diagonal_relaxed")


def analyze(
    data: Data,
    by: str | Sequence[str] = acceptance.DEFAULT_BY,
    *,
    with_recommendation: bool = True,
    timing: bool = True,
    method: str | None = None,
    check_config: bool = True,
    slo: Slo | str | None = None,
) -> Report:
    """The acceptance report of ``data`` grouped by ``by`` (a list or ``"method,k"``): summary,
    groups, timing by batch size (unless ``timing`` is False), changes over time, and a
    point-estimate recommendation (unless ``with_recommendation`` is False). ``method`` names the
    method of speculative rows that carry none (a scrape of vLLM's counters); ``slo``
    (``"tpot:50ms,ttft:1s"`` or an :class:`Slo`) the objective serving results' goodput is under."""
    return analyze_ingested(
        ingested(data),
        acceptance.parse_by(by),
        with_recommendation=with_recommendation,
        timing=timing,
        method=method,
        check_config=check_config,
        slo=parse_slo(slo) if isinstance(slo, str) else slo,
    )


def recommend(
    data: Data,
    *,
    max_k: int | None = None,
    margin: float = RECOMMEND_DEFAULTS.margin,
    cost_ratio: float | None = None,
    bootstrap: int = RECOMMEND_DEFAULTS.bootstrap,
    seed: int = 0,
    method: str | None = None,
    model: str | None = None,
    check_config: bool = True,
    slo: Slo | str | None = None,
) -> Recommendation | LoadRecommendation | None:
    """The best method and k per batch-size bucket, where to switch off, with intervals from
    ``bootstrap`` resamples (None when ``data`` has nothing to recommend from). The printed
    config is what ran, from ``data``'s run metadata. With serving-benchmark results, where each
    configuration should draft under load (``under_load``; goodput under ``slo``): alone, they
    give a :class:`LoadRecommendation`."""
    whole = ingested(data)
    rec = recommending.recommend(
        recommendation_input(whole, method=method), max_k=max_k, margin=margin, cost_ratio=cost_ratio,
        bootstrap=bootstrap, seed=seed, method=method, model=model, metadata=whole.metadata,
        check_config=check_config,
    )  # fmt: skip
    objective = parse_slo(slo) if isinstance(slo, str) else slo
    under_load = serving(whole.bench, capture_sums(windows(whole), whole.bench), objective)
    advice = advise(under_load, whole.bench, whole.metadata) if under_load is not None else ()
    if rec is None:
        return LoadRecommendation(advice, objective) if advice else None
    by_context = context_split(whole, method=method, check_config=check_config)
    return replace(rec, under_load=advice, by_context=by_context)


def compare(a: Data, b: Data, *, slo: Slo | str | None = None) -> Comparison:
    """Run A (before) against run B (after), each with its run metadata; serving results' goodput
    under ``slo``."""
    side_a, side_b = ingested(a), ingested(b)
    return compare_windows(
        windows(side_a), windows(side_b), side_a.metadata, side_b.metadata, side_a.bench, side_b.bench,
        parse_slo(slo) if isinstance(slo, str) else slo,
    )  # fmt: skip


def summarize(data: Data, by: str | Sequence[str] = acceptance.DEFAULT_BY) -> pl.DataFrame:
    """One row per group: the acceptance summary with intervals (``analysis.acceptance.summarize``)."""
    return acceptance.summarize(windows(data), acceptance.parse_by(by))


__all__ = ["Data", "analyze", "compare", "ingested", "load", "recommend", "summarize", "windows"]
