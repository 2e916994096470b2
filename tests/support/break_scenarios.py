"""Event files of engines whose acceptance breaks: a restart on another backend, a slow slide,
a collapse, a stale drafter after K=0, and noise alone (issue: acceptance breaks and causes).

Every step drafts ``k`` tokens for each of ``batch`` requests; a request accepts position j
with probability ``p`` given it accepted the ones before (so the acceptance length is
1 + p + p² + … + p^k), drawn with a fixed seed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from specobs.records import RunMetadata

START = 1_790_000_000.0
BASE = dict(model="m", method="eagle3", platform="rocm", device="AMD Instinct MI300X")
RUN_METADATA = dict(num_speculative_tokens=3, max_num_seqs=8, vllm_version="0.32.0", device_arch="gfx942",
                    attention_backend="ROCM_AITER_FA", graph_mode="full_and_piecewise", model_runner="v1",
                    dtype="bfloat16", kv_cache_dtype="auto", draft_model="eagle3-head")  # fmt: skip


def length(p: float, k: int = 3) -> float:
    """The acceptance length of a per-position conditional rate ``p`` at ``k``."""
    return 1 + sum(p**j for j in range(1, k + 1))


def steps(
    rng: np.random.Generator,
    run_id: str,
    start: float,
    count: int,
    rate: float | Callable[[float], float],
    *,
    k: int = 3,
    batch: int = 8,
    every: float = 2.0,
    off: Callable[[int], bool] | None = None,
    **labels: object,
) -> list[dict]:
    """``count`` step rows of one engine run from ``start``, one every ``every`` seconds;
    ``rate`` is p, or p as a function of the seconds since ``start``; ``off(i)`` True makes step
    i a K=0 step (nothing drafted)."""
    rows = []
    for i in range(count):
        ts = start + i * every
        base = {**BASE, **labels, "run_id": run_id, "engine": 0, "ts": ts, "batch_size": batch,
                "step_seconds": 0.02, "verify_seconds": 0.015, "draft_seconds": 0.003}  # fmt: skip
        if off is not None and off(i):
            rows.append({**base, "num_spec_tokens": 0, "num_drafts": 0, "num_draft_tokens": 0,
                         "num_accepted_tokens": 0, "num_generated_tokens": batch, "draft_seconds": 0.001})  # fmt: skip
            continue
        p = rate(ts - start) if callable(rate) else rate
        passed = rng.random((batch, k)) < p
        accepted = np.where(passed.all(axis=1), k, np.argmin(passed, axis=1))
        rows.append({
            **base, "num_spec_tokens": k, "num_drafts": batch, "num_draft_tokens": batch * k,
            "num_accepted_tokens": int(accepted.sum()),
            "num_accepted_tokens_per_pos": [int((accepted > j).sum()) for j in range(k)],
            "num_drafts_per_pos": [batch] * k,
            "num_drafts_accepted_before_pos": [int((accepted >= j).sum()) for j in range(k)],
            "num_generated_tokens": int(accepted.sum()) + batch,
        })  # fmt: skip
    return rows


def metadata(run_id: str, ts: float, **fields: object) -> dict:
    return RunMetadata(**{**BASE, **RUN_METADATA, "run_id": run_id, "engine": 0, "ts": ts, **fields}).to_row()  # type: ignore[arg-type]


def write_run(folder: Path, run_id: str, rows: list[dict], meta: dict | None) -> None:
    """One engine run's files, named as the capture names them."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"specobs-{run_id}-p1-0001.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if meta is not None:
        (folder / f"specobs-{run_id}-meta-p1-0001.jsonl").write_text(json.dumps(meta) + "\n")


def restart(
    folder: Path,
    before: dict,
    after: dict,
    *,
    rate_before: float,
    rate_after: float,
    hours: float = 1.0,
    seed: int = 0,
    every: float = 2.0,
) -> Path:
    """One engine for ``hours``, restarted a minute later: run metadata ``before`` then ``after``."""
    rng = np.random.default_rng(seed)
    count = int(hours * 3600 / every)
    second = START + count * every + 60
    write_run(
        folder, "r1", steps(rng, "r1", START, count, rate_before, every=every), metadata("r1", START - 5, **before)
    )
    write_run(
        folder, "r2", steps(rng, "r2", second, count, rate_after, every=every), metadata("r2", second - 5, **after)
    )
    return folder


def backend_change(folder: Path, seed: int = 0) -> Path:
    """ROCM_AITER_FA for an hour (length 2.95), restarted on ROCM_ATTN (2.02)."""
    return restart(folder, {}, {"attention_backend": "ROCM_ATTN"}, rate_before=0.8, rate_after=0.55, seed=seed)


def version_change(folder: Path, seed: int = 1) -> Path:
    """vLLM 0.31.0 then 0.32.0, acceptance unchanged."""
    return restart(folder, {"vllm_version": "0.31.0"}, {}, rate_before=0.7, rate_after=0.7, seed=seed)


def restart_alone(folder: Path, seed: int = 2) -> Path:
    """Acceptance falls across a restart with the same configuration."""
    return restart(folder, {}, {}, rate_before=0.8, rate_after=0.7, seed=seed)


def collapse(folder: Path, seed: int = 3) -> Path:
    """A healthy engine on TRITON_ATTN, restarted on ROCM_AITER_FA, where EAGLE-3 accepts nothing."""
    return restart(folder, {"attention_backend": "TRITON_ATTN"}, {}, rate_before=0.7, rate_after=0.0, seed=seed)


def slide(folder: Path, seed: int = 4, hours: float = 6.0) -> Path:
    """One engine whose per-position rate slides from 0.80 to 0.62 over ``hours``, nothing changed."""
    rng = np.random.default_rng(seed)
    every = 2.0
    count = int(hours * 3600 / every)
    span = count * every
    rows = steps(rng, "r1", START, count, lambda s: 0.80 - 0.18 * s / span, every=every)
    write_run(folder, "r1", rows, metadata("r1", START - 5))
    return folder


def noise(folder: Path, seed: int = 5) -> Path:
    """Six hours at one rate, then a restart with nothing changed: nothing to find."""
    rng = np.random.default_rng(seed)
    count = 10_800
    second = START + count * 2.0 + 60
    write_run(folder, "r1", steps(rng, "r1", START, count, 0.75), metadata("r1", START - 5))
    write_run(folder, "r2", steps(rng, "r2", second, 1800, 0.75), metadata("r2", second - 5))
    return folder


#: Steps per cycle of the stale scenario: drafting, then K=0 (large batches), then drafting.
CYCLE, OFF_FROM, OFF_TO, STALE_STEPS = 400, 200, 260, 30


def stale_after_off(folder: Path, seed: int = 6, *, stale_rate: float = 0.4) -> Path:
    """One engine with a batch-size schedule that switches drafting off (k=0) for 60 steps every
    400; for 30 steps after each resume the drafter accepts at ``stale_rate`` instead of 0.75."""
    rng = np.random.default_rng(seed)

    def off(i: int) -> bool:
        return OFF_FROM <= i % CYCLE < OFF_TO

    def rate(seconds: float) -> float:
        i = round(seconds / 2.0) % CYCLE
        return stale_rate if OFF_TO <= i < OFF_TO + STALE_STEPS else 0.75

    rows = steps(rng, "r1", START, 20 * CYCLE, rate, off=off)
    write_run(folder, "r1", rows, metadata("r1", START - 5, schedule=((1, 4, 3), (5, 8, 0))))
    return folder


#: Each takes the folder to write and a seed (the tests use the defaults).
SCENARIOS: dict[str, Callable[..., Path]] = {
    "backend_change": backend_change,
    "version_change": version_change,
    "restart_alone": restart_alone,
    "collapse": collapse,
    "slide": slide,
    "noise": noise,
    "stale_after_off": stale_after_off,
}


def scaled_log(text: str, factor: float) -> str:
    """A vLLM V1 log with every SpecDecoding line's accepted tokens (and the rates and mean
    length printed from them) scaled by ``factor``, drafts unchanged."""

    def line(match: re.Match[str]) -> str:
        text = match.group(0)
        accepted = int(re.search(r"Accepted: (\d+) tokens", text).group(1))  # type: ignore[union-attr]
        text = re.sub(r"Accepted: \d+ tokens", f"Accepted: {round(accepted * factor)} tokens", text)
        text = re.sub(r"Mean acceptance length: ([\d.]+)",
                      lambda m: f"Mean acceptance length: {1 + (float(m.group(1)) - 1) * factor:.2f}", text)  # fmt: skip
        text = re.sub(r"Per-position acceptance rate: ([\d., ]+?), Avg",
                      lambda m: "Per-position acceptance rate: "
                      + ", ".join(f"{float(x) * factor:.3f}" for x in m.group(1).split(", ")) + ", Avg", text)  # fmt: skip
        return re.sub(r"Avg Draft acceptance rate: ([\d.]+)%",
                      lambda m: f"Avg Draft acceptance rate: {float(m.group(1)) * factor:.1f}%", text)  # fmt: skip

    return re.sub(r".*SpecDecoding metrics:.*", line, text)


def log_restart(folder: Path, log: Path, *, factor: float = 0.6) -> Path:
    """One server log appended across a restart: the bundled log, then the same server an hour
    later in new processes with an fp8 KV cache, accepting ``factor`` of the tokens."""
    text = log.read_text()
    pids = sorted(set(re.findall(r"pid=(\d+)", text)))
    later = scaled_log(text, factor).replace("kv_cache_dtype=auto", "kv_cache_dtype=fp8")
    for pid in pids:
        later = later.replace(f"pid={pid}", f"pid={int(pid) + 10_000}")
    later = re.sub(r"(\d\d-\d\d) (\d\d):", lambda m: f"{m.group(1)} {int(m.group(2)) + 1:02d}:", later)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "server.log").write_text(text + later)
    return folder / "server.log"
