"""The online tuner in a real vLLM engine (one engine, this process). Run by
tests/test_vllm_online_tuner.py; prints one JSON object after ``RESULT``.

    python tests/vllm_online_tuner.py MODELS_DIR
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_scenarios import ENGINE_ARGS, PROMPTS

MAX_K = 3


def main(models: Path) -> dict:
    import vllm

    from specobs.capture import MemorySink
    from specobs.capture.config import CaptureConfig
    from specobs.vllm import hooks, instrument

    spec = {"method": "ngram", "num_speculative_tokens": MAX_K, "prompt_lookup_min": 2, "prompt_lookup_max": 3,
            "num_speculative_tokens_per_batch_size": [[1, ENGINE_ARGS["max_num_seqs"], MAX_K]]}  # fmt: skip
    llm = vllm.LLM(model=str(models / "target"), speculative_config=spec, **ENGINE_ARGS)
    scheduler = llm.llm_engine.engine_core.engine_core.scheduler
    params = vllm.SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)

    def outputs(prompts: list[str]) -> list[list[int]]:
        return [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params, use_tqdm=False)]

    singles = [[p] for p in PROMPTS]
    baseline = [outputs(p) for p in singles] + [outputs(PROMPTS)]  # no tuner: k = 3 throughout
    sink = MemorySink()
    config = CaptureConfig(run_id="online", online_tuner="apply", online_tuner_share=0.2, online_tuner_chunk_steps=4)
    state = instrument(llm, sink=sink, config=config)
    tuned, ks_seen = [], set()
    for _ in range(6):  # batch-1 traffic, then a batch of 4, while the tuner explores and may switch
        tuned.append([outputs(p) for p in singles] + [outputs(PROMPTS)])
    tuner = state.tuner
    explored_share = tuner.exploration_share()
    # A forced bad choice at batch 1 (drafting off, where ngram pays here): measured worse, rolled back.
    before = tuner.buckets[0].k
    tuner.switch(1, 0, "forced")
    forced = [outputs(p) for p in singles * 3]
    after = tuner.buckets[0].k
    state.recorder.flush(final=True)
    ks_seen = sorted({r["num_spec_tokens"] for r in sink.rows if r["batch_size"] == 1})
    result = {
        "identical": all(t == baseline for t in tuned) and forced == [b for b in baseline[:4]] * 3,
        "decisions": sink.decisions,
        "explored_share": explored_share,
        "k_before_forced": before,
        "k_after_forced": after,
        "table_after": list(scheduler.dynamic_sd_lookup),
        "ks_seen_at_batch_1": ks_seen,
        "hook_errors": state.recorder.hook_errors,
        "steps": sum(1 for r in sink.rows if r["request_id"] is None),
    }
    hooks.uninstall()
    return result


if __name__ == "__main__":
    result = main(Path(sys.argv[1]))
    print("RESULT " + json.dumps(result))
    sys.stdout.flush()
    os._exit(0)
