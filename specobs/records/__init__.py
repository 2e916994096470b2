"""The typed results every surface presents: frozen dataclasses whose ``to_dict()`` is the JSON contract.

One public import (``from specobs.records import Report``) over modules split by subject:
``result`` (the base, JSON helpers, vocabularies), ``summary`` (acceptance), ``findings``,
``per_request``, ``load`` (serving under load), ``context_split``, ``report_result``,
``history`` (changes and breaks), ``recommendation``, ``comparison``, ``closed_loop``
(``specobs tune``), ``tuner`` (the online tuner's log), ``checks`` (integrity, pitfalls) and
``run_metadata``. Analysis and tuning build these; surfaces read their attributes and compute
nothing of their own. Fields marked ``internal`` are left out of ``to_dict()``.
"""

from __future__ import annotations

from specobs.records.checks import IntegrityIssue, Pitfall
from specobs.records.closed_loop import TuneBucket, TuneMeasurement, TuneNoise, TuneResult, TuneVerification
from specobs.records.comparison import (
    AcceptanceTest,
    BucketThroughput,
    Comparison,
    Configuration,
    ConfigurationComparison,
    Difference,
    PositionChange,
    SideTiming,
    Throughput,
)
from specobs.records.context_split import ContextTrend, Split, SplitBest, SplitRow
from specobs.records.findings import Finding
from specobs.records.history import Break, BreakKind, Cause, Change, ChangePoint, RunRef, SourceReport
from specobs.records.load import (
    Crossover,
    LoadAdvice,
    LoadRatio,
    LoadRecommendation,
    MeasureRatio,
    Serving,
    ServingLevel,
    Slo,
)
from specobs.records.per_request import FlaggedRequest, LengthBin, RequestAcceptance, RequestGroup
from specobs.records.recommendation import (
    RECOMMEND_DEFAULTS,
    BucketChoice,
    ConfigCheck,
    KBand,
    MethodFacts,
    MethodWin,
    ModelNote,
    Prediction,
    Recommendation,
    Recommended,
    RecommendOptions,
    ServedSpeedup,
    SpeedupBand,
    Target,
)
from specobs.records.report_result import Report
from specobs.records.result import (
    DETAIL_KEYS,
    MAX_SKIPPED_EXAMPLES,
    MEASURED_BASES,
    SIDE_KEYS,
    SUMMARY_KEYS,
    Baseline,
    Basis,
    BucketBasis,
    NoteKind,
    Result,
    internal,
    jsonable,
    rounded,
)
from specobs.records.run_metadata import ENVIRONMENT_FIELDS, RunMetadata
from specobs.records.summary import (
    BatchTiming,
    GroupSummary,
    PositionBound,
    PositionRate,
    ScheduleTax,
    Summary,
    Truncation,
)
from specobs.records.tuner import TUNER_ACTIONS, TunerDecision

__all__ = [
    "DETAIL_KEYS",
    "ENVIRONMENT_FIELDS",
    "MAX_SKIPPED_EXAMPLES",
    "MEASURED_BASES",
    "RECOMMEND_DEFAULTS",
    "SIDE_KEYS",
    "SUMMARY_KEYS",
    "TUNER_ACTIONS",
    "AcceptanceTest",
    "Baseline",
    "Basis",
    "BatchTiming",
    "Break",
    "BreakKind",
    "BucketBasis",
    "BucketChoice",
    "BucketThroughput",
    "Cause",
    "Change",
    "ChangePoint",
    "Comparison",
    "ConfigCheck",
    "Configuration",
    "ConfigurationComparison",
    "ContextTrend",
    "Crossover",
    "Difference",
    "Finding",
    "FlaggedRequest",
    "GroupSummary",
    "IntegrityIssue",
    "KBand",
    "LengthBin",
    "LoadAdvice",
    "LoadRatio",
    "LoadRecommendation",
    "MeasureRatio",
    "MethodFacts",
    "MethodWin",
    "ModelNote",
    "NoteKind",
    "Pitfall",
    "PositionBound",
    "PositionChange",
    "PositionRate",
    "Prediction",
    "RecommendOptions",
    "Recommendation",
    "Recommended",
    "Report",
    "RequestAcceptance",
    "RequestGroup",
    "Result",
    "RunMetadata",
    "RunRef",
    "ScheduleTax",
    "ServedSpeedup",
    "Serving",
    "ServingLevel",
    "SideTiming",
    "Slo",
    "SourceReport",
    "SpeedupBand",
    "Split",
    "SplitBest",
    "SplitRow",
    "Summary",
    "Target",
    "Throughput",
    "Truncation",
    "TuneBucket",
    "TuneMeasurement",
    "TuneNoise",
    "TuneResult",
    "TuneVerification",
    "TunerDecision",
    "internal",
    "jsonable",
    "rounded",
]
