"""specobs: make speculative decoding in LLM serving measurable and tunable.

The public API (docs/api.md)::

    import specobs

    data = specobs.load("examples/data/vllm-cpu-sweep")    # logs, scrapes, event files, folders
    report = specobs.analyze(data, by="method,k")           # acceptance, timing, findings
    rec = specobs.recommend(data)                           # method and k per batch size
    cmp = specobs.compare("before/", "after/")              # did B get slower than A, and why?
    steps = specobs.simulate("ngram", ks=[0, 4])            # what-if steps from the model

Every verb takes what ``load`` returns, paths or a polars frame (:mod:`specobs.api`). Every
result is a frozen dataclass from :mod:`specobs.records` whose ``to_dict()`` holds its numbers;
:func:`specobs.render.document` adds the sentences and is the JSON the CLI prints. Names are
imported on first use, so ``import specobs`` stays cheap inside a vLLM process (the plugin
imports this package).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Public name → the module that defines it.
_EXPORTS = {
    "load": "specobs.ingest",
    "Ingested": "specobs.ingest",
    "SourceReport": "specobs.records",
    "analyze": "specobs.api",
    "summarize": "specobs.api",
    "recommend": "specobs.api",
    "compare": "specobs.api",
    "document": "specobs.render",
    "simulate": "specobs.testing.simulate",
    "run_tune": "specobs.loops.vllm_bench",
    "Report": "specobs.records",
    "Summary": "specobs.records",
    "GroupSummary": "specobs.records",
    "PositionRate": "specobs.records",
    "Finding": "specobs.records",
    "BatchTiming": "specobs.records",
    "Recommendation": "specobs.records",
    "Recommended": "specobs.records",
    "BucketChoice": "specobs.records",
    "Prediction": "specobs.records",
    "SpeedupBand": "specobs.records",
    "KBand": "specobs.records",
    "ServedSpeedup": "specobs.records",
    "MethodWin": "specobs.records",
    "Comparison": "specobs.records",
    "Throughput": "specobs.records",
    "TuneResult": "specobs.records",
    "TunerDecision": "specobs.records",
    "SpecobsError": "specobs.errors",
    "InputError": "specobs.errors",
    "Skipped": "specobs.errors",
}

__all__ = [
    "BatchTiming",
    "BucketChoice",
    "Comparison",
    "Finding",
    "GroupSummary",
    "Ingested",
    "InputError",
    "KBand",
    "MethodWin",
    "PositionRate",
    "Prediction",
    "Recommendation",
    "Recommended",
    "Report",
    "ServedSpeedup",
    "Skipped",
    "SourceReport",
    "SpecobsError",
    "SpeedupBand",
    "Summary",
    "Throughput",
    "TuneResult",
    "TunerDecision",
    "__version__",
    "analyze",
    "compare",
    "document",
    "load",
    "recommend",
    "run_tune",
    "simulate",
    "summarize",
]

if TYPE_CHECKING:
    from specobs.api import analyze, compare, recommend, summarize
    from specobs.errors import InputError, Skipped, SpecobsError
    from specobs.ingest import Ingested, load
    from specobs.loops.vllm_bench import run_tune
    from specobs.records import (
        BatchTiming,
        BucketChoice,
        Comparison,
        Finding,
        GroupSummary,
        MethodWin,
        PositionRate,
        Prediction,
        Recommendation,
        Recommended,
        Report,
        SourceReport,
        Summary,
        Throughput,
        TunerDecision,
        TuneResult,
    )
    from specobs.render import document
    from specobs.testing.simulate import simulate


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'specobs' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
