"""Checks of a restart recording (examples/make_restart_recording.py): one ``draft_model`` engine
run with drafter ``draft-v1``, then restarted in a new process with ``draft-v2``.

Everything here is computed by hand from the event files (plain ``json``/``gzip``, no specobs
reader), so that ``specobs report``'s ``breaks`` can be checked against it. Shared by
tests/vllm/test_vllm_restart.py (a fresh recording) and tests/analysis/test_bundled_restart.py
(examples/data/vllm-cpu-restart).
"""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from specobs.analysis.cost import WARMUP_STEPS

MODEL = "tiny-llama"
METHOD = "draft_model"
WORKLOAD = "repetitive-text"
DRAFTERS = ("draft-v1", "draft-v2")
#: How close the report's per-run acceptance lengths must be to the hand computation.
TOLERANCE = 0.02
BREAK_KINDS = {"fall", "rise", "collapse", "stale_after_off"}
#: Normal quantile for "more than its sampling noise": well past a 95% interval.
Z = 3.0


@dataclass
class Run:
    """One engine process of the recording: its run metadata record and its step rows by time."""

    run_id: str
    engine: int
    metadata: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)

    @property
    def drafts(self) -> int:
        return sum(r["num_drafts"] for r in self.steps)

    @property
    def accepted(self) -> int:
        return sum(r["num_accepted_tokens"] for r in self.steps)


def records(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_runs(folder: Path) -> list[Run]:
    """The runs of ``folder``'s event files, ordered by their first step."""
    runs: dict[tuple[str, int], Run] = {}
    for path in sorted(folder.glob("specobs-*.jsonl*")):
        for row in records(path):
            run = runs.setdefault((row["run_id"], row["engine"]), Run(row["run_id"], row["engine"]))
            if "specobs_metadata" in row:
                run.metadata.append(row)
            elif "num_drafts" in row and row.get("request_id") is None:
                run.steps.append(row)
    for run in runs.values():
        run.steps.sort(key=lambda r: r["ts"])
    return sorted(runs.values(), key=lambda r: r.steps[0]["ts"] if r.steps else math.inf)


def acceptance(steps: list[dict[str, Any]]) -> tuple[float, float]:
    """Acceptance length 1 + Σ accepted / Σ drafts over step rows, and its standard error with the
    steps as independent units (delta method for a ratio: drafts of one step share a batch)."""
    drafts = sum(r["num_drafts"] for r in steps)
    accepted = sum(r["num_accepted_tokens"] for r in steps)
    ratio = accepted / drafts
    n = len(steps)
    residual = sum((r["num_accepted_tokens"] - ratio * r["num_drafts"]) ** 2 for r in steps)
    se = math.sqrt(residual * n / (n - 1)) / drafts
    return 1 + ratio, se


def references(run: Run) -> list[float]:
    """The run's acceptance length over all its steps, and without its first WARMUP_STEPS steps
    (the report may leave warm-up out; acceptance counts are the same either way here)."""
    return [acceptance(run.steps)[0], acceptance(run.steps[WARMUP_STEPS:])[0]]


def check_recording(runs: list[Run], *, min_steps: int) -> None:
    """The restart story, by hand: two runs, one metadata record each, differing in
    ``draft_model`` (same model, method and k), the second run's steps after the first's, and
    acceptance lower in the second by more than its sampling noise."""
    assert len(runs) == 2, [(r.run_id, r.engine) for r in runs]
    first, second = runs
    assert all(len(r.metadata) == 1 and len(r.steps) >= min_steps for r in runs)
    meta = [r.metadata[0] for r in runs]
    assert [m["draft_model"] for m in meta] == list(DRAFTERS)
    for key in ("model", "method", "num_speculative_tokens", "vllm_version", "dtype"):
        assert meta[0][key] == meta[1][key], key
    assert meta[0]["method"] == METHOD and meta[0]["num_speculative_tokens"] == 3
    assert (first.run_id, first.engine) != (second.run_id, second.engine)
    assert first.run_id != second.run_id and meta[0]["pid"] != meta[1]["pid"]
    assert first.steps[-1]["ts"] < second.steps[0]["ts"]  # a restart: the later run starts after the earlier ends
    for run, drafter in zip(runs, DRAFTERS, strict=True):
        assert {(r["model"], r["method"], r["draft_model"], r["workload"]) for r in run.steps} == {
            (MODEL, METHOD, drafter, WORKLOAD)
        }
    (high, se_high), (low, se_low) = (acceptance(r.steps) for r in runs)
    assert 2.0 < high < 4.0  # high but partial acceptance (k = 3: at most 4)
    assert high - low > Z * math.hypot(se_high, se_low), (high, se_high, low, se_low)


def check_breaks(report: dict[str, Any], runs: list[Run]) -> None:
    """The ``breaks`` contract of ``specobs report -f json`` on a restart recording.

    Each break: ``kind`` (fall, rise, collapse, stale_after_off); ``before``/``after`` (acceptance
    length in the steady state of the earlier and the later run); ``difference`` and its 95%
    ``interval`` [low, high]; ``causes``, ranked, each ``{field, before, after, pitfall}``;
    ``coincident_change`` (bool); the lineage labels ``model``, ``method``, ``workload``.
    Here: exactly one fall, caused first by ``draft_model`` (before/after as the run metadata
    records them), its levels within TOLERANCE of the hand computation, its interval below 0.
    """
    assert "breaks" in report, sorted(report)
    breaks = report["breaks"]
    assert isinstance(breaks, list)
    for b in breaks:
        assert b["kind"] in BREAK_KINDS, b
    falls = [b for b in breaks if b["kind"] == "fall"]
    assert len(falls) == 1, breaks
    fall = falls[0]
    for key in ("before", "after", "difference", "interval", "causes", "coincident_change", "model", "method",
                "workload"):  # fmt: skip
        assert key in fall, key
    assert (fall["model"], fall["method"], fall["workload"]) == (MODEL, METHOD, WORKLOAD)
    assert isinstance(fall["coincident_change"], bool)

    causes = fall["causes"]
    assert isinstance(causes, list) and causes
    for cause in causes:
        assert {"field", "before", "after", "pitfall"} <= set(cause), cause
    meta = [r.metadata[0] for r in runs]
    assert causes[0]["field"] == "draft_model"
    assert (causes[0]["before"], causes[0]["after"]) == (meta[0]["draft_model"], meta[1]["draft_model"])

    before, after = (references(r) for r in runs)
    assert min(abs(fall["before"] - x) for x in before) <= TOLERANCE, (fall["before"], before)
    assert min(abs(fall["after"] - x) for x in after) <= TOLERANCE, (fall["after"], after)
    assert fall["difference"] == pytest.approx(fall["after"] - fall["before"], abs=TOLERANCE)
    low, high = fall["interval"]
    assert low <= fall["difference"] <= high
    assert high < 0
