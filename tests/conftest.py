"""Shared helpers: write inputs to temporary files and run the real ``specobs`` CLI on them."""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from specobs.ingest import load


@pytest.fixture
def write(tmp_path: Path):
    """Write text (or bytes) to a file under tmp_path; ``gz=True`` compresses it."""

    def _write(name: str, content: str | bytes, *, gz: bool = False) -> Path:
        data = content.encode() if isinstance(content, str) else content
        path = tmp_path / name
        path.write_bytes(gzip.compress(data) if gz else data)
        return path

    return _write


#: The real servers every serve test reads (tests/test_vllm_serve.py, tests/test_vllm_served.py):
#: recorded once per session, one server at a time, at these closed-loop concurrencies.
SERVE_METHODS = ("plain", "ngram", "draft", "plain2")
SERVE_LEVELS = (1, 4, 8)
SERVE_SECONDS = 20.0


@pytest.fixture(scope="session")
def serve_recording(tmp_path_factory):
    """(the tiny models' folder, the recordings' folder, name → ClientRecord): a plain, an ngram
    (k=3, lookup 2–3), a draft-model (k=3) and a second plain vLLM server, in that order, under
    greedy closed-loop clients. Two plain processes, first and last: separate processes of one
    configuration differ by 20–40% on these machines, and the faster is the less disturbed."""
    from specobs.testing.serve import record_server, speculative_config
    from specobs.testing.tiny_llama import build

    models = tmp_path_factory.mktemp("models")
    build(models)
    out = tmp_path_factory.mktemp("serve")
    records = {
        name: record_server(
            models,
            out,
            name,
            speculative_config(name.rstrip("2")),
            levels=SERVE_LEVELS,
            seconds_per_level=SERVE_SECONDS,
        )
        for name in SERVE_METHODS
    }
    return models, out, records


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


#: Test tiers (docs/testing.md): heavy or tool-bound tests that a ``-m`` selection must name.
TIERS = ("vllm", "browser", "prometheus", "slow")


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


def pytest_collection_modifyitems(config, items):
    """Tiers are opt-in under ``-m``: with no ``-m`` every test runs (the README's command); with
    one, a tiered test runs only if the expression names its tier. So the fast tier,
    ``-m "not vllm and not browser"``, is the untiered tests, and ``-m "prometheus"`` or
    ``-m "slow or prometheus"`` picks tiers by name."""
    expression = config.getoption("markexpr") or ""
    if not expression.strip():
        return
    named = set(re.findall(r"\w+", expression))
    keep, dropped = [], []
    for item in items:
        tiers = {m.name for m in item.iter_markers() if m.name in TIERS}
        (dropped if tiers - named else keep).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
