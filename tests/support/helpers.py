"""Helpers the tests share: read inputs, run the real ``specobs`` CLI, compare JSON."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from typing import Any

import polars as pl
import pytest

from specobs.ingest import load

#: The real servers every serve test reads (tests/test_vllm_serve.py, tests/test_vllm_served.py):
#: recorded once per session, one server at a time, at these closed-loop concurrencies.
SERVE_METHODS = ("plain", "ngram", "draft", "plain2")
SERVE_LEVELS = (1, 4, 8)
SERVE_SECONDS = 20.0


def windows_of(*paths, fmt: str | None = None) -> pl.DataFrame:
    """Ingest paths and return their windows, in source-line order."""
    return load([str(p) for p in paths], fmt).windows.collect().sort("source", "source_line")


def run_cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """Run the installed CLI as a user would (a real process, real exit status)."""
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "specobs.cli", *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=120,
    )


def report_json(*args: str, stdin: bytes | None = None) -> dict:
    result = run_cli("report", *args, "--format", "json", stdin=stdin)
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout)


def assert_same_json(expected: Any, got: Any, where: str = "") -> None:
    """Equal JSON, floats to 1e-9 relative: polars sums floats on several threads, so the same
    numbers summed twice (in two processes, or in parts) may differ in the last bits."""
    if isinstance(expected, dict):
        assert isinstance(got, dict) and expected.keys() == got.keys(), where
        for key in expected:
            assert_same_json(expected[key], got[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(got, list) and len(expected) == len(got), where
        for i, (a, b) in enumerate(zip(expected, got, strict=True)):
            assert_same_json(a, b, f"{where}[{i}]")
    elif isinstance(expected, float) and not math.isnan(expected):
        assert got == pytest.approx(expected, rel=1e-9, abs=1e-300), where
    else:
        assert expected == got or (expected != expected and got != got), where
