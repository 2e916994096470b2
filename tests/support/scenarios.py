"""Run a real-vLLM scenario (tests/support/vllm_scenarios.py, or another script) in its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from support.paths import SUPPORT

SCENARIOS = SUPPORT / "vllm_scenarios.py"


def run_scenario(
    *args: str,
    env: dict | None = None,
    python: str | os.PathLike[str] | None = None,
    script: os.PathLike[str] = SCENARIOS,
) -> dict:
    """The scenario's JSON result (the line after ``RESULT``); ``python``: another interpreter (a
    venv of another vLLM release); ``script``: a scenario file of its own (default: vllm_scenarios.py)."""
    result = subprocess.run(
        [str(python or sys.executable), str(script), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "VLLM_LOGGING_LEVEL": "WARNING", **(env or {})},
    )
    assert result.returncode == 0 and "RESULT " in result.stdout, result.stderr[-4000:]
    return json.loads(result.stdout.split("RESULT ", 1)[1].splitlines()[0])
