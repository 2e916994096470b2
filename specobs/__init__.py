"""specobs: make speculative decoding in LLM serving measurable and tunable.

The public API (docs/api.md)::

    import specobs

    data = specobs.load(["examples/data/vllm-cpu-sweep"])  # logs, scrapes, event files, folders
    report = specobs.analyze(data, by=["method", "k"])      # acceptance, timing, findings
    rec = specobs.recommend(data.windows)                   # method and k per batch size
    cmp = specobs.compare(before.windows, after.windows)    # did B get slower than A, and why?
    steps = specobs.simulate("ngram", ks=[0, 4])            # what-if steps from the model

Every result is a frozen dataclass from :mod:`specobs.results` whose ``to_dict()`` is the JSON
the CLI prints. Names are imported on first use, so ``import specobs`` stays cheap inside a
vLLM process (the plugin imports this package).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Public name → the module that defines it.
_EXPORTS = {
    "load": "specobs.ingest",
    "Ingested": "specobs.ingest",
    "SourceReport": "specobs.ingest",
    "analyze": "specobs.reporting",
    "summarize": "specobs.analysis.acceptance",
    "recommend": "specobs.tuning.recommend",
    "compare": "specobs.tuning.compare",
    "simulate": "specobs.tuning.simulate",
    "run_tune": "specobs.tuning.engine",
    "Report": "specobs.results",
    "Summary": "specobs.results",
    "GroupSummary": "specobs.results",
    "PositionRate": "specobs.results",
    "Finding": "specobs.results",
    "BatchTiming": "specobs.results",
    "Recommendation": "specobs.results",
    "Recommended": "specobs.results",
    "BucketChoice": "specobs.results",
    "Prediction": "specobs.results",
    "SpeedupBand": "specobs.results",
    "KBand": "specobs.results",
    "ServedSpeedup": "specobs.results",
    "MethodWin": "specobs.results",
    "Comparison": "specobs.results",
    "Throughput": "specobs.results",
    "TuneResult": "specobs.results",
    "TunerDecision": "specobs.results",
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
    "load",
    "recommend",
    "run_tune",
    "simulate",
    "summarize",
]

if TYPE_CHECKING:
    from specobs.analysis.acceptance import summarize
    from specobs.errors import InputError, Skipped, SpecobsError
    from specobs.ingest import Ingested, SourceReport, load
    from specobs.reporting import analyze
    from specobs.results import (
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
        Summary,
        Throughput,
        TunerDecision,
        TuneResult,
    )
    from specobs.tuning.compare import compare
    from specobs.tuning.engine import run_tune
    from specobs.tuning.recommend import recommend
    from specobs.tuning.simulate import simulate


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'specobs' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
