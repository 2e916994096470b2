"""Record a real vLLM server log and Prometheus scrapes with speculative decoding.

Usage:
  python make_models.py MODELS
  python record.py --models MODELS --out OUT_DIR --method ngram --k 3

Starts the vLLM OpenAI server on MODELS/target (working directory MODELS, so the log shows
relative model paths), sends greedy completion requests at a few concurrency levels, scrapes
/metrics while it runs, then stops the server. Writes, under OUT_DIR:
  vllm-cpu-<method>-k<k>.log          the server's stdout+stderr, verbatim
  vllm-cpu-<method>-k<k>.metrics.txt  the /metrics scrapes, each after a "# ---- scrape" comment
      naming its phase: start, concurrency-N (periodic, during load), after-concurrency-N
      (once that level's requests are done and a stats interval has passed), idle, end

Run it with the Python that has vLLM installed (vllm-cpu on a CPU machine).
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

# Prompts with repetition, so that n-gram lookup finds matches in the prompt.
PROMPTS = [
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick",
    "Speculative decoding lets a small draft propose several tokens. Speculative decoding lets a small",
    "batch size one, batch size two, batch size four, batch size eight, batch size",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "The target model checks the draft. The target model accepts the draft. The target model",
    "0123456789 0123456789 0123456789 01234",
    "A serving engine batches many requests together. A serving engine",
    "acceptance rate, acceptance length, acceptance rate, acceptance length, acceptance",
    "When the draft guesses well, the target accepts many tokens per step.",
    "Operators watch the acceptance rate and the mean acceptance length.",
    "[1, 2, 3], [1, 2, 3], [1, 2, 3], [1, 2",
    "The n-gram method needs no draft model at all: it looks for the last few tokens earlier.",
]


def spec_config(method: str, k: int) -> dict:
    if method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 2, "prompt_lookup_max": 3}
    if method == "draft":
        return {"method": "draft_model", "model": "draft", "num_speculative_tokens": k}
    if method == "eagle":
        return {"method": "eagle", "model": "eagle", "num_speculative_tokens": k}
    raise ValueError(method)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 10) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def complete(base: str, model: str, i: int, max_tokens: int) -> int:
    body = {
        "model": model,
        "prompt": PROMPTS[i % len(PROMPTS)],
        "temperature": 0.0,
        # vary lengths so requests finish at different times and batch sizes change
        "max_tokens": max_tokens // 2 + (i * 37) % (max_tokens // 2 + 1),
        "ignore_eos": True,
    }
    req = urllib.request.Request(
        base + "/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)["usage"]["completion_tokens"]


class Scraper:
    """Appends /metrics scrapes to a file, each after a "# ---- scrape" comment line."""

    def __init__(self, base: str, file) -> None:
        self.base, self.file, self.count, self.phase = base, file, 0, "idle"
        self.lock = threading.Lock()

    def scrape(self, label: str = "") -> None:
        with self.lock:
            text = get(self.base + "/metrics")
            self.count += 1
            now = datetime.now(UTC)
            self.file.write(
                f"# ---- scrape {self.count} at {now.isoformat(timespec='milliseconds')}"
                f" (unix {now.timestamp():.3f}) phase={label or self.phase} ----\n{text}"
            )
            if not text.endswith("\n"):
                self.file.write("\n")
            self.file.flush()

    def every(self, seconds: float, stop: threading.Event) -> None:
        while not stop.wait(seconds):
            self.scrape()


def run_level(base: str, model: str, ids: list[int], clients: int, max_tokens: int) -> int:
    """Closed loop: `clients` threads, each sending its share of `ids` one after another."""
    tokens, lock = [0], threading.Lock()

    def client(my_ids: list[int]) -> None:
        for i in my_ids:
            n = complete(base, model, i, max_tokens)
            with lock:
                tokens[0] += n

    threads = [threading.Thread(target=client, args=(ids[c::clients],)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return tokens[0]


def wait_healthy(base: str, server: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if server.poll() is not None:
            sys.exit(f"server exited with {server.returncode}; see the log")
        try:
            get(base + "/health", timeout=2)
            return
        except OSError:
            time.sleep(1)
    sys.exit(f"server did not become healthy in {timeout:.0f} s")


def stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        server.send_signal(signal.SIGINT)  # the API server stops its engine processes
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", required=True, help="folder written by make_models.py")
    ap.add_argument("--out", required=True, help="folder for the .log and .metrics.txt")
    ap.add_argument("--method", choices=["ngram", "draft", "eagle"], required=True)
    ap.add_argument("--k", type=int, default=3, help="num_speculative_tokens")
    ap.add_argument(
        "--levels", default="1,2,4,8,12", help="concurrency levels, in order (above max_num_seqs=8 requests queue)"
    )
    ap.add_argument("--rounds", type=int, default=6, help="requests per client per level")
    ap.add_argument("--max-tokens", type=int, default=192, help="requests ask for max_tokens/2 .. max_tokens tokens")
    ap.add_argument("--log-interval", default="2", help="VLLM_LOG_STATS_INTERVAL, seconds")
    ap.add_argument("--scrape-every", type=float, default=10.0, help="seconds between scrapes")
    ap.add_argument("--port", type=int, default=0, help="0: pick a free port")
    a = ap.parse_args()

    models, out = Path(a.models).resolve(), Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    stem = f"vllm-cpu-{a.method}-k{a.k}"
    port = a.port or free_port()
    base, model = f"http://127.0.0.1:{port}", "tiny-llama"
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "target",
        "--served-model-name",
        model,
        "--speculative-config",
        json.dumps(spec_config(a.method, a.k)),
        "--dtype",
        "float32",
        "--enforce-eager",
        "--gpu-memory-utilization",
        "0.3",
        "--max-model-len",
        "512",
        "--max-num-seqs",
        "8",
        "--seed",
        "0",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", PYTHONUNBUFFERED="1", VLLM_LOG_STATS_INTERVAL=a.log_interval)
    print(
        "cwd:",
        models,
        "\nenv: VLLM_CPU_KVCACHE_SPACE=1 VLLM_LOG_STATS_INTERVAL=" + a.log_interval + "\ncmd:",
        subprocess.list2cmdline(cmd[1:]),
        flush=True,
    )

    interval = float(a.log_interval)
    log_path, metrics_path = out / f"{stem}.log", out / f"{stem}.metrics.txt"
    with open(log_path, "wb") as log, open(metrics_path, "w") as metrics:
        server = subprocess.Popen(
            cmd, cwd=models, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        scraper = Scraper(base, metrics)
        try:
            wait_healthy(base, server)
            print("server up", flush=True)
            scraper.scrape("start")
            done = threading.Event()
            periodic = threading.Thread(target=scraper.every, args=(a.scrape_every, done), daemon=True)
            periodic.start()
            first = 0
            for level in [int(x) for x in a.levels.split(",")]:
                ids = list(range(first, first + level * a.rounds))
                first += len(ids)
                scraper.phase = f"concurrency-{level}"
                t0 = time.time()
                tokens = run_level(base, model, ids, level, a.max_tokens)
                print(
                    f"concurrency {level}: {len(ids)} requests, {tokens} tokens, {time.time() - t0:.1f} s", flush=True
                )
                scraper.phase = "idle"
                time.sleep(interval + 1)  # let a stats interval close between levels
                # boundary scrape: counter deltas between these give exact per-level totals
                scraper.scrape(f"after-concurrency-{level}")
            done.set()
            periodic.join()
            time.sleep(interval * 2 + 1)  # final stats lines
            scraper.scrape("end")
        finally:
            stop(server)
    print(f"wrote {log_path} and {metrics_path} ({scraper.count} scrapes)")


if __name__ == "__main__":
    main()
