"""Where the tests find the checkout's files."""

from __future__ import annotations

from pathlib import Path

#: The repository root.
ROOT = Path(__file__).resolve().parents[2]
#: Bundled real data (examples/data).
DATA = ROOT / "examples" / "data"
#: This folder: helpers and the scenario scripts the real-vLLM tests run in their own processes.
SUPPORT = Path(__file__).resolve().parent
