"""Run a real-vLLM scenario (tests/support/vllm_scenarios.py) in its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from support.paths import SUPPORT

SCENARIOS = SUPPORT / "vllm_scenarios.py"


def run_scenario(*args: str, env: dict | None = None, python: str | os.PathLike[str] | None = None) -> dict:
    """The scenario's JSON result; ``python``: another interpreter (a venv of another vLLM release)."""
    result = subprocess.run(
        [str(python or sys.executable), str(SCENARIOS), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "VLLM_LOGGING_LEVEL": "WARNING", **(env or {})},
    )
    assert result.returncode == 0 and "RESULT " in result.stdout, result.stderr[-4000:]
    return json.loads(result.stdout.split("RESULT ", 1)[1].splitlines()[0])
