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

import pytest

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


#: A ``spec_decode`` section as vLLM 0.32 writes it (flat keys; the rate in percent).
SPEC_DECODE_SECTION = {
    "spec_decode_acceptance_rate": 47.0, "spec_decode_acceptance_length": 2.41, "spec_decode_num_drafts": 300,
    "spec_decode_draft_tokens": 900, "spec_decode_accepted_tokens": 423,
    "spec_decode_per_position_acceptance_rates": [0.6, 0.47, 0.34],
}  # fmt: skip


def bench_result(config: str, concurrency: int, throughput: float, *, spec: bool, **extra: Any) -> dict[str, Any]:
    """A ``vllm bench serve`` result as vLLM 0.32 saves it, with ``--metadata config=<config>``:
    its setup keys, a run of 4 requests in 2 s, and a ``spec_decode`` section when ``spec``;
    ``extra`` adds or replaces keys."""
    out = {
        "date": "20261203-170102", "endpoint_type": "vllm", "backend": "vllm", "label": config,
        "model_id": "tiny-llama", "tokenizer_id": "tiny-llama", "num_prompts": 4, "config": config,
        "request_rate": "inf", "burstiness": 1.0, "max_concurrency": concurrency, "duration": 2.0, "completed": 4,
        "failed": 0, "request_goodput": None, "output_throughput": throughput, "mean_tpot_ms": 10.0,
    }  # fmt: skip
    return out | (SPEC_DECODE_SECTION if spec else {}) | extra


def write_json(path: Path, value: object) -> Path:
    """``value`` as JSON at ``path`` (folders made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))
    return path


def assert_ratios_are_the_rows(doc: dict[str, Any], bench: Any, spec: str = "ngram-k3", plain: str = "plain") -> None:
    """A report's serving ratios (``doc``: its JSON) are ``spec`` over ``plain`` throughput of the
    rows read (``bench``: ``schema.BENCH`` rows, one run a side) at levels 1 and 4: no interval."""
    ratios = {r["level"]: r for r in doc["serving"]["ratios"]}
    assert sorted(ratios) == [1.0, 4.0]
    for level, ratio in ratios.items():
        assert (ratio["config"], ratio["plain_config"]) == (spec, plain)
        tp = {c: bench.filter((bench["config"] == c) & (bench["max_concurrency"] == level))["output_throughput"][0]
              for c in (spec, plain)}  # fmt: skip
        assert ratio["throughput_ratio"] == pytest.approx(tp[spec] / tp[plain], rel=1e-6)
        assert ratio["throughput_low"] is None  # one run a side: no interval, and the report says so
