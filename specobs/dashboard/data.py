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

#: The bundled real recording the app opens on when given nothing (present in a checkout).
BUNDLED_SWEEP = Path(__file__).resolve().parents[2] / "examples" / "data" / "vllm-cpu-sweep"
#: How ``specobs dashboard`` hands its arguments to the Streamlit script (JSON).
ARGS_ENV = "SPECOBS_DASHBOARD_ARGS"


def default_inputs() -> Inputs:
    """The inputs ``specobs dashboard`` was started with, else the bundled sweep."""
    raw = os.environ.get(ARGS_ENV)
    if raw:
        args = json.loads(raw)
        return Inputs(
            tuple(args.get("paths") or ()),
            args.get("prometheus") or None,
            args.get("since", "6h"),
            args.get("match", ""),
        )
    return Inputs(paths=(str(BUNDLED_SWEEP),) if BUNDLED_SWEEP.is_dir() else ())


__all__ = [
    "ARGS_ENV",
    "BUNDLED_SWEEP",
    "FILTER_COLUMNS",
    "Filters",
    "Inputs",
    "LabelValue",
    "default_inputs",
    "signature",
]
