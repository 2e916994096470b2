"""The by-hand reference for the bundled ``vllm bench serve`` result files (examples/data/vllm-cpu-bench).

:func:`expected_rows` reads every result JSON with plain :mod:`json` (no specobs code), one row per
file, so that a reader's tests can compare what it reads against it. The files are vLLM 0.32's own
(``vllm.benchmarks.serve``, written by examples/make_bench_recording.py); ``config``, ``k`` and
``repeat`` are the ``--metadata`` the recording passed, which the benchmark writes as top-level
*strings* (``"k": "3"``); here ``k`` and ``repeat`` are ints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: The benchmark's flat ``spec_decode_*`` keys (present only when the server had speculative counters
#: in ``/metrics``), named here without the prefix.
SPEC_DECODE_KEYS = (
    "acceptance_rate",  # percent: 100 * accepted / draft tokens
    "acceptance_length",  # 1 + accepted / drafts
    "num_drafts",
    "draft_tokens",
    "accepted_tokens",
    "per_position_acceptance_rates",  # accepted at position i / drafts
)


def spec_decode(result: dict[str, Any]) -> dict[str, Any] | None:
    """The result's ``spec_decode_*`` keys as one dict (prefix dropped), or None without them."""
    if not any(key.startswith("spec_decode_") for key in result):
        return None
    return {key: result[f"spec_decode_{key}"] for key in SPEC_DECODE_KEYS}


def expected_rows(folder: str | Path) -> list[dict[str, Any]]:
    """One dict per ``*.json`` result file under ``folder`` (its ``results`` subfolder when there is
    one), sorted by file name: ``file`` (the name), ``label``, ``config``, ``k``, ``max_concurrency``,
    ``request_rate`` (``"inf"`` as the file has it), ``output_throughput`` (tokens/s), ``mean_tpot_ms``,
    ``median_tpot_ms``, ``p99_tpot_ms``, ``mean_ttft_ms``, ``mean_itl_ms``, ``mean_e2el_ms``,
    ``completed``, ``num_prompts`` and ``spec_decode`` (:func:`spec_decode`)."""
    folder = Path(folder)
    if (folder / "results").is_dir():
        folder = folder / "results"
    rows = []
    for path in sorted(folder.glob("*.json")):
        r = json.loads(path.read_text())
        rows.append({
            "file": path.name,
            "label": r["label"],
            "config": r["config"],
            "k": int(r["k"]),
            "repeat": int(r["repeat"]),
            "max_concurrency": r["max_concurrency"],
            "request_rate": r["request_rate"],
            "output_throughput": r["output_throughput"],
            "mean_tpot_ms": r["mean_tpot_ms"],
            "median_tpot_ms": r["median_tpot_ms"],
            "p99_tpot_ms": r["p99_tpot_ms"],
            "mean_ttft_ms": r["mean_ttft_ms"],
            "mean_itl_ms": r["mean_itl_ms"],
            "mean_e2el_ms": r["mean_e2el_ms"],
            "completed": r["completed"],
            "num_prompts": r["num_prompts"],
            "spec_decode": spec_decode(r),
        })  # fmt: skip
    return rows
