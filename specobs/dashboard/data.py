"""What the app reads: the inputs it was started with, as a :class:`specobs.api.Inputs`.

Reading, summing and every answer asked of the inputs live in :class:`specobs.api.Session`
(``Session.summed``: sums per time bucket and label set, never rows), the same session and
verbs the command line uses; filters (:class:`specobs.api.Filters`) are plain values, so that
answers can be cached by them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from specobs.api import FILTER_COLUMNS, Filters, Inputs, LabelValue, signature

#: The bundled real recordings the app opens on when given nothing (present in a checkout): the
#: sweep's engine steps (every acceptance, cost, tuning and compare page), and real ``vllm bench
#: serve`` results of a plain and an ngram server (the Serving under load page; their servers'
#: capture is left out, so the other pages are the sweep's alone).
BUNDLED_SWEEP = Path(__file__).resolve().parents[2] / "examples" / "data" / "vllm-cpu-sweep"
BUNDLED_SERVING = Path(__file__).resolve().parents[2] / "examples" / "data" / "vllm-cpu-bench" / "results"
#: How ``specobs dashboard`` hands its arguments to the Streamlit script (JSON).
ARGS_ENV = "SPECOBS_DASHBOARD_ARGS"


def default_inputs() -> Inputs:
    """The inputs ``specobs dashboard`` was started with, else the bundled recordings."""
    raw = os.environ.get(ARGS_ENV)
    if raw:
        args = json.loads(raw)
        return Inputs(
            tuple(args.get("paths") or ()),
            args.get("prometheus") or None,
            args.get("since", "6h"),
            args.get("match", ""),
        )
    return Inputs(paths=tuple(str(path) for path in (BUNDLED_SWEEP, BUNDLED_SERVING) if path.is_dir()))


__all__ = [
    "ARGS_ENV",
    "BUNDLED_SERVING",
    "BUNDLED_SWEEP",
    "FILTER_COLUMNS",
    "Filters",
    "Inputs",
    "LabelValue",
    "default_inputs",
    "signature",
]
