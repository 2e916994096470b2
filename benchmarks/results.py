"""What every benchmark shares: the machine line, and printing and appending to RESULTS.md."""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
HEADER = "# Benchmark results\n\nThe current figures first (kept by hand), then every run, newest last.\n\n## History\n"


def machine(extra: str = "") -> str:
    """``Machine: x86_64, 2 cores, Python 3.11.7`` plus ``extra`` (e.g. ``, vLLM 0.32.0``)."""
    return f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}{extra}."


def publish(lines: Sequence[str], write: bool) -> None:
    """Print a result section; with ``write``, append it to RESULTS.md (created when missing)."""
    text = "\n".join(lines).rstrip("\n") + "\n"
    print(text, flush=True)
    if write:
        existing = RESULTS.read_text() if RESULTS.exists() else HEADER
        RESULTS.write_text(existing.rstrip("\n") + "\n\n" + text)
