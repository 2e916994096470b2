"""Event files with run metadata, written for tests."""

from __future__ import annotations

import json
from pathlib import Path

from specobs.records import RunMetadata

BASE = dict(run_id="r", engine=0, model="m", method="eagle3", platform="rocm", device="AMD Instinct MI300X")


def step(i: int, batch: int, k: int, drafted: int, accepted: int, **extra) -> dict:
    """One captured step row: ``batch`` requests each drafting ``drafted`` and accepting ``accepted``."""
    n = [batch if j < drafted else 0 for j in range(max(k, drafted))]
    a = [batch if j < accepted else 0 for j in range(max(k, drafted))]
    m = [batch if j <= accepted and j < drafted else 0 for j in range(max(k, drafted))]
    return {
        **BASE, "ts": 1764472000.0 + i, "batch_size": batch, "num_spec_tokens": k, "num_drafts": batch,
        "num_draft_tokens": batch * drafted, "num_accepted_tokens": batch * accepted,
        "num_accepted_tokens_per_pos": a, "num_drafts_per_pos": n, "num_drafts_accepted_before_pos": m,
        "num_generated_tokens": batch * (accepted + 1), "step_seconds": 0.01, "verify_seconds": 0.008,
        "draft_seconds": 0.001, **extra,
    }  # fmt: skip


def metadata(**fields) -> dict:
    return RunMetadata(**{**BASE, "ts": 1764471999.0, "num_speculative_tokens": 3, "max_num_seqs": 8,
                          "vllm_version": "0.32.0", "attention_backend": "ROCM_ATTN", "graph_mode": "piecewise",
                          "device_arch": "gfx942", **fields}).to_row()  # fmt: skip


def write(folder: Path, rows: list[dict], meta: list[dict] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "specobs-r-p1-0001.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if meta is not None:
        (folder / "specobs-r-meta-p1-0001.jsonl").write_text("".join(json.dumps(m) + "\n" for m in meta))
    return folder
