"""Acceptance breaks: how often each scenario gives exactly its finding, how often noise gives
one, and what the analysis costs on 10M steps.

    python benchmarks/bench_breaks.py [--seeds 10] [--no-write]

1. The scenarios of tests/support/break_scenarios.py, each drawn with ``--seeds`` seeds: the
   share of draws whose report has exactly the expected breaking finding (target: all), and
   for noise alone (six hours, then a restart with nothing changed) the share with any
   breaking finding (target: none).
2. Cost on benchmarks/data/steps-10000000.parquet (made by bench_ingest.py): ``resume_sums`` as
   the file is (no K=0 step) and with K=0 stretches in every run (60 of every 400 steps),
   ``run_states`` on its cells, and the whole ``specobs report`` (wall time and peak RSS).
Appends the results to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
from results import machine, publish

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from support import break_scenarios as scenarios  # noqa: E402

import specobs  # noqa: E402
from specobs.render.sentences import report_findings  # noqa: E402

BREAKING = {"fall", "rise", "collapse", "stale_after_off", "drift", "regression", "improvement"}
EXPECTED = {
    "backend_change": ["fall"], "collapse": ["collapse"], "slide": ["drift"], "stale_after_off": ["stale_after_off"],
    "restart_alone": ["fall"], "version_change": [], "noise": [],
}  # fmt: skip
STEPS = HERE / "data" / "steps-10000000.parquet"


def breaking(folder: Path) -> list[str]:
    report = specobs.analyze(specobs.load(str(folder)))
    return [f.kind for f in report_findings(report) if f.kind in BREAKING]


def detection(seeds: int) -> list[str]:
    lines = ["| scenario | expected | exactly that | other outcomes |", "|---|---|---:|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for name, expected in EXPECTED.items():
            hits, others = 0, {}
            for seed in range(seeds):
                got = breaking(scenarios.SCENARIOS[name](Path(tmp) / f"{name}-{seed}", 10_000 + seed))
                if got == expected:
                    hits += 1
                else:
                    others[", ".join(got) or "nothing"] = others.get(", ".join(got) or "nothing", 0) + 1
            other = "; ".join(f"{k} ×{v}" for k, v in others.items()) or "–"
            lines.append(f"| {name} | {', '.join(expected) or 'nothing'} | {hits}/{seeds} | {other} |")
            print(lines[-1], flush=True)
    return lines


def timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def cost() -> list[str]:
    from specobs.analysis.breaks import resume_sums, run_states
    from specobs.analysis.cost import steady_state, step_cells

    if not STEPS.exists():
        return [f"(no {STEPS.name}: run benchmarks/bench_ingest.py first)"]
    frame = steady_state(specobs.load(str(STEPS)).windows).collect()
    off = pl.int_range(pl.len()) % 400 < 60
    with_off = frame.with_columns(
        num_spec_tokens=pl.when(off).then(0).otherwise(pl.col("num_spec_tokens")),
        num_drafts=pl.when(off).then(0).otherwise(pl.col("num_drafts")),
    )
    _, plain = timed(resume_sums, frame)
    resumes, stretched = timed(resume_sums, with_off)
    cells = step_cells(frame)
    _, states = timed(run_states, cells)
    del frame, with_off, cells
    start = time.perf_counter()
    child = subprocess.run([sys.executable, "-m", "specobs.cli", "report", str(STEPS), "-f", "json"],
                           capture_output=True, check=True)  # fmt: skip
    wall = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    assert child.stdout
    return [
        "| on 10,000,000 steps | seconds |",
        "|---|---:|",
        f"| `resume_sums`, no K=0 step | {plain:.3f} |",
        f"| `resume_sums`, K=0 for 60 of every 400 steps ({resumes.height:,} resumes) | {stretched:.2f} |",
        f"| `run_states` from the report's cells | {states:.3f} |",
        f"| `specobs report -f json` (whole, peak RSS {rss:,.0f} MiB) | {wall:.2f} |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    lines = [
        f"## {dt.date.today()} — acceptance breaks (drift, restarts, collapse, stale after K=0)", "", machine(), "",
        f"Detection, {args.seeds} draws per scenario (tests/support/break_scenarios.py):", "",
    ]  # fmt: skip
    lines += detection(args.seeds)
    lines += ["", "Cost:", "", *cost()]
    publish(lines, write=not args.no_write)


if __name__ == "__main__":
    main()
